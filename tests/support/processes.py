"""Child processes of the tests: ``psirag serve`` on a free loopback port, and how to stop one.

One :class:`ServerProcess` for the server tests, the browser tests, ``benchmarks/bench_web.py``
and ``scripts/web_screenshots.py``. By default the child is the real ``python -m psirag.cli
serve`` with the caller's environment; with ``hash_embedder=True`` it is :data:`LAUNCHER`, the
same command line served with the tests' HashEmbedder (an index built with it loads in
milliseconds), in :func:`child_env`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from support.corpora import build_index
from support.fake_llm import LLM_SECRET

LAUNCHER = Path(__file__).resolve().parent / "serve_launcher.py"
"""``python LAUNCHER serve|mcp INDEX ...``: the CLI's parser and run functions, HashEmbedder."""
SRC = Path(__file__).resolve().parents[2] / "src"


def fork(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked child (the kill tests' writer); its exit status is 0 when ``fn``
    returns, 1 on any exception (printed)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a child server, then kill it if it has not gone within 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a launched child: this checkout's ``src`` first, no server key or LLM
    from outside, and :data:`LLM_SECRET` as the LLM's key."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PSIRAG_API_KEY", None)
    env.pop("PSIRAG_LLM", None)
    env["OPENAI_API_KEY"] = LLM_SECRET
    env.update(extra)
    return env


class ServerProcess:
    """``psirag serve INDEX_DIR ARGS`` in a child process on 127.0.0.1, until stopped.

    ``args`` are more command-line arguments (``--llm ...``, ``--api-key ...``). The output goes
    to ``log_path``, else to a temporary file (never next to the index, which may be shared)
    that is removed when the server stopped cleanly. Starting does not wait: call
    :meth:`wait_ready`, or use the process as a context manager, which waits for ``GET /health``
    (loading the index and its embedder takes seconds) and stops it on the way out.
    """

    def __init__(
        self,
        index_dir: str | Path,
        args: Sequence[str] = (),
        *,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
        hash_embedder: bool = False,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if hash_embedder:
            command = [sys.executable, str(LAUNCHER), "serve", str(index_dir)]
            full_env = child_env(**(env or {}))
        else:
            command = [sys.executable, "-m", "psirag.cli", "serve", str(index_dir)]
            command += ["--host", "127.0.0.1"]
            full_env = {**os.environ, **(env or {})}
        command += ["--port", str(self.port), *args]
        self._own_log = log_path is None
        self._log: IO[bytes]
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"psirag-serve-{self.port}-", suffix=".log")
            self.log_path = Path(name)
            self._log = os.fdopen(fd, "wb")
        else:
            self.log_path = log_path
            self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=full_env
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until ``GET /health`` answers 200; raise with the log's end if the child exits
        or does not answer in ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"psirag serve exited with {self.proc.returncode}:\n{self.log()[-4000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"psirag serve did not answer in {timeout:.0f} s:\n{self.log()[-4000:]}"
                )
            time.sleep(0.1)

    def log(self) -> str:
        """Everything the child has written so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def request(
        self, method: str, path: str, body: Any = None, key: str | None = None
    ) -> tuple[int, Any]:
        """One JSON call to the server (for tests that compare the page with the API)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, raw.decode(errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        if not self._log.closed:
            self._log.close()
        if self._own_log and self.proc.returncode in (0, -15):  # stopped by us: not needed
            self.log_path.unlink(missing_ok=True)

    close = stop

    def __enter__(self) -> ServerProcess:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_new_index(tmp_path: Path, *args: str) -> tuple[Path, ServerProcess]:
    """The tests' three-topic index built in ``tmp_path/index`` and ``psirag serve`` (with the
    HashEmbedder) started on it with ``args``, logging to ``tmp_path/serve.log``. Not waited
    for: call :meth:`ServerProcess.wait_ready`, and stop it."""
    folder = tmp_path / "index"
    build_index(folder)
    log = tmp_path / "serve.log"
    return folder, ServerProcess(folder, args, log_path=log, hash_embedder=True)


def wait_for_job(
    url: str, job_id: str, on_poll: Callable[[Any], None] | None = None, pause: float = 0.1
) -> dict[str, Any]:
    """Poll ``GET /jobs/{id}`` of the server at ``url`` on fresh connections until the job is
    done or failed (within 60 s); every poll must find it. ``on_poll`` sees each reply (an
    ``httpx.Response``)."""
    import httpx  # the server tests' client; not needed by every test that imports support

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = httpx.get(f"{url}/jobs/{job_id}", timeout=10)
        assert reply.status_code == 200, (reply.status_code, reply.text)
        if on_poll is not None:
            on_poll(reply)
        job: dict[str, Any] = reply.json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(pause)
    raise AssertionError(f"job {job_id} did not finish")


def ask_stream(url: str, body: dict[str, Any], timeout: float = 30) -> list[tuple[float, str]]:
    """``POST /ask`` of the server at ``url`` as server-sent events: each line with the seconds
    from the request to its arrival (read them with :func:`sse_events`)."""
    import httpx  # the server tests' client; not needed by every test that imports support

    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    headers = {"Accept": "text/event-stream"}
    with httpx.stream("POST", f"{url}/ask", json=body, headers=headers, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            lines.append((time.monotonic() - start, line))
    return lines


def sse_events(lines: list[tuple[float, str]]) -> list[tuple[float, str, str]]:
    """(arrival time, event name, data) from timed SSE lines; comments are skipped."""
    events = []
    name, data, first = "message", [], None
    for t, line in lines:
        if line.startswith(":"):
            continue
        if not line:
            if data:
                events.append((first if first is not None else t, name, "\n".join(data)))
            name, data, first = "message", [], None
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if first is None:
            first = t
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return events
