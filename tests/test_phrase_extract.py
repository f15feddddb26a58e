"""The phrase table's extraction of a batch of leaves (``phrases._extract``): it splits the
whole batch as one string with marks between segments and leaves, and groups each leaf's
candidates by one sort of packed (leaf, key rank) values. Its output must equal the plain
reading of the rules: a tokenisation per segment and a sort by leaf, then surface key. Also
the per-phrase data the picker reads (``PhraseInfo``) against the table's unpacked arrays."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pytest
from support import competing_texts

from psirag.abstracts import phrases as phrases_module
from psirag.abstracts.phrase_model import (
    MAX_NGRAM,
    PACK_BITS,
    SEGMENT_RE,
    SPACED_HYPHEN_RE,
    PhraseInfo,
)
from psirag.abstracts.phrases import PhraseTable

_FIELDS = ("n", "lw_ptr", "lw", "ls_ptr", "ls_key", "ls_stem", "ls_cnt", "first_words")

# texts a batch-wide split could get wrong: the marks themselves and other control characters,
# whitespace that str.split knows and the segment rule does not, leaves without a segment,
# spaced hyphens and curly apostrophes, tabs inside segments
_AWKWARD = [
    "",
    "   ",
    "!!! ... ---",
    "Metro- Goldwyn- Mayer went to the Bank of England",
    "it’s the U.S.A. - said x- y and Z -z",
    "a\x00b c\x01d Bank\x1cof\x1dEngland h\x85i j\xa0k the\u2028end",
    "\x00",
    "\x01 \x01",
    " \x00 \x01 ",
    "tab\tseparated\twords  in  a\t \tsegment",
    "Ünïcödé wörds ÄÖ façade, Ünïcödé wörds",
    "one\ntwo three\r\nfour five",
    "X- Y- Z the the the Bank of the Bank",
    "’’’ foo’s bar’s Foo’s",
    "1990 42 -- .",
]


def _reference(texts: Sequence[str], vocab: phrases_module._Vocab) -> tuple:
    """The batch's extraction read straight from the rules, one segment at a time."""
    local: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    tokens: list[int] = []
    seg_of: list[int] = []
    leaf_of: list[int] = []
    n_seg = 0
    for leaf, text in enumerate(texts):
        text = SPACED_HYPHEN_RE.sub("-", text.replace("’", "'"))
        for segment in SEGMENT_RE.findall(text):
            for word in segment.split():
                tokens.append(local[word])
                seg_of.append(n_seg)
                leaf_of.append(leaf)
            n_seg += 1
    vocab, glob = vocab.extend(list(local))
    tok = glob[np.asarray(tokens, dtype=np.int64)] if tokens else np.empty(0, np.int64)
    n = len(texts)
    lw: list[list[int]] = [[] for _ in range(n)]
    seen: set[tuple[int, int]] = set()
    for t, leaf in zip(tok.tolist(), leaf_of, strict=True):
        if (leaf, t) not in seen:
            seen.add((leaf, t))
            lw[leaf].append(t)
    counts: list[dict[int, list[int]]] = [{} for _ in range(n)]
    edge = ~vocab.is_stop[tok] & vocab.starts_alpha[tok] if tok.size else tok.astype(bool)
    stem = vocab.stem_of[tok] if tok.size else tok
    for i in range(tok.size):
        for w in range(1, MAX_NGRAM + 1):
            j = i + w - 1
            if j >= tok.size or seg_of[j] != seg_of[i] or not (edge[i] and edge[j]):
                continue
            tkey = skey = 0
            for k in range(MAX_NGRAM):
                tkey <<= PACK_BITS
                skey <<= PACK_BITS
                if k < w:
                    tkey |= int(tok[i + k]) + 1
                    skey |= int(stem[i + k]) + 1
            entry = counts[leaf_of[i]].setdefault(tkey, [skey, 0])
            entry[1] += 1
    ls = [sorted(c.items()) for c in counts]
    ptr = lambda rows: np.cumsum([0] + [len(r) for r in rows])  # noqa: E731
    return vocab, (
        n,
        ptr(lw),
        [t for row in lw for t in row],
        ptr(ls) if any(ls) else np.zeros(n + 1),
        [k for row in ls for k, _ in row],
        [v[0] for row in ls for _, v in row],
        [v[1] for row in ls for _, v in row],
        glob,
    )


def _batches(seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    pool = competing_texts(60, seed) + _AWKWARD * 2
    rng.shuffle(pool)
    cuts = sorted(rng.sample(range(1, len(pool)), 3))
    return [pool[a:b] for a, b in zip([0, *cuts], [*cuts, len(pool)], strict=True)] + [[], [""]]


@pytest.mark.parametrize(("seed", "split"), [(0, None), (1, None), (2, 1), (3, 3)])
def test_a_batchs_extraction_equals_one_read_segment_by_segment(
    seed: int, split: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if split is not None:  # the batch split a few leaves at a time
        monkeypatch.setattr(phrases_module, "_SPLIT_LEAVES", split)
    got_vocab = want_vocab = phrases_module._Vocab.empty()
    for texts in _batches(seed):
        got_vocab, got = phrases_module._extract(texts, got_vocab)
        want_vocab, want = _reference(texts, want_vocab)
        assert got_vocab.words == want_vocab.words
        assert got_vocab.stem_of.tolist() == want_vocab.stem_of.tolist()
        for name, value in zip(_FIELDS, want, strict=True):
            assert np.asarray(getattr(got, name)).tolist() == np.asarray(value).tolist(), name
    assert any(len(w) > 1 and w[0].isupper() for w in got_vocab.words)  # the batches had words


def test_the_marks_never_become_words_and_end_segments_and_leaves() -> None:
    # a mark typed in a text is punctuation to the segment rule: "Bank" and "England" are in
    # different segments, and a phrase never joins the last words of one leaf to the next
    vocab, b = phrases_module._extract(
        ["Bank\x00England", "Royal Bank", "England Football"], _vocab()
    )
    assert "\x00" not in vocab.words and "\x01" not in vocab.words
    words = {vocab.words[int(t)] for t in b.lw}
    assert words == {"Bank", "England", "Royal", "Football"}
    keys = set(np.asarray(b.ls_key).tolist())
    ids = {w: vocab.words.index(w) + 1 for w in words}
    bank_england = (ids["Bank"] << 2 * PACK_BITS) | (ids["England"] << PACK_BITS)
    royal_bank = (ids["Royal"] << 2 * PACK_BITS) | (ids["Bank"] << PACK_BITS)
    assert royal_bank in keys and bank_england not in keys
    assert np.asarray(b.ls_ptr).tolist() == [0, 2, 5, 8]


def _vocab() -> phrases_module._Vocab:
    return phrases_module._Vocab.empty()


@pytest.mark.parametrize("size", [0, 1, 7, 5000])
def test_unique_inverse_is_numpys_unique_with_inverse(size: int) -> None:
    rng = np.random.default_rng(size)
    a = rng.integers(-3, 40, size).astype(np.int64) << 40  # many equal values, big keys
    got_values, got_inverse = phrases_module._unique_inverse(a)
    want_values, want_inverse = np.unique(a, return_inverse=True)
    assert got_values.tolist() == want_values.tolist()
    assert got_inverse.tolist() == want_inverse.tolist()
    assert (got_values[got_inverse] == a).all()


def test_phrase_info_reads_each_phrases_stems_and_content_words_as_the_arrays_say() -> None:
    # what the picker's duplicate rules read of a phrase (PhraseInfo, unrolled for speed)
    # against the table's own unpacked arrays; trigrams with a stopword inside included
    texts = [*competing_texts(80, 3), "the Bank of England and the Man on Fire", *_AWKWARD]
    ph = PhraseTable.build(texts).phrases()
    info = PhraseInfo(ph)
    stems, content = ph.stem_ids, ph.content_ids
    shift = 2 * PACK_BITS
    inner_stop = 0
    for pid in range(ph.key.size):
        s0, s1, s2 = stems[pid].tolist()
        n, key, first, head, tail, words, entity = info[pid]
        assert (n, key, first) == (int(ph.words[pid]), int(ph.key[pid]), s0)
        assert head == ((s0 + 1) << shift) | ((s1 + 1) << PACK_BITS)
        assert tail == ((s1 + 1) << shift) | ((s2 + 1) << PACK_BITS)
        assert words == content[pid].tolist()
        assert entity == bool(ph.entity[pid])
        inner_stop += n == 3 and words[1] == -1
    assert inner_stop > 0  # a trigram with a stopword inside was read
