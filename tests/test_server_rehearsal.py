"""The writer thread's rehearsal of an add after a server's start (issue 24: the first add at
1M chunks paid for its heap). It runs on the writer thread once the warm-up is done, gives
way to a write that comes meanwhile, changes nothing that is served or saved, and an add
after it gives the index an add without it gives."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from support import HashEmbedder, build_index

import psirag.server.rehearsal as rehearsal
from psirag.index import Index
from psirag.ingest.loaders import Document
from psirag.server.app import create_app
from psirag.server.jobs import JobRunner


def _job_done(runner: JobRunner, job_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while runner.get(job_id).status not in ("done", "failed"):  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_preparation_runs_on_the_writer_thread_and_gives_way_to_a_job() -> None:
    runner = JobRunner()
    started, release = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def prepare(busy: object) -> None:
        seen["thread"] = threading.current_thread().name
        assert callable(busy)
        seen["busy_before"] = busy()
        started.set()
        release.wait(10)
        seen["busy_after"] = busy()

    runner.on_writer(prepare)
    assert started.wait(10)
    job = runner.submit("add", lambda job: "ran")
    release.set()
    _job_done(runner, job.id)
    assert seen == {"thread": "psirag-writer", "busy_before": False, "busy_after": True}
    assert runner.get(job.id).result == "ran"  # type: ignore[union-attr]

    def broken(busy: object) -> None:
        raise RuntimeError("no heap today")

    runner.on_writer(broken)  # logged, not raised: the next job runs
    job = runner.submit("add", lambda job: "still ran")
    _job_done(runner, job.id)
    assert runner.get(job.id).status == "done"  # type: ignore[union-attr]


def _doc() -> Document:
    text = "tides rise and fall with the moon over the harbour " * 3
    return Document(id="tides", title="", text=text, is_record=False)


def test_the_rehearsal_changes_nothing_an_add_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rehearsal, "REHEARSAL_MIN_LEAVES", 0)
    build_index(tmp_path / "index")
    plain = Index.load(tmp_path / "index", embedder=HashEmbedder())
    rehearsed = Index.load(tmp_path / "index", embedder=HashEmbedder())
    _ = plain.data.phrase_table, rehearsed.data.phrase_table
    done = rehearsal.rehearse_add(rehearsed.data, lambda: False)
    assert done["tree_s"] is not None and done["abstracts_s"] is not None
    assert done["nodes"] > 0 and not done["stopped"]
    for index in (plain, rehearsed):
        index.add([_doc()])
    a, b = plain.data, rehearsed.data
    assert np.array_equal(a.tree.parent, b.tree.parent)
    assert np.array_equal(a.tree.layer, b.tree.layer)
    assert list(a.abstracts) == list(b.abstracts)
    assert [c.text for c in a.chunks] == [c.text for c in b.chunks]
    assert plain.search("tides harbour", k=3) == rehearsed.search("tides harbour", k=3)
    # a write waiting: nothing is rehearsed
    stopped = rehearsal.rehearse_add(rehearsed.data, lambda: True)
    assert stopped == {"tree_s": None, "abstracts_s": None, "nodes": 0, "stopped": True}
    # below the size where an add's heap costs anything: nothing either
    monkeypatch.setattr(rehearsal, "REHEARSAL_MIN_LEAVES", 10**9)
    assert rehearsal.rehearse_add(rehearsed.data, lambda: False)["tree_s"] is None


def test_a_server_rehearses_after_its_warm_up_and_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rehearsal, "REHEARSAL_MIN_LEAVES", 0)
    index = build_index(tmp_path / "index")
    app = create_app(tmp_path / "index", index=index, mcp=False)
    with TestClient(app) as client:
        deadline = time.monotonic() + 30
        while "writer" not in client.get("/index").json()["warm_up"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        writer = client.get("/index").json()["warm_up"]["writer"]
        assert writer["nodes"] > 0 and writer["tree_s"] is not None and not writer["stopped"]
        job = client.post("/documents", json={"text": _doc().text, "id": "tides"})
        assert job.status_code == 202, job.text
        done = client.get(f"/jobs/{job.json()['job']['id']}?wait=30").json()
        assert done["status"] == "done", done
        assert done["result"]["documents"] == len(index.data.documents) + 1


def test_the_routes_are_prepared_before_the_first_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI prepares a router's routes the first time a request is matched against it (the
    first ``POST /documents`` after a start waited 40-60 ms at 1M chunks): the app matches
    every route once when it is made, so that no request does it."""
    import fastapi.routing

    included = getattr(fastapi.routing, "_IncludedRouter", None)
    if included is None or not hasattr(included, "_build_effective_context"):
        pytest.skip("this FastAPI prepares its routes when they are included")
    built: list[object] = []
    original = included._build_effective_context

    def counted(self: object, route: object) -> object:
        built.append(route)
        return original(self, route)

    monkeypatch.setattr(included, "_build_effective_context", counted)
    index = build_index(tmp_path / "index")
    app = create_app(tmp_path / "index", index=index, mcp=False)
    assert built, "the app prepared no route"
    before = len(built)
    with TestClient(app) as client:
        job = client.post("/documents", json={"text": _doc().text, "id": "tides"})
        assert job.status_code == 202, job.text
        assert client.get("/index").status_code == 200
    assert len(built) == before
