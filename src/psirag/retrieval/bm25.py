"""Sparse retrieval: BM25 (Lucene variant) over leaf texts with English stopwords and stemming."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from psirag.errors import InputError
from psirag.ids import nfc
from psirag.retrieval.duplicates import first_copy_of
from psirag.retrieval.ranking import first_copies, top_k

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
        for match in _TOKEN.finditer(nfc(text).lower()):
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


def _tokenize(texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
    """bm25s's tokens of ``texts``, for the index and for queries alike. NFC first: a word
    typed composed (U+00E9) and decomposed (e + U+0301) is one token."""
    return bm25s.tokenize(
        [nfc(t) for t in texts],
        stopwords="en",
        stemmer=_STEMMER,
        return_ids=False,
        show_progress=progress,
    )


COUNT_FILES = ("doc_ptr.npy", "doc_terms.npy", "doc_tf.npy")
"""Saved beside bm25s's files: per-chunk term counts, what an update rescores from."""


@dataclass(frozen=True, eq=False)
class TermCounts:
    """Each chunk's terms (ids of ``vocab``, bm25s's tokens) with their counts, as CSR rows
    in chunk order: BM25 of any corpus made of these chunks is arithmetic on these arrays, so
    an update tokenises only its new chunks. Immutable; the vocabulary only grows."""

    vocab: dict[str, int]
    doc_ptr: np.ndarray
    terms: np.ndarray
    tf: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.doc_ptr.size - 1)

    @classmethod
    def of(cls, texts: Sequence[str], *, progress: bool = False) -> TermCounts:
        """The counts of ``texts``, tokenised the way bm25s indexes them."""
        return cls({}, np.zeros(1, dtype=np.int64), _EMPTY_I32, _EMPTY_I32).append(
            texts, progress=progress
        )

    def append(self, texts: Sequence[str], *, progress: bool = False) -> TermCounts:
        """These counts with ``texts`` added as new chunks at the end."""
        tokens = _tokenize(texts, progress=progress)
        vocab = self.vocab
        fresh = {t for doc in tokens for t in doc if t not in vocab}
        if fresh:
            vocab = dict(vocab)
            for t in sorted(fresh):
                vocab[t] = len(vocab)
        lengths = np.fromiter((len(d) for d in tokens), dtype=np.int64, count=len(tokens))
        flat = np.fromiter(
            (vocab[t] for doc in tokens for t in doc), dtype=np.int64, count=int(lengths.sum())
        )
        doc = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
        pair = np.sort(doc * max(len(vocab), 1) + flat)
        start = (
            np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1]))) if pair.size else pair
        )
        tf = np.diff(np.append(start, pair.size)).astype(np.int32)
        keys = pair[start]
        rows = keys // max(len(vocab), 1)
        ptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=len(tokens)))))
        return TermCounts(
            vocab,
            np.concatenate([self.doc_ptr, self.doc_ptr[-1] + ptr[1:]]).astype(np.int64),
            np.concatenate([self.terms, (keys % max(len(vocab), 1)).astype(np.int32)]),
            np.concatenate([self.tf, tf]),
        )

    def select(self, keep: np.ndarray) -> TermCounts:
        """These counts with only the chunks where ``keep`` is true."""
        keep = np.asarray(keep, dtype=bool)
        if keep.size != self.n_docs:
            raise ValueError(f"keep has {keep.size} entries for {self.n_docs} chunks")
        lengths = np.diff(self.doc_ptr)
        mask = np.repeat(keep, lengths)
        ptr = np.concatenate(([0], np.cumsum(lengths[keep]))).astype(np.int64)
        return TermCounts(self.vocab, ptr, self.terms[mask], self.tf[mask])

    def retriever(self, *, k1: float, b: float) -> bm25s.BM25:
        """The bm25s index of these chunks (Lucene BM25, as ``bm25s.BM25.index`` computes it:
        float32 idf, the tf part in float64, scores stored as float32), vectorised."""
        n = self.n_docs
        n_vocab = len(self.vocab)
        lengths = np.diff(self.doc_ptr)
        doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
        tf = self.tf.astype(np.float32)
        dl = np.bincount(doc, weights=self.tf, minlength=n)
        avg = np.float64(dl.mean()) if n else np.float64(0.0)
        df = np.bincount(self.terms, minlength=n_vocab).astype(np.float64)
        idf = np.zeros(n_vocab, dtype=np.float32)
        seen = df > 0
        idf[seen] = np.log(1.0 + (n - df[seen] + 0.5) / (df[seen] + 0.5))
        norm = k1 * ((1 - b) + b * dl[doc] / avg) + tf
        scores = (idf[self.terms].astype(np.float64) * (tf / norm)).astype(np.float32)
        order = np.argsort(self.terms, kind="stable")  # by term, chunks in order within each
        indptr = np.concatenate(([0], np.cumsum(np.bincount(self.terms, minlength=n_vocab))))
        retriever = bm25s.BM25(k1=k1, b=b, method="lucene")
        retriever.scores = {
            "data": scores[order],
            "indices": doc[order].astype(np.int32),
            "indptr": indptr.astype(np.int64),
            "num_docs": n,
        }
        vocab_dict = dict(self.vocab)
        vocab_dict.setdefault("", n_vocab)  # bm25s's empty token, as its index() adds it
        retriever.vocab_dict = vocab_dict
        retriever.unique_token_ids_set = set(vocab_dict.values())
        retriever.nonoccurrence_array = None
        return retriever


_EMPTY_I32 = np.empty(0, dtype=np.int32)


class SparseIndex:
    """A bm25s index plus the duplicate map that lets search drop repeated texts, and the
    per-chunk term counts it was computed from (None for an index saved without them)."""

    def __init__(
        self, retriever: bm25s.BM25, first_copy: np.ndarray, counts: TermCounts | None = None
    ) -> None:
        self.retriever = retriever
        self.first_copy = np.asarray(first_copy, dtype=np.int64)
        self._is_first = first_copies(self.first_copy)
        self.counts = counts

    @classmethod
    def build(
        cls, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75, progress: bool = False
    ) -> SparseIndex:
        check_indexable(texts)
        return cls.from_counts(TermCounts.of(texts, progress=progress), texts, k1=k1, b=b)

    @classmethod
    def from_counts(
        cls, counts: TermCounts, texts: Sequence[str], *, k1: float = 1.5, b: float = 0.75
    ) -> SparseIndex:
        """BM25 over chunks whose term counts are known (``texts``: the same chunks' texts,
        for the duplicate map): what :meth:`build` gives, without tokenising again."""
        if counts.n_docs != len(texts):
            raise ValueError(f"term counts of {counts.n_docs} chunks for {len(texts)} texts")
        check_indexable(texts)
        first = first_copy_of(texts)  # texts equal up to layout count once (duplicates.py)
        return cls(counts.retriever(k1=k1, b=b), first, counts)

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
        if allowed_leaves is None:
            first = self._is_first
        else:  # a copy stands in for its text when the filter leaves the first one out
            first = first_copies(self.first_copy, allowed_leaves)
        keep = first & (s > 0)
        cand = np.flatnonzero(keep)
        cand = cand[top_k(s[cand], k, cand)]
        return cand, s[cand]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.retriever.save(str(folder), show_progress=False)
        np.save(folder / "first_copy.npy", self.first_copy, allow_pickle=False)
        if self.counts is not None:
            c = self.counts
            for name, array in zip(COUNT_FILES, (c.doc_ptr, c.terms, c.tf), strict=True):
                np.save(folder / name, np.ascontiguousarray(array), allow_pickle=False)

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> SparseIndex:
        """A saved index; its term counts too where they were saved (an index from before
        they were gets them from its first update, which tokenises every chunk once)."""
        retriever = bm25s.BM25.load(str(folder), mmap=mmap, show_progress=False, verbosity=0)
        first = np.load(folder / "first_copy.npy", allow_pickle=False)
        counts = None
        if all((folder / name).is_file() for name in COUNT_FILES):
            ptr, terms, tf = (
                np.load(folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
                for name in COUNT_FILES
            )
            vocab = {t: int(i) for t, i in retriever.vocab_dict.items() if t != ""}
            n_vocab = int(np.asarray(retriever.scores["indptr"]).size - 1)
            if (
                ptr.ndim != 1
                or ptr.size != first.size + 1
                or int(ptr[-1]) != terms.size
                or terms.size != tf.size
                or len(vocab) != n_vocab
                or (terms.size and int(terms.max()) >= n_vocab)
            ):
                raise ValueError(f"{folder}: the saved term counts disagree with the BM25 index")
            counts = TermCounts(vocab, np.asarray(ptr), np.asarray(terms), np.asarray(tf))
        return cls(retriever, first, counts)
