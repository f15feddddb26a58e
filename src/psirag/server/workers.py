"""``psirag serve --workers N``: N server processes answering on one listening socket.

The parent binds the port (:func:`bind_port`), then forks the workers; each runs its own uvicorn
server, event loop and query model. On Linux each worker listens on its own socket bound to that
port with ``SO_REUSEPORT`` (:func:`worker_socket`), and the kernel spreads new connections
evenly over the workers; connections waiting in a worker's backlog when it dies are reset (its
replacement listens again). Elsewhere all workers accept on the parent's one socket. That was
the only way before, and it did not spread the load: asyncio accepts every waiting connection
when it wakes, so with keep-alive clients one worker took nearly all of them (32 of 32, 124 of
128 measured).
The index is loaded once in the parent before the fork, so a bad folder fails before anything
starts; its arrays are memory-mapped, so the workers share them through the page cache.

Writes stay single-writer: each worker runs its write jobs on one thread, and the index's
writer lock (an ``flock`` on ``DIR/lock``) puts the workers' writes one after another. Every
worker follows the folder's pointer (:class:`psirag.server.state.IndexHolder`), so a document
added through one worker is searched by all of them once it is published.

The parent does nothing but supervise: it restarts a worker that dies (giving up when workers
keep dying), and on SIGTERM, SIGINT or SIGHUP stops them all (SIGTERM, then SIGKILL after the
grace period). A worker asks the kernel to signal it when the parent dies (Linux
``PR_SET_PDEATHSIG``) and also checks its parent every second, so no worker outlives it.

The workers share their jobs in ``server-jobs/`` beside the index
(:class:`psirag.server.jobs.SharedJobs`), which outlives the server: the parent prepares it
before forking, marks a dead worker's unfinished jobs interrupted before starting its
replacement, and every worker's once they have all stopped (a parent killed with SIGKILL
cannot: the next start does it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psirag.libc import libc

if TYPE_CHECKING:
    from psirag.server.jobs import SharedJobs

log = logging.getLogger("psirag.server")

GRACE_S = 5.0
"""Seconds a worker has to finish its requests after SIGTERM (uvicorn's graceful shutdown)."""
RESTARTS_ALLOWED = 3
"""Workers that may die on their own within :data:`RESTART_WINDOW_S` before the server gives up."""
RESTART_WINDOW_S = 60.0
_PR_SET_PDEATHSIG = 1
PARENT_GONE = signal.SIGUSR1
"""The signal a worker gets when its parent dies."""

MakeApp = Callable[[int], Any]
"""Builds worker ``k``'s application (in the worker, after the fork)."""


def serve_workers(
    workers: int,
    make_app: MakeApp,
    sock: socket.socket,
    jobs: SharedJobs,
    *,
    log_level: str = "info",
) -> int:
    """Fork ``workers`` processes that serve ``make_app(k)`` on ``sock`` and supervise them
    until a stop signal; the exit status (0: stopped by a signal). ``jobs``: the folder the
    workers share their jobs in, prepared (:meth:`SharedJobs.prepare`)."""
    print(
        f"psirag serve: {workers} workers, jobs shared in {jobs.folder}",
        file=sys.stderr,
        flush=True,
    )
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set())
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    children: dict[int, int] = {}  # pid -> worker number
    deaths: list[float] = []
    status = 0
    try:
        for k in range(workers):
            children[_fork_worker(k, make_app, sock, jobs, log_level)] = k
        while not stop.is_set():
            pid, code = _reap()
            if pid == 0:
                stop.wait(0.2)
                continue
            if pid not in children:
                continue
            k = children.pop(pid)
            jobs.interrupt(k)  # what it was running or had queued never finishes now
            now = time.monotonic()
            deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
            if len(deaths) > RESTARTS_ALLOWED:
                print(
                    f"psirag serve: workers keep exiting ({len(deaths)} in "
                    f"{RESTART_WINDOW_S:.0f} s, the last with status {code}); stopping",
                    file=sys.stderr,
                    flush=True,
                )
                status = 1
                break
            print(
                f"psirag serve: worker {k} (pid {pid}) exited with status {code}; restarting it",
                file=sys.stderr,
                flush=True,
            )
            children[_fork_worker(k, make_app, sock, jobs, log_level)] = k
    finally:
        _stop_all(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        jobs.interrupt()  # every worker has exited: their unfinished jobs never finish
        if jobs.temporary:
            shutil.rmtree(jobs.folder, ignore_errors=True)
    return status


SPREAD_BY_KERNEL = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
"""Whether each worker listens on its own socket and the kernel spreads connections (Linux)."""


def _tcp_socket(family: int, address: Any) -> socket.socket:
    """A TCP socket bound to ``address`` as uvicorn binds (``SO_REUSEADDR``), with
    ``SO_REUSEPORT`` where the kernel spreads connections, and Nagle off.

    Its ``proto`` reads ``IPPROTO_TCP``: asyncio turns Nagle's algorithm off on each accepted
    connection only then. uvicorn's ``bind_socket`` makes ``socket.socket(family)``, whose
    ``proto`` reads 0, so the workers' connections kept Nagle on, and an answer written in two
    sends (headers, then body) waited for the client's delayed ACK: a lone search took 56 ms
    against 12 ms with one process."""
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SPREAD_BY_KERNEL:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bind_port(host: str, port: int) -> socket.socket:
    """The parent's socket on ``host:port`` (port 0: one the system picks), bound and not yet
    listening. On Linux it only holds the port for the workers' own sockets, and never
    listens, so it is given no connection."""
    from psirag.errors import InputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        if SPREAD_BY_KERNEL:
            # first as a plain socket, which fails if anything holds the port (another psirag
            # serve's workers included): SO_REUSEPORT alone would join their group and share
            # their connections
            with socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind((host, port))
                port = int(probe.getsockname()[1])
        return _tcp_socket(family, (host, port))
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc}") from exc


def worker_socket(parent: socket.socket) -> socket.socket:
    """The socket a worker listens on: its own, bound to the parent's address, where the
    kernel spreads connections (:data:`SPREAD_BY_KERNEL`); else the parent's, shared."""
    if not SPREAD_BY_KERNEL:
        return parent
    return _tcp_socket(parent.family, parent.getsockname())


def _reap() -> tuple[int, int]:
    """One child that has exited (pid, exit status), or (0, 0) when none has."""
    try:
        pid, raw = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0, 0
    if pid == 0:
        return 0, 0
    return pid, os.waitstatus_to_exitcode(raw)


def _stop_all(children: dict[int, int]) -> None:
    """SIGTERM every worker, wait for them (the grace period and a little more), then SIGKILL
    whichever is left, and reap them all."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S + 5.0
    while children and time.monotonic() < deadline:
        pid, _ = _reap()
        if pid:
            children.pop(pid, None)
        else:
            time.sleep(0.05)
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        children.pop(pid, None)


def _fork_worker(
    k: int, make_app: MakeApp, sock: socket.socket, jobs: SharedJobs, log_level: str
) -> int:
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    # In the worker: never return into the parent's code; leave by os._exit.
    code = 1
    try:
        os.setpgid(0, 0)  # a Ctrl-C reaches the parent only, which stops the workers once
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _die_with_parent(parent)
        code = _run_worker(k, make_app, sock, log_level)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # the worker's end: say why, then exit
        from psirag.errors import PsiragError

        if isinstance(exc, PsiragError):
            print(f"psirag: error: {exc}", file=sys.stderr, flush=True)
        else:
            import traceback

            traceback.print_exc()
        code = 2 if isinstance(exc, PsiragError) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if jobs.temporary and os.getppid() != parent:  # the parent was killed: nobody else
            shutil.rmtree(jobs.folder, ignore_errors=True)  # removes the temporary job files
        os._exit(code)


def _run_worker(k: int, make_app: MakeApp, sock: socket.socket, log_level: str) -> int:
    import uvicorn

    app = make_app(k)
    listening = worker_socket(sock)
    config = uvicorn.Config(
        app, log_level=log_level, timeout_graceful_shutdown=int(GRACE_S), lifespan="on"
    )
    server = uvicorn.Server(config)
    # the parent's death (PARENT_GONE) stops the server as SIGTERM would, but returns here
    # instead of dying by the signal, so the worker can clean up after the parent
    signal.signal(PARENT_GONE, lambda *_: setattr(server, "should_exit", True))
    server.run(sockets=[listening])
    return 0


def _die_with_parent(parent: int) -> None:
    """Have the kernel send this worker :data:`PARENT_GONE` when the parent dies (Linux);
    everywhere, a thread that checks the parent every second does the same, and covers a parent
    that died before this call. Until the server runs, the signal's default action ends the
    worker at once."""
    lib = libc()
    if lib is not None:
        with contextlib.suppress(OSError, AttributeError):
            lib.prctl(_PR_SET_PDEATHSIG, PARENT_GONE)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os.kill(os.getpid(), PARENT_GONE)
                return
            time.sleep(1.0)

    threading.Thread(target=watch, name="psirag-parent-watch", daemon=True).start()


__all__ = ["GRACE_S", "SPREAD_BY_KERNEL", "bind_port", "serve_workers", "worker_socket"]
