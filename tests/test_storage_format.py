"""The storage format module: an index saved in format 2 loads, and saving it again writes
the current format with the same data; the table of files is what a save actually writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psirag import Index
from psirag.index_data import IndexData
from psirag.ownership import MARKER
from psirag.storage import FORMAT_VERSION, LEGACY_VERSION, IndexStore
from psirag.storage_format import FILES, PHRASES_DIR, load_index_data, save_index_data

FIXTURE = Path(__file__).parent / "data" / "index_format_v2"
"""Saved by the code at 8da280c (a build of two texts, then an add of a third), before the
format moved out of index.py."""


def _data_files(generation: Path) -> dict[str, bytes]:
    """The data files of a generation (not its manifest, reader list or ownership marker)."""
    return {
        p.relative_to(generation).as_posix(): p.read_bytes()
        for p in sorted(generation.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", ".readers", MARKER)
    }


@pytest.fixture
def old_index(tmp_path: Path) -> Path:
    folder = tmp_path / "old"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_old_index_loads_with_every_field(old_index: Path) -> None:
    index = Index.load(old_index, verify="full")
    assert index.tree.n_leaves == 3 and index.tree.n_nodes == 4
    assert len(index.documents) == 3
    assert index.data.phrase_table is not None and index.data.phrase_table.n_leaves == 3
    assert index.data.lineage["added"] == 1 and index.data.lineage["updates"] == 1
    assert index.data.origin is not None and index.data.origin.generation == 2
    assert index.node_vectors.dtype == np.float32 and index.node_vectors.shape == (4, 16)
    assert any("Etna" in c.text for c in index.chunks)
    assert index.abstracts and all(isinstance(a, str) and a for a in index.abstracts)


def _same_data(a: IndexData, b: IndexData) -> None:
    """Every field a search or an update reads, equal (vectors bit for bit)."""
    assert a.chunks == b.chunks and a.abstracts == b.abstracts
    assert np.array_equal(a.tree.parent, b.tree.parent)
    assert np.array_equal(a.tree.layer, b.tree.layer)
    assert a.node_vectors.dtype == b.node_vectors.dtype
    assert a.node_vectors.tobytes() == b.node_vectors.tobytes()
    assert a.sources == b.sources and a.lineage == b.lineage and a.config == b.config
    assert (a.phrase_table is None) == (b.phrase_table is None)
    if a.phrase_table is not None and b.phrase_table is not None:
        assert a.phrase_table.words == b.phrase_table.words
        for name, array in a.phrase_table.arrays().items():
            assert np.array_equal(array, b.phrase_table.arrays()[name]), name


def test_a_format2_index_resaves_as_format3_with_the_same_data(
    old_index: Path, tmp_path: Path
) -> None:
    """Saving a format-2 index writes the current format (segments) holding the very same
    data; BM25's files are the same bytes where the fixture's BM25 is in bm25s's layout (it is
    written again as it is) and score the same where it holds postings (written again in
    postings format 2), and the manifest bodies agree but for the version that wrote them and
    the table list."""
    index = Index.load(old_index)
    out = tmp_path / "new"
    index.save(out)
    old_gen = old_index / "generations" / "000002"
    new_gen = out / "generations" / "000001"
    old_files, new_files = _data_files(old_gen), _data_files(new_gen)
    bm25 = {k: v for k, v in old_files.items() if k.startswith("bm25/")}
    assert bm25.pop("bm25/first_copy.npy")  # a table in format 3 (each leaf's offset)
    new_bm25 = {k: v for k, v in new_files.items() if k.startswith("bm25/")}
    if "bm25/postings.json" in bm25:
        assert json.loads(new_bm25["bm25/postings.json"])["format"] == 2
    else:
        assert bm25 and bm25 == new_bm25
    assert not {"node_vectors.npy", "chunks.jsonl", "abstracts.jsonl"} & set(new_files)
    again = Index.load(out, verify="full")
    _same_data(again.data, index.data)
    for q in ("Etna", "volcano eruption", "the river"):
        assert np.array_equal(again.sparse.scores(q), index.sparse.scores(q)), q
    old_m = json.loads((old_gen / "manifest.json").read_text())
    new_m = json.loads((new_gen / "manifest.json").read_text())
    assert old_m["format_version"] == 2 and new_m["format_version"] == FORMAT_VERSION == 5
    assert set(new_m.pop("tables")) >= {"leaf_vectors", "chunks", "inner_vectors"}
    assert new_m.pop("shape")["fan_out"]["max"] > 0  # since format 3: what inspect reads
    for m in (old_m, new_m):
        for key in ("psirag_version", "generation", "created", "base_generation", "files"):
            m.pop(key, None)
        m.pop("format_version")
    assert new_m == old_m


def test_a_save_of_unchanged_data_links_every_file(old_index: Path) -> None:
    """The first save on a format-2 generation migrates it; the next save of the same data
    writes nothing new: every data file is a hard link to the generation before."""
    index = Index.load(old_index)
    index.save(old_index)  # generation 3: format 3
    index = Index.load(old_index)
    index.save(old_index)  # generation 4
    three, four = (old_index / "generations" / g for g in ("000003", "000004"))
    files = _data_files(four)
    assert files == _data_files(three)
    for name in files:  # unchanged: hard links to generation 3's files
        assert (four / name).stat().st_ino == (three / name).stat().st_ino, name


def _names_in_table(written: set[str], version: int) -> None:
    files = [f for f in FILES if f.since <= version <= (f.until or FORMAT_VERSION)]
    tops = {f.name for f in files if f.kind != "folder"}
    folders = {f.name for f in files if f.kind == "folder"} | {PHRASES_DIR}
    for name in written:
        assert name in tops or name.split("/")[0] in folders, name
    required = {f.name for f in files if f.required}
    assert required <= {n.split("/")[0] for n in written} | tops, required
    assert all(LEGACY_VERSION <= f.since <= (f.until or FORMAT_VERSION) for f in FILES)


def test_the_table_names_every_file_a_save_writes(old_index: Path, tmp_path: Path) -> None:
    _names_in_table(set(_data_files(old_index / "generations" / "000002")), 2)
    Index.load(old_index).save(tmp_path / "new")
    written = set(_data_files(tmp_path / "new" / "generations" / "000001"))
    _names_in_table(written, FORMAT_VERSION)
    assert any(n.startswith("seg/inner_order.") for n in written)  # tree/ until format 4


def test_load_and_save_index_data_round_trip(old_index: Path, tmp_path: Path) -> None:
    store = IndexStore(old_index)
    data = store.read(load_index_data)
    out = tmp_path / "copy"
    with IndexStore(out).begin() as writer:
        number = save_index_data(writer, data)
    assert number == 1
    again = IndexStore(out).read(load_index_data)
    assert again.chunks == data.chunks and again.abstracts == data.abstracts
    assert np.array_equal(again.tree.parent, data.tree.parent)
    assert again.lineage == data.lineage


@pytest.mark.parametrize("reads", [(1, 2, 3), (1, 2, 3, 4)])
def test_a_psirag_that_reads_older_formats_asks_for_an_upgrade(
    old_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: tuple[int, ...]
) -> None:
    """Format 4 holds files a format-3 reader misreads (BM25 postings format 2, the graph's
    delta, the drift pairs), format 5 keeps the inner nodes' arrays in tables where a format-4
    reader looks for files: such a reader (the readable versions of the psirag before it)
    refuses the index with "upgrade psirag", not a confusing error about one of its files;
    and a save on top of an older generation writes the current format."""
    from psirag import storage
    from psirag.errors import IndexFormatError

    index = Index.load(old_index)
    index.save(tmp_path / "new")
    pointer = tmp_path / "new" / "manifest.json"
    assert json.loads(pointer.read_text())["format_version"] == FORMAT_VERSION == 5
    monkeypatch.setattr(storage, "READABLE_VERSIONS", reads)
    with pytest.raises(IndexFormatError) as got:
        Index.load(tmp_path / "new")
    message = str(got.value)
    shown = ", ".join(map(str, reads[:-1])) + f" and {reads[-1]}"
    assert f"index format 5, newer than this psirag reads (formats {shown})" in message
    assert "upgrade psirag" in message
    monkeypatch.undo()
    assert Index.load(tmp_path / "new").tree.n_leaves == 3


V3_FIXTURE = Path(__file__).parent / "data" / "index_format_v3"
"""Saved by the code at 3e48716 (format 3, BM25 postings format 1): the format-2 fixture loaded
and given a document, saved, then its first document removed and another added, saved (so its
BM25 segment has a tombstone); older generations collected."""


def test_a_format3_index_loads_searches_and_migrates_on_its_next_save(tmp_path: Path) -> None:
    """Every index today's main saves must load, search and take updates: a format-3 index
    scores BM25 as a fresh build of its chunks, and its next save writes format 4+ (BM25
    postings format 2) that scores the same; later saves keep its BM25 segments by link."""
    from support.embedders import HashEmbedder

    from psirag.ingest import Document
    from psirag.retrieval.bm25 import SparseIndex

    folder = tmp_path / "v3"
    shutil.copytree(V3_FIXTURE, folder)
    assert json.loads((folder / "manifest.json").read_text())["format_version"] == 3
    emb = HashEmbedder(16)
    index = Index.load(folder, embedder=emb)
    texts = [c.text for c in index.chunks]
    queries = ("Etna", "volcano erupts", "wine grapes", "ferries Naples")

    def same_as_fresh(ix: Index) -> None:
        fresh = SparseIndex.build([c.text for c in ix.chunks])
        for q in queries:
            assert np.array_equal(ix.sparse.scores(q), fresh.scores(q)), q

    same_as_fresh(index)
    assert index.search("Etna wine", k=2)
    index.add([Document("ash", "", "Ash from Etna closed Catania airport.", is_record=False)])
    index.save(folder)
    pointer = json.loads((folder / "manifest.json").read_text())
    assert pointer["format_version"] == FORMAT_VERSION
    gen = folder / "generations" / f"{pointer['generation']:06d}"
    assert json.loads((gen / "bm25" / "postings.json").read_text())["format"] == 2
    again = Index.load(folder, embedder=emb)
    assert [c.text for c in again.chunks] == [*texts, *[c.text for c in index.chunks][4:]]
    same_as_fresh(again)
    again.remove([again.documents[0]])
    again.save(folder)
    after = Index.load(folder, embedder=emb)
    same_as_fresh(after)
    newest = (
        folder
        / "generations"
        / f"{json.loads((folder / 'manifest.json').read_text())['generation']:06d}"
    )
    bm25 = {p.name: p.stat().st_ino for p in (gen / "bm25").glob("s.*.doc_terms.npy")}
    kept = {p.name: p.stat().st_ino for p in (newest / "bm25").glob("s.*.doc_terms.npy")}
    assert bm25 and bm25.items() <= kept.items()  # the removal linked the segments it kept


V4_FIXTURE = Path(__file__).parent / "data" / "index_format_v4"
"""Saved by the code at eb60c77 (format 4: the inner nodes' arrays as whole files under
``tree/``): the format-3 fixture given a document and saved, then its first document removed
and another added, saved; older generations collected."""


def test_a_format4_index_loads_and_its_inner_arrays_become_tables_that_saves_patch(
    tmp_path: Path,
) -> None:
    """A format-4 index loads as it was saved (tree, stable ids, abstracts, vectors); its next
    save writes format 5, whose inner-node arrays are tables instead of ``tree/*.npy``, and
    loads back the same, also after an add (that a save writes those tables as the rows that
    changed: tests/test_segments.py)."""
    from support.embedders import HashEmbedder

    from psirag.ingest import Document
    from psirag.storage_format import INNER_TABLES

    folder = tmp_path / "v4"
    shutil.copytree(V4_FIXTURE, folder)
    assert json.loads((folder / "manifest.json").read_text())["format_version"] == 4
    emb = HashEmbedder(16)
    index = Index.load(folder, embedder=emb)
    assert index.search("Etna ash", k=2)

    def same(a: Any, b: Any) -> None:
        assert [c.text for c in a.chunks] == [c.text for c in b.chunks]
        assert list(a.abstracts) == list(b.abstracts)
        assert np.array_equal(a.tree.parent, b.tree.parent)
        assert np.array_equal(a.tree.layer, b.tree.layer)
        assert np.asarray(a.node_vectors).tobytes() == np.asarray(b.node_vectors).tobytes()
        ids_a, next_a = a.stable_ids()
        ids_b, next_b = b.stable_ids()
        assert np.array_equal(ids_a, ids_b) and next_a == next_b

    assert index.data.inner_ids is not None  # saved by format 4
    index.save(folder)
    pointer = json.loads((folder / "manifest.json").read_text())
    assert pointer["format_version"] == FORMAT_VERSION == 5
    assert not [f for f in pointer["files"] if f.startswith("tree/")]
    assert set(INNER_TABLES) <= set(pointer["tables"])
    again = Index.load(folder, embedder=emb)
    same(again.data, index.data)
    again.add([Document("tide", "", "The tide at Naples rose over the ferry quay.", False)])
    again.save(folder)
    same(Index.load(folder, embedder=emb, verify="full").data, again.data)


def test_the_inner_ids_check_finds_a_repeated_id_without_a_sort() -> None:
    from psirag.storage_format import _distinct_below

    ids = np.arange(0, 2_000, 3)
    assert _distinct_below(ids, 2_000)
    assert not _distinct_below(np.append(ids, 3), 2_000)
    assert _distinct_below(np.array([5, 10**12 - 1]), 10**12)  # sparse: sorted instead
    assert not _distinct_below(np.array([7, 7]), 10**12)


def test_an_index_saved_before_the_word_hashes_saves_them_and_then_loads_without_word_dicts(
    tmp_path: Path,
) -> None:
    """The format-4 fixture has no ``keywords/w_hash`` / ``s_hash``: its first update makes
    the word and stem dicts, as before, and its save writes the hashes (whole, once); the next
    load finds an add's words by those hashes, and gives what the index kept in memory gives."""
    from support.embedders import HashEmbedder

    from psirag.abstracts.phrases import _hash64
    from psirag.ingest import Document

    folder = tmp_path / "v4"
    shutil.copytree(V4_FIXTURE, folder)
    assert "keywords/w_hash" not in json.loads((folder / "manifest.json").read_text())["tables"]
    emb = HashEmbedder(16)
    index = Index.load(folder, embedder=emb)
    index.add([Document("tide", "", "The tide at Naples rose over the ferry quay.", False)])
    table = index.data.phrase_table
    assert table is not None and table._derived().vocab.index._index is not None
    index.save(folder)
    tables = json.loads((folder / "manifest.json").read_text())["tables"]
    assert {"keywords/w_hash", "keywords/s_hash"} <= set(tables)
    again = Index.load(folder, embedder=emb)
    loaded = again.data.phrase_table
    assert loaded is not None
    vocab = loaded._derived().vocab
    assert vocab.index._index is None and vocab.stem_index._index is None
    assert np.array_equal(vocab.index.hashes(), _hash64(loaded.words))
    doc = Document("crater", "", "Vesuvian crater walks: Pompeii guides and Etna ash.", False)
    for ix in (index, again):
        ix.add([doc])
    assert list(again.data.abstracts) == list(index.data.abstracts)
    again.save(folder)
    third = Index.load(folder, embedder=emb, verify="full").data.phrase_table
    added = again.data.phrase_table
    assert added is not None and len(added.words) > len(loaded.words)
    assert third is not None and third.words == added.words
    assert np.array_equal(third._derived().vocab.index.hashes(), _hash64(third.words))


def test_a_compaction_of_an_index_saved_before_the_word_hashes_writes_them(
    tmp_path: Path,
) -> None:
    """A compaction (a whole save of a loaded table no update derived) of the format-4 fixture
    writes ``keywords/w_hash`` / ``s_hash`` too, so its loads find words by them and make no
    dict of every word and stem on their first update; what the index gives is unchanged."""
    from support.embedders import HashEmbedder

    from psirag.abstracts.phrases import _hash64
    from psirag.ingest import Document
    from psirag.living import compact_saved

    folder = tmp_path / "v4"
    shutil.copytree(V4_FIXTURE, folder)
    plain = tmp_path / "plain"
    shutil.copytree(V4_FIXTURE, plain)
    compact_saved(folder)
    tables = json.loads((folder / "manifest.json").read_text())["tables"]
    assert {"keywords/w_hash", "keywords/s_hash"} <= set(tables)
    emb = HashEmbedder(16)
    loaded = Index.load(folder, embedder=emb)
    table = loaded.data.phrase_table
    assert table is not None
    vocab = table._derived().vocab
    assert vocab.index._index is None and vocab.stem_index._index is None
    assert np.array_equal(vocab.index.hashes(), _hash64(table.words))
    assert np.array_equal(vocab.stem_index.hashes(), _hash64(vocab.stem_index.keys))
    control = Index.load(plain, embedder=emb)
    doc = Document("crater", "", "Vesuvian crater walks: Pompeii guides and Etna ash.", False)
    for ix in (loaded, control):
        ix.add([doc])
        ix.remove([ix.data.documents[0]])
    assert list(loaded.data.abstracts) == list(control.data.abstracts)


def _bm25_meta(folder: Path) -> tuple[Path, dict[str, Any]]:
    gen = folder / "generations" / f"{IndexStore(folder).current():06d}" / "bm25"
    return gen, json.loads((gen / "postings.json").read_text())


def test_an_index_saved_before_the_term_hashes_saves_them_and_then_loads_without_a_term_dict(
    tmp_path: Path,
) -> None:
    """The format-4 fixture's BM25 has no term hashes: it loads with a dict of its terms, as
    before, and its first save writes a hash file per vocabulary part (the kept part's too);
    the next load finds an add's terms by the hashes without a dict, and scores what the index
    kept in memory scores. A hash that disagrees with its term is an error naming the file."""
    from support.embedders import HashEmbedder

    from psirag.errors import IndexFormatError
    from psirag.ingest import Document
    from psirag.retrieval.bm25 import TermIds, _hash64, hash_file

    folder = tmp_path / "v4"
    shutil.copytree(V4_FIXTURE, folder)
    _, meta = _bm25_meta(folder)
    assert "term_hashes" not in meta
    emb = HashEmbedder(16)
    index = Index.load(folder, embedder=emb)
    postings = index.data.sparse.postings
    assert postings is not None and isinstance(postings.vocab, dict)
    index.add([Document("tide", "", "The tide at Naples rose over the ferry quay.", False)])
    index.save(folder)
    gen, meta = _bm25_meta(folder)
    assert meta["term_hashes"] == [hash_file(name) for name, _ in meta["terms"]]
    assert len(meta["terms"]) >= 2  # the fixture's first part kept, with hashes added
    terms: list[str] = []
    for (name, n), hashes in zip(meta["terms"], meta["term_hashes"], strict=True):
        part = json.loads((gen / name).read_text())
        assert len(part) == n
        assert np.array_equal(np.load(gen / hashes), _hash64(part))
        terms += part
    again = Index.load(folder, embedder=emb)
    loaded = again.data.sparse.postings
    assert loaded is not None and isinstance(loaded.vocab, TermIds)
    assert list(loaded.vocab) == terms
    doc = Document("crater", "", "Vesuvian crater walks: Pompeii guides, Etna ash, tide.", False)
    for ix in (index, again):
        ix.add([doc])
    grown = again.data.sparse.postings
    assert grown is not None and isinstance(grown.vocab, TermIds)
    assert grown.vocab._index is None  # the add looked its terms up by hash, no dict
    kept = index.data.sparse.postings
    assert kept is not None and list(grown.vocab) == list(kept.vocab)
    assert dict(grown.vocab) == dict(kept.vocab)
    for q in ("crater walks", "tide ferry", "volcano lava Pompeii", "nothingsuch"):
        assert np.array_equal(again.sparse.scores(q), index.sparse.scores(q)), q
    again.save(folder)
    third = Index.load(folder, embedder=emb)
    assert third.data.sparse.postings is not None
    assert list(third.data.sparse.postings.vocab) == list(kept.vocab)
    gen, meta = _bm25_meta(folder)
    bad = gen / meta["term_hashes"][0]
    hashes = np.load(bad)
    hashes[0] ^= 1
    bad.unlink()
    np.save(bad, hashes)
    with pytest.raises(IndexFormatError, match=r"postings.json: the saved term hashes disagree"):
        Index.load(folder, embedder=emb)


def test_a_segment_with_term_ids_past_the_vocabulary_fails_on_its_first_read(
    tmp_path: Path,
) -> None:
    """A load no longer passes over every term id of every segment; a damaged one is a
    ValueError naming the folder when the segment's chunks are first read (a merge, a
    removal, compaction)."""
    from psirag.retrieval.bm25 import Postings, TermCounts

    texts = [
        "lava flows from the volcano",
        "bread dough and flour",
        "striker scored a goal",
        "ferry quay at the harbour",
        "crater walks near Etna",
    ]
    Postings.of_counts(TermCounts.of(texts)).save(tmp_path)
    meta = json.loads((tmp_path / "postings.json").read_text())
    seg = tmp_path / f"s.{meta['segments'][0][0]}.doc_terms.npy"
    terms = np.load(seg)
    terms[-1] = 10_000
    seg.unlink()
    np.save(seg, terms)
    loaded = Postings.load(tmp_path)
    with pytest.raises(ValueError, match="outside the BM25 vocabulary") as err:
        loaded.counts()
    assert str(tmp_path) in str(err.value)
    with pytest.raises(ValueError, match="outside the BM25 vocabulary"):
        Postings.load(tmp_path).remove(np.array([True, True, True, True, False]))
    # a removal that reads only sound chunks (and does not compact) still works
    assert Postings.load(tmp_path).remove(np.array([False, True, True, True, True])).n_docs == 4


def test_picked_rows_read_as_the_reordered_array() -> None:
    """The inner vectors an update saves are ``vectors[perm]`` made only where read (the
    appended rows): every way the segment writer reads them gives that array's values."""
    from psirag.storage_format import _PickedRows

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((40, 6)).astype(np.float32)
    perm = rng.permutation(40)
    picked = _PickedRows(vectors, perm)
    want = vectors[perm]
    assert len(picked) == 40 and picked.shape == want.shape and picked.dtype == want.dtype
    assert np.array_equal(picked[25:40], want[25:40])
    assert np.array_equal(picked[np.array([3, 0, 39])], want[[3, 0, 39]])
    assert np.array_equal(np.asarray(picked), want)
    assert np.asarray(picked, dtype=np.float64).dtype == np.float64
