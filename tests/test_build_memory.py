"""The build's memory-saving paths (issue 24 item 6) give what the one-pass paths give: a phrase
table extracted in batches, node counts made a block at a time, big nodes scored a slice at a
time, BM25 counts tokenised in batches, and the duplicate map keyed by hashes."""

from __future__ import annotations

import numpy as np
import pytest

import psirag.abstracts.keywords as keywords
import psirag.abstracts.phrases as phrases
import psirag.heap as heap
import psirag.retrieval.bm25 as bm25
import psirag.retrieval.duplicates as duplicates
from psirag.abstracts.keywords import keyword_abstracts
from psirag.abstracts.phrases import PhraseTable
from psirag.retrieval.bm25 import TermCounts
from psirag.retrieval.duplicates import first_copy_of
from psirag.tree import build_tree


def _corpus(n: int = 120, seed: int = 3) -> list[str]:
    """Passages of a few topics with capitalised names, repeated words and phrases, so that
    phrases are shared, ranked and tied."""
    rng = np.random.default_rng(seed)
    topics = [[f"w{t}x{i}" for i in range(12)] for t in range(5)]
    shared = [f"common{i}" for i in range(30)] + ["the", "of", "and"]
    names = ["Mount Etna", "Camp Nou", "Bank of England", "New York", "Joan Crawford"]
    out = []
    for i in range(n):
        topic = topics[i % len(topics)]
        words = [str(w) for w in rng.choice(topic + shared, 14).tolist()]
        text = " ".join(words)
        if i % 3 == 0:
            text = f"{names[i % len(names)]} said {text}. Films and film, {words[0]}."
        out.append(text)
    out.append(out[5])  # an exact repeat
    return out


def _tree(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, 8)).astype(np.float32)
    return build_tree(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), max_children=3)


def _saved(table: PhraseTable) -> dict[str, np.ndarray]:
    got = {k: np.array(v) for k, v in table.arrays().items()}
    derived = table.derived_arrays()
    assert derived is not None
    got.update({f"derived.{k}": np.array(v) for k, v in derived.items()})
    vocab = table.vocab()
    assert vocab is not None
    got.update({f"vocab.{k}": np.array(v) for k, v in vocab[1].items()})
    return got


@pytest.mark.parametrize("tail", [None, 5])
def test_a_batched_phrase_table_is_the_one_pass_table(
    tail: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches give the one-pass table, also with the sorted counts' tails folded in (each old
    array let go as its folded one is made) at every batch (``tail``)."""
    texts = _corpus()
    whole = PhraseTable.build(texts)
    if tail is not None:
        monkeypatch.setattr(phrases, "TAIL_MAX", tail)
    monkeypatch.setattr(phrases, "BUILD_BATCH", 17)
    monkeypatch.setattr(phrases, "_LAYOUT_BLOCK", 50)
    batched = PhraseTable.build(texts)
    assert batched.words == whole.words
    a, b = _saved(whole), _saved(batched)
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    pa, pb = whole.phrases(), batched.phrases()
    for view in ("pid_of", "col_of", "df", "surface_ids", "words", "entity", "stem_ids"):
        assert np.array_equal(getattr(pa, view), getattr(pb, view)), view
    assert pa.content == pb.content and pa.stems == pb.stems
    # and an add to each gives equal tables again
    more = _corpus(20, seed=9)
    a2, b2 = _saved(whole.add(more)), _saved(batched.add(more))
    for name in a2:
        assert np.array_equal(a2[name], b2[name]), name


@pytest.mark.parametrize("budget", [40, 1])
def test_blocked_products_and_sliced_nodes_give_the_same_abstracts(
    monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    texts = _corpus()
    tree = _tree(len(texts))
    want = keyword_abstracts(texts, tree, max_phrases=6)
    assert any(want)
    # a product per parent group or two (40), or per node, each parent group split (1); and
    # every node with more than 7 phrases in slices
    monkeypatch.setattr(keywords, "_PRODUCT_BUDGET", budget)
    blocks: list[list[int]] = []
    monkeypatch.setattr(
        keywords,
        "_product_blocks",
        lambda *a, f=keywords._product_blocks: blocks.append(f(*a)) or blocks[-1],
    )
    monkeypatch.setattr(keywords, "_SCORE_CHUNK", 7)
    assert keyword_abstracts(texts, tree, max_phrases=6) == want
    n_inner = tree.n_nodes - tree.n_leaves
    if budget == 1:  # a block per node (the root's row costs nothing): parent groups split
        assert len(blocks[0]) >= n_inner - 1
    else:
        assert 1 < len(blocks[0]) < n_inner
    assert keyword_abstracts(texts, tree, max_phrases=20) == keyword_abstracts(
        texts, tree, max_phrases=20, nodes=list(range(tree.n_leaves, tree.n_nodes))
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_slices_keep_the_candidates_a_whole_node_ranks(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # a pool of 8 or 16 candidates per list against slices of 40 phrases: each slice drops
    # phrases, so every ranked list (themes, entities, multi-word, fill) must keep its best
    texts = _corpus(120, seed)
    texts = [
        f"{t}. {chr(65 + i % 26)}ola{i % 7} Ber{i % 5}" if i % 2 else t for i, t in enumerate(texts)
    ]
    tree = _tree(len(texts), seed)
    want = [keyword_abstracts(texts, tree, max_phrases=m) for m in (1, 2)]
    monkeypatch.setattr(keywords, "_SCORE_CHUNK", 40)
    assert [keyword_abstracts(texts, tree, max_phrases=m) for m in (1, 2)] == want


def test_batched_term_counts_are_the_one_pass_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _corpus()
    whole = TermCounts.of(texts)
    monkeypatch.setattr(bm25, "TOKENIZE_BATCH", 11)
    batched = TermCounts.of(texts)
    assert list(batched.vocab.items()) == list(whole.vocab.items())
    for name in ("doc_ptr", "terms", "tf"):
        a, b = getattr(whole, name), getattr(batched, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def test_the_duplicate_map_tells_colliding_hashes_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = ["a b", "A  b", "c", "d", "c", "a b\n", "e"]
    want = [0, 0, 2, 3, 2, 0, 6]
    assert first_copy_of(texts).tolist() == want
    monkeypatch.setattr(duplicates, "_key_hash", lambda key: 7)  # every key collides
    assert first_copy_of(texts).tolist() == want


def test_a_big_build_lets_its_layout_go_and_an_add_remakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from psirag import pipeline
    from psirag.config import IndexConfig

    texts = _corpus()
    tree = _tree(len(texts))
    kept = PhraseTable.build(texts)
    small = pipeline.write_abstracts(tree, texts, IndexConfig(), table=kept)
    assert "layout" in kept._cache  # small: kept for an add in the same process
    monkeypatch.setattr(phrases, "KEEP_LAYOUT_MAX_PHRASES", 10)
    big = PhraseTable.build(texts)
    got = pipeline.write_abstracts(tree, texts, IndexConfig(), table=big)
    assert "layout" not in big._cache
    assert isinstance(big.ls_key, np.memmap)  # spilled to a temporary file, same values
    spilled_counts = big._cache["derived"]  # and the counts only the layout read
    assert all(isinstance(a, np.memmap) for a in (spilled_counts.p_best, spilled_counts.p_df))
    assert isinstance(big.lp_pid, np.memmap)  # each leaf's phrases, once split for scoring
    assert got.texts == small.texts
    assert got.texts == pipeline.write_abstracts(tree, texts, IndexConfig()).texts
    want = _saved(kept)
    spilled = _saved(big)
    assert want.keys() == spilled.keys()
    for name, values in want.items():
        assert np.array_equal(values, spilled[name]), name
    # an add on the table without a layout gives what an add on one with it gives
    more = _corpus(9, seed=8)
    a, b = kept.add(more).phrases(), big.add(more).phrases()
    for name in ("key", "df", "col_of", "pid_of", "lp_pid", "lp_ptr"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    # and a removal (written over the spilled counts) gives what one on the kept table gives
    keep = np.arange(len(texts)) % 3 != 1
    a, b = kept.remove(keep).phrases(), big.remove(keep).phrases()
    for name in ("key", "df", "col_of", "pid_of", "lp_pid", "lp_ptr"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_a_big_layouts_column_arrays_are_spilled_and_an_add_extends_them_as_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scoring does not read a layout's phrase per column nor its column order keys: a big
    table moves them to mapped files with the counts only the layout read. They hold the same
    values, and an add that extends that layout (rather than remaking it) gives the phrases an
    add on the kept layout gives."""
    texts = _corpus()
    kept = PhraseTable.build(texts)
    kept.phrases()
    assert not kept.spill_laid_out()  # small: stays in memory
    monkeypatch.setattr(phrases, "KEEP_LAYOUT_MAX_PHRASES", 10)
    big = PhraseTable.build(texts)
    big.spill_idle()
    big.phrases()
    assert big.spill_laid_out()
    a_lay, b_lay = kept._cache["layout"], big._cache["layout"]
    assert isinstance(b_lay.col_key, np.memmap) and isinstance(b_lay.phrases.pid_of, np.memmap)
    assert big.phrases().pid_of is b_lay.phrases.pid_of  # what keyword_abstracts reads
    assert np.array_equal(a_lay.col_key, b_lay.col_key)
    assert np.array_equal(a_lay.phrases.pid_of, b_lay.phrases.pid_of)
    more = _corpus(9, seed=8)
    a, b = kept.add(more), big.add(more)
    assert a._cache["pending"][3].get("layout") is a_lay  # the add extends the layout
    assert b._cache["pending"][3].get("layout") is b_lay
    a_ph, b_ph = a.phrases(), b.phrases()
    for name in ("key", "df", "col_of", "pid_of", "lp_pid", "lp_ptr", "surface_ids", "words"):
        assert np.array_equal(getattr(a_ph, name), getattr(b_ph, name)), name
    assert np.array_equal(a._cache["layout"].col_key, b._cache["layout"].col_key)


def test_an_index_built_big_saves_loads_and_updates_as_one_built_small(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from support import HashEmbedder

    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(_corpus(80))]
    small = Index.build(docs, IndexConfig(), embedder=HashEmbedder())
    monkeypatch.setattr(phrases, "KEEP_LAYOUT_MAX_PHRASES", 10)
    big = Index.build(docs, IndexConfig(), embedder=HashEmbedder())
    assert big.data.abstracts == small.data.abstracts
    for name, ix in (("small", small), ("big", big)):
        ix.save(tmp_path / name)
    new = Document("new", "", "Mount Etna erupted again, said the Bank of England.", False)
    got = {}
    for name in ("small", "big"):
        ix = Index.load(tmp_path / name, embedder=HashEmbedder())
        ix.add([new])
        ix.remove(["3"])
        ix.save(tmp_path / name)
        ix = Index.load(tmp_path / name, embedder=HashEmbedder())
        got[name] = (ix.data.abstracts, [p.leaf for p in ix.search("Mount Etna")])
    assert got["big"] == got["small"]


def test_a_spill_without_a_temporary_folder_keeps_the_arrays_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_room(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(28, "No space left on device")

    texts = _corpus()
    want = _saved(PhraseTable.build(texts))
    monkeypatch.setattr(phrases, "KEEP_LAYOUT_MAX_PHRASES", 10)
    monkeypatch.setattr(heap.tempfile, "mkstemp", no_room)
    table = PhraseTable.build(texts)
    assert table.spill_idle()
    assert not isinstance(table.ls_key, np.memmap)
    got = _saved(table)
    assert all(np.array_equal(want[k], got[k]) for k in want)


def test_freed_memory_goes_back_where_the_c_library_allows() -> None:
    import sys

    from psirag.heap import _malloc_trim, give_back_freed_memory

    if sys.platform.startswith("linux"):
        assert _malloc_trim() is not None  # glibc here: the call is made
    give_back_freed_memory()  # and never fails


def test_huge_pages_are_asked_for_anonymous_private_writable_regions_only() -> None:
    maps = "\n".join(
        [
            "00400000-00600000 r-xp 00000000 08:01 123 /usr/bin/python3",  # code
            "7f0000000000-7f0001000000 rw-p 00000000 00:00 0 ",  # 16 MiB anonymous: asked
            "7f0001000000-7f0001100000 rw-p 00000000 00:00 0 ",  # 1 MiB: too small
            "7f0002000000-7f0003000000 rw-s 00000000 00:01 9 /dev/zero (deleted)",  # shared
            "7f0004000000-7f0005000000 rw-p 00000000 08:01 77 /data/vectors.npy",  # a file
            "7f0006000000-7f0007000000 r--p 00000000 00:00 0 ",  # read-only
            "55d000000000-55d000400000 rw-p 00000000 00:00 0 [heap]",  # 4 MiB heap: asked
            "7ffd00000000-7ffd00400000 rw-p 00000000 00:00 0 [stack]",
        ]
    )
    got = heap._anonymous_regions(maps, heap.HUGE_PAGE_MIN_BYTES)
    assert got == [(0x7F0000000000, 0x7F0001000000), (0x55D000000000, 0x55D000400000)]


def test_huge_pages_are_asked_for_a_big_anonymous_array_on_linux() -> None:
    import sys

    block = np.ones(32 << 20, dtype=np.uint8)  # a fresh anonymous mapping of 32 MiB
    asked = heap.ask_for_huge_pages()
    if not sys.platform.startswith("linux"):
        assert asked == 0
        return
    if asked == 0:  # a kernel without transparent huge pages refuses every region
        pytest.skip("this kernel has no transparent huge pages")
    assert asked >= block.nbytes  # the array's region (and maybe others) was asked for


def test_a_big_builds_leaf_vectors_wait_in_a_mapped_file_and_the_index_is_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From the tree to the routing stage a big build holds its leaf vectors in a mapped
    temporary file (the abstracts do not read them): the index built is the one built with
    them in memory (node vectors, abstracts, a search), and holds no mapped array."""
    from support import HashEmbedder

    from psirag import Index, IndexConfig, pipeline
    from psirag.ingest import Document

    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(_corpus(80))]
    small = Index.build(docs, IndexConfig(), embedder=HashEmbedder())
    spilled: list[np.ndarray] = []
    real = pipeline.mapped_copy

    def seen(a: np.ndarray) -> np.ndarray:
        out = real(a)
        spilled.append(out)
        return out

    monkeypatch.setattr(pipeline, "SPILL_VECTORS_MIN_LEAVES", 10)
    monkeypatch.setattr(pipeline, "mapped_copy", seen)
    big = Index.build(docs, IndexConfig(), embedder=HashEmbedder())
    assert len(spilled) == 1 and isinstance(spilled[0], np.memmap)
    assert spilled[0].shape == (len(docs), small.data.node_vectors.shape[1])
    assert type(big.data.node_vectors) is np.ndarray
    assert np.array_equal(big.data.node_vectors, small.data.node_vectors)
    assert big.data.abstracts == small.data.abstracts
    hits = [p.leaf for p in small.search("Mount Etna")]
    assert hits and [p.leaf for p in big.search("Mount Etna")] == hits
