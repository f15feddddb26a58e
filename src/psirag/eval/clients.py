"""The run's LLM client, in a module of its own: the harness (answers) and the methods (LLM
abstracts) both make it, and neither may import the other for it (an import cycle)."""

from __future__ import annotations

from pathlib import Path

from psirag.eval.settings import EvalSettings
from psirag.llm.base import ChatModel
from psirag.llm.client import LLMClient, as_client

LLM_CACHE_FILE = "llm-cache.sqlite"


def llm_client(settings: EvalSettings, llm: ChatModel | None) -> tuple[LLMClient | None, bool]:
    """The LLMClient every answer goes through (cached in the cache folder); owned: close it."""
    if llm is not None:
        return as_client(llm), False
    if settings.llm is None:
        return None, False
    from psirag.llm import load_chat_model

    cache_dir = Path(settings.cache_dir).expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = load_chat_model(settings.llm, http=settings.http)
    return LLMClient(model, cache_path=cache_dir / LLM_CACHE_FILE), True


__all__ = ["LLM_CACHE_FILE", "llm_client"]
