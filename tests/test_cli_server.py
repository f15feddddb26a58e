"""``psirag add|remove --server URL`` against a real ``psirag serve`` process: the files are
uploaded, the server applies them to the index in its memory (no load), and the command prints
the same summary as a local update; a bad URL, no server or a wrong key is one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support import HashEmbedder, ServerProcess, build_index, child_env, free_port

from psirag.config import IndexConfig
from psirag.index import Index

KEY = "test-server-key"


def _cli(*args: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = child_env(**({"PSIRAG_API_KEY": key} if key is not None else {}))
    return subprocess.run(
        [sys.executable, "-m", "psirag.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("psirag: error: "), lines
    return lines[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("served")
    folder = tmp / "index"
    build_index(folder)
    proc = ServerProcess(folder, ["--api-key", KEY], log_path=tmp / "serve.log", hash_embedder=True)
    try:
        proc.wait_ready()
        yield folder, proc
    finally:
        proc.stop()


def _stats(proc: ServerProcess) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    body: dict[str, Any] = httpx.get(f"{proc.url}/index", headers=headers, timeout=30).json()
    return body


def test_add_and_remove_through_the_server(served: Any, tmp_path: Path) -> None:
    folder, proc = served
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "glaciers.txt").write_text(
        "Glaciers of blue ice carve deep fjords along the cold northern coast.", encoding="utf-8"
    )
    done = _cli("add", str(folder), str(docs), "--server", proc.url, "-q", key=KEY)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"updated {folder} through {proc.url} (generation 2)" in out, out
    assert "documents: +1 added, -0 removed" in out and "drift:" in out, out
    on_disk = Index.load(folder, embedder=HashEmbedder())
    added = [d for d in on_disk.documents if "glaciers" in d]
    assert len(added) == 1, on_disk.documents
    assert _stats(proc)["index_loads"] == 1  # applied in the server's memory

    done = _cli(
        "remove", str(folder), "--doc", added[0], "--server", proc.url, "--json", key="wrong"
    )
    line = _one_error_line(done)  # $PSIRAG_API_KEY holds a wrong key
    assert "401" in line and "--api-key" in line, line

    done = _cli(
        "remove", str(folder), "--doc", added[0], "--server", proc.url, "--api-key", KEY, "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["documents_removed"] == 1 and report["generation"] == 3
    assert report["server"] == proc.url
    assert added[0] not in Index.load(folder, embedder=HashEmbedder()).documents
    assert _stats(proc)["index_loads"] == 1


def test_a_wrong_key_and_an_unknown_document_are_one_line(served: Any, tmp_path: Path) -> None:
    folder, proc = served
    note = tmp_path / "note.txt"
    note.write_text("A short note about tides.", encoding="utf-8")
    line = _one_error_line(_cli("add", str(folder), str(note), "--server", proc.url, key="nope"))
    assert "answered 401" in line and "PSIRAG_API_KEY" in line, line
    assert not any("note" in d for d in Index.load(folder, embedder=HashEmbedder()).documents)
    line = _one_error_line(
        _cli("remove", str(folder), "--doc", "no-such-doc", "--server", proc.url, key=KEY)
    )
    assert "answered 404" in line and "'no-such-doc' is not in this index" in line, line


def test_no_server_and_a_bad_url_are_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    build_index(folder)
    note = tmp_path / "note.txt"
    note.write_text("A short note about tides.", encoding="utf-8")
    down = f"http://127.0.0.1:{free_port()}"
    line = _one_error_line(_cli("add", str(folder), str(note), "--server", down))
    assert f"cannot reach the psirag server at {down}" in line, line
    line = _one_error_line(_cli("add", str(folder), str(note), "--server", "localhost:8000"))
    assert "--server must be the psirag server's http://" in line, line
    line = _one_error_line(_cli("add", str(folder), str(note), "--server", down, "--rebuild"))
    assert "--rebuild cannot go through --server" in line, line


def test_a_folder_goes_up_as_one_job_and_a_refused_file_is_named(
    served: Any, tmp_path: Path
) -> None:
    folder, proc = served
    docs = tmp_path / "more"
    docs.mkdir()
    (docs / "tides.md").write_text("# Tides\n\nThe moon pulls the sea into tides.", "utf-8")
    (docs / "rivers.txt").write_text("Rivers carry silt down to the delta.", "utf-8")
    (docs / "empty.txt").write_text("   ", "utf-8")
    before = set(Index.load(folder, embedder=HashEmbedder()).documents)
    done = _cli("add", str(folder), str(docs), "--server", proc.url, "-q", key=KEY)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "documents: +2 added" in done.stdout, done.stdout
    assert "empty.txt: the file is empty" in done.stderr, done.stderr
    assert "--skip-bad-files" in done.stderr.splitlines()[-1], done.stderr
    added = set(Index.load(folder, embedder=HashEmbedder()).documents) - before
    assert len(added) == 2, added
    assert _stats(proc)["index_loads"] == 1


@pytest.fixture()
def served_folder(tmp_path: Path) -> Any:
    """An index built from a folder of files (so it records each file's path and sha256), and
    a server over it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    topics = ["volcano lava ash eruption", "train rail station valley", "glacier ice snow cold"]
    for i in range(6):
        (docs / f"a{i:02d}.txt").write_text(f"Document a{i} about {topics[i % 3]}.", "utf-8")
    folder = tmp_path / "index"
    config = IndexConfig(embedder="test:hash", chunk_tokens=12)
    Index.build([docs], config, embedder=HashEmbedder()).save(folder)
    proc = ServerProcess(
        folder, ["--api-key", KEY], log_path=tmp_path / "serve.log", hash_embedder=True
    )
    try:
        proc.wait_ready()
        yield folder, docs, proc
    finally:
        proc.stop()


def test_sync_through_the_server_mirrors_a_folder(served_folder: Any) -> None:
    folder, docs, proc = served_folder
    (docs / "a00.txt").write_text("Changed text about glaciers melting in spring.", "utf-8")
    (docs / "a01.txt").unlink()
    (docs / "z.txt").write_text("A brand new file about rails and freight trains.", "utf-8")

    dry = _cli("sync", str(folder), str(docs), "--server", proc.url, "--dry-run", "--json", key=KEY)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)["plan"]
    assert [len(plan[k]) for k in ("new", "changed", "gone")] == [1, 1, 1], plan
    assert _stats(proc)["saved_generation"] == 1  # a dry run sends nothing

    done = _cli("sync", str(folder), str(docs), "--server", proc.url, "--json", key=KEY)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["server"] == proc.url and report["generation"] == 2  # one job, one generation
    assert report["documents_added"] == 2 and report["documents_removed"] == 2
    on_disk = Index.load(folder, embedder=HashEmbedder())
    assert sorted(on_disk.documents) == sorted(p.name for p in docs.iterdir())
    assert any("glaciers melting" in c.text for c in on_disk.chunks)
    assert _stats(proc)["index_loads"] == 1  # applied in the server's memory

    # the server kept each file's path and sha256: a second sync, through the server or here,
    # finds nothing to do
    again = _cli("sync", str(folder), str(docs), "--server", proc.url, key=KEY)
    assert again.returncode == 0, again.stderr
    assert f"nothing changed in {folder} through {proc.url}" in again.stdout, again.stdout
    local = _cli("sync", str(folder), str(docs), "--json")
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["generation"] is None
    assert _stats(proc)["saved_generation"] == 2


def test_sync_through_the_server_refuses_to_empty_the_index(
    served_folder: Any, tmp_path: Path
) -> None:
    folder, _, proc = served_folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "only.txt").write_text("A file from another folder.", "utf-8")
    line = _one_error_line(_cli("sync", str(folder), str(elsewhere), "--server", proc.url, key=KEY))
    assert "would remove all 6 documents" in line and "without --server" in line, line
    line = _one_error_line(
        _cli("sync", str(folder), str(elsewhere), "--server", proc.url, "--insert", "single")
    )
    assert "--insert cannot go through --server" in line, line
    assert _stats(proc)["saved_generation"] == 1
