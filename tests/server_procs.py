"""Helpers for the server tests: a fixture index, a real server process on loopback, a scripted
LLM. Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from conftest import TOPICS, HashEmbedder

from psirag.config import IndexConfig
from psirag.index import Index
from psirag.ingest import documents_from_strings
from psirag.web.testing import free_port, stop_process

LAUNCHER = Path(__file__).resolve().parent / "server_fixture.py"
SRC = Path(__file__).resolve().parent.parent / "src"
LLM_SECRET = "sk-test-NEVER-SHOW-7f3a9c"
"""The LLM's API key given to the server process: it must appear in no response and no log."""

RETRIEVE_REPLY = (
    "Thought: Etna is a volcano; I need to know where it is.\nRetrieve: Mount Etna Sicily"
)
ANSWER_REPLY = (
    "Thought: The documents say Mount Etna is on the east coast of Sicily.\nAnswer: Sicily"
)
SUMMARY_REPLY = "Volcanoes such as Etna and Vesuvius erupt lava and ash."


def build_index(folder: Path) -> Index:
    texts = [" ".join(t) for t in TOPICS.values()]
    docs = documents_from_strings(texts, titles=list(TOPICS), ids=list(TOPICS))
    config = IndexConfig(chunk_tokens=12, embedder="test:hash")
    index = Index.build(docs, config, embedder=HashEmbedder())
    index.save(folder)
    return Index.load(folder, embedder=HashEmbedder())


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PSIRAG_API_KEY", None)
    env.pop("PSIRAG_LLM", None)
    env["OPENAI_API_KEY"] = LLM_SECRET
    env.update(extra)
    return env


class ServerProcess:
    """``psirag serve`` in a subprocess on 127.0.0.1; its output goes to a log file."""

    def __init__(self, index_dir: Path, log_path: Path, args: list[str], **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, str(LAUNCHER), "serve", str(index_dir)]
        command += ["--port", str(self.port), *args]
        self.proc = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=child_env(**env)
        )

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout}s: {self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


class ScriptedLLM:
    """Replies of the fake OpenAI server for the agent and the summarizer, with an optional
    delay and a count of calls in flight (to check the server's concurrency cap)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = 0.0

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "slowly" in text:  # for the timeout tests; not counted in flight
            time.sleep(6.0)
            return ANSWER_REPLY
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            if "Excerpts:" in text:
                return SUMMARY_REPLY
            if RETRIEVE_REPLY.splitlines()[1] in text:
                return ANSWER_REPLY
            return RETRIEVE_REPLY
        finally:
            with self.lock:
                self.in_flight -= 1


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
