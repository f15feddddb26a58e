"""What the server holds between requests: the index (swappable), the embedder (serialised and
batched), the LLM (under a concurrency cap) and the background writer.

Each request takes the index once (:meth:`IndexHolder.get`) and works on that object to the end.
A write builds and publishes a new object with :meth:`IndexHolder.publish`; requests already
running keep the generation they started with, and later requests see the new one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import PsiragError

MAX_BATCH = 64
"""Most queries embedded in one call of the model."""


@dataclass(frozen=True)
class Generation:
    """One published index object and its number (1 for the index loaded at start-up)."""

    number: int
    index: Any


class IndexHolder:
    """An atomically swapped reference to the index being served."""

    def __init__(self, index: Any, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._current = Generation(1, index)

    def get(self) -> Generation:
        """The generation a request works on (a single attribute read: never half-swapped)."""
        return self._current

    def publish(self, index: Any) -> Generation:
        """Make ``index`` the one new requests get; running requests keep theirs."""
        with self._lock:
            self._current = Generation(self._current.number + 1, index)
            return self._current


class BatchingEmbedder:
    """The index's embedder behind one worker thread: concurrent queries are embedded in one
    batch, so the model is never called from two threads at once (sentence-transformers does not
    promise thread safety) and a burst costs one forward pass instead of one per query."""

    def __init__(self, inner: Any, max_batch: int = MAX_BATCH) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.id = inner.id
        self.max_tokens = getattr(inner, "max_tokens", None)
        self.last_truncated = 0
        self.max_batch = max_batch
        self.batches = 0
        self.embedded = 0
        self._queue: queue.Queue[tuple[list[str], Future[np.ndarray]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="psirag-embed", daemon=True)
        self._thread.start()

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def count_truncated(self, texts: Sequence[str]) -> int:
        return int(self.inner.count_truncated(texts))

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        future: Future[np.ndarray] = Future()
        self._queue.put((list(texts), future))
        return future.result()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            pending = [item]
            size = len(item[0])
            while size < self.max_batch:  # take whatever else is already waiting
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                pending.append(more)
                size += len(more[0])
            texts = [t for texts_, _ in pending for t in texts_]
            try:
                vectors = np.asarray(self.inner.embed(texts))
            except BaseException as exc:  # handed to every waiting request
                for _, future in pending:
                    future.set_exception(exc)
                continue
            self.batches += 1
            self.embedded += len(texts)
            start = 0
            for texts_, future in pending:
                future.set_result(vectors[start : start + len(texts_)])
                start += len(texts_)


class LLMNotConfiguredError(PsiragError):
    """An endpoint needs an LLM and the server was started without ``--llm``."""


class GatedLLM:
    """An LLM client whose calls from all requests together stay under ``limit`` at a time."""

    def __init__(self, client: Any, limit: int) -> None:
        self.client = client
        self.limit = limit
        self._gate = threading.BoundedSemaphore(limit)

    @property
    def id(self) -> str:
        return str(self.client.id)

    @property
    def context_tokens(self) -> int:
        return int(self.client.context_tokens)

    def count_tokens(self, text: str) -> int:
        return int(self.client.count_tokens(text))

    def chat(self, messages: list[Any], params: Any, stage: str = "agent") -> Any:
        with self._gate:
            return self.client.chat(messages, params, stage=stage)

    @property
    def usage(self) -> dict[str, dict[str, float]]:
        return dict(self.client.usage)

    def close(self) -> None:
        self.client.close()


__all__ = [
    "BatchingEmbedder",
    "GatedLLM",
    "Generation",
    "IndexHolder",
    "LLMNotConfiguredError",
]
