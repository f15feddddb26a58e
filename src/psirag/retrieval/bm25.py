"""Sparse retrieval: BM25 (Lucene variant) over leaf texts with English stopwords and stemming."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

_STEMMER = Stemmer.Stemmer("english")


def _tokenize(texts: Sequence[str]) -> list[list[str]]:
    return bm25s.tokenize(
        list(texts), stopwords="en", stemmer=_STEMMER, return_ids=False, show_progress=False
    )


class SparseIndex:
    """A bm25s index plus the duplicate map that lets search drop repeated texts."""

    def __init__(self, retriever: bm25s.BM25, first_copy: np.ndarray) -> None:
        self.retriever = retriever
        self.first_copy = np.asarray(first_copy, dtype=np.int64)
        self._is_first = self.first_copy == np.arange(self.first_copy.size)

    @classmethod
    def build(
        cls, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75, progress: bool = False
    ) -> SparseIndex:
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        tokens = bm25s.tokenize(
            list(texts), stopwords="en", stemmer=_STEMMER, show_progress=progress
        )
        retriever.index(tokens, show_progress=progress)
        seen: dict[str, int] = {}
        first = np.array([seen.setdefault(t, i) for i, t in enumerate(texts)], dtype=np.int64)
        return cls(retriever, first)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every leaf (0 where no query term occurs)."""
        vocab = self.retriever.vocab_dict
        terms = [t for t in _tokenize([query])[0] if t in vocab]
        if not terms:
            return np.zeros(self.first_copy.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(terms), dtype=np.float32)

    def search(
        self, query: str, *, k: int = 10, allowed_leaves: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k leaves with a positive score, best first, one per distinct text."""
        s = self.scores(query)
        keep = self._is_first & (s > 0)
        if allowed_leaves is not None:
            keep &= allowed_leaves
        cand = np.flatnonzero(keep)
        if cand.size > k:
            cand = cand[np.argpartition(-s[cand], k - 1)[:k]]
        cand = cand[np.lexsort((cand, -s[cand]))]
        return cand, s[cand]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        np.save(folder / "first_copy.npy", self.first_copy, allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> SparseIndex:
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        retriever = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False, verbosity=0)
        first = np.load(folder / "first_copy.npy", allow_pickle=False)
        return cls(retriever, first)
