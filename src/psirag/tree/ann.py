"""Spanning edges from an approximate nearest-neighbour graph (SPEC 4, paper App. E.1 "HNSW").

The knn mode (:mod:`psirag.tree.approx`) finds each row's top-k neighbours exactly, block by block
against all n rows: O(n·k) memory but O(n²·d) time. Here an HNSW graph (hnswlib, the paper's
choice; see benchmarks/bench_ann_libs.py for why) answers the same top-k queries in roughly
O(n·log n) time. The candidate pairs then take the same path as knn: exact float32 similarity per
pair (:func:`~psirag.tree.approx.pair_similarity`), Kruskal in the strict walk order, then joins
between the components the neighbour graph leaves.

The joins are where the knn mode rescans every row against all n. Here each join round is
Borůvka's: every component proposes one cross pair and the proposals are added in walk order, so
the component count at least halves per round. A component's proposal comes from ANN queries
only:

- a small component (at most :data:`FULL_QUERY_ROWS` rows) queries the HNSW index with all its
  rows for ``size + extra`` neighbours, so that some answers must lie outside it;
- a larger one sends a fixed sample of its rows to a second, small HNSW index that holds a
  sample of every component, finds its best sampled cross pair into each of the three best
  other components there, and refines each by two ANN queries around the boundary (the best
  pair within the outside row's neighbourhood, then the best inside row's outside neighbours).

Every query is for at most ``max(FULL_QUERY_ROWS + extra, 128)`` neighbours and the sample index
holds at most ``FULL_QUERY_ROWS`` rows per component, so no step is O(n²) in time or memory
(a round is O(n·log n) queries at most, and there are at most log2(components) rounds).
The joins are approximate (a component's best cross pair may be missed), like the
candidates; the result is always a spanning tree. The graph is built on one thread, so the
same vectors give the same edges; queries run on ``threads`` threads (they leave it as is).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from psirag.errors import InputError
from psirag.tree.approx import (
    Edges,
    Progress,
    _walk_order,
    edge_rows,
    no_edges,
    pair_similarity,
    spanning_from_candidates,
)
from psirag.tree.machine import default_workers

ANN_INSTALL_HINT = "pip install 'psirag[ann]'"
HNSW_M = 16
"""Graph degree (hnswlib's M). 16 reached recall@32 0.94 at 100k clustered rows."""
HNSW_EF_CONSTRUCTION = 100
"""Candidate list while building; higher is slower and closer to exact."""
FULL_QUERY_ROWS = 64
"""Components up to this size query with all their rows; larger ones send this many samples."""
_REFINE_NEAR = 128
"""ANN neighbours of a join's endpoint tried when refining a large component's join."""
_REFINE_TARGETS = 3
"""Other components a large component's sampled joins are refined towards (the sample may
rank close targets wrongly)."""
_QUERY_BATCH = 20_000
"""Rows per query call, so that result arrays stay bounded (rows x neighbours int64)."""


def require_hnswlib() -> Any:
    """Import hnswlib, or say which extra provides it (a psirag error: no traceback)."""
    try:
        import hnswlib
    except ImportError as exc:
        raise InputError(
            "the ann tree mode needs the hnswlib package, which is not installed: "
            f"{ANN_INSTALL_HINT} (or choose --tree-mode knn, exact or bucketed)"
        ) from exc
    return hnswlib


class HnswIndex:
    """An inner-product HNSW graph over unit rows, built deterministically on one thread."""

    def __init__(
        self,
        vectors: np.ndarray,
        *,
        m: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        threads: int = 1,
        seed: int = 0,
    ) -> None:
        hnswlib = require_hnswlib()
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, d = self.vectors.shape
        self.n = n
        self.threads = max(1, threads)
        self._index = hnswlib.Index(space="ip", dim=d)
        self._index.init_index(
            max_elements=max(n, 1), ef_construction=ef_construction, M=m, random_seed=seed
        )
        self._index.set_num_threads(1)  # one thread: insertion order fixed, graph reproducible
        self._index.add_items(self.vectors, np.arange(n))

    def query(self, rows: np.ndarray, k: int) -> np.ndarray:
        """Labels of the ``k`` best rows for each query vector (``-1`` where fewer came back)."""
        k = min(k, self.n)
        out = np.full((rows.shape[0], k), -1, dtype=np.int64)
        if k == 0 or rows.shape[0] == 0:
            return out
        self._index.set_ef(max(2 * k, 64))
        for lo in range(0, rows.shape[0], _QUERY_BATCH):
            hi = min(lo + _QUERY_BATCH, rows.shape[0])
            try:
                labels, _ = self._index.knn_query(rows[lo:hi], k=k, num_threads=self.threads)
            except RuntimeError:  # hnswlib: fewer than k found; ask one by one, shorter
                labels = self._query_short(rows[lo:hi], k)
            out[lo:hi] = labels
        return out

    def _query_short(self, rows: np.ndarray, k: int) -> np.ndarray:
        out = np.full((rows.shape[0], k), -1, dtype=np.int64)
        for i, row in enumerate(rows):
            for kk in range(k, 0, -1):
                try:
                    labels, _ = self._index.knn_query(row[None, :], k=kk, num_threads=1)
                except RuntimeError:
                    continue
                out[i, :kk] = labels[0]
                break
        return out


def ann_candidates(index: HnswIndex, k: int, progress: Progress | None = None) -> Edges:
    """Each row's ``k`` nearest other rows by ANN, as unique pairs ``a < b`` sorted by key.

    Same contract as :func:`psirag.tree.approx.knn_candidates`; ``s`` is recomputed exactly per
    pair so that a pair's similarity never depends on how it was found.
    """
    e, n = index.vectors, index.n
    k = min(k, n - 1)
    keys: list[np.ndarray] = []
    for lo in range(0, n, _QUERY_BATCH):
        if progress is not None:
            progress(lo, n)
        hi = min(lo + _QUERY_BATCH, n)
        labels = index.query(e[lo:hi], k + 1)
        rows = np.repeat(np.arange(lo, hi, dtype=np.int64), labels.shape[1])
        cols = labels.ravel()
        ok = (cols >= 0) & (cols != rows)
        rows, cols = rows[ok], cols[ok]
        keys.append(np.minimum(rows, cols) * n + np.maximum(rows, cols))
    if progress is not None:
        progress(n, n)
    unique = np.unique(np.concatenate(keys)) if keys else np.empty(0, dtype=np.int64)
    a, b = np.divmod(unique, n)
    return a, b, pair_similarity(e, a, b)


def _best_outside(
    e: np.ndarray,
    query_rows: np.ndarray,
    labels_found: np.ndarray,
    labels: np.ndarray,
    component: int,
    targets: int = 1,
) -> list[tuple[int, int, float]]:
    """The most similar (row, column) among ANN answers outside ``component``, in walk order:
    the best pair into each of the ``targets`` best other components."""
    rows = np.repeat(query_rows, labels_found.shape[1])
    cols = labels_found.ravel()
    ok = cols >= 0
    ok[ok] = labels[cols[ok]] != component
    if not ok.any():
        return []
    rows, cols = rows[ok], cols[ok]
    a, b = np.minimum(rows, cols), np.maximum(rows, cols)
    s = pair_similarity(e, a, b)
    out: list[tuple[int, int, float]] = []
    seen: set[int] = set()
    for i in _walk_order(a, b, s).tolist():
        other = int(labels[cols[i]])
        if other in seen:
            continue
        seen.add(other)
        out.append((int(a[i]), int(b[i]), float(s[i])))
        if len(out) == targets:
            break
    return out


def _first(pairs: list[tuple[int, int, float]]) -> tuple[int, int, float] | None:
    """The pair that comes first in the walk order ``(-s, a, b)``, if any."""
    return min(pairs, key=lambda p: (-p[2], p[0], p[1])) if pairs else None


def _sample_rows(members: np.ndarray, size: int) -> np.ndarray:
    """``size`` evenly spaced members (deterministic, spread over the component's id range)."""
    if members.size <= size:
        return members
    return members[np.linspace(0, members.size - 1, size).round().astype(np.int64)]


def _refine(
    index: HnswIndex,
    labels: np.ndarray,
    comp: int,
    best: tuple[int, int, float],
) -> tuple[int, int, float]:
    """Improve a sampled cross pair near where it was found, by two ANN queries.

    The outside row's neighbourhood holds rows of both sides near the boundary: the best pair
    between its inside and outside rows; then the best inside row's own outside neighbours.
    """
    e = index.vectors
    a, b, _ = best
    inside_row, outside = (a, b) if labels[a] == comp else (b, a)
    near = index.query(e[[outside]], _REFINE_NEAR)[0]
    near = near[near >= 0]
    same = labels[near] == comp
    inside = np.union1d(near[same], [inside_row])
    outer = np.union1d(near[~same], [outside])
    cand = _best_pair(e, inside, outer)
    near = index.query(e[[cand[0] if labels[cand[0]] == comp else cand[1]]], _REFINE_NEAR)[0]
    near = near[near >= 0]
    outer = near[labels[near] != comp]
    if outer.size:
        row = cand[0] if labels[cand[0]] == comp else cand[1]
        cand = min(cand, _best_pair(e, np.array([row]), outer), key=_walk_key)
    return min(cand, best, key=_walk_key)


def _walk_key(pair: tuple[int, int, float]) -> tuple[float, int, int]:
    return (-pair[2], pair[0], pair[1])


def _best_pair(e: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> tuple[int, int, float]:
    """The first pair in walk order among ``rows x cols`` (exact float32 similarities)."""
    r = np.repeat(rows, cols.size)
    c = np.tile(cols, rows.size)
    a, b = np.minimum(r, c), np.maximum(r, c)
    s = pair_similarity(e, a, b)
    first = _walk_order(a, b, s)[0]
    return int(a[first]), int(b[first]), float(s[first])


def component_joins(index: HnswIndex, labels: np.ndarray, extra: int = 16) -> Edges:
    """One cross pair per component (one Borůvka round by ANN queries), in walk order.

    ``labels[i]`` names row i's component (at least two). See the module docstring for how a
    component of each size finds its pair; each proposal is a real cross pair with its exact
    float32 similarity.
    """
    e = index.vectors
    order = np.argsort(labels, kind="stable")
    comp_ids, starts, sizes = np.unique(labels[order], return_index=True, return_counts=True)
    members_of = [order[s : s + c] for s, c in zip(starts.tolist(), sizes.tolist(), strict=True)]
    samples = [_sample_rows(m, FULL_QUERY_ROWS) for m in members_of]
    sample_rows = np.concatenate(samples)
    sample_index: HnswIndex | None = None
    found: list[tuple[int, int, float]] = []
    for comp, members, sample in zip(comp_ids.tolist(), members_of, samples, strict=True):
        best: tuple[int, int, float] | None = None
        if members.size <= FULL_QUERY_ROWS:
            got = index.query(e[members], members.size + extra)
            best = _first(_best_outside(e, members, got, labels, comp))
        if best is None:
            if sample_index is None:
                sample_index = HnswIndex(e[sample_rows], threads=index.threads)
            got = sample_index.query(e[sample], sample.size + extra)
            got = np.where(got >= 0, sample_rows[np.maximum(got, 0)], -1)
            sampled = _best_outside(e, sample, got, labels, comp, targets=_REFINE_TARGETS)
            best = _first([_refine(index, labels, comp, p) for p in sampled])
        if best is None:  # the ANN answers missed every other component: any cross pair does
            other = int(np.flatnonzero(labels != comp)[0])
            lo, hi = min(int(members[0]), other), max(int(members[0]), other)
            best = (lo, hi, float(pair_similarity(e, np.array([lo]), np.array([hi]))[0]))
        found.append(best)
    a = np.array([f[0] for f in found], dtype=np.int64)
    b = np.array([f[1] for f in found], dtype=np.int64)
    s = pair_similarity(e, a, b)
    walk = _walk_order(a, b, s)
    return a[walk], b[walk], s[walk]


def spanning_edges_ann(
    embeddings: np.ndarray,
    k: int,
    progress: Progress | None = None,
    *,
    threads: int = 1,
) -> Edges:
    """An approximate maximum spanning tree from each row's ``k`` ANN neighbours.

    Same contract as :func:`psirag.tree.approx.spanning_edges_knn`: ``(a, b, s)`` with ``a < b``,
    n - 1 edges sorted by ``(-s, a, b)``. Raises :class:`InputError` naming the ``ann`` extra
    when hnswlib is missing. ``threads`` run the queries (0: every core this process may use);
    the graph is built on one thread either way, so the edges do not depend on it.
    """
    e = edge_rows(embeddings, k)
    n = e.shape[0]
    if n < 2:
        return no_edges()
    index = HnswIndex(e, threads=threads if threads > 0 else default_workers())
    return spanning_from_candidates(
        n, ann_candidates(index, k, progress), lambda labels: component_joins(index, labels)
    )


__all__ = [
    "ANN_INSTALL_HINT",
    "HnswIndex",
    "ann_candidates",
    "component_joins",
    "require_hnswlib",
    "spanning_edges_ann",
]
