"""Which passages count as one: texts equal up to layout (merged at build time, as identical
texts are), and near-duplicates (merged within one result list).

Two documents often hold the same passage in different dress: a heading underlined with
``=====`` in one and ``-----`` in the other, a bullet ``*`` against ``-``, other case or line
breaks. :func:`duplicate_key` maps such texts to one key, so the index's duplicate map
(``SparseIndex.first_copy``) treats them as one text, shown once and naming every source
(``Passage.also``). Texts that still differ in a word or two are near-duplicates: a search
keeps the best of them and names the others' sources, when their word shingles overlap by
:data:`NEAR_DUPLICATE_JACCARD` or more.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np

NEAR_DUPLICATE_JACCARD = 0.9
"""Jaccard similarity of word shingles from which two results count as one."""
SHINGLE_WORDS = 3
"""Words per shingle (texts shorter than this compare as one shingle)."""

_RULES = re.compile(r"[=\-*#_~]{2,}|^[ \t]*[#*\-+>]+(?=[ \t])", re.MULTILINE)
"""Markup that carries no words: runs of rule characters (``=====``, ``---``, ``**``, ``##``)
and the markers that open a heading, bullet or quote line."""
_RULE_CHARS = re.compile(r"[=\-*#_~+>]")
"""The characters every match of :data:`_RULES` holds one of."""
_WORD = re.compile(r"\w+")


def duplicate_key(text: str) -> str:
    """``text`` without markup rules, with whitespace collapsed, casefolded: equal keys are the
    same passage."""
    if _RULE_CHARS.search(text):  # most passages hold no rule character: skip _RULES
        text = _RULES.sub(" ", text)
    # str.split() splits at the characters \s matches (str.isspace; a test checks every one)
    return " ".join(text.split()).casefold()


def _key_hash(key: str) -> int:
    """A hash of a duplicate key that is the same in every process (8 bytes of blake2b), so a
    saved index keeps each chunk's (:attr:`DuplicateMap.hashes`) and a load need not normalise
    every text again. A test makes every key collide."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def first_copy_of(texts: Sequence[str]) -> np.ndarray:
    """For each text, the index of the first text with the same :func:`duplicate_key` (the
    index's ``first_copy``: identical texts, and texts equal up to layout, count once)."""
    return DuplicateMap.of(texts).first_copy


class DuplicateMap:
    """:func:`first_copy_of` with each text's key hash beside it, so that texts appended later
    are mapped without normalising every earlier text again (an add then costs its own texts
    and one vectorised pass over the hashes, not the corpus), also after a load (the hashes
    are saved). Immutable in use: :meth:`extended` returns a new map."""

    # keyed by the key's hash, not the key: a 1M-chunk corpus's keys are a copy of its text;
    # a hash shared by two keys is told apart by comparing them (the later key is its own
    # first copy, found by key among the texts of that hash)
    def __init__(self, first_copy: np.ndarray, hashes: np.ndarray):
        first_copy = np.asarray(first_copy, dtype=np.int64)
        hashes = np.asarray(hashes, dtype=np.int64)
        if first_copy.shape != hashes.shape or first_copy.ndim != 1:
            raise ValueError(
                f"a duplicate map of {first_copy.shape} first copies and {hashes.shape} hashes"
            )
        self.first_copy = first_copy
        self.hashes = hashes

    @property
    def size(self) -> int:
        return int(self.first_copy.size)

    @classmethod
    def of(cls, texts: Sequence[str]) -> DuplicateMap:
        return cls(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)).extended(texts)

    def extended(self, texts: Sequence[str]) -> DuplicateMap:
        """The map of ``texts``, whose first :attr:`size` entries are the texts this map was
        made of (in the same order), the rest new."""
        start = self.size
        if len(texts) < start:
            raise ValueError(f"{len(texts)} texts for a duplicate map of {start}")
        keys = [duplicate_key(texts[i]) for i in range(start, len(texts))]
        new_hashes = np.fromiter((_key_hash(k) for k in keys), dtype=np.int64, count=len(keys))
        # the earlier first copies that share a hash with a new text, in order
        cand = np.flatnonzero(np.isin(self.hashes, new_hashes)) if start and keys else ()
        firsts: dict[int, list[int]] = {}
        for p in [int(p) for p in cand if int(self.first_copy[p]) == int(p)]:
            firsts.setdefault(int(self.hashes[p]), []).append(p)
        known: dict[int, str] = {}  # key of an earlier text, normalised once when needed

        def key_of(j: int) -> str:
            got = known.get(j)
            if got is None:
                got = keys[j - start] if j >= start else duplicate_key(texts[j])
                known[j] = got
            return got

        new = np.empty(len(keys), dtype=np.int64)
        for i, (key, h) in enumerate(zip(keys, new_hashes.tolist(), strict=True)):
            at = start + i
            same = firsts.setdefault(h, [])
            for j in same:
                if key_of(j) == key:
                    new[i] = j
                    break
            else:
                same.append(at)
                known[at] = key
                new[i] = at
        return DuplicateMap(
            np.concatenate([self.first_copy, new]), np.concatenate([self.hashes, new_hashes])
        )

    def kept(self, keep: np.ndarray) -> DuplicateMap:
        """The map of the texts where ``keep`` (a bool per text) is true, in order. A removal
        keeps every group of copies (the texts that share a first copy) and only renumbers
        it: no text is normalised and nothing is sorted but the groups whose first copy was
        removed, so a one-document removal costs a few passes over the arrays, not a sort
        of the corpus's hashes. Exact also when two keys share a hash: groups come from
        :attr:`first_copy`, which the keys made."""
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != self.first_copy.shape:
            raise ValueError(f"keep has {keep.size} entries for a duplicate map of {self.size}")
        first = self.first_copy
        position = np.cumsum(keep, dtype=np.int64) - 1  # each kept text's new place
        groups = first[keep]  # old first copy of each kept text
        new_first = position[groups]
        lost = np.flatnonzero(~keep)
        lost_heads = lost[first[lost] == lost]  # groups that lose their first copy
        if lost_heads.size:
            orphans = np.flatnonzero(np.isin(groups, lost_heads))  # new places, ascending
            if orphans.size:  # each such group's first kept text is its new first copy
                _, head, which = np.unique(groups[orphans], return_index=True, return_inverse=True)
                new_first[orphans] = orphans[head][which.reshape(-1)]
        return DuplicateMap(new_first, self.hashes[keep])


def shingles(text: str, size: int = SHINGLE_WORDS) -> frozenset[tuple[str, ...]]:
    """The word ``size``-grams of ``text`` (casefolded, markup and punctuation dropped)."""
    words = _WORD.findall(duplicate_key(text))
    if len(words) <= size:
        return frozenset([tuple(words)])
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def jaccard(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def merge_near_duplicates(
    ids: Sequence[int],
    text_of: Callable[[int], str],
    *,
    limit: int | None = None,
    threshold: float = NEAR_DUPLICATE_JACCARD,
    heading_of: Callable[[int], str | None] | None = None,
) -> list[tuple[int, list[int]]]:
    """Walk ``ids`` best first; each one whose shingles overlap an earlier kept one's by
    ``threshold`` or more joins that one. Returns ``(kept id, ids merged into it)`` in order,
    stopping once ``limit`` ids are kept (what comes later could only join or be cut).
    ``heading_of`` gives a passage's own title where the title is part of the passage (a
    record's ``title + text``): two passages with different such titles never merge."""
    kept: list[tuple[int, frozenset[tuple[str, ...]], str | None, list[int]]] = []
    for i in ids:
        if limit is not None and len(kept) >= limit:
            break
        mine = shingles(text_of(i))
        heading = None if heading_of is None else heading_of(i)
        for _, theirs, other, merged in kept:
            if heading is not None and other is not None and heading != other:
                continue
            if jaccard(mine, theirs) >= threshold:
                merged.append(i)
                break
        else:
            kept.append((i, mine, heading, []))
    return [(i, merged) for i, _, _, merged in kept]


def record_heading(title: str, text: str) -> str | None:
    """The title of a passage that opens with it on a line of its own (a JSON record's
    ``title + "\n" + text``), as its duplicate key; None for other passages. Records with
    different titles are different entries even when their bodies match (a book series'
    blurb under each book's title)."""
    if title and text.startswith(title + "\n"):
        return duplicate_key(title)
    return None


__all__ = [
    "NEAR_DUPLICATE_JACCARD",
    "DuplicateMap",
    "duplicate_key",
    "first_copy_of",
    "jaccard",
    "merge_near_duplicates",
    "record_heading",
    "shingles",
]
