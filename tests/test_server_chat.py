"""The chat side of ``psirag serve``, end to end against a real server process on 127.0.0.1, a
real agent and a scripted LLM server that streams: the model's own citations, token streaming
through the official ``openai`` client, the Ollama-compatible API through the official
``ollama`` client, and the tidy shape of every 4xx."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import httpx
from support import (
    ANSWER_REPLY,
    RETRIEVE_REPLY,
    FakeOpenAIServer,
    ServerProcess,
    ask_stream,
    build_index,
    sse_events,
)

QUESTION = "Where is Mount Etna?"
INDEX_NAME = "wiki"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, llm: FakeOpenAIServer) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("chat") / INDEX_NAME
    build_index(folder)
    args = ["--llm", f"openai:{llm.base_url}#fake", "--retries", "0"]
    with ServerProcess(folder, args, hash_embedder=True) as proc:
        yield proc.url


@pytest.fixture
def slow_tokens(llm: FakeOpenAIServer) -> Iterator[float]:
    """The scripted model writes one piece every 50 ms while the test runs."""
    llm.token_delay = 0.05
    try:
        yield llm.token_delay
    finally:
        llm.token_delay = 0.0


def test_citations_are_the_models_own(server: str) -> None:
    body = httpx.post(f"{server}/ask", json={"query": QUESTION, "k": 4}, timeout=60).json()
    raw = body["steps"][-1]["raw"]
    assert raw.startswith(ANSWER_REPLY + " [")
    cites, evidence = body["citations"], body["evidence"]
    # exactly the labels the model wrote, each resolved to the passage shown under it
    assert [c["label"] for c in cites] == [int(n) for n in re.findall(r"\[(\d+)\]", raw)]
    assert body["stats"]["cited"] == len(cites) >= 1
    assert all("Sicily" in c["text"] and c["document"] == "volcanoes" for c in cites)
    for c in cites:  # provenance: the source fields, the page (none: not a PDF), the leaf
        assert c["passage_id"] == c["passage"] == c["id"]
        assert c["source"]["span"] == c["span"] and c["page"] is None and c["node"] >= 0
    assert [e["n"] for e in evidence] == [1, 2, 3, 4]  # the top-k apart, numbered alike
    assert {c["passage"] for c in cites} <= {p["id"] for s in body["steps"] for p in s["passages"]}


def test_openai_stream_equals_the_plain_reply(server: str, slow_tokens: float) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": QUESTION}]
    plain = client.chat.completions.create(model="psirag", messages=messages)
    start = time.monotonic()
    arrivals: list[tuple[float, str, str]] = []
    stream = client.chat.completions.create(
        model=f"{INDEX_NAME}:latest",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    last = None
    for chunk in stream:
        last = chunk
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        thinking = (delta.model_extra or {}).get("reasoning_content") or ""
        arrivals.append((time.monotonic() - start, thinking, delta.content or ""))
    content = "".join(c for _, _, c in arrivals)
    assert content == plain.choices[0].message.content  # the same reply, streamed
    assert content.startswith("Sicily [1]") and "Sources:\n[1]" in content
    # The model's output came piece by piece as it was written: both replies, in order.
    thinking = "".join(t for _, t, _ in arrivals)
    assert thinking == f"{RETRIEVE_REPLY}\n\n{plain_raw(server)}"
    pieces = [t for t, t_, _ in arrivals if t_]
    assert len(pieces) > 10
    first_content = next(t for t, _, c in arrivals if c)
    # incremental: the first piece came long before the answer (~20 pieces 50 ms apart)
    assert first_content - pieces[0] >= 10 * slow_tokens
    assert last is not None and last.usage is not None and last.usage.total_tokens > 0


def plain_raw(server: str) -> str:
    """The final reply the scripted model gives to QUESTION (its citation labels included)."""
    body = httpx.post(f"{server}/ask", json={"query": QUESTION}, timeout=60).json()
    return str(body["steps"][-1]["raw"])


def test_ollama_client(server: str, slow_tokens: float) -> None:
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server)
    assert [m.model for m in client.list().models] == ["psirag:latest", f"{INDEX_NAME}:latest"]
    messages = [{"role": "user", "content": QUESTION}]
    plain = client.chat(model="psirag", messages=messages, stream=False)
    assert plain.done and plain.message.content.startswith("Sicily [1]")
    raw = httpx.post(
        f"{server}/api/chat", json={"messages": messages, "stream": False}, timeout=60
    ).json()  # psirag's fields, which the client's types drop
    assert raw["message"]["content"] == plain.message.content
    assert raw["citations"][0]["n"] == 1 and len(raw["evidence"]) == 5
    parts = list(client.chat(model=f"{INDEX_NAME}:latest", messages=messages, stream=True))
    assert parts[-1].done and parts[-1].done_reason == "stop"
    assert "".join(p.message.content for p in parts) == plain.message.content
    thinking = [p.message.thinking for p in parts if p.message.thinking]
    assert len(thinking) > 10 and "".join(thinking).startswith(RETRIEVE_REPLY)
    quiet = list(client.chat(model="psirag", messages=messages, stream=True, think=False))
    assert not any(p.message.thinking for p in quiet)
    generated = client.generate(model="psirag", prompt=QUESTION, stream=False)
    assert generated.response == plain.message.content
    pieces = list(client.generate(model="psirag", prompt=QUESTION, stream=True))
    assert "".join(p.response for p in pieces) == plain.message.content
    assert client.generate(model="psirag", prompt="").done_reason == "load"
    for call in (
        lambda: client.chat(model="llama3", messages=messages),
        lambda: client.generate(model="llama3", prompt=QUESTION),
    ):
        with pytest.raises(ollama.ResponseError) as caught:
            call()
        assert caught.value.status_code == 404 and "not served here" in str(caught.value)
    assert httpx.get(f"{server}/api/version").json()["version"]


def test_unknown_model_is_404_on_the_openai_route(server: str) -> None:
    bad = httpx.post(
        f"{server}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": QUESTION}]},
    )
    assert bad.status_code == 404
    assert "'gpt-4o' is not served here" in bad.json()["error"]["message"]


def assert_tidy(response: httpx.Response, status: int) -> str:
    """The one error shape: ``{"error": {"type", "message"}}`` (and ``fields`` for a bad
    field), a short message with no pydantic dump in it."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert {"type", "message"} <= set(error) <= {"type", "message", "fields"}
    message = str(error["message"])
    assert len(message) < 300
    for leak in ("input_value", "errors.pydantic.dev", "validation error for", "Traceback"):
        assert leak not in message
    return message


@pytest.mark.parametrize(
    "path", ["/ask", "/search", "/documents", "/v1/chat/completions", "/api/chat"]
)
def test_a_body_that_is_not_json(server: str, path: str) -> None:
    response = httpx.post(
        f"{server}{path}", content=b"{'query': nope", headers={"content-type": "application/json"}
    )
    assert assert_tidy(response, 400).startswith("request body is not valid JSON")
    assert response.json()["error"]["type"] in ("InvalidJSON", "InputError")


def test_every_4xx_has_the_same_shape(server: str) -> None:
    message = assert_tidy(httpx.post(f"{server}/documents", json={"txt": "hello"}), 400)
    assert message == ("invalid request: text: Field required; txt: Extra inputs are not permitted")
    assert "id" in assert_tidy(httpx.post(f"{server}/documents", json={"text": "x", "id": 3}), 400)
    bad_k = httpx.post(f"{server}/search", json={"query": "x", "k": 0})
    assert (
        assert_tidy(bad_k, 422) == "invalid request: k: Input should be greater than or equal to 1"
    )
    assert bad_k.json()["error"]["fields"] == [
        {"field": "k", "message": "Input should be greater than or equal to 1"}
    ]
    assert_tidy(httpx.get(f"{server}/nodes/99999"), 404)
    assert_tidy(httpx.get(f"{server}/nowhere"), 404)
    assert_tidy(httpx.put(f"{server}/search"), 405)
    assert_tidy(httpx.post(f"{server}/api/chat", json={"model": "x", "messages": []}), 404)
    assert_tidy(httpx.post(f"{server}/api/chat", json={"messages": []}), 400)


def test_ask_stream_sends_tokens_then_the_answer(server: str, slow_tokens: float) -> None:
    lines = ask_stream(server, {"query": QUESTION}, timeout=60)
    events = [(name, json.loads(data)) for _, name, data in sse_events(lines)]
    names = [n for n, _ in events]
    answer = events[-1][1]
    assert names[-1] == "answer" and names.count("step") == 2
    steps = [d for n, d in events if n == "step"]
    for call, step in enumerate(steps):
        said = "".join(d["text"] for n, d in events if n == "token" and d["call"] == call)
        assert said == step["raw"]
    assert answer["answer"] == "Sicily" and answer["citations"]


def test_the_documented_models(server: str) -> None:
    listed = httpx.get(f"{server}/v1/models").json()["data"]
    assert [m["id"] for m in listed] == ["psirag", INDEX_NAME]
    tags = httpx.get(f"{server}/api/tags").json()["models"]
    assert [t["name"] for t in tags] == ["psirag:latest", f"{INDEX_NAME}:latest"]
