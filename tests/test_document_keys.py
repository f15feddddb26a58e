"""An update answers its document questions from per-leaf document keys (issue 24).

The first add after a load decoded every chunk record: for the document list (its count and
the ids a new document may clash with), the set of chunk ids and the list of chunks. Now each
leaf carries a key of its document id, saved with the index, and only the leaves a key points
at are read. These tests check that every update gives exactly what the listing path gives
(the same data, the same search results), also when keys collide, that a load's first add
decodes only a few chunk records, and that indexes without keys (saved before them, or
holding ids not in NFC) still update as before."""

from __future__ import annotations

import random
import shutil
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.counting import count_calls

import psirag.document_keys as document_keys
import psirag.storage_format as storage_format
from psirag import Index, IndexConfig
from psirag.document_keys import KeyedDocuments, ListedDocuments, document_rows, keys_of
from psirag.errors import InputError
from psirag.ids import match
from psirag.index_data import IndexData
from psirag.ingest import Document
from psirag.rows import LazyRows, PickedRows
from psirag.types import Chunk, Source

LINES = [line for topic in TOPICS.values() for line in topic]


def _texts(n: int, seed: int, tag: str) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(LINES, 3)) + f" {tag}{i} Mount Word{i}." for i in range(n)]


def _docs(n: int, seed: int, tag: str) -> list[Document]:
    return [
        Document(f"{tag}-{i}", "", t, is_record=False) for i, t in enumerate(_texts(n, seed, tag))
    ]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    folder = tmp_path / "ix"
    config = IndexConfig(max_children=4)
    Index.build(_docs(40, 1, "d"), config, embedder=HashEmbedder()).save(folder)
    return folder


def _listed(data: IndexData) -> IndexData:
    """``data`` as the listing path sees it: chunks in a tuple, no keys."""
    return data.replace(chunks=tuple(data.chunks), document_keys=None)


STEPS: list[tuple[str, Callable[[Index], Any]]] = [
    ("add", lambda ix: ix.add(_docs(3, 2, "new"))),
    # an indexed id with other text: renamed; the same id and text: skipped
    (
        "rename",
        lambda ix: ix.add([Document("d-3", "", "other words entirely here.", is_record=False)]),
    ),
    ("skip", lambda ix: ix.add([_docs(5, 1, "d")[4]])),
    ("remove", lambda ix: ix.remove(["d-7", "new-1"])),
    # texts given directly get numbered ids; once "0" is taken, the next free number is used
    ("numbered", lambda ix: ix.add(_texts(2, 5, "num"), texts=True)),
    ("numbered again", lambda ix: ix.add(_texts(1, 6, "again"), texts=True)),
    (
        "sync",
        lambda ix: ix.update(
            ["d-11"], [Document("d-11", "", "d-11 written again.", is_record=False)]
        ),
    ),
    ("remove added", lambda ix: ix.remove(["new-0", "0"])),
]


def _same(a: Index, b: Index) -> None:
    da, db = a.data, b.data
    assert tuple(da.chunks) == tuple(db.chunks)
    assert tuple(da.abstracts) == tuple(db.abstracts)
    assert np.array_equal(da.node_vectors, db.node_vectors)
    assert np.array_equal(da.tree.parent, db.tree.parent)
    assert da.documents == db.documents
    assert document_rows(da) == document_rows(db)
    assert [r[0] for r in document_rows(da)] == list(da.documents)
    assert sum(r[2] for r in document_rows(da)) == len(da.chunks)
    assert da.stats == db.stats and da.sources == db.sources and da.lineage == db.lineage
    for query in ("Mount Word3", "new1 words", "num0"):
        assert [(p.id, p.score) for p in a.search(query)] == [
            (p.id, p.score) for p in b.search(query)
        ]


def _keys_are_the_chunks(data: IndexData) -> None:
    assert data.document_keys is not None
    keys, count = data.document_keys
    made = keys_of(tuple(data.chunks))
    assert made is not None
    assert np.array_equal(keys, made[0]) and count == made[1] == len(data.documents)


def _run_both(folder: Path, *, made_again: bool = False) -> None:
    """Every step on the loaded index (by its keys; ``made_again``: keys made anew from its
    chunks) and on a copy that lists its documents: the same results."""
    emb = HashEmbedder()
    keyed = Index.load(folder, embedder=emb)
    if made_again:
        keyed = Index.from_data(keyed.data.replace(document_keys=None), embedder=emb)
    listed = Index.from_data(_listed(keyed.data), embedder=emb)
    assert isinstance(keyed.data.document_index, KeyedDocuments)
    for name, step in STEPS:
        got = step(keyed)
        want = step(listed)
        assert isinstance(listed.data.document_index, ListedDocuments), name
        assert got.to_dict() | {"seconds": {}} == want.to_dict() | {"seconds": {}}, name
        _same(keyed, listed)
        assert isinstance(keyed.data.document_index, KeyedDocuments), name
        assert keyed.data.document_index.count == len(keyed.data.documents), name
        listed = Index.from_data(_listed(listed.data), embedder=emb)
    _keys_are_the_chunks(keyed.data)


def test_every_update_by_keys_equals_the_listing_path(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = keys_of

    def listing_only(chunks: Any) -> Any:  # the listed copies get no keys
        return None if isinstance(chunks, tuple) else real(chunks)

    monkeypatch.setattr(document_keys, "keys_of", listing_only)
    _run_both(saved)


def test_colliding_keys_give_the_same_answers(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a key that collides all the time (the id's length mod 3), the leaves a key points
    at are checked against the id, so nothing of another document is taken."""
    index = Index.load(saved, embedder=HashEmbedder())
    monkeypatch.setattr(document_keys, "document_key", lambda doc_id: len(doc_id) % 3)
    data = index.data.replace(document_keys=None)  # keys made again with the weak hash
    found = data.document_index
    assert isinstance(found, KeyedDocuments) and len(np.unique(found.keys)) <= 3
    listed = ListedDocuments(data)
    asked = ["d-1", "d-10", "d-39", "nope", "d-1", "d-2 ", "x"]
    assert found.match(asked) == listed.match(asked) == match(asked, data.documents)
    assert found.count == listed.count == 40
    assert found.present(asked) == listed.present(asked) == {"d-1", "d-10", "d-39"}
    assert np.array_equal(found.leaves_of(["d-3", "d-30"]), listed.leaves_of(["d-3", "d-30"]))
    assert ("d-5" in found) and ("d-50" not in found)
    assert found.every_id() == set(data.documents)
    assert found.first_leaves() is None  # the keys cannot count the documents' leaves
    assert document_rows(data) == document_rows(listed.data)
    real = keys_of
    monkeypatch.setattr(
        document_keys, "keys_of", lambda c: None if isinstance(c, tuple) else real(c)
    )
    _run_both(saved, made_again=True)


def test_the_first_add_after_a_load_decodes_few_chunks(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Index.load(saved, embedder=HashEmbedder()).save(saved)  # now with keys
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    index = Index.load(saved, embedder=HashEmbedder())
    index.add(_docs(2, 9, "late"))
    index.remove(["d-20"])
    assert decoded.n <= 6, decoded.n  # the removed document's leaf and a few tree leaves, not 40
    assert isinstance(index.data.chunks, LazyRows)
    abstracts = index.data.abstracts  # the kept ones picked from the loaded rows, unread
    assert isinstance(abstracts, PickedRows) and isinstance(abstracts.base, LazyRows)
    assert abstracts.base.read() == 0
    index.save(saved)
    again = Index.load(saved, embedder=HashEmbedder())
    _keys_are_the_chunks(again.data)
    assert again.documents == index.documents


def test_an_index_saved_without_keys_makes_them_and_saves_them(tmp_path: Path) -> None:
    """The format-3 fixture was saved before the keys: its first update makes them from its
    chunks (reading them all, once) and its save keeps them, with the document count."""
    folder = tmp_path / "v3"
    shutil.copytree(Path(__file__).parent / "data" / "index_format_v3", folder)
    old = Index.load(folder, embedder=HashEmbedder(16))
    assert old.data.document_keys is None
    documents = old.documents
    old.add([Document("ash", "", "Ash from Etna closed Catania airport.", is_record=False)])
    old.remove([documents[0]])
    old.save(folder)
    loaded = Index.load(folder, embedder=HashEmbedder(16))
    _keys_are_the_chunks(loaded.data)
    assert loaded.documents == [*documents[1:], "ash"]


def test_ids_not_in_nfc_use_the_document_list() -> None:
    """An index written before ids were normalised may hold a decomposed id: it has no keys,
    and its documents are still found by their NFC form."""
    decomposed = unicodedata.normalize("NFD", "café")
    index = Index.build(_docs(12, 3, "d"), IndexConfig(max_children=4), embedder=HashEmbedder())
    chunks = [
        Chunk(c.id, c.text, Source(decomposed, "", 0, c.source.start, c.source.end))
        if c.source.document == "d-2"
        else c
        for c in index.data.chunks
    ]
    data = index.data.replace(chunks=chunks)
    assert keys_of(data.chunks) is None
    assert isinstance(data.document_index, ListedDocuments)
    assert data.leaf_document_keys() is None
    updated = Index.from_data(data, embedder=HashEmbedder())
    updated.remove(["café"])  # composed: matched in NFC
    assert decomposed not in updated.documents and len(updated.documents) == 11
    with pytest.raises(InputError, match="unknown document"):
        updated.remove(["café"])


def test_lazy_rows_keep_their_rows_through_appends_and_takes(saved: Path) -> None:
    chunks = Index.load(saved, embedder=HashEmbedder()).data.chunks
    assert isinstance(chunks, LazyRows)
    extra = [Chunk("x", "extra text", Source("x", "", 0, 0, 10))]
    longer = chunks + extra
    assert isinstance(longer, LazyRows) and longer.rows is None and chunks.read() == 0
    kept = longer.take(np.array([0, 5, len(chunks)]))
    assert isinstance(kept, LazyRows) and chunks.read() == 0
    assert list(kept) == [chunks[0], chunks[5], extra[0]]
    assert list(chunks.positions_of(kept)) == [0, 5, -1]
    mixed = longer.take(np.array([len(chunks), 0]))  # a tail item before a row: a tuple
    assert mixed == (extra[0], chunks[0])


def test_picked_rows_pick_through_one_level_and_keep_their_own_items() -> None:
    base = ("a", "b", "c", "d")
    first = PickedRows(base, np.array([3, -1, 0, 1]), {1: "new"}, "")
    assert list(first) == ["d", "new", "a", "b"] and first == ["d", "new", "a", "b"]
    second = PickedRows(first, np.array([1, 2, -1, 0, 3]), {4: "own"}, "")
    assert second.base is base  # picks from the first one's base, not from it
    assert list(second) == ["new", "a", "", "d", "own"]
    assert second[-1] == "own" and second[1:3] == ("a", "")
    with pytest.raises(IndexError):
        second[5]


def test_adding_files_saves_their_sources_without_decoding_the_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index with file sources saves them in the order they were recorded: listing the
    documents in corpus order decoded every chunk on each save (3.5 s of a one-file
    ``psirag add`` at 200k chunks). A file that gives no chunk records no source."""
    folder = tmp_path / "ix"
    files = tmp_path / "files"
    files.mkdir()
    for k, text in enumerate(_texts(30, 1, "f")):
        (files / f"f{k:02d}.txt").write_text(text)
    (files / "blank.txt").write_text("   \n")
    from psirag.cli import main

    monkeypatch.setattr("psirag.cli.living_cmds.load_embedder_for", lambda *a, **k: HashEmbedder())
    Index.build(
        [Document(f"r{i}", "", t, is_record=True) for i, t in enumerate(_texts(30, 2, "r"))],
        IndexConfig(max_children=4),
        embedder=HashEmbedder(),
    ).save(folder)
    late = tmp_path / "late.txt"
    late.write_text("Late text about Etna lava and Nile silt near Place3.")
    assert main(["add", str(folder), str(files), "-q"]) == 0
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    assert main(["add", str(folder), str(late), "-q"]) == 0
    assert decoded.n <= 8, decoded.n  # a few leaves the tree stage reads, not 61 chunks
    again = Index.load(folder, embedder=HashEmbedder())
    sources = again.data.sources
    assert list(sources) == [d for d in again.documents if d in sources]  # corpus order
    assert len(sources) == 31 and not any("blank" in d for d in sources)


def test_a_document_filtered_search_reads_only_that_documents_chunks(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search restricted to some documents found their leaves through the per-leaf
    document of every chunk (decoding the whole corpus on a loaded index); the keys find
    them, and the results are those of the listing path. An unknown id still fails with
    the document count and a few examples."""
    Index.load(saved, embedder=HashEmbedder()).save(saved)  # now with keys
    real = keys_of
    monkeypatch.setattr(
        document_keys, "keys_of", lambda c: None if isinstance(c, tuple) else real(c)
    )
    loaded = Index.load(saved, embedder=HashEmbedder())
    listed = Index.from_data(_listed(loaded.data), embedder=HashEmbedder())
    assert isinstance(listed.data.document_index, ListedDocuments)
    index = Index.load(saved, embedder=HashEmbedder())
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    hits = index.search("lava volcano", k=5, docs=["d-3", "d-17"])
    assert decoded.n <= 12, decoded.n  # the two documents' leaves and the hits, not 40
    assert "leaf_documents" not in index.data.__dict__ and "documents" not in index.data.__dict__
    assert hits and {h.source.document for h in hits} <= {"d-3", "d-17"}
    assert hits == listed.search("lava volcano", k=5, docs=["d-3", "d-17"])
    with pytest.raises(InputError, match=r"unknown document id.*40 documents, e\.g\. 'd-0'"):
        index.search("lava", docs=["d-3", "nope"])


def test_the_document_list_reads_one_chunk_per_document(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's document list (id, title, chunk count in corpus order) comes from the
    keys' runs: one chunk read per document, not every chunk. Leaves of one document that
    are not one run (not something psirag writes) make the keys step aside."""
    Index.load(saved, embedder=HashEmbedder()).save(saved)  # now with keys
    index = Index.load(saved, embedder=HashEmbedder())
    listed = _listed(Index.load(saved, embedder=HashEmbedder()).data)
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    rows = document_rows(index.data)
    assert decoded.n == 40, decoded.n  # one per document
    chunks = tuple(listed.chunks)
    by_doc: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_doc.setdefault(c.source.document, []).append(c)
    assert rows == [(d, cs[0].source.title, len(cs)) for d, cs in by_doc.items()]
    split = [chunks[0], chunks[1], chunks[0]]  # d-0's leaves on both sides of another's
    keys = keys_of(split)
    assert keys is not None and keys[1] == 2
    assert KeyedDocuments(keys[0], keys[1], split).first_leaves() is None


def test_keys_and_duplicate_hashes_saved_after_updates_are_those_of_the_chunks(
    saved: Path,
) -> None:
    """A save does not read back the kept leaves' document keys and duplicate hashes (they
    are the loaded chunks'): after adds, a rename and removals, each saved and loaded again,
    they are still those made from the chunks themselves."""
    from psirag.retrieval.duplicates import DuplicateMap

    emb = HashEmbedder()
    for name, step in STEPS:
        index = Index.load(saved, embedder=emb)
        step(index)
        index.save(saved)
        data = Index.load(saved, embedder=emb).data
        _keys_are_the_chunks(data)
        dups = data.sparse.duplicates
        assert dups is not None, name
        want = DuplicateMap.of([c.text for c in data.chunks])
        assert np.array_equal(dups.hashes, want.hashes), name
        assert np.array_equal(dups.first_copy, want.first_copy), name
