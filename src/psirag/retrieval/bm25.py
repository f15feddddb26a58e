"""Sparse retrieval: BM25 (Lucene variant) over leaf texts with English stopwords and stemming.

A search neither imports ``bm25s`` nor scipy (which ``bm25s`` imports): the query is tokenised
here the way ``bm25s.tokenize`` does it, and scored from the saved arrays, memory-mapped, with
numpy. ``bm25s`` is imported only to write an index saved in its own file layout again."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from psirag.errors import InputError
from psirag.ids import nfc
from psirag.retrieval.duplicates import DuplicateMap
from psirag.retrieval.ranking import first_copies, top_k
from psirag.rows import csr_positions
from psirag.stable_hash import find_hashed, hash64, hashes_agree

if TYPE_CHECKING:
    import bm25s

_TOKEN = re.compile(r"(?u)\b\w\w+\b")
"""bm25s's default token pattern: two or more word characters."""
STOPWORDS_EN = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "  # noqa: SIM905
    "then there these they this to was will with".split()
)
"""Lucene's English stop set, the list ``bm25s.tokenize(stopwords="en")`` drops (a test checks
that the two are equal): kept here so that a query is tokenised without importing bm25s, and so
that the tokens of an index never depend on the installed bm25s."""
_STOPWORDS = STOPWORDS_EN


@cache
def _stemmer() -> Any:
    """The English Snowball stemmer (PyStemmer), made on first use."""
    import Stemmer

    return Stemmer.Stemmer("english")


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
    """The tokens of ``texts``, for the index and for queries alike, as
    ``bm25s.tokenize(texts, stopwords="en", stemmer=<English Snowball>, return_ids=False)``
    gives them: lower case, runs of two or more word characters, stopwords dropped, then
    stemmed (each distinct word once). NFC first: a word typed composed (U+00E9) and
    decomposed (e + U+0301) is one token."""
    words = _words(texts, progress=progress)
    distinct = list(dict.fromkeys(chain.from_iterable(words)))
    stem_of = dict(zip(distinct, _stemmer().stemWords(distinct), strict=True))
    return [[stem_of[w] for w in doc] for doc in words]


def _words(texts: Sequence[str], *, progress: bool = False) -> list[list[str]]:
    """The words of ``texts`` before stemming: lower case (after NFC), runs of two or more word
    characters, stopwords dropped (what :func:`_tokenize` stems)."""
    split, stop = _TOKEN.findall, _STOPWORDS
    rows: Iterable[str] = texts
    if progress:
        from tqdm.auto import tqdm

        rows = tqdm(texts, desc="Split strings", leave=False)
    return [[w for w in split(nfc(t).lower()) if w not in stop] for t in rows]


def _load_array(path: Path, mmap_mode: Literal["r"] | None = None) -> np.ndarray:
    """A saved array; an OS error names ``path`` even where numpy's memory map gives none
    (mmap's ``dup`` of the descriptor fails with EMFILE and no file name)."""
    from psirag.oserrors import with_path
    from psirag.rows import load_npy

    try:
        return load_npy(path, mmap=mmap_mode == "r")
    except OSError as exc:
        raise with_path(exc, path) from exc


_hash64 = hash64  # (a module name: tests replace it to force collisions)


class TermIds(Mapping[str, int]):
    """A loaded BM25 vocabulary: term ``i`` is ``terms[i]``, found by its saved 64-bit hash.
    A load makes no dict of every term (about 250k at 1M chunks, 0.1-0.3 s): a batch of
    tokens is looked up by one vectorised pass over the hashes (:meth:`lookup`). Read as a
    mapping one term at a time, it makes the dict once. Immutable."""

    def __init__(self, terms: list[str], hashes: np.ndarray) -> None:
        self.terms = terms
        self._hashes = hashes
        self._index: dict[str, int] | None = None
        self._lookups = 0
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        """The hashes sorted, with their ids: made on a second lookup (a query after
        another), so that later ones cost O(batch log terms), not a pass over every term."""

    @classmethod
    def restore(cls, terms: list[str], hashes: np.ndarray, where: str) -> TermIds:
        """Saved terms with their saved hashes, checked in size and at sample rows (a
        mismatch is a ValueError naming ``where``)."""
        hashes = np.asarray(hashes)
        if not hashes_agree(terms, hashes, _hash64):
            raise ValueError(f"{where}: the saved term hashes disagree with the terms; rebuild")
        return cls(terms, hashes)

    def hashes(self) -> np.ndarray:
        return self._hashes

    def lookup(self, batch: Sequence[str]) -> np.ndarray:
        """The id of each term of ``batch`` (-1: not held), by one pass over the hashes (the
        strings behind equal hashes compared)."""
        out = np.full(len(batch), -1, dtype=np.int64)
        if not batch or not self.terms:
            return out
        if self._index is not None:
            index = self._index
            return np.fromiter((index.get(t, -1) for t in batch), dtype=np.int64, count=len(batch))
        if self._sorted is None and self._lookups > 0:  # looked up again (queries): sort once
            order = np.argsort(self._hashes, kind="stable")
            self._sorted = (self._hashes[order], order)
        self._lookups += 1
        return find_hashed(self.terms, self._hashes, batch, _hash64(batch), self._sorted)

    def with_new(self, new: list[str]) -> TermIds:
        """These terms and ``new`` (terms not held) numbered on after them (a copy)."""
        got = TermIds(self.terms + new, np.concatenate([self._hashes, _hash64(new)]))
        if self._index is not None:
            start = len(self.terms)
            got._index = {
                **self._index,
                **dict(zip(new, range(start, start + len(new)), strict=True)),
            }
        return got

    def _dict(self) -> dict[str, int]:
        if self._index is None:
            self._index = dict(zip(self.terms, range(len(self.terms)), strict=True))
        return self._index

    def __getitem__(self, term: str) -> int:
        return self._dict()[term]

    def __contains__(self, term: object) -> bool:
        return term in self._dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)


def term_ids(vocab: Mapping[str, int], tokens: Sequence[str]) -> list[int]:
    """The ids of ``tokens`` held by ``vocab`` (order and repeats kept, unknown ones left out)."""
    if isinstance(vocab, TermIds):
        return [i for i in vocab.lookup(tokens).tolist() if i >= 0]
    return [vocab[t] for t in tokens if t in vocab]


COUNT_FILES = ("doc_ptr.npy", "doc_terms.npy", "doc_tf.npy")
"""Saved beside bm25s's files: per-chunk term counts, what an update rescores from."""


@dataclass(frozen=True, eq=False)
class TermCounts:
    """Each chunk's terms (ids of ``vocab``, bm25s's tokens) with their counts, as CSR rows
    in chunk order: BM25 of any corpus made of these chunks is arithmetic on these arrays, so
    an update tokenises only its new chunks. Immutable; the vocabulary only grows."""

    vocab: Mapping[str, int]  # a dict, or a loaded vocabulary's TermIds
    doc_ptr: np.ndarray
    terms: np.ndarray
    tf: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.doc_ptr.size - 1)

    @classmethod
    def of(cls, texts: Sequence[str], *, progress: bool = False) -> TermCounts:
        """The counts of ``texts``, tokenised the way bm25s indexes them, :data:`TOKENIZE_BATCH`
        chunks at a time (the same counts as one pass: term ids are renumbered in sorted order
        at the end)."""
        counts = cls({}, np.zeros(1, dtype=np.int64), _EMPTY_I32, _EMPTY_I32)
        if len(texts) <= TOKENIZE_BATCH:
            return counts.append(texts, progress=progress)
        for lo in range(0, len(texts), TOKENIZE_BATCH):
            counts = counts.append(texts[lo : lo + TOKENIZE_BATCH], progress=progress)
        return counts._numbered_in_order()

    def _numbered_in_order(self) -> TermCounts:
        """These counts with term ids in sorted term order (as one :meth:`append` of every
        chunk numbers them), each chunk's terms sorted again, a batch of chunks at a time."""
        names = sorted(self.vocab)
        vocab = dict(zip(names, range(len(names)), strict=True))
        new_of = np.fromiter((vocab[t] for t in self.vocab), dtype=np.int64, count=len(vocab))
        n_vocab = max(len(vocab), 1)
        terms = np.empty_like(self.terms)
        tf = np.empty_like(self.tf)
        for lo in range(0, self.n_docs, TOKENIZE_BATCH):
            ptr = self.doc_ptr[lo : lo + TOKENIZE_BATCH + 1]
            a, b = int(ptr[0]), int(ptr[-1])
            doc = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
            renamed = new_of[self.terms[a:b]]
            order = np.argsort(doc * n_vocab + renamed)
            terms[a:b] = renamed[order]
            tf[a:b] = self.tf[a:b][order]
        return TermCounts(vocab, self.doc_ptr, terms, tf)

    def append(self, texts: Sequence[str], *, progress: bool = False) -> TermCounts:
        """These counts with ``texts`` added as new chunks at the end."""
        # the tokens of _tokenize, each distinct word stemmed and looked up in the vocabulary
        # once (a build's cost is these passes over every word: one dict lookup per word)
        words = _words(texts, progress=progress)
        distinct = list(dict.fromkeys(chain.from_iterable(words)))
        stems = _stemmer().stemWords(distinct)
        vocab: Mapping[str, int] = self.vocab
        if isinstance(vocab, TermIds):  # a loaded vocabulary: no dict of every term
            held = vocab.lookup(stems).tolist()
            fresh = sorted({t for t, i in zip(stems, held, strict=True) if i < 0})
            first = len(vocab)
            new_id = dict(zip(fresh, range(first, first + len(fresh)), strict=True))
            if fresh:
                vocab = vocab.with_new(fresh)
            stem_ids = [i if i >= 0 else new_id[t] for t, i in zip(stems, held, strict=True)]
        else:
            fresh_set = {t for t in stems if t not in vocab}
            if fresh_set:
                grown = dict(vocab)
                for t in sorted(fresh_set):
                    grown[t] = len(grown)
                vocab = grown
            stem_ids = list(map(vocab.__getitem__, stems))
        id_of = dict(zip(distinct, stem_ids, strict=True))
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        flat = np.fromiter(
            map(id_of.__getitem__, chain.from_iterable(words)),
            dtype=np.int64,
            count=int(lengths.sum()),
        )
        doc = np.repeat(np.arange(len(words), dtype=np.int64), lengths)
        pair = np.sort(doc * max(len(vocab), 1) + flat)
        start = (
            np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1]))) if pair.size else pair
        )
        tf = np.diff(np.append(start, pair.size)).astype(np.int32)
        keys = pair[start]
        rows = keys // max(len(vocab), 1)
        ptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=len(words)))))
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

    def retriever(self, *, k1: float, b: float) -> SavedScores:
        """Precomputed scores of these chunks, as ``bm25s.BM25.index`` computes them (Lucene
        BM25: float32 idf, the tf part in float64, scores stored as float32), vectorised."""
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
        return SavedScores(
            scores[order],
            doc[order].astype(np.int32),
            indptr.astype(np.int64),
            n,
            dict(self.vocab),
            {**_LUCENE, "k1": k1, "b": b},
            empty_id=n_vocab,  # bm25s's empty token, as its index() adds it
        )


_EMPTY_I32 = np.empty(0, dtype=np.int32)

TOKENIZE_BATCH = 50_000
"""Chunks a build tokenises at a time: bm25s's token lists of a whole 1M-chunk corpus are
Python strings, several GiB at once."""


@dataclass(frozen=True, eq=False)
class _Segment:
    """The postings of a run of consecutive chunks: their term counts (doc-major, what a merge
    and a removal read) and the same counts term-major (what a query reads), with a tombstone
    mask. Immutable; a removal makes a new mask, so an older index value stays valid.

    ``term_ids`` lists the terms the segment holds (sorted) and ``term_ptr`` has one run per
    listed term, so a small segment costs its own terms, not the whole vocabulary; None (a
    segment saved in postings format 1): ``term_ptr`` has one run per term id."""

    counts: TermCounts
    term_ptr: np.ndarray  # int64, one run per entry of term_ids (per term id when None)
    post_doc: np.ndarray  # int32 local chunk number, term-major, chunks in order within a term
    post_tf: np.ndarray  # int32
    doc_len: np.ndarray  # int64 tokens per chunk
    alive: np.ndarray  # bool per chunk: False once removed
    term_ids: np.ndarray | None = None  # int32 sorted terms held (None: term_ptr is dense)
    unchecked: str | None = None
    """A loaded segment's folder until its chunks' term ids are first read and checked (a load
    does not pass over every term id of the index: an add never reads the large segments')."""

    def doc_counts(self) -> TermCounts:
        """The term counts, their term ids checked against the vocabulary on the first read
        of a loaded segment (a ValueError naming the folder)."""
        if self.unchecked is not None:
            c = self.counts
            if c.terms.size and int(c.terms.max()) >= len(c.vocab):
                raise ValueError(
                    f"{self.unchecked}: a segment's term ids are outside the BM25 vocabulary; "
                    "rebuild the index"
                )
            object.__setattr__(self, "unchecked", None)
        return self.counts

    @classmethod
    def of(cls, counts: TermCounts, n_terms: int = 0) -> _Segment:
        n = counts.n_docs
        doc = np.repeat(np.arange(n, dtype=np.int32), np.diff(counts.doc_ptr))
        order = np.argsort(counts.terms, kind="stable")
        by_term = np.asarray(counts.terms)[order]
        term_ids, starts = np.unique(by_term, return_index=True)
        term_ptr = np.append(starts, by_term.size)
        doc_len = np.bincount(doc, weights=counts.tf, minlength=n).astype(np.int64)
        return cls(
            counts,
            term_ptr.astype(np.int64),
            doc[order],
            np.asarray(counts.tf)[order].astype(np.int32),
            doc_len,
            np.ones(n, dtype=bool),
            term_ids.astype(np.int32),
        )

    def span(self, term: int) -> tuple[int, int]:
        """The run of ``term``'s postings (empty where the segment does not hold it)."""
        ptr = self.term_ptr
        if self.term_ids is None:
            if term + 1 < ptr.size:
                return int(ptr[term]), int(ptr[term + 1])
            return 0, 0
        j = int(np.searchsorted(self.term_ids, term))
        if j < self.term_ids.size and int(self.term_ids[j]) == term:
            return int(ptr[j]), int(ptr[j + 1])
        return 0, 0

    def term_df(self) -> tuple[np.ndarray, np.ndarray]:
        """The terms this segment holds and, per term, its chunks (dead ones included)."""
        counts = np.diff(self.term_ptr)
        if self.term_ids is None:
            held = np.flatnonzero(counts)
            return held, counts[held]
        return np.asarray(self.term_ids, dtype=np.int64), counts

    @property
    def n_alive(self) -> int:
        return int(self._cache()["n_alive"])

    def _cache(self) -> dict[str, Any]:
        got = self.__dict__.get("_memo")
        if got is None:
            alive = self.alive
            got = {"n_alive": int(np.count_nonzero(alive)), "rank": None}
            if got["n_alive"] != alive.size:
                got["rank"] = np.cumsum(alive) - 1
            object.__setattr__(self, "_memo", got)
        return got

    def name(self) -> str:
        """A name for this segment's files, from its term counts (what every other array is
        made from): equal names, equal files, so a save keeps a saved segment by its name."""
        got = self.__dict__.get("_name")
        if got is None:
            c = self.counts
            got = _digest(c.doc_ptr, c.terms, c.tf)
            object.__setattr__(self, "_name", got)
        return str(got)

    def rank(self, local: np.ndarray) -> np.ndarray:
        """Position among this segment's live chunks of live chunks ``local``."""
        r = self._cache()["rank"]
        return local.astype(np.int64) if r is None else r[local]

    def live(self) -> TermCounts:
        """The term counts of the live chunks."""
        if self.n_alive == self.alive.size:
            return self.doc_counts()
        return self.doc_counts().select(self.alive)


def _digest(*arrays: np.ndarray) -> str:
    """A 96-bit content name of ``arrays`` (dtype, shape and bytes)."""
    import hashlib

    h = hashlib.blake2b(digest_size=12)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.data)
    return h.hexdigest()


POSTINGS_FORMAT = 2
"""Format 2 (issue 24): files named by content and kept by name between generations, a
segment's term pointers over its own terms, the vocabulary in appended parts, df as a saved
array plus a patch. Format 1 (one file set per segment position, the whole vocabulary and df
written by every save) still loads; its first save writes format 2."""
SEGMENT_FILES = (
    "doc_ptr",
    "doc_terms",
    "doc_tf",
    "term_ptr",
    "post_doc",
    "post_tf",
    "doc_len",
    "alive",
)
"""Format 1, per segment ``seg{i}.{name}.npy``: everything a load needs."""
BODY_FILES = (
    "doc_ptr",
    "doc_terms",
    "doc_tf",
    "term_ids",
    "term_ptr",
    "post_doc",
    "post_tf",
    "doc_len",
)
"""Format 2, per segment ``s.{name}.{file}.npy``; its removed chunks (local numbers) are
``s.{name}.dead.{digest}.npy``."""

COMPACT_DEAD_SHARE = 0.25
"""A segment is rewritten without its removed chunks once they are this share of it."""
MERGE_RATIO = 2
"""After an add, the newest segment is merged into the one before it while that one holds at
most this many times its chunks: O(log n) segments, each chunk merged O(log n) times. The
vocabulary's saved parts follow the same rule."""
DF_PATCH_SHARE = 8
"""A save writes df whole again once the terms changed since it was last written whole pass
1/8 of the vocabulary (or :data:`DF_PATCH_MIN`): below that, only the changed entries."""
DF_PATCH_MIN = 4096

Reuse = Callable[[Sequence[str]], bool]
"""A save's way to keep files of the generation it saves on top of: given file names (inside
the BM25 folder), hard-link them all into the new generation and say True, or do nothing and
say False (then they are written)."""


def _no_reuse(names: Sequence[str]) -> bool:
    return False


@dataclass(frozen=True)
class _SavedDf:
    """The df array a save last wrote whole (its file and values) and the terms changed since."""

    name: str
    values: np.ndarray
    touched: np.ndarray  # sorted term ids whose df may differ from ``values`` (or are past it)

    def touching(self, terms: np.ndarray) -> _SavedDf:
        return replace(self, touched=np.union1d(self.touched, terms).astype(np.int64))


@dataclass(frozen=True, eq=False)
class Postings:
    """BM25 statistics kept as counts, scored at query time (issue 24).

    Document frequencies, the number of chunks and their total length are counts an update
    adjusts by its own chunks; idf and the length norm are applied when a query is scored, to
    the postings of its terms only. Chunks live in segments (log-structured: an add makes a
    segment of its chunks and merges small ones, a removal sets tombstones), so an update costs
    in proportion to what it changes, and scores equal a fresh build's bit for bit (the same
    float32 / float64 arithmetic as ``bm25s`` lucene). Immutable.

    A save writes only what the generation it saves on top of lacks: new segments, changed
    tombstones, new terms, and the df entries that changed (see :data:`POSTINGS_FORMAT`).
    """

    vocab: Mapping[str, int]  # a dict, or a loaded vocabulary's TermIds
    segments: tuple[_Segment, ...]
    df: np.ndarray  # int64 per term id: live chunks holding it
    n_docs: int
    total_len: int
    k1: float = 1.5
    b: float = 0.75
    vocab_parts: tuple[tuple[str, int], ...] = ()
    """Saved vocabulary files (name, terms) covering the first term ids, in id order."""
    saved_df: _SavedDf | None = None

    @classmethod
    def of_counts(cls, counts: TermCounts, *, k1: float = 1.5, b: float = 0.75) -> Postings:
        n_terms = len(counts.vocab)
        seg = _Segment.of(counts, n_terms)
        return cls(
            counts.vocab,
            (seg,),
            np.bincount(counts.terms, minlength=n_terms).astype(np.int64),
            counts.n_docs,
            int(seg.doc_len.sum()),
            k1,
            b,
        )

    def _touched(self, terms: np.ndarray) -> _SavedDf | None:
        return None if self.saved_df is None else self.saved_df.touching(terms)

    def add(self, texts: Sequence[str]) -> Postings:
        """These postings with ``texts`` appended as new chunks."""
        counts = TermCounts(self.vocab, np.zeros(1, dtype=np.int64), _EMPTY_I32, _EMPTY_I32)
        counts = counts.append(texts)
        vocab = counts.vocab
        seg = _Segment.of(counts, len(vocab))
        df = self.df
        if len(vocab) > df.size:
            df = np.concatenate([df, np.zeros(len(vocab) - df.size, dtype=np.int64)])
        else:
            df = np.array(df, dtype=np.int64)
        held, n_held = seg.term_df()
        df[held] += n_held
        segments = [*self.segments, seg]
        while len(segments) > 1 and (segments[-2].n_alive <= MERGE_RATIO * segments[-1].n_alive):
            last = segments.pop()
            segments[-1] = _merge(segments[-1], last, len(vocab))
        return replace(
            self,
            vocab=vocab,
            segments=tuple(segments),
            df=df,
            n_docs=self.n_docs + counts.n_docs,
            total_len=self.total_len + int(seg.doc_len.sum()),
            saved_df=self._touched(held),
        )

    def remove(self, keep: np.ndarray) -> Postings:
        """These postings with only the live chunks where ``keep`` is true (chunk order)."""
        keep = np.asarray(keep, dtype=bool)
        if keep.size != self.n_docs:
            raise ValueError(f"keep has {keep.size} entries for {self.n_docs} chunks")
        df = np.array(self.df, dtype=np.int64)
        total = self.total_len
        out = []
        at = 0
        touched = []
        for seg in self.segments:
            mine = keep[at : at + seg.n_alive]
            at += seg.n_alive
            if mine.all():
                out.append(seg)
                continue
            live = np.flatnonzero(seg.alive)
            gone = live[~mine]
            c = seg.counts
            terms = c.terms[csr_positions(c.doc_ptr, gone)]
            if seg.unchecked is not None and terms.size and int(terms.max()) >= len(c.vocab):
                seg.doc_counts()  # raises, naming the folder
            touched.append(np.unique(terms))
            df -= np.bincount(terms, minlength=df.size)
            total -= int(seg.doc_len[gone].sum())
            alive = np.array(seg.alive, dtype=bool)
            alive[gone] = False
            old = seg
            seg = _Segment(
                seg.counts,
                seg.term_ptr,
                seg.post_doc,
                seg.post_tf,
                seg.doc_len,
                alive,
                seg.term_ids,
                unchecked=seg.unchecked,
            )
            if "_name" in old.__dict__:  # the same counts: the same files, not hashed again
                object.__setattr__(seg, "_name", old.__dict__["_name"])
            if seg.n_alive == 0:
                continue
            if seg.alive.size - seg.n_alive > COMPACT_DEAD_SHARE * seg.alive.size:
                seg = _Segment.of(seg.live(), len(self.vocab))
            out.append(seg)
        gone_terms = np.concatenate(touched) if touched else np.empty(0, dtype=np.int64)
        return replace(
            self,
            segments=tuple(out),
            df=df,
            n_docs=int(keep.sum()),
            total_len=total,
            saved_df=self._touched(gone_terms),
        )

    def counts(self) -> TermCounts:
        """The term counts of the live chunks, in chunk order."""
        parts = [seg.live() for seg in self.segments]
        ptr = [np.zeros(1, dtype=np.int64)]
        base = 0
        for c in parts:
            ptr.append(base + c.doc_ptr[1:])
            base += int(c.doc_ptr[-1])
        return TermCounts(
            self.vocab,
            np.concatenate(ptr).astype(np.int64),
            np.concatenate([c.terms for c in parts]) if parts else _EMPTY_I32,
            np.concatenate([c.tf for c in parts]) if parts else _EMPTY_I32,
        )

    def scores(self, term_ids: Sequence[int]) -> np.ndarray:
        """BM25 of every live chunk for a query's term ids (in query order, repeats counted),
        float32: what ``bm25s`` gives for the same corpus built afresh."""
        out = np.zeros(self.n_docs, dtype=np.float32)
        n = self.n_docs
        if n == 0:
            return out
        avg = np.float64(self.total_len / n)
        k1, b = self.k1, self.b
        for t in term_ids:
            df = float(self.df[t])
            if df <= 0:
                continue
            idf = np.float32(np.log(1.0 + (n - df + 0.5) / (df + 0.5)))
            offset = 0
            for seg in self.segments:
                lo, hi = seg.span(t)
                if hi > lo:
                    local = seg.post_doc[lo:hi]
                    tf = seg.post_tf[lo:hi].astype(np.float32)
                    ok = seg.alive[local]
                    if not ok.all():
                        local, tf = local[ok], tf[ok]
                    norm = k1 * ((1 - b) + b * seg.doc_len[local].astype(np.float64) / avg)
                    norm = norm + tf
                    s = (np.float64(idf) * (tf / norm)).astype(np.float32)
                    out[offset + seg.rank(local)] += s
                offset += seg.n_alive
        return out

    # ------------------------------------------------------------------ saving
    def save(self, folder: Path, *, reuse: Reuse = _no_reuse, compact: bool = False) -> None:
        """Write these postings into ``folder``; files ``reuse`` keeps from the generation
        saved before are not written again. ``compact``: one segment without tombstones, the
        vocabulary in one part and df whole (``psirag compact``)."""
        me = self
        if compact:
            me = replace(
                self,
                segments=(_Segment.of(self.counts(), len(self.vocab)),) if self.segments else (),
                vocab_parts=(),
                saved_df=None,
            )
            reuse = _no_reuse
        segments = []
        for seg in me.segments:
            name = seg.name()
            body = [f"s.{name}.{f}.npy" for f in BODY_FILES]
            if not reuse(body):
                c = seg.doc_counts()
                term_ids = seg.term_ids
                term_ptr = seg.term_ptr
                if term_ids is None:  # a format-1 segment: its own terms only from now on
                    term_ids = np.flatnonzero(np.diff(term_ptr)).astype(np.int32)
                    term_ptr = np.append(term_ptr[term_ids], term_ptr[-1])
                arrays = (
                    c.doc_ptr,
                    c.terms,
                    c.tf,
                    term_ids,
                    term_ptr,
                    seg.post_doc,
                    seg.post_tf,
                    seg.doc_len,
                )
                for file, array in zip(body, arrays, strict=True):
                    np.save(folder / file, np.ascontiguousarray(array), allow_pickle=False)
            dead_file = None
            if seg.n_alive < seg.alive.size:
                dead = np.flatnonzero(~np.asarray(seg.alive, dtype=bool)).astype(np.int32)
                dead_file = f"s.{name}.dead.{_digest(dead)}.npy"
                if not reuse([dead_file]):
                    np.save(folder / dead_file, dead, allow_pickle=False)
            segments.append([name, int(seg.alive.size), dead_file])
        parts = me._save_vocab(folder, reuse)
        df_meta, saved_df = me._save_df(folder, reuse)
        meta = {
            "format": POSTINGS_FORMAT,
            "k1": self.k1,
            "b": self.b,
            "n_docs": self.n_docs,
            "total_len": self.total_len,
            "segments": segments,
            "terms": [list(p) for p in parts],
            "term_hashes": [hash_file(name) for name, _ in parts],
            "df": df_meta,
        }
        (folder / "postings.json").write_text(json.dumps(meta, ensure_ascii=False), "utf-8")
        # what the next save on top of this one may keep (names are by content: safe anywhere)
        object.__setattr__(self, "vocab_parts", parts)
        object.__setattr__(self, "saved_df", saved_df)

    def _terms(self, lo: int, hi: int) -> list[str]:
        """The terms of ids ``lo`` to ``hi`` (the vocabulary is kept in id order)."""
        from itertools import islice

        if isinstance(self.vocab, TermIds):
            return self.vocab.terms[lo:hi]
        got = list(islice(self.vocab, lo, hi))
        if len(got) == hi - lo and all(self.vocab[t] == lo + k for k, t in enumerate(got)):
            return got
        by_id = sorted(self.vocab, key=self.vocab.__getitem__)  # a dict out of id order
        return by_id[lo:hi]

    def _save_vocab(self, folder: Path, reuse: Reuse) -> tuple[tuple[str, int], ...]:
        """The vocabulary as parts: the saved ones kept, the new terms as one more part, and
        the newest parts merged while the one before holds at most MERGE_RATIO times theirs."""
        import hashlib

        n_terms = len(self.vocab)
        kept: list[tuple[str, int, int]] = []  # name, first id, end id
        at = 0
        for name, n in self.vocab_parts:
            kept.append((name, at, at + n))
            at += n
        if at > n_terms:
            kept, at = [], 0
        lo = at
        if lo < n_terms:
            while kept and kept[-1][2] - kept[-1][1] <= MERGE_RATIO * (n_terms - lo):
                lo = kept.pop()[1]
        if kept and not reuse([name for name, _, _ in kept]):
            kept, lo = [], 0
        parts = [(name, hi - start) for name, start, hi in kept]
        for name, start, hi in kept:  # an index saved before the hashes gets them once
            if not reuse([hash_file(name)]):
                self._save_hashes(folder / hash_file(name), start, hi)
        if lo < n_terms:
            raw = json.dumps(self._terms(lo, n_terms), ensure_ascii=False).encode("utf-8")
            name = f"terms.{hashlib.blake2b(raw, digest_size=12).hexdigest()}.json"
            (folder / name).write_bytes(raw)
            self._save_hashes(folder / hash_file(name), lo, n_terms)
            parts.append((name, n_terms - lo))
        return tuple(parts)

    def _save_hashes(self, path: Path, lo: int, hi: int) -> None:
        """The 64-bit hashes of terms ``lo`` to ``hi`` (what a load finds terms by)."""
        vocab = self.vocab
        got = vocab.hashes()[lo:hi] if isinstance(vocab, TermIds) else _hash64(self._terms(lo, hi))
        np.save(path, np.ascontiguousarray(got, dtype=np.int64), allow_pickle=False)

    def _save_df(self, folder: Path, reuse: Reuse) -> tuple[list[str | None], _SavedDf]:
        """``[whole file, patch file or None]`` and what the next save patches from: df whole
        when nothing saved can be patched, or when the changes since it was written whole
        outgrow a patch; else a patch of the changed entries."""
        saved = self.saved_df
        df = np.asarray(self.df, dtype=np.int64)
        if saved is not None and saved.values.size <= df.size:
            touched = np.union1d(saved.touched, np.arange(saved.values.size, df.size))
            small = touched.size <= max(DF_PATCH_MIN, df.size // DF_PATCH_SHARE)
            if small and reuse([saved.name]):
                patch = np.stack([touched, df[touched]]).astype(np.int64)
                name = f"df_patch.{_digest(patch)}.npy"
                np.save(folder / name, patch, allow_pickle=False)
                return [saved.name, name], replace(saved, touched=touched)
        name = f"df.{_digest(df)}.npy"
        np.save(folder / name, df, allow_pickle=False)
        return [name, None], _SavedDf(name, df, np.empty(0, dtype=np.int64))

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> Postings:
        """Saved postings; arrays that contradict each other are a ValueError naming the file."""
        meta = json.loads((folder / "postings.json").read_text("utf-8"))
        if meta.get("format") == 1:
            return cls._load_v1(folder, meta, mmap=mmap)
        if meta.get("format") != POSTINGS_FORMAT:
            raise ValueError(
                f"{folder}/postings.json: unknown format {meta.get('format')!r}; it was saved "
                "by a newer psirag: upgrade psirag"
            )
        mode: Literal["r"] | None = "r" if mmap else None
        terms: list[str] = []
        parts = []
        for name, n in meta["terms"]:
            got = json.loads((folder / _file_name(name, folder)).read_text("utf-8"))
            if not isinstance(got, list) or len(got) != n:
                raise ValueError(f"{folder}/{name} does not hold {n} terms; rebuild the index")
            if set(map(type, got)) <= {str}:
                terms.extend(got)
            else:
                terms.extend(str(t) for t in got)
            parts.append((str(name), int(n)))
        vocab: Mapping[str, int]
        hash_names = meta.get("term_hashes")
        if hash_names is None:  # saved before the term hashes: a dict (its next save adds them)
            vocab = dict(zip(terms, range(len(terms)), strict=True))
            if len(vocab) != len(terms):
                raise ValueError(f"{folder}: the BM25 vocabulary lists a term twice")
        else:
            if not isinstance(hash_names, list) or len(hash_names) != len(parts):
                raise ValueError(f"{folder}/postings.json: term_hashes does not fit its terms")
            got_hashes = [_load_array(folder / _file_name(h, folder)) for h in hash_names]
            hashes = np.concatenate(got_hashes) if got_hashes else np.empty(0, np.int64)
            vocab = TermIds.restore(terms, hashes, f"{folder}/postings.json")
        segments = []
        for name, size, dead_file in meta["segments"]:
            a = {
                f: _load_array(folder / _file_name(f"s.{name}.{f}.npy", folder), mode)
                for f in BODY_FILES
            }
            n = a["doc_ptr"].size - 1
            if (
                n != size
                or int(a["doc_ptr"][-1]) != a["doc_terms"].size
                or a["doc_terms"].size != a["doc_tf"].size
                or a["post_doc"].size != a["doc_terms"].size
                or a["post_tf"].size != a["doc_terms"].size
                or a["term_ptr"].size != a["term_ids"].size + 1
                or a["doc_len"].shape != (n,)
                or int(a["term_ptr"][-1]) != a["post_doc"].size
                or (a["term_ids"].size and int(a["term_ids"][-1]) >= len(vocab))
            ):
                raise ValueError(f"{folder}: segment {name}'s arrays disagree; rebuild the index")
            alive = np.ones(n, dtype=bool)
            if dead_file is not None:
                dead = _load_array(folder / _file_name(dead_file, folder))
                if dead.ndim != 1 or (dead.size and (dead.min() < 0 or dead.max() >= n)):
                    raise ValueError(f"{folder}/{dead_file}: removed chunks out of range")
                alive[dead] = False
            counts = TermCounts(vocab, a["doc_ptr"], a["doc_terms"], a["doc_tf"])
            seg = _Segment(
                counts,
                a["term_ptr"],
                a["post_doc"],
                a["post_tf"],
                a["doc_len"],
                alive,
                a["term_ids"],
                unchecked=str(folder),  # its term ids are checked when first read
            )
            object.__setattr__(seg, "_name", str(name))
            segments.append(seg)
        whole, patch_name = meta["df"]
        base_df = np.asarray(_load_array(folder / _file_name(whole, folder), mode))
        df = base_df.astype(np.int64, copy=False)
        touched = np.empty(0, dtype=np.int64)
        if patch_name is not None:
            patch = _load_array(folder / _file_name(patch_name, folder))
            if (
                patch.ndim != 2
                or patch.shape[0] != 2
                or (patch.size and (patch[0].min() < 0 or patch[0].max() >= len(vocab)))
            ):
                raise ValueError(f"{folder}/{patch_name}: not a df patch; rebuild the index")
            touched = np.asarray(patch[0], dtype=np.int64)
            df = np.zeros(len(vocab), dtype=np.int64)
            df[: base_df.size] = base_df[: len(vocab)]
            df[touched] = patch[1]
        got = cls(
            vocab,
            tuple(segments),
            df,
            int(meta["n_docs"]),
            int(meta["total_len"]),
            float(meta["k1"]),
            float(meta["b"]),
            tuple(parts),
            _SavedDf(str(whole), base_df, touched),
        )
        if df.shape != (len(vocab),) or got.n_docs != sum(s.n_alive for s in segments):
            raise ValueError(f"{folder}: the BM25 counts disagree with its segments")
        return got

    @classmethod
    def _load_v1(cls, folder: Path, meta: dict[str, Any], *, mmap: bool) -> Postings:
        """Postings saved in format 1 (dense term pointers, no content names)."""
        terms = meta["terms"]
        vocab = {str(t): i for i, t in enumerate(terms)}
        if len(vocab) != len(terms):
            raise ValueError(f"{folder}/postings.json lists a term twice")
        mode: Literal["r"] | None = "r" if mmap else None
        segments = []
        for i in range(int(meta["segments"])):
            a = {name: _load_array(folder / f"seg{i}.{name}.npy", mode) for name in SEGMENT_FILES}
            n = a["doc_ptr"].size - 1
            if (
                n < 0
                or int(a["doc_ptr"][-1]) != a["doc_terms"].size
                or a["doc_terms"].size != a["doc_tf"].size
                or a["post_doc"].size != a["doc_terms"].size
                or a["post_tf"].size != a["doc_terms"].size
                or int(a["term_ptr"][-1]) != a["post_doc"].size
                or a["term_ptr"].size - 1 > len(vocab)
                or a["alive"].shape != (n,)
                or a["doc_len"].shape != (n,)
                or (a["doc_terms"].size and int(a["doc_terms"].max()) >= a["term_ptr"].size - 1)
            ):
                raise ValueError(f"{folder}: segment {i}'s arrays disagree; rebuild the index")
            counts = TermCounts(vocab, a["doc_ptr"], a["doc_terms"], a["doc_tf"])
            segments.append(
                _Segment(
                    counts,
                    a["term_ptr"],
                    a["post_doc"],
                    a["post_tf"],
                    a["doc_len"],
                    np.asarray(a["alive"], dtype=bool),
                )
            )
        df = _load_array(folder / "df.npy")
        got = cls(
            vocab,
            tuple(segments),
            np.asarray(df, dtype=np.int64),
            int(meta["n_docs"]),
            int(meta["total_len"]),
            float(meta["k1"]),
            float(meta["b"]),
        )
        if df.shape != (len(vocab),) or got.n_docs != sum(s.n_alive for s in segments):
            raise ValueError(f"{folder}: the BM25 counts disagree with its segments")
        return got


def hash_file(terms_file: str) -> str:
    """The file of a vocabulary part's term hashes, named after the part's own file (whose
    name is by content, so the two are kept together between generations)."""
    stem = terms_file[: -len(".json")] if terms_file.endswith(".json") else terms_file
    return f"{stem}.hash.npy"


def _file_name(name: object, folder: Path) -> str:
    """A file name from postings.json, checked to be a plain name inside the folder."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name[0] == ".":
        raise ValueError(f"{folder}/postings.json names a bad file {name!r}; rebuild the index")
    return name


def _merge(a: _Segment, b: _Segment, n_terms: int) -> _Segment:
    """One segment of ``a``'s then ``b``'s live chunks."""
    ca, cb = a.live(), b.live()
    counts = TermCounts(
        cb.vocab,
        np.concatenate([ca.doc_ptr, ca.doc_ptr[-1] + cb.doc_ptr[1:]]).astype(np.int64),
        np.concatenate([ca.terms, cb.terms]),
        np.concatenate([ca.tf, cb.tf]),
    )
    return _Segment.of(counts, n_terms)


_LUCENE = {"method": "lucene", "idf_method": "lucene", "dtype": "float32"}
"""bm25s's parameters of a Lucene index, beside k1 and b."""
BM25S_FILES = ("data.csc.index.npy", "indices.csc.index.npy", "indptr.csc.index.npy")
BM25S_VOCAB = "vocab.index.json"
BM25S_PARAMS = "params.index.json"
BM25S_NONOCCURRENCE = "nonoccurrence_array.index.npy"


@dataclass(frozen=True, eq=False)
class SavedScores:
    """Precomputed BM25 scores in ``bm25s``'s layout (one CSC column of chunk scores per term),
    as indexes saved before :class:`Postings` hold them, read and scored without bm25s: the
    same float32 sums, in the same order, as ``bm25s.BM25.get_scores``."""

    data: np.ndarray  # float32 score of (chunk, term), term-major
    indices: np.ndarray  # int32 chunk of each score
    indptr: np.ndarray  # int64 per term: its run in data / indices
    num_docs: int
    vocab: dict[str, int]  # bm25s's vocabulary without its empty token ""
    params: dict[str, Any]  # bm25s's constructor parameters (k1, b, method, dtype, ...)
    nonoccurrence: np.ndarray | None = None  # BM25L / BM25+ only; None for Lucene
    empty_id: int | None = None  # the id bm25s gave its empty token "" (no column holds it)

    @classmethod
    def of_bm25s(cls, retriever: bm25s.BM25) -> SavedScores:
        """The scores of a ``bm25s.BM25`` index held in memory."""
        sc = retriever.scores
        params = {
            name: getattr(retriever, name)
            for name in ("k1", "b", "delta", "method", "idf_method", "dtype", "int_dtype")
            if hasattr(retriever, name)
        }
        backend = getattr(retriever, "backend", None)
        if backend is not None:
            params["backend"] = backend
        vocab = dict(retriever.vocab_dict)
        empty = vocab.pop("", None)
        return cls(
            np.asarray(sc["data"]),
            np.asarray(sc["indices"]),
            np.asarray(sc["indptr"]),
            int(sc["num_docs"]),
            vocab,
            params,
            retriever.nonoccurrence_array,
            empty,
        )

    @classmethod
    def load(cls, folder: Path, *, mmap: bool = True) -> SavedScores:
        """The scores ``bm25s.BM25.save`` wrote into ``folder`` (arrays memory-mapped)."""
        params = json.loads((folder / BM25S_PARAMS).read_text("utf-8"))
        vocab = json.loads((folder / BM25S_VOCAB).read_text("utf-8"))
        if not isinstance(params, dict) or not isinstance(vocab, dict):
            raise ValueError(f"{folder}: {BM25S_PARAMS} or {BM25S_VOCAB} is not a JSON object")
        params = {k: v for k, v in params.items() if k != "version"}
        num_docs = params.pop("num_docs", None)
        mode: Literal["r"] | None = "r" if mmap else None
        data, indices, indptr = (_load_array(folder / name, mode) for name in BM25S_FILES)
        nonoccurrence = None
        if params.get("method", "lucene") in ("bm25l", "bm25+"):
            nonoccurrence = _load_array(folder / BM25S_NONOCCURRENCE)
        dtype = np.dtype(params.get("dtype", "float32"))
        if data.dtype != dtype:  # as bm25s's load does
            data = data.astype(dtype)
        if (
            not isinstance(num_docs, int)
            or data.ndim != 1
            or indptr.ndim != 1
            or indptr.size == 0
            or data.shape != indices.shape
            or int(indptr[-1]) != data.size
        ):
            raise ValueError(f"{folder}: bm25s's score arrays disagree; rebuild the index")
        empty = vocab.pop("", None)  # so that the term counts share this dict, not a copy
        return cls(data, indices, indptr, num_docs, vocab, params, nonoccurrence, empty)

    def term_ids(self, tokens: Sequence[str]) -> list[int]:
        """The vocabulary ids of ``tokens`` (query order, repeats kept, unknown ones left out)."""
        vocab = self.vocab
        return [vocab[t] for t in tokens if t in vocab]

    def scores(self, term_ids: Sequence[int]) -> np.ndarray:
        """The score of every chunk for a query's term ids: each term's column added in query
        order, in the index's dtype, as ``bm25s.BM25.get_scores`` adds them."""
        ids = np.asarray(term_ids, dtype=np.int64)
        if ids.size and int(ids.max()) >= self.indptr.size - 1:
            raise ValueError("a query term id is outside the BM25 index")
        out = np.zeros(self.num_docs, dtype=np.dtype(self.params.get("dtype", "float32")))
        starts, ends = self.indptr[ids], self.indptr[ids + 1]
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            np.add.at(out, self.indices[lo:hi], self.data[lo:hi])
        if self.nonoccurrence is not None:
            out += self.nonoccurrence[ids].sum()
        return out

    def to_bm25s(self) -> bm25s.BM25:
        """A ``bm25s.BM25`` holding these scores (imports bm25s and so scipy)."""
        module = _bm25s()
        retriever = module.BM25(**self.params)
        retriever.scores = {
            "data": self.data,
            "indices": self.indices,
            "indptr": self.indptr,
            "num_docs": self.num_docs,
        }
        vocab = dict(self.vocab)
        if self.empty_id is not None:
            vocab[""] = self.empty_id
        retriever.vocab_dict = vocab
        retriever.unique_token_ids_set = set(vocab.values())
        retriever.nonoccurrence_array = self.nonoccurrence
        return retriever

    def save(self, folder: Path) -> None:
        """Write these scores in bm25s's layout, by bm25s itself (what loads them back)."""
        self.to_bm25s().save(str(folder), show_progress=False)


def _bm25s() -> Any:
    """The ``bm25s`` module, imported on first use (it imports scipy.sparse), with its logger
    quiet: bm25s sets it to DEBUG on import, so every build printed "Building index from IDs
    objects" through any handler the application installs, even with -q."""
    import logging

    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


class SparseIndex:
    """BM25 over the leaves plus the duplicate map that lets search drop repeated texts.

    Scored from :class:`Postings` (counts, idf at query time); an index saved before them is
    read through its precomputed scores in bm25s's layout (``retriever``, a
    :class:`SavedScores`; a ``bm25s.BM25`` given here is read into one) until its first
    update."""

    def __init__(
        self,
        retriever: SavedScores | bm25s.BM25 | None,
        first_copy: np.ndarray,
        counts: TermCounts | None = None,
        *,
        postings: Postings | None = None,
        duplicates: DuplicateMap | None = None,
    ) -> None:
        if retriever is None and postings is None:
            raise ValueError("a sparse index needs bm25s scores or postings")
        if retriever is not None and not isinstance(retriever, SavedScores):
            retriever = SavedScores.of_bm25s(retriever)
        self.retriever: SavedScores | None = retriever
        self.postings = postings
        self.duplicates = duplicates
        """The table behind ``first_copy`` when this process made it (an update extends it
        by its new texts only); None for one read from disk."""
        self.first_copy = np.asarray(first_copy, dtype=np.int64)
        self._is_first = first_copies(self.first_copy)
        self._counts = counts

    @property
    def counts(self) -> TermCounts | None:
        """Per-chunk term counts (None for an index saved without them)."""
        if self.postings is not None:
            return self.postings.counts()
        return self._counts

    @property
    def n_docs(self) -> int:
        if self.postings is not None:
            return self.postings.n_docs
        assert self.retriever is not None
        return self.retriever.num_docs

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
        return cls.from_postings(Postings.of_counts(counts, k1=k1, b=b), texts)

    @classmethod
    def from_postings(
        cls, postings: Postings, texts: Sequence[str], *, appended_to: DuplicateMap | None = None
    ) -> SparseIndex:
        """BM25 of ``postings`` over chunks ``texts`` (for the duplicate map). ``appended_to``:
        the map of the leading texts, unchanged, so only the texts after them are normalised."""
        if postings.n_docs != len(texts):
            raise ValueError(f"postings of {postings.n_docs} chunks for {len(texts)} texts")
        start = appended_to.size if appended_to is not None else 0
        if start == 0:  # leading texts already mapped passed this check: the corpus still does
            check_indexable(texts)
        # texts equal up to layout count once (duplicates.py)
        dups = (appended_to or DuplicateMap.of([])).extended(texts)
        return cls(None, dups.first_copy, postings=postings, duplicates=dups)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every leaf (0 where no query term occurs)."""
        if self.postings is not None:
            return self.postings.scores(term_ids(self.postings.vocab, _tokenize([query])[0]))
        assert self.retriever is not None
        ids = self.retriever.term_ids(_tokenize([query])[0])
        if not ids:
            return np.zeros(self.first_copy.size, dtype=np.float32)
        return np.asarray(self.retriever.scores(ids), dtype=np.float32)

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

    def save(
        self,
        folder: Path,
        *,
        reuse: Reuse = _no_reuse,
        compact: bool = False,
        first_copy: bool = True,
    ) -> None:
        """Write this index into ``folder`` (see :meth:`Postings.save` for ``reuse`` and
        ``compact``); ``first_copy=False``: the caller keeps the first copies itself."""
        folder.mkdir(parents=True, exist_ok=True)
        if first_copy:
            np.save(folder / "first_copy.npy", self.first_copy, allow_pickle=False)
        if self.postings is not None:
            self.postings.save(folder, reuse=reuse, compact=compact)
            return
        assert self.retriever is not None
        self.retriever.save(folder)
        if self._counts is not None:
            c = self._counts
            for name, array in zip(COUNT_FILES, (c.doc_ptr, c.terms, c.tf), strict=True):
                np.save(folder / name, np.ascontiguousarray(array), allow_pickle=False)

    @classmethod
    def load(
        cls, folder: Path, *, mmap: bool = True, first_copy: np.ndarray | None = None
    ) -> SparseIndex:
        """A saved index; its term counts too where they were saved (an index from before
        they were gets them from its first update, which tokenises every chunk once).
        ``first_copy``: the first copies, kept by the caller (else read from the folder)."""
        if (folder / "postings.json").is_file():
            postings = Postings.load(folder, mmap=mmap)
            first = _load_array(folder / "first_copy.npy") if first_copy is None else first_copy
            if first.shape != (postings.n_docs,):
                raise ValueError(f"{folder}: first_copy.npy disagrees with the BM25 counts")
            return cls(None, first, postings=postings)
        retriever = SavedScores.load(folder, mmap=mmap)
        first = _load_array(folder / "first_copy.npy") if first_copy is None else first_copy
        counts = None
        if all((folder / name).is_file() for name in COUNT_FILES):
            ptr, terms, tf = (
                _load_array(folder / name, "r" if mmap else None) for name in COUNT_FILES
            )
            vocab = retriever.vocab  # shared, not copied: both only read it
            n_vocab = int(retriever.indptr.size - 1)
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
