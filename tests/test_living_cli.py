"""psirag add / remove / sync as real processes: a SIGKILL at named points of the save, and at
random moments, leaves the last published generation loadable; a second writer gets
IndexLockedError; sync mirrors a folder; --dry-run changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import HashEmbedder

from psirag import Index
from psirag.config import IndexConfig
from psirag.storage import IndexStore

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

# The CLI in a child process, with the test HashEmbedder behind the index's "test:hash" spec.
# PSIRAG_TEST_KILL_AT names a save checkpoint where the child SIGKILLs itself;
# PSIRAG_TEST_HOLD_AT one where it waits until the file PSIRAG_TEST_RELEASE exists.
RUNNER = f"""
import os, signal, sys, time
sys.path[:0] = [{str(SRC)!r}, {str(TESTS)!r}]
from support import HashEmbedder
import psirag.cli.living_cmds as cl
import psirag.storage as storage
cl.load_embedder_for = lambda spec, batch_size=None, http=None: HashEmbedder()
kill_at = os.environ.get("PSIRAG_TEST_KILL_AT")
hold_at = os.environ.get("PSIRAG_TEST_HOLD_AT")
def hook(point):
    if point == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if point == hold_at:
        open(os.environ["PSIRAG_TEST_RELEASE"] + ".held", "w").close()
        while not os.path.exists(os.environ["PSIRAG_TEST_RELEASE"]):
            time.sleep(0.02)
storage._hook = hook
from psirag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _texts(n: int, tag: str) -> list[str]:
    topics = ["volcano lava ash eruption", "train rail station valley", "glacier ice snow cold"]
    return [f"Document {tag}{i} about {topics[i % 3]} and item {tag}{i}." for i in range(n)]


@pytest.fixture()
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, t in enumerate(_texts(12, "a")):
        (docs / f"a{i:02d}.txt").write_text(t)
    new = tmp_path / "new"
    new.mkdir()
    for i, t in enumerate(_texts(6, "n")):
        (new / f"n{i:02d}.txt").write_text(t)
    index = Index.build([docs], IndexConfig(embedder="test:hash"), embedder=HashEmbedder())
    index.save(tmp_path / "ix")
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    return tmp_path, runner, new


def _run(
    runner: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(runner), *argv],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def _loadable(folder: Path) -> Index:
    index = Index.load(folder, embedder=HashEmbedder(), verify="full")
    assert index.search("volcano lava", k=2)
    assert index.sparse.n_docs == len(index.chunks)
    return index


@pytest.mark.parametrize(
    "point",
    [
        "file:seg/chunks.000002.jsonl",
        "file:seg/leaf_vectors.000002.npy",
        "staged",
        "renamed",
        "before-pointer",
    ],
)
def test_sigkill_during_add_keeps_the_last_generation(
    setup: tuple[Path, Path, Path], point: str
) -> None:
    tmp, runner, new = setup
    before = len(_loadable(tmp / "ix").chunks)
    got = _run(runner, "add", str(tmp / "ix"), str(new), "-q", env={"PSIRAG_TEST_KILL_AT": point})
    assert got.returncode == -signal.SIGKILL, got.stderr
    assert IndexStore(tmp / "ix").current() == 1
    assert len(_loadable(tmp / "ix").chunks) == before
    # the next writer cleans up and succeeds
    again = _run(runner, "add", str(tmp / "ix"), str(new), "-q", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["chunks_added"] == 6
    assert len(_loadable(tmp / "ix").chunks) == before + 6


def test_sigkill_after_the_pointer_switch_publishes_the_new_generation(
    setup: tuple[Path, Path, Path],
) -> None:
    tmp, runner, new = setup
    before = len(_loadable(tmp / "ix").chunks)
    got = _run(
        runner, "add", str(tmp / "ix"), str(new), "-q", env={"PSIRAG_TEST_KILL_AT": "after-pointer"}
    )
    assert got.returncode == -signal.SIGKILL
    assert len(_loadable(tmp / "ix").chunks) == before + 6


def test_sigkill_at_random_moments(setup: tuple[Path, Path, Path]) -> None:
    tmp, runner, new = setup
    counts = {len(_loadable(tmp / "ix").chunks)}
    for delay in (0.05, 0.3, 0.6, 0.9, 1.2):
        proc = subprocess.Popen(
            [sys.executable, str(runner), "sync", str(tmp / "ix"), str(tmp / "docs"), str(new)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        index = _loadable(tmp / "ix")
        assert len(index.chunks) in (12, 18)
        counts.add(len(index.chunks))
        if len(index.chunks) == 18:  # published: remove the new ones to try again
            done = _run(runner, "sync", str(tmp / "ix"), str(tmp / "docs"), "-q")
            assert done.returncode == 0, done.stderr
    assert counts <= {12, 18}


def test_second_writer_is_refused(setup: tuple[Path, Path, Path]) -> None:
    tmp, runner, new = setup
    release = tmp / "release"
    first = subprocess.Popen(
        [sys.executable, str(runner), "add", str(tmp / "ix"), str(new), "-q"],
        env={**os.environ, "PSIRAG_TEST_HOLD_AT": "staged", "PSIRAG_TEST_RELEASE": str(release)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not Path(str(release) + ".held").exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = _run(runner, "remove", str(tmp / "ix"), "--doc", "a00.txt", "-q")
        assert second.returncode == 2
        assert "locked" in second.stderr and "Traceback" not in second.stderr
        # a reader still sees generation 1 while 2 is being written
        assert len(_loadable(tmp / "ix").chunks) == 12
    finally:
        release.touch()
        first.wait(timeout=60)
    assert first.returncode == 0
    assert len(_loadable(tmp / "ix").chunks) == 18


def test_sync_mirrors_a_folder(setup: tuple[Path, Path, Path]) -> None:
    tmp, runner, _ = setup
    docs = tmp / "docs"
    (docs / "a00.txt").write_text("Changed text about glaciers melting in spring.")
    (docs / "a01.txt").unlink()
    (docs / "z.txt").write_text("A brand new file about rails and freight trains.")
    dry = _run(runner, "sync", str(tmp / "ix"), str(docs), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["plan"]
    assert [len(plan[k]) for k in ("new", "changed", "gone")] == [1, 1, 1]
    assert IndexStore(tmp / "ix").current() == 1  # a dry run writes nothing
    got = _run(runner, "sync", str(tmp / "ix"), str(docs), "--json")
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)
    assert out["documents_added"] == 2 and out["documents_removed"] == 2
    index = _loadable(tmp / "ix")
    assert sorted(index.documents) == sorted(p.name for p in docs.iterdir())
    assert any("glaciers melting" in c.text for c in index.chunks)
    again = _run(runner, "sync", str(tmp / "ix"), str(docs), "--json")
    assert json.loads(again.stdout)["generation"] is None  # nothing changed: nothing written
