"""``GET /jobs/{id}?wait=S`` (long-poll): the answer comes as soon as the job finishes, or
after ``S`` seconds with the job as it is then; ``S`` out of 0-60 is a 422 naming ``wait``.
Every job record tells where its time went (phase timings). The CLI's ``--server`` client
waits with one held request against a server that holds it, and polls a server that ignores
``wait`` (an older one)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support.processes import serve_new_index

from psirag.cli import remote
from psirag.cli.remote import ServerClient
from psirag.server.job_records import Job, _job_from_saved

PHASES = ("request", "queued", "lock", "update", "save", "unlock", "prepare", "publish", "run")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _, proc = serve_new_index(tmp_path_factory.mktemp("wait"))
    try:
        proc.wait_ready()
        yield proc.url
    finally:
        proc.stop()


def _post(url: str, doc_id: str, text: str) -> dict[str, Any]:
    reply = httpx.post(f"{url}/documents", json={"text": text, "id": doc_id}, timeout=30)
    assert reply.status_code == 202, reply.text
    job: dict[str, Any] = reply.json()["job"]
    return job


def test_one_held_request_returns_the_finished_job_with_its_timings(server: str) -> None:
    job = _post(server, "kelp", "Kelp forests sway in the cold green water of the bay.")
    assert job["status"] in ("queued", "running")  # the add has not run yet
    done = httpx.get(f"{server}/jobs/{job['id']}", params={"wait": 30}, timeout=60).json()
    assert done["status"] == "done", done
    assert done["finished"] is not None and done["started"] is not None
    timings = done["timings"]
    missing = [p for p in PHASES if p not in timings]
    assert not missing, timings
    assert all(isinstance(v, float) and v >= 0 for v in timings.values()), timings
    spent = sum(timings[p] for p in ("lock", "update", "save", "unlock", "prepare", "publish"))
    assert spent <= timings["run"] + 0.01, timings  # the phases lie within the run
    assert timings["update"] > 0 and timings["save"] > 0, timings


def test_a_finished_job_answers_at_once_and_wait_zero_never_holds(server: str) -> None:
    job = _post(server, "moss", "Moss grows thick on the north side of old stone walls.")
    httpx.get(f"{server}/jobs/{job['id']}", params={"wait": 30}, timeout=60)
    t0 = time.monotonic()
    again = httpx.get(f"{server}/jobs/{job['id']}", params={"wait": 30}, timeout=60).json()
    assert again["status"] == "done" and time.monotonic() - t0 < 10
    assert httpx.get(f"{server}/jobs/{job['id']}?wait=0", timeout=30).json()["status"] == "done"


@pytest.mark.parametrize("value", ["61", "-1", "nan", "inf", "soon"])
def test_a_wait_out_of_range_is_a_422_naming_wait(server: str, value: str) -> None:
    job = _post(server, f"fern-{value}", "Ferns unroll their fronds in the damp shade.")
    reply = httpx.get(f"{server}/jobs/{job['id']}", params={"wait": value}, timeout=30)
    assert reply.status_code == 422, reply.text
    message = reply.json()["error"]["message"]
    assert "wait" in message, message
    if value != "soon":  # a number out of range says the range
        assert "0 to 60" in message, message


def test_an_unknown_job_is_a_404_even_with_wait(server: str) -> None:
    reply = httpx.get(f"{server}/jobs/job-999999", params={"wait": 5}, timeout=30)
    assert reply.status_code == 404, reply.text


def test_the_cli_client_waits_in_one_request(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a server that holds the request the client never sleeps between polls."""
    slept: list[float] = []
    monkeypatch.setattr(remote.time, "sleep", slept.append)
    client = ServerClient(server)
    job = _post(server, "lichen", "Lichen paints the granite boulders orange and grey.")
    done = client.wait(job)
    assert done["status"] == "done", done
    assert slept == []


def test_the_held_request_ends_after_wait_seconds_when_the_job_runs_on(
    tmp_path: Path,
) -> None:
    """A job that is still running after ``wait`` seconds comes back as it is then."""
    from fastapi.testclient import TestClient
    from support import HashEmbedder, build_index

    from psirag.index import Index
    from psirag.server.app import create_app

    folder = tmp_path / "index"
    build_index(folder)
    app = create_app(folder, index=Index.load(folder, embedder=HashEmbedder()), mcp=False)
    started, hold = threading.Event(), threading.Event()

    def held(job: Job) -> dict[str, Any]:
        started.set()
        hold.wait(30)
        return {"held": True}

    with TestClient(app) as client:
        job = app.state.psirag.jobs.submit("add", held)
        assert started.wait(10)
        t0 = time.monotonic()
        body = client.get(f"/jobs/{job.id}", params={"wait": 0.3}).json()
        assert body["status"] == "running" and time.monotonic() - t0 >= 0.3
        threading.Timer(0.2, hold.set).start()
        body = client.get(f"/jobs/{job.id}", params={"wait": 30}).json()
        assert body["status"] == "done" and body["result"] == {"held": True}
        assert time.monotonic() - t0 < 20  # woken by the job, not by the 30 s


class _OldJobs(http.server.BaseHTTPRequestHandler):
    """A server of before ``?wait``: answers every poll at once, done on the third."""

    polls: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.polls.append(self.path)
        status = "done" if len(self.polls) >= 3 else "running"
        body = json.dumps({"id": "job-1", "status": status, "error": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_cli_client_polls_a_server_that_ignores_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(remote.time, "sleep", slept.append)
    _OldJobs.polls = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OldJobs)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = ServerClient(f"http://127.0.0.1:{httpd.server_address[1]}")
        done = client.wait({"id": "job-1", "status": "queued"})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done["status"] == "done"
    assert len(_OldJobs.polls) == 3 and all("wait=" in p for p in _OldJobs.polls)
    assert slept == [remote.POLL_START_S, remote.POLL_START_S * 2]  # backed off between polls


def test_saved_timings_are_checked_field_by_field() -> None:
    raw = Job(id="job-3", kind="add", status="done", finished=5.0).to_dict()
    raw["timings"] = {"run": 1.5, "save": "slow", "lock": -1, "queued": float("nan"), "x": 0}
    job = _job_from_saved(raw)
    assert job is not None and job.timings == {"run": 1.5, "x": 0.0}
    raw["timings"] = ["run", 1.5]
    job = _job_from_saved(raw)
    assert job is not None and job.timings == {}


def test_a_held_request_on_any_worker_sees_the_job_finish(tmp_path: Path) -> None:
    """With ``--workers 2`` a wait may reach the worker that does not run the job: it reads
    the job's shared file until it is done."""
    _, proc = serve_new_index(tmp_path, "--workers", "2")
    try:
        proc.wait_ready()
        for k in range(4):  # fresh connections: the kernel spreads them over both workers
            job = _post(proc.url, f"reed-{k}", f"Reeds {k} bend in the wind along the river.")
            with httpx.Client(timeout=60) as client:
                done = client.get(f"{proc.url}/jobs/{job['id']}", params={"wait": 30}).json()
            assert done["status"] == "done", done
            assert done["timings"]["run"] > 0, done
    finally:
        proc.stop()
