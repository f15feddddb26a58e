"""``psirag serve --workers N``: a real two-worker server on 127.0.0.1 (the tests'
HashEmbedder launcher). Requests spread over both workers, a document added through one is
searched by both, a write made beside the server reaches both, job status answers on either,
and no worker outlives the parent, even one killed with SIGKILL. Plus the pieces in-process:
the index holder following the folder's pointer and job status shared between runners."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support import TOPICS, HashEmbedder, build_index
from support.processes import serve_new_index, wait_for_job

from psirag.index import Index
from psirag.server.jobs import JobRunner
from psirag.server.middleware import WORKER_HEADER
from psirag.server.state import IndexHolder

GLACIERS = "Glaciers of blue ice carve deep fjords along the cold northern coast."
DUNES = "Dunes of red sand drift across the dry desert plateau under a white sun."


def _children(parent: int) -> set[int]:
    """The live processes whose parent is ``parent`` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _workers_seen(url: str, rounds: int = 8, per_round: int = 16) -> dict[int, set[str]]:
    """The ETags each worker pid answered with, from bursts of concurrent searches, each on its
    own connection (a burst keeps one worker busy, so the other accepts too); bounded."""
    seen: dict[int, set[str]] = {}
    lock = threading.Lock()

    def one(i: int) -> None:
        r = httpx.post(f"{url}/search", json={"query": f"ocean waves {i}", "k": 2}, timeout=60)
        assert r.status_code == 200, r.text
        with lock:
            seen.setdefault(int(r.headers[WORKER_HEADER]), set()).add(r.headers["ETag"])

    for _ in range(rounds):
        threads = [threading.Thread(target=one, args=(i,)) for i in range(per_round)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(seen) >= 2:
            break
    return seen


def _search_everywhere(url: str, query: str, n: int = 24) -> list[tuple[int, list[str], str]]:
    """``n`` searches on fresh connections: (worker pid, passages' documents, ETag)."""
    out = []
    for _ in range(n):
        r = httpx.post(f"{url}/search", json={"query": query, "k": 3}, timeout=60)
        assert r.status_code == 200, r.text
        docs = [p["source"]["document"] for p in r.json()["passages"]]
        out.append((int(r.headers[WORKER_HEADER]), docs, r.headers["ETag"]))
    return out


def _wait_job(url: str, job_id: str) -> tuple[dict[str, Any], set[int]]:
    """Poll ``GET /jobs/{id}`` on fresh connections (so on any worker) until it ends; every
    poll must find the job. Returns the job and the workers that answered."""
    answered: set[int] = set()
    job = wait_for_job(
        url, job_id, lambda r: answered.add(int(r.headers[WORKER_HEADER])), pause=0.05
    )
    return job, answered


def test_two_workers_share_requests_writes_and_generations(tmp_path: Path) -> None:
    folder, proc = serve_new_index(tmp_path, "--retries", "0", "--workers", "2")
    try:
        proc.wait_ready()
        workers = _children(proc.proc.pid)
        assert len(workers) == 2, (workers, proc.log()[-2000:])
        seen = _workers_seen(proc.url)
        assert set(seen) == workers, (seen, workers)  # both answer, and only they do

        # a document added through one request is searched on every worker afterwards
        added = httpx.post(
            f"{proc.url}/documents", json={"text": GLACIERS, "id": "glaciers"}, timeout=30
        )
        assert added.status_code == 202, added.text
        job, _ = _wait_job(proc.url, added.json()["job"]["id"])
        assert job["status"] == "done", job
        assert job["result"]["saved_generation"] == 2
        results = _search_everywhere(proc.url, "blue ice fjords glaciers")
        assert all("glaciers" in docs for _, docs, _ in results), results
        # the workers number the generation alike, so a page's ETag holds on either
        tags = _workers_seen(proc.url)
        assert set(tags) == workers and len(set().union(*tags.values())) == 1, tags
        for _ in range(6):
            body = httpx.get(f"{proc.url}/index", timeout=30).json()
            assert body["saved_generation"] == 2 and body["generation"] == 2, body
            assert body["documents"] == 4, body

        # a write from outside (the CLI's path) reaches both workers too
        beside = Index.load(folder, embedder=HashEmbedder())
        beside.add([DUNES], texts=True)
        beside.save(folder)
        (dunes,) = set(beside.documents) - {"glaciers", *TOPICS}
        results = _search_everywhere(proc.url, "red sand dunes desert plateau")
        assert all(dunes in docs for _, docs, _ in results), results

        # job status answers on any worker, and a second write builds on the first
        removed = httpx.delete(f"{proc.url}/documents/glaciers", timeout=30)
        assert removed.status_code == 202, removed.text
        job, _ = _wait_job(proc.url, removed.json()["job"]["id"])
        assert job["status"] == "done", job
        served = httpx.get(f"{proc.url}/documents", timeout=30).json()["documents"]
        on_disk = Index.load(folder, embedder=HashEmbedder()).documents
        assert {d["id"] for d in served} == set(on_disk)
        assert "glaciers" not in on_disk and dunes in on_disk
    finally:
        proc.stop()
    assert not any(_alive(pid) for pid in workers), "a worker outlived a stopped server"


def test_killing_the_parent_leaves_no_worker(tmp_path: Path) -> None:
    _, proc = serve_new_index(tmp_path, "--workers", "2")
    try:
        proc.wait_ready()
        workers = _children(proc.proc.pid)
        assert len(workers) == 2
        os.kill(proc.proc.pid, signal.SIGKILL)
        proc.proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in workers if _alive(pid)]
        for pid in left:  # do not leak them into the rest of the run
            os.kill(pid, signal.SIGKILL)
        assert not left, f"workers {left} outlived their parent"
        shared = re.findall(r"jobs shared in (\S+)", proc.log())
        assert shared and not Path(shared[0]).exists(), "the workers left their job folder"
    finally:
        proc.stop()


def test_a_worker_that_dies_is_replaced(tmp_path: Path) -> None:
    _, proc = serve_new_index(tmp_path, "--workers", "2")
    try:
        proc.wait_ready()
        first = _children(proc.proc.pid)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = _children(proc.proc.pid)
            if len(now) == 2 and victim not in now:
                break
            time.sleep(0.2)
        assert len(now) == 2 and victim not in now, (first, now, proc.log()[-2000:])
        assert "restarting it" in proc.log()
        for _ in range(10):  # whichever worker takes it, the server answers
            assert httpx.get(f"{proc.url}/health", timeout=30).status_code == 200
    finally:
        proc.stop()


def test_the_holder_follows_a_generation_published_elsewhere(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    served = build_index(folder)
    holder = IndexHolder(served, folder)
    assert holder.get().saved == 1 and not holder.stale()
    assert holder.latest() is holder.get()
    beside = Index.load(folder, embedder=HashEmbedder())
    beside.add([GLACIERS], texts=True)
    beside.save(folder)
    assert holder.stale()
    latest = holder.latest()
    assert latest.saved == 2 and latest.number == 2
    assert set(latest.index.documents) == set(beside.documents)
    assert latest.index.embedder.id == served.embedder.id
    assert not holder.stale() and holder.latest() is latest
    # a generation older than the one served is never published over it
    assert holder.publish(served, saved=1) is latest


def test_job_status_is_shared_between_runners(tmp_path: Path) -> None:
    first = JobRunner(first_id=1, id_step=2, shared=tmp_path)
    second = JobRunner(first_id=2, id_step=2, shared=tmp_path)
    release = threading.Event()
    try:
        a = first.submit("add", lambda job: {"ok": release.wait(10)})
        b = second.submit("remove", lambda job: {"ok": True})
        assert (a.id, b.id) == ("job-1", "job-2")
        seen = second.get(a.id)
        assert seen is not None and seen.kind == "add" and seen.status in ("queued", "running")
        release.set()
        deadline = time.monotonic() + 10
        while (seen is None or seen.status != "done") and time.monotonic() < deadline:
            time.sleep(0.02)
            seen = second.get(a.id)
        assert seen is not None and seen.status == "done" and seen.result == {"ok": True}
        assert second.get("job-99") is None and second.get("../job-1") is None
        alone = JobRunner()
        assert alone.get(a.id) is None  # no shared folder: only its own jobs
        alone.close()
    finally:
        first.close()
        second.close()


def test_workers_option_is_checked() -> None:
    from psirag.cli import build_parser
    from psirag.cli.serve import settings_from
    from psirag.errors import InputError
    from psirag.server.settings import MAX_WORKERS, ServerSettings

    args = build_parser().parse_args(["serve", "some-index", "--workers", "3"])
    assert settings_from(args).workers == 3
    assert settings_from(build_parser().parse_args(["serve", "some-index"])).workers == 1
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "some-index", "--workers", "0"])
    with pytest.raises(InputError, match="--workers"):
        ServerSettings(workers=MAX_WORKERS + 1).check()
