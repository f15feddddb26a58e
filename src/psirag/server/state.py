"""What the server holds between requests: the index (swappable), the embedder (serialised and
batched), the LLM (under a concurrency cap) and the background writer, together in one
:class:`ServerState` that the routes get through :mod:`psirag.server.deps`.

Each request takes the index once (:meth:`IndexHolder.get`) and works on that object to the end.
A write builds and publishes a new object with :meth:`IndexHolder.publish`; requests already
running keep the generation they started with, and later requests see the new one.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from psirag.errors import InputError
from psirag.server.errors import LLMNotConfiguredError, PayloadTooLargeError, RequestTimeoutError
from psirag.server.jobs import JobRunner
from psirag.server.settings import ServerSettings

if TYPE_CHECKING:
    from psirag.embed import Embedder
    from psirag.hops import HopPredictor
    from psirag.index import Index
    from psirag.llm.client import LLMClient

T = TypeVar("T")

MAX_BATCH = 64
"""Most queries embedded in one call of the model."""


@dataclass(frozen=True)
class Generation:
    """One published index object and its number (1 for the index loaded at start-up)."""

    number: int
    index: Index


class IndexHolder:
    """An atomically swapped reference to the index being served."""

    def __init__(self, index: Index, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._current = Generation(1, index)

    def get(self) -> Generation:
        """The generation a request works on (a single attribute read: never half-swapped)."""
        return self._current

    def publish(self, index: Index) -> Generation:
        """Make ``index`` the one new requests get; running requests keep theirs."""
        with self._lock:
            self._current = Generation(self._current.number + 1, index)
            return self._current


class BatchingEmbedder:
    """The index's embedder behind one worker thread: concurrent queries are embedded in one
    batch, so the model is never called from two threads at once (sentence-transformers does not
    promise thread safety) and a burst costs one forward pass instead of one per query."""

    def __init__(self, inner: Embedder, max_batch: int = MAX_BATCH) -> None:
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


class GatedLLM:
    """An LLM client whose calls from all requests together stay under ``limit`` at a time."""

    def __init__(self, client: LLMClient, limit: int) -> None:
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


@dataclass
class ServerState:
    """Everything the routes share. ``holder.get()`` is the one way a request takes the index."""

    holder: IndexHolder
    settings: ServerSettings
    llm: GatedLLM | None
    jobs: JobRunner
    started: float = field(default_factory=time.time)
    _hops: HopPredictor | None = field(default=None, repr=False)
    _hop_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def budget(self, question: str, asked: int | str | None) -> int:
        """Retrievals after the first for ``question``: the request's count, or the server's
        default; ``auto`` asks the shipped hop model (loaded on first use, then shared)."""
        wanted = self.settings.max_retrievals if asked is None else asked
        if wanted != "auto":
            return int(wanted)
        with self._hop_lock:
            if self._hops is None:
                from psirag.hops import HopPredictor

                self._hops = HopPredictor(self._hop_embedder())
            predictor = self._hops
        return predictor.max_retrievals(question)

    def _hop_embedder(self) -> Embedder | None:
        """The index's query embedder when it is the one the hop model was trained on (one
        MiniLM in memory, not two); None lets the predictor load its own."""
        from psirag.hops import load_hop_model

        embedder = self.holder.get().index.embedder  # a BatchingEmbedder keeps its model's id
        return embedder if getattr(embedder, "id", None) == load_hop_model().embedder else None

    def need_llm(self) -> GatedLLM:
        if self.llm is None:
            raise LLMNotConfiguredError(
                "this server has no LLM: start it with --llm SPEC (or $PSIRAG_LLM) to answer "
                "questions; /search works without one"
            )
        return self.llm

    def check_length(self, text: str, what: str = "query") -> None:
        if len(text) > self.settings.max_query_chars:
            raise PayloadTooLargeError(
                f"the {what} has {len(text):,} characters, over the limit of "
                f"{self.settings.max_query_chars:,} (psirag serve --max-query-chars)"
            )

    def check_query(self, query: str, what: str = "query") -> str:
        self.check_length(query, what)
        if not query.strip():
            raise InputError(f"the {what} is empty; give a question or some keywords")
        return query

    def check_k(self, k: int) -> None:
        if k > self.settings.max_k:
            raise InputError(f"k is {k}, over this server's limit of {self.settings.max_k}")

    async def blocking(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread under the per-request deadline."""
        import anyio
        import anyio.to_thread

        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"the request took longer than {timeout:g} s (psirag serve --request-timeout)"
            ) from exc


def prepare_index(index: Index) -> Index:
    """Put the embedder behind the batching worker and compute the tree's lazy tables once, so
    the first requests are not the slow ones and threads never race to fill a cache."""
    inner = index.embedder
    if not isinstance(inner, BatchingEmbedder):
        index.embedder = BatchingEmbedder(inner)
    index.embed_query("warm up")
    tree = index.tree
    _ = (tree.leaf_counts, tree.leaf_membership, tree.fan_out, tree.roots)
    return index


__all__ = [
    "BatchingEmbedder",
    "GatedLLM",
    "Generation",
    "IndexHolder",
    "LLMNotConfiguredError",
    "ServerState",
    "prepare_index",
]
