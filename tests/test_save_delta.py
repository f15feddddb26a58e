"""A save on top of the generation an index was loaded from writes what the update changed
without reading back and comparing every row (issue 24: a change costs O(change)): the phrase
table remembers that it descends from the saved one by adds and removals only, whose kept
rows, phrase keys and words never change, so those tables get their new rows appended
unread. The result equals what was saved before this shortcut (a table not known to descend
from the base is still compared row by row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import HashEmbedder
from support.counting import count_calls, record_tables

import psirag.segments as segments
from psirag import Index, IndexConfig
from psirag.ingest import Document

GROWING = ("keywords/ls_key", "keywords/lp_pid", "keywords/lw", "keywords/words", "keywords/p_key")
INNER = ("inner_vectors", "inner_abstracts")


def _docs(n: int) -> list[str]:
    topics = ["volcano lava ash Etna", "river delta silt Nile", "bread yeast dough oven"]
    return [
        f"{topics[i % 3]} passage {i} with Word{i} and Name{i % 7} near Place{i % 5}."
        for i in range(n)
    ]


def _read_tables(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables a save reads back from its base generation, in order."""
    return record_tables(monkeypatch, segments, "read_physical")


def _same_table(a: Index, b: Index) -> None:
    ta, tb = a._data.phrase_table, b._data.phrase_table
    assert ta is not None and tb is not None
    assert ta.words == tb.words
    for name, array in ta.arrays().items():
        assert np.array_equal(np.asarray(array), np.asarray(tb.arrays()[name])), name
    da, db = ta.derived_arrays(), tb.derived_arrays()
    if da is not None and db is not None:
        for name in da:
            assert np.array_equal(np.sort(da[name]), np.sort(db[name])), name


@pytest.mark.parametrize("trust", [True, False])
def test_a_save_after_an_update_reads_back_no_growing_table_nor_the_inner_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trust: bool
) -> None:
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    index = Index.load(folder, embedder=emb)
    table = index._data.phrase_table
    assert table is not None and table.saved_from is not None
    index.add(["Lava and ash from Etna, said Word9000 near Place9.", "Nile silt"], texts=True)
    index.remove([index.documents[4]])
    assert index._data.inner_rows is not None
    if not trust:  # the control: a table and inner nodes not known to descend from the base
        index._data.phrase_table._cache.pop("saved_from")  # type: ignore[union-attr]
        object.__setattr__(index._data, "inner_rows", None)
    reads = _read_tables(monkeypatch)
    index.save(folder)
    read = list(reads)  # (the load below reads every table)
    again = Index.load(folder, verify="full", embedder=emb)
    _same_table(index, again)
    assert [c.text for c in again.chunks] == [c.text for c in index.chunks]
    assert again.abstracts == index.abstracts
    assert np.asarray(again.node_vectors).tobytes() == np.asarray(index.node_vectors).tobytes()
    if trust:
        assert not set(GROWING + INNER) & set(read), sorted(set(GROWING + INNER) & set(read))
    else:
        assert set(GROWING + INNER) <= set(read), read
    # and a search on the saved index sees the new text
    assert any("Word9000" in p.text for p in again.search("Word9000 Etna lava", k=3))


def test_an_add_lists_the_documents_without_reading_every_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An add alone matches no id against the index's documents, and the new value's document
    list is the old one plus the new documents (what listing the chunks again gives)."""
    import psirag.ids as ids

    emb = HashEmbedder()
    docs = [Document(f"d{i}", "", text, is_record=False) for i, text in enumerate(_docs(40))]
    index = Index.build(docs, IndexConfig(max_children=4), embedder=emb)
    assert len(index.documents) == 40
    calls = count_calls(monkeypatch, ids, "nfc")
    clash = Document("d3", "", "A new text under a taken id, about Etna.", is_record=False)
    summary = index.add([Document("new", "", "Lava again near Place2.", is_record=False), clash])
    assert summary.renamed  # the taken id was renamed
    assert calls.n == 0, calls.n
    listed = tuple(dict.fromkeys(c.source.document for c in index.chunks))
    assert index._data.documents == listed and len(listed) == 42
    index.remove(["d5"])
    assert index._data.documents == tuple(dict.fromkeys(c.source.document for c in index.chunks))


def test_changed_inner_nodes_drop_the_carried_rows(tmp_path: Path) -> None:
    """A value whose abstracts, vectors or tree are replaced by hand no longer claims that the
    saved rows hold its inner nodes (a save then matches them by content)."""
    emb = HashEmbedder()
    folder = tmp_path / "ix"
    Index.build(_docs(30), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    data = Index.load(folder, embedder=emb)._data
    assert data.inner_rows is not None and data.inner_rows[0] is data.origin
    changed = data.replace(abstracts=tuple(a.upper() for a in data.abstracts))
    assert changed.inner_rows is None
    Index.from_data(changed, embedder=emb).save(folder)
    assert Index.load(folder, embedder=emb).abstracts == changed.abstracts
    assert data.replace(sources={}).inner_rows is data.inner_rows


def test_a_server_s_second_save_keeps_the_inner_rows_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """update_saved hands back data tied to the generation it wrote (origin and inner rows),
    so the next update on top of it (a running server's) reads no inner table back."""
    from psirag.living import add_documents, update_saved

    emb = HashEmbedder()
    folder = tmp_path / "ix"
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)

    def adding(text: str) -> Any:
        return lambda data: add_documents(data, [text], emb, texts=True)

    first = update_saved(folder, adding("Etna lava, said Word7001 near Place3."))
    reads = _read_tables(monkeypatch)
    second = update_saved(folder, adding("Nile silt, said Word7002."), base=first.data)
    read = list(reads)
    assert not second.loaded
    assert not set(INNER) & set(read), read
    again = Index.load(folder, verify="full", embedder=emb)
    assert again.abstracts == second.data.abstracts
    assert (
        np.asarray(again.node_vectors).tobytes() == np.asarray(second.data.node_vectors).tobytes()
    )


COUNTS = tuple(
    f"keywords/{name}" for name in ("p_sorted", "p_df", "p_best", "s_key", "s_cnt", "s_pid")
)
"""The phrase table's corpus counts: per phrase and per surface form, far more rows than
leaves; a save after adds and removals writes the rows they changed without reading these."""


def _exactly_the_same_table(a: Index, b: Index) -> None:
    ta, tb = a._data.phrase_table, b._data.phrase_table
    assert ta is not None and tb is not None
    assert list(ta.words) == list(tb.words)
    for name, array in ta.arrays().items():
        assert np.array_equal(np.asarray(array), np.asarray(tb.arrays()[name])), name
    tb._derived()  # a loaded table restores its saved counts when first used
    da, db = ta.derived_arrays(), tb.derived_arrays()
    assert da is not None and db is not None and set(da) == set(db)
    for name in da:
        assert np.array_equal(np.asarray(da[name]), np.asarray(db[name])), name


def test_saves_after_random_updates_write_the_counts_unread_and_load_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random adds and removals, one to three per save, each save on top of the last: no save
    reads back the corpus counts, the leaf vectors or a growing table, and every load gives
    back exactly the phrase table, chunks, abstracts and vectors the updated index held."""
    import random

    rng = random.Random(24)
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    docs = [Document(f"d{i}", "", t, is_record=False) for i, t in enumerate(_docs(120))]
    Index.build(docs, IndexConfig(max_children=4), embedder=emb).save(folder)
    fresh = iter(range(1000, 10**6))
    for step in range(8):
        index = Index.load(folder, embedder=emb)
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.5 and len(index.documents) > 60:
                index.remove(rng.sample(list(index.documents), rng.randint(1, 3)))
            else:
                k = next(fresh)
                text = f"Etna Word{k} erupted near Place{k % 9}; silt of River{k % 4} " * 3
                index.add([Document(f"n{k}", "", text, is_record=False)])
        reads = _read_tables(monkeypatch)
        index.save(folder)
        read = set(reads)
        monkeypatch.undo()
        assert not read & {*COUNTS, *GROWING, "leaf_vectors"}, (step, sorted(read))
        again = Index.load(folder, verify="full", embedder=emb)
        _exactly_the_same_table(index, again)
        assert [c.text for c in again.chunks] == [c.text for c in index.chunks]
        assert again.abstracts == index.abstracts
        assert np.asarray(again.node_vectors).tobytes() == np.asarray(index.node_vectors).tobytes()


def test_saving_the_same_index_again_writes_only_what_changed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Index.save`` makes the saved generation the index's origin, so a later save in the
    same process (a notebook's add, save, add, save) is a delta as after a load: before, every
    save after the first wrote the whole index again (97 s at 1M chunks)."""
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    index = Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb)
    index.save(folder)
    for k in range(3):
        index.add([f"Lava and ash from Etna, said Word{9000 + k} near Place{k}."], texts=True)
        reads = _read_tables(monkeypatch)
        index.save(folder)
        read = list(reads)
        assert not set(GROWING) & set(read), read
        assert not set(INNER) & set(read), read
        assert not set(COUNTS) & set(read), read
    again = Index.load(folder, verify="full", embedder=emb)
    assert again.abstracts == index.abstracts
    assert [c.text for c in again.chunks] == [c.text for c in index.chunks]
    _exactly_the_same_table(index, again)


def _chunk_table(folder: Path) -> dict[str, Any]:
    import json

    top = json.loads((folder / "manifest.json").read_text())
    generation = folder / "generations" / f"{int(top['generation']):06d}" / "manifest.json"
    table: dict[str, Any] = json.loads(generation.read_text())["tables"]["chunks"]
    return table


@pytest.mark.parametrize("path", ["index", "update_saved"])
def test_saves_on_top_of_saves_write_only_their_own_chunks(tmp_path: Path, path: str) -> None:
    """The chunks an earlier save on the same index object wrote are that generation's rows:
    the next save keeps them (no row removed, each save appends only its own chunks), as a
    running server's saves one after the other do. Before, every save wrote again, and
    marked removed, every chunk added since the load."""
    from psirag.living import add_documents, remove_documents, update_saved

    emb = HashEmbedder()
    folder = tmp_path / "ix"
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    index = Index.load(folder, embedder=emb)
    base: Any = None
    added = []
    for k in range(4):
        text = f"Etna lava, said Word{9000 + k} near Place{k}. Nile silt of River{k}."
        added.append(text)
        if path == "index":
            index.add([Document(f"n{k}", "", text, is_record=False)])
            index.save(folder)
        else:
            done = update_saved(
                folder,
                lambda data, t=text: add_documents(data, [t], emb, texts=True),
                base=base,
            )
            assert not done.loaded or k == 0
            base = done.data
        table = _chunk_table(folder)
        assert table["n_dead"] == 0, (k, table)
        assert sum(rows for _, rows in table["segments"]) == 61 + k, table
    again = Index.load(folder, verify="full", embedder=emb)
    texts = [c.text for c in again.chunks]
    assert len(texts) == 64 and texts[-4:] == added
    # a removal on top: the two removed chunks (an added one and a built one) are the only
    # rows marked removed
    held = index if path == "index" else Index.from_data(base, embedder=emb)
    ids = list(held.documents)
    gone = [ids[61], ids[0]]
    if path == "index":
        index.remove(gone)
        index.save(folder)
    else:
        update_saved(folder, lambda data: remove_documents(data, gone, emb), base=base)
    assert _chunk_table(folder)["n_dead"] == 2
    kept = [c.text for c in Index.load(folder, verify="full", embedder=emb).chunks]
    assert kept == [t for t in texts if t not in (added[1], texts[0])]
