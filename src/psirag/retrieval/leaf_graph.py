"""An HNSW graph over an index's leaf vectors (usearch, ``psirag[hnsw]``): the dense list at
scale, built with the index, saved in its generation and changed by each add and remove.

Every leaf is in the graph under a key; keys rise with the leaf ids (``keys[leaf]``), so a
removal drops some keys and an add appends larger ones, and the surviving leaves keep their
keys without the graph being touched. The graph stores half-precision vectors (half the
memory); the few candidates it returns are rescored exactly from the index's float32 leaf
vectors. A saved graph is opened memory-mapped and read-only (usearch's ``view``): a search
never writes, and an update copies it into memory first.

usearch is a binary wheel on PyPI (no compiler), but with its numkong dependency it adds about
56 MiB to an install (BENCHMARKS.md, "Tree against HNSW as a nearest-leaf index"), so it is an
extra: without it an index is built without a graph and searches as before.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import IndexFormatError, InputError

CONNECTIVITY = 16
"""Graph degree (HNSW's M)."""
EXPANSION_ADD = 100
"""Candidate list while inserting (HNSW's ef_construction)."""
GRAPH_FILE = "graph.usearch"
KEYS_FILE = "keys.npy"
INSTALL_HINT = "pip install 'psirag[hnsw]'"


def require_usearch() -> Any:
    """usearch's ``Index`` class, or one line naming the extra that provides it."""
    try:
        from usearch.index import Index
    except ImportError as exc:
        raise InputError(
            "the hnsw dense list needs the usearch package, which is not installed: "
            f"{INSTALL_HINT} (or search with the tree or dense list)"
        ) from exc
    return Index


def usearch_available() -> bool:
    """Whether a graph can be built here (usearch importable)."""
    try:
        require_usearch()
    except InputError:
        return False
    return True


class LeafGraph:
    """The graph and the key of every leaf (ascending). Immutable in use: :meth:`updated`
    returns a new graph and leaves this one as it was."""

    def __init__(self, graph: Any, keys: np.ndarray, *, read_only: bool) -> None:
        self.graph = graph
        self.keys = np.asarray(keys, dtype=np.int64)
        self.read_only = read_only
        """A memory-mapped view of a saved graph: usearch cannot change it (it would crash)."""
        self._breadth = threading.Lock()
        """usearch takes ``ef`` as a property of the graph, not of one search: held while one
        is set and used, so that concurrent searches with different beams get their own."""

    @property
    def n_leaves(self) -> int:
        return int(self.keys.size)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, leaf_vectors: np.ndarray, *, threads: int = 0) -> LeafGraph:
        """A new graph over every leaf (keys 0..n-1); ``threads`` 0: every core."""
        index_class = require_usearch()
        vectors = np.ascontiguousarray(leaf_vectors, dtype=np.float32)
        graph = index_class(
            ndim=int(vectors.shape[1]),
            metric="ip",
            dtype="f16",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
        )
        keys = np.arange(vectors.shape[0], dtype=np.int64)
        if keys.size:
            graph.add(keys.astype(np.uint64), vectors, threads=threads)
        return cls(graph, keys, read_only=False)

    def updated(
        self, keep: np.ndarray | None, new_vectors: np.ndarray | None, *, threads: int = 0
    ) -> LeafGraph:
        """The graph after an update: the leaves where ``keep`` (a boolean mask over this
        graph's leaves; None: all) is False removed, then ``new_vectors`` appended as new
        leaves, in the order the index renumbers its leaves. This graph is unchanged."""
        graph = self.graph.copy()
        keys = self.keys
        if keep is not None:
            keep = np.asarray(keep, dtype=bool)
            if keep.shape != keys.shape:
                raise ValueError(f"keep mask of {keep.shape} for a graph of {keys.size} leaves")
            gone = keys[~keep]
            if gone.size:
                graph.remove(gone.astype(np.uint64))
            keys = keys[keep]
        if new_vectors is not None and len(new_vectors):
            vectors = np.ascontiguousarray(new_vectors, dtype=np.float32)
            start = int(self.keys.max()) + 1 if self.keys.size else 0
            new_keys = np.arange(start, start + vectors.shape[0], dtype=np.int64)
            graph.add(new_keys.astype(np.uint64), vectors, threads=threads)
            keys = np.concatenate([keys, new_keys])
        return LeafGraph(graph, keys, read_only=False)

    # ------------------------------------------------------------------ storage
    def save(self, folder: Path) -> None:
        """Write the graph and its keys into ``folder`` (a new generation's staging folder)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.graph.save(str(folder / GRAPH_FILE))
        with open(folder / KEYS_FILE, "wb") as fh:
            np.save(fh, self.keys, allow_pickle=False)

    @classmethod
    def open(cls, folder: Path, n_leaves: int, dim: int) -> LeafGraph | None:
        """A saved graph, memory-mapped read-only; None when usearch is not installed (the
        index then searches without it). A graph that does not match the index is an error."""
        if not usearch_available():
            return None
        index_class = require_usearch()
        try:
            keys = np.load(folder / KEYS_FILE, allow_pickle=False)
            graph = index_class.restore(str(folder / GRAPH_FILE), view=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise IndexFormatError(
                f"{folder}: the HNSW graph is unreadable ({exc}); rebuild the index"
            ) from exc
        if graph is None or keys.shape != (n_leaves,) or len(graph) != n_leaves:
            raise IndexFormatError(
                f"{folder}: the HNSW graph holds {0 if graph is None else len(graph)} vectors "
                f"and {keys.shape} keys for {n_leaves} leaves; the index is corrupted or "
                "mixed, rebuild it"
            )
        if int(graph.ndim) != dim or (keys.size > 1 and bool(np.any(np.diff(keys) <= 0))):
            raise IndexFormatError(f"{folder}: the HNSW graph does not fit the index; rebuild")
        return cls(graph, keys, read_only=True)

    # ------------------------------------------------------------------ searching
    def search(self, vector: np.ndarray, count: int, ef: int) -> np.ndarray:
        """About the ``count`` nearest leaves' ids (unordered beyond the graph's own order);
        ``ef``: the search breadth (at least ``count``)."""
        count = min(count, self.n_leaves)
        if count <= 0:
            return np.empty(0, dtype=np.int64)
        query = np.asarray(vector, dtype=np.float32).ravel()
        with self._breadth:
            self.graph.expansion_search = max(int(ef), count)
            found = self.graph.search(query, count, threads=1)
        keys = np.asarray(found.keys, dtype=np.int64)
        leaves = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return leaves[self.keys[leaves] == keys]  # every found key is a leaf's


__all__ = ["INSTALL_HINT", "LeafGraph", "require_usearch", "usearch_available"]
