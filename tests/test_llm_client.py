"""LLMClient: retries, the SQLite response cache, accounting, bounded concurrency."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import FakeOpenAIServer, Reply

from psirag.http import HttpPolicy
from psirag.llm import (
    ChatModel,
    GenerationParams,
    LLMClient,
    LLMConnectionError,
    LLMHTTPError,
    LLMResponseError,
    OpenAIChat,
    ResponseCache,
    cache_key,
)
from psirag.llm.base import ChatResult

PARAMS = GenerationParams(max_tokens=32)


def msgs(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


pytestmark = pytest.mark.fake_llm(
    responder=lambda body: "reply to " + body["messages"][-1]["content"]
)
"""Each test's ``server`` (tests/conftest.py) answers with the last message it was sent."""


FAST = HttpPolicy(timeout=10, backoff=0.01)
"""Retries without the default's seconds of backoff."""


def make_client(server, tmp_path: Path | None, **kw) -> LLMClient:
    cache = tmp_path / "cache.sqlite" if tmp_path is not None else None
    return LLMClient(OpenAIChat(server.base_url, "m", http=kw.pop("http", FAST)), cache, **kw)


def test_429_then_success_is_retried_and_counted(server, tmp_path):
    server.script(Reply(status=429, body={"error": {"message": "busy"}}), "fine")
    client = make_client(server, tmp_path)
    assert client.chat(msgs(), PARAMS).text == "fine"
    assert server.calls == 2
    usage = client.usage["agent"]
    assert usage["calls"] == 1 and usage["retries"] == 1 and usage["failed"] == 0


def test_500_retried_then_raised(server, tmp_path):
    server.script(*[Reply(status=500, body="down")] * 4)
    client = make_client(server, tmp_path, http=HttpPolicy(retries=3, backoff=0.01))
    with pytest.raises(LLMHTTPError, match="gave up after 4 attempts") as info:
        client.chat(msgs(), PARAMS, stage="abstracts")
    assert info.value.status == 500 and info.value.retries == 3
    assert server.calls == 4
    usage = client.usage["abstracts"]
    assert usage["failed"] == 1 and usage["calls"] == 0 and usage["retries"] == 3
    assert len(client.cache) == 0


def test_400_is_not_retried(server, tmp_path):
    server.script(Reply(status=400, body={"error": {"message": "bad request"}}))
    client = make_client(server, tmp_path)
    with pytest.raises(LLMHTTPError, match="bad request"):
        client.chat(msgs(), PARAMS)
    assert server.calls == 1


def test_malformed_json_is_not_retried_nor_cached(server, tmp_path):
    server.script(Reply(body="not json"))
    client = make_client(server, tmp_path)
    with pytest.raises(LLMResponseError):
        client.chat(msgs(), PARAMS)
    assert server.calls == 1 and len(client.cache) == 0


def test_connection_refused_is_retried(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = HttpPolicy(retries=2, backoff=0.01)
    client = LLMClient(OpenAIChat(f"http://127.0.0.1:{port}/v1", "m", http=policy), None)
    with pytest.raises(LLMConnectionError, match="gave up after 3 attempts"):
        client.chat(msgs(), PARAMS)
    assert client.usage["agent"]["retries"] == 2


def test_cache_hit_skips_the_server(server, tmp_path):
    client = make_client(server, tmp_path)
    first = client.chat(msgs("q"), PARAMS)
    second = client.chat(msgs("q"), PARAMS)
    assert server.calls == 1
    assert second.text == first.text == "reply to q"
    assert second.cached and not first.cached
    assert (second.prompt_tokens, second.completion_tokens) == (10, 5)
    assert client.usage["agent"]["calls"] == 1 and client.usage["agent"]["cached"] == 1
    # Different params or messages are different keys.
    client.chat(msgs("q"), GenerationParams(max_tokens=33))
    client.chat(msgs("q2"), PARAMS)
    assert server.calls == 3
    # A fresh client (a re-run) over the same file pays nothing.
    client.close()
    again = make_client(server, tmp_path)
    assert again.chat(msgs("q"), PARAMS).cached and server.calls == 3


def test_empty_answer_is_returned_but_not_cached(server, tmp_path):
    server.script(Reply(content="   "), "now a real answer")
    client = make_client(server, tmp_path)
    assert client.chat(msgs(), PARAMS).text.strip() == ""
    assert len(client.cache) == 0
    assert client.chat(msgs(), PARAMS).text == "now a real answer"
    assert server.calls == 2 and len(client.cache) == 1


def test_failed_call_is_not_cached(server, tmp_path):
    server.script(Reply(status=503, body="overloaded"))
    client = make_client(server, tmp_path, http=HttpPolicy(retries=0))
    with pytest.raises(LLMHTTPError):
        client.chat(msgs(), PARAMS)
    assert len(client.cache) == 0
    assert client.chat(msgs(), PARAMS).text == "reply to hello"
    assert server.calls == 2


def test_api_key_never_reaches_the_cache_file(server, tmp_path, monkeypatch):
    secret = "sk-VERY-SECRET-4242"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    client = make_client(server, tmp_path)
    client.chat_many([msgs(f"q{i}") for i in range(5)], PARAMS)
    assert server.requests[0].headers["Authorization"] == f"Bearer {secret}"
    assert secret not in repr(client)
    client.close()
    files = list(tmp_path.iterdir())
    assert files
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


def test_cache_key_depends_on_model_messages_params():
    base = cache_key("openai:http://x/v1#m", msgs(), PARAMS)
    assert base == cache_key("openai:http://x/v1#m", msgs(), GenerationParams(max_tokens=32))
    assert base != cache_key("openai:http://x/v1#other", msgs(), PARAMS)
    assert base != cache_key("openai:http://x/v1#m", msgs("other"), PARAMS)
    assert base != cache_key("openai:http://x/v1#m", msgs(), GenerationParams(stop=("x",)))


def test_cache_is_shared_with_another_process(tmp_path):
    path = tmp_path / "shared.sqlite"
    cache = ResponseCache(path)
    code = (
        "from psirag.llm.client import ResponseCache\n"
        "from psirag.llm.base import ChatResult\n"
        f"c = ResponseCache({str(path)!r})\n"
        "for i in range(50): c.put(f'k{i}', 'model', ChatResult(f'text {i}', 3, 4))\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.Popen([sys.executable, "-c", code], env={"PYTHONPATH": src})
    for i in range(50):  # write concurrently from this process
        cache.put(f"mine{i}", "model", ChatResult("x", 1, 1))
    assert proc.wait(timeout=60) == 0
    assert len(cache) == 100
    hit = cache.get("k7")
    assert hit is not None and hit.text == "text 7" and hit.cached
    mode = cache._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_chat_many_keeps_order_and_bounds_concurrency(tmp_path):
    active = 0
    peak = 0
    lock = threading.Lock()

    def slow(body):
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return "r:" + body["messages"][-1]["content"]

    with FakeOpenAIServer(responder=slow) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite", max_concurrency=3)
        results = client.chat_many([msgs(str(i)) for i in range(12)], PARAMS, stage="x")
        assert [r.text for r in results] == [f"r:{i}" for i in range(12)]
        assert 1 < peak <= 3
        again = client.chat_many([msgs(str(i)) for i in range(12)], PARAMS, stage="x")
        assert all(r.cached for r in again) and srv.calls == 12
        assert client.usage["x"]["calls"] == 12 and client.usage["x"]["cached"] == 12
        assert client.usage["x"]["prompt_tokens"] == 120
        assert client.usage["x"]["seconds"] > 0
        assert client.chat_many([], PARAMS) == []


def test_chat_many_failure_keeps_finished_work(tmp_path):
    def fail_on_5(body):
        text = body["messages"][-1]["content"]
        return Reply(status=400, body="no") if text == "5" else "r:" + text

    with FakeOpenAIServer(responder=fail_on_5) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite", max_concurrency=1)
        with pytest.raises(LLMHTTPError):
            client.chat_many([msgs(str(i)) for i in range(10)], PARAMS)
        # Calls after the failure were cancelled, finished ones cached.
        assert srv.calls == 6 and len(client.cache) == 5


class _Flaky:
    """A ChatModel without HTTP, to check the client works with any backend (and leaves retries
    to it: the client itself never repeats a call)."""

    id = "fake:flaky"
    context_tokens = 100

    def __init__(self) -> None:
        self.n = 0

    def chat(self, messages, params):
        self.n += 1
        if self.n == 1:
            raise LLMConnectionError("reset")
        return ChatResult("ok", 1, 1)


def test_client_works_with_any_chat_model():
    model = _Flaky()
    client = LLMClient(model, None)
    with pytest.raises(LLMConnectionError):
        client.chat(msgs(), PARAMS)
    assert client.chat(msgs(), PARAMS).text == "ok" and model.n == 2
    assert client.usage["agent"]["failed"] == 1 and client.usage["agent"]["calls"] == 1
    assert client.count_tokens("abcdef") == 2  # estimate: 3 bytes a token
    assert isinstance(client, ChatModel) and client.id == "fake:flaky"
    assert client.context_tokens == 100


def test_a_runner_gets_only_cache_misses_and_every_answer_is_cached_at_once(server, tmp_path):
    """with_runner (what a Ray build uses): hits answered here, misses sent to the runner, each
    answer stored as it arrives, so a runner failing halfway loses nothing it had returned."""
    client = LLMClient(OpenAIChat(server.base_url, "m"), tmp_path / "c.sqlite")
    client.chat(msgs("a"), PARAMS, stage="abstracts")  # paid the normal way, now cached
    sent: list[list[str]] = []

    def runner(calls, params):
        sent.append([c[-1]["content"] for c in calls])
        for pos in reversed(range(len(calls))):  # any order
            if calls[pos][-1]["content"] == "boom":
                raise LLMConnectionError("worker lost")
            yield pos, ChatResult("remote " + calls[pos][-1]["content"], 3, 2), 0.5

    remote = client.with_runner(runner)
    out = remote.chat_many([msgs("a"), msgs("b"), msgs("c")], PARAMS, stage="abstracts")
    assert [r.text for r in out] == ["reply to a", "remote b", "remote c"]
    assert [r.cached for r in out] == [True, False, False]
    assert sent == [["b", "c"]]
    with pytest.raises(LLMConnectionError):
        remote.chat_many([msgs("d"), msgs("boom"), msgs("e")], PARAMS, stage="abstracts")
    # "e" came back before the failure (reversed order) and is kept; the rerun sends the rest.
    sent.clear()
    with pytest.raises(LLMConnectionError):
        remote.chat_many([msgs("d"), msgs("boom"), msgs("e")], PARAMS, stage="abstracts")
    assert sent == [["d", "boom"]]
    usage = client.usage["abstracts"]  # the view shares the client's counters
    assert usage["calls"] == 4 and usage["failed"] == 2
    assert client.chat(msgs("c"), PARAMS, stage="abstracts").text == "remote c"
    assert server.calls == 1  # only the first, local call reached the server
