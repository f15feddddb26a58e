"""``psirag serve --workers N``: a real two-worker server on 127.0.0.1 (the tests'
HashEmbedder launcher). Requests spread over both workers, a document added through one is
searched by both, a write made beside the server reaches both, job status answers on either,
and no worker outlives the parent, even one killed with SIGKILL. Jobs outlive the server:
one cut off by a SIGKILL or a stop is listed as interrupted after a restart (with another N, or
one process) and a retry succeeds, ids never repeat, a corrupt job file is set aside. Plus the
pieces in-process: the index holder following the folder's pointer, job status shared between
runners, the parent's preparation of the jobs folder and the move to and from the jobs file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support import TOPICS, HashEmbedder, ServerProcess, build_index
from support.processes import serve_new_index, wait_for_job

from psirag.index import Index
from psirag.server import jobs as jobs_module
from psirag.server import shared_jobs as shared_jobs_module
from psirag.server.jobs import (
    INTERRUPTED,
    JOBS_DIR,
    JOBS_FILE,
    Job,
    JobRunner,
    SharedJobs,
)
from psirag.server.middleware import WORKER_HEADER
from psirag.server.state import IndexHolder
from psirag.server.workers import SPREAD_BY_KERNEL
from psirag.storage import IndexStore

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
    folder, proc = serve_new_index(tmp_path, "--workers", "2")
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
        # the jobs folder is the index's, kept for the next server (owner only: jobs hold text)
        shared = re.findall(r"jobs shared in (\S+)", proc.log())
        assert shared and Path(shared[0]) == folder / JOBS_DIR, shared
        assert (folder / JOBS_DIR).is_dir() and (folder / JOBS_DIR).stat().st_mode & 0o777 == 0o700
    finally:
        proc.stop()


def _submit_held_job(url: str, doc_id: str, text: str) -> str:
    """Add a document while the test holds the index's writer lock: the job starts and waits
    for the lock, so it is running when the server goes. Its id."""
    added = httpx.post(f"{url}/documents", json={"text": text, "id": doc_id}, timeout=30)
    assert added.status_code == 202, added.text
    job_id: str = added.json()["job"]["id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(f"{url}/jobs/{job_id}", timeout=10).json()["status"] == "running":
            return job_id
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never started")


def _check_interrupted_then_retry(url: str, job_id: str, doc_id: str) -> str:
    """The job the last server left running is failed (interrupted), listed so, and a retry
    adds its document; the retry's id."""
    job = httpx.get(f"{url}/jobs/{job_id}", timeout=10).json()
    assert job["status"] == "failed" and job["error"] == INTERRUPTED and job["retryable"], job
    failed = httpx.get(f"{url}/documents?status=failed", timeout=30).json()["documents"]
    assert [(d["id"], d["error"]) for d in failed] == [(doc_id, INTERRUPTED)], failed
    retry = httpx.post(f"{url}/jobs/{job_id}/retry", timeout=30)
    assert retry.status_code == 202, retry.text
    retry_id: str = retry.json()["job"]["id"]
    assert retry.json()["job"]["retry_of"] == job_id
    assert wait_for_job(url, retry_id)["status"] == "done"
    row = httpx.get(f"{url}/documents?q={doc_id}", timeout=30).json()["documents"][0]
    assert row["id"] == doc_id and row["status"] == "indexed", row
    return retry_id


def test_a_job_cut_off_by_sigkill_is_interrupted_after_a_restart_with_more_workers(
    tmp_path: Path,
) -> None:
    folder, proc = serve_new_index(tmp_path, "--retries", "0", "--workers", "2")
    lock = None
    workers: set[int] = set()
    try:
        proc.wait_ready()
        workers = _children(proc.proc.pid)
        first = httpx.post(
            f"{proc.url}/documents", json={"text": GLACIERS, "id": "glaciers"}, timeout=30
        ).json()["job"]["id"]
        assert wait_for_job(proc.url, first)["status"] == "done"
        lock = IndexStore(folder).lock()
        cut = _submit_held_job(proc.url, "dunes", DUNES)
        os.kill(proc.proc.pid, signal.SIGKILL)  # the whole server, without a chance to clean
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        proc.proc.wait(timeout=10)
    finally:
        proc.stop()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if lock is not None:
            lock.close()
    saved = json.loads((folder / JOBS_DIR / f"{cut}.json").read_text(encoding="utf-8"))
    assert saved["status"] == "running"  # as the killed worker left it
    (folder / JOBS_DIR / "job-40.json").write_text('{"id": "job-40", "kind"', encoding="utf-8")

    with ServerProcess(
        folder,
        ["--retries", "0", "--workers", "3"],
        log_path=tmp_path / "again.log",
        hash_embedder=True,
    ) as again:
        assert httpx.get(f"{again.url}/jobs/{first}", timeout=10).json()["status"] == "done"
        retry = _check_interrupted_then_retry(again.url, cut, "dunes")
        fresh = httpx.delete(f"{again.url}/documents/glaciers", timeout=30).json()["job"]["id"]
        assert wait_for_job(again.url, fresh)["status"] == "done"
        log_text = again.log()
    ids = [first, cut, retry, fresh]
    assert len(set(ids)) == 4, ids  # no id given twice, across the restart and the new N
    numbers = [int(i.split("-")[1]) for i in ids]
    assert min(numbers[2:]) > 40  # after every id the folder held, the corrupt file's too
    assert (folder / JOBS_DIR / "job-40.json.bad").exists()
    assert not (folder / JOBS_DIR / "job-40.json").exists()
    assert "job-40.json is unreadable" in log_text and "set aside" in log_text


def test_a_job_cut_off_by_a_stop_is_interrupted_after_a_restart_with_one_process(
    tmp_path: Path,
) -> None:
    folder, proc = serve_new_index(tmp_path, "--retries", "0", "--workers", "2")
    try:
        proc.wait_ready()
        with IndexStore(folder).lock():
            cut = _submit_held_job(proc.url, "dunes", DUNES)
            proc.proc.terminate()  # SIGTERM: the workers stop, the held job never finishes
            proc.proc.wait(timeout=60)  # (a worker gives its writer 5 s, then exits)
        assert proc.proc.returncode == 0, proc.log()[-2000:]
    finally:
        proc.stop()
    # the parent marked it once every worker had stopped (a `psirag mcp` sees it so now)
    saved = json.loads((folder / JOBS_DIR / f"{cut}.json").read_text(encoding="utf-8"))
    assert saved["status"] == "failed" and saved["error"] == INTERRUPTED
    with ServerProcess(
        folder, ["--retries", "0"], log_path=tmp_path / "again.log", hash_embedder=True
    ) as again:
        retry = _check_interrupted_then_retry(again.url, cut, "dunes")
    assert int(retry.split("-")[1]) > int(cut.split("-")[1])
    # one process keeps its jobs in the jobs file: the folder's moved there
    on_disk = json.loads((folder / JOBS_FILE).read_text(encoding="utf-8"))["jobs"]
    assert [j["id"] for j in on_disk] == [cut, retry]
    assert not list((folder / JOBS_DIR).glob("job-*.json"))


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


def _write_job(folder: Path, name: str, **fields: Any) -> Path:
    path = folder / name
    path.write_text(json.dumps(fields), encoding="utf-8")
    return path


def test_the_parent_takes_over_the_last_servers_jobs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before forking: unfinished jobs become interrupted (payload kept for a retry), only the
    newest KEEP_SAVED finished ones stay, bad files are set aside with a warning, a killed
    write's temporary file goes, and numbering goes on after every id seen."""
    for module in (jobs_module, shared_jobs_module):  # the runners' limit and the parent's
        monkeypatch.setattr(module, "KEEP_SAVED", 2)
    shared = tmp_path / JOBS_DIR
    shared.mkdir()
    payload = [{"id": "kelp", "text": "Kelp forests grow in cold seas."}]
    docs = [{"id": "kelp", "title": ""}]
    _write_job(shared, "job-3.json", id="job-3", kind="add", status="running", created=3.0,
               documents=docs, payload=payload)  # fmt: skip
    for n, finished in ((1, 10.0), (2, 20.0), (5, 30.0)):
        _write_job(shared, f"job-{n}.json", id=f"job-{n}", kind="remove", status="done",
                   created=float(n), finished=finished, payload=None)  # fmt: skip
    (shared / "job-8.json").write_text("{not json", encoding="utf-8")
    _write_job(shared, "job-9.json", id="job-9", kind="add", status=5)
    _write_job(shared, "job-12.json", id="job-4", kind="add", status="done", finished=1.0)
    (shared / ".job-3.4242.tmp").write_text("{half", encoding="utf-8")
    with caplog.at_level("WARNING", logger="psirag.server"):
        prepared = SharedJobs.prepare(tmp_path, 3)
    assert prepared.folder == shared and not prepared.temporary
    assert prepared.first_id == 13  # past job-12, though it was set aside
    for name in ("job-8.json", "job-9.json", "job-12.json"):
        assert (shared / f"{name}.bad").exists() and not (shared / name).exists()
        assert any(name in r.getMessage() and "set aside" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in shared.glob("job-*.json")) == ["job-3.json", "job-5.json"]
    assert not list(shared.glob(".job-*.tmp"))
    cut = json.loads((shared / "job-3.json").read_text(encoding="utf-8"))
    assert cut["status"] == "failed" and cut["error"] == INTERRUPTED and cut["payload"] == payload
    runners = [JobRunner.for_worker(prepared, k) for k in range(3)]
    try:
        made = [r.submit("remove", lambda job: {}, payload=[]).id for r in runners]
        assert made == ["job-13", "job-14", "job-15"]
        runners[1].perform = lambda job: {"ok": True}  # the app's run_job, in a server
        retried = runners[1].retry("job-3")  # another worker's file, retried anywhere
        assert retried is not None and retried.id == "job-17" and retried.payload == payload
        assert {j.id for j in runners[2].all()} >= {"job-3", "job-5", *made, "job-17"}
    finally:
        for r in runners:
            r.close()


def test_a_dead_workers_jobs_are_interrupted_and_its_replacement_numbers_on(
    tmp_path: Path,
) -> None:
    prepared = SharedJobs.prepare(tmp_path, 2)
    hold = threading.Event()
    dead, other = JobRunner.for_worker(prepared, 0), JobRunner.for_worker(prepared, 1)
    try:
        assert dead.submit("remove", lambda job: {}, payload=[]).id == "job-1"
        _wait_runner(dead, "job-1")
        stuck = dead.submit("add", lambda job: {"ok": hold.wait(10)}, payload=[])
        busy = other.submit("add", lambda job: {"ok": hold.wait(10)}, payload=[])
        deadline = time.monotonic() + 10
        while (other.get(busy.id) or busy).status != "running" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert prepared.interrupt(0) == [stuck.id]  # worker 0 died: only its job is cut off
        seen = other.get(stuck.id)
        assert seen is not None and seen.error == INTERRUPTED and seen.retryable
        assert (other.get(busy.id) or busy).status == "running"  # worker 1's job runs on
        dead.shared = None  # the dead worker writes nothing more
        replacement = JobRunner.for_worker(prepared, 0)
        try:
            again = replacement.submit("remove", lambda job: {}, payload=[])
            assert again.id == "job-5"  # after job-1 and job-3, never over them
        finally:
            replacement.close()
    finally:
        hold.set()
        dead.close()
        other.close()


def test_jobs_move_from_the_jobs_file_to_the_folder_and_back(tmp_path: Path) -> None:
    """One process, then N workers, then one process again: every earlier job stays listed
    under its id (unfinished ones interrupted), and new ids go on after them; `psirag mcp`
    sees the folder's jobs and writes nothing. (``tmp_path`` stands for the index folder.)"""
    index = tmp_path
    single = JobRunner(index / JOBS_FILE)
    payload = [{"id": "kelp", "text": "Kelp forests grow in cold seas."}]
    failed = single.submit("add", _fail, documents=[{"id": "kelp", "title": ""}], payload=payload)
    done = single.submit("remove", lambda job: {}, payload=["x"])
    _wait_runner(single, done.id)
    single.close()
    assert (failed.id, done.id) == ("job-1", "job-2")

    prepared = SharedJobs.prepare(index, 2)
    assert not (index / JOBS_FILE).exists() and prepared.first_id == 3
    worker = JobRunner.for_worker(prepared, 1)
    try:
        moved = worker.get(failed.id)
        assert moved is not None and moved.retryable and moved.payload == payload
        newer = worker.submit("remove", lambda job: {}, payload=["y"])
        assert newer.id == "job-4"
        _wait_runner(worker, newer.id)
    finally:
        worker.close()

    observer = JobRunner(observe=index / JOBS_FILE)  # psirag mcp: reads the folder too
    before = {p.name: p.read_bytes() for p in (index / JOBS_DIR).iterdir()}
    assert [j.id for j in observer.all()] == ["job-1", "job-2", "job-4"]
    assert {p.name: p.read_bytes() for p in (index / JOBS_DIR).iterdir()} == before
    observer.close()

    back = JobRunner(index / JOBS_FILE)
    try:
        assert [j.id for j in back.all()] == ["job-1", "job-2", "job-4"]
        kept = back.get("job-1")
        assert kept is not None and kept.retryable and kept.payload == payload
        assert back.submit("remove", lambda job: {}, payload=[]).id == "job-5"
        assert not list((index / JOBS_DIR).glob("job-*.json"))  # they live in the file now
    finally:
        back.close()


def test_saved_job_fields_are_checked_one_by_one(tmp_path: Path) -> None:
    """A job file whose fields have the wrong types still loads (each such field left
    empty), never raises, and a payload of the wrong shape makes the job not retryable."""
    shared = tmp_path / JOBS_DIR
    shared.mkdir()
    _write_job(shared, "job-2.json", id="job-2", kind="add", status="failed",
               progress={"done": "many", "total": [1]}, created="yesterday",
               finished="soon", error={"x": 1},
               documents=[{"id": {"x": 1}}, {"id": "ok", "title": 7}, "junk"],
               payload={"not": "a list"}, retry_of="../etc")  # fmt: skip
    prepared = SharedJobs.prepare(tmp_path, 1)
    runner = JobRunner.for_worker(prepared, 0)
    try:
        job = runner.get("job-2")
        assert job is not None and job.status == "failed" and not job.retryable
        assert (job.done, job.total, job.created, job.finished) == (0, 0, 0.0, None)
        assert job.documents == [{"id": "ok", "title": ""}] and job.error is None
        assert job.retry_of is None
    finally:
        runner.close()


def _fail(job: Job) -> dict[str, Any]:
    raise OSError("the disk is full")


def _wait_runner(runner: JobRunner, job_id: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        job = runner.get(job_id)
        if job is not None and job.finished is not None:
            return
        time.sleep(0.02)
    raise AssertionError(f"{job_id} did not finish")


def test_a_jobs_folder_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    """The jobs hold documents' text: a symbolic link or a file in the folder's place is
    refused with an error naming it, never followed or written over."""
    from psirag.errors import InputError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    index = tmp_path / "index"
    index.mkdir()
    (index / JOBS_DIR).symlink_to(elsewhere)
    with pytest.raises(InputError, match=f"{JOBS_DIR} is not a folder"):
        SharedJobs.prepare(index, 2)
    (index / JOBS_DIR).unlink()
    (index / JOBS_DIR).write_text("mine", encoding="utf-8")
    with pytest.raises(InputError, match="move it away"):
        SharedJobs.prepare(index, 2)
    assert not list(elsewhere.iterdir())
    assert (index / JOBS_DIR).read_text(encoding="utf-8") == "mine"


def _accepted_nodelay(sock: socket.socket) -> int:
    """TCP_NODELAY of the connection an asyncio server on ``sock`` (as uvicorn's worker runs
    it: ``create_server(sock=...)``) accepts from one loopback client."""

    async def run() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            value = await asyncio.wait_for(seen, 10)
        server.close()
        await server.wait_closed()
        return value

    return asyncio.run(run())


def test_the_workers_sockets_turn_nagle_off() -> None:
    """uvicorn's ``bind_socket`` makes a socket whose ``proto`` reads 0, and asyncio sets
    TCP_NODELAY on accepted connections only for ``IPPROTO_TCP``: the workers' answers waited
    for the client's delayed ACK (a lone search 56 ms against 12 with one process)."""
    import uvicorn

    from psirag.server.workers import bind_port, worker_socket

    plain = uvicorn.Config("psirag", host="127.0.0.1", port=0).bind_socket()
    try:
        if plain.proto != socket.IPPROTO_TCP:  # uvicorn before 0.55 (0.55 makes it a TCP socket)
            assert _accepted_nodelay(plain) == 0  # the control: what the workers had
    finally:
        plain.close()
    parent = bind_port("127.0.0.1", 0)
    try:
        listening = worker_socket(parent)
        assert listening.proto == socket.IPPROTO_TCP
        assert _accepted_nodelay(listening) != 0
    finally:
        parent.close()


def test_serve_workers_is_handed_a_port_whose_connections_have_nodelay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ``psirag serve --workers 2`` start-up, up to the fork: a worker's socket on
    the port it is handed gives connections with Nagle off."""
    from psirag.cli import build_parser
    from psirag.cli.serve import run_serve
    from psirag.server import workers as workers_module

    folder = tmp_path / "index"
    build_index(folder)
    handed: list[socket.socket] = []

    def capture(n: int, make_app: Any, sock: socket.socket, jobs: Any, **_: Any) -> int:
        handed.append(sock)
        return 0

    monkeypatch.setattr(workers_module, "serve_workers", capture)
    args = build_parser().parse_args(
        ["serve", str(folder), "--port", "0", "--workers", "2", "--no-mcp"]
    )
    assert run_serve(args, embedder=HashEmbedder()) == 0
    (sock,) = handed
    try:
        assert _accepted_nodelay(workers_module.worker_socket(sock)) != 0
    finally:
        sock.close()


@pytest.mark.skipif(not SPREAD_BY_KERNEL, reason="the kernel spreads connections on Linux only")
def test_a_port_in_use_is_refused_even_by_workers_sockets() -> None:
    """SO_REUSEPORT would let a second server join the first one's workers and take a share of
    their connections: the parent checks the port with a plain bind first."""
    from psirag.errors import InputError
    from psirag.server.workers import bind_port, worker_socket

    first = bind_port("127.0.0.1", 0)
    port = first.getsockname()[1]
    listening = worker_socket(first)
    listening.listen()
    try:
        with pytest.raises(InputError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind_port("127.0.0.1", port).close()
    finally:
        listening.close()
        first.close()


def test_keep_alive_connections_spread_over_the_workers(tmp_path: Path) -> None:
    """32 keep-alive clients connecting at once: each worker gets a share (on one shared
    socket, whichever worker woke first accepted nearly all of them: 32 of 32 measured).
    With the kernel's even spread, fewer than 4 of 32 on one worker has a chance of about
    3 in a million."""
    _, proc = serve_new_index(tmp_path, "--retries", "0", "--workers", "2")
    try:
        proc.wait_ready()
        workers = _children(proc.proc.pid)
        if not SPREAD_BY_KERNEL:
            pytest.skip("the kernel spreads connections on Linux only")
        counts: dict[int, int] = {}
        lock = threading.Lock()
        start = threading.Barrier(32)

        def one(i: int) -> None:
            start.wait()
            with httpx.Client(base_url=proc.url, timeout=60) as client:
                for _ in range(2):  # the same kept-alive connection answers both
                    r = client.post("/search", json={"query": f"ocean waves {i}", "k": 2})
                    assert r.status_code == 200, r.text
                with lock:
                    pid = int(r.headers[WORKER_HEADER])
                    counts[pid] = counts.get(pid, 0) + 1

        threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(counts) == workers and min(counts.values()) >= 4, counts
    finally:
        proc.stop()
