"""Approximate maximum spanning tree for corpora too large for the n x n matrix (SPEC 4).

The exact build (:mod:`psirag.tree.build`) needs every pair's similarity at once. Here the
candidate pairs are each row's ``k`` most similar rows, found block by block with exact dot
products (``E[block] @ E.T``), so memory stays O(n·k) plus one fixed-size block. Kruskal's
algorithm over the candidates, in the strict walk order ``(-s, a, b)`` of the exact build, gives
the maximum spanning forest of the k-nearest-neighbour graph. Where that graph falls apart into
several components (well-separated clusters), Borůvka passes join them by their best cross pairs,
again found block by block over all rows, never from an n x n matrix.

Why this is the exact tree when ``k >= n - 1``: every pair is then a candidate, Kruskal walks all
pairs in the exact order, and its kept edges are the exact maximum spanning tree; the join passes
have nothing left to do. With a smaller ``k`` it approximates that tree: a spanning-tree pair
missing from the candidates can only be replaced by a join of lower rank in the walk order (a less
similar pair), so the total similarity never exceeds the exact tree's. (At ``k = 1`` it is exact
again: each row's nearest neighbour is its best edge, which the exact tree holds, and the join
passes are then Borůvka's algorithm. Between the two, candidate pairs that are not in the exact
tree can close a component before its better join is seen, so quality is not monotone in k.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from psirag.tree.merge import UnionFind

BLOCK_BYTES = 256 * 2**20
"""Budget for one block's working arrays (a (rows x n) slab and its masks), in bytes."""

_BYTES_PER_ENTRY = 12
"""Per (row, column) entry of a block: the float32 slab, a partitioned copy and boolean masks."""

_PAIR_CHUNK = 1 << 20
"""Candidate pairs that Kruskal reads per step (bounds its index temporaries)."""

Progress = Callable[[int, int], None]
Edges = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(a, b, s)``: edge endpoints with ``a < b`` and each edge's float32 cosine."""


def _block_rows(n: int, block_rows: int | None) -> int:
    """Rows per block so that a block's arrays stay within :data:`BLOCK_BYTES`."""
    if block_rows is not None:
        if block_rows < 1:
            raise ValueError(f"block_rows must be at least 1, got {block_rows}")
        return block_rows
    return max(1, min(n, BLOCK_BYTES // (_BYTES_PER_ENTRY * max(n, 1))))


def pair_similarity(embeddings: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float32 ``dot(E[a], E[b])`` per pair, computed the same way wherever a pair comes from.

    Block products may round a pair differently depending on the block it falls in; one formula
    for every pair keeps equal pairs equal, so ties resolve by the pair key, deterministically.
    """
    out = np.empty(a.size, dtype=np.float32)
    # Each pair gathers two rows of d floats: bound the gathered copies by one block's budget,
    # or n·k pairs would copy n·k·d floats at once (gigabytes at 100k chunks).
    step = max(1, BLOCK_BYTES // (8 * max(embeddings.shape[1], 1)))
    for lo in range(0, a.size, step):
        hi = min(lo + step, a.size)
        out[lo:hi] = np.einsum("ij,ij->i", embeddings[a[lo:hi]], embeddings[b[lo:hi]])
    return out


def _top_k_columns(sims: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest entries of each row, ties at the boundary to the smallest column.

    Returns ``(rows, cols)`` of the kept entries. ``np.argpartition`` alone would pick among tied
    columns arbitrarily; a threshold plus an explicit tie rule makes the choice reproducible.
    """
    n = sims.shape[1]
    threshold = np.partition(sims, n - k, axis=1)[:, n - k]
    keep = sims >= threshold[:, None]
    extra = np.flatnonzero(keep.sum(axis=1) > k)
    for row in extra.tolist():  # rare: columns tied at the threshold beyond the k places
        tied = np.flatnonzero(sims[row] == threshold[row])
        keep[row, tied[k - (np.count_nonzero(keep[row]) - tied.size) :]] = False
    rows, columns = np.nonzero(keep)
    return rows, columns


def knn_candidates(
    embeddings: np.ndarray,
    k: int,
    block_rows: int | None = None,
    progress: Progress | None = None,
) -> Edges:
    """Each row's ``k`` most similar other rows, as unique undirected pairs.

    Returns ``(a, b, s)`` with ``a < b``, sorted by ``(a, b)``, and ``s`` the float32 cosine of
    each pair (rows must be unit vectors). Blocks of ``block_rows`` rows (by default as many as
    fit :data:`BLOCK_BYTES`) are multiplied by ``E.T`` one at a time: never an n x n matrix.
    """
    e = edge_rows(embeddings, k)
    n = e.shape[0]
    if n < 2:
        return no_edges()
    k = min(k, n - 1)
    step = _block_rows(n, block_rows)
    keys: list[np.ndarray] = []
    for lo in range(0, n, step):
        if progress is not None:
            progress(lo, n)
        hi = min(lo + step, n)
        sims = e[lo:hi] @ e.T
        sims[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf  # a row is not its own neighbour
        rows, cols = _top_k_columns(sims, k)
        del sims
        rows += lo
        keys.append(np.minimum(rows, cols).astype(np.int64) * n + np.maximum(rows, cols))
    if progress is not None:
        progress(n, n)
    unique = np.unique(np.concatenate(keys))
    del keys
    a, b = np.divmod(unique, n)
    return a, b, pair_similarity(e, a, b)


def _walk_order(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Indices sorting pairs by the strict key ``(-s, a, b)`` of the exact walk."""
    return np.lexsort((b, a, -s))


def _kruskal(
    uf: UnionFind,
    a: np.ndarray,
    b: np.ndarray,
    s: np.ndarray,
    out: list[Edges],
) -> None:
    """Add, in walk order, every pair that joins two sets; append the kept pairs to ``out``."""
    order = _walk_order(a, b, s)
    for lo in range(0, order.size, _PAIR_CHUNK):
        if uf.sets == 1:
            break
        idx = order[lo : lo + _PAIR_CHUNK]
        kept = [
            i
            for i, x, y in zip(idx.tolist(), a[idx].tolist(), b[idx].tolist(), strict=True)
            if uf.union(x, y)
        ]
        if kept:
            sel = np.asarray(kept, dtype=np.int64)
            out.append((a[sel], b[sel], s[sel]))


def _refresh_best_columns(
    e: np.ndarray, labels: np.ndarray, best: np.ndarray, block_rows: int | None = None
) -> None:
    """Set ``best[i]`` to row i's most similar column outside its component, where stale.

    A row is stale when it has no best column yet (-1) or its best column has joined its own
    component. Components only ever merge, so the other components' columns only shrink: a best
    column still outside is still the best (and the first of equal ones), and only stale rows
    need a new scan. Same-component columns are masked with -inf; ties go to the smallest column,
    which also gives the smallest pair key.
    """
    stale = np.flatnonzero((best < 0) | (labels == labels[np.maximum(best, 0)]))
    step = _block_rows(e.shape[0], block_rows)
    neg_inf = np.float32(-np.inf)
    for lo in range(0, stale.size, step):
        rows = stale[lo : lo + step]
        sims = e[rows] @ e.T
        np.copyto(sims, neg_inf, where=labels[rows, None] == labels[None, :])
        best[rows] = np.argmax(sims, axis=1)
        del sims


def _component_best_pairs(e: np.ndarray, labels: np.ndarray, best: np.ndarray) -> Edges:
    """Per component, the first of its rows' best cross pairs in walk order, in walk order."""
    rows = np.arange(labels.size, dtype=np.int64)
    a, b = np.minimum(rows, best), np.maximum(rows, best)
    s = pair_similarity(e, a, b)
    order = np.lexsort((b, a, -s, labels))  # per component, its first pair in walk order
    first = order[np.r_[True, labels[order][1:] != labels[order][:-1]]]
    a, b, s = a[first], b[first], s[first]
    order = _walk_order(a, b, s)
    return a[order], b[order], s[order]


def best_cross_pairs(
    embeddings: np.ndarray, labels: np.ndarray, block_rows: int | None = None
) -> Edges:
    """Each component's most similar pair to a row of another component (one Borůvka pass).

    ``labels[i]`` names the component of row ``i`` (at least two components). For every row, its
    best column outside its own component is found block by block; each component then keeps the
    pair that comes first in the walk order. Returns ``(a, b, s)`` with ``a < b``, in walk order.
    """
    e = np.ascontiguousarray(embeddings, dtype=np.float32)
    labels = np.asarray(labels)
    best = np.full(e.shape[0], -1, dtype=np.int64)
    _refresh_best_columns(e, labels, best, block_rows)
    return _component_best_pairs(e, labels, best)


def spanning_edges_knn(
    embeddings: np.ndarray,
    k: int,
    progress: Progress | None = None,
    block_rows: int | None = None,
) -> Edges:
    """An approximate maximum spanning tree from ``k`` nearest neighbours per row.

    Same contract as :func:`psirag.tree.build.spanning_edges`: ``(a, b, s)`` with ``a < b``,
    n - 1 edges sorted by ``(-s, a, b)``; equal to it when ``k >= n - 1`` (see the module
    docstring). Kruskal over the candidate pairs, then Borůvka passes until one component
    remains (each pass at least halves the components and rescans only the rows whose best
    cross column was absorbed). Memory O(n·k) plus one block.
    """
    e = edge_rows(embeddings, k)
    n = e.shape[0]
    if n < 2:
        return no_edges()
    best = np.full(n, -1, dtype=np.int64)  # each row's best column in another component

    def joins(labels: np.ndarray) -> Edges:
        _refresh_best_columns(e, labels, best, block_rows)
        return _component_best_pairs(e, labels, best)

    return spanning_from_candidates(
        n, knn_candidates(e, k, block_rows=block_rows, progress=progress), joins
    )


def edge_rows(embeddings: np.ndarray, k: int) -> np.ndarray:
    """The rows as contiguous float32, the form every neighbour search reads, once ``k`` (the
    neighbours per row) is checked."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    return np.ascontiguousarray(embeddings, dtype=np.float32)


def no_edges() -> Edges:
    """The edge set of fewer than two rows."""
    empty = np.empty(0, dtype=np.int64)
    return empty, empty.copy(), np.empty(0, dtype=np.float32)


def spanning_from_candidates(
    n: int, candidates: Edges, joins: Callable[[np.ndarray], Edges]
) -> Edges:
    """Kruskal over the candidate pairs, then ``joins(labels)`` (each component's best pairs to
    another) until one component remains; the edges in walk order, as ``spanning_edges`` gives.

    ``candidates`` is released once Kruskal has read it, so callers should pass it directly."""
    uf = UnionFind(n)
    kept: list[Edges] = []
    _kruskal(uf, *candidates, kept)
    del candidates
    while uf.sets > 1:
        _kruskal(uf, *joins(uf.labels()), kept)
    edge_a = np.concatenate([p[0] for p in kept])
    edge_b = np.concatenate([p[1] for p in kept])
    edge_s = np.concatenate([p[2] for p in kept])
    order = _walk_order(edge_a, edge_b, edge_s)
    return edge_a[order], edge_b[order], edge_s[order]


__all__ = ["BLOCK_BYTES", "best_cross_pairs", "knn_candidates", "spanning_edges_knn"]
