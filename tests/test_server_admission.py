"""Issue 26, the server: admission control for asks, cancelling an abandoned ask's LLM calls,
ids with ``/`` removable, MCP refusing unknown arguments, ``n > 1`` refused on chat.

The flood test runs a real ``psirag serve`` in a child process against a scripted LLM on
loopback that sleeps on every call: 200 streaming asks at once (bounded: every socket is closed
by the test, the LLM's sleep ends when the test does). ``/search`` must stay fast, the asks over
the bound get 503 at once, and once every client has gone the server's threads go back to
their count before the flood and no LLM call starts any more.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support import FakeOpenAIServer, HashEmbedder, ServerProcess, build_index

from psirag.cancel import CancelledError, CancelToken
from psirag.server.admission import AskPool, ServerBusyError
from psirag.server.state import GatedLLM

pytest.importorskip("fastapi")

STREAMS = 200
MAX_ASKS = 8
ASK_QUEUE = 32


# ---------------------------------------------------------------------------- units
def test_the_pool_refuses_past_its_bound_and_gives_places_back() -> None:
    from psirag.server.errors import exception_response

    pool = AskPool(workers=2, waiting=1, retry_after=7)
    held = [pool.admit() for _ in range(3)]
    with pytest.raises(ServerBusyError) as caught:
        pool.admit()
    response = exception_response(caught.value)
    assert response.status_code == 503 and response.headers["retry-after"] == "7"
    assert "--max-asks" in json.loads(bytes(response.body))["error"]["message"]
    held[0].close()
    held[0].close()  # twice: one place given back, not two
    assert pool.admitted == 2
    pool.admit().close()
    assert pool.refused == 1


class _CountingClient:
    id = "counting"
    context_tokens = 4096
    usage: ClassVar[dict[str, dict[str, float]]] = {}

    def __init__(self) -> None:
        self.calls = 0

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat(self, messages: Any, params: Any, stage: str = "agent") -> str:
        self.calls += 1
        time.sleep(0.5)
        return "ok"

    def close(self) -> None:
        return None


def test_a_cancelled_ask_starts_no_llm_call_and_stops_waiting_for_the_gate() -> None:
    client = _CountingClient()
    gated = GatedLLM(client, limit=1)  # type: ignore[arg-type]
    busy = threading.Thread(target=lambda: gated.chat([], None))
    busy.start()
    time.sleep(0.1)  # the one place is taken for 0.5 s
    token = CancelToken()
    outcome: list[BaseException] = []

    def waiting() -> None:
        try:
            token.run(lambda: gated.chat([], None))
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=waiting)
    waiter.start()
    time.sleep(0.1)
    token.cancel()
    waiter.join(2)
    busy.join(2)
    assert outcome and isinstance(outcome[0], CancelledError)
    assert client.calls == 1  # the cancelled ask never called the LLM
    with pytest.raises(CancelledError):
        token.run(lambda: gated.chat([], None))
    assert client.calls == 1


def test_cancel_cuts_an_llm_call_in_flight() -> None:
    """A call waiting on a server that sleeps ends within a moment of the cancel."""
    from psirag.http import HttpClient, HttpPolicy

    stop = threading.Event()

    def sleepy(body: dict[str, Any]) -> str:
        stop.wait(30)
        return "late"

    with FakeOpenAIServer(responder=sleepy) as srv:
        client = HttpClient(
            f"{srv.base_url}/chat/completions", what="LLM", policy=HttpPolicy(timeout=30)
        )
        token = CancelToken()
        threading.Timer(0.5, token.cancel).start()
        started = time.monotonic()
        with pytest.raises(CancelledError):
            token.run(lambda: client.post_json({"model": "m", "messages": []}))
        elapsed = time.monotonic() - started
        stop.set()
    assert elapsed < 2.0, elapsed


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from psirag.server.app import create_app

    index = build_index(tmp_path / "index")
    app = create_app(tmp_path / "index", index=index, embedder=HashEmbedder())
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def test_chat_refuses_n_above_one(app_client: Any) -> None:
    body = {"messages": [{"role": "user", "content": "Which volcano?"}], "n": 3}
    got = app_client.post("/v1/chat/completions", json=body)
    assert got.status_code == 400, got.text
    assert "n must be 1" in got.json()["error"]["message"]


def _wait_job(client: Any, job: dict[str, Any]) -> dict[str, Any]:
    for _ in range(200):
        state = client.get(f"/jobs/{job['id']}").json()
        if state["status"] in ("done", "failed"):
            return state
        time.sleep(0.05)
    raise AssertionError(f"job {job['id']} did not finish")


def test_an_id_with_slashes_can_be_removed(app_client: Any) -> None:
    doc_id = "../../etc/passwd"
    added = app_client.post("/documents", json={"text": "Root lives here. Lava too.", "id": doc_id})
    assert added.status_code == 202, added.text
    assert _wait_job(app_client, added.json()["job"])["status"] == "done"
    assert doc_id in [d["id"] for d in app_client.get("/documents").json()["documents"]]
    removed = app_client.delete("/documents/..%2F..%2Fetc%2Fpasswd")
    assert removed.status_code == 202, removed.text
    assert _wait_job(app_client, removed.json()["job"])["status"] == "done"
    assert doc_id not in [d["id"] for d in app_client.get("/documents").json()["documents"]]


def test_unknown_doc_ids_in_a_search_are_listed_short(app_client: Any) -> None:
    ids = [f"nope-{i}" for i in range(20000)]
    got = app_client.post("/search", json={"query": "volcano", "docs": ids})
    assert got.status_code == 400
    assert "and 19,990 more" in got.text and len(got.content) < 2000


def test_validation_errors_are_listed_short(app_client: Any) -> None:
    got = app_client.post("/search", json={"query": "volcano", "docs": list(range(20000))})
    assert got.status_code == 422
    body = got.json()["error"]
    assert "and 19,997 more" in body["message"], body["message"]
    assert len(body["fields"]) == 10 and body["more_fields"] == 19990
    assert len(got.content) < 4000, len(got.content)


def test_mcp_refuses_unknown_arguments(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp.server.mcpserver.exceptions import ToolError

    from psirag.server.jobs import JobRunner
    from psirag.server.mcp_tools import build_mcp_server
    from psirag.server.settings import ServerSettings
    from psirag.server.state import IndexHolder, ServerState, prepare_index

    index = prepare_index(build_index(tmp_path / "index"))
    state = ServerState(IndexHolder(index, tmp_path / "index"), ServerSettings(), None, JobRunner())
    server = build_mcp_server(state)
    try:
        ok = asyncio.run(server.call_tool("search", {"query": "volcano lava", "k": 2}))
        assert ok is not None
        with pytest.raises(ToolError, match="max_retrieval"):
            asyncio.run(server.call_tool("search", {"query": "volcano", "max_retrieval": 2}))
        tools = asyncio.run(server.list_tools())
        assert all(t.input_schema.get("additionalProperties") is False for t in tools)
    finally:
        state.jobs.close()


# ---------------------------------------------------------------------------- the flood
class SleepingLLM:
    """A scripted LLM whose every call sleeps until released; records when each call began."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.started: list[float] = []

    def __call__(self, body: dict[str, Any]) -> str:
        with self.lock:
            self.started.append(time.monotonic())
        self.release.wait(120)
        return "Answer: Vesuvius"


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _open_stream(port: int, question: str) -> socket.socket:
    body = json.dumps({"query": question, "k": 3}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n"
        b"Content-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return sock


def _status(sock: socket.socket, wait: float) -> int | None:
    sock.settimeout(wait)
    try:
        head = sock.recv(64)
    except OSError:
        return None
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _reset(sock: socket.socket) -> None:
    """Close with RST, as a client that is killed or times out does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _timed_search(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.monotonic()
    conn.request(
        "POST",
        "/search",
        json.dumps({"query": "volcano lava", "k": 3}),
        {"Content-Type": "application/json"},
    )
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200
    return time.monotonic() - started


def test_200_slow_asks_leave_search_fast_and_nothing_behind(tmp_path: Path) -> None:
    build_index(tmp_path / "index")
    llm = SleepingLLM()
    with FakeOpenAIServer(responder=llm) as fake:
        args = ["--llm", fake.model_spec("m"), "--max-asks", str(MAX_ASKS)]
        args += ["--ask-queue", str(ASK_QUEUE), "--llm-concurrency", "4", "--timeout", "60"]
        try:
            with ServerProcess(tmp_path / "index", args, hash_embedder=True) as server:
                pid, port = server.proc.pid, server.port
                for _ in range(3):
                    _timed_search(port)
                time.sleep(1.0)
                baseline = _threads(pid)

                socks = [_open_stream(port, f"Which volcano {i}?") for i in range(STREAMS)]
                time.sleep(2.0)  # the admitted ones reach the LLM gate
                busy = sum(1 for s in socks if _status(s, 0.05) == 503)
                during = [_timed_search(port) for _ in range(40)]
                tree = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                tree.request("GET", "/tree")
                assert tree.getresponse().status == 200
                tree.close()
                peak = _threads(pid)
                calls_before = len(llm.started)

                for s in socks:
                    _reset(s)
                left = time.monotonic()
                settled_after = None
                # anyio lets a worker thread go once it has been idle 10 s, when the next
                # request comes: from 10 s on, a search each half second gives it the chance
                time.sleep(10.0)
                for _ in range(40):
                    time.sleep(0.5)
                    _timed_search(port)
                    if _threads(pid) <= baseline + 2:
                        settled_after = time.monotonic() - left
                        break
                after = _threads(pid)
                late = [t for t in llm.started if t > left + 1.0]

                llm.release.set()  # places must be free again: a new ask is admitted
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request(
                    "POST",
                    "/ask",
                    json.dumps({"query": "Which volcano?"}),
                    {"Content-Type": "application/json"},
                )
                again = conn.getresponse().status
                conn.close()
        finally:
            llm.release.set()
    during.sort()
    p95 = during[int(0.95 * (len(during) - 1))]
    print(
        f"\n{STREAMS} streams: {busy} answered 503 at once; /search p95 {p95 * 1000:.0f} ms "
        f"(max {during[-1] * 1000:.0f} ms) under the flood; server threads {baseline} before, "
        f"{peak} during, {after} after (settled in "
        f"{'never' if settled_after is None else f'{settled_after:.1f} s'}); LLM calls "
        f"{calls_before} started during, {len(late)} started more than 1 s after the last "
        "client left"
    )
    assert busy >= STREAMS - MAX_ASKS - ASK_QUEUE, busy
    assert p95 < 1.0, during
    assert settled_after is not None, (baseline, after)
    assert late == [], late
    assert again == 200
