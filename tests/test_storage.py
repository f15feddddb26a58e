"""Versioned, crash-safe index storage: --out safety, one writer, readers that never see a mixed
index, SIGKILL at any point of a save, garbage collection, format-1 folders, manifest trust.

Concurrency and kill tests fork the test process (cheap, and the children are real processes
that the kernel kills); every loop is bounded and every child has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.corpora import segment_of, write_format1
from support.processes import fork

from psirag import Index, IndexConfig, ownership
from psirag import storage as storage_mod
from psirag.cli import main
from psirag.errors import IndexFormatError, IndexLockedError, IndexTargetError
from psirag.storage import IndexStore, IndexWriter, sha256_file
from psirag.storage_format import load_index_data

BASE_TEXTS = [t for texts in TOPICS.values() for t in texts]
CORPUS_A = [f"alphatag {t}" for t in BASE_TEXTS]  # 12 documents
CORPUS_B = [f"betatag {t} {BASE_TEXTS[(i + 5) % 12]}" for i, t in enumerate(BASE_TEXTS * 2)][
    :20
]  # 20 documents
SIZES = {"alphatag": len(CORPUS_A), "betatag": len(CORPUS_B)}


def build(texts: list[str]) -> Index:
    return Index.build(texts, IndexConfig(max_children=3), embedder=HashEmbedder(), texts=True)


@pytest.fixture(scope="module")
def index_a() -> Index:
    return build(CORPUS_A)


@pytest.fixture(scope="module")
def index_b() -> Index:
    return build(CORPUS_B)


def corpus_of(index: Index) -> str:
    """Which corpus a loaded index holds, after checking that every part agrees on it."""
    tags = {c.text.split()[0] for c in index.chunks}
    assert len(tags) == 1, f"chunks from both corpora: {tags}"
    tag = tags.pop()
    other = "betatag" if tag == "alphatag" else "alphatag"
    n = len(index.chunks)
    assert n == SIZES[tag], f"{n} chunks of {tag}"
    assert index.sparse.first_copy.size == n
    assert int((index.sparse.scores(tag) > 0).sum()) == n, "BM25 of another corpus"
    assert int((index.sparse.scores(other) > 0).sum()) == 0, "BM25 of another corpus"
    assert index.node_vectors.shape[0] == index.tree.n_nodes
    return tag


def generation_entries(folder: Path) -> list[str]:
    """The generation folders and leftovers (not the store's token sidecar)."""
    return sorted(e for e in os.listdir(folder / "generations") if e != ownership.OWNER)


def assert_clean(folder: Path) -> None:
    """Nothing a killed save leaves behind: only published generation folders and the pointer."""
    entries = generation_entries(folder)
    assert all(e.isdigit() and len(e) == 6 for e in entries), entries
    current = json.loads((folder / "manifest.json").read_text())["generation"]
    assert max(int(e) for e in entries) == current
    assert not [e for e in os.listdir(folder) if e.startswith(".manifest.json.tmp")]


# ---------------------------------------------------------------------------- fork helpers
def wait(pid: int, deadline: float) -> int:
    """The child's wait status; a child past ``deadline`` (monotonic) is killed first."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1]
        time.sleep(0.005)


def _any_generation(point: str) -> str:
    """A save point with the generation number in segment file names blanked (a segment's
    name carries the number of the generation that wrote it)."""
    return re.sub(r"\.\d{6}\.", ".N.", point)


def kill_at(point: str) -> Callable[[str], None]:
    def hook(name: str) -> None:
        if _any_generation(name) == _any_generation(point):
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


# ---------------------------------------------------------------------------- --out safety
def write_pwa(folder: Path) -> None:
    (folder / "src").mkdir(parents=True)
    (folder / "manifest.json").write_text('{"name":"pwa"}')
    (folder / "src" / "app.js").write_text("code\n")


def test_data_loss_reproduction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's reproduction: a web app's folder with a manifest.json is not an index."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Mount Etna is an active volcano on Sicily.\n")
    work = tmp_path / "w"
    write_pwa(work)
    capsys.readouterr()
    assert main(["index", str(docs), "--out", str(work), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psirag: error:") and "not a psirag index" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert (work / "manifest.json").read_text() == '{"name":"pwa"}'
    assert (work / "src" / "app.js").read_text() == "code\n"
    assert sorted(os.listdir(work)) == ["manifest.json", "src"]


def test_save_refuses_a_foreign_folder(tmp_path: Path, index_a: Index) -> None:
    work = tmp_path / "w"
    write_pwa(work)
    with pytest.raises(IndexTargetError, match="not a psirag index"):
        index_a.save(work)
    assert sorted(os.listdir(work)) == ["manifest.json", "src"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexTargetError, match="not a folder"):
        index_a.save(tmp_path / "file")


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """A folder this process cannot write to: chmod for a user, the immutable flag for root."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make a read-only folder")
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i not supported here: {made.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


OUT_CASES = ["file", "read-only-parent", "dot", "cwd-absolute", "parent-of-inputs", "foreign"]


@pytest.mark.parametrize("case", OUT_CASES)
def test_bad_out_fails_before_the_build(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    docs = project / "docs"
    docs.mkdir(parents=True)
    (docs / "a.txt").write_text("Bread dough rises when yeast ferments.\n")
    built: list[object] = []
    monkeypatch.setattr(Index, "build", classmethod(lambda cls, *a, **k: built.append(a)))
    monkeypatch.chdir(project)
    guard: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if case == "file":
        (project / "out.txt").write_text("keep me")
        out = "out.txt"
    elif case == "read-only-parent":
        (project / "locked").mkdir()
        out = "locked/idx"
        guard = read_only(project / "locked")
    elif case == "dot":
        out = "."
    elif case == "cwd-absolute":
        out = str(project)
    elif case == "parent-of-inputs":
        out = str(tmp_path)
    else:
        (project / "notes").mkdir()
        (project / "notes" / "todo.md").write_text("- milk\n")
        out = "notes"
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    capsys.readouterr()
    with guard:
        code = main(["index", "docs", "--out", out, "-q"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("psirag: error:") and "Traceback" not in err
    assert err.count("\n") == 1, err
    assert not built, "the build started before --out was checked"
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    if case == "file":
        assert (project / "out.txt").read_text() == "keep me"


def test_dot_is_fine_inside_an_existing_index_only_for_the_api(
    tmp_path: Path, index_a: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty current folder is refused as a target; an index folder can be rewritten."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    with pytest.raises(IndexTargetError, match="current folder"):
        index_a.save(".")
    index_a.save(tmp_path / "idx")
    monkeypatch.chdir(tmp_path / "idx")
    index_a.save(".")  # a psirag index is replaced generation by generation, never deleted
    assert IndexStore(".").current() == 2


def test_demo_rebuild_keeps_the_llm_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psirag.cli.index_cmds as cli
    import psirag.pipeline as pipeline

    topics = {name: " ".join(texts * 2) for name, texts in TOPICS.items()}
    monkeypatch.setattr(cli, "demo_corpus", lambda: (list(topics.values()), list(topics)))
    monkeypatch.setattr(cli, "DEMO_QUERIES", ("Which volcano destroyed Pompeii?",))
    monkeypatch.setattr(cli, "_demo_agent", lambda index, folder, out: None)
    monkeypatch.setattr(pipeline, "load_embedder", lambda spec, **kw: HashEmbedder())
    folder = tmp_path / "demo"
    build(list(topics.values())).save(folder)
    (folder / "llm-cache.sqlite").write_bytes(b"answers that cost money")
    assert main(["demo", "--out", str(folder), "--rebuild", "-q"]) == 0
    assert "built" in capsys.readouterr().out
    kept = [
        p
        for p in tmp_path.rglob("*")
        if p.is_file() and p.read_bytes() == b"answers that cost money"
    ]
    assert kept, "the demo's LLM cache was deleted by --rebuild"
    assert Index.load(folder).tree.n_leaves > 0


# ---------------------------------------------------------------------------- the lock
def test_second_writer_gets_a_clear_lock_error(
    tmp_path: Path, index_a: Index, index_b: Index, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)
    with IndexStore(folder).lock():
        with pytest.raises(
            IndexLockedError, match=rf"locked by another writer \(pid {os.getpid()}"
        ):
            index_b.save(folder)
        docs = tmp_path / "docs"
        docs.mkdir()
        (docs / "a.txt").write_text("football club\n")
        capsys.readouterr()
        assert main(["index", str(docs), "--out", str(folder), "-q"]) == 2
        err = capsys.readouterr().err
        assert "is locked by another writer" in err and "Traceback" not in err
    assert corpus_of(Index.load(folder)) == "alphatag"
    assert_clean(folder)
    index_b.save(folder)  # the lock went with its holder
    assert corpus_of(Index.load(folder)) == "betatag"


def test_two_writers_racing(tmp_path: Path, index_a: Index, index_b: Index) -> None:
    """Two processes save in a loop at once: the loser of each collision gets IndexLockedError,
    nobody gets a traceback, and the index loads (one whole corpus) every time we look."""
    folder = tmp_path / "idx"
    index_a.save(folder)
    rounds = 15
    go_r, go_w = os.pipe()

    def writer(index: Index, report: Path) -> Callable[[], None]:
        def run() -> None:
            os.close(go_w)
            os.read(go_r, 1)  # start together
            counts = {"saved": 0, "locked": 0}
            rng = random.Random(os.getpid())
            for _ in range(rounds):
                time.sleep(rng.uniform(0, 0.03))  # let the other writer in now and then
                try:
                    index.save(folder)
                    counts["saved"] += 1
                except IndexLockedError:
                    counts["locked"] += 1
            report.write_text(json.dumps(counts))

        return run

    reports = [tmp_path / "w1.json", tmp_path / "w2.json"]
    pids = [fork(writer(index_a, reports[0])), fork(writer(index_b, reports[1]))]
    os.close(go_r)
    os.close(go_w)
    deadline = time.monotonic() + 60
    loads, seen = 0, set()
    finished: dict[int, int] = {}
    while len(finished) < len(pids) and time.monotonic() < deadline and loads < 2000:
        seen.add(corpus_of(Index.load(folder)))
        loads += 1
        for p in pids:
            if p not in finished:
                done, status = os.waitpid(p, os.WNOHANG)
                if done:
                    finished[p] = status
    statuses = [finished[p] if p in finished else wait(p, deadline) for p in pids]
    assert statuses == [0, 0], "a writer failed with something other than IndexLockedError"
    counts = [json.loads(r.read_text()) for r in reports]
    assert all(c["saved"] + c["locked"] == rounds for c in counts)
    assert sum(c["saved"] for c in counts) >= 1 and sum(c["locked"] for c in counts) >= 1
    corpus_of(Index.load(folder, verify="full"))
    print(f"\ntwo writers: {rounds} rounds each, {counts}, {loads} loads meanwhile, 0 failures")


# ---------------------------------------------------------------------------- readers
def test_readers_never_see_a_mixed_index(tmp_path: Path, index_a: Index, index_b: Index) -> None:
    """Reader processes load in a loop while this process rewrites the index with two corpora
    in turn: every load succeeds and holds one whole corpus."""
    folder = tmp_path / "idx"
    index_a.save(folder)
    stop = tmp_path / "stop"

    def reader(report: Path) -> Callable[[], None]:
        def run() -> None:
            stats: dict[str, object] = {"loads": 0, "failures": [], "alphatag": 0, "betatag": 0}
            end = time.monotonic() + 40
            while not stop.exists() and time.monotonic() < end:
                try:
                    tag = corpus_of(Index.load(folder))
                    stats[tag] = int(stats[tag]) + 1  # type: ignore[call-overload]
                except BaseException as exc:  # every failure is counted
                    stats["failures"].append(repr(exc)[:300])  # type: ignore[attr-defined]
                stats["loads"] = int(stats["loads"]) + 1  # type: ignore[call-overload]
            report.write_text(json.dumps(stats))

        return run

    reports = [tmp_path / f"r{i}.json" for i in range(2)]
    pids = [fork(reader(r)) for r in reports]
    rounds = 24
    try:
        for i in range(rounds):
            (index_b if i % 2 == 0 else index_a).save(folder)
    finally:
        stop.touch()
    statuses = [wait(p, time.monotonic() + 60) for p in pids]
    stats = [json.loads(r.read_text()) for r in reports]
    assert statuses == [0, 0]
    assert [s["failures"] for s in stats] == [[], []]
    assert all(s["loads"] > 0 for s in stats)
    total = sum(s["loads"] for s in stats)
    assert sum(s["alphatag"] + s["betatag"] for s in stats) == total
    assert sum(s["alphatag"] for s in stats) and sum(s["betatag"] for s in stats)
    print(f"\nreaders: {rounds} saves, {total} loads ({stats}), 0 failed, 0 mixed")


def test_reader_keeps_its_generation_while_the_next_is_written(
    tmp_path: Path, index_a: Index, index_b: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)
    during: dict[str, str] = {}

    def hook(point: str) -> None:
        if point in ("staged", "renamed", "before-pointer", "after-pointer"):
            during[point] = corpus_of(Index.load(folder))

    monkeypatch.setattr(storage_mod, "_hook", hook)
    index_b.save(folder)
    monkeypatch.setattr(storage_mod, "_hook", None)
    assert during == {
        "staged": "alphatag",
        "renamed": "alphatag",
        "before-pointer": "alphatag",
        "after-pointer": "betatag",
    }

    # a generation held open by a reader survives garbage collection until it is closed
    store = IndexStore(folder)
    held = store.open()
    g = held.generation
    vectors = held.load_array(segment_of(held.folder, "leaf_vectors"))
    expected = np.array(vectors)
    for i in range(3):
        (index_a if i % 2 == 0 else index_b).save(folder)
    assert g in store.generations(), "collected while a reader held it"
    assert np.array_equal(vectors, expected)
    held.close()
    index_a.save(folder)
    assert g not in store.generations()
    assert np.array_equal(vectors, expected), "the memory map outlives its generation"

    # an Index loaded from generation g keeps working after g is collected
    loaded = Index.load(folder, embedder=HashEmbedder())
    gen = store.current()
    for _ in range(3):
        index_b.save(folder)
    assert gen not in store.generations()
    assert corpus_of(loaded) == "alphatag"
    assert loaded.search("alphatag volcano", k=2)


def test_gc_keeps_the_last_generations(tmp_path: Path, index_a: Index) -> None:
    folder = tmp_path / "idx"
    for _ in range(5):
        index_a.save(folder)
    store = IndexStore(folder)
    assert store.current() == 5 and store.generations() == [4, 5]
    with store.lock():
        assert store.gc(keep=1) == [4]
    assert store.generations() == [5]
    with IndexWriter(folder, keep_generations=3) as writer:
        assert writer.base is not None
        for name in sorted({f.split("/")[0] for f in writer.base.files}):
            writer.keep(name)
        writer.commit(json.loads((folder / "manifest.json").read_text()))
    assert store.generations() == [5, 6]
    six = folder / "generations" / "000006"
    five = folder / "generations" / "000005"
    chunks = segment_of(five, "chunks")
    assert os.stat(six / chunks).st_ino == os.stat(five / chunks).st_ino
    assert corpus_of(Index.load(folder, verify="full")) == "alphatag"
    assert Index.load(folder, generation=5).tree.n_leaves == len(CORPUS_A)


def _gc_threads_done(timeout: float = 30.0) -> None:
    for thread in threading.enumerate():
        if thread.name == "psirag-gc":
            thread.join(timeout)
            assert not thread.is_alive()


def test_gc_later_retires_at_once_and_deletes_on_a_thread(
    tmp_path: Path, index_a: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's save (``collect_later``) renames the retired generation away under the
    lock and deletes its files on a background thread; a cleanup meanwhile leaves that
    folder to the thread, and one that a killed process left is removed by the next
    writer."""
    folder = tmp_path / "idx"
    for _ in range(3):
        index_a.save(folder)
    store = IndexStore(folder)
    gens = folder / "generations"
    gate = threading.Event()
    removing: list[Path] = []
    remove = ownership.remove_marked

    def slow_remove(path: Path) -> None:  # the thread's deletion, held until the gate opens
        removing.append(path)
        gate.wait(30)
        remove(path)

    monkeypatch.setattr(ownership, "remove_marked", slow_remove)
    with store.lock():
        assert store.gc(keep=1, later=True) == [2]
    assert store.generations() == [3]  # retired at once
    trash = [p for p in gens.iterdir() if p.name.startswith(".trash-")]
    assert len(trash) == 1 and removing == trash
    monkeypatch.setattr(ownership, "remove_marked", remove)
    with store.lock():
        store.cleanup()  # the thread has it: left alone
    assert trash[0].exists()
    gate.set()
    _gc_threads_done()
    assert not trash[0].exists()
    ownership.remove_marked(trash[0])  # gone already (another worker's cleanup): no error
    # an update that saves with collect_later: the same, through the writer
    _, done = Index.update_saved(
        folder,
        lambda ix: ix.add(["alphatag basalt lava"], texts=True),
        embedder=HashEmbedder(),
        collect_later=True,
    )
    _gc_threads_done()
    assert done.generation == 4 and store.generations() == [3, 4]
    assert not [p for p in gens.iterdir() if p.name.startswith(".trash-")]
    # a retired folder that a process left half deleted: the next writer's cleanup takes it
    with store.lock():
        store.gc(keep=1)  # (inline) generation 3 goes
    left = gens / ".trash-000099-deadbeef"
    (left / "seg").mkdir(parents=True)
    ownership.mark(left, ownership.store_token(gens, create=False))
    with IndexWriter(folder):
        pass
    assert not left.exists()


# ---------------------------------------------------------------------------- SIGKILL
def save_points(index: Index, folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(storage_mod, "_hook", seen.append)
    index.save(folder)
    monkeypatch.setattr(storage_mod, "_hook", None)
    return seen


def test_sigkill_at_every_point_of_a_save(
    tmp_path: Path, index_a: Index, index_b: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)
    # the points of a save whose files all differ from the base (a byte-equal file would be
    # hard-linked instead: a point of its own, file:NAME of keep)
    points = save_points(index_b, folder, monkeypatch)
    assert len(points) >= 9 and points[-2:] == ["after-pointer", "after-gc"]
    outcomes = []
    for point in points:
        expected_before = corpus_of(Index.load(folder))
        target = index_b if expected_before == "alphatag" else index_a

        def child(target: Index = target, point: str = point) -> None:
            storage_mod._hook = kill_at(point)
            target.save(folder)

        status = wait(fork(child), time.monotonic() + 30)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, point
        published = point in ("after-pointer", "after-gc")
        now = corpus_of(Index.load(folder, verify="full"))
        assert (now != expected_before) == published, point
        outcomes.append((point, "new" if published else "old"))
        current = IndexStore(folder).current() or 0
        left = [e for e in generation_entries(folder) if not e.isdigit() or int(e) > current]
        if point.startswith("file:") or point == "staged":
            assert left and left[0].startswith(".partial-"), (point, left)
        elif point in ("renamed", "before-pointer"):
            assert left == [f"{current + 1:06d}"], (point, left)  # renamed, never published
        index_a.save(folder)  # the next writer cleans up what the killed one left
        assert_clean(folder)
        assert len(IndexStore(folder).generations()) <= 2
    print(f"\nkilled at {len(points)} named points: {outcomes}")


def test_sigkill_during_the_first_save(tmp_path: Path, index_a: Index) -> None:
    folder = tmp_path / "fresh"

    def child() -> None:
        storage_mod._hook = kill_at("renamed")
        index_a.save(folder)

    status = wait(fork(child), time.monotonic() + 30)
    assert os.WIFSIGNALED(status)
    assert IndexStore(folder).state() == "pending"
    with pytest.raises(IndexFormatError, match="interrupted"):
        Index.load(folder)
    index_a.save(folder)
    assert corpus_of(Index.load(folder)) == "alphatag"
    assert_clean(folder)


def test_sigkill_after_random_delays(tmp_path: Path, index_a: Index, index_b: Index) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)
    t0 = time.perf_counter()  # how long a save takes in a child process, fork included
    assert wait(fork(lambda: index_b.save(folder)), time.monotonic() + 30) == 0
    one_save = time.perf_counter() - t0
    rng = random.Random(11)
    rounds, published, killed = 30, 0, 0
    for i in range(rounds):
        before = corpus_of(Index.load(folder))
        target = index_b if before == "alphatag" else index_a

        def child(target: Index = target) -> None:
            target.save(folder)

        pid = fork(child)
        time.sleep(rng.uniform(0, 1.2 * one_save))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
        killed += int(os.WIFSIGNALED(status))
        after = corpus_of(Index.load(folder, verify="full"))
        published += int(after != before)
        if i % 4 == 3:  # a writer now and then, which must clean up
            (index_a if after == "betatag" else index_b).save(folder)
            assert_clean(folder)
    assert killed > 0
    print(
        f"\nrandom SIGKILL: {rounds} rounds (one save {one_save * 1000:.0f} ms), {killed} killed, "
        f"{published} had published, 0 unloadable"
    )


# ---------------------------------------------------------------------------- format 1


def test_format1_loads_and_the_next_save_migrates(
    tmp_path: Path, index_a: Index, index_b: Index
) -> None:
    folder = tmp_path / "old"
    write_format1(index_a, folder)
    (folder / "llm-cache.sqlite").write_bytes(b"user data")  # not the index's: stays
    assert IndexStore(folder).state() == "legacy"
    assert corpus_of(Index.load(folder)) == "alphatag"
    assert corpus_of(Index.load(folder, verify="full")) == "alphatag"
    index_b.save(folder)
    assert sorted(os.listdir(folder)) == [
        "generations",
        "llm-cache.sqlite",
        "lock",
        "manifest.json",
    ]
    assert (folder / "llm-cache.sqlite").read_bytes() == b"user data"
    assert corpus_of(Index.load(folder, verify="full")) == "betatag"
    assert json.loads((folder / "manifest.json").read_text())["format_version"] == 5


def test_default_load_does_not_hash(
    tmp_path: Path, index_a: Index, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)

    def no_hashing(path: Path) -> str:
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(storage_mod, "sha256_file", no_hashing)
    assert corpus_of(Index.load(folder)) == "alphatag"
    monkeypatch.undo()
    vectors_file = segment_of(folder / "generations" / "000001", "leaf_vectors")
    vec = folder / "generations" / "000001" / vectors_file
    data = bytearray(vec.read_bytes())
    data[-5] ^= 0x55  # same size, other bytes: only a full check sees it
    vec.write_bytes(bytes(data))
    Index.load(folder)
    with pytest.raises(IndexFormatError, match="checksum"):
        Index.load(folder, verify="full")
    capsys.readouterr()
    assert main(["inspect", str(folder)]) == 0
    assert "generation 1" in capsys.readouterr().out
    assert main(["inspect", str(folder), "--verify"]) == 2
    assert f"{vectors_file} does not match its checksum" in capsys.readouterr().err


# ---------------------------------------------------------------------------- manifest trust
def rewrite_manifest(folder: Path, edit: Callable[[dict], None]) -> None:
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def test_manifest_names_outside_the_folder_are_refused(tmp_path: Path, index_a: Index) -> None:
    folder = tmp_path / "old"
    write_format1(index_a, folder)
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    meta = {"bytes": outside.stat().st_size, "sha256": sha256_file(outside)}
    for name in ("../outside.txt", str(outside), "bm25/../../outside.txt"):
        copy = tmp_path / "crafted"
        shutil.copytree(folder, copy)
        rewrite_manifest(copy, lambda m, name=name: m["files"].__setitem__(name, meta))
        with pytest.raises(IndexFormatError, match="outside the index folder"):
            Index.load(copy, verify="full")
        shutil.rmtree(copy)
    # a listed file that is a symlink out of the folder
    copy = tmp_path / "linked"
    shutil.copytree(folder, copy)
    (copy / "extra.txt").symlink_to(outside)
    rewrite_manifest(copy, lambda m: m["files"].__setitem__("extra.txt", meta))
    with pytest.raises(IndexFormatError, match="outside the index folder"):
        Index.load(copy)


def test_empty_or_incomplete_manifests(tmp_path: Path, index_a: Index, index_b: Index) -> None:
    folder = tmp_path / "old"
    write_format1(index_a, folder)
    copy = tmp_path / "empty"
    shutil.copytree(folder, copy)
    rewrite_manifest(copy, lambda m: m.__setitem__("files", {}))
    with pytest.raises(IndexFormatError, match="lists no files"):
        Index.load(copy)
    copy = tmp_path / "nochunks"
    shutil.copytree(folder, copy)
    (copy / "chunks.jsonl").unlink()
    with pytest.raises(IndexFormatError, match=r"chunks\.jsonl is missing"):
        Index.load(copy)
    rewrite_manifest(copy, lambda m: m["files"].pop("chunks.jsonl"))
    with pytest.raises(IndexFormatError, match=r"does not list chunks\.jsonl"):
        Index.load(copy)
    mixed = tmp_path / "mixed"
    write_format1(index_a, mixed, bm25_from=index_b)
    with pytest.raises(IndexFormatError, match="BM25 index holds 20 documents"):
        Index.load(mixed, verify="full")


def test_pointer_and_generation_must_agree(tmp_path: Path, index_a: Index) -> None:
    folder = tmp_path / "idx"
    index_a.save(folder)
    gen = folder / "generations" / "000001" / "manifest.json"
    gen.write_text(gen.read_text().replace('"chunks": 12', '"chunks": 13'))
    with pytest.raises(IndexFormatError, match="does not match the hash"):
        Index.load(folder)
    rewrite_manifest(folder, lambda m: m.__setitem__("generation", "../../etc"))
    with pytest.raises(IndexFormatError, match="names no valid generation"):
        Index.load(folder)


def test_subprocess_cli_lock_message(tmp_path: Path, index_a: Index) -> None:
    """The real command line, in its own process, while this process holds the lock."""
    folder = tmp_path / "idx"
    index_a.save(folder)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("football\n")
    src = str(Path(storage_mod.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with IndexStore(folder).lock():
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from psirag.cli import main; sys.exit(main())",
             "index", str(docs), "--out", str(folder), "-q"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"locked by another writer (pid {os.getpid()})" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_user_file_named_lock_is_not_ours(tmp_path: Path, index_a: Index) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "lock").write_text("combination: 12-34-56\n")
    with pytest.raises(IndexTargetError, match="not a psirag index"):
        index_a.save(folder)
    assert (folder / "lock").read_text() == "combination: 12-34-56\n"


def test_look_alike_folders_beside_the_index_survive(tmp_path: Path, index_a: Index) -> None:
    """``.NAME.partial-*`` / ``.NAME.old-*`` beside an index may be anyone's: psirag no longer
    makes them, so it never removes them, however old (issue 26: it used to, after 15 min)."""
    folder = tmp_path / "idx"
    write_format1(index_a, folder)
    mine = [tmp_path / ".idx.partial-1234abcd", tmp_path / ".idx.old-2024"]
    for p in mine:
        p.mkdir()
        (p / "thesis.txt").write_text("two years of work")
        os.utime(p, (0, 0))
    index_a.save(folder)
    IndexStore(folder).gc(keep=1)
    for p in mine:
        assert (p / "thesis.txt").read_text() == "two years of work"
    assert corpus_of(Index.load(folder)) == "alphatag"


def test_cleanup_removes_only_marked_folders(tmp_path: Path, index_a: Index) -> None:
    """Inside generations/, a staging-named folder goes only with this store's marker: a forged
    marker, no marker (with files) and another store's token all survive; an empty unmarked
    staging folder (a save killed before marking it) goes, and so does one holding only an
    unfinished marker (killed while marking it)."""
    folder = tmp_path / "idx"
    index_a.save(folder)
    gens = folder / "generations"
    token = ownership.store_token(gens, create=False)
    assert token
    ours = gens / ".partial-000009-1-aaaa"
    ours.mkdir()
    ownership.mark(ours, token)
    (ours / "chunks.jsonl").write_text("half")
    empty = gens / ".partial-000010-1-bbbb"
    empty.mkdir()
    half_marked = gens / ".partial-000012-1-eeee"  # killed while writing its marker
    half_marked.mkdir()
    (half_marked / f"{ownership.MARKER_TMP}1234").write_text(token[:7])
    not_only_ours = gens / ".partial-000013-1-ffff"
    not_only_ours.mkdir()
    (not_only_ours / f"{ownership.MARKER_TMP}1234").write_text(token[:7])
    (not_only_ours / "keep.txt").write_text("mine")
    forged = gens / ".partial-000011-1-cccc"
    forged.mkdir()
    ownership.mark(forged, "0" * 32)
    (forged / "keep.txt").write_text("mine")
    unmarked = gens / ".trash-000001-dddd"
    unmarked.mkdir()
    (unmarked / "keep.txt").write_text("mine")
    orphan = gens / "000050"
    orphan.mkdir()
    (orphan / "keep.txt").write_text("mine")
    pointer_tmp = folder / ".manifest.json.tmp-notours"
    pointer_tmp.write_text("{}")
    index_a.save(folder)
    assert not ours.exists() and not empty.exists() and not half_marked.exists()
    for p in (forged, unmarked, orphan, not_only_ours):
        assert (p / "keep.txt").read_text() == "mine"
    assert pointer_tmp.exists()


def test_gc_leaves_an_unproven_generation(tmp_path: Path, index_a: Index) -> None:
    """A published generation without the marker and with a manifest that is not its own is not
    collected; one from before markers (its own manifest, no marker) is."""
    folder = tmp_path / "idx"
    index_a.save(folder)
    first = folder / "generations" / "000001"
    (first / ownership.MARKER).unlink()  # as written by an older psirag
    index_a.save(folder)
    index_a.save(folder)
    assert not first.exists(), "a pre-marker generation of ours was not collected"
    second = folder / "generations" / "000002"
    (second / ownership.MARKER).write_text("f" * 32)
    index_a.save(folder)
    index_a.save(folder)
    assert second.exists(), "a generation with a foreign marker was collected"


def test_a_format1_read_retries_when_a_save_migrates_it(
    tmp_path: Path, index_a: Index, index_b: Index
) -> None:
    """A reader half-way through a flat folder whose files a migrating save removes starts
    again from the new pointer (once) instead of failing."""
    folder = tmp_path / "old"
    write_format1(index_a, folder)
    seen: list[bool] = []

    def read(reader: storage_mod.IndexReader) -> int:
        seen.append(reader.legacy)
        if len(seen) == 1:
            index_b.save(folder)  # the flat files go now
        return len(load_index_data(reader).chunks)

    assert IndexStore(folder).read(read) == len(CORPUS_B)
    assert seen == [True, False]


def test_save_jsonl_copies_leading_lines_of_the_base(tmp_path: Path) -> None:
    """``base_lines`` copies that many lines of the base generation's file before the new rows;
    asking for more lines than the base has is a clear error."""
    folder = tmp_path / "store"
    rows = [{"n": i, "text": f"row {i}"} for i in range(5)]
    with IndexWriter(folder) as writer:
        writer.save_jsonl("rows.jsonl", rows[:4])
        writer.commit({"what": "rows"})
    with IndexWriter(folder) as writer:
        writer.save_jsonl("rows.jsonl", rows[4:], base_lines=3)
        writer.commit({"what": "rows"})
    lines = (folder / "generations" / "000002" / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == rows[:3] + rows[4:]
    with IndexWriter(folder) as writer, pytest.raises(IndexFormatError, match="fewer than"):
        writer.save_jsonl("rows.jsonl", [], base_lines=len(lines) + 1)
    assert IndexStore(folder).current() == 2


def test_look_alike_survives_index_add_and_gc_from_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The failure of issue 26 as a user met it: `psirag index a.txt --out idx` and
    `psirag add idx b.txt` deleted `.idx.old-2024/` (older than 15 minutes) beside the index."""
    import psirag.cli.living_cmds as cli_living
    import psirag.embed as embed

    monkeypatch.setattr(embed, "load_embedder", lambda spec, **kw: HashEmbedder())
    monkeypatch.setattr(cli_living, "load_embedder_for", lambda spec, *a, **kw: HashEmbedder())
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text(" ".join(TOPICS["volcanoes"]))
    Path("b.txt").write_text(" ".join(TOPICS["baking"]))
    look_alikes = [Path(".idx.old-2024"), Path(".idx.partial-0001"), Path("idx.old-2024")]
    for p in look_alikes:
        p.mkdir()
        (p / "notes.txt").write_text("mine")
        os.utime(p, (0, 0))
    assert main(["index", "a.txt", "--out", "idx", "-q"]) == 0
    assert main(["index", "a.txt", "--out", "idx", "-q"]) == 0  # a rebuild
    assert main(["add", "idx", "b.txt", "-q"]) == 0
    IndexStore("idx").gc(keep=1)
    for p in look_alikes:
        assert (p / "notes.txt").read_text() == "mine", p


def test_read_jsonl_is_iter_jsonl_in_one_parse(tmp_path: Path) -> None:
    """A JSONL file parsed as one array gives the rows one call per row gives (strings with
    commas, brackets, escaped newlines, U+2028, nested values), and a damaged file still gets the
    row-by-row error naming its line."""
    from psirag.errors import IndexFormatError

    texts = [t for topic in TOPICS.values() for t in topic]
    index = Index.build(texts, IndexConfig(max_children=4), texts=True, embedder=HashEmbedder())
    folder = tmp_path / "ix"
    index.save(folder)
    store = storage_mod.IndexStore(folder)
    reader = store.open()
    try:
        listed = [n for n in reader.files if n.endswith(".jsonl")]
        assert listed
        for name in listed:
            assert reader.read_jsonl(name) == list(reader.iter_jsonl(name)), name
        path = reader.path(listed[0])
        rows = ["a, b", "[x]", {"t": "line\nbreak \u2028 sep", "n": [1, {"k": None}]}, 3.5, ""]
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
        assert reader.read_jsonl(listed[0]) == rows == list(reader.iter_jsonl(listed[0]))
        for damaged in ('{"a": 1}\n\n{"b": 2}\n', '{"a": 1}, {"b": 2}\n', '{"a": 1}\n{"b"\n'):
            path.write_text(damaged, "utf-8")
            with pytest.raises(IndexFormatError, match=r"line [12] is not valid JSON"):
                reader.read_jsonl(listed[0])
    finally:
        reader.close()


def test_a_commit_fsyncs_every_file_it_wrote_and_lists_files_in_path_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncs of a commit run several at once; each written file is still synced before
    the manifest names it, the files kept from the base are not, the manifest lists the
    files in the staging folder's path order, and a failed fsync publishes nothing."""
    folder = tmp_path / "ix"
    with IndexWriter(folder) as writer:
        for name in ("a.npy", "seg/b.npy", "seg.c.npy", "seg/d/e.npy", "z.json"):
            path = writer.path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(name.encode() * 10)
        writer.commit({})
    synced: list[str] = []
    real = storage_mod._fsync_file

    def record(path: Path) -> None:
        synced.append(path.name)
        real(path)

    monkeypatch.setattr(storage_mod, "_fsync_file", record)
    with IndexWriter(folder) as writer:
        writer.keep("a.npy")
        writer.keep("seg/b.npy")
        for name in ("seg.c.npy", "seg/d/e.npy", "seg/f.npy", "z.json"):
            path = writer.path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"new " + name.encode())
        staging = writer.staging
        want = [
            p.relative_to(staging).as_posix()
            for p in sorted(staging.rglob("*"))
            if p.is_file() and p.name != ownership.MARKER
        ]
        writer.commit({})
    assert sorted(synced) == ["e.npy", "f.npy", "seg.c.npy", "z.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert list(manifest["files"]) == want
    assert "seg.c.npy" in want and want.index("seg.c.npy") > want.index("seg/f.npy")

    def fail(path: Path) -> None:
        if path.name == "g.npy":
            raise OSError(5, "I/O error", str(path))
        real(path)

    monkeypatch.setattr(storage_mod, "_fsync_file", fail)
    before = json.loads((folder / "manifest.json").read_text())["generation"]
    with pytest.raises(OSError, match="I/O error"), IndexWriter(folder) as writer:
        for name in ("f1.npy", "f2.npy", "g.npy", "h.npy"):
            writer.path(name).write_bytes(b"x")
        writer.commit({})
    assert json.loads((folder / "manifest.json").read_text())["generation"] == before
