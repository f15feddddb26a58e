"""The answer streamed while the model writes it (``psirag.server.answer_stream``): the rules on
their own, then end to end through a real server process, the real agent and a scripted model on
127.0.0.1 that writes one word every few milliseconds, with the official ``openai`` client, the
``/ask`` event stream and the Ollama route. An accepted answer streams early and the streamed
text equals the reply that was not streamed; an answer the agent turns down is revised."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from psirag.server.answer_stream import REVISED, AnswerTap, settled_answer

RIGHT = "an active volcano on the east coast of Sicily"
WRONG = "the lost city of Atlantis somewhere under the sea"


def test_settled_answer_holds_back_what_may_change() -> None:
    assert settled_answer("Thought: it is on an island.\nRetrieve: Etna") is None
    assert settled_answer("Thought: I know.\nAns") is None  # no marker yet
    assert settled_answer("Thought: easy.\nAnswer: an active volc") == "an active"
    assert settled_answer("Answer: **on the east coast** of") == "on the east coast"
    assert settled_answer("Answer: Sicily, see [1") == "Sicily"  # labels and "see" held back
    assert settled_answer("Answer: 1887 (documents [2] and [4])") == ""
    assert settled_answer("Thought: it is on Sicily. The answer: Sicily") is None  # inline only
    assert settled_answer("Answer: " + "word " * 40, max_chars=50) is None  # over-long: none


def feed_all(tap: AnswerTap, call: int, reply: str) -> str:
    """``reply`` fed word by word as a model writes it; the answer text the tap let out."""
    words = reply.split(" ")
    return "".join(tap.feed(call, w if i == 0 else " " + w) for i, w in enumerate(words))


def test_tap_streams_an_accepted_answer_and_finishes_it() -> None:
    tap = AnswerTap()
    assert feed_all(tap, 0, "Thought: where?\nRetrieve: Mount Etna") == ""
    early = feed_all(tap, 1, f"Thought: the documents say so.\nAnswer: {RIGHT} [2][3]")
    assert early == "an active volcano on the east coast of"
    final = f"{RIGHT} [1][2]\n\nSources:\n[1] ..."
    rest, revised = tap.finish(final)
    assert not revised and early + rest == final


def test_tap_revises_an_answer_the_agent_asked_about_again() -> None:
    tap = AnswerTap()
    early = feed_all(tap, 0, f"Thought: I remember.\nAnswer: {WRONG} [1]")
    assert early.startswith("the lost city")
    # the agent checks the answer and calls the model again: nothing more goes out early
    assert feed_all(tap, 1, f"Thought: the documents say otherwise.\nAnswer: {RIGHT} [1]") == ""
    assert tap.finish(f"{RIGHT} [1]") == (f"{RIGHT} [1]", True)


def test_tap_revises_when_a_later_marker_wins() -> None:
    tap = AnswerTap()
    early = feed_all(tap, 0, "Answer: Catania in Sicily\nRetrieve: where is Catania")
    assert early == "Catania in"
    assert tap.stale
    assert tap.finish("Sicily")[1]


# ------------------------------------------------------------------------------ end to end
class EtnaModel:
    """The scripted model. ``Where is Mount Etna?``: a retrieval, then the right answer.
    ``What is Mount Etna?``: a wrong answer at once (from memory: no document says it), then,
    asked by the agent's check, the right one."""

    def __call__(self, body: dict[str, Any]) -> str:
        messages = body.get("messages") or []
        text = "\n".join(str(m.get("content", "")) for m in messages)
        answered = sum(1 for m in messages if m.get("role") == "assistant")
        if "What is Mount Etna?" in text and answered == 0:
            return f"Thought: I remember this one.\nAnswer: {WRONG} [1]"
        if "Where is Mount Etna?" in text and answered == 0:
            return "Thought: Etna is a volcano; where is it?\nRetrieve: Mount Etna Sicily"
        return f"Thought: The documents say where Mount Etna is.\nAnswer: {RIGHT} [1]"


TOKEN_DELAY = 0.03


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from support import FakeOpenAIServer, ServerProcess, build_index

    folder = tmp_path_factory.mktemp("answer-stream") / "wiki"
    build_index(folder)
    with FakeOpenAIServer(responder=EtnaModel()) as llm:
        llm.token_delay = TOKEN_DELAY
        args = ["--llm", f"openai:{llm.base_url}#fake", "--retries", "0"]
        with ServerProcess(folder, args, hash_embedder=True) as proc:
            yield proc.url


def openai_chat(server: str, question: str) -> tuple[str, list[tuple[float, str, str, bool]]]:
    """The plain reply, and the streamed chunks: (arrival s, thinking, content, revised)."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": question}]
    extra = {"max_retrievals": 1}
    plain = client.chat.completions.create(model="psirag", messages=messages, extra_body=extra)
    start = time.monotonic()
    chunks = []
    for chunk in client.chat.completions.create(
        model="psirag", messages=messages, stream=True, extra_body=extra
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        thinking = (delta.model_extra or {}).get("reasoning_content") or ""
        revised = bool((chunk.model_extra or {}).get("psirag_revised"))
        chunks.append((time.monotonic() - start, thinking, delta.content or "", revised))
    return str(plain.choices[0].message.content), chunks


def test_openai_answer_streams_while_written_and_equals_the_plain_reply(server: str) -> None:
    plain, chunks = openai_chat(server, "Where is Mount Etna?")
    content = "".join(c for _, _, c, _ in chunks)
    assert content == plain and plain.startswith(f"{RIGHT} [1]")
    assert not any(r for *_, r in chunks)
    written = [t for t, thinking, _, _ in chunks if thinking]
    answer_at = [t for t, _, c, _ in chunks if c]
    # the answer's first words came while the model was still writing the answer's reply:
    # at least five more pieces of it (TOKEN_DELAY apart) arrived after them
    assert sum(t > answer_at[0] for t in written) >= 5
    assert len([t for t in answer_at if t < written[-1]]) >= 5  # word by word, not in one go


def test_openai_answer_the_agent_turned_down_is_revised(server: str) -> None:
    plain, chunks = openai_chat(server, "What is Mount Etna?")
    content = "".join(c for _, _, c, _ in chunks)
    assert plain.startswith(f"{RIGHT} [1]")
    before, _, after = content.rpartition(REVISED)
    assert before.startswith("the lost city of Atlantis")  # streamed early, then revised
    assert after == plain
    assert [c for *_, c, r in chunks if r] == [REVISED]


def ask_events(server: str, question: str) -> list[tuple[str, Any]]:
    import httpx

    events: list[tuple[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{server}/ask",
        json={"query": question, "max_retrievals": 1},
        headers={"Accept": "text/event-stream"},
        timeout=60,
    ) as response:
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    return events


def test_ask_stream_sends_the_answer_as_written(server: str) -> None:
    events = ask_events(server, "Where is Mount Etna?")
    names = [n for n, _ in events]
    answer = events[-1][1]
    assert names[-1] == "answer" and answer["answer"] == RIGHT
    assert "answer_revised" not in names
    said = "".join(d["text"] for n, d in events if n == "answer_token")
    assert said == answer["answer"]
    last_call = max(d["call"] for n, d in events if n == "token")
    first = names.index("answer_token")
    later = [i for i, (n, d) in enumerate(events) if n == "token" and d["call"] == last_call]
    assert sum(i > first for i in later) >= 5  # sent while the final reply was written


def test_ask_stream_revises_a_turned_down_answer(server: str) -> None:
    events = ask_events(server, "What is Mount Etna?")
    names = [n for n, _ in events]
    assert names.count("answer_revised") == 1
    cut = names.index("answer_revised")
    early = "".join(d["text"] for n, d in events[:cut] if n == "answer_token")
    after = "".join(d["text"] for n, d in events[cut:] if n == "answer_token")
    assert early.startswith("the lost city") and after == events[-1][1]["answer"] == RIGHT


def test_ollama_stream_equals_the_plain_reply(server: str) -> None:
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=server)
    messages = [{"role": "user", "content": "What is Mount Etna?"}]
    plain = client.chat(model="psirag", messages=messages, stream=False)
    parts = list(client.chat(model="psirag", messages=messages, stream=True))
    content = "".join(p.message.content or "" for p in parts)
    assert content.rpartition(REVISED)[2] == plain.message.content
    assert content.startswith("the lost city")
