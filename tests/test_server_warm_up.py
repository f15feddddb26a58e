"""A served index is warmed up on a background thread (issue 24): after a start, what the first
update reads (the phrase table a load defers, the document keys) and the tree's tables are
made without a request waiting, so the first ``POST /documents`` costs what a later one does;
the write routes answer their document questions from the keys, not from a list of every
document."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from support import HashEmbedder, build_index
from support.counting import count_calls

import psirag.server.embedding as embedding
import psirag.storage_format as storage_format
from psirag.abstracts.phrases import PhraseTable, _will_need
from psirag.index import Index
from psirag.index_data import Deferred, IndexData
from psirag.server.app import create_app
from psirag.server.embedding import prepare_index, warm_up
from psirag.tree import Tree


def _warmed(timeout: float = 30.0) -> None:
    """Wait for the warm-up threads started so far."""
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread.name == "psirag-warm-up":
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive()


def test_prepare_index_makes_what_the_first_update_reads(tmp_path: Path) -> None:
    build_index(tmp_path / "index")
    index = Index.load(tmp_path / "index", embedder=HashEmbedder())
    data = index.data
    assert isinstance(IndexData.__dict__["phrase_table"].held(data), Deferred)  # deferred
    prepare_index(index)
    _warmed()
    table = IndexData.__dict__["phrase_table"].held(data)
    assert table is not None and not isinstance(table, Deferred)
    assert "document_index" in data.__dict__
    assert data.document_index.count == len(data.documents)
    tree = data.tree
    # the leaf counts, not the whole membership (a pass over every node per generation)
    assert "leaf_counts" in tree.__dict__ and "leaf_membership" not in tree.__dict__
    assert "_children_csr" in tree.__dict__  # the insertion's children table
    assert np.array_equal(tree.leaf_counts, np.diff(tree.leaf_membership.indptr))
    for node in range(tree.n_nodes):  # what the views read without it, made the same
        below = Tree(parent=tree.parent, layer=tree.layer).leaves_under(node)
        assert np.array_equal(below, tree.leaves_under(node)), node
    rng = np.random.default_rng(3)
    for _ in range(20):  # a document filter's nodes: the leaves and everything above them
        leaves = rng.choice(tree.n_leaves, size=int(rng.integers(1, 6)), replace=False)
        mask = np.zeros(tree.n_leaves, dtype=np.float32)
        mask[leaves] = 1
        want = np.asarray(tree.leaf_membership @ mask).ravel() > 0
        assert np.array_equal(tree.ancestors_of(leaves), want)


def test_the_write_routes_read_only_the_chunks_they_ask_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "index"
    build_index(folder)
    Index.load(folder, embedder=HashEmbedder()).save(folder)  # a generation with keys
    decoded = count_calls(monkeypatch, storage_format, "_chunk")
    index = Index.load(folder, embedder=HashEmbedder())
    n_docs = len(Index.load(folder, embedder=HashEmbedder()).documents)
    decoded.n = 0
    app = create_app(folder, index=index, mcp=False)
    with TestClient(app) as client:
        _warmed()
        doc = index.data.chunks[0].source.document
        before = decoded.n
        clash = client.post("/documents", json={"text": "x y z", "id": doc})
        assert clash.status_code == 400 and "already indexed" in clash.text
        sync = client.post("/sync", json={"documents": [{"id": doc, "text": "x"}]})
        assert sync.status_code == 400 and "already indexed" in sync.text
        assert client.delete("/documents/no-such-doc").status_code == 404
        assert client.get("/sources").json()["documents"] == n_docs
        assert client.get("/generation").json()["documents"] == n_docs
        read = decoded.n - before
    mine = int(index.data.document_index.leaves_of([doc]).sum())
    assert read <= mine < len(index.data.chunks) // 2, read  # the clashing document's chunks


def _table_with_saved_counts(folder: Path) -> tuple[Index, PhraseTable]:
    build_index(folder)
    Index.load(folder, embedder=HashEmbedder()).save(folder)  # a generation with the counts
    index = Index.load(folder, embedder=HashEmbedder())
    table = index.data.phrase_table
    assert table is not None and "saved_derived" in table._cache  # left unread by the load
    return index, table


def test_the_warm_up_restores_the_saved_counts_so_the_first_add_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, table = _table_with_saved_counts(tmp_path / "index")
    restored = count_calls(monkeypatch, PhraseTable, "_restore_derived")
    prepare_index(index)
    _warmed()
    assert restored.n == 1 and "derived" in table._cache and "saved_derived" not in table._cache
    derived = count_calls(monkeypatch, PhraseTable, "_derive")
    index.add(["a new text about something else entirely"], texts=True)
    assert derived.n == 0  # the first add read the warm-up's counts
    assert table.restore_saved_counts() is False  # taken by the add: not restored again
    assert derived.n == 0


def test_a_warm_up_and_the_first_add_at_once_restore_the_counts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The add waits for the warm-up's restore, never derives over the corpus beside it."""
    index, table = _table_with_saved_counts(tmp_path / "index")
    real = PhraseTable._restore_derived
    started = threading.Event()

    def slow(self: PhraseTable, *args: object) -> object:
        started.set()
        time.sleep(0.3)  # the add starts while this restore is under way
        return real(self, *args)

    monkeypatch.setattr(PhraseTable, "_restore_derived", slow)
    derived = count_calls(monkeypatch, PhraseTable, "_derive")
    warm = threading.Thread(target=table.restore_saved_counts)
    warm.start()
    assert started.wait(10)
    summary = index.add(["a new text about something else entirely"], texts=True)
    warm.join(10)
    assert not warm.is_alive()
    assert derived.n == 1  # the warm-up's restore only: the add read its counts
    assert len(summary.added) == 1


def test_index_says_when_the_warm_up_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, _ = _table_with_saved_counts(tmp_path / "index")
    gate = threading.Event()
    real = PhraseTable.restore_saved_counts

    def held(self: PhraseTable) -> bool:
        gate.wait(10)
        return real(self)

    monkeypatch.setattr(PhraseTable, "restore_saved_counts", held)
    app = create_app(tmp_path / "index", index=index, mcp=False)
    with TestClient(app) as client:
        running = client.get("/index").json()["warm_up"]
        gate.set()
        _warmed()
        done = client.get("/index").json()["warm_up"]
    assert running == {"done": False, "seconds": None}
    assert done["done"] is True and 0 <= done["seconds"] < 30


def test_the_warm_up_reads_ahead_the_phrase_arrays_and_opens_the_leaf_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, _ = _table_with_saved_counts(tmp_path / "index")
    read_ahead = count_calls(monkeypatch, PhraseTable, "read_ahead")

    class Graph:  # what the warm-up reads of a leaf graph: its (saved) view
        opened = 0
        n_leaves = index.data.tree.n_leaves

        @property
        def graph(self) -> object:
            Graph.opened += 1
            return self

    data = index.data.replace(leaf_graph=Graph())
    monkeypatch.setattr(embedding, "_warming", [data])  # the data being served
    warm_up(data)
    assert read_ahead.n == 1 and Graph.opened == 1


def test_will_need_advises_the_memory_map_under_a_view(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(100_000, dtype=np.int64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert _will_need(mapped) and _will_need(mapped[10:][::2])
    assert not _will_need(np.arange(10)) and not _will_need(None)
    table = PhraseTable.from_arrays(
        ["w"],
        {
            "lw_ptr": np.array([0, 1]),
            "lw": np.array([0]),
            "ls_ptr": np.array([0, 0]),
            "ls_key": np.empty(0, dtype=np.int64),
            "ls_cnt": np.empty(0, dtype=np.int64),
            "lp_ptr": np.array([0, 0]),
            "lp_pid": np.empty(0, dtype=np.int64),
            "p_key": mapped,
        },
    )
    assert table.read_ahead() == 1  # p_key; no counts derived yet
