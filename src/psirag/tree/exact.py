"""The exact walk's edges (SPEC 1.3): the similarity matrix and its maximum spanning tree.

The paper walks all n(n-1)/2 chunk pairs in descending similarity and merges trees as it goes.
Only the pairs that join two different trees ("effective" pairs) change anything, and those are
exactly the edges Kruskal's algorithm keeps: the maximum spanning tree under the strict order
``(-S[i, j], i, j)``. A strict order makes that tree unique, so Prim's algorithm on the dense
matrix finds the same edges in O(n^2) time and O(n) extra memory. Replaying Algorithm 1 on those
n - 1 edges, in walk order (:func:`psirag.tree.merge.merge_walk`), gives the same tree as the
full walk without sorting n^2/2 pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from psirag.errors import InputError, ResourceError
from psirag.tree import machine

_SYMMETRISE_BLOCK = 1024


def exact_fits(n: int) -> bool:
    """Whether the exact build's n x n float32 matrix fits in half the free memory."""
    return 4 * n * n <= machine.available_memory_bytes() // 2


def check_exact_memory(n: int) -> None:
    """Refuse an exact build whose n x n float32 matrix would take over half the free memory."""
    if not exact_fits(n):
        need = 4 * n * n
        limit = machine.available_memory_bytes() // 2
        raise ResourceError(
            f"an exact tree over {n:,} chunks needs a {n:,} x {n:,} similarity matrix "
            f"({need / 2**30:.1f} GiB), more than half of the available memory "
            f"({2 * limit / 2**30:.1f} GiB). Use --tree-mode knn (or auto) for the approximate "
            "tree from nearest neighbours, in O(n·k) memory; or index fewer chunks, use "
            "--tree-per-document, or use a machine with more memory."
        )


def validate_embeddings(embeddings: np.ndarray) -> np.ndarray:
    """Return a C-contiguous float32 (n, d) view; reject shapes and values a tree cannot use."""
    e = np.asarray(embeddings)
    if e.ndim != 2:
        raise InputError(f"embeddings must be a 2-d array (n, dim), got shape {e.shape}")
    if e.shape[0] == 0:
        raise InputError("cannot build a tree over zero chunks: the corpus is empty")
    e = np.ascontiguousarray(e, dtype=np.float32)
    bad = ~np.isfinite(e).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise InputError(f"embeddings contain NaN or infinite values (rows {rows})")
    norms = np.linalg.norm(e, axis=1)
    if (norms == 0).any():
        rows = np.flatnonzero(norms == 0)[:5].tolist()
        raise InputError(f"embeddings contain all-zero vectors (rows {rows})")
    return e


def similarity_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Float32 ``E @ E.T`` made exactly symmetric (the upper triangle is authoritative).

    BLAS may round ``S[i, j]`` and ``S[j, i]`` differently; SPEC 1.3 orders pairs by ``S[i, j]``
    with ``i < j``, so the lower triangle is overwritten with the upper one, block by block.
    """
    e = np.ascontiguousarray(embeddings, dtype=np.float32)
    s = e @ e.T
    n = s.shape[0]
    for lo in range(0, n, _SYMMETRISE_BLOCK):
        hi = min(lo + _SYMMETRISE_BLOCK, n)
        s[hi:, lo:hi] = s[lo:hi, hi:].T
        block = s[lo:hi, lo:hi]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return s


Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while the spanning edges are found (for progress bars)."""


def spanning_edges(
    similarity: np.ndarray, progress: Progress | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The effective pairs of the descending walk, in walk order.

    Returns ``(i, j, s)`` with ``i < j``: the maximum spanning tree of ``similarity`` under the
    strict order ``(-S[i, j], i, j)``, sorted by that order. Prim's algorithm; ties in similarity
    are resolved by the pair key so the result equals Kruskal's on the full sorted list.
    """
    s = similarity
    n = s.shape[0]
    if n < 2:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), np.empty(0, dtype=np.float32)
    neg_inf = np.float32(-np.inf)
    best = np.full(n, neg_inf, dtype=np.float32)  # best similarity to the grown tree
    best_from = np.full(n, -1, dtype=np.int64)  # tree vertex giving that similarity
    free = np.ones(n, dtype=bool)
    better = np.empty(n, dtype=bool)
    equal = np.empty(n, dtype=bool)
    edge_a = np.empty(n - 1, dtype=np.int64)
    edge_b = np.empty(n - 1, dtype=np.int64)
    edge_s = np.empty(n - 1, dtype=np.float32)

    u = 0
    free[u] = False
    report_every = max(1, (n - 1) // 100)
    for step in range(n - 1):
        if progress is not None and step % report_every == 0:
            progress(step, n - 1)
        row = s[u]
        np.equal(row, best, out=equal)
        equal &= free
        if equal.any():
            # Same similarity as the current best edge: keep the smaller pair key.
            tied = np.flatnonzero(equal)
            cur = best_from[tied]
            new_key = np.minimum(tied, u) * n + np.maximum(tied, u)
            old_key = np.minimum(tied, cur) * n + np.maximum(tied, cur)
            best_from[tied[new_key < old_key]] = u
        np.greater(row, best, out=better)
        better &= free
        np.copyto(best, row, where=better)
        np.copyto(best_from, u, where=better)

        v = int(np.argmax(best))
        top = best[v]
        if np.count_nonzero(best == top) > 1:
            cands = np.flatnonzero(best == top)
            src = best_from[cands]
            keys = np.minimum(cands, src) * n + np.maximum(cands, src)
            v = int(cands[np.argmin(keys)])
        a = int(best_from[v])
        edge_a[step], edge_b[step], edge_s[step] = min(a, v), max(a, v), top
        free[v] = False
        best[v] = neg_inf
        u = v
    if progress is not None:
        progress(n - 1, n - 1)
    order = np.lexsort((edge_b, edge_a, -edge_s))
    return edge_a[order], edge_b[order], edge_s[order]


__all__ = [
    "Progress",
    "check_exact_memory",
    "exact_fits",
    "similarity_matrix",
    "spanning_edges",
    "validate_embeddings",
]
