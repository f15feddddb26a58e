"""The phrase table behind keyword abstracts, kept per leaf so an index update extracts phrases
from its new leaves only (issue 12; SPEC 1.6 says what the phrases are).

A full extraction tokenises every leaf and builds the corpus's phrase vocabulary: on 2Wiki that
is ~1.5 s of a 1% add that refreshes seven nodes. The table keeps what each leaf contributed
(its distinct words in first-occurrence order, its distinct 1-3 word candidates with their
occurrence counts, the stem-level phrases it holds) and the corpus-level counts those add up
to. Adding leaves extracts them and adds their counts; removing leaves subtracts theirs.

What a keyword abstract reads from the corpus is then rebuilt from the table in numpy
(:meth:`PhraseTable.phrases`): the most frequent surface form of each phrase, which phrases
are kept, and the phrase order that breaks score ties. Both orders follow where a word first
appears in the corpus, exactly as a fresh extraction over the same leaves numbers them, so an
abstract computed from an updated table equals the one a full recompute gives, bit for bit.

Word, stem and phrase ids here are persistent (they only grow while the table lives), not the
first-appearance ranks: an add extends the ranks in place; a removal re-ranks only the words
whose first occurrence it removed (each word's first leaf and leaf count are kept for that),
and redoes the shown form only of the phrases whose counts or forms' ranks moved.

An update scores its few nodes from :meth:`PhraseTable.phrase_view`, which computes a
phrase's column order, flags and shown form when a node reads it; the corpus-wide layout
(:meth:`PhraseTable.phrases`) is made for a build or a full recompute only.

An update copies no corpus-wide array (issue 24): the per-leaf entry arrays are held as pieces
(:class:`_Pieces`: a removal splits them where its leaves were, an add appends a piece, and
one update in about ``MAX_PIECES / 2`` copies them into one again); a removal leaves a spent
surface form as a tombstone (count 0) instead of closing the sorted form arrays up; an add
appends its new forms and phrases after the sorted ones, in a tail kept in key order and
folded in past :data:`TAIL_MAX`; the counts a table gives up to the next one are changed in
place (a loaded table's mapped counts are copied once, by the first update after a load). An
add compares, for each phrase it touched, only the phrase's old shown form with the batch's
forms; a removal looks its phrases' forms up by their stems' words. What stays linear in the
corpus: the first update after a load copies the loaded counts once, and a removal that moves
a word's first occurrence to the other side of a word of the same stem passes over the forms
once (memory speed) to find the phrases that word is in.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import Stemmer

from psirag.abstracts.fence import FENCE_STEP, fence_of, fenced_search, fetch, will_need
from psirag.abstracts.phrase_model import (
    JOINERS,
    MAX_NGRAM,
    MAX_PACKED,
    PACK_BITS,
    ROMAN_RE,
    SEGMENT_RE,
    SPACED_HYPHEN_RE,
    Phrases,
    ids_below,
    is_stopword,
    unpack_keys,
)
from psirag.abstracts.phrase_names import (
    ARRAYS,
    DERIVED_ARRAYS,
    FENCE_ARRAYS,
    HASH_ARRAYS,
    VOCAB_ARRAYS,
    WORD_ARRAYS,
)
from psirag.errors import IndexFormatError
from psirag.heap import give_back_freed_memory, page_out_spilled
from psirag.heap import mapped_copy as _mapped_copy
from psirag.rows import ArrayParts, csr_positions, sparse_reads
from psirag.stable_hash import find_hashed, hash64, hashes_agree

__all__ = ["HeldCounts", "PhraseTable", "entry_pieces", "spare_view"]

_DAMAGED = "the saved keyword phrase table is inconsistent ({}); rebuild the index"

BUILD_BATCH = 20_000
"""Leaves a build extracts at a time: a single pass over a 1M-leaf corpus held every token and
candidate occurrence of the corpus at once, several times the finished table."""

_LAYOUT_BLOCK = 1 << 18
"""Phrases a layout unpacks and flags at a time (each step makes n x 3 int64 temporaries)."""

KEEP_LAYOUT_MAX_PHRASES = 1 << 24
"""A build keeps its table's layout (for an add in the same process) up to this many phrases;
past it the layout (about 40 bytes a phrase, 2 GiB at 1M leaves) is let go once the abstracts
are scored, and the first add remakes it, as after a load."""

Entries = Any
"""A per-leaf entry array: an ``np.ndarray``, or a :class:`_Pieces` read like one."""

_FLAGS = ("is_stop", "starts_alpha", "is_cap", "is_digit", "roman", "joiner")


_ID_ARRAYS = ("lw", "ls_cnt", "lp_pid")
"""Per-leaf arrays of ids and counts, held (and saved) as int32."""

_DERIVED_IDS = ("p_sorted", "p_df", "s_cnt", "s_pid")
"""Corpus-level phrase ids and counts, held as int32 after a build or a load (a phrase's
leaves and a form's occurrences stay far below 2**31 in any corpus a machine holds)."""


def _ints(x: Any, *, small: bool) -> np.ndarray:
    """A saved array as int64, or as it is when it is int32 and ``small`` (no copy: a loaded
    array stays memory-mapped)."""
    x = np.asarray(x)
    if small and x.dtype == np.int32:
        return x
    return x.astype(np.int64, copy=False)


def _ptr(row_of_entry: np.ndarray, n_rows: int) -> np.ndarray:
    """CSR row pointers of entries sorted by row."""
    counts = np.bincount(row_of_entry, minlength=n_rows) if row_of_entry.size else np.zeros(n_rows)
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def _distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (a sort and a run check: faster here than np.unique's hash)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _count_into(counts: np.ndarray, ids: np.ndarray) -> None:
    """``np.add.at(counts, ids, 1)`` by one sort of ``ids`` (several times faster on the
    millions of ids of a build's batch, and the same counts)."""
    if ids.size == 0:
        return
    s = np.sort(ids)
    first = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    times = np.diff(np.append(first, s.size))
    counts[s[first]] += times.astype(counts.dtype, copy=False)


def _unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` by one sort (not a stable one: equal values get
    the same inverse in either order, and numpy's default sort of int64 is about twice as
    fast here)."""
    order = np.argsort(a)
    s = a[order]
    flag = np.concatenate(([True], s[1:] != s[:-1])) if a.size else np.empty(0, dtype=bool)
    inv = np.empty(a.size, dtype=np.int64)
    inv[order] = np.cumsum(flag) - 1
    return s[flag], inv


def _first_of_each(a: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct value, in position order."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    first = order[np.concatenate(([True], s[1:] != s[:-1]))] if a.size else order
    return np.sort(first)


def _rows(ptr: np.ndarray) -> np.ndarray:
    """The row of every entry of a CSR layout."""
    return np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))


def _pack(cols: np.ndarray) -> np.ndarray:
    """n x 3 ids (-1 pad) to int64 keys of three 21-bit fields (id + 1, 0 = none)."""
    key = np.zeros(cols.shape[0], dtype=np.int64)
    for j in range(MAX_NGRAM):
        key <<= PACK_BITS
        key |= cols[:, j] + 1
    return key


_hash64 = hash64  # (a module name: tests replace it to force collisions)


class _Ids:
    """The ids of distinct strings (their positions in ``keys``). A vocabulary made in this
    process holds a dict; a loaded one holds the saved 64-bit hashes of its strings instead,
    and finds a batch's strings by one pass over those (no dict of every word of the corpus
    is made: 481k words and 242k stems at 1M chunks, 0.3-0.6 s a load)."""

    def __init__(
        self, keys: list[str], index: dict[str, int] | None, hashes: np.ndarray | None
    ) -> None:
        assert index is not None or hashes is not None
        self.keys = keys
        self._index = index
        self._hashes = hashes

    @classmethod
    def restore(cls, keys: list[str], hashes: np.ndarray | None, what: str) -> _Ids:
        """Saved strings with their saved hashes (checked in size and at sample rows), or
        without (then a dict of them; the strings must be distinct)."""
        if hashes is None:
            index = dict(zip(keys, range(len(keys)), strict=True))
            if len(index) != len(keys):
                raise IndexFormatError(_DAMAGED.format(f"{what} lists a string twice"))
            return cls(keys, index, None)
        hashes = np.asarray(hashes)
        if not hashes_agree(keys, hashes, _hash64):
            raise IndexFormatError(_DAMAGED.format(f"the saved hashes of {what} disagree"))
        return cls(keys, None, hashes)

    def __len__(self) -> int:
        return len(self.keys)

    def hashes(self) -> np.ndarray:
        """The strings' hashes (made once when this vocabulary was not loaded with them)."""
        if self._hashes is None:
            self._hashes = _hash64(self.keys)
        return self._hashes

    def lookup(self, batch: Sequence[str]) -> np.ndarray:
        """The id of each string of ``batch`` (-1: not held)."""
        if self._index is not None:
            index = self._index
            return np.fromiter((index.get(w, -1) for w in batch), dtype=np.int64, count=len(batch))
        return find_hashed(self.keys, self.hashes(), batch, _hash64(batch))

    def with_new(self, new: list[str]) -> _Ids:
        """These ids and ``new`` (strings not held) numbered on after them (a copy)."""
        start = len(self.keys)
        keys = self.keys + new
        hashes = None if self._hashes is None else np.concatenate([self._hashes, _hash64(new)])
        index = None
        if self._index is not None:
            index = dict(self._index)
            index.update(zip(new, range(start, start + len(new)), strict=True))
        return _Ids(keys, index, hashes)


@dataclass(frozen=True)
class _Vocab:
    """Persistent word ids with what the phrase rules read of each word."""

    words: list[str]
    index: _Ids
    stem_of: np.ndarray  # persistent stem id per word
    stem_index: _Ids
    is_stop: np.ndarray
    starts_alpha: np.ndarray
    is_cap: np.ndarray
    is_digit: np.ndarray
    roman: np.ndarray
    joiner: np.ndarray

    def saved(self) -> tuple[list[str], dict[str, np.ndarray]]:
        """The stem list and :data:`VOCAB_ARRAYS` with :data:`HASH_ARRAYS` (see
        :meth:`restore`)."""
        bits = np.zeros(len(self.words), dtype=np.uint8)
        for i, name in enumerate(_FLAGS):
            bits |= getattr(self, name).astype(np.uint8) << i
        return list(self.stem_index.keys), {
            "w_stem": self.stem_of.astype(np.int32),
            "w_flags": bits,
            "w_hash": self.index.hashes(),
            "s_hash": self.stem_index.hashes(),
        }

    @classmethod
    def restore(cls, words: list[str], stems: list[str], arrays: dict[str, np.ndarray]) -> _Vocab:
        """A vocabulary from its saved form; contradictions are an :class:`IndexFormatError`.
        Without :data:`HASH_ARRAYS` (an index saved before them) the words and stems are
        made into dicts."""
        w_stem = np.asarray(arrays["w_stem"], dtype=np.int64)
        bits = np.asarray(arrays["w_flags"], dtype=np.uint8)
        hashed = all(a in arrays for a in HASH_ARRAYS)
        words = list(words)
        index = _Ids.restore(words, arrays["w_hash"] if hashed else None, "words.json")
        stem_index = _Ids.restore(list(stems), arrays["s_hash"] if hashed else None, "the stems")
        if (
            w_stem.shape != (len(words),)
            or bits.shape != (len(words),)
            or (w_stem.size > 0 and (int(w_stem.min()) < 0 or int(w_stem.max()) >= len(stems)))
        ):
            raise IndexFormatError(_DAMAGED.format("the saved stems disagree with the words"))
        flags = {name: ((bits >> i) & 1).astype(bool) for i, name in enumerate(_FLAGS)}
        return cls(words, index, w_stem, stem_index, **flags)

    @classmethod
    def empty(cls) -> _Vocab:
        b = np.empty(0, dtype=bool)
        return cls(
            [], _Ids([], {}, None), np.empty(0, dtype=np.int64), _Ids([], {}, None), *[b] * 6
        )

    def extend(self, batch: list[str]) -> tuple[_Vocab, np.ndarray]:
        """A vocabulary that also holds ``batch``'s words (a copy: this one stays as it is),
        and the persistent id of each word of ``batch``."""
        ids = self.index.lookup(batch)
        new_at = np.flatnonzero(ids < 0)
        if new_at.size == 0:
            return self, ids
        new_words = [batch[i] for i in new_at.tolist()]
        start = len(self.words)
        if start + len(new_words) >= MAX_PACKED - 1:
            raise ValueError(
                f"vocabulary of {start + len(new_words)} distinct words is too large to pack; "
                "rebuild the index"
            )
        ids[new_at] = np.arange(start, start + len(new_words))
        index = self.index.with_new(new_words)
        words = index.keys
        lower = [w.lower() for w in new_words]
        stems = Stemmer.Stemmer("english").stemWords(lower)
        # stem ids: held ones as they are, new ones numbered on in order of first appearance
        distinct = list(dict.fromkeys(stems))
        held = self.stem_index.lookup(distinct)
        fresh = [st for st, k in zip(distinct, held.tolist(), strict=True) if k < 0]
        stem_id = dict(zip(distinct, held.tolist(), strict=True))
        n_stems = len(self.stem_index)
        stem_id.update(zip(fresh, range(n_stems, n_stems + len(fresh)), strict=True))
        stem_index = self.stem_index.with_new(fresh) if fresh else self.stem_index
        stem_of = np.array([stem_id[st] for st in stems], np.int64)
        if len(stem_index) >= MAX_PACKED - 1:
            raise ValueError(f"{len(stem_index)} distinct stems are too many to pack; rebuild")

        def flags(test: Any, source: list[str]) -> np.ndarray:
            return np.array([bool(test(w)) for w in source], dtype=bool)

        out = _Vocab(
            words=words,
            index=index,
            stem_of=np.concatenate([self.stem_of, stem_of]),
            stem_index=stem_index,
            is_stop=np.concatenate([self.is_stop, flags(is_stopword, lower)]),
            starts_alpha=np.concatenate(
                [self.starts_alpha, flags(lambda w: w[0].isalpha(), new_words)]
            ),
            is_cap=np.concatenate([self.is_cap, flags(lambda w: w[0].isupper(), new_words)]),
            is_digit=np.concatenate([self.is_digit, flags(lambda w: w[0].isdigit(), new_words)]),
            roman=np.concatenate(
                [
                    self.roman,
                    flags(lambda w: w.isupper() and ROMAN_RE.fullmatch(w) is not None, new_words),
                ]
            ),
            joiner=np.concatenate([self.joiner, flags(lambda w: w in JOINERS, lower)]),
        )
        return out, ids


@dataclass(frozen=True)
class _Batch:
    """What a run of new leaves contributes (leaf numbers local to the batch)."""

    n: int
    lw_ptr: np.ndarray
    lw: np.ndarray
    ls_ptr: np.ndarray
    ls_key: np.ndarray  # packed persistent word ids of a candidate's surface form
    ls_stem: np.ndarray  # packed persistent stem ids: the phrase it is a form of
    ls_cnt: np.ndarray
    first_words: np.ndarray  # persistent word ids in order of first appearance in the batch


_SEGMENT_MARK = "\x00"
_LEAF_MARK = "\x01"
_SEGMENT_JOIN = f" {_SEGMENT_MARK} "
_LEAF_JOIN = f" {_LEAF_MARK} "
"""Marks between a batch's segments and leaves when :func:`_extract` splits the batch as one
string: control characters, never in a segment and not whitespace to ``str.split``."""
_SPLIT_LEAVES = 2048
"""Leaves joined into one string and split at a time by :func:`_extract` (a build batch's
words as string objects would take a few hundred MB at once)."""


def _extract(texts: Sequence[str], vocab: _Vocab) -> tuple[_Vocab, _Batch]:
    """Tokenise ``texts`` (the tokens and segments :mod:`keywords` defines) and list each
    leaf's words and 1-3 word candidates."""
    # the batch as one string: each leaf's segments joined by a segment mark, the leaves by a
    # leaf mark (neither can be in a segment: a segment is tokens and spaces or tabs), split
    # and interned in one pass; the marks' positions give each token's segment and leaf
    local: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    local[_SEGMENT_MARK], local[_LEAF_MARK]  # ids 0 and 1; words follow in first appearance
    parts: list[np.ndarray] = []
    for lo in range(0, len(texts), _SPLIT_LEAVES):  # bounds the split's string objects
        pieces: list[str] = []
        for text in texts[lo : lo + _SPLIT_LEAVES]:
            if "’" in text:
                text = text.replace("’", "'")
            if "- " in text:
                text = SPACED_HYPHEN_RE.sub("-", text)
            pieces.append(_SEGMENT_JOIN.join(SEGMENT_RE.findall(text)))
        split = _LEAF_JOIN.join(pieces).split()
        del pieces
        if parts:
            parts.append(np.ones(1, dtype=np.int64))  # the leaf mark before this run's first
        parts.append(np.fromiter(map(local.__getitem__, split), dtype=np.int64, count=len(split)))
        del split
    ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    del parts
    vocab, glob = vocab.extend(list(local)[2:])
    n = len(texts)
    none = np.empty(0, dtype=np.int64)
    zeros = np.zeros(n + 1, dtype=np.int64)
    mark = ids < 2
    word_at = np.flatnonzero(~mark)
    if word_at.size == 0:
        return vocab, _Batch(n, zeros, none, zeros, none, none, none, glob)
    tok = glob[ids[word_at] - 2]
    seg = np.cumsum(mark)[word_at]  # equal for two tokens exactly when in one segment
    leaf_of = np.cumsum(ids == 1)[word_at]
    del ids, mark, word_at

    # each leaf's distinct words, in order of first occurrence
    first = _first_of_each(leaf_of * len(vocab.words) + tok)
    lw = tok[first]
    lw_ptr = _ptr(leaf_of[first], n)

    edge = ~vocab.is_stop[tok] & vocab.starts_alpha[tok]
    stem = vocab.stem_of[tok]
    stem_keys, surf_keys, leaves = [], [], []
    n_tok = tok.size
    for w in range(1, MAX_NGRAM + 1):
        m = n_tok - w + 1
        if m <= 0:
            break
        starts = np.flatnonzero(edge[:m] & edge[w - 1 :] & (seg[:m] == seg[w - 1 :]))
        skey = np.zeros(starts.size, dtype=np.int64)
        tkey = np.zeros(starts.size, dtype=np.int64)
        for j in range(MAX_NGRAM):
            skey <<= PACK_BITS
            tkey <<= PACK_BITS
            if j < w:
                skey |= stem[starts + j] + 1
                tkey |= tok[starts + j] + 1
        stem_keys.append(skey)
        surf_keys.append(tkey)
        leaves.append(leaf_of[starts])
    skey = np.concatenate(stem_keys)
    tkey = np.concatenate(surf_keys)
    occ_leaf = np.concatenate(leaves)
    if skey.size == 0:
        return vocab, _Batch(n, lw_ptr, lw, zeros, none, none, none, glob)
    # each leaf's distinct candidates by surface key, with their counts: the (leaf, key) pairs
    # as one int64 (leaf, then the key's rank among the batch's keys) sorted by value, which
    # is faster than an indirect sort by two keys (the same surface key has the same stems)
    by_key = np.argsort(tkey)
    sorted_keys = tkey[by_key]
    new_key = np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1]))
    keys = sorted_keys[new_key]
    stem_of_key = skey[by_key[new_key]]
    pair = np.sort(occ_leaf[by_key] * keys.size + (np.cumsum(new_key) - 1))
    del by_key, sorted_keys, new_key
    first = np.concatenate(([True], pair[1:] != pair[:-1]))
    start = np.flatnonzero(first)
    count = np.diff(np.append(start, pair.size))
    pair = pair[first]
    leaf_s, rank_s = pair // keys.size, pair % keys.size
    return vocab, _Batch(
        n,
        lw_ptr,
        lw,
        _ptr(leaf_s, n),
        keys[rank_s],
        stem_of_key[rank_s],
        count.astype(np.int64),
        glob,
    )


@dataclass(frozen=True)
class _Derived:
    """Corpus-level counts the per-leaf arrays add up to (rebuilt on load, kept by deltas)."""

    vocab: _Vocab
    p_sorted: np.ndarray  # phrase ids by p_key
    p_df: np.ndarray  # leaves holding each phrase
    s_key: np.ndarray  # sorted surface keys present in the corpus
    s_cnt: np.ndarray  # their occurrences
    s_pid: np.ndarray  # the phrase each is a form of
    p_best: np.ndarray  # the shown surface key of each phrase (0: absent)
    w_rank: np.ndarray  # first-appearance rank of each word in the corpus (-1: absent)
    n_ranked: int
    # per word: the leaf of its first occurrence and how many leaves hold it (-1 / 0: absent);
    # what a removal reads to re-rank only the words it moves (None: derived on first removal)
    w_first: np.ndarray | None = None
    w_df: np.ndarray | None = None
    # what adds appended after the sorted part (None: nothing): the forms s_key[h:] are in
    # the order they came, s_tail holds their positions in key order; the phrases not in
    # p_sorted (the last ids) are p_tail, in key order. An add so writes O(its forms), not
    # an insertion into every sorted array; a tail is folded in when it holds more than
    # TAIL_MAX (O(n) once per that many new forms or phrases)
    s_tail: np.ndarray | None = None
    p_tail: np.ndarray | None = None
    # the sorted parts' fences (see psirag.abstracts.fence; None: not at hand, a plain binary
    # search): p_skey[i] = p_key[p_sorted[i]] over p_sorted (the sorted part), p_fence its
    # fence; s_fence the fence of s_key's sorted part. Made whenever a sorted part is made
    # whole (a save, a fold), saved, and mapped at load
    p_skey: np.ndarray | None = None
    p_fence: np.ndarray | None = None
    s_fence: np.ndarray | None = None

    def form_positions(self, keys: np.ndarray) -> np.ndarray:
        """Where each surface key is in ``s_key`` (-1: not there)."""
        tail = self.s_tail if self.s_tail is not None else np.empty(0, dtype=np.int64)
        head = self.s_key.shape[0] - tail.size
        if self.s_fence is not None:
            out = _fenced_lookup(self.s_key[:head], self.s_fence, None, None, keys, "s_key")
            return _tail_lookup(out, keys, self.s_key, tail)
        return _lookup(self.s_key[:head], None, keys, self.s_key, tail)

    def phrase_ids(self, p_key: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """The phrase id of each stem key (-1: a phrase the corpus never had)."""
        tail = self.p_tail if self.p_tail is not None else np.empty(0, dtype=np.int64)
        head = p_key.shape[0] - tail.size
        if self.p_skey is not None and self.p_fence is not None:
            out = _fenced_lookup(self.p_skey, self.p_fence, self.p_sorted, p_key, keys, "p_skey")
            return _tail_lookup(out, keys, p_key, tail)
        return _lookup(p_key[:head], self.p_sorted, keys, p_key, tail)

    def sorted_forms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``s_key``, ``s_cnt``, ``s_pid`` of the forms in use (count > 0), by key: what a
        fresh derivation gives (a removal leaves spent forms as tombstones, adds a tail)."""
        keys, counts, pids = _folded(self.s_tail, self.s_key, self.s_cnt, self.s_pid)
        live = np.asarray(counts) > 0
        if bool(live.all()):  # no copy (a big build's save holds tens of millions of forms)
            return keys, counts, pids
        return keys[live], counts[live], pids[live]

    def full_p_sorted(self, p_key: np.ndarray) -> np.ndarray:
        """Every phrase id by key (``p_sorted`` with the tail merged in)."""
        return self.folded_p_sorted(p_key)[0]

    def folded_p_sorted(self, p_key: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`full_p_sorted`, and ``p_skey`` with the tail's keys merged in (None when
        there is no ``p_skey``)."""
        skey = self.p_skey if self.p_fence is not None else None
        if self.p_tail is None or self.p_tail.size == 0:
            return np.asarray(self.p_sorted), skey
        head = p_key.shape[0] - self.p_tail.size
        sorter = np.asarray(self.p_sorted)
        tail_keys = np.asarray(p_key[self.p_tail])
        if skey is not None:
            skey = np.asarray(skey)
            at = np.searchsorted(skey, tail_keys)
            skey = np.insert(skey, at, tail_keys)
        else:
            at = np.searchsorted(p_key[:head], tail_keys, sorter=sorter)
        return np.insert(sorter, at, self.p_tail.astype(sorter.dtype)), skey


def _as_int32(x: np.ndarray) -> np.ndarray:
    """Ids and counts as int32 where they fit (not read when they are int32 already)."""
    x = np.asarray(x)
    if x.dtype == np.int32:
        return x
    if x.size == 0 or (int(x.max()) < 2**31 and int(x.min()) >= -1):
        return x.astype(np.int32)
    return x


class _SavedCounts(Mapping[str, np.ndarray]):
    """A table's corpus counts as a save writes them (:meth:`PhraseTable.derived_arrays`),
    each array made when it is read and not kept. Why: a 1M-chunk table's sorted copies and
    int32 casts, all made at once, held about 2.5 GiB more at the peak of a build's save;
    a save that writes them one after another holds one or two."""

    _FORMS = ("s_key", "s_cnt", "s_pid")

    def __init__(self, d: _Derived, p_key: np.ndarray) -> None:
        self._d = d
        self._p_key = p_key
        names = list(DERIVED_ARRAYS)
        if d.w_first is not None and d.w_df is not None:
            names += list(WORD_ARRAYS)
        self._names = tuple(names)

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        d = self._d
        if name == "p_sorted":  # a searchsorted sorter (read as intp: not converted on load)
            held = d.full_p_sorted(self._p_key)
            got = held.astype(np.intp, copy=False)
            if got is not held:  # a copy: a big build's spilled ids, read, leave memory again
                page_out_spilled(held)
            return got
        if name in self._FORMS:  # by key, without the forms a removal left as tombstones
            got = d.sorted_forms()[self._FORMS.index(name)]
            return got if name == "s_key" else _as_int32(got)
        if name == "n_ranked":
            return np.array([d.n_ranked], dtype=np.int64)
        got = np.asarray(getattr(d, name))
        return _as_int32(got) if name in ("p_df", "w_rank", *WORD_ARRAYS) else got


class HeldCounts:
    """Read access to a table's corpus counts (:meth:`PhraseTable.held_counts`) at given
    phrases and surface forms: what a save in O(change) writes."""

    def __init__(self, d: _Derived) -> None:
        self._d = d

    def phrases_at(self, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``p_df`` and ``p_best`` of the phrases ``pids``."""
        return np.asarray(self._d.p_df[pids]), np.asarray(self._d.p_best[pids])

    def phrases_from(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """``p_df`` and ``p_best`` of the phrases ``start ..`` (the ones new since a save)."""
        return np.asarray(self._d.p_df[start:]), np.asarray(self._d.p_best[start:])

    def forms_at(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each surface key: whether the table holds it (a spent form, count 0, too),
        its count and its phrase (0 where it does not)."""
        d = self._d
        at = d.form_positions(np.asarray(keys, dtype=np.int64))
        held = at >= 0
        where = np.where(held, at, 0)
        if d.s_cnt.shape[0] == 0:
            zero = np.zeros(at.size, dtype=np.int64)
            return held, zero, zero
        cnt = np.where(held, np.asarray(d.s_cnt[where], dtype=np.int64), 0)
        pid = np.where(held, np.asarray(d.s_pid[where], dtype=np.int64), 0)
        return held, cnt, pid

    def words(self) -> dict[str, np.ndarray]:
        """The per-word arrays (vocabulary-sized: saved whole) and ``n_ranked``."""
        d = self._d
        out = {"w_rank": d.w_rank, "n_ranked": np.array([d.n_ranked], dtype=np.int64)}
        if d.w_first is not None and d.w_df is not None:
            out.update(w_first=d.w_first, w_df=d.w_df)
        return out


TAIL_MAX = 1 << 16
"""A tail (:class:`_Derived`) is folded into its sorted part when it holds more: a one-document
add brings a few hundred new forms, so a fold (a merge over the corpus's forms) comes once in
hundreds of adds, and keeping the tail sorted costs an add O(TAIL_MAX) at most."""


def _lookup(
    head: np.ndarray,
    sorter: np.ndarray | None,
    keys: np.ndarray,
    full: np.ndarray,
    tail: np.ndarray,
) -> np.ndarray:
    """Position (by ``sorter`` when given: the id) of each key among ``head`` (sorted, or in
    ``sorter`` order) or ``full[tail]`` (in key order), -1 where it is in neither."""
    out = np.full(keys.size, -1, dtype=np.int64)
    if head.shape[0]:
        at = np.searchsorted(head, keys, sorter=sorter)
        inside = np.flatnonzero(at < head.shape[0])
        where = at[inside] if sorter is None else np.asarray(sorter[at[inside]], dtype=np.int64)
        hit = np.asarray(head[where]) == keys[inside]
        out[inside[hit]] = where[hit]
    return _tail_lookup(out, keys, full, tail)


def _fenced_lookup(
    sorted_keys: np.ndarray,
    fence: np.ndarray,
    sorter: np.ndarray | None,
    p_key: np.ndarray | None,
    keys: np.ndarray,
    what: str,
) -> np.ndarray:
    """:func:`_lookup`'s answer for the sorted part (no tail), found with its fence: the
    position of each key in ``sorted_keys`` (with ``sorter``: ``sorter`` there, the phrase id,
    checked against ``p_key``), -1 where it is not there."""
    keys = np.asarray(keys, dtype=np.int64)
    out = np.full(keys.size, -1, dtype=np.int64)
    n = sorted_keys.shape[0]
    if n == 0 or keys.size == 0:
        return out
    at = fenced_search(sorted_keys, fence, keys, what)
    inside = np.flatnonzero(at < n)
    hit = fetch(sorted_keys, at[inside]) == keys[inside]
    found, where = inside[hit], at[inside[hit]]
    if sorter is not None and p_key is not None:
        where = fetch(sorter, where).astype(np.int64)
        bad = (where < 0) | (where >= p_key.shape[0])
        if bool(bad.any()) or bool(np.any(fetch(p_key, where) != keys[found])):
            raise IndexFormatError(_DAMAGED.format(f"the saved {what} disagrees with p_key"))
    out[found] = where
    return out


def _tail_lookup(
    out: np.ndarray, keys: np.ndarray, full: np.ndarray, tail: np.ndarray
) -> np.ndarray:
    """``out`` (:func:`_fenced_lookup`'s) with the keys it did not find looked up in
    ``full[tail]`` (in key order), as :func:`_lookup` does."""
    if tail.size:
        rest = np.flatnonzero(out < 0)
        tail_keys = np.asarray(full[tail])
        t_at = np.searchsorted(tail_keys, keys[rest])
        in_tail = t_at < tail.size
        rest, t_at = rest[in_tail], t_at[in_tail]
        t_hit = tail_keys[t_at] == keys[rest]
        out[rest[t_hit]] = tail[t_at[t_hit]]
    return out


def _folded(tail: np.ndarray | None, keys: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``keys`` and its parallel ``arrays`` in key order, when ``keys[:h]`` is sorted and
    ``tail`` gives the rest's positions in key order: the tail's rows inserted into the sorted
    part (the memory of an insertion, no order array over the whole); as they are without a
    tail."""
    if tail is None or tail.size == 0:
        return [keys, *arrays]
    head = keys.shape[0] - tail.size
    at = np.searchsorted(np.asarray(keys[:head]), np.asarray(keys[tail]))
    return [np.insert(np.asarray(a[:head]), at, np.asarray(a[tail])) for a in (keys, *arrays)]


def _folded_in_turn(tail: np.ndarray, held: list[np.ndarray | None]) -> list[np.ndarray]:
    """:func:`_folded` of ``held`` (keys first, then its parallel arrays), letting each go
    from ``held`` as its folded array is made: the same arrays, with one old array at a time
    alive beside the new ones where the caller holds no other reference."""
    keys = held[0]
    assert keys is not None
    head = keys.shape[0] - tail.size
    at = np.searchsorted(np.asarray(keys[:head]), np.asarray(keys[tail]))
    del keys
    out = []
    for i in range(len(held)):
        a, held[i] = held[i], None
        assert a is not None
        out.append(np.insert(np.asarray(a[:head]), at, np.asarray(a[tail])))
        del a
    return out


def _emptied(a: np.ndarray) -> np.ndarray:
    """An empty array of ``a``'s type (what a table that gave its counts up keeps of one)."""
    return np.empty((0, *a.shape[1:]), dtype=a.dtype)


def _with_tail(tail: np.ndarray | None, keys: np.ndarray, new_at: np.ndarray) -> np.ndarray:
    """The positions ``tail`` (in the order of ``keys`` at them) with ``new_at`` (keys new to
    both, ascending) merged in."""
    new_at = np.asarray(new_at, dtype=np.int64)
    if tail is None or tail.size == 0:
        return new_at
    at = np.searchsorted(np.asarray(keys[tail]), np.asarray(keys[new_at]))
    return np.insert(tail, at, new_at)


def _tail_is_long(tail: np.ndarray, n: int) -> bool:
    del n  # a fixed bound: see TAIL_MAX
    return tail.size > TAIL_MAX


@dataclass(frozen=True, eq=False)
class PhraseTable:
    """Per-leaf phrase data of a corpus (leaves in index order) and its corpus-level counts.

    Immutable: :meth:`add` and :meth:`remove` return a new table and leave this one valid (an
    index value a reader holds keeps its table). Build with :meth:`build`.
    """

    words: list[str]
    lw_ptr: np.ndarray
    lw: Entries
    ls_ptr: np.ndarray
    ls_key: Entries
    ls_cnt: Entries
    lp_ptr: np.ndarray
    lp_pid: Entries
    p_key: np.ndarray
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def n_leaves(self) -> int:
        return int(self.lw_ptr.size - 1)

    @property
    def saved_from(self) -> Any:
        """The saved generation (a token storage gives at load) this table descends from by
        adds and removals only. Those keep every kept leaf's lists, the phrase keys, the words
        and their stems and flags as they were (new ones are appended), so a save on top of
        that generation writes the new rows of those arrays without comparing the old ones.
        None: built here, or renumbered since."""
        return self._cache.get("saved_from")

    def mark_saved(self, token: Any) -> None:
        """Record that this table is the one saved as (or loaded from) ``token``."""
        self._cache["saved_from"] = token
        none = np.empty(0, dtype=np.int64)
        self._cache["changed_since_saved"] = (none, none)

    @property
    def changed_since_saved(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Since :attr:`saved_from`: the phrase ids whose leaf count or shown form an update
        may have changed (new phrases included), and the surface keys whose count an update
        changed (sorted, distinct), so a save writes those rows of the corpus counts without
        comparing the others. None: not known (not descended from a saved table)."""
        got: tuple[np.ndarray, np.ndarray] | None = self._cache.get("changed_since_saved")
        return got

    def _lineage_from(self, parent: PhraseTable, pids: np.ndarray, keys: np.ndarray) -> None:
        """Carry ``parent``'s saved generation over, with the rows this update changed
        (``pids``, ``keys``: see :attr:`changed_since_saved`)."""
        if parent.saved_from is not None:
            self._cache["saved_from"] = parent.saved_from
            before = parent.changed_since_saved
            if before is not None:
                self._cache["changed_since_saved"] = (
                    np.union1d(before[0], np.asarray(pids, dtype=np.int64)),
                    np.union1d(before[1], np.asarray(keys, dtype=np.int64)),
                )

    # ------------------------------------------------------------------ making one
    @classmethod
    def build(cls, leaf_texts: Sequence[str]) -> PhraseTable:
        """The table of a corpus, extracted :data:`BUILD_BATCH` leaves at a time (the same
        table a single pass gives: phrase ids are numbered by key at the end)."""
        none = np.empty(0, dtype=np.int64)
        ids = np.empty(0, dtype=np.int32)
        zero = np.zeros(1, dtype=np.int64)
        table = cls([], zero, ids, zero, none, ids, zero, ids, none)
        table._cache["derived"] = _Derived(
            _Vocab.empty(), ids, ids, none, ids, ids, none, none, 0, none, none
        )
        if len(leaf_texts) <= BUILD_BATCH:
            return table.add(leaf_texts)
        for lo in range(0, len(leaf_texts), BUILD_BATCH):
            table = table.add(leaf_texts[lo : lo + BUILD_BATCH])
            give_back_freed_memory()  # the batch's temporaries
        table = table._numbered_by_key()
        give_back_freed_memory()
        return table

    def _numbered_by_key(self) -> PhraseTable:
        """This table with its phrase ids renumbered in key order, as a single extraction
        numbers them (a build that added its leaves in batches numbered them batch by batch);
        each leaf's phrase list is sorted again, a batch of leaves at a time. In place, one
        array at a time: only for the table a build is making, which nothing else holds."""
        d = self._cache.pop("derived", None) or self._derive()
        n_p = self.p_key.size
        order = d.full_p_sorted(self.p_key)
        new_of = np.empty(n_p, dtype=np.int32 if n_p < 2**31 else np.int64)
        new_of[order] = np.arange(n_p, dtype=new_of.dtype)
        lp_pid = np.asarray(self.lp_pid)  # a build's own array: written in place
        for lo in range(0, self.n_leaves, BUILD_BATCH):
            ptr = self.lp_ptr[lo : lo + BUILD_BATCH + 1]
            a, b = int(ptr[0]), int(ptr[-1])
            key = _rows(ptr - a) * max(n_p, 1) + new_of[lp_pid[a:b]]
            key.sort()
            lp_pid[a:b] = key % max(n_p, 1)
        for by_pid in (self.p_key, d.p_df, d.p_best):
            by_pid[:] = by_pid[order]
        d.s_pid[:] = new_of[d.s_pid]
        d = replace(
            d, p_sorted=np.arange(n_p, dtype=new_of.dtype), p_tail=None, p_skey=None, p_fence=None
        )
        table = PhraseTable(
            self.words,
            self.lw_ptr,
            self.lw,
            self.ls_ptr,
            self.ls_key,
            self.ls_cnt,
            self.lp_ptr,
            lp_pid,
            self.p_key,
        )
        table._cache["derived"] = d
        return table

    @classmethod
    def from_arrays(
        cls,
        words: list[str],
        arrays: dict[str, Any],
        stems: list[str] | None = None,
        *,
        heads: dict[str, int] | None = None,
        reload: Callable[[], tuple[dict[str, Any], dict[str, int] | None]] | None = None,
    ) -> PhraseTable:
        """A saved table (see :meth:`arrays`); the counts are derived on first use. With
        ``stems`` and :data:`VOCAB_ARRAYS` in ``arrays`` (see :meth:`vocab`) the words are not
        stemmed and tested again. Per-leaf entry arrays may come as :func:`entry_pieces`.
        ``heads``: the saved ``s_key`` group and ``p_sorted`` are sorted only in their first
        that many rows, the rest appended by saves after it (they become the tails an add
        keeps, see :class:`_Derived`: no sort of the whole on load). ``reload``: reads the
        saved counts (and heads) again, for a second update from this table after the first
        grew its counts in place (else they would be derived over the corpus)."""
        missing = [a for a in ARRAYS if a not in arrays]
        if missing:
            raise ValueError(f"phrase table lacks {missing}")
        a = {
            name: arrays[name]
            if isinstance(arrays[name], _Pieces)
            else _ints(arrays[name], small=name in _ID_ARRAYS)
            for name in ARRAYS
        }
        table = cls(
            list(words),
            a["lw_ptr"],
            a["lw"],
            a["ls_ptr"],
            a["ls_key"],
            a["ls_cnt"],
            a["lp_ptr"],
            a["lp_pid"],
            a["p_key"],
        )
        n = table.n_leaves
        ok = (
            n >= 0
            and table.ls_ptr.size == n + 1
            and table.lp_ptr.size == n + 1
            and int(table.lw_ptr[-1]) == table.lw.size
            and int(table.ls_ptr[-1]) == table.ls_key.size == table.ls_cnt.size
            and int(table.lp_ptr[-1]) == table.lp_pid.size
        )
        if not ok:
            raise ValueError("phrase table arrays disagree in size")
        # ids at a few sample rows only (a load reads no array whole: these two are about
        # 480 MB at 1M chunks); every reader checks the rows it reads (ids_below)
        mapped = [p for a in (table.lw, table.lp_pid) for p in getattr(a, "pieces", [a])]
        with sparse_reads(*mapped):  # a page per row, not the read-ahead around it
            for name, high in (("lw", len(words)), ("lp_pid", table.p_key.size)):
                if not _sampled_in(getattr(table, name), 0, high, ID_SAMPLE_ROWS):
                    raise ValueError(f"phrase table array {name} holds an id outside 0..{high - 1}")
        if stems is not None and all(a in arrays for a in VOCAB_ARRAYS):
            saved_vocab = {a: arrays[a] for a in (*VOCAB_ARRAYS, *HASH_ARRAYS) if a in arrays}
            table._cache["vocab"] = (list(stems), saved_vocab)
            if all(a in arrays for a in DERIVED_ARRAYS):
                names = DERIVED_ARRAYS + tuple(
                    a for a in (*WORD_ARRAYS, *FENCE_ARRAYS) if a in arrays
                )
                table._cache["saved_derived"] = {a: arrays[a] for a in names}
                if heads is not None:
                    table._cache["saved_heads"] = dict(heads)
                if reload is not None:
                    table._cache["reload_counts"] = reload
        return table

    def derived_arrays(self) -> Mapping[str, np.ndarray] | None:
        """What to save besides :meth:`vocab` so a load need not derive the corpus counts
        (:data:`DERIVED_ARRAYS`, sorted and without spent forms, ids and counts as int32 where
        they fit; None when they are not at hand), each array made when it is read and not
        kept (:class:`_SavedCounts`). A save in O(change) reads :meth:`held_counts` instead."""
        d = self._cache.get("derived")
        return None if d is None else _SavedCounts(d, self.p_key)

    def restore_saved_counts(self) -> bool:
        """Restore the corpus counts a load left unread (cheap: they are mapped, not derived);
        whether counts are now at hand. What a whole save (a compaction) calls, so that it
        writes them again rather than leave the next load to derive them over the corpus, and
        what a server's warm-up calls so that its first write does not (their checks read
        sample rows of the mapped arrays: a few thousand page faults, 2-3 s at 1M chunks
        when the files are not in the page cache). Only saved counts are restored: never a
        derivation over the corpus, nor a second restore after an update took them."""
        with self._derive_lock():
            if "derived" not in self._cache and "saved_derived" in self._cache:
                self._derived()
            return "derived" in self._cache

    def _derive_lock(self) -> threading.RLock:
        """The lock under which this table's counts are made, so that a warm-up thread and
        the first update never both take the saved counts (the second would then derive them
        over the corpus: minutes at 1M chunks). ``dict.setdefault`` is atomic."""
        lock: threading.RLock = self._cache.setdefault("derive_lock", threading.RLock())
        return lock

    def held_counts(self) -> HeldCounts | None:
        """The corpus counts as this table holds them (None: not at hand), read where a save
        needs them: no fold of the tails, no copy (:meth:`derived_arrays` gives them sorted)."""
        d = self._cache.get("derived")
        return None if d is None else HeldCounts(d)

    def vocab(self) -> tuple[list[str], dict[str, np.ndarray]] | None:
        """What to save besides :meth:`arrays` so a load need not redo the words: the stem list
        and :data:`VOCAB_ARRAYS` (None: a loaded table saved without them, not yet used)."""
        d = self._cache.get("derived")
        if d is not None:
            return d.vocab.saved()
        saved: tuple[list[str], dict[str, np.ndarray]] | None = self._cache.get("vocab")
        return saved

    def arrays(self) -> dict[str, np.ndarray]:
        """What to save (with :attr:`words`): ids and counts that fit as int32, pointers and
        packed keys as int64."""
        return {a: np.asarray(self.saved_array(a)) for a in ARRAYS}

    def saved_array(self, name: str) -> np.ndarray | ArrayParts:
        """Array ``name`` of :meth:`arrays`, as a save writes it: an entry array held in
        pieces stays in pieces (written one after another: joining them for a save held 207 MiB
        more at 200k chunks), and one held as int32 is not read to check that it fits."""
        if name not in ARRAYS:
            raise KeyError(f"the phrase table saves no array {name!r}")
        x = getattr(self, name)
        if name in _ID_ARRAYS and np.dtype(x.dtype) != np.int32:
            x = np.asarray(x)
            if x.size == 0 or (int(x.max()) < 2**31 and int(x.min()) >= 0):
                return x.astype(np.int32, copy=False)
        return x if isinstance(x, _Pieces) else np.asarray(x)

    # ------------------------------------------------------------------ derived counts
    def _derived(self) -> _Derived:
        got = self._cache.get("derived")
        if got is None:
            with self._derive_lock():
                got = self._cache.get("derived")
                if got is None:
                    got = self._derive()
                    self._cache["derived"] = got
        return got

    def _derive(self) -> _Derived:
        """The counts of a loaded table; a table whose arrays contradict each other (damaged
        or crafted files) is an :class:`IndexFormatError`, not a wrong abstract later."""
        saved = self._cache.get("vocab")
        if saved is not None:
            # restored once per table: an update never changes a vocabulary (an add extends a
            # copy), so a second update from this table takes it again (with what was made of
            # it: the words by stem), not the words' checks and flags over the vocabulary
            vocab = self._cache.get("restored_vocab")
            if vocab is None:
                vocab = _Vocab.restore(self.words, *saved)
                self._cache["restored_vocab"] = vocab
            kept = self._cache.pop("saved_derived", None)
            reload = self._cache.get("reload_counts")
            if kept is None and reload is not None:  # a second update from this table
                kept, heads = reload()
                if heads is not None:
                    self._cache["saved_heads"] = heads
            if kept is not None:
                return self._restore_derived(vocab, kept)
        else:
            vocab, _ = _Vocab.empty().extend(self.words)
            if len(set(self.words)) != len(self.words):
                raise IndexFormatError(_DAMAGED.format("words.json lists a word twice"))
        n_p = self.p_key.size
        lp_pid = ids_below(self.lp_pid, n_p, "lp_pid")  # read whole here: checked whole
        p_df = np.bincount(lp_pid, minlength=n_p).astype(np.int64)
        del lp_pid
        s_key, inv = _unique_inverse(np.asarray(self.ls_key))
        s_cnt = np.bincount(inv, weights=np.asarray(self.ls_cnt), minlength=s_key.size)
        s_cnt = s_cnt.astype(np.int64)
        p_sorted = np.argsort(self.p_key, kind="stable")
        s_stem = _pack(np.where(unpack_keys(s_key) >= 0, vocab.stem_of[unpack_keys(s_key)], -1))
        sorted_keys = self.p_key[p_sorted]
        at = np.minimum(np.searchsorted(sorted_keys, s_stem), max(sorted_keys.size - 1, 0))
        if s_stem.size and (sorted_keys.size == 0 or np.any(sorted_keys[at] != s_stem)):
            raise IndexFormatError(_DAMAGED.format("a candidate's phrase is not in p_key"))
        s_pid = p_sorted[at]
        if np.any(p_df[s_pid] == 0):
            raise IndexFormatError(_DAMAGED.format("a candidate's phrase is in no leaf"))
        w_rank, n_ranked, w_first, w_df = _word_stats(
            ids_below(self.lw, len(self.words), "lw"), self.lw_ptr, len(self.words)
        )
        p_best = np.zeros(n_p, dtype=np.int64)
        d = _Derived(
            vocab, p_sorted, p_df, s_key, s_cnt, s_pid, p_best, w_rank, n_ranked, w_first, w_df
        )
        _best_forms(d, None)
        return d

    def _restore_derived(self, vocab: _Vocab, a: dict[str, np.ndarray]) -> _Derived:
        """Saved corpus counts, checked against the per-leaf arrays' sizes and, at evenly
        spread sample rows, their order and ranges (not copied nor read whole: a loaded
        table's arrays stay mapped; those a load mapped copy-on-write an add changes in place,
        see :func:`spare_view`). With saved heads the appended rows become the tails."""
        got = {name: _ints(a[name], small=name in _DERIVED_IDS) for name in DERIVED_ARRAYS}
        n_p, n_w = self.p_key.size, len(self.words)
        p_sorted, s_pid, w_rank = got["p_sorted"], got["s_pid"], got["w_rank"]
        n_ranked = int(got["n_ranked"][0]) if got["n_ranked"].shape == (1,) else -1
        heads = self._cache.pop("saved_heads", None)
        p_tail = s_tail = None
        ok = (
            p_sorted.shape == got["p_df"].shape == got["p_best"].shape == (n_p,)
            and got["s_key"].shape == got["s_cnt"].shape == s_pid.shape
            and w_rank.shape == (n_w,)
            and (n_w == 0 or n_ranked > int(w_rank.max()))
        )
        if ok and heads is not None:
            p_head, s_head = int(heads["p_sorted"]), int(heads["s_key"])
            ok = 0 <= p_head <= n_p and 0 <= s_head <= got["s_key"].shape[0]
            if ok:  # the appended phrase ids are the last ones (ids only grow)
                new_ids = np.asarray(p_sorted[p_head:], dtype=np.int64)
                ok = bool(np.array_equal(np.sort(new_ids), np.arange(p_head, n_p)))
            if ok:
                by_key = np.argsort(np.asarray(self.p_key[new_ids]), kind="stable")
                p_tail = new_ids[by_key] if new_ids.size else None
                p_sorted = p_sorted[:p_head]
                tail_keys = np.asarray(got["s_key"][s_head:])
                s_tail = s_head + np.argsort(tail_keys, kind="stable") if tail_keys.size else None
        # a few hundred spread rows each: on a cold page cache each fault would otherwise read
        # the device's read-ahead window around it, most of each file (2.4 GB at 1M chunks)
        with sparse_reads(p_sorted, self.p_key, got["s_key"], s_pid, got["p_df"]):
            ok = ok and _sampled_sorted(p_sorted, self.p_key, n_p)
            s_key = got["s_key"][: got["s_key"].shape[0] - _n(s_tail)]
            ok = ok and _sampled_sorted(None, s_key, 0)
            ok = ok and _sampled_in(s_pid, 0, n_p) and _sampled_in(got["p_df"], 0, None)
        if not ok:
            raise IndexFormatError(_DAMAGED.format("the saved corpus counts disagree"))
        fences = _saved_fences(a, heads is not None, p_sorted, self.p_key, s_key)
        words: dict[str, np.ndarray] = {}
        if all(name in a for name in WORD_ARRAYS):
            words = {name: _ints(a[name], small=False) for name in WORD_ARRAYS}
            w_first = words["w_first"]
            if (
                w_first.shape != (n_w,)
                or words["w_df"].shape != (n_w,)
                or (n_w and (int(w_first.max()) >= self.n_leaves or int(w_first.min()) < -1))
            ):
                raise IndexFormatError(_DAMAGED.format("the saved word counts disagree"))
        return _Derived(
            vocab,
            p_sorted,
            got["p_df"],
            got["s_key"],
            got["s_cnt"],
            s_pid,
            got["p_best"],
            w_rank,
            n_ranked,
            words.get("w_first"),
            words.get("w_df"),
            s_tail,
            p_tail,
            fences.get("p_skey"),
            fences.get("p_fence"),
            fences.get("s_fence"),
        )

    # ------------------------------------------------------------------ updates
    def add(self, leaf_texts: Sequence[str]) -> PhraseTable:
        """This table with ``leaf_texts`` appended as new leaves."""
        d = self._derived()
        # this table gives its counts up to the new one (and remakes them if asked again), so
        # they are changed in place; its per-leaf arrays are only appended to, in the spare
        # room of their buffers while no other table was made from this one
        del self._cache["derived"]
        own = not self._cache.get("extended", False)
        self._cache["extended"] = True
        vocab, b = _extract(leaf_texts, d.vocab)
        n_old = self.n_leaves
        # phrase ids: the stem keys seen before keep theirs, new ones are numbered on
        uniq, inv = _unique_inverse(b.ls_stem)
        if d.p_sorted.dtype != np.intp:  # a searchsorted sorter is intp: converted once, kept
            d = replace(d, p_sorted=d.p_sorted.astype(np.intp))
        pid_u = d.phrase_ids(self.p_key, uniq)
        n_p_old = self.p_key.size
        # the rows of the counts this add reads, asked for now and at once (a cold page cache
        # would otherwise fault them in one after the other, each with its read-around)
        for by_pid in (d.p_df, d.p_best):
            _ask(by_pid, pid_u)
        for by_word in (d.w_rank, d.w_first, d.w_df):
            _ask(by_word, b.lw)
        fresh = np.flatnonzero(pid_u < 0)
        pid_u[fresh] = n_p_old + np.arange(fresh.size)
        p_key = _append(self.p_key, uniq[fresh], own)
        n_p = p_key.size
        # new phrases join the tail (uniq is sorted: so are they); a long tail is folded in
        p_sorted, p_tail = d.p_sorted, _with_tail(d.p_tail, p_key, pid_u[fresh])
        p_skey, p_fence = d.p_skey, d.p_fence
        if _tail_is_long(p_tail, n_p):
            p_sorted, p_skey = replace(d, p_tail=p_tail).folded_p_sorted(p_key)
            p_fence = None if p_skey is None else fence_of(p_skey)
            p_tail = np.empty(0, dtype=np.int64)
            # the old order goes now, not at the end of the add (a build's folds of a 1M-leaf
            # corpus each held every old and new corpus-wide array at once: its memory peak)
            d = replace(d, p_sorted=_emptied(d.p_sorted), p_skey=None, p_fence=None)
        ls_pid = pid_u[inv]

        # each new leaf's distinct phrases
        ls_leaf = _rows(b.ls_ptr)
        pair = _distinct(ls_leaf * max(n_p, 1) + ls_pid)
        lp_leaf, lp_pid = pair // max(n_p, 1), pair % max(n_p, 1)
        p_df = _grown(d.p_df, n_p, 0)
        _count_into(p_df, lp_pid)

        # corpus surface counts
        u_key, u_inv = _unique_inverse(b.ls_key)
        u_cnt = np.bincount(u_inv, weights=b.ls_cnt, minlength=u_key.size).astype(np.int64)
        u_pid = np.empty(u_key.size, dtype=np.int64)
        u_pid[u_inv] = ls_pid
        at = d.form_positions(u_key)
        hit, miss = at >= 0, at < 0
        for by_form in (d.s_cnt, d.s_pid):
            _ask(by_form, at[hit])
        # the forms seen before get their new occurrences where they are; new forms are
        # appended (in the spare room of the arrays this table gave up, else in new ones: a
        # loaded table's stay mapped and unwritten) and join the tail
        n_s = d.s_key.shape[0]
        n_miss = int(np.count_nonzero(miss))
        s_key = _grown(d.s_key, n_s + n_miss, 0)
        s_cnt = _grown(d.s_cnt, n_s + n_miss, 0)
        s_pid = _grown(d.s_pid, n_s + n_miss, 0)
        s_key[n_s:], s_cnt[n_s:], s_pid[n_s:] = u_key[miss], u_cnt[miss], u_pid[miss]
        s_cnt[at[hit]] += u_cnt[hit]
        s_tail = _with_tail(d.s_tail, s_key, n_s + np.arange(n_miss))
        s_fence = d.s_fence
        if _tail_is_long(s_tail, s_key.shape[0]):  # folded in: sorted again, by a merge
            # each old array goes as its folded one is made (only ``d`` and these held them)
            d = replace(
                d, s_key=_emptied(d.s_key), s_cnt=_emptied(d.s_cnt), s_pid=_emptied(d.s_pid)
            )
            held: list[np.ndarray | None] = [s_key, s_cnt, s_pid]
            del s_key, s_cnt, s_pid
            s_key, s_cnt, s_pid = _folded_in_turn(s_tail, held)
            s_tail = np.empty(0, dtype=np.int64)
            s_fence = fence_of(s_key)  # in memory: a strided read

        # first-appearance ranks: words new to the corpus come after every word it had
        w_rank = _grown(d.w_rank, len(vocab.words), -1)
        newcomers = b.first_words[w_rank[b.first_words] < 0]
        w_rank[newcomers] = d.n_ranked + np.arange(newcomers.size)
        n_ranked = d.n_ranked + int(newcomers.size)
        w_first, w_df = _added_word_stats(d, b, len(vocab.words), n_old)

        p_best = _grown(d.p_best, n_p, 0)
        table = PhraseTable(
            vocab.words,
            _append(self.lw_ptr, self.lw_ptr[-1] + b.lw_ptr[1:], own),
            _entries_appended(self.lw, b.lw, own),
            _append(self.ls_ptr, self.ls_ptr[-1] + b.ls_ptr[1:], own),
            _entries_appended(self.ls_key, b.ls_key, own),
            _entries_appended(self.ls_cnt, b.ls_cnt, own),
            _append(self.lp_ptr, self.lp_ptr[-1] + _ptr(lp_leaf, b.n)[1:], own),
            _entries_appended(self.lp_pid, lp_pid, own),
            p_key,
        )
        new = _Derived(
            vocab,
            p_sorted,
            p_df,
            s_key,
            s_cnt,
            s_pid,
            p_best,
            w_rank,
            n_ranked,
            w_first,
            w_df,
            s_tail,
            p_tail,
            p_skey,
            p_fence,
            s_fence,
        )
        touched = _distinct(ls_pid)  # sorted, as np.unique; its hash path is 10x slower here
        # an add only raises the counts of the batch's forms and ranks no word before an old
        # one, so a touched phrase's best form is its old best or one of the batch's forms:
        # those are the only ones compared (no pass over the corpus's forms)
        olds = np.asarray(p_best[touched])
        olds = olds[olds != 0]
        cand = new.form_positions(np.concatenate([olds, u_key]).astype(np.int64))
        _pick_best(new, _distinct(cand[cand >= 0]))
        table._cache["derived"] = new
        table._lineage_from(self, touched, u_key)
        prev = self._cache.get("layout")
        if prev is not None:
            table._cache["pending"] = (prev, touched, newcomers, self._cache)
        assert table.n_leaves == n_old + b.n
        return table

    def remove(self, keep: np.ndarray) -> PhraseTable:
        """This table with only the leaves where ``keep`` (a bool per leaf) is true.

        The counts are decremented by the removed leaves' entries only; the words whose first
        occurrence was in a removed leaf are the only ones re-ranked, and only the phrases whose
        counts or forms' ranks moved get their shown form again (the corpus is not re-sorted,
        and no layout is made: :meth:`phrase_view` reads what a node's phrases need)."""
        keep = np.asarray(keep, dtype=bool)
        if keep.size != self.n_leaves:
            raise ValueError(f"keep has {keep.size} entries for {self.n_leaves} leaves")
        d = self._derived()
        if d.w_first is None or d.w_df is None:  # a loaded table: once, then kept
            w_rank, n_ranked, w_first, w_df = _word_stats(
                ids_below(self.lw, len(self.words), "lw"), self.lw_ptr, len(self.words)
            )
            d = replace(d, w_rank=w_rank, n_ranked=n_ranked, w_first=w_first, w_df=w_df)
            self._cache["derived"] = d
        assert d.w_first is not None and d.w_df is not None
        gone = np.flatnonzero(~keep)
        gs = csr_positions(self.ls_ptr, gone)
        gp = csr_positions(self.lp_ptr, gone)
        gw = csr_positions(self.lw_ptr, gone)

        # this table gives its counts up to the new one, as an add does (and remakes them if
        # asked again): they are changed in place, copied only when they are not this
        # process's own (a loaded table's mapped arrays, the first time)
        del self._cache["derived"]
        # surface counts: the removed entries' forms only; a form left with none stays, with
        # a count of 0 (a tombstone: nothing is closed up; a save leaves it out)
        at = d.form_positions(np.asarray(self.ls_key[gs], dtype=np.int64))
        if at.size and int(at.min()) < 0:
            raise IndexFormatError(_DAMAGED.format("a leaf's form is not in the corpus counts"))
        s_cnt = _own(d.s_cnt)
        np.subtract.at(s_cnt, at, self.ls_cnt[gs].astype(s_cnt.dtype))
        gone_entries = ids_below(self.lp_pid[gp], self.p_key.size, "lp_pid")
        gone_pids = np.unique(gone_entries).astype(np.int64)
        p_df = _own(d.p_df)
        np.subtract.at(p_df, gone_entries, 1)
        del gone_entries

        def kept_ptr(ptr: np.ndarray) -> np.ndarray:
            return np.concatenate(([0], np.cumsum(np.diff(ptr)[keep]))).astype(np.int64)

        table = PhraseTable(
            self.words,
            kept_ptr(self.lw_ptr),
            _entries_without(self.lw, gw),
            kept_ptr(self.ls_ptr),
            _entries_without(self.ls_key, gs),
            _entries_without(self.ls_cnt, gs),
            kept_ptr(self.lp_ptr),
            _entries_without(self.lp_pid, gp),
            self.p_key,
        )
        w_rank, n_ranked, w_first, w_df, moved = _removed_word_stats(d, self, table, keep, gw)
        s_key, s_pid = d.s_key, d.s_pid
        touched = gone_pids
        # a moved word changes how its forms' ties break, where it now ranks on the other side
        # of a word of its stem (only such words tell forms of one phrase apart)
        flipped = _order_flipped(d.vocab, moved, np.asarray(d.w_rank), w_rank)
        if flipped.size:
            is_moved = np.zeros(len(self.words) + 1, dtype=bool)
            is_moved[flipped] = True
            has = _forms_with(s_key, is_moved)
            touched = np.union1d(touched, s_pid[has]).astype(np.int64)
        p_best = _own(d.p_best)
        p_best[touched] = 0
        new = _Derived(
            d.vocab,
            d.p_sorted,
            p_df,
            s_key,
            s_cnt,
            s_pid,
            p_best,
            w_rank,
            n_ranked,
            w_first,
            w_df,
            d.s_tail,
            d.p_tail,
            d.p_skey,
            d.p_fence,
            d.s_fence,
        )
        _best_forms(new, touched, self.p_key)
        table._cache["derived"] = new
        # its entry arrays are views of this table's buffers: an add to it must not write in
        # their spare room (this table's entries may lie there)
        table._cache["extended"] = True
        table._lineage_from(self, touched, self.ls_key[gs])
        return table

    # ------------------------------------------------------------------ a big build's memory
    def spill_idle(self) -> bool:
        """Move the arrays that scoring does not read (each leaf's surface forms and words,
        the corpus's form counts: about 2 GiB at 1M leaves) out of this process's memory into
        unlinked temporary files mapped copy-on-write, when the table has more than
        :data:`KEEP_LAYOUT_MAX_PHRASES` phrases. The values and what reads them are unchanged
        (a save or an add reads them back from the page cache). True for a big table (an array
        stays in memory where no temporary file can be written)."""
        d = self._cache.get("derived")
        if self.p_key.size <= KEEP_LAYOUT_MAX_PHRASES or d is None:
            return False
        if isinstance(self.ls_key, np.memmap):
            return False  # done already
        for name in ("lw", "ls_key", "ls_cnt"):
            object.__setattr__(self, name, _mapped_copy(getattr(self, name)))
        self._cache["derived"] = dataclasses.replace(
            d, s_key=_mapped_copy(d.s_key), s_cnt=_mapped_copy(d.s_cnt), s_pid=_mapped_copy(d.s_pid)
        )
        give_back_freed_memory()
        return True

    def spill_laid_out(self) -> bool:
        """After :meth:`phrases` laid the corpus out: move the per-phrase counts scoring does
        not read (each phrase's best form, its count, the key order: the layout holds its own
        copies of what it needs; about 0.9 GiB at 1M leaves), and the layout's by-column
        arrays it does not read either (each column's phrase and order key, which an add
        extends: about 0.6 GiB), into unlinked temporary files mapped copy-on-write, as
        :meth:`spill_idle` does, when the table is as big as that asks. The values and what
        reads them (an add, a removal, a save) are unchanged. True when they were moved."""
        d = self._cache.get("derived")
        got = self._cache.get("layout")
        if self.p_key.size <= KEEP_LAYOUT_MAX_PHRASES or d is None or got is None:
            return False
        if isinstance(d.p_best, np.memmap):
            return False  # done already
        self._cache["derived"] = dataclasses.replace(
            d,
            p_best=_mapped_copy(d.p_best),
            p_df=_mapped_copy(d.p_df),
            p_sorted=_mapped_copy(d.p_sorted),
        )
        del d
        ph = dataclasses.replace(got.phrases, pid_of=_mapped_copy(got.phrases.pid_of))
        self._cache["layout"] = dataclasses.replace(
            got, col_key=_mapped_copy(got.col_key), phrases=ph
        )
        del got, ph
        give_back_freed_memory()
        return True

    def spill_leaf_phrases(self) -> Phrases | None:
        """Move each leaf's phrase ids (:attr:`lp_pid`) into an unlinked temporary file mapped
        copy-on-write, as :meth:`spill_idle` does, when the table is that big and laid out:
        what a build's scoring does once it has read them (split into the rows it scores).
        Returns the layout's phrases with the moved array (the caller reads those from then
        on), None when nothing was moved."""
        got = self._cache.get("layout")
        if self.p_key.size <= KEEP_LAYOUT_MAX_PHRASES or got is None:
            return None
        if not isinstance(self.lp_pid, np.ndarray) or isinstance(self.lp_pid, np.memmap):
            return None
        mapped = _mapped_copy(self.lp_pid)
        if mapped is self.lp_pid:
            return None  # no temporary file: it stays in memory
        object.__setattr__(self, "lp_pid", mapped)
        ph = dataclasses.replace(got.phrases, lp_pid=mapped)
        self._cache["layout"] = dataclasses.replace(got, phrases=ph)
        return ph

    def phrase_view(self) -> Phrases:
        """What :func:`keyword_abstracts` reads for a few nodes (an update), without laying out
        the corpus: a phrase's column order key, word count, entity flag and shown form are
        computed from its counts when a node asks for it (the same values, and the same order,
        as :meth:`phrases` gives). The full layout when one is at hand already."""
        got = self._cache.get("layout")
        if got is not None:
            return cast(Phrases, got.phrases)
        d = self._derived()
        look = _PerPhrase(self, d)
        lazy: Any = [_Lookup(look, i) for i in range(4)]
        return Phrases(
            lp_ptr=self.lp_ptr,
            lp_pid=self.lp_pid,
            col_of=lazy[0],
            pid_of=np.empty(0, dtype=np.int32),
            df=d.p_df,
            key=self.p_key,
            is_stop=d.vocab.is_stop,
            surface_ids=lazy[3],
            words=lazy[1],
            entity=lazy[2],
            vocab=d.vocab.words,
            lazy=True,
        )

    # ------------------------------------------------------------------ what abstracts read
    def release_big_layout(self) -> bool:
        """Let the layout go when the table has more than :data:`KEEP_LAYOUT_MAX_PHRASES`
        phrases (a build's abstracts are scored: what follows, BM25 and the save, does not
        read it). True when it was let go; :meth:`phrases` remakes it on demand."""
        if self.p_key.size <= KEEP_LAYOUT_MAX_PHRASES or "layout" not in self._cache:
            return False
        del self._cache["layout"]
        give_back_freed_memory()
        return True

    def phrases(self) -> Phrases:
        """The corpus's kept phrases in the order a fresh extraction numbers them, with the
        leaf x phrase presence matrix (what :func:`keyword_abstracts` scores). Made once per
        table; after :meth:`add` from the layout of the table added to, only the phrases the
        new leaves hold are redone."""
        got = self._cache.get("layout")
        if got is None:
            pending = self._cache.pop("pending", None)
            d = self._derived()
            if pending is None:
                got = _layout(self, d)
            else:
                prev, touched, newcomers, source = pending
                if source.get("layout") is prev:
                    # the table added to gives its layout up (it remakes one if asked again),
                    # so its arrays' spare room can be written here instead of copied
                    del source["layout"]
                    got = _layout_after_add(self, d, prev, touched, newcomers)
                else:  # another table was made from that layout already
                    got = _layout(self, d)
            self._cache["layout"] = got
        return got.phrases


@dataclass(frozen=True)
class _Layout:
    """A table's phrases as abstracts read them, with what an add needs to extend them."""

    stem_first: np.ndarray  # per stem id: first-appearance rank of its first word
    col_key: np.ndarray  # each column's order key (its stems' first ranks, packed), ascending
    phrases: Phrases


def _pads(v: _Vocab) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`_flags` reads of a -1 padded form: capitalised, and capitalised or a digit
    or a stopword (the pad: false, true)."""
    return np.append(v.is_cap, False), np.append(v.is_cap | v.is_digit | v.is_stop, True)


def _flags(
    v: _Vocab,
    stems: np.ndarray,
    surface: np.ndarray,
    pads: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word counts, entity flags and kept flags of present phrases, from their stems and shown
    forms (n x 3 each)."""
    n_words = (stems >= 0).sum(axis=1).astype(np.int64)
    pad_cap, pad_ok = pads or _pads(v)
    is_entity = np.all(pad_ok[surface], axis=1) & np.any(pad_cap[surface], axis=1)
    last = surface[np.arange(surface.shape[0]), np.maximum(n_words - 1, 0)]
    keep = ~((n_words > 1) & ~v.is_cap[surface[:, 0]] & v.is_cap[last])
    keep &= ~((n_words == 1) & v.roman[surface[:, 0]])
    inner = surface[:, 1]
    keep &= (n_words < MAX_NGRAM) | ~v.is_stop[inner] | (is_entity & v.joiner[inner])
    return n_words, is_entity, keep


def _order_key(stems: np.ndarray, stem_first: np.ndarray) -> np.ndarray:
    return _pack(np.where(stems >= 0, stem_first[stems], -1))


def _finish(
    table: PhraseTable,
    d: _Derived,
    stem_first: np.ndarray,
    pid_of: np.ndarray,
    col_key: np.ndarray,
    arrays: tuple[np.ndarray, ...],
) -> _Layout:
    surface, words, entity = arrays
    n_p = table.p_key.size
    col_of = np.full(n_p, -1, dtype=np.int32)
    col_of[pid_of] = np.arange(pid_of.size, dtype=np.int32)
    ph = Phrases(
        lp_ptr=table.lp_ptr,
        lp_pid=np.asarray(table.lp_pid),
        col_of=col_of,
        pid_of=pid_of.astype(np.int32, copy=False),
        df=d.p_df.astype(np.int32),  # a copy: an add changes the counts in place
        key=table.p_key,
        is_stop=d.vocab.is_stop,
        surface_ids=surface,
        words=words,
        entity=entity,
        vocab=d.vocab.words,
    )
    return _Layout(stem_first, col_key, ph)


def _layout(table: PhraseTable, d: _Derived) -> _Layout:
    """The layout of every phrase (a load, a build, after a removal), unpacked and flagged
    :data:`_LAYOUT_BLOCK` phrases at a time into int32 arrays."""
    v = d.vocab
    n_p = table.p_key.size
    ranked = np.flatnonzero(d.w_rank >= 0)
    stem_first = np.full(len(v.stem_index) + 1, MAX_PACKED, dtype=np.int64)
    w_stem, w_rank = v.stem_of[ranked], d.w_rank[ranked]
    order = np.lexsort((w_rank, w_stem))  # by stem, its earliest word first
    s_sorted = w_stem[order]
    head = np.concatenate(([True], s_sorted[1:] != s_sorted[:-1])) if order.size else order
    stem_first[s_sorted[head]] = w_rank[order][head]

    # in buffers with room to spare, so the adds that follow grow them in place
    def buffer(dtype: Any, fill: Any, width: int = 0) -> np.ndarray:
        shape = (0, width) if width else (0,)
        return _new_buffer(np.empty(shape, dtype=dtype), n_p, fill)

    surface = buffer(np.int32, -1, MAX_NGRAM)
    words, entity = buffer(np.int8, 0), buffer(bool, False)
    kept_parts, key_parts = [], []
    for lo in range(0, n_p, _LAYOUT_BLOCK):
        hi = min(lo + _LAYOUT_BLOCK, n_p)
        block_stems = unpack_keys(table.p_key[lo:hi])
        words[lo:hi] = (block_stems >= 0).sum(axis=1)
        present = np.flatnonzero(d.p_df[lo:hi] > 0)
        shown = unpack_keys(d.p_best[lo:hi][present])
        at = lo + present
        surface[at] = shown
        _, entity[at], keep = _flags(v, block_stems[present], shown)
        kept_parts.append(at[keep].astype(np.int32 if n_p < 2**31 else np.int64))
        key_parts.append(_order_key(block_stems[present[keep]], stem_first))
    kept = np.concatenate(kept_parts) if kept_parts else np.empty(0, dtype=np.int64)
    del kept_parts
    ckey = np.concatenate(key_parts) if key_parts else np.empty(0, dtype=np.int64)
    del key_parts
    # present phrases have distinct stems, and so distinct order keys: no ties to break
    by_key = np.argsort(ckey, kind="stable")
    pid_of = kept[by_key]
    del kept
    col_key = ckey[by_key]
    del ckey, by_key
    return _finish(table, d, stem_first, pid_of, col_key, (surface, words, entity))


MAX_PIECES = 64
"""Pieces a per-leaf entry array (:class:`_Pieces`) may hold before it is copied into one
again: a removal splits a piece where its leaves were, an add after a load or a removal
appends one. So an update copies none of the corpus's entries, and one in about
``MAX_PIECES / 2`` updates copies them all once."""


class _Pieces(ArrayParts):
    """A 1-D array held as consecutive pieces (views of earlier tables' arrays and the new
    entries), read like the array they make up: by position (``a[positions]``, ``a[i:j]``),
    or whole (``np.asarray(a)``, which also makes this one piece; a save writes the pieces
    without that). Lets a removal drop a few leaves' entries and an add append a few without
    copying every other entry (a per-leaf array of a 1M-leaf corpus holds 10**8 entries)."""

    __slots__ = ("dtype", "pieces", "starts")

    def __init__(self, pieces: Sequence[np.ndarray]) -> None:
        kept = [p for p in pieces if p.shape[0]]
        self.dtype = np.result_type(*pieces) if pieces else np.dtype(np.int64)
        self.pieces = kept or [np.empty(0, dtype=self.dtype)]
        lengths = [p.shape[0] for p in self.pieces]
        self.starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))

    @property
    def size(self) -> int:
        return int(self.starts[-1])

    def parts(self) -> Sequence[np.ndarray]:
        return self.pieces

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    ndim = 1

    def __len__(self) -> int:
        return self.size

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if len(self.pieces) > 1:  # once: later reads see one piece
            self.pieces = [np.concatenate(self.pieces).astype(self.dtype, copy=False)]
            self.starts = np.array([0, self.pieces[0].shape[0]], dtype=np.int64)
        whole = self.pieces[0]
        if copy:  # np.array(pieces): the caller may write to it
            return np.array(whole, dtype=dtype)
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.size)
            if step == 1:
                return self._span(start, max(start, stop))
        elif isinstance(key, (int, np.integer)):
            i = int(key) + (self.size if int(key) < 0 else 0)
            return self.take(np.array([i], dtype=np.int64))[0]
        else:
            at = np.asarray(key)
            if at.dtype.kind in "iu":
                return self.take(at)
        return np.asarray(self)[key]

    def _span(self, start: int, stop: int) -> np.ndarray:
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        parts = []
        for i in range(max(first, 0), len(self.pieces)):
            lo = int(self.starts[i])
            if lo >= stop:
                break
            piece = self.pieces[i]
            parts.append(piece[max(start - lo, 0) : stop - lo])
        if len(parts) == 1:
            return np.asarray(parts[0])
        return np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The entries at ``positions`` (any shape, 0 <= position < size)."""
        at = np.asarray(positions, dtype=np.int64)
        if len(self.pieces) == 1:
            return np.asarray(self.pieces[0][at])
        flat = at.reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.size):
            raise IndexError(f"a position is outside an array of {self.size} entries")
        order = None
        if flat.size > 1 and bool(np.any(flat[1:] < flat[:-1])):
            order = np.argsort(flat, kind="stable")
            flat = flat[order]
        cuts = np.searchsorted(flat, self.starts)
        got = np.empty(flat.size, dtype=self.dtype)
        for i, piece in enumerate(self.pieces):
            lo, hi = int(cuts[i]), int(cuts[i + 1])
            if hi > lo:
                got[lo:hi] = piece[flat[lo:hi] - self.starts[i]]
        if order is not None:
            out = np.empty_like(got)
            out[order] = got
            got = out
        return got.reshape(at.shape)

    def without(self, at: np.ndarray) -> _Pieces:
        """These entries but those at the sorted positions ``at`` (their pieces split)."""
        at = np.asarray(at, dtype=np.int64)
        starts = np.concatenate(([0], at + 1))
        ends = np.concatenate((at, [self.size]))
        runs = np.flatnonzero(ends > starts)
        pieces: list[np.ndarray] = []
        for r in runs.tolist():
            pieces += self._views(int(starts[r]), int(ends[r]))
        return _Pieces(pieces or [self.pieces[0][:0]])._bounded()

    def _views(self, start: int, stop: int) -> list[np.ndarray]:
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        out = []
        for i in range(max(first, 0), len(self.pieces)):
            lo = int(self.starts[i])
            if lo >= stop:
                break
            out.append(self.pieces[i][max(start - lo, 0) : stop - lo])
        return out

    def append(self, extra: np.ndarray, own: bool) -> _Pieces:
        """These entries with ``extra`` after them: in the spare room of the last piece when
        ``own`` and it has room (see :func:`_grown`), else as a new piece with room to spare."""
        last = self.pieces[-1]
        n = last.shape[0] + extra.shape[0]
        if own and _has_room(last, n):
            return _Pieces([*self.pieces[:-1], _append(last, extra, True)])
        tail = _new_buffer(extra[:0], extra.shape[0], 0)
        tail[:] = extra
        return _Pieces([*self.pieces, tail])._bounded()

    def _bounded(self) -> _Pieces:
        if len(self.pieces) > MAX_PIECES:
            whole = np.concatenate(self.pieces).astype(self.dtype, copy=False)
            return _Pieces([whole])
        return self


def entry_pieces(parts: Sequence[np.ndarray], dead: np.ndarray) -> np.ndarray | _Pieces:
    """A saved per-leaf entry array from its segments (memory maps) and its removed rows
    (sorted positions in them), read as one array without copying any (:class:`_Pieces`)."""
    if len(parts) == 1 and dead.size == 0:
        return parts[0]
    pieces = _Pieces(list(parts))
    return pieces.without(dead) if dead.size else pieces._bounded()


def spare_view(buf: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` rows of ``buf``, whose rows after them are room an add may append in
    (:func:`_grown`): for a loaded array mapped copy-on-write, whose changes never reach its
    file (:func:`psirag.segments.growable_rows`)."""
    view = buf[:n]
    if view.base is not buf:  # a view of memory it does not own (a small file, read)
        buf = np.array(buf)
        view = buf[:n]
    _SPARE[id(buf)] = buf
    return view


SAMPLE_ROWS = 512
"""Rows a load checks of each saved count array (evenly spread): a damaged or crafted file is
an error at the first update, without a pass over tens of millions of rows."""


ID_SAMPLE_ROWS = 32
"""Rows a load checks of each per-leaf id array (``lw``, ``lp_pid``): every reader checks the
rows it reads (:func:`~psirag.abstracts.phrase_model.ids_below`), so these only catch a
wholly wrong file early; each row read costs a page fault (and the kernel's read-around) on
a file hundreds of MB long."""


FENCE_SAMPLE_ROWS = 32
"""Rows a load checks of a saved ``p_skey`` against ``p_key`` (a lookup checks every block and
phrase it reads: see :func:`_fenced_lookup`)."""


def _saved_fences(
    a: dict[str, Any],
    with_heads: bool,
    p_sorted: np.ndarray,
    p_key: np.ndarray,
    s_key: np.ndarray,
) -> dict[str, np.ndarray]:
    """The saved fences (:data:`FENCE_ARRAYS`) of the sorted parts ``p_sorted`` and ``s_key``
    (the rows before the tails), checked in type and length, ``p_skey`` at a few sample rows;
    none where they were not saved or the sorted parts were not loaded as saved
    (``with_heads`` false: sorted again at load). A saved one that does not fit is an
    :class:`IndexFormatError` naming it."""
    out: dict[str, np.ndarray] = {}
    if not with_heads:
        return out
    step = FENCE_STEP
    n_p, n_s = int(p_sorted.shape[0]), int(s_key.shape[0])
    wanted = {
        "p_skey": n_p,
        "p_fence": (n_p + step - 1) // step,
        "s_fence": (n_s + step - 1) // step,
    }
    for name in FENCE_ARRAYS:
        x = a.get(name)
        if x is None:
            continue
        if x.dtype != np.int64 or x.shape != (wanted[name],):
            raise IndexFormatError(
                _DAMAGED.format(
                    f"the saved {name} holds {x.dtype} {tuple(x.shape)}, "
                    f"not int64 ({wanted[name]},)"
                )
            )
        out[name] = x if name == "p_skey" else np.array(x)  # fences: small, read whole once
    if "p_skey" not in out or "p_fence" not in out:
        out.pop("p_skey", None)
        out.pop("p_fence", None)
    else:
        at = _sample(n_p, FENCE_SAMPLE_ROWS)
        ids = fetch(p_sorted, at).astype(np.int64)
        ok = bool(np.all((ids >= 0) & (ids < p_key.shape[0])))
        ok = ok and bool(np.array_equal(fetch(out["p_skey"], at), fetch(p_key, ids)))
        if not ok:
            raise IndexFormatError(_DAMAGED.format("the saved p_skey disagrees with p_key"))
    return out


def _sample(n: int, rows: int = SAMPLE_ROWS) -> np.ndarray:
    return np.unique(np.linspace(0, max(n - 1, 0), min(n, rows)).astype(np.int64))


def _n(a: np.ndarray | None) -> int:
    return 0 if a is None else int(a.size)


def _sampled_sorted(ids: np.ndarray | None, keys: np.ndarray, n_ids: int) -> bool:
    """Whether ``keys`` (at ``ids`` when given, ids below ``n_ids``) rise strictly at sample
    rows."""
    n = (keys if ids is None else ids).shape[0]
    if n == 0:
        return True
    at = _sample(n)
    if ids is not None:
        got = np.asarray(ids[at], dtype=np.int64)
        if int(got.min()) < 0 or int(got.max()) >= n_ids:
            return False
        at = got
    k = np.asarray(keys[at])
    return bool(np.all(k[1:] > k[:-1]))


def _sampled_in(a: np.ndarray, low: int, high: int | None, rows: int = SAMPLE_ROWS) -> bool:
    """Whether ``a`` holds values in ``[low, high)`` at ``rows`` sample rows."""
    if a.shape[0] == 0:
        return True
    got = np.asarray(a[_sample(a.shape[0], rows)], dtype=np.int64)
    return int(got.min()) >= low and (high is None or int(got.max()) < high)


def _entries_without(a: np.ndarray | _Pieces, at: np.ndarray) -> np.ndarray | _Pieces:
    """A per-leaf entry array without the entries at the sorted positions ``at``: the kept
    runs as views (:class:`_Pieces`), none of them copied."""
    if at.size == 0:
        return a
    pieces = a if isinstance(a, _Pieces) else _Pieces([np.asarray(a)])
    return pieces.without(at)


def _entries_appended(
    a: np.ndarray | _Pieces, extra: np.ndarray, own: bool
) -> np.ndarray | _Pieces:
    """A per-leaf entry array with ``extra`` after it: in ``a``'s spare room when ``own`` and
    there is room (as :func:`_append`), else as a new piece (:class:`_Pieces`) after ``a``,
    which is not copied (a loaded table's mapped arrays, a table a removal made). ``extra``
    takes ``a``'s int32 when its values fit (a build's ids and counts: half the memory of
    int64, and one dtype across pieces, so joining them makes no int64 copy)."""
    extra = _narrowed(extra, a.pieces[0].dtype if isinstance(a, _Pieces) else a.dtype)
    if isinstance(a, _Pieces):
        return a.append(extra, own)
    if a.shape[0] == 0 or (own and _has_room(a, a.shape[0] + extra.shape[0])):
        return _append(a, extra, own)
    return _Pieces([a]).append(extra, False)


def _narrowed(extra: np.ndarray, dtype: Any) -> np.ndarray:
    """``extra`` as int32 when ``dtype`` is int32 and its values fit, else as it is."""
    if dtype != np.int32 or extra.dtype == np.int32 or extra.dtype.kind not in "iu":
        return extra
    if extra.size and (int(extra.max()) >= 2**31 or int(extra.min()) < -(2**31)):
        return extra
    return extra.astype(np.int32)


def _own(a: np.ndarray) -> np.ndarray:
    """``a`` to be changed in place: itself when it is an array :func:`_new_buffer` made (a
    table's counts it gives up), else a copy in one (a loaded table's mapped counts)."""
    if _has_room(a, a.shape[0]):
        return a
    return _new_buffer(np.asarray(a), a.shape[0], 0)


def _has_room(a: np.ndarray, n: int) -> bool:
    """Whether ``a`` is the start of an array :func:`_new_buffer` made, with room for ``n``
    rows (what :func:`_grown` writes in place)."""
    buf = a.base
    return bool(
        isinstance(buf, np.ndarray)
        and _SPARE.get(id(buf)) is buf
        and buf.shape[1:] == a.shape[1:]
        and buf.shape[0] >= n
        and buf.dtype == a.dtype
        and a.size
        and np.shares_memory(a[:1], buf[:1])
        and buf.flags.writeable
    )


def _append(a: np.ndarray, extra: np.ndarray, own: bool) -> np.ndarray:
    """``a`` with ``extra`` after it: in the spare room of ``a``'s buffer when ``own`` (no
    other array was appended there), else in a new buffer (earlier views stay as they are)."""
    m = a.shape[0]
    n = m + extra.shape[0]
    out = _grown(a, n, 0) if own else _new_buffer(a, n, 0)
    out[m:] = extra
    return out


def _ask(a: np.ndarray | None, at: np.ndarray) -> None:
    """Ask for the pages of the rows ``at`` of ``a`` (those it has) at once, when ``a`` is
    memory-mapped (:func:`~psirag.abstracts.fence.will_need`); nothing else."""
    if a is None or at.size == 0:
        return
    at = np.asarray(at, dtype=np.int64)
    at = at[(at >= 0) & (at < a.shape[0])]
    will_need(a, at, at + 1)


def _grown(a: np.ndarray, n: int, fill: Any) -> np.ndarray:
    """``a`` extended to ``n`` rows of ``fill``, in the spare room of the array it is a view of
    when there is room (the caller owns ``a``: a layout given up), else copied into a new one
    with a quarter to spare: appending one row at a time costs O(1) amortised, not O(n)."""
    m = a.shape[0]
    if _has_room(a, n):
        out = cast(np.ndarray, a.base)[:n]
        out[m:] = fill
        return out
    return _new_buffer(a, n, fill)


def _new_buffer(a: np.ndarray, n: int, fill: Any) -> np.ndarray:
    """``a`` extended to ``n`` rows of ``fill`` in a new buffer with a quarter to spare."""
    m = a.shape[0]
    buf = np.empty((n + n // 4 + 1024, *a.shape[1:]), dtype=a.dtype)
    buf[:m] = a
    buf[m:n] = fill
    _SPARE[id(buf)] = buf
    return buf[:n]


_SPARE: weakref.WeakValueDictionary[int, np.ndarray] = weakref.WeakValueDictionary()
"""The arrays :func:`_grown` made (only their spare room is ever written in place)."""


def _layout_after_add(
    table: PhraseTable,
    d: _Derived,
    prev: _Layout,
    touched: np.ndarray,
    newcomers: np.ndarray,
) -> _Layout:
    """The layout after an add, from the one before: only ``touched`` phrases (those the new
    leaves hold, whose shown form may have changed) are redone. A phrase no new leaf holds
    keeps its form, its flags and its order key: the words new to the corpus rank after every
    word it had, so no stem's first rank moves."""
    v = d.vocab
    old = prev.phrases
    n_old, n_p = old.key.size, table.p_key.size
    stem_first = np.full(len(v.stem_index) + 1, MAX_PACKED, dtype=np.int64)
    stem_first[: prev.stem_first.size - 1] = prev.stem_first[:-1]
    if newcomers.size:
        np.minimum.at(stem_first, v.stem_of[newcomers], d.w_rank[newcomers])

    def grow(a: np.ndarray, fill: Any) -> np.ndarray:
        return _grown(a, n_p, fill)

    words = grow(old.words, 0)
    words[n_old:] = (unpack_keys(table.p_key[n_old:]) >= 0).sum(axis=1)
    surface, entity = grow(old.surface_ids, -1), grow(old.entity, False)
    t_stems = unpack_keys(table.p_key[touched])
    t_surface = unpack_keys(d.p_best[touched])
    surface[touched] = t_surface
    _, entity[touched], t_keep = _flags(v, t_stems, t_surface)

    is_touched = np.zeros(n_p, dtype=bool)
    is_touched[touched] = True
    stay = ~is_touched[old.pid_of]
    base_pid, base_key = old.pid_of[stay], prev.col_key[stay]
    t_pid = touched[t_keep]
    t_key = _order_key(t_stems[t_keep], stem_first)
    by_key = np.argsort(t_key, kind="stable")
    t_pid, t_key = t_pid[by_key], t_key[by_key]
    at = np.searchsorted(base_key, t_key)
    pid_of = np.insert(base_pid, at, t_pid)
    col_key = np.insert(base_key, at, t_key)
    return _finish(table, d, stem_first, pid_of, col_key, (surface, words, entity))


def _ranks(lw: np.ndarray, n_words: int) -> tuple[np.ndarray, int]:
    """Each word's rank by first appearance in the corpus (the per-leaf word lists, in leaf
    order, are the corpus's words in first-occurrence order leaf by leaf); -1 if absent."""
    w_rank = np.full(n_words, -1, dtype=np.int64)
    if lw.size == 0:
        return w_rank, 0
    firsts = lw[_first_of_each(lw)]
    w_rank[firsts] = np.arange(firsts.size)
    return w_rank, int(firsts.size)


def _best_forms(d: _Derived, pids: np.ndarray | None, p_key: np.ndarray | None = None) -> None:
    """Set ``p_best`` of ``pids`` (None: every phrase): the surface form with the most
    occurrences, ties to the form whose words appeared first (in place: ``d`` is new). With
    ``p_key``, the phrases' forms are looked up by their stems' words (:func:`_forms_of`)."""
    sel: np.ndarray | None = None
    if pids is None:
        sel = np.flatnonzero(np.asarray(d.s_cnt) > 0)
        d.p_best[:] = 0
    else:
        if pids.size == 0:
            return
        if p_key is not None:
            sel = _forms_of(d, p_key, pids)
        if sel is None:  # a pass over every form
            wanted = np.zeros(d.p_best.size, dtype=bool)
            wanted[pids] = True
            sel = np.flatnonzero(wanted[d.s_pid])
    _pick_best(d, sel)


FORMS_OF_MAX = 1 << 20
"""Candidate surface keys :func:`_forms_of` may make; past it, the forms are found by a pass
over all of them."""


def _forms_of(d: _Derived, p_key: np.ndarray, pids: np.ndarray) -> np.ndarray | None:
    """Positions in ``s_key`` of every form of the phrases ``pids``, found without a pass over
    the corpus's forms: a form of a phrase is a choice of one word per stem of it (a stem has
    a few surface words: case, inflection), so each such choice is looked up (None: more
    choices than :data:`FORMS_OF_MAX`)."""
    ptr, words = _words_by_stem(d.vocab)
    stems = unpack_keys(np.asarray(p_key[pids], dtype=np.int64))
    owner = np.arange(pids.size, dtype=np.int64)
    keys = np.zeros(pids.size, dtype=np.int64)
    for j in range(MAX_NGRAM):
        stem = stems[owner, j]
        has = stem >= 0
        safe = np.where(has, stem, 0)
        count = np.where(has, ptr[safe + 1] - ptr[safe], 1)
        total = int(count.sum())
        if total > FORMS_OF_MAX:
            return None
        offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
        start = np.repeat(np.where(has, ptr[safe], 0), count)
        word = np.where(
            np.repeat(has, count), words[np.minimum(start + offset, words.size - 1)], -1
        )
        keys = (np.repeat(keys, count) << PACK_BITS) | (word + 1)
        owner = np.repeat(owner, count)
    at = d.form_positions(keys)
    return np.unique(at[at >= 0])


def _words_by_stem(v: _Vocab) -> tuple[np.ndarray, np.ndarray]:
    """Per stem id, its words (CSR row pointers and word ids), made once per vocabulary."""
    got: tuple[np.ndarray, np.ndarray] | None = getattr(v, "_by_stem", None)
    if got is None:
        n_stems = len(v.stem_index)
        stem_of = np.asarray(v.stem_of, dtype=np.int64)
        words = np.argsort(stem_of, kind="stable")
        counts = np.bincount(stem_of, minlength=n_stems) if stem_of.size else np.zeros(n_stems)
        ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        got = (ptr, words.astype(np.int64))
        object.__setattr__(v, "_by_stem", got)  # a cache: the vocabulary itself is unchanged
    return got


def _pick_best(d: _Derived, sel: np.ndarray) -> None:
    """Set ``p_best`` of the phrases of the forms at positions ``sel`` to the best of those
    forms (a removal leaves spent forms as tombstones: they are passed over)."""
    for by_form in (d.s_cnt, d.s_key, d.s_pid):
        _ask(by_form, sel)
    sel = sel[np.asarray(d.s_cnt[sel]) > 0]
    keys = d.s_key[sel]
    words = unpack_keys(keys)
    rkey = _pack(np.where(words >= 0, d.w_rank[words], -1))
    pid = d.s_pid[sel]
    order = np.lexsort((rkey, -d.s_cnt[sel], pid))
    p_sorted = pid[order]
    first = np.concatenate(([True], p_sorted[1:] != p_sorted[:-1])) if order.size else order
    d.p_best[p_sorted[first]] = keys[order][first]


def _word_stats(
    lw: np.ndarray, lw_ptr: np.ndarray, n_words: int
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """Each word's first-appearance rank (:func:`_ranks`), the leaf of its first occurrence
    (-1: absent) and how many leaves hold it, from the per-leaf word lists."""
    w_rank, n_ranked = _ranks(lw, n_words)
    w_first = np.full(n_words, -1, dtype=np.int64)
    w_df = np.bincount(lw, minlength=n_words).astype(np.int64) if lw.size else np.zeros(n_words)
    if lw.size:
        at = _first_of_each(lw)
        w_first[lw[at]] = np.searchsorted(lw_ptr, at, side="right") - 1
    return w_rank, n_ranked, w_first, w_df.astype(np.int64)


def _added_word_stats(
    d: _Derived, b: _Batch, n_words: int, n_old: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``d``'s first leaves and leaf counts with batch ``b`` appended after ``n_old`` leaves
    (in the spare room of the arrays ``d`` gave up, as the other counts)."""
    if d.w_first is None or d.w_df is None:
        return None, None
    w_df = _grown(d.w_df, n_words, 0)
    _count_into(w_df, b.lw)
    w_first = _grown(d.w_first, n_words, -1)
    if b.lw.size:
        at = _first_of_each(b.lw)
        firsts = b.lw[at]
        fresh = w_first[firsts] < 0
        w_first[firsts[fresh]] = n_old + np.searchsorted(b.lw_ptr, at[fresh], side="right") - 1
    return w_first, w_df


def _removed_word_stats(
    d: _Derived, old: PhraseTable, new: PhraseTable, keep: np.ndarray, gw: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """Ranks, first leaves and leaf counts after a removal, and the words it moved (their first
    occurrence was in a removed leaf and they occur in a kept one).

    Only the order of ranks matters (ties break by it), so a word that vanished leaves the
    others' order as it was; a moved word is placed after the last unmoved word whose first
    occurrence precedes its new one. The words are then ranked densely again (a sort over the
    vocabulary, not the corpus)."""
    assert d.w_first is not None and d.w_df is not None
    gone_words = ids_below(old.lw[gw], len(old.words), "lw")
    w_df = np.array(d.w_df, dtype=np.int64)
    np.subtract.at(w_df, gone_words, 1)
    seen = np.unique(gone_words)
    leaf_now = np.cumsum(keep) - 1  # a kept leaf's new number
    w_first = np.array(d.w_first, dtype=np.int64)
    first_gone = seen[~keep[w_first[seen]]]
    vanished = first_gone[w_df[first_gone] == 0]
    moved = first_gone[w_df[first_gone] > 0]
    present = w_first >= 0
    w_first[present] = leaf_now[w_first[present]]
    w_first[vanished] = -1
    if vanished.size == 0 and moved.size == 0:
        return d.w_rank, d.n_ranked, w_first, w_df, moved
    # the moved words' next occurrences: scanned from the first removed leaf they were in,
    # a block at a time, until each is found (the new table's own numbering)
    need = np.zeros(len(old.words), dtype=bool)
    need[moved] = True
    found = np.full(len(old.words), -1, dtype=np.int64)
    pos = int(new.lw_ptr[int(leaf_now[int(d.w_first[moved].min())]) + 1]) if moved.size else 0
    left, block = int(moved.size), 1 << 12
    while left:
        if pos >= new.lw.size:
            raise IndexFormatError(_DAMAGED.format("a word's leaf count disagrees with the leaves"))
        chunk = ids_below(new.lw[pos : pos + block], len(new.words), "lw")
        hit = np.flatnonzero(need[chunk])
        if hit.size:
            words = chunk[hit]
            first = _first_of_each(words)
            found[words[first]] = pos + hit[first]
            need[words[first]] = False
            left -= int(first.size)
        pos += block
        block *= 2
    at = found[moved]
    leaf = np.searchsorted(new.lw_ptr, at, side="right") - 1
    w_first[moved] = leaf
    # unmoved ranked words in rank order: their first leaves do not decrease along it
    w_rank_old = np.asarray(d.w_rank, dtype=np.int64)
    stays = w_rank_old >= 0
    stays[vanished] = False
    stays[moved] = False
    u_words = _in_rank_order(np.flatnonzero(stays), w_rank_old)
    u_rank, u_first = w_rank_old[u_words], w_first[u_words]
    pred = np.empty(moved.size, dtype=np.int64)
    for i, (m_leaf, m_at) in enumerate(zip(leaf.tolist(), at.tolist(), strict=True)):
        k = int(np.searchsorted(u_first, m_leaf, side="left")) - 1
        best = int(u_rank[k]) if k >= 0 else -1
        before = ids_below(new.lw[int(new.lw_ptr[m_leaf]) : m_at], len(new.words), "lw")
        here = before[stays[before] & (w_first[before] == m_leaf)]
        if here.size:
            best = max(best, int(w_rank_old[here].max()))
        pred[i] = best
    ordered = _with_moved(u_words, u_rank, moved, pred, at)
    w_rank = np.full(len(old.words), -1, dtype=np.int64)
    w_rank[ordered] = np.arange(ordered.size)
    return w_rank, int(ordered.size), w_first, w_df, moved


def _in_rank_order(words: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``words`` by ``rank`` (a stable sort): the ranks are distinct dense numbers, so placed
    by them in one pass over the vocabulary, not a sort of it (a sort where two are equal)."""
    r = np.asarray(rank[words], dtype=np.int64)
    if r.size and int(r.min()) >= 0:
        slots = np.full(int(r.max()) + 1, -1, dtype=np.int64)
        slots[r] = words
        placed = slots[slots >= 0]
        if placed.size == words.size:  # no two words of one rank
            return placed
    return words[np.argsort(r, kind="stable")]


def _with_moved(
    u_words: np.ndarray, u_rank: np.ndarray, moved: np.ndarray, pred: np.ndarray, at: np.ndarray
) -> np.ndarray:
    """The words in their new rank order: the unmoved ones ``u_words`` (by ``u_rank``,
    ascending) with each moved word after the unmoved ones ranked at most its ``pred``, the
    moved ones among themselves by ``(pred, at)``: the order of ``lexsort((at, is_moved,
    rank))`` over both, made by inserting the few moved words (not a sort of the vocabulary)."""
    m_order = np.lexsort((at, pred))
    where = np.searchsorted(u_rank, pred[m_order], side="right")
    return np.insert(u_words, where, moved[m_order])


def _order_flipped(
    v: _Vocab, moved: np.ndarray, old_rank: np.ndarray, new_rank: np.ndarray
) -> np.ndarray:
    """The ``moved`` words whose rank order against another present word of their stem is not
    what it was. Forms of one phrase differ only in which word of each stem they show, and
    their ties break by those words' ranks: a moved word that keeps its order against every
    word of its stem changes no phrase's shown form."""
    if moved.size == 0:
        return moved
    ptr, words = _words_by_stem(v)
    stem = np.asarray(v.stem_of)[moved]
    count = ptr[stem + 1] - ptr[stem]
    offset = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(
        np.cumsum(count) - count, count
    )
    owner = np.repeat(moved, count)
    other = words[np.repeat(ptr[stem], count) + offset]
    ok = (other != owner) & (new_rank[other] >= 0)
    owner, other = owner[ok], other[ok]
    before = old_rank[owner] < old_rank[other]
    after = new_rank[owner] < new_rank[other]
    return np.unique(owner[before != after])


_SCAN_BLOCK = 1 << 16
"""Forms :func:`_forms_with` reads at a time (its temporaries stay in the CPU's cache)."""


def _forms_with(s_key: np.ndarray, is_word: np.ndarray) -> np.ndarray:
    """Per surface form (packed word ids): whether one of its words is marked in ``is_word``
    (one entry per word, plus a last False for the pad). One pass, a block at a time."""
    assert MAX_NGRAM == 3  # the three fields below
    mask = (1 << PACK_BITS) - 1
    has = np.empty(s_key.shape[0], dtype=bool)
    # a few marked words (a removal's): compared field by field, twice as fast as a lookup
    few = (np.flatnonzero(is_word[:-1]) + 1).tolist()
    for lo in range(0, s_key.shape[0], _SCAN_BLOCK):
        k = np.asarray(s_key[lo : lo + _SCAN_BLOCK])
        if len(few) <= _FEW_WORDS:
            fields = (k & mask, (k >> PACK_BITS) & mask, k >> (2 * PACK_BITS))
            h = np.zeros(k.shape[0], dtype=bool)
            for word in few:
                for field in fields:
                    h |= field == word
        else:
            h = is_word[(k & mask) - 1]
            h |= is_word[((k >> PACK_BITS) & mask) - 1]
            h |= is_word[(k >> (2 * PACK_BITS)) - 1]
        has[lo : lo + _SCAN_BLOCK] = h
    return has


_FEW_WORDS = 4
"""Marked words up to which :func:`_forms_with` compares each field with each of them."""


def _stem_first(d: _Derived) -> np.ndarray:
    """Per stem id: the first-appearance rank of its earliest word (MAX_PACKED: none)."""
    v = d.vocab
    stem_first = np.full(len(v.stem_index) + 1, MAX_PACKED, dtype=np.int64)
    ranked = np.flatnonzero(np.asarray(d.w_rank) >= 0)
    np.minimum.at(stem_first, v.stem_of[ranked], np.asarray(d.w_rank)[ranked])
    return stem_first


class _PerPhrase:
    """Column order key (-1: not kept or absent), word count, entity flag and shown form of
    the phrases asked for, from their keys and counts (what :func:`_layout` computes for every
    phrase at once)."""

    _KEPT_BATCHES = 8
    """Batches remembered for the single-phrase reads that follow them (the picker's)."""

    def __init__(self, table: PhraseTable, d: _Derived) -> None:
        self.p_key, self.p_best, self.p_df = table.p_key, d.p_best, d.p_df
        self.vocab = d.vocab
        self.stem_first = _stem_first(d)
        self.pads = _pads(d.vocab)
        self.batches: list[tuple[np.ndarray, tuple[np.ndarray, ...]]] = []
        self.one: dict[int, tuple[np.ndarray, ...]] = {}
        # the phrases asked for last (a copy), their values' batch, positions there (None:
        # the batch is theirs) and the values gathered so far
        self._last: (
            tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray | None, dict[int, np.ndarray]]
            | None
        ) = None

    def __call__(self, pids: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(self.field(pids, which) for which in range(4))

    def field(self, pids: np.ndarray, which: int) -> np.ndarray:
        """One of the values of ``pids``. A node's scoring reads several of them for the same
        phrases one after another (their column keys, word counts, entity flags): the phrases
        last asked for are found once and each value gathered once."""
        if pids.size == 1:
            return self._one(int(pids[0]))[which]
        last = self._last
        if last is None or last[0].size != pids.size or not np.array_equal(last[0], pids):
            last = self._last = (pids.copy(), *self._find(pids), {})
        _, values, at, gathered = last
        got = gathered.get(which)
        if got is None:
            got = values[which] if at is None else values[which][at]
            got.flags.writeable = False  # handed out again for the same phrases
            gathered[which] = got
        return got

    def _find(self, pids: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """The values of ``pids`` (several): the batch they were computed in and their
        positions there, or (None) computed now as a new batch."""
        if self.batches and pids.size:  # most reads are of the node's phrases asked last
            keys, values = self.batches[-1]
            at = np.minimum(np.searchsorted(keys, pids), keys.size - 1)
            if bool(np.all(keys[at] == pids)):
                return values, at
        got = self._compute(pids)
        if pids.size:
            order = np.argsort(pids, kind="stable")
            self.batches = self.batches[-self._KEPT_BATCHES + 1 :]
            self.batches.append((pids[order], tuple(a[order] for a in got)))
        return got, None

    def _one(self, pid: int) -> tuple[np.ndarray, ...]:
        one = self.one.get(pid)
        if one is None:
            for keys, values in reversed(self.batches):
                i = int(np.searchsorted(keys, pid))
                if i < keys.size and int(keys[i]) == pid:
                    one = tuple(a[i : i + 1] for a in values)
                    break
            else:
                one = self._compute(np.array([pid], dtype=np.int64))
            self.one[pid] = one
        return one

    def _compute(self, pids: np.ndarray) -> tuple[np.ndarray, ...]:
        stems = unpack_keys(np.asarray(self.p_key[pids], dtype=np.int64))
        surface = unpack_keys(np.asarray(self.p_best[pids], dtype=np.int64))
        present = np.asarray(self.p_df[pids]) > 0
        n_words, entity, keep = _flags(self.vocab, stems, surface, self.pads)
        keep &= present
        order = np.full(pids.size, -1, dtype=np.int64)
        order[keep] = _order_key(stems[keep], self.stem_first)
        entity &= present
        surface[~present] = -1
        return order, n_words.astype(np.int8), entity, surface.astype(np.int32)


class _Lookup:
    """One of :class:`_PerPhrase`'s values, read by phrase id like an array (``a[pids]``)."""

    def __init__(self, per_phrase: _PerPhrase, which: int) -> None:
        self.per_phrase, self.which = per_phrase, which

    def __getitem__(self, pids: Any) -> Any:
        at = np.asarray(pids, dtype=np.int64)
        got = self.per_phrase.field(at.reshape(-1), self.which)
        return got[0] if at.ndim == 0 else got.reshape(at.shape + got.shape[1:])
