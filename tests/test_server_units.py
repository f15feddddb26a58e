"""The server's parts that need no process: settings checks, the batching embedder, the index
reference swap, the chat question and citations, the job runner."""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder

from psirag.errors import InputError
from psirag.server.jobs import JobRunner
from psirag.server.settings import ServerSettings, is_loopback
from psirag.server.state import BatchingEmbedder, GatedLLM, IndexHolder


def test_loopback_hosts() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.5", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.org"))


def test_settings_refuse_an_exposed_host_without_a_key() -> None:
    with pytest.raises(InputError, match="--insecure"):
        ServerSettings(host="0.0.0.0").check()
    ServerSettings(host="0.0.0.0", api_key="k").check()
    ServerSettings(host="0.0.0.0", insecure=True).check()
    with pytest.raises(InputError, match="empty"):
        ServerSettings(api_key="  ").check()
    with pytest.raises(InputError, match="--port"):
        ServerSettings(port=70000).check()


def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from psirag.cli import build_parser
    from psirag.cli.serve import settings_from

    args = build_parser().parse_args(["serve", "idx", "--host", "0.0.0.0"])
    monkeypatch.delenv("PSIRAG_API_KEY", raising=False)
    with pytest.raises(InputError, match="PSIRAG_API_KEY"):
        settings_from(args)
    monkeypatch.setenv("PSIRAG_API_KEY", "from-env")
    assert settings_from(args).api_key == "from-env"
    given = build_parser().parse_args(["serve", "idx", "--api-key", "flag"])
    assert settings_from(given).api_key == "flag"  # the flag wins over the environment


def test_the_default_retrieval_budget_is_a_count_or_auto() -> None:
    from psirag.cli import build_parser
    from psirag.cli.serve import settings_from

    assert settings_from(build_parser().parse_args(["serve", "idx"])).max_retrievals == 1
    args = build_parser().parse_args(["serve", "idx", "--max-retrievals", "auto"])
    assert settings_from(args).max_retrievals == "auto"
    with pytest.raises(InputError, match="--max-retrievals"):
        ServerSettings(max_retrievals=11).check()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "idx", "--max-retrievals", "lots"])


class _CountingEmbedder(HashEmbedder):
    """HashEmbedder that records each call's size and fails if called from two threads."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []
        self.busy = threading.Lock()

    def embed(self, texts, *, progress=False, desc="embedding"):  # type: ignore[no-untyped-def]
        if not self.busy.acquire(blocking=False):
            raise AssertionError("the model was called from two threads at once")
        try:
            time.sleep(0.02)
            self.calls.append(len(texts))
            return super().embed(texts)
        finally:
            self.busy.release()


def embed_each_in_a_thread(
    batching: BatchingEmbedder, texts: list[str], gate: threading.Barrier | None = None
) -> None:
    """Embed each text from a thread of its own (released together by ``gate``), close the
    embedder, and check each caller got its own text's vector."""
    out: dict[int, np.ndarray] = {}

    def one(i: int) -> None:
        if gate is not None:
            gate.wait()
        out[i] = batching.embed([texts[i]])[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batching.close()
    expected = HashEmbedder().embed(texts)
    assert all(np.allclose(out[i], expected[i]) for i in range(len(texts)))


def test_batching_embedder_serialises_and_batches() -> None:
    inner = _CountingEmbedder()
    batching = BatchingEmbedder(inner)
    texts = [f"query number {i} about volcanoes" for i in range(24)]
    embed_each_in_a_thread(batching, texts)
    assert sum(inner.calls) == len(texts)
    assert len(inner.calls) < len(texts)  # concurrent queries shared forward passes
    assert batching.id == inner.id and batching.dim == inner.dim


def test_batching_embedder_hands_errors_to_the_caller() -> None:
    class Broken(HashEmbedder):
        def embed(self, texts, *, progress=False, desc="embedding"):  # type: ignore[no-untyped-def]
            raise RuntimeError("model failed")

    batching = BatchingEmbedder(Broken())
    with pytest.raises(RuntimeError, match="model failed"):
        batching.embed(["x"])
    batching.close()


def test_query_vectors_come_from_a_bounded_lru() -> None:
    inner = _CountingEmbedder()
    batching = BatchingEmbedder(inner, cache_size=2)
    first = batching.embed(["volcano", "river"])
    again = batching.embed(["river", "volcano"])
    assert inner.calls == [2]  # the repeat never reached the model
    assert np.array_equal(again, first[::-1])
    batching.embed(["bread"])  # a third query evicts the least recently used ("river")
    batching.embed(["volcano"])
    assert inner.calls == [2, 1]
    batching.embed(["river"])
    assert inner.calls == [2, 1, 1] and len(batching.cache) == 2
    assert batching.cache.hits == 3 and batching.cache.misses == 4
    batching.embed([])
    again[:] = 0.0  # a caller changing its rows changes nobody else's
    assert np.array_equal(batching.embed(["volcano"])[0], first[0])
    batching.close()


def test_a_lone_query_does_not_wait_for_the_micro_batch() -> None:
    """With a 5 s batching window a single query still returns at once: the worker waits only
    for callers already inside embed()."""
    batching = BatchingEmbedder(HashEmbedder(), max_wait=5.0)
    started = time.monotonic()
    for i in range(3):
        batching.embed([f"query {i}"])
    assert time.monotonic() - started < 2.5
    batching.close()


def test_callers_arriving_together_share_one_forward_pass() -> None:
    """A generous window: 16 callers released together are embedded in few model calls, and
    each gets its own vector."""
    inner = _CountingEmbedder()
    batching = BatchingEmbedder(inner, max_wait=1.0, cache_size=0)
    texts = [f"question {i} about rivers" for i in range(16)]
    embed_each_in_a_thread(batching, texts, threading.Barrier(len(texts)))
    assert sum(inner.calls) == 16 and len(inner.calls) <= 3


def test_index_holder_publishes_new_generations() -> None:
    old, new = object(), object()
    holder = IndexHolder(old, Path("idx"))
    taken = holder.get()  # what a running request holds
    assert taken.number == 1 and taken.index is old
    published = holder.publish(new)
    assert published.number == 2 and holder.get().index is new
    assert taken.index is old  # the running request keeps its generation


def test_gated_llm_caps_concurrency() -> None:
    class Slow:
        id = "slow"
        context_tokens = 4096

        def __init__(self) -> None:
            self.usage: dict[str, dict[str, float]] = {}
            self.now = 0
            self.peak = 0
            self.lock = threading.Lock()

        def chat(self, messages, params, stage="agent"):  # type: ignore[no-untyped-def]
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            time.sleep(0.05)
            with self.lock:
                self.now -= 1
            return stage

        def count_tokens(self, text: str) -> int:
            return len(text)

    slow = Slow()
    gated = GatedLLM(slow, 2)
    threads = [threading.Thread(target=gated.chat, args=([], None)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert slow.peak == 2 and gated.count_tokens("abc") == 3


def test_chat_question_and_citations() -> None:
    pytest.importorskip("fastapi")
    from psirag.server.openai_api import ChatMessage, question_from, reply_text

    msgs = [
        ChatMessage(role="system", content="be nice"),
        ChatMessage(role="user", content="Tell me about Etna."),
        ChatMessage(role="assistant", content="Etna is a volcano. " * 40),
        ChatMessage(role="user", content=[{"type": "text", "text": "Where is it?"}]),
    ]
    question = question_from(msgs)
    assert question.startswith("Where is it?\n\nEarlier in this conversation:\nuser: Tell me")
    assert "be nice" not in question and len(question) < 700  # earlier turns are cut short
    with pytest.raises(InputError, match="user"):
        question_from([ChatMessage(role="system", content="x")])
    cites = [
        {
            "n": 1,
            "text": "Etna is on Sicily.",
            "title": "",
            "document": "e",
            "chunk": 3,
            "span": [5, 9],
            "page": 4,
        },
    ]
    # The markers are the verified citations, numbered as the sources list: no guessing.
    text = reply_text("Sicily", cites)
    assert text == "Sicily [1]\n\nSources:\n[1] e (e, chunk 3, chars 5-9, page 4)"
    assert reply_text("Sicily", []) == "Sicily"  # no citation: no markers, no sources list


def test_job_runner_runs_one_at_a_time() -> None:
    runner = JobRunner()
    running = threading.Lock()
    seen: list[str] = []

    def work(job):  # type: ignore[no-untyped-def]
        assert running.acquire(blocking=False), "two writes ran at once"
        try:
            job.progress(1, 2)
            time.sleep(0.02)
            seen.append(job.id)
            return {"ok": True}
        finally:
            running.release()

    def fail(job):  # type: ignore[no-untyped-def]
        raise ValueError("bad document")

    jobs = [runner.submit("add", work) for _ in range(3)] + [runner.submit("remove", fail)]
    deadline = time.monotonic() + 5
    while any(j.finished is None for j in jobs) and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.close()
    assert seen == [j.id for j in jobs[:3]]
    assert all(j.status == "done" and j.result == {"ok": True} for j in jobs[:3])
    assert jobs[3].status == "failed" and jobs[3].error == "ValueError: bad document"
    body = runner.get(jobs[0].id).to_dict()  # type: ignore[union-attr]
    assert body["progress"] == {"done": 1, "total": 2} and body["kind"] == "add"


def test_serve_help_needs_no_server_extra() -> None:
    from psirag.cli import build_parser

    args = build_parser().parse_args(["serve", "DIR", "--cors-origin", "a", "--cors-origin", "b"])
    assert isinstance(args, argparse.Namespace) and args.cors_origins == ["a", "b"]
    assert args.request_timeout == ServerSettings.request_timeout


def test_unexpected_errors_are_json_without_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient
    from support import build_index

    from psirag.server.app import create_app

    index = build_index(tmp_path / "index")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals /home/x/file.py")

    index.search = broken  # type: ignore[method-assign]
    app = create_app(tmp_path / "index", index=index, mcp=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/search", json={"query": "lava"})
        assert response.status_code == 500
        body = response.json()
        assert body["error"]["type"] == "InternalError"
        assert "secret internals" not in response.text and "Traceback" not in response.text
        # A chat turn without text (a tool call) is accepted; the last user turn is answered.
        no_llm = client.post(
            "/v1/chat/completions",
            json={
                "model": "psirag",
                "max_tokens": 100000,
                "messages": [
                    {"role": "assistant", "content": None},
                    {"role": "user", "content": "lava?"},
                ],
            },
        )
        assert no_llm.status_code == 503  # got past the checks to the missing LLM
        assert no_llm.json()["error"]["type"] == "LLMNotConfiguredError"
