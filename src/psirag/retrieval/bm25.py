"""Sparse retrieval: BM25 (Lucene variant) over leaf texts with English stopwords and stemming."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from psirag.errors import InputError
from psirag.retrieval.ranking import top_k

# bm25s sets its own logger to DEBUG on import, so every build printed "Building index from IDs
# objects" through any handler the application installs, even with -q.
logging.getLogger("bm25s").setLevel(logging.WARNING)

_STEMMER = Stemmer.Stemmer("english")
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
"""bm25s's default token pattern: two or more word characters."""
_STOPWORDS = frozenset(STOPWORDS_EN)


def has_indexable_word(texts: Iterable[str]) -> bool:
    """Whether any text holds a word BM25 would index (two or more word characters, not an
    English stopword), read the way bm25s tokenizes. Stops at the first such word, so a real
    corpus costs a few regex matches."""
    for text in texts:
        for match in _TOKEN.finditer(text.lower()):
            if match.group() not in _STOPWORDS:
                return True
    return False


def check_indexable(texts: Sequence[str]) -> None:
    """Refuse a corpus that gives BM25 an empty vocabulary (bm25s would fail inside with
    ``max() arg is an empty sequence``): all stopwords, single letters, NUL bytes or emoji."""
    if not has_indexable_word(texts):
        raise InputError(
            f"nothing to index: the {len(texts):,} chunk(s) hold no word that search can use "
            "(only stopwords, single characters, symbols, emoji or NUL bytes); "
            "index documents with real words"
        )


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
        check_indexable(texts)
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
        cand = cand[top_k(s[cand], k, cand)]
        return cand, s[cand]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        np.save(folder / "first_copy.npy", self.first_copy, allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> SparseIndex:
        retriever = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False, verbosity=0)
        first = np.load(folder / "first_copy.npy", allow_pickle=False)
        return cls(retriever, first)
