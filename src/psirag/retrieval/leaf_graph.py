"""An HNSW graph over an index's leaf vectors (usearch, ``psirag[hnsw]``): the dense list at
scale, built with the index, saved in its generation and changed by each add and remove.

Every leaf has a key; keys rise with the leaf ids (``keys[leaf]``), so a removal drops some
keys and an add appends larger ones, and the surviving leaves keep their keys. The graph stores
half-precision vectors (half the memory); the few candidates it returns are rescored exactly
from the index's float32 leaf vectors.

Log-structured, like the segment tables (:mod:`psirag.segments`): the saved graph file is an
immutable *base* that generations share by hard link, opened memory-mapped and read-only
(usearch's ``view``). An update does not touch it: the leaves it adds are a *delta* (on disk
just their keys; their vectors are in the leaf-vector segments) that a search scans exactly and
merges with the graph's hits, and the base keys it removes are *tombstones* filtered out of
them. When tombstones plus delta pass :func:`fold_limit` (5% of the leaves, at most
:data:`FOLD_MAX` leaves), the update folds them into a new base (written whole by the next
save), as ``psirag compact`` does. So a save writes the graph once per that many changed
leaves instead of on every update (BENCHMARKS.md, "HNSW graph as a base and a delta").

usearch is a binary wheel on PyPI (no compiler), but with its numkong dependency it adds about
56 MiB to an install (BENCHMARKS.md, "Tree against HNSW as a nearest-leaf index"), so it is an
extra: without it an index is built without a graph and searches as before.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import IndexFormatError, InputError

CONNECTIVITY = 16
"""Graph degree (HNSW's M)."""
EXPANSION_ADD = 64
"""Candidate list while inserting (HNSW's ef_construction). 64, not usearch's 128 nor the 100
used before session 42: the graph is the longest stage of a 1M build, and 64 costs 34% less
insertion CPU than 100 (200k hash vectors, this project's 2-core machine) for recall@10 at the
search's breadth 160 of 0.9958 against 0.9974 on 122k MiniLM vectors of real text (installed
packages' docstrings, 500 held-out queries) and 0.9917 against 0.9951 on 2Wiki, where psi's
Recall@5 is unchanged (BENCHMARKS.md, "The leaf graph's insertion breadth")."""
GRAPH_FILE = "graph.usearch"
"""The base graph (usearch's own format), shared by hard link while the base is unchanged."""
KEYS_FILE = "keys.npy"
"""The base's keys, ascending (saved and shared with it)."""
DEAD_FILE = "dead.npy"
"""Base keys removed since the base was made (absent: none)."""
DELTA_FILE = "delta.npy"
"""Keys of the leaves added since the base was made, the last leaves (absent: none)."""
BASE_FILES = (GRAPH_FILE, KEYS_FILE)
FOLD_FRACTION = 0.05
"""Tombstones plus delta leaves above this share of the leaves are folded into a new base."""
FOLD_MAX = 4096
"""...and never more than this many: the exact scan of 4,096 delta vectors (384-d float32,
6 MiB) costs about what one graph search at ef 64 costs on one core (0.5 ms), so a search
never pays more than twice the base's cost. A fold writes the whole graph (about 270 bytes a
leaf at 384-d): at 1M leaves once per 4,096 changed leaves, about 66 KB amortised per leaf."""
BUILD_BATCH = 8192
"""Leaves inserted per call by a build that may change its thread count (``widen``): about
10 s of one core at 1M leaves, so a build that the other stages wait for widens soon."""
INSERT_CANDIDATES = 10
"""Graph hits per new chunk that are rescored exactly when finding its insertion point."""
INSERT_EF = 128
"""Search breadth for insertion points. On 200k clustered 384-d vectors, 500 new chunks: ef 64
found the exact nearest leaf for 97.4-97.8% (misses up to 0.26 less similar), ef 128 for
99.8-100% (two graph builds), at 0.66-0.92 ms of CPU a chunk against the tree descent's
0.79-0.98 ms and 76% (BENCHMARKS.md, "HNSW graph as a base and a delta")."""
INSTALL_HINT = "pip install 'psirag[hnsw]'"


def require_usearch() -> Any:
    """usearch's ``Index`` class, or one line naming the extra that provides it."""
    _onnxruntime_first()
    try:
        from usearch.index import Index
    except ImportError as exc:
        raise InputError(
            "the hnsw dense list needs the usearch package, which is not installed: "
            f"{INSTALL_HINT} (or search with the tree or dense list)"
        ) from exc
    return Index


def _onnxruntime_first() -> None:
    """Load onnxruntime (the default embedder's runtime) before usearch: usearch 2.26 loads
    numkong's library with global symbols, and onnxruntime 1.32 imported after that crashes
    the process (SIGSEGV in its module init) on Linux; the other order works."""
    if "usearch" in sys.modules or "onnxruntime" in sys.modules:
        return
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime  # noqa: F401


def usearch_available() -> bool:
    """Whether a graph can be built here (usearch importable)."""
    try:
        require_usearch()
    except InputError:
        return False
    return True


class GraphBase:
    """An immutable HNSW graph (the *base*) and the sorted keys it holds, shared by every
    :class:`LeafGraph` made from it: updates never change it; a fold makes a new one.

    A saved base is opened on first use (:meth:`opened`): an update that only appends leaves
    to the delta never reads it, and usearch's ``view`` of a 1M-leaf graph costs 0.1-0.4 s.
    Its file is held open from the load, so a later save's garbage collection of the loaded
    generation does not take it away."""

    def __init__(
        self,
        graph: Any,
        keys: np.ndarray,
        base_id: str,
        *,
        read_only: bool,
        ndim: int | None = None,
        opener: Any = None,
    ) -> None:
        assert graph is not None or (opener is not None and ndim is not None)
        self._graph = graph
        self._opener = opener
        self.ndim = int(graph.ndim) if graph is not None else int(ndim or 0)
        """The vectors' dimension (known without opening a saved base)."""
        self.keys = np.asarray(keys, dtype=np.int64)
        self.id = base_id
        """Names this base in a generation's manifest: a save whose base generation holds the
        same base hard-links its files instead of writing them again."""
        self.read_only = read_only
        """A memory-mapped view of a saved graph: usearch cannot change it (it would crash)."""
        self.lock = threading.Lock()
        """usearch takes ``ef`` as a property of the graph, not of one search: held while one
        is set and used, so that concurrent searches with different beams get their own.
        Also held while a saved base is opened."""

    @property
    def opened(self) -> bool:
        """Whether the usearch graph is in memory (a saved base is opened on first use)."""
        return self._graph is not None

    @property
    def graph(self) -> Any:
        """The usearch graph (a saved base's view is opened here, once)."""
        if self._graph is None:
            with self.lock:
                if self._graph is None:
                    self._graph = self._opener()
                    self._opener = None
        return self._graph

    def search(self, queries: np.ndarray, count: int, ef: int, threads: int) -> Any:
        graph = self.graph
        with self.lock:
            graph.expansion_search = max(int(ef), count)
            return graph.search(queries, count, threads=threads)


class _SavedView:
    """Opens a saved base graph's usearch view when first called. On Linux the file is held
    open from construction (``/proc/self/fd``), so the view still opens after the generation
    that held it was garbage-collected; elsewhere it is opened at once."""

    def __init__(self, index_class: Any, path: Path, n_keys: int, dim: int) -> None:
        self._index_class, self._path, self._n, self._dim = index_class, path, n_keys, dim
        self._fd: int | None = None
        self._graph: Any = None
        if sys.platform.startswith("linux") and Path("/proc/self/fd").is_dir():
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        else:
            self._graph = self._view(str(path))

    def _view(self, where: str) -> Any:
        try:
            graph = self._index_class.restore(where, view=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise IndexFormatError(
                f"{self._path}: the HNSW graph is unreadable ({exc}); rebuild the index"
            ) from exc
        if graph is None or len(graph) != self._n or int(graph.ndim) != self._dim:
            raise IndexFormatError(
                f"{self._path}: the HNSW graph does not match its header; rebuild the index"
            )
        return graph

    def __call__(self) -> Any:
        if self._graph is None:
            assert self._fd is not None
            try:
                self._graph = self._view(f"/proc/self/fd/{self._fd}")
            finally:
                os.close(self._fd)
                self._fd = None
        return self._graph

    def __del__(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def new_base_id() -> str:
    """A fresh base's name (random: two bases never share one)."""
    return uuid.uuid4().hex


def fold_limit(n_leaves: int) -> int:
    """Tombstones plus delta leaves a graph of ``n_leaves`` leaves keeps before a fold."""
    return max(1, min(FOLD_MAX, int(FOLD_FRACTION * n_leaves)))


def _sorted_keys(keys: np.ndarray | None) -> np.ndarray:
    return np.empty(0, dtype=np.int64) if keys is None else np.asarray(keys, dtype=np.int64)


def _optional_keys(path: Path) -> np.ndarray:
    """A saved key array, empty when the file is absent (nothing removed, or no delta)."""
    if not path.exists():
        return np.empty(0, dtype=np.int64)
    return np.asarray(np.load(path, allow_pickle=False), dtype=np.int64)


def _members(sorted_keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """A mask over ``sorted_keys``: which are in ``wanted`` (sorted)."""
    at = np.minimum(np.searchsorted(wanted, sorted_keys), max(wanted.size - 1, 0))
    return (wanted[at] == sorted_keys) if wanted.size else np.zeros(sorted_keys.size, bool)


def new_graph(ndim: int, expansion_add: int = EXPANSION_ADD) -> Any:
    """An empty usearch graph as the index builds one (inner product on unit vectors, f16,
    :data:`CONNECTIVITY`); ``expansion_add`` other than :data:`EXPANSION_ADD` only to measure
    it (``benchmarks/bench_graph_expansion.py``)."""
    return require_usearch()(
        ndim=ndim,
        metric="ip",
        dtype="f16",
        connectivity=CONNECTIVITY,
        expansion_add=expansion_add,
    )


class LeafGraph:
    """The leaves' nearest-neighbour index, log-structured: an immutable base graph, the base
    keys removed since (tombstones, filtered out of its hits) and the leaves added since (the
    delta: their keys and vectors, scanned exactly). Immutable in use: :meth:`updated` returns
    a new one that shares the base.

    Leaves ``0 .. n_base-1`` are the base's live keys in order; the delta leaves follow (new
    leaves are appended, and their keys are larger than any base key)."""

    def __init__(
        self,
        base: GraphBase,
        dead: np.ndarray | None = None,
        delta_keys: np.ndarray | None = None,
        delta_vectors: np.ndarray | None = None,
    ) -> None:
        self.base = base
        self.dead = _sorted_keys(dead)
        self.delta_keys = _sorted_keys(delta_keys)
        dim = base.ndim
        self.delta_vectors = (
            np.empty((0, dim), dtype=np.float32)
            if delta_vectors is None
            else np.ascontiguousarray(delta_vectors, dtype=np.float32)
        )
        if self.delta_vectors.shape != (self.delta_keys.size, dim):
            raise ValueError(
                f"{self.delta_vectors.shape} delta vectors for {self.delta_keys.size} delta keys"
            )
        keys = base.keys
        if self.dead.size:
            keys = keys[~_members(keys, self.dead)]
        self.n_base = int(keys.size)
        """Leaves the base graph holds (the first ones)."""
        self.keys = np.concatenate([keys, self.delta_keys]) if self.delta_keys.size else keys
        """The key of every leaf, ascending."""

    @property
    def graph(self) -> Any:
        return self.base.graph

    @property
    def read_only(self) -> bool:
        return self.base.read_only

    @property
    def n_leaves(self) -> int:
        return int(self.keys.size)

    @property
    def n_delta(self) -> int:
        return int(self.delta_keys.size)

    @property
    def changes(self) -> int:
        """Tombstones plus delta leaves: what a fold takes into a new base."""
        return int(self.dead.size + self.delta_keys.size)

    @property
    def fold_due(self) -> bool:
        return self.changes > fold_limit(self.n_leaves)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        leaf_vectors: np.ndarray,
        *,
        threads: int = 0,
        widen: Callable[[], int | None] | None = None,
    ) -> LeafGraph:
        """A new graph over every leaf (keys 0..n-1); ``threads`` 0: every core.

        ``widen``: asked before each batch of :data:`BUILD_BATCH` leaves after the first for
        the threads of that batch (None: ``threads``; the first batch is inserted on
        ``threads``: a small graph is the same whenever it is asked for, and many threads
        gain nothing on an empty graph). A build beside other work inserts on one thread while
        the other stages run and on every core once they wait for it. The leaves are inserted
        in key order either way, and batches inserted on one thread give the same graph, byte
        for byte, as one call on one thread."""
        vectors = np.ascontiguousarray(leaf_vectors, dtype=np.float32)
        graph = new_graph(int(vectors.shape[1]))
        keys = np.arange(vectors.shape[0], dtype=np.int64)
        step = keys.size if widen is None else BUILD_BATCH
        ids = keys.astype(np.uint64)
        for lo in range(0, keys.size, max(step, 1)):
            now = None if widen is None or lo == 0 else widen()
            graph.add(
                ids[lo : lo + step],
                vectors[lo : lo + step],
                threads=threads if now is None else now,
            )
        return cls(GraphBase(graph, keys, new_base_id(), read_only=False))

    def updated(
        self,
        keep: np.ndarray | None,
        new_vectors: np.ndarray | None,
        *,
        fold: bool | None = None,
        threads: int = 0,
    ) -> LeafGraph:
        """The graph after an update: the leaves where ``keep`` (a boolean mask over this
        graph's leaves; None: all) is False removed, then ``new_vectors`` appended as new
        leaves, in the order the index renumbers its leaves. Removed base leaves become
        tombstones and new leaves join the delta; the base is shared, not copied. ``fold``:
        fold the changes into a new base (None: when :attr:`fold_due`). This graph is
        unchanged."""
        dead, delta_keys, delta_vectors = self.dead, self.delta_keys, self.delta_vectors
        if keep is not None:
            keep = np.asarray(keep, dtype=bool)
            if keep.shape != self.keys.shape:
                raise ValueError(f"keep mask of {keep.shape} for a graph of {self.n_leaves} leaves")
            gone = self.keys[: self.n_base][~keep[: self.n_base]]
            if gone.size:
                dead = np.union1d(dead, gone)
            stays = keep[self.n_base :]
            delta_keys, delta_vectors = delta_keys[stays], delta_vectors[stays]
        if new_vectors is not None and len(new_vectors):
            vectors = np.asarray(new_vectors, dtype=np.float32)
            start = int(self.base.keys[-1]) + 1 if self.base.keys.size else 0
            if delta_keys.size:
                start = max(start, int(delta_keys[-1]) + 1)
            new_keys = np.arange(start, start + vectors.shape[0], dtype=np.int64)
            delta_keys = np.concatenate([delta_keys, new_keys])
            delta_vectors = np.concatenate([delta_vectors, vectors])
        out = LeafGraph(self.base, dead, delta_keys, delta_vectors)
        if (out.fold_due if fold is None else fold) and out.changes:
            return out.folded(threads=threads)
        return out

    def folded(self, *, threads: int = 0) -> LeafGraph:
        """The same leaves in a new base graph (in memory, written whole by the next save):
        a copy of the base without the tombstones and with the delta inserted."""
        graph = self.base.graph.copy()
        if self.dead.size:
            graph.remove(self.dead.astype(np.uint64))
        if self.delta_keys.size:
            graph.add(self.delta_keys.astype(np.uint64), self.delta_vectors, threads=threads)
        return LeafGraph(GraphBase(graph, self.keys.copy(), new_base_id(), read_only=False))

    # ------------------------------------------------------------------ storage
    def save_base(self, graph_path: Path, keys_path: Path) -> None:
        """Write the base graph and its keys (a new generation's staging folder)."""
        self.base.graph.save(str(graph_path))
        with open(keys_path, "wb") as fh:
            np.save(fh, self.base.keys, allow_pickle=False)

    def manifest_entry(self) -> dict[str, Any]:
        """What the generation's manifest says about the graph (the base it shares)."""
        return {"base": self.base.id, "dead": int(self.dead.size), "delta": self.n_delta}

    @classmethod
    def open(
        cls,
        folder: Path,
        n_leaves: int,
        dim: int,
        *,
        leaf_vectors: np.ndarray | None = None,
        base_id: str | None = None,
    ) -> LeafGraph | None:
        """A saved graph, its base memory-mapped read-only; None when usearch is not installed
        (the index then searches without it). ``leaf_vectors``: the index's, for the delta
        leaves' rows (needed when there is a delta). A graph that does not match the index is
        an error."""
        if not usearch_available():
            return None
        index_class = require_usearch()
        try:
            keys = np.load(folder / KEYS_FILE, allow_pickle=False)
            dead, delta = _optional_keys(folder / DEAD_FILE), _optional_keys(folder / DELTA_FILE)
            header = index_class.metadata(str(folder / GRAPH_FILE))  # the header only
            present = None if header is None else int(header["count_present"])
            ndim = None if header is None else int(header["dimensions"])
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            raise IndexFormatError(
                f"{folder}: the HNSW graph is unreadable ({exc}); rebuild the index"
            ) from exc
        n_base = keys.size - dead.size
        if (
            present is None
            or keys.ndim != 1
            or present != keys.size
            or n_base + delta.size != n_leaves
        ):
            raise IndexFormatError(
                f"{folder}: the HNSW graph holds {0 if present is None else present} vectors, "
                f"{keys.shape} keys, {dead.size} removed and {delta.size} added for {n_leaves} "
                "leaves; the index is corrupted or mixed, rebuild it"
            )
        ascending = [k.size < 2 or bool(np.all(np.diff(k) > 0)) for k in (keys, dead, delta)]
        fits = (
            ndim == dim
            and all(ascending)
            and int(np.count_nonzero(_members(keys, dead))) == dead.size
            and (not delta.size or not keys.size or int(delta[0]) > int(keys[-1]))
        )
        if not fits:
            raise IndexFormatError(f"{folder}: the HNSW graph does not fit the index; rebuild")
        vectors = None
        if delta.size:
            if leaf_vectors is None:
                raise ValueError("a graph with a delta needs the index's leaf vectors")
            vectors = np.asarray(leaf_vectors[n_leaves - delta.size : n_leaves], np.float32)
        opener = _SavedView(index_class, folder / GRAPH_FILE, int(keys.size), dim)
        base = GraphBase(
            None, keys, base_id or new_base_id(), read_only=True, ndim=dim, opener=opener
        )
        return cls(base, dead, delta, vectors)

    # ------------------------------------------------------------------ searching
    def search(self, vector: np.ndarray, count: int, ef: int) -> np.ndarray:
        """About the ``count`` nearest leaves' ids, best first: the base graph's hits (less
        tombstones; ``ef`` its search breadth, at least ``count``) merged with the exact top
        of the delta."""
        count = min(count, self.n_leaves)
        if count <= 0:
            return np.empty(0, dtype=np.int64)
        query = np.asarray(vector, dtype=np.float32).ravel()
        leaves, sims = self._base_hits(query[None, :], count, ef, threads=1)
        leaves, sims = leaves[0], sims[0]
        keep = leaves >= 0
        leaves, sims = leaves[keep], sims[keep]
        if self.n_delta:
            scores = self.delta_vectors @ query
            top = _top(scores, count)
            leaves = np.concatenate([leaves, self.n_base + top])
            sims = np.concatenate([sims, scores[top]])
        order = np.lexsort((leaves, -sims))[:count]
        return leaves[order].astype(np.int64)

    def _base_hits(
        self, queries: np.ndarray, count: int, ef: int, *, threads: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per query row, the base graph's ``count`` best live leaves (-1: none) and their
        approximate similarities; tombstoned keys are asked for beyond ``count`` and dropped."""
        m = queries.shape[0]
        if self.n_base == 0:
            return np.full((m, 0), -1, np.int64), np.zeros((m, 0), np.float32)
        ask = min(count + min(count, int(self.dead.size)), int(self.base.keys.size))
        found = self.base.search(np.ascontiguousarray(queries), ask, ef, threads)
        keys = np.asarray(found.keys, dtype=np.int64).reshape(m, -1)
        sims = 1.0 - np.asarray(found.distances, dtype=np.float32).reshape(m, -1)
        counts = np.asarray(getattr(found, "counts", [keys.shape[1]] * m)).reshape(m, 1)
        live = self.keys[: self.n_base]
        at = np.minimum(np.searchsorted(live, keys), max(self.n_base - 1, 0))
        ok = (live[at] == keys) & (np.arange(keys.shape[1])[None, :] < counts)
        leaves = np.where(ok, at, -1)
        sims = np.where(ok, sims, -np.inf).astype(np.float32)
        if ask > count:  # the first ``count`` live hits of each row, in the graph's order
            rank = np.cumsum(ok, axis=1)
            cut = ok & (rank <= count)
            leaves = np.where(cut, leaves, -1)
            sims = np.where(cut, sims, -np.inf).astype(np.float32)
        return leaves, sims

    def nearest(
        self,
        queries: np.ndarray,
        leaf_vectors: np.ndarray,
        *,
        candidates: int = INSERT_CANDIDATES,
        ef: int = INSERT_EF,
        threads: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each query row, the most similar leaf and its cosine (exact, from the float32
        ``leaf_vectors``): the base graph's ``candidates`` best rescored, and the whole delta
        scanned. What :func:`psirag.tree.update.insert_leaves` needs as insertion points, in
        place of a descent of the tree."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        m = q.shape[0]
        best_leaf = np.full(m, -1, dtype=np.int64)
        best = np.full(m, -np.inf, dtype=np.float32)
        if m == 0 or self.n_leaves == 0:
            return best_leaf, best
        leaves, _ = self._base_hits(q, min(candidates, max(self.n_base, 1)), ef, threads=threads)
        if leaves.size:
            rows = np.take(leaf_vectors, np.maximum(leaves, 0).ravel(), axis=0)
            scores = np.einsum(
                "mcd,md->mc", rows.reshape(m, leaves.shape[1], -1).astype(np.float32), q
            )
            scores = np.where(leaves >= 0, scores, -np.inf)
            pick = np.argmax(scores, axis=1)
            best = scores[np.arange(m), pick].astype(np.float32)
            best_leaf = np.where(np.isfinite(best), leaves[np.arange(m), pick], -1)
        if self.n_delta:
            for lo in range(0, m, 1024):
                s = q[lo : lo + 1024] @ self.delta_vectors.T
                j = np.argmax(s, axis=1)
                sj = s[np.arange(s.shape[0]), j]
                better = sj > best[lo : lo + 1024]
                best[lo : lo + 1024] = np.where(better, sj, best[lo : lo + 1024])
                best_leaf[lo : lo + 1024] = np.where(
                    better, self.n_base + j, best_leaf[lo : lo + 1024]
                )
        return best_leaf, best


def _top(scores: np.ndarray, count: int) -> np.ndarray:
    """Indices of the ``count`` largest scores (unordered)."""
    if scores.size <= count:
        return np.arange(scores.size)
    return np.argpartition(-scores, count - 1)[:count]


__all__ = [
    "INSTALL_HINT",
    "GraphBase",
    "LeafGraph",
    "fold_limit",
    "new_graph",
    "require_usearch",
    "usearch_available",
]
