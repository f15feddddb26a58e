"""What the server holds between requests: the index (swappable), the embedder (serialised and
batched), the LLM (under a concurrency cap) and the background writer, together in one
:class:`ServerState` that the routes get through :mod:`psirag.server.deps`.

Each request takes the index once (:meth:`IndexHolder.get`) and works on that object to the end.
A write builds and publishes a new object with :meth:`IndexHolder.publish`; requests already
running keep the generation they started with, and later requests see the new one.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from psirag import cancel
from psirag.errors import InputError
from psirag.server.admission import AskPool
from psirag.server.errors import LLMNotConfiguredError, PayloadTooLargeError, RequestTimeoutError
from psirag.server.jobs import JobRunner
from psirag.server.settings import ServerSettings

if TYPE_CHECKING:
    from starlette.requests import Request

    from psirag.embed import Embedder
    from psirag.hops import HopPredictor
    from psirag.index import Index
    from psirag.llm.client import LLMClient

T = TypeVar("T")

MAX_BATCH = 64
"""Most queries embedded in one call of the model."""
MAX_WAIT_S = 0.004
"""Longest a micro-batch waits for callers already inside ``embed`` (never for a lone query)."""
QUERY_CACHE_SIZE = 4096
"""Query vectors kept (384 float32 each for MiniLM: about 6 MB)."""


@dataclass(frozen=True)
class Generation:
    """One published index object and its number (1 for the index loaded at start-up)."""

    number: int
    index: Index
    boot: str = ""
    """A token of this server process: numbers restart at 1, so an ETag names both."""

    @property
    def etag(self) -> str:
        """The HTTP entity tag of everything read from this generation."""
        return f'"g{self.number}-{self.boot}"'


class IndexHolder:
    """An atomically swapped reference to the index being served."""

    def __init__(self, index: Index, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self.boot = secrets.token_hex(4)
        self._current = Generation(1, index, self.boot)
        self.loads = 1
        """Times this process read the index from disk: 1 at start-up, one more for each
        write that found another process's generation on disk (a write on the served
        generation changes it in memory)."""

    def count_load(self) -> None:
        with self._lock:
            self.loads += 1

    def get(self) -> Generation:
        """The generation a request works on (a single attribute read: never half-swapped)."""
        return self._current

    def publish(self, index: Index) -> Generation:
        """Make ``index`` the one new requests get; running requests keep theirs."""
        with self._lock:
            self._current = Generation(self._current.number + 1, index, self.boot)
            return self._current


class QueryVectorCache:
    """A bounded LRU of query text -> vector, shared by all requests (a lock guards it).

    Queries repeat (the same question from several users, a page reloaded, an agent retrying):
    a hit costs a dictionary lookup instead of a forward pass. The vectors are read-only copies,
    so no caller can change what another one gets.
    """

    def __init__(self, capacity: int = QUERY_CACHE_SIZE) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> np.ndarray | None:
        with self._lock:
            vector = self._items.get(text)
            if vector is None:
                self.misses += 1
                return None
            self._items.move_to_end(text)
            self.hits += 1
            return vector

    def put(self, text: str, vector: np.ndarray) -> None:
        if self.capacity <= 0:
            return
        kept = np.array(vector, dtype=np.float32)
        kept.setflags(write=False)
        with self._lock:
            self._items[text] = kept
            self._items.move_to_end(text)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class BatchingEmbedder:
    """The index's embedder behind one worker thread: concurrent queries are embedded in one
    batch, so the model is never called from two threads at once (sentence-transformers does not
    promise thread safety) and a burst costs one forward pass instead of one per query.

    The micro-batch: the worker takes the first waiting request at once and everything already
    queued behind it; when more callers are known to be on their way (counted as they enter
    :meth:`embed`), it waits up to ``max_wait`` seconds (a few ms) for them, flushing early at
    ``max_batch`` texts. A lone query never waits. Vectors of recent queries come from a
    :class:`QueryVectorCache` without reaching the model."""

    def __init__(
        self,
        inner: Embedder,
        max_batch: int = MAX_BATCH,
        *,
        max_wait: float = MAX_WAIT_S,
        cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.id = inner.id
        self.max_tokens = getattr(inner, "max_tokens", None)
        self.last_truncated = 0
        self.max_batch = max_batch
        self.max_wait = max_wait
        self.cache = QueryVectorCache(cache_size)
        self.batches = 0
        self.embedded = 0
        self._arriving = 0
        self._arriving_lock = threading.Lock()
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
        texts = [str(t) for t in texts]
        cached = [self.cache.get(t) for t in texts]
        missing = [t for t, v in zip(texts, cached, strict=True) if v is None]
        if missing:
            with self._arriving_lock:
                self._arriving += 1
            future: Future[np.ndarray] = Future()
            self._queue.put((missing, future))
            fresh = iter(future.result())
        rows = []
        for text, vector in zip(texts, cached, strict=True):
            if vector is None:
                vector = next(fresh)
                self.cache.put(text, vector)
            rows.append(vector)
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _take(self, pending: list[tuple[list[str], Future[np.ndarray]]], timeout: float) -> bool:
        """Append one queued request (waiting up to ``timeout``); False when none or closing."""
        try:
            more = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return False
        if more is None:
            self._queue.put(None)
            return False
        pending.append(more)
        return True

    def _gather(self, first: tuple[list[str], Future[np.ndarray]]) -> list[Any]:
        pending = [first]
        deadline = time.monotonic() + self.max_wait
        while sum(len(t) for t, _ in pending) < self.max_batch:
            if self._take(pending, 0):
                continue  # whatever is already queued joins at once
            with self._arriving_lock:
                coming = self._arriving > len(pending)
            left = deadline - time.monotonic()
            if not coming or left <= 0 or not self._take(pending, left):
                break
        with self._arriving_lock:
            self._arriving -= len(pending)
        return pending

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            pending = self._gather(item)
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
        """One call, once a place under the cap is free; a cancelled ask (psirag.cancel)
        starts none, and gives up its wait for a place."""
        token = cancel.current()
        if token is None:
            with self._gate:
                return self.client.chat(messages, params, stage=stage)
        while not self._gate.acquire(timeout=0.2):
            token.check()
        try:
            token.check()
            return self.client.chat(messages, params, stage=stage)
        finally:
            self._gate.release()

    def chat_stream(
        self, messages: list[Any], params: Any, on_token: Any, stage: str = "agent"
    ) -> Any:
        with self._gate:
            return self.client.chat_stream(messages, params, on_token, stage=stage)

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
    asks: AskPool = field(init=False, repr=False)
    _hops: HopPredictor | None = field(default=None, repr=False)
    _hop_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.asks = AskPool(self.settings.max_asks, self.settings.ask_queue)

    async def llm_work(self, fn: Callable[[], T], request: Request | None = None) -> T:
        """``fn`` (LLM work: an agent run, a summary) in the ask pool under the per-request
        deadline: 503 when the pool is full, cancelled when the client goes away."""
        admission = self.asks.admit()
        try:
            return await admission.run(fn, timeout=self.settings.request_timeout, request=request)
        finally:
            admission.close()

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
