"""Helpers for driving the web page in a real browser: a ``psirag serve`` child process on
127.0.0.1, and Debian's Chromium launched through Playwright.

Shared by the browser tests, ``benchmarks/bench_web.py`` and ``scripts/web_screenshots.py``.
Playwright's own browser download (``playwright install``) is not used: the system Chromium is
(``apt-get install chromium``), found on PATH or named by ``PSIRAG_CHROMIUM``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psirag.errors import InputError

CHROMIUM_ENV = "PSIRAG_CHROMIUM"


def chromium_path() -> str | None:
    """The system Chromium: ``$PSIRAG_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on
    PATH; None when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_chromium(playwright: Any, **kwargs: Any) -> Any:
    """A headless Chromium browser from a started ``sync_playwright()``."""
    path = chromium_path()
    if path is None:
        raise InputError(
            "no Chromium found: install it (Debian: apt-get install -y chromium) or set "
            f"{CHROMIUM_ENV} to its executable"
        )
    args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    return playwright.chromium.launch(executable_path=path, headless=True, args=args, **kwargs)


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


class ServerProcess:
    """``psirag serve DIR`` in a child process on a free loopback port, until closed.

    ``extra`` are more command-line arguments (``--llm ...``, ``--api-key ...``). Waits for
    ``GET /health`` (loading the index and its embedder takes seconds).
    """

    def __init__(
        self,
        index_dir: str | Path,
        extra: Sequence[str] = (),
        *,
        env: dict[str, str] | None = None,
        startup_s: float = 120.0,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "psirag.cli", "serve", str(index_dir),
            "--host", "127.0.0.1", "--port", str(self.port), *extra,
        ]  # fmt: skip
        full_env = {**os.environ, **(env or {})}
        # the log goes to a temporary file (never next to the index, which may be shared)
        fd, name = tempfile.mkstemp(prefix=f"psirag-serve-{self.port}-", suffix=".log")
        self.log_path = Path(name)
        self._log = os.fdopen(fd, "wb")
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=full_env
        )
        deadline = time.monotonic() + startup_s
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(
                    f"psirag serve exited with {self.proc.returncode}:\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                log = self.log()
                self.close()
                raise RuntimeError(f"psirag serve did not answer in {startup_s:.0f} s:\n{log}")
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]

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

    def close(self) -> None:
        stop_process(self.proc)
        if not self._log.closed:
            self._log.close()
        if self.proc.returncode in (0, -15):  # stopped by us: the log is not needed
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "CHROMIUM_ENV",
    "ServerProcess",
    "chromium_path",
    "free_port",
    "launch_chromium",
    "stop_process",
]
