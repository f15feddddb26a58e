"""Chat with a GGUF model in-process through llama-cpp-python (the ``psirag[local]`` extra).

No server to start and nothing downloaded: the model is a local file. One ``Llama`` object is not
safe to use from several threads, so calls are serialised by a lock; concurrency would not help on
a CPU anyway, where one call already uses every thread.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from psirag.errors import InputError
from psirag.llm.base import ChatResult, GenerationParams, Message, TokenSink
from psirag.llm.errors import LLMBackendMissingError, LLMError, LLMResponseError

INSTALL_HINT = "pip install 'psirag[local]'"


def default_threads() -> int:
    """Every core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def import_llama_cpp() -> Any:
    """Import llama_cpp or say how to install it.

    llama.cpp's CPU backend uses OpenMP, whose threads spin while they wait by default. On a
    small machine shared with other work that spinning starves the threads doing the work:
    measured on 2 busy cores, prompt evaluation fell from ~35 to ~10 tokens/s and generation to
    0.5 tokens/s. Passive waiting was never slower in our runs, so it is the
    default here (set before the library loads; an explicit ``OMP_WAIT_POLICY`` wins).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp
    except ImportError as exc:
        raise LLMBackendMissingError(
            f"the local LLM backend needs llama-cpp-python, which is not installed ({exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from None
    return llama_cpp


class LlamaCppChat:
    """A GGUF chat model run by llama.cpp in this process (``n_threads=None``: every core).

    ``id`` names the weights by file name and size, not by where they lie, so a model file that
    moves keeps its response cache, and a different file of the same name does not reuse it.
    """

    def __init__(
        self,
        model_path: str | Path,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        *,
        seed: int = 0,
        verbose: bool = False,
    ) -> None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise InputError(f"no GGUF model file at {path}")
        llama_cpp = import_llama_cpp()
        self.model_path = path
        self.context_tokens = int(n_ctx)
        self.n_threads = n_threads or default_threads()
        self.id = f"llamacpp:{path.name}#{path.stat().st_size}"
        self._lock = threading.Lock()
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=self.context_tokens,
                n_threads=self.n_threads,
                seed=seed,
                verbose=verbose,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise LLMError(f"llama.cpp could not load {path}: {exc}") from None

    def __repr__(self) -> str:
        return f"LlamaCppChat({str(self.model_path)!r}, n_ctx={self.context_tokens})"

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the model's own tokenizer (no BOS, specials as plain text)."""
        with self._lock:
            return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def chat(self, messages: list[Message], params: GenerationParams) -> ChatResult:
        try:
            with self._lock:
                response = self._llm.create_chat_completion(
                    messages=messages,
                    temperature=params.temperature,
                    max_tokens=params.max_tokens,
                    repeat_penalty=params.repeat_penalty,
                    stop=list(params.stop) or None,
                )
        except ValueError as exc:
            # llama.cpp raises ValueError when the prompt does not fit n_ctx: retrying cannot help.
            raise LLMError(
                f"llama.cpp refused the request for {self.model_path.name} "
                f"(context {self.context_tokens} tokens): {exc}"
            ) from None
        try:
            choice = response["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise LLMResponseError(
                "llama.cpp returned a completion without choices[0].message.content"
            ) from None
        usage = response.get("usage") or {}
        return ChatResult(
            text=content or "",
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
        )

    def chat_stream(
        self, messages: list[Message], params: GenerationParams, on_token: TokenSink
    ) -> ChatResult:
        """:meth:`chat` with each generated piece passed to ``on_token`` as llama.cpp makes it
        (the same sampling, so the same reply)."""
        parts: list[str] = []
        finish: str | None = None
        try:
            with self._lock:
                chunks = self._llm.create_chat_completion(
                    messages=messages,
                    temperature=params.temperature,
                    max_tokens=params.max_tokens,
                    repeat_penalty=params.repeat_penalty,
                    stop=list(params.stop) or None,
                    stream=True,
                )
                for chunk in chunks:
                    choice = (chunk.get("choices") or [{}])[0]
                    text = (choice.get("delta") or {}).get("content")
                    if isinstance(text, str) and text:
                        parts.append(text)
                        on_token(text)
                    finish = choice.get("finish_reason") or finish
        except ValueError as exc:
            raise LLMError(
                f"llama.cpp refused the request for {self.model_path.name} "
                f"(context {self.context_tokens} tokens): {exc}"
            ) from None
        # A stream reports no usage: the reply's tokens are counted; the prompt's are not.
        text = "".join(parts)
        return ChatResult(text=text, completion_tokens=len(parts), finish_reason=finish)


__all__ = ["INSTALL_HINT", "LlamaCppChat", "default_threads", "import_llama_cpp"]
