"""The keyword phrase table keeps its corpus counts by adjusting them (issue 24 item 4): after
random adds and removals its counts equal those derived afresh from its leaves, the abstracts
an update scores for a few nodes equal a full recompute's, and neither a removal nor an
update's scoring lays out or re-ranks the whole corpus."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder, random_phrase_updates
from support import competing_texts as _texts
from support.counting import count_calls
from support.trees import random_tree

from psirag import Index
from psirag.abstracts import phrases as phrases_module
from psirag.abstracts.keywords import keyword_abstracts
from psirag.abstracts.phrase_names import DERIVED_ARRAYS
from psirag.abstracts.phrases import PhraseTable
from psirag.config import IndexConfig


def _counts(table: PhraseTable) -> dict[str, object]:
    """The corpus counts a table holds, with a phrase's shown form only where it is present
    (an absent phrase's is never read)."""
    d = table._derived()
    out: dict[str, object] = {
        name: np.asarray(getattr(d, name)).tolist()
        for name in DERIVED_ARRAYS
        if name not in ("p_best", "n_ranked")
    }
    # the surface forms in use, by key (a removal leaves a form it spent as a tombstone of
    # count 0, an add appends new forms and phrases as a tail kept in key order)
    for name, array in zip(("s_key", "s_cnt", "s_pid"), d.sorted_forms(), strict=True):
        out[name] = np.asarray(array).tolist()
    out["p_sorted"] = np.asarray(d.full_p_sorted(table.p_key)).tolist()
    out["n_ranked"] = d.n_ranked
    present = np.asarray(d.p_df) > 0
    out["p_best"] = np.where(present, np.asarray(d.p_best), 0).tolist()
    out["w_first"] = None if d.w_first is None else np.asarray(d.w_first).tolist()
    out["w_df"] = None if d.w_df is None else np.asarray(d.w_df).tolist()
    return out


def _derived_afresh(table: PhraseTable) -> dict[str, object]:
    """The counts derived from the table's per-leaf arrays alone (what a load without saved
    counts does)."""
    again = PhraseTable.from_arrays(list(table.words), table.arrays())
    return _counts(again)


@pytest.mark.parametrize("seed", range(8))
def test_counts_and_node_abstracts_after_random_updates_equal_a_full_recompute(seed: int) -> None:
    rng = random.Random(seed)
    updates = random_phrase_updates(
        rng, _texts(120, seed), start=16, steps=12, min_left=5, drop_share=0.25, move_first=True
    )
    for table, corpus in updates:
        assert _counts(table) == _derived_afresh(table)
        tree = random_tree(len(corpus), seed)
        inner = list(range(tree.n_leaves, tree.n_nodes))
        nodes = sorted(rng.sample(inner, max(1, len(inner) // 2)))
        full = keyword_abstracts(corpus, tree)  # a fresh table, every node, its full layout
        assert keyword_abstracts(corpus, tree, nodes=nodes, table=table) == [
            full[u - tree.n_leaves] for u in nodes
        ]


def test_removing_the_first_leaf_moves_its_words_and_ranks_them_as_a_fresh_table() -> None:
    corpus = [
        "Zebra Crossing and Apple Pie near the river.",
        "Apple Pie again, and a Zebra Crossing too.",
        "River boats and Zebra Crossing.",
        "Only the river and apple trees.",
    ]
    table = PhraseTable.build(corpus)
    keep = np.array([False, True, True, True])
    after = table.remove(keep)
    fresh = PhraseTable.build([t for t, k in zip(corpus, keep.tolist(), strict=True) if k])
    d, f = after._derived(), fresh._derived()
    assert d.w_rank is not None
    # the same order of words by first appearance (word ids differ between the tables)
    order = [after.words[w] for w in np.argsort(np.where(d.w_rank < 0, 1 << 40, d.w_rank))]
    order = order[: d.n_ranked]
    fresh_order = [fresh.words[w] for w in np.argsort(np.where(f.w_rank < 0, 1 << 40, f.w_rank))]
    assert order == fresh_order[: f.n_ranked]
    assert after.phrases().surface_tokens.shape == fresh.phrases().surface_tokens.shape
    assert [after.phrases().text(i) for i in range(after.phrases().pid_of.size)] == [
        fresh.phrases().text(i) for i in range(fresh.phrases().pid_of.size)
    ]


def test_a_removal_and_the_update_scoring_do_not_lay_out_or_rerank_the_corpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corpus = _texts(60, 5)
    table = PhraseTable.build(corpus)
    layouts = count_calls(monkeypatch, phrases_module, "_layout")
    reranks = count_calls(monkeypatch, phrases_module, "_ranks")
    keep = np.ones(60, dtype=bool)
    keep[0] = False  # the first leaf: its words' first occurrences move
    after = table.remove(keep)
    after = after.add(_texts(3, 6)[:1])
    corpus = [t for t, k in zip(corpus, keep.tolist(), strict=True) if k] + _texts(3, 6)[:1]
    tree = random_tree(60, 5)
    nodes = list(range(tree.n_leaves, tree.n_nodes))[:5]
    got = keyword_abstracts(corpus, tree, nodes=nodes, table=after)
    assert layouts.n == 0
    assert reranks.n == 0
    # and what it gave is what a full recompute gives
    full = keyword_abstracts(corpus, tree)
    assert got == [full[u - tree.n_leaves] for u in nodes]


def test_a_loaded_table_updates_without_copying_its_saved_counts() -> None:
    corpus = _texts(40, 2)
    table = PhraseTable.build(corpus)
    table.phrases()
    stems, vocab = table.vocab() or ([], {})
    saved = dict(table.arrays())
    saved.update(vocab)
    saved.update(table.derived_arrays() or {})
    frozen = {}
    for name, array in saved.items():
        array = np.array(array)
        array.flags.writeable = False  # as a memory-mapped saved array
        frozen[name] = array
    loaded = PhraseTable.from_arrays(list(table.words), frozen, stems)
    grown = loaded.add(_texts(44, 2)[40:])
    shrunk = grown.remove(np.arange(44) % 4 != 1)
    fresh = PhraseTable.build([t for i, t in enumerate(corpus + _texts(44, 2)[40:]) if i % 4 != 1])
    assert _counts(shrunk) == _derived_afresh(shrunk)
    tree = random_tree(33, 2)
    nodes = list(range(tree.n_leaves, tree.n_nodes))
    texts = [t for i, t in enumerate(corpus + _texts(44, 2)[40:]) if i % 4 != 1]
    assert keyword_abstracts(texts, tree, nodes=nodes, table=shrunk) == keyword_abstracts(
        texts, tree, table=fresh
    )


def test_a_saved_index_keeps_the_word_counts_so_a_removal_after_a_load_derives_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emb = HashEmbedder()
    docs = _texts(30, 4)
    index = Index.build(docs[:24], IndexConfig(max_children=4), texts=True, embedder=emb)
    index.save(tmp_path / "ix")
    again = Index.load(tmp_path / "ix", embedder=emb)
    stats = count_calls(monkeypatch, phrases_module, "_word_stats")
    derives = count_calls(monkeypatch, PhraseTable, "_derive")
    for ix in (index, again):
        ix.remove(["0", "3"])
        ix.add(docs[24:], texts=True)
    assert stats.n == 0
    assert derives.n == 1  # the loaded table restores its saved counts (once), derives none
    assert again.abstracts == index.abstracts
    table = again.data.phrase_table
    assert table is not None
    assert _counts(table) == _derived_afresh(table)
    # saved again and loaded: the counts after the updates come back as they were
    again.save(tmp_path / "ix")
    third = Index.load(tmp_path / "ix", embedder=emb).data.phrase_table
    assert third is not None and _counts(third) == _counts(table)


def test_a_table_saved_before_the_word_counts_derives_them_on_its_first_removal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corpus = _texts(40, 8)
    table = PhraseTable.build(corpus)
    stems, vocab = table.vocab() or ([], {})
    saved = dict(table.arrays())
    saved.update(vocab)
    saved.update(
        {k: v for k, v in (table.derived_arrays() or {}).items() if k in DERIVED_ARRAYS}
    )  # what an index saved by an older psirag holds
    loaded = PhraseTable.from_arrays(list(table.words), saved, stems)
    stats = count_calls(monkeypatch, phrases_module, "_word_stats")
    grown = loaded.add(_texts(43, 8)[40:])
    assert stats.n == 0  # an add needs no word counts
    shrunk = grown.remove(np.arange(43) % 5 != 0)
    assert stats.n == 1
    again = shrunk.remove(np.arange(shrunk.n_leaves) != 2)
    assert stats.n == 1  # derived once, then kept
    assert _counts(shrunk) == _derived_afresh(shrunk)
    assert _counts(again) == _derived_afresh(again)


def _shares(a: object, b: object) -> bool:
    """Whether the per-leaf entry array ``a`` (an array or pieces of arrays) holds a view of
    ``b``'s memory."""
    pieces = getattr(a, "pieces", [a])
    base = getattr(b, "pieces", [b])
    return any(np.shares_memory(np.asarray(p), np.asarray(q)) for p in pieces for q in base)


def test_a_removal_and_the_add_after_it_copy_no_kept_leafs_entries() -> None:
    corpus = _texts(50, 9)
    table = PhraseTable.build(corpus)
    keep = np.ones(50, dtype=bool)
    keep[[7, 30]] = False
    shrunk = table.remove(keep)
    grown = shrunk.add(_texts(53, 9)[50:])
    for name in ("lw", "ls_key", "ls_cnt", "lp_pid"):
        # the kept leaves' entries are views of the table they were in (no copy): the
        # removal split the arrays where the removed leaves were, the add appended a piece
        assert _shares(getattr(shrunk, name), getattr(table, name)), name
        assert _shares(getattr(grown, name), getattr(table, name)), name
    assert _counts(grown) == _derived_afresh(grown)
    texts = [t for t, k in zip(corpus, keep.tolist(), strict=True) if k] + _texts(53, 9)[50:]
    tree = random_tree(len(texts), 9)
    nodes = list(range(tree.n_leaves, tree.n_nodes))
    assert keyword_abstracts(texts, tree, nodes=nodes, table=grown) == keyword_abstracts(
        texts, tree
    )


def test_an_add_appends_its_new_forms_to_the_corpus_counts_in_place() -> None:
    corpus = _texts(40, 3)
    table = PhraseTable.build(corpus)
    before = table._derived()
    grown = table.add(["Zanzibar Quokka Observatory opened beside the Quokka Bay."])
    after = grown._derived()
    # the new forms went after the old ones in the same buffer (no insertion into a sorted
    # array of every form), and a sorted tail says where they are
    assert np.shares_memory(after.s_key, before.s_key)
    assert after.s_tail is not None and after.s_tail.size > 0
    assert _counts(grown) == _derived_afresh(grown)


@pytest.mark.parametrize("seed", range(4))
def test_folded_tails_and_compacted_pieces_keep_the_counts_and_abstracts_exact(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tiny bounds, so the tails are folded into the sorted counts and the per-leaf arrays'
    # pieces copied into one again many times along the walk
    monkeypatch.setattr(phrases_module, "TAIL_MAX", 3)
    monkeypatch.setattr(phrases_module, "MAX_PIECES", 3)
    if seed % 2:  # a removal finds its phrases' forms by a pass over all of them
        monkeypatch.setattr(phrases_module, "FORMS_OF_MAX", 2)
    rng = random.Random(100 + seed)
    updates = random_phrase_updates(
        rng, _texts(120, seed), start=12, steps=14, min_left=5, drop_share=0.2, move_first=True
    )
    for table, corpus in updates:
        assert _counts(table) == _derived_afresh(table)
        saved = table.derived_arrays() or {}
        assert int(np.asarray(saved["s_cnt"]).min()) > 0  # no tombstone is saved
        tree = random_tree(len(corpus), seed)
        nodes = list(range(tree.n_leaves, tree.n_nodes))
        full = keyword_abstracts(corpus, tree)
        assert keyword_abstracts(corpus, tree, nodes=nodes, table=table) == full


def test_pieces_read_like_the_array_they_make_up() -> None:
    rng = np.random.default_rng(4)
    whole = rng.integers(0, 1000, 300)
    pieces = phrases_module._Pieces([whole[:100], whole[100:250], whole[250:]])
    gone = np.sort(rng.choice(300, 40, replace=False))
    kept = np.delete(whole, gone)
    fewer = pieces.without(gone)
    at = rng.integers(0, kept.size, 500)
    assert np.array_equal(fewer[at], kept[at])
    assert np.array_equal(fewer[17:203], kept[17:203])
    assert np.array_equal(fewer.append(np.arange(5), own=False)[kept.size :], np.arange(5))
    assert np.array_equal(np.asarray(fewer), kept)


def _saved_form(table: PhraseTable, hashes: bool = True) -> tuple[list[str], dict[str, object]]:
    """What a save writes of ``table`` (read only, as memory maps are); without the word and
    stem hashes when ``hashes`` is false (an index saved before them)."""
    from psirag.abstracts.phrase_names import HASH_ARRAYS

    stems, vocab = table.vocab() or ([], {})
    saved = dict(table.arrays())
    saved.update(vocab)
    saved.update(table.derived_arrays() or {})
    out: dict[str, object] = {}
    for name, array in saved.items():
        if name in HASH_ARRAYS and not hashes:
            continue
        array = np.array(array)
        array.flags.writeable = False
        out[name] = array
    return list(stems), out


@pytest.mark.parametrize("hashes", [True, False])
def test_a_loaded_table_finds_its_words_by_the_saved_hashes_and_numbers_new_ones_the_same(
    hashes: bool,
) -> None:
    """A table loaded with the saved word and stem hashes makes no dict of its words (an add
    finds its words by their hashes) and gives, after adds of old and new words, the words,
    stems, arrays and counts of the same table kept in memory; one saved before the hashes
    makes the dicts, and its next save has the hashes of every word and stem."""
    from psirag.abstracts.phrases import _hash64

    corpus = _texts(40, 3)
    more = _texts(52, 3)[40:]
    table = PhraseTable.build(corpus)
    stems, saved = _saved_form(table, hashes)
    loaded = PhraseTable.from_arrays(list(table.words), saved, stems)
    vocab = loaded._derived().vocab
    assert (vocab.index._index is None) is hashes
    assert (vocab.stem_index._index is None) is hashes
    grown = loaded.add(more[:5]).add([*more[5:], "Zyxwv qwerty Zyxwv eats apples, Qwerty."])
    kept = table.add(more[:5]).add([*more[5:], "Zyxwv qwerty Zyxwv eats apples, Qwerty."])
    assert len(grown.words) > len(table.words)
    assert grown.words == kept.words
    for name, array in kept.arrays().items():
        assert np.array_equal(np.asarray(grown.arrays()[name]), np.asarray(array)), name
    assert _counts(grown) == _counts(kept) == _derived_afresh(grown)
    stems_g, vocab_g = grown.vocab() or ([], {})
    stems_k, vocab_k = kept.vocab() or ([], {})
    assert stems_g == stems_k and len(stems_g) > len(stems)
    for name in vocab_k:
        assert np.array_equal(np.asarray(vocab_g[name]), np.asarray(vocab_k[name])), name
    assert np.array_equal(vocab_g["w_hash"], _hash64(grown.words))
    assert np.array_equal(vocab_g["s_hash"], _hash64(stems_g))


def test_saved_word_hashes_that_disagree_with_the_words_are_a_format_error() -> None:
    from psirag.errors import IndexFormatError

    table = PhraseTable.build(_texts(30, 5))
    stems, saved = _saved_form(table)
    for bad in (
        np.roll(np.asarray(saved["w_hash"]), 1),  # hashes of other words
        np.asarray(saved["w_hash"])[:-1],  # one short
    ):
        loaded = PhraseTable.from_arrays(list(table.words), {**saved, "w_hash": bad}, stems)
        with pytest.raises(IndexFormatError, match="hashes"):
            loaded.add(["A new leaf about apples."])


@pytest.mark.parametrize("marked", [0, 1, 3, 9])
def test_forms_with_marks_the_forms_holding_a_marked_word(marked: int) -> None:
    """Both ways of the scan (a few marked words compared, many looked up) mark exactly the
    packed forms with a marked word in one of their three places (0: the pad)."""
    from psirag.abstracts.phrase_model import PACK_BITS
    from psirag.abstracts.phrases import _forms_with

    rng = np.random.default_rng(marked)
    n_words = 50
    fields = rng.integers(0, n_words + 1, (5000, 3))  # word id + 1, 0: no word
    fields[:100, 1:] = 0  # one-word forms
    keys = (fields[:, 0] << (2 * PACK_BITS)) | (fields[:, 1] << PACK_BITS) | fields[:, 2]
    words = rng.choice(n_words, marked, replace=False)
    is_word = np.zeros(n_words + 1, dtype=bool)
    is_word[words] = True
    expected = np.isin(fields, words + 1).any(axis=1)
    assert np.array_equal(_forms_with(keys, is_word), expected)


def test_word_hashes_are_the_saved_formats_blake2b() -> None:
    """What ``keywords/w_hash`` holds (a saved format: other processes and versions read it):
    the first 8 bytes of BLAKE2b of each string's UTF-8, as a little-endian signed int64."""
    import hashlib

    from psirag.abstracts.phrases import _hash64

    words = ["Etna", "é", "", "x" * 70, "naïve-Ωmega"]
    expected = [
        int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little", signed=True)
        for w in words
    ]
    got = _hash64(words)
    assert got.dtype == np.int64 and got.tolist() == expected
    assert _hash64([]).shape == (0,)


@pytest.mark.parametrize("batch", [3, 7, 40])
def test_a_batched_build_keeps_ids_and_counts_int32_and_equals_one_pass(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build adds its leaves a batch at a time: each batch's leaf ids and counts join the
    table's int32 arrays as int32 (int64 pieces once made the joined array int64, twice the
    memory), and the table, its layout and the abstracts equal a one-pass build's."""
    texts = _texts(90, batch)
    tree = random_tree(len(texts), batch)
    whole = PhraseTable.build(texts)
    monkeypatch.setattr(phrases_module, "BUILD_BATCH", batch)
    batched = PhraseTable.build(texts)
    for name in ("lw", "ls_cnt", "lp_pid"):
        assert np.asarray(getattr(batched, name)).dtype == np.int32, name
    assert batched.words == whole.words
    got, want = batched.arrays(), whole.arrays()
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name
    a, b = batched.phrases(), whole.phrases()
    assert a.lp_pid.dtype == np.int32
    for name in ("lp_ptr", "lp_pid", "col_of", "pid_of", "df", "key", "surface_ids"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert keyword_abstracts(texts, tree, table=batched) == keyword_abstracts(
        texts, tree, table=whole
    )


def test_a_loaded_vocabulary_finds_words_by_hash_as_a_dict_does_collisions_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The keyword abstracts' loaded words (their saved hashes, no dict) answer a batch as a
    dict of them does, with a hash of the length here, so that most words collide; saved
    hashes that do not fit the words are refused."""
    from psirag.abstracts import phrases
    from psirag.errors import IndexFormatError

    monkeypatch.setattr(phrases, "_hash64", lambda keys: np.array([len(k) for k in keys], np.int64))
    rng = random.Random(3)
    words = sorted(
        {"".join(rng.choice("abcdef") for _ in range(rng.randint(2, 6))) for _ in range(300)}
    )
    ids = phrases._Ids.restore(words, phrases._hash64(words), "words")
    index = {w: i for i, w in enumerate(words)}
    for batch in (
        [words[4], "zz", words[200], words[4]],
        [rng.choice(words) for _ in range(40)],
        [],
    ):
        assert ids.lookup(batch).tolist() == [index.get(w, -1) for w in batch]
    bad = phrases._hash64(words) + 1
    with pytest.raises(IndexFormatError, match="hashes of words disagree"):
        phrases._Ids.restore(words, bad, "words")


@pytest.mark.parametrize("seed", range(6))
def test_a_removals_new_word_order_is_the_sort_it_replaced(seed: int) -> None:
    """The words' order after a removal (unmoved words by rank, each moved word after the
    unmoved ones ranked at most its predecessor's rank, moved ones by that and position) is
    what the stable sorts over the whole vocabulary gave: distinct ranks, and (a damaged
    file's) repeated ones, predecessors of -1, and equal predecessors."""
    from psirag.abstracts.phrases import _in_rank_order, _with_moved

    rng = np.random.default_rng(seed)
    n = 400
    rank = rng.permutation(n).astype(np.int64)
    if seed % 2:
        rank[rng.choice(n, 40, replace=False)] = rng.integers(0, n, 40)  # repeated ranks
    stays = rng.random(n) < 0.8
    words = np.flatnonzero(stays)
    u_words = _in_rank_order(words, rank)
    assert np.array_equal(u_words, words[np.argsort(rank[words], kind="stable")])
    moved = np.flatnonzero(~stays)[:25]
    pred = rng.integers(-1, n, moved.size)
    pred[:5] = pred[5]  # equal predecessors
    at = rng.permutation(10 * n)[: moved.size].astype(np.int64)
    u_rank = rank[u_words]
    got = _with_moved(u_words, u_rank, moved, pred, at)
    both = np.concatenate([u_words, moved])
    expected = both[
        np.lexsort(
            (
                np.concatenate([np.zeros(u_words.size, dtype=np.int64), at]),
                np.concatenate(
                    [np.zeros(u_words.size, dtype=np.int64), np.ones(moved.size, np.int64)]
                ),
                np.concatenate([u_rank, pred]),
            )
        )
    ]
    assert np.array_equal(got, expected)
