"""The one top-k helper every ranked list uses (tree layers, BM25, dense, keyword phrases)."""

from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int, ids: np.ndarray | None = None) -> np.ndarray:
    """Positions of the ``k`` best ``scores``, best first; ties by ``ids`` (default: position).

    Exact at the cut too: every score tied with the k-th joins the candidates before the sort,
    so which of several equal scores is kept never depends on the partition's internal order.
    """
    scores = np.asarray(scores)
    n = int(scores.size)
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.int64)
    if n > k:
        kth = scores[np.argpartition(-scores, k - 1)[:k]].min()
        cand = np.flatnonzero(scores >= kth)
    else:
        cand = np.arange(n)
    key = cand if ids is None else np.asarray(ids)[cand]
    return cand[np.lexsort((key, -scores[cand]))][:k].astype(np.int64, copy=False)


def first_copies(text_of: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask over leaves: for each text, its first leaf among the ``allowed`` ones (all
    leaves when None). ``text_of[i]`` is the first leaf holding leaf ``i``'s text (the index's
    ``first_copy``), so a repeated text counts once, and a copy stands in for it when a
    document filter leaves its first leaf out."""
    text_of = np.asarray(text_of)
    if allowed is None:
        return text_of == np.arange(text_of.size)
    cand = np.flatnonzero(allowed)
    keep = np.zeros(text_of.size, dtype=bool)
    keep[cand[np.unique(text_of[cand], return_index=True)[1]]] = True
    return keep


__all__ = ["first_copies", "top_k"]
