"""Token streaming: ``chat_stream`` of the OpenAI-compatible backend against a scripted server
that streams server-sent events, the fallback for models that do not stream, the client's cache,
and the agent, whose result is the same whether its replies stream or not."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from typing import Any

import pytest
from support import NO_RETRY, FakeOpenAIServer, Reply, client_for, no_more_replies
from support.agents import QUESTION, SUB_QUESTION, FakeIndex

from psirag.agent import RetrieveAndAnswer
from psirag.llm import (
    ChatResult,
    GenerationParams,
    LLMClient,
    LLMResponseError,
    OpenAIChat,
    chat_streaming,
)

REPLY = "Thought: the Calder Group owns it.\nAnswer: Lisbon [2]"
ASK = [{"role": "user", "content": "where?"}]


pytestmark = pytest.mark.fake_llm(responder=lambda body: REPLY, usage=(12, 7))
"""Each test's ``server`` (tests/conftest.py) writes REPLY."""


def test_chat_stream_passes_pieces_on_and_returns_the_whole_reply(server: FakeOpenAIServer) -> None:
    model = OpenAIChat(server.base_url, "m", http=NO_RETRY)
    pieces: list[str] = []
    streamed = model.chat_stream(ASK, GenerationParams(), pieces.append)
    plain = model.chat(ASK, GenerationParams())
    assert len(pieces) > 5 and "".join(pieces) == streamed.text == plain.text == REPLY
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (12, 7)  # include_usage
    assert streamed.finish_reason == "stop"
    sent = server.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent.headers["Accept"] == "text/event-stream"
    assert server.requests[1]["stream"] is False


def test_a_server_that_ignores_stream_is_read_whole(server: FakeOpenAIServer) -> None:
    server.streams = False
    pieces: list[str] = []
    result = OpenAIChat(server.base_url, "m", http=NO_RETRY).chat_stream(
        ASK, GenerationParams(), pieces.append
    )
    assert pieces == [REPLY] and result.text == REPLY


def test_an_error_event_in_the_stream_is_an_llm_error(server: FakeOpenAIServer) -> None:
    event = json.dumps({"error": {"message": "out of memory"}})
    server.script(Reply(body=f"data: {event}\n\n".encode()))
    with pytest.raises(LLMResponseError, match="out of memory"):
        OpenAIChat(server.base_url, "m", http=NO_RETRY).chat_stream(
            ASK, GenerationParams(), lambda _: None
        )


def test_a_stream_cut_short_is_an_error_not_half_a_reply(server: FakeOpenAIServer) -> None:
    events = server.stream_events(Reply(content=REPLY), include_usage=False)
    server.script(Reply(body=b"".join(events[:4])))  # the role and three pieces, then the end
    with pytest.raises(LLMResponseError, match="ended its stream"):
        OpenAIChat(server.base_url, "m", http=NO_RETRY).chat_stream(
            ASK, GenerationParams(), lambda _: None
        )
    server.script(Reply(body=b"".join(events)))  # the same, whole
    whole: list[str] = []
    result = OpenAIChat(server.base_url, "m", http=NO_RETRY).chat_stream(
        ASK, GenerationParams(), whole.append
    )
    assert result.text == REPLY == "".join(whole)


class Plain:
    """A model without ``chat_stream``."""

    id = "plain"
    context_tokens = 4096

    def chat(self, messages: list[Any], params: GenerationParams) -> ChatResult:
        return ChatResult(REPLY)


def test_the_fallback_and_the_cache_give_the_reply_in_one_piece(
    server: FakeOpenAIServer, tmp_path: Any
) -> None:
    pieces: list[str] = []
    assert chat_streaming(Plain(), ASK, GenerationParams(), pieces.append).text == REPLY
    assert pieces == [REPLY]
    with LLMClient(OpenAIChat(server.base_url, "m", http=NO_RETRY), tmp_path / "c.db") as client:
        first: list[str] = []
        client.chat_stream(ASK, GenerationParams(), first.append)
        again: list[str] = []
        hit = client.chat_stream(ASK, GenerationParams(), again.append)
        assert len(first) > 1 and hit.cached and again == [REPLY] == ["".join(first)]
        assert client.usage["agent"]["calls"] == 1 and server.calls == 1


@pytest.mark.fake_llm(responder=no_more_replies)
def test_the_agent_streams_each_reply_and_answers_the_same(server: FakeOpenAIServer) -> None:
    replies = (
        f"Thought: the hotel is owned by the Calder Group.\nRetrieve: {SUB_QUESTION}",
        "Thought: the Calder Group's head office is in Lisbon.\nAnswer: Lisbon [3]",
    )
    server.script(*replies)
    plain = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    server.script(*replies)
    heard: list[tuple[int, str]] = []
    streamed = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(
        QUESTION, on_token=lambda call, text: heard.append((call, text))
    )
    assert streamed.to_dict() == plain.to_dict()
    assert streamed.answer == "Lisbon" and [c.label for c in streamed.citations] == [3]
    for call, reply in enumerate(replies):
        assert "".join(t for c, t in heard if c == call) == reply
    assert len(heard) > 10
    assert all(r["stream"] is True for r in server.requests[2:])
    assert all(r["stream"] is False for r in server.requests[:2])


class FakeLlama:
    """The part of ``llama_cpp.Llama`` psirag calls, writing :data:`REPLY` word by word (the
    library is an external dependency, not installed in every test environment)."""

    def __init__(self, **kwargs: Any) -> None:
        self.calls: list[dict[str, Any]] = []

    def create_chat_completion(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if not kwargs.get("stream"):
            choice = {"message": {"content": REPLY}, "finish_reason": "stop"}
            return {"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 8}}
        words = [w + " " for w in REPLY.split(" ")]
        words[-1] = words[-1].rstrip(" ")
        chunks = [{"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}]
        chunks += [{"choices": [{"delta": {"content": w}, "finish_reason": None}]} for w in words]
        chunks.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
        return iter(chunks)


def test_llama_cpp_streams_the_same_reply(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import sys
    import types

    from psirag.llm.llamacpp import LlamaCppChat

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF")
    model = LlamaCppChat(weights, n_threads=1)
    pieces: list[str] = []
    streamed = model.chat_stream(ASK, GenerationParams(), pieces.append)
    plain = model.chat(ASK, GenerationParams())
    assert len(pieces) > 5 and "".join(pieces) == streamed.text == plain.text == REPLY
    assert streamed.finish_reason == "stop" and streamed.completion_tokens == len(pieces)
    calls = model._llm.calls
    assert calls[0]["stream"] is True and "stream" not in calls[1]
    assert calls[0]["repeat_penalty"] == calls[1]["repeat_penalty"]


class CutOffServer:
    """A raw loopback server whose every answer is a 200 that promises 1,000 bytes, sends one
    streamed piece and resets the connection: a connection lost in the middle of a reply."""

    PIECE = b'data: {"choices": [{"index": 0, "delta": {"content": "Thought: "}}]}\n\n'

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.recv(65536)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                conn.sendall(head + b"Content-Length: 1000\r\n\r\n" + self.PIECE)
                time.sleep(0.3)  # the client reads the piece and waits for more
                # then a reset (linger 0), which the client sees as a lost connection
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self.sock.close()


def test_a_reply_cut_off_after_pieces_went_out_is_not_retried() -> None:
    from psirag.http import HTTPCallError, HttpClient, HttpPolicy

    server = CutOffServer()
    try:
        policy = HttpPolicy(timeout=20, retries=2, backoff=0.01)
        client = HttpClient(
            f"http://127.0.0.1:{server.port}/v1/chat/completions",
            what="LLM",
            policy=policy,
            api_key_env=None,
        )
        heard: list[bytes] = []
        with pytest.raises(HTTPCallError):
            client.post_json({"stream": True}, on_data=heard.append)
        # a retry would pass the same pieces on again: one attempt only
        assert server.connections == 1 and b"".join(heard) == CutOffServer.PIECE
    finally:
        server.close()
