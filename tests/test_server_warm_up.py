"""A served index is warmed up on a background thread (issue 24): after a start, what the first
update reads (the phrase table a load defers, the document keys) and the tree's tables are
made without a request waiting, so the first ``POST /documents`` costs what a later one does;
the write routes answer their document questions from the keys, not from a list of every
document."""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from support import HashEmbedder, build_index
from support.counting import count_calls

import psirag.page_cache as page_cache
import psirag.pipeline as pipeline
import psirag.rows as rows
import psirag.server.embedding as embedding
import psirag.server.read_ahead as read_ahead_module
import psirag.storage_format as storage_format
from psirag.abstracts.phrases import PhraseTable
from psirag.index import Index
from psirag.index_data import Deferred, IndexData
from psirag.retrieval.leaf_graph import usearch_available
from psirag.server.app import create_app
from psirag.server.embedding import prepare_index, warm_up
from psirag.server.mapped import mapped_files
from psirag.server.read_ahead import read_ahead
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
    assert "children_table" in tree.__dict__  # the insertion's children table
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


def test_the_warm_up_opens_the_leaf_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index, _ = _table_with_saved_counts(tmp_path / "index")

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
    assert Graph.opened >= 1  # by the warm-up and by its add-first reads (a view opens once)


@pytest.fixture
def mapped_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Index:
    """A saved index (with its phrase counts and, where usearch is installed, a leaf graph)
    whose arrays are all memory-mapped, as a large index's are; loaded, not warmed up."""
    monkeypatch.setattr(rows, "MAP_MIN_BYTES", 0)  # small files are mapped too
    monkeypatch.setattr(pipeline, "GRAPH_MIN_LEAVES", 4)
    read_ahead_module.forget()  # a file of an earlier test may have had the same inode
    index, _ = _table_with_saved_counts(tmp_path / "index")
    return index


def _read_ahead(client: TestClient) -> set[str]:
    """What the warm-up read ahead (paths under the index), as ``GET /index`` says."""
    _warmed()
    status = client.get("/index").json()["warm_up"]
    assert status["done"] is True
    got = status["read_ahead"]
    assert got["files"] == len(got["read"]) > 0 and got["skipped"] == []
    assert got["bytes"] + got["resident_bytes"] > 0 and set(got["resident"]) <= set(got["read"])
    return set(got["read"])


def _under(folder: Path) -> set[str]:
    """The files under ``folder`` this process maps, by their path there."""
    root = folder.resolve()
    return {path.relative_to(root).as_posix() for path, _, _ in mapped_files(folder)}


def test_the_warm_up_reads_ahead_each_file_the_first_write_maps(
    tmp_path: Path, mapped_index: Index
) -> None:
    """Every file of the served generation that the process maps once its first write is done
    (the phrase arrays, the node vectors, the BM25 parts, the document keys, the leaf graph)
    was read into the page cache by the warm-up, before that write; JSON-lines row tables are
    not (a write reads a few of their lines)."""
    folder = tmp_path / "index"
    origin = mapped_index.data.origin
    assert origin is not None
    served = f"generations/{origin.generation:06d}/"
    app = create_app(folder, index=mapped_index, mcp=False)
    with TestClient(app) as client:
        read = _read_ahead(client)
        job = client.post("/documents", json={"text": "a new text about tides", "id": "new"})
        assert job.status_code == 202, job.text
        done = client.get(f"/jobs/{job.json()['job']['id']}?wait=30").json()
        assert done["status"] == "done", done
        mapped = _under(folder)
    wanted = {name for name in mapped if name.startswith(served) and not name.endswith(".jsonl")}
    assert wanted and wanted - read == set()
    names = {Path(name).name for name in read}
    for array in ("p_key", "p_best", "p_df", "s_cnt", "s_key", "lp_pid"):
        assert f"keywords.{array}.000001.npy" in names, array
    assert {"node_vectors.000001.npy", "document_keys.000001.npy"} <= names
    assert any(name.endswith(".post_doc.npy") for name in names)  # BM25's postings
    if usearch_available():
        assert "graph.usearch" in names
    assert not any(name.endswith(".jsonl") for name in read)


def test_a_file_read_ahead_once_is_not_read_again(mapped_index: Index) -> None:
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    first = read_ahead(data.origin.folder)
    again = read_ahead(data.origin.folder)
    assert len(first["files"]) > 0 and again["files"] == [] and again["bytes"] == 0


def test_the_read_ahead_stops_at_shutdown(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops ends its warm-up's reads between two buffers, files left unread."""
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    stop = threading.Event()
    calls = [0]
    real = read_ahead_module._read_file

    def counted(
        path: Path, stop_: threading.Event | None, waited: list[float], **kw: bool
    ) -> tuple[int, int, bool] | None:
        calls[0] += 1
        if calls[0] == 2:  # the server stops once the first file is read
            stop.set()
        return real(path, stop_, waited, **kw)

    monkeypatch.setattr(read_ahead_module, "_read_file", counted)
    got = read_ahead(folder, stop=stop)
    assert got["stopped"] is True and len(got["files"]) == 1 and calls[0] == 2
    assert len(mapped_files(folder)) > 3  # files were left unread
    # through a server: its shutdown sets the stop its warm-up reads under
    monkeypatch.setattr(read_ahead_module, "_read_file", real)
    events: list[threading.Event] = []
    real_read_ahead = embedding.read_ahead

    def seen(folder: Path, *, stop: threading.Event, **kw: object) -> dict[str, object]:
        events.append(stop)
        return real_read_ahead(folder, stop=stop, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(embedding, "read_ahead", seen)
    read_ahead_module.forget()
    app = create_app(folder, index=mapped_index, mcp=False)
    with TestClient(app):
        _warmed()
        # the add's files first (their own thread), then the rest: both under the server's stop
        assert len(events) == 2 and not any(event.is_set() for event in events)
    assert all(event.is_set() for event in events)


def test_the_read_ahead_skips_what_exceeds_its_share_of_memory(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    sizes = {p.name: p.stat().st_size for p, _, _ in mapped_files(folder)}
    biggest = max(sizes.values())
    # available memory such that half of it holds every file but the largest
    monkeypatch.setattr(read_ahead_module, "available_memory", lambda: 2 * (biggest - 1))
    with caplog.at_level(logging.INFO, logger="psirag.server"):
        got = read_ahead(folder, share=0.5)
    skipped = {Path(name).name for name in got["skipped"]}
    assert skipped and all(sizes[name] > 0 for name in skipped)
    assert max(sizes[name] for name in skipped) == biggest
    assert sum(sizes[Path(n).name] for n in got["files"]) <= biggest - 1
    assert "not read ahead" in caplog.text and next(iter(skipped)) in caplog.text
    # 0: nothing is read, every file is skipped
    read_ahead_module.forget()
    none = read_ahead(folder, share=0.0)
    assert none["files"] == [] and len(none["skipped"]) == len(
        [n for n in sizes if not n.endswith(".jsonl")]
    )


def test_the_read_ahead_waits_while_a_write_runs(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two buffers the reads wait for a write under way (its own reads come first on
    the disk), and go on when it ends."""
    monkeypatch.setattr(read_ahead_module, "BUFFER_BYTES", 64)
    monkeypatch.setattr(page_cache, "_libc", [None])  # every byte read, cached or not
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = data.origin.folder
    files = len(mapped_files(folder))
    got: list[dict[str, object]] = []
    with read_ahead_module.writing():
        reader = threading.Thread(target=lambda: got.append(read_ahead(folder)))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive()  # waiting for the write
    reader.join(30)
    assert not reader.is_alive() and len(got) == 1
    assert got[0]["waited_for_writes_s"] >= 0.3  # type: ignore[operator]
    assert 0 < len(got[0]["files"]) <= files  # type: ignore[arg-type]


def _evict(folder: Path) -> None:
    """Drop what the page cache holds of the files under ``folder`` (written back first); the
    pages this process has mapped and touched stay."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _missing(path: Path) -> int:
    """The bytes of ``path`` not in the page cache, as ``mincore`` says."""
    size = path.stat().st_size
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = page_cache.resident_pages(fd, 0, size)
    finally:
        os.close(fd)
    assert pages is not None
    page = mmap.PAGESIZE
    missing = int((~pages).sum()) * page
    if not pages[-1]:  # the last page holds only the file's tail
        missing -= len(pages) * page - size
    return missing


needs_mincore = pytest.mark.skipif(
    page_cache._mincore() is None, reason="no mincore (not Linux, or no libc)"
)


def test_missing_ranges_are_the_runs_of_pages_not_resident() -> None:
    page = mmap.PAGESIZE
    resident = np.array([1, 0, 0, 1, 1, 1, 0, 1, 0, 0], dtype=bool)
    start = 8 * page
    end = start + 9 * page + 100  # the last page is the file's tail
    runs = page_cache.missing_ranges(resident, start, end, merge=1)
    assert runs == [
        (start + page, start + 3 * page),
        (start + 6 * page, start + 7 * page),
        (start + 8 * page, end),
    ]
    # runs closer than `merge` are read as one (the cached pages between them read again)
    joined = page_cache.missing_ranges(resident, start, end, merge=2 * page)
    assert joined == [(start + page, start + 3 * page), (start + 6 * page, end)]
    assert page_cache.missing_ranges(np.ones(4, dtype=bool), 0, 4 * page, 1) == []


@needs_mincore
def test_resident_pages_tell_cached_pages_from_evicted_ones(tmp_path: Path) -> None:
    page = mmap.PAGESIZE
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(64 * page))
    _evict(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    try:
        before = page_cache.resident_pages(fd, 0, 64 * page)
        assert before is not None and before.shape == (64,)
        if before.any():
            pytest.skip("this file system keeps evicted pages (tmpfs?)")
        os.pread(fd, 4 * page, 32 * page)
        after = page_cache.resident_pages(fd, 0, 64 * page)
        window = page_cache.resident_pages(fd, 32 * page + 10, 2 * page)
    finally:
        os.close(fd)
    assert after is not None and after[32:36].all()  # read: cached
    assert window is not None and window.shape == (3,) and window.all()  # from the page at 32


@needs_mincore
def test_a_warm_start_reads_nothing_that_is_resident(mapped_index: Index) -> None:
    """Files already in the page cache are gone through and reported resident, not copied."""
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    files = [p for p, _, _ in mapped_files(folder) if not p.name.endswith(".jsonl")]
    for path in files:
        path.read_bytes()  # every page cached
    got = read_ahead(folder)
    assert got["residency"] == "mincore"
    assert got["bytes"] == 0
    assert got["resident_bytes"] == sum(p.stat().st_size for p in files) > 0
    assert len(got["files"]) == len(files) and got["resident"] == got["files"]


@needs_mincore
def test_a_cold_start_reads_only_the_pages_not_resident(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(read_ahead_module, "BUFFER_BYTES", mmap.PAGESIZE)  # no runs joined
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    _evict(folder)
    files = [p for p, _, _ in mapped_files(folder) if not p.name.endswith(".jsonl")]
    missing = sum(_missing(p) for p in files)
    if missing == 0:
        pytest.skip("nothing was evicted (tmpfs?)")
    got = read_ahead(folder)
    assert got["bytes"] == missing
    assert got["bytes"] + got["resident_bytes"] == sum(p.stat().st_size for p in files)
    assert all(_missing(p) == 0 for p in files)  # all cached now


def test_without_mincore_every_byte_is_read(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_cache, "_libc", [None])
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    files = [p for p, _, _ in mapped_files(folder) if not p.name.endswith(".jsonl")]
    got = read_ahead(folder)
    assert got["residency"] == "unknown" and got["resident_bytes"] == 0
    assert got["bytes"] == sum(p.stat().st_size for p in files) > 0


def test_files_read_on_several_threads_give_what_one_thread_does(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``threads``: several files are read at once (a virtual disk reads several streams
    faster than one); the files read, their bytes and their order in the result are those of
    a read on one thread, and a stop leaves the files not yet read out."""
    monkeypatch.setattr(page_cache, "_libc", [None])  # every byte read, each time
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = Path(data.origin.folder)
    real = read_ahead_module._read_file
    busy, most = [0], [0]
    lock = threading.Lock()
    # in the run on three threads, the first three files wait for each other: they can only
    # all pass if they are read at the same time (a barrier that breaks fails the test)
    together: list[threading.Barrier] = []
    calls = [0]

    def slow(path: Path, *args: object, **kw: bool) -> tuple[int, int, bool] | None:
        with lock:
            busy[0] += 1
            most[0] = max(most[0], busy[0])
            calls[0] += 1
            wait = together[0] if together and calls[0] <= 3 else None
        try:
            if wait is not None:
                with contextlib.suppress(threading.BrokenBarrierError):
                    wait.wait(timeout=20)
            return real(path, *args, **kw)  # type: ignore[arg-type]
        finally:
            with lock:
                busy[0] -= 1

    monkeypatch.setattr(read_ahead_module, "_read_file", slow)
    one = read_ahead(folder)
    assert most[0] == 1 and len(one["files"]) > 3
    read_ahead_module.forget()
    most[0] = calls[0] = 0
    together.append(threading.Barrier(3))
    three = read_ahead(folder, threads=3)
    assert most[0] == 3 and not together[0].broken
    together.clear()
    for field in ("files", "resident", "bytes", "resident_bytes", "skipped"):
        assert three[field] == one[field], field
    # a stop set while the first files are read: the rest are not read, nor listed
    read_ahead_module.forget()
    stop = threading.Event()

    def stopping(path: Path, *args: object, **kw: bool) -> tuple[int, int, bool] | None:
        stop.set()
        return slow(path, *args, **kw)

    monkeypatch.setattr(read_ahead_module, "_read_file", stopping)
    got = read_ahead(folder, stop=stop, threads=2)
    assert got["stopped"] is True and got["files"] == [] and got["bytes"] == 0


def test_the_files_an_add_reads_come_first(tmp_path: Path, mapped_index: Index) -> None:
    """The warm-up reads the files a one-document add reads (ADD_FIRST) first, on their own
    thread, then the rest; ``GET /index`` lists them in that order."""
    folder = tmp_path / "index"
    app = create_app(folder, index=mapped_index, mcp=False)
    with TestClient(app) as client:
        _warmed()
        got = client.get("/index").json()["warm_up"]["read_ahead"]
    # an index saved by this code holds the fences of its sorted keys: the arrays an add
    # looks its phrases up in (whose pages it asks for itself) are then read with the rest
    fenced = any(Path(n).name.startswith(read_ahead_module.FENCE_PREFIX) for n in got["read"])
    assert fenced
    ranks = [read_ahead_module.add_rank(name, fenced) for name in got["read"]]
    add = len(read_ahead_module.ADD_FIRST)
    first = [name for name in got["read"] if read_ahead_module.add_rank(name, fenced) < add]
    assert ranks == sorted(ranks)  # node vectors, leaf graph, then the rest
    assert ranks[-1] == len(read_ahead_module.ADD_FIRST)  # there is a rest
    names = {Path(name).name for name in first}
    for array in ("p_sorted", "s_key", "s_pid", "s_cnt"):
        assert f"keywords.{array}.000001.npy" not in names, array
    for array in ("p_key", "p_best", "p_df"):  # read at every phrase of a big node
        assert f"keywords.{array}.000001.npy" in names, array
    assert "node_vectors.000001.npy" in names
    if usearch_available():
        assert "graph.usearch" in names
    assert got["add_first"]["files"] == len(first)


def test_the_add_files_are_read_on_while_a_write_runs(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The add's files are what a running write needs: their reads do not pause for it."""
    monkeypatch.setattr(read_ahead_module, "BUFFER_BYTES", 64)
    monkeypatch.setattr(page_cache, "_libc", [None])  # every byte read
    data = mapped_index.data
    _ = (data.phrase_table, data.document_index)
    assert data.origin is not None
    folder = data.origin.folder
    got: list[dict[str, object]] = []
    with read_ahead_module.writing():
        first = threading.Thread(target=lambda: got.append(read_ahead(folder, add_first=True)))
        first.start()
        first.join(20)
        assert not first.is_alive()  # done while the write runs
        rest = threading.Thread(target=lambda: got.append(read_ahead(folder)))
        rest.start()
        rest.join(0.5)
        assert rest.is_alive()  # the other files wait for the write
    rest.join(30)
    assert not rest.is_alive()
    names = [Path(n).name for n in got[0]["files"]]  # type: ignore[attr-defined]
    add = len(read_ahead_module.ADD_FIRST)
    assert names and all(read_ahead_module.add_rank(n) < add for n in names)
    assert got[0]["waited_for_writes_s"] == 0 and got[0]["bytes"] > 0  # type: ignore[operator]
    assert not set(got[1]["files"]) & set(got[0]["files"])  # type: ignore[call-overload]


def _vm_flags(path: Path) -> list[set[str]]:
    """The ``VmFlags`` of each mapping of ``path`` in this process (``/proc/self/smaps``)."""
    target, flags, current = str(path.resolve()), [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping's first line
            current = len(head) == 6 and head[5] == target
        elif current and line.startswith("VmFlags:"):
            flags.append(set(line.split()[1:]))
    return flags


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc/self/smaps")
def test_sparse_reads_advise_random_reads_on_the_maps_inside_only(tmp_path: Path) -> None:
    path = tmp_path / "a.npy"
    np.save(path, np.arange(1 << 18, dtype=np.int64))
    mapped = np.load(path, mmap_mode="r")
    view = mapped[10:][::3]  # a view of a view: its map is found under it
    in_memory = np.arange(10)
    assert _vm_flags(path) and all("rr" not in f for f in _vm_flags(path))
    with rows.sparse_reads(view, in_memory, None):
        inside = _vm_flags(path)
    assert inside and all("rr" in f for f in inside)  # MADV_RANDOM: a fault reads its page
    assert all("rr" not in f for f in _vm_flags(path))  # normal again
    assert rows._file_map(in_memory) is None and rows._file_map(view) is not None


def test_the_restores_sample_checks_read_sparsely(
    mapped_index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saved counts' sample checks (a few hundred spread rows per array) run while the
    arrays' maps are advised random: cold, each fault reads its page, not a window of 8 MB."""
    import psirag.abstracts.phrases as phrases

    table = mapped_index.data.phrase_table
    assert table is not None and "saved_derived" in table._cache
    inside = [0]
    advised: list[object] = []
    checked: list[bool] = []
    real = rows.sparse_reads

    @contextlib.contextmanager
    def recorded(*arrays: object) -> Iterator[None]:
        advised.extend(rows._file_map(a) for a in arrays)
        with real(*arrays):
            inside[0] += 1
            try:
                yield
            finally:
                inside[0] -= 1

    def spy(name: str) -> None:
        original = getattr(phrases, name)

        def wrapped(*args: object) -> bool:
            checked.append(inside[0] > 0)
            return bool(original(*args))

        monkeypatch.setattr(phrases, name, wrapped)

    spy("_sampled_sorted")
    spy("_sampled_in")
    monkeypatch.setattr(phrases, "sparse_reads", recorded)
    assert table.restore_saved_counts() is True
    assert len(checked) == 4 and all(checked)
    assert len(advised) == 5 and all(m is not None for m in advised)  # all five are mapped
