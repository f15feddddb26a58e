"""The server's query embedding: concurrent queries embedded together by one worker thread
(:class:`BatchingEmbedder`, a micro-batch), recent query vectors kept in an LRU
(:class:`QueryVectorCache`), and :func:`prepare_index`, which puts an index behind them."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag.server.read_ahead import ADD_FIRST_THREADS, READ_AHEAD_SHARE, read_ahead

if TYPE_CHECKING:
    from psirag.embed import Embedder
    from psirag.index import Index
    from psirag.index_data import IndexData

log = logging.getLogger("psirag.server")

MAX_BATCH = 64
"""Most queries embedded in one call of the model."""
MAX_WAIT_S = 0.004
"""Longest a micro-batch waits for callers already inside ``embed`` (never for a lone query)."""
QUERY_CACHE_SIZE = 4096
"""Query vectors kept (384 float32 each for MiniLM: about 6 MB)."""


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


def prepare_index(index: Index) -> Index:
    """Put the embedder behind the batching worker and embed a query once, so the first
    request is not the slow one; then :func:`warm_up` the index on a background thread (a
    search needs none of what it makes, and a write publishes without waiting for it)."""
    inner = index.embedder
    if not isinstance(inner, BatchingEmbedder):
        index.embedder = BatchingEmbedder(inner)
    index.embed_query("warm up")
    _warming[0] = index.data
    _warm_times.update(started=time.time(), seconds=None)
    _warm_state["read_ahead"] = None
    _warm_state["add_first"] = None
    _warm_state["writer"] = None
    threading.Thread(target=warm_up, args=(index.data,), name="psirag-warm-up", daemon=True).start()
    return index


def configure_warm_up(*, read_ahead_share: float) -> None:
    """The share of the available memory a warm-up may read into the page cache (see
    :mod:`psirag.server.read_ahead`; 0: none), for the warm-ups started after this call."""
    _warm_state["share"] = max(0.0, float(read_ahead_share))


def stop_warm_ups() -> None:
    """Stop the running warm-ups' reads ahead, between two buffers (a server that stops)."""
    _stop[0].set()


def _stopping() -> threading.Event:
    """The event :func:`stop_warm_ups` sets; a fresh one once it has been set (a server
    started again in the same process, as tests do)."""
    if _stop[0].is_set():
        _stop[0] = threading.Event()
    return _stop[0]


_warming: list[IndexData | None] = [None]
"""The data the last :func:`prepare_index` warms up: an older one's warm-up stops early."""

_warm_times: dict[str, float | None] = {"started": None, "seconds": None}
"""When the last :func:`prepare_index`'s warm-up started (epoch seconds) and how long it
took (None: still running, or none started)."""

_warm_state: dict[str, Any] = {
    "share": READ_AHEAD_SHARE,
    "read_ahead": None,
    "add_first": None,
    "writer": None,
}
"""The read-ahead bound (:func:`configure_warm_up`) and what the last warm-up read ahead (the
add's files first, then the rest)."""

_stop: list[threading.Event] = [threading.Event()]
"""Set by :func:`stop_warm_ups`."""


def warm_up_finished(data: IndexData) -> bool | None:
    """Whether the warm-up of ``data`` is done; None when the last one started was another
    index's (``data`` is no longer the one served)."""
    if _warming[0] is not data:
        return None
    return _warm_times["seconds"] is not None


def record_writer_warm_up(data: IndexData, done: dict[str, Any]) -> None:
    """Keep what the writer's rehearsal did (``GET /index``'s ``warm_up.writer``), if ``data``
    is still the index whose warm-up was last started."""
    if _warming[0] is data:
        _warm_state["writer"] = done


def warm_up_status() -> dict[str, Any]:
    """The last warm-up, for ``GET /index``: ``done`` and its ``seconds`` (a write that comes
    while it runs waits for what it is still making, such as the phrase table and its
    counts)."""
    seconds = _warm_times["seconds"]
    out: dict[str, Any] = {"done": seconds is not None, "seconds": seconds}
    if _warm_state.get("writer") is not None:  # the writer's rehearsal of an add
        out["writer"] = _warm_state["writer"]
    read = _warm_state["read_ahead"]
    if read is not None:  # the mapped files read into the page cache (see read_ahead)
        first = _warm_state.get("add_first") or {}
        files = [*first.get("files", []), *read["files"]]
        out["read_ahead"] = {
            **read,
            "files": len(files),
            "read": files,  # gone through: read, or found wholly in the page cache
            "resident": [*first.get("resident", []), *read["resident"]],
            "bytes": first.get("bytes", 0) + read["bytes"],
            "resident_bytes": first.get("resident_bytes", 0) + read["resident_bytes"],
        }
        if first:  # the add's files, read first on their own thread (see read_ahead)
            out["read_ahead"]["add_first"] = {**first, "files": len(first["files"])}
    return out


def warm_up(data: IndexData) -> None:
    """Make what a loaded index defers: what the first update reads (the document keys, the
    keyword phrase table a load leaves unread and its saved corpus counts), so the first
    ``POST /documents`` after a start costs what a later one does, then the tree's small
    tables (fan-out, roots, leaf counts: the tree views read them), unless newer data is
    being served by then. Errors are left to the request or write that needs the value (it
    raises them again)."""
    t0 = time.perf_counter()
    first = _read_add_first(data)
    try:
        _ = data.document_index
        table = data.phrase_table
        if table is not None:  # its saved counts, which the first add would check and restore
            table.restore_saved_counts()
        tree = data.tree
        _ = (tree.fan_out, tree.roots)
        if _warming[0] is data:
            _ = tree.leaf_counts
            _warm_write_path(data, first)
        # not the whole leaf membership: 8 s of CPU per published generation at 1M chunks,
        # competing with the next write; the views read a node's leaves from its subtree
    except Exception as exc:  # the value's own user reports it
        log.debug("warming the index up failed: %s", exc)
    finally:
        if first is not None:
            first.join()
        if _warming[0] is data:
            _warm_times["seconds"] = round(time.perf_counter() - t0, 3)


def _read_add_first(data: IndexData) -> threading.Thread | None:
    """Start reading the files a one-document add reads into the page cache, on threads of
    their own (:data:`~psirag.server.read_ahead.ADD_FIRST_THREADS` files at once), beside the
    rest of the warm-up (an add sent right after a start then finds them read or being read;
    these reads go on while it runs); the thread that runs them, or None when there is nothing
    to read ahead."""
    if data.origin is None or _warm_state["share"] <= 0 or _warming[0] is not data:
        return None
    folder, share, stop = data.origin.folder, _warm_state["share"], _stopping()
    _warm_state["add_first"] = None

    def run() -> None:
        try:
            graph = data.leaf_graph
            if graph is not None:  # its saved view maps the file (opened once, under a lock)
                _ = graph.graph
            done = read_ahead(
                folder, share=share, stop=stop, add_first=True, threads=ADD_FIRST_THREADS
            )
        except Exception as exc:  # the add reads its pages itself
            log.debug("reading the add's files ahead failed: %s", exc)
            return
        if _warming[0] is data:
            _warm_state["add_first"] = done

    thread = threading.Thread(target=run, name="psirag-read-ahead", daemon=True)
    thread.start()
    return thread


def _warm_write_path(data: IndexData, first: threading.Thread | None = None) -> None:
    """What the first write after a start would pay on its request: the update's modules
    (0.2-0.4 s of imports: :mod:`psirag.living` and the tree builders it loads, the keyword
    abstracts), the leaf graph's saved view the insertion searches, the children table the
    insertion reads, the served generation's mapped files read once into the page cache (the
    phrase arrays the abstracts gather from, the node vectors, the graph, the BM25 parts: see
    :mod:`psirag.server.read_ahead`), and the pages of the inner nodes' vectors, which every
    update copies (one read per page of the memory map: the pages stay in the page cache, the
    process holds no copy)."""
    import importlib

    for name in ("psirag.living", "psirag.abstracts.keywords"):
        importlib.import_module(name)
    graph = data.leaf_graph
    if graph is not None:  # a saved graph's view, opened once (0.3-0.4 s at 1M chunks)
        _ = graph.graph
    tree = data.tree
    _ = tree.children_table
    if data.origin is not None and _warm_state["share"] > 0:
        # every file the write path maps, read once into the page cache: the first add's
        # gathers at random rows then fault no page from disk (read_ahead says why)
        stop = _stopping()
        if first is not None:  # the add's files first: what is left after them
            first.join()
        done = read_ahead(data.origin.folder, share=_warm_state["share"], stop=stop)
        if _warming[0] is data:
            _warm_state["read_ahead"] = done
    from psirag.vector_rows import RowStack

    inner = data.vector_rows()[tree.n_leaves :]
    # a load after updates reads them in place, as runs of the saved segments' rows
    for part in inner.parts if isinstance(inner, RowStack) else (inner,):
        if isinstance(part, np.ndarray) and not part.flags.writeable and part.flags.c_contiguous:
            flat = part.reshape(-1)
            step = max(1, 4096 // flat.itemsize)
            float(flat[::step].sum())  # one value per page: the page faults, not a copy


__all__ = [
    "MAX_BATCH",
    "MAX_WAIT_S",
    "QUERY_CACHE_SIZE",
    "BatchingEmbedder",
    "QueryVectorCache",
    "configure_warm_up",
    "prepare_index",
    "stop_warm_ups",
    "warm_up",
    "warm_up_status",
]
