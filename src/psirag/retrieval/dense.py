"""The exact dense list: cosine over every leaf embedding, one leaf per distinct text."""

from __future__ import annotations

import numpy as np

from psirag.index_data import IndexData
from psirag.retrieval.ranking import first_copies, top_k

Ranked = tuple[np.ndarray, np.ndarray]
"""A candidate list: leaf ids best first, and their scores."""


class DenseFlat:
    """Exact cosine over every leaf embedding, one leaf per distinct text (as BM25 does)."""

    def __init__(self, leaf_vectors: np.ndarray, text_of: np.ndarray) -> None:
        self.vectors = np.ascontiguousarray(np.asarray(leaf_vectors), dtype=np.float32)
        self.text_of = np.asarray(text_of, dtype=np.int64)
        """Each leaf's text, as the first leaf holding it (the index's ``first_copy``)."""
        self.first = first_copies(self.text_of)

    @classmethod
    def of(cls, data: IndexData) -> DenseFlat:
        return cls(data.vector_rows()[: data.n_leaves], data.sparse.first_copy)

    def ranked(self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None) -> Ranked:
        """Top-k leaves by cosine, best first (ties by leaf id), with their scores; ``allowed``
        (a boolean mask over leaves) keeps the ranking inside some documents."""
        scores = self.vectors @ np.asarray(vector, dtype=np.float32).ravel()
        keep = self.first if allowed is None else first_copies(self.text_of, allowed)
        cand = np.flatnonzero(keep)
        cand = cand[top_k(scores[cand], k, cand)]
        return cand, scores[cand]


__all__ = ["DenseFlat", "Ranked"]
