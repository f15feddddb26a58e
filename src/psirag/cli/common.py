"""What several commands do the same way: print to stderr, open the LLM client an option names,
load an index for queries with the embedder the user confirmed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psirag.cli.options import LLM_ENV, http_policy_from

if TYPE_CHECKING:
    from psirag.config import IndexConfig
    from psirag.http import HttpPolicy
    from psirag.index import Index
    from psirag.llm import LLMClient


def eprint(*parts: object) -> None:
    print(*parts, file=sys.stderr, flush=True)


def abstract_llm(config: IndexConfig, cache: str | None, http: HttpPolicy) -> LLMClient | None:
    """The LLM client for LLM abstracts, with a persistent cache so a killed build resumes."""
    if not config.abstracts.startswith("llm-"):
        return None
    from psirag.errors import InputError
    from psirag.llm import LLMClient, load_chat_model

    if not config.llm:
        raise InputError(f"--abstracts {config.abstracts} needs --llm SPEC")
    path = Path(cache) if cache else Path.home() / ".cache" / "psirag" / "llm-cache.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    return LLMClient(load_chat_model(config.llm, http=http), cache_path=path)


def llm_spec(args: argparse.Namespace) -> str | None:
    """``--llm``, else ``$PSIRAG_LLM``, else None."""
    return args.llm or os.environ.get(LLM_ENV) or None


def answer_llm(args: argparse.Namespace, spec: str, **options: Any) -> LLMClient:
    """The client for ``spec`` under ``--timeout``/``--retries``, caching in ``--cache``."""
    from psirag.llm import LLMClient, load_chat_model

    return LLMClient(
        load_chat_model(spec, http=http_policy_from(args)), cache_path=args.cache, **options
    )


def load_query_index(args: argparse.Namespace, embedder: Any = None) -> Index:
    """The index at ``args.index``, with the query embedder the user confirmed (``--embedder``)
    under ``--timeout``, unless ``embedder`` is given here. The index layer is imported only
    when a command runs (it loads numpy, models, ...)."""
    from psirag.embed.endpoints import confirm_index_embedder, prefetch_index_embedder
    from psirag.index import Index

    if embedder is None and not args.embedder:
        prefetch_index_embedder(args.index)  # the model loads while the index does
    index = Index.load(args.index, embedder=embedder)
    if embedder is None:
        confirm_index_embedder(index, args.embedder, http_policy_from(args))
    return index


__all__ = ["abstract_llm", "answer_llm", "eprint", "llm_spec", "load_query_index"]
