"""The HTTP deadline is a wall-clock bound on the whole call, whatever the server does (issue 26).

Raw loopback servers misbehave on purpose: trickle the whole response one byte every N seconds,
answer in HTTP/1.0 (after which http.client drops ``conn.sock``), send a chunked body slowly,
or stall after the headers. Every call must end by the deadline plus one second, retries
included, with a timeout error. Each server thread stops by itself (the client going away, or
its own limit).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from psirag.http import HTTPCallError, HttpClient, HttpPolicy

SERVER_LIMIT = 60.0
"""No server thread outlives this many seconds."""


def _read_request(conn: socket.socket) -> None:
    conn.settimeout(5)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk


def _trickle(conn: socket.socket, data: bytes, every: float, stop: threading.Event) -> None:
    for i in range(len(data)):
        conn.sendall(data[i : i + 1])
        if stop.wait(every):
            return


Behaviour = Callable[[socket.socket, float, threading.Event], None]


def trickle_all(conn: socket.socket, every: float, stop: threading.Event) -> None:
    """The whole response, headers included, one byte every ``every`` seconds."""
    body = b'{"object": "list", "data": []}'
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    _trickle(conn, head + body, every, stop)


def http10_trickle_body(conn: socket.socket, every: float, stop: threading.Event) -> None:
    """An HTTP/1.0 reply without a length (read to the end), its body trickled."""
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
    _trickle(conn, b'{"object": "list", "data": []}' * 100, every, stop)


def http10_stall(conn: socket.socket, every: float, stop: threading.Event) -> None:
    """An HTTP/1.0 reply whose body never comes."""
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
    stop.wait(SERVER_LIMIT)


def chunked_trickle(conn: socket.socket, every: float, stop: threading.Event) -> None:
    """A chunked body: a one-byte chunk every ``every`` seconds, size lines trickled too."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(1000):
        _trickle(conn, b"1\r\n ", every / 2, stop)
        conn.sendall(b"\r\n")
        if stop.wait(every / 2):
            return


def stall_after_headers(conn: socket.socket, every: float, stop: threading.Event) -> None:
    """Headers promise a body that never comes."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    stop.wait(SERVER_LIMIT)


class MisbehavingServer:
    def __init__(self, behaviour: Behaviour, every: float) -> None:
        self.behaviour = behaviour
        self.every = every
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set() and time.monotonic() - started < SERVER_LIMIT:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            _read_request(conn)
            conn.settimeout(SERVER_LIMIT)
            self.behaviour(conn, self.every, self.stop)

    def close(self) -> None:
        self.stop.set()
        self.accepter.join(5)
        for t in self.threads:
            t.join(5)
        self.sock.close()


BEHAVIOURS = {
    "trickle-all": trickle_all,
    "http10-trickle-body": http10_trickle_body,
    "http10-stall": http10_stall,
    "chunked-trickle": chunked_trickle,
    "stall-after-headers": stall_after_headers,
}


@contextlib.contextmanager
def misbehaving(behaviour: Behaviour, every: float) -> Iterator[MisbehavingServer]:
    srv = MisbehavingServer(behaviour, every)
    try:
        yield srv
    finally:
        srv.close()


def timed_call(port: int, timeout: float, retries: int) -> tuple[float, HTTPCallError]:
    client = HttpClient(
        f"http://127.0.0.1:{port}/v1/embeddings",
        what="test server",
        policy=HttpPolicy(timeout=timeout, retries=retries, backoff=0.1),
        api_key_env=None,
    )
    started = time.monotonic()
    with pytest.raises(HTTPCallError) as caught:
        client.post_json({"input": ["x"]})
    return time.monotonic() - started, caught.value


@pytest.mark.parametrize("retries", [0, 3])
@pytest.mark.parametrize("name", list(BEHAVIOURS))
def test_every_call_ends_by_the_deadline(name: str, retries: int) -> None:
    """A byte every 2.5 s: each read returns before a 3 s socket timeout, so only a deadline
    on the whole call (and a watchdog that still holds the socket) stops it by 3 s."""
    with misbehaving(BEHAVIOURS[name], every=2.5) as srv:
        elapsed, error = timed_call(srv.port, 3.0, retries)
    assert error.kind == "timeout", error
    assert elapsed <= 3.0 + 1.0, f"{name}: {elapsed:.2f} s for a 3 s deadline"
    assert elapsed >= 2.5, f"{name}: gave up early, {elapsed:.2f} s"


@pytest.mark.slow
@pytest.mark.parametrize("every", [10.0, 14.0])
@pytest.mark.parametrize("name", list(BEHAVIOURS))
def test_a_15s_deadline_holds_against_slow_trickles(name: str, every: float) -> None:
    """The numbers of the report: one byte every 10 s and every 14 s took 20 s and 28 s."""
    with misbehaving(BEHAVIOURS[name], every=every) as srv:
        elapsed, error = timed_call(srv.port, 15.0, 3)
    assert error.kind == "timeout", error
    assert elapsed <= 15.0 + 1.0, f"{name}: {elapsed:.2f} s for a 15 s deadline"
