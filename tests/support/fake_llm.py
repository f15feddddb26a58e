"""The one fake OpenAI-compatible server of the tests and benchmarks, on 127.0.0.1, and the
scripts they give it.

A real HTTP server in a thread (not a mock), so tests exercise the real client code: sockets,
deadlines, status codes, JSON parsing. It serves ``POST /v1/chat/completions`` and
``POST /v1/embeddings``. Replies come from a queue of scripted :class:`Reply` objects first
(:meth:`FakeOpenAIServer.script`), then from ``responder(body)`` (chat) or ``embed(texts)``
(embeddings). A responder returns the assistant text, a :class:`Reply`, an HTTP error status
(``int``) or ``None`` (a 500): :func:`no_more_replies` is the responder of a server that says only
what the test scripted. Failure modes a :class:`Reply` can script: ``delay`` (a sleeping server),
``trickle`` (one byte every so many seconds), ``status`` with ``headers`` (a 429 with
``Retry-After``), ``pad_bytes`` (a huge body), ``drop`` (close the connection without an answer);
:func:`echo_prompt` answers with the prompt itself. ``streams`` and ``token_delay`` play a model
that streams, or not, and writes slowly.

With ``tls`` (a server-side ``ssl.SSLContext``) it serves HTTPS. Every request is recorded in
``requests``: each entry is the parsed JSON body (a dict, so ``server.requests[0]["messages"]``
works) with ``.path`` and ``.headers`` attributes.

    with FakeOpenAIServer(responder=lambda body: "Answer: Delhi") as server:
        model = OpenAIChat(server.base_url, "fake")

Tests get one from the fixtures in ``tests/conftest.py`` (``server``, ``llm``, ``fake_llm``);
benchmarks and scripts put ``tests/`` on ``sys.path`` and import it from ``support``. It lives
here, not in the installed package: it is a test tool, not part of psirag.
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from psirag.http import HttpPolicy
from psirag.llm import LLMClient, OpenAIChat


@dataclass
class Reply:
    """One scripted answer. ``content`` becomes a chat completion; ``body`` (dict, str or bytes)
    is sent verbatim instead when given. ``delay`` seconds pass before anything is sent; with
    ``trickle`` the body goes out one byte every ``trickle`` seconds; ``pad_bytes`` sends a body
    of that many bytes (streamed, never held in memory; with ``omit_length`` no Content-Length is
    sent, so the client can only find the size by reading); ``drop`` closes the connection at
    once."""

    content: str | None = None
    status: int = 200
    body: dict[str, Any] | str | bytes | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"
    trickle: float = 0.0
    trickle_head: bool = False
    """With ``trickle``: the status line and headers trickle too (not only the body)."""
    pad_bytes: int = 0
    omit_length: bool = False
    drop: bool = False


class Recorded(dict[str, Any]):
    """A request's JSON body, with the ``path`` and ``headers`` it came with."""

    path: str
    headers: dict[str, str]


def completion(
    content: str, prompt_tokens: int = 10, completion_tokens: int = 5, finish: str = "stop"
) -> dict[str, Any]:
    """An OpenAI chat-completion body."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


EMBED_DIM = 32


def bag_of_words(text: str, dim: int = EMBED_DIM) -> list[float]:
    """A deterministic hashed bag of words plus a constant (never a zero vector)."""
    vec = [0.0] * dim
    vec[-1] = 0.5
    for word in text.lower().split():
        h = hashlib.sha256(word.encode()).digest()
        vec[h[0] % (dim - 1)] += 1.0 if h[1] % 2 else -1.0
    return vec


Responder = Callable[[dict[str, Any]], "str | Reply | int | None"]
EmbedFn = Callable[[Sequence[str]], "list[list[float]] | Reply"]


def _default_responder(body: dict[str, Any]) -> str:
    return "ok"


def no_more_replies(body: dict[str, Any]) -> None:
    """The responder of a server that says only what the test scripted: once the script runs
    out, every chat request gets a 500."""
    return None


def _default_embed(texts: Sequence[str]) -> list[list[float]]:
    return [bag_of_words(t) for t in texts]


def pieces(text: str) -> list[str]:
    """``text`` cut into the pieces a streaming server would send: each word with the spaces
    after it (leading spaces stay a piece of their own); they join back into ``text``."""
    return re.findall(r"^\s+|\S+\s*", text)


def echo_prompt(body: dict[str, Any], *, whole: bool = False) -> str:
    """Echo mode (a responder): reply with the request's last user message verbatim, or with every
    message's text when ``whole``. It plays a model that repeats its prompt, documents and all, so
    tests can check that nothing a document says becomes the agent's answer."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not whole:
        messages = [m for m in messages if m.get("role") == "user"][-1:]
    return "\n\n".join(str(m.get("content") or "") for m in messages)


class FakeOpenAIServer:
    """Serves chat completions and embeddings on a free loopback port until closed.

    ``responder`` answers chat requests once the script is used up (default: ``"ok"``); it may
    be replaced while the server runs. ``model`` is the model name in :attr:`spec`."""

    def __init__(
        self,
        responder: Responder | None = None,
        usage: tuple[int, int] = (10, 5),
        *,
        embed: EmbedFn | None = None,
        tls: ssl.SSLContext | None = None,
        model: str = "m",
    ) -> None:
        self.responder: Responder = responder or _default_responder
        self.model = model
        self.streams = True
        """Answer ``stream: true`` with server-sent events (False: one JSON body, as a server
        that ignores ``stream`` does)."""
        self.token_delay = 0.0
        """Seconds between the pieces of a streamed reply (a model writing slowly); a reply not
        streamed waits as long for all its pieces before it is sent."""
        self.embed: EmbedFn = embed or _default_embed
        self.usage = usage
        self.requests: list[Recorded] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # silence
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                record = Recorded(body if isinstance(body, dict) else {})
                record.path = self.path
                record.headers = dict(self.headers)
                with server._lock:
                    server.requests.append(record)
                    scripted = server._script.popleft() if server._script else None
                path = self.path.rstrip("/")
                if path.endswith("/chat/completions"):
                    kind = "chat"
                elif path.endswith("/embeddings"):
                    kind = "embeddings"
                else:
                    self._send(Reply(status=404, body={"error": {"message": "unknown path"}}))
                    return
                reply = scripted if scripted is not None else server._answer(kind, record)
                streamed = kind == "chat" and record.get("stream") is True and server.streams
                if streamed and reply.content is not None and reply.status == 200:
                    self._stream(reply, record)
                    return
                # a model that does not stream takes as long to write the whole reply
                writing = server.token_delay * len(pieces(reply.content or ""))
                if kind == "chat" and writing and server._closing.wait(writing):
                    return
                self._send(reply)

            def _stream(self, reply: Reply, record: Recorded) -> None:
                """The reply as server-sent ``chat.completion.chunk`` events, one per piece,
                ``token_delay`` seconds apart."""
                if reply.delay and server._closing.wait(reply.delay):
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                options = record.get("stream_options") or {}
                words = len(pieces(reply.content or ""))
                events = server.stream_events(reply, bool(options.get("include_usage")))
                try:
                    for i, event in enumerate(events):
                        # each piece is written token_delay after the one before it
                        writing = 1 <= i <= words and server.token_delay
                        if writing and server._closing.wait(server.token_delay):
                            return
                        self.wfile.write(event)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, reply: Reply) -> None:
                if reply.drop:
                    self.close_connection = True
                    return
                if reply.delay and server._closing.wait(reply.delay):
                    return
                try:
                    if reply.pad_bytes:
                        self._send_padding(reply)
                        return
                    data = server._payload(reply)
                    if reply.trickle and reply.trickle_head:
                        head = (
                            f"HTTP/1.1 {reply.status} Scripted\r\n"
                            "Content-Type: application/json\r\n"
                            f"Content-Length: {len(data)}\r\n\r\n"
                        ).encode()
                        self._trickle(head + data, reply.trickle)
                        return
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if reply.trickle:
                        self._trickle(data, reply.trickle)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a deadline test); nothing to do

            def _trickle(self, data: bytes, seconds: float) -> None:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    if server._closing.wait(seconds):
                        return

            def _send_padding(self, reply: Reply) -> None:
                head, tail = b'{"pad": "', b'"}'
                total = max(reply.pad_bytes, len(head) + len(tail))
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                if reply.omit_length:
                    self.close_connection = True  # the end of the body is the end of the stream
                    self.send_header("Connection", "close")
                else:
                    self.send_header("Content-Length", str(total))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(head)
                left = total - len(head) - len(tail)
                block = b"x" * 65536
                try:
                    while left > 0 and not server._closing.is_set():
                        self.wfile.write(block[: min(left, len(block))])
                        left -= min(left, len(block))
                    self.wfile.write(tail)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading at its size cap

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return

        self._httpd = Server(("127.0.0.1", 0), Handler)
        if tls is not None:  # HTTPS, with the caller's certificate
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        self.base_url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _answer(self, kind: str, record: Recorded) -> Reply:
        if kind == "embeddings":
            texts = record.get("input", [])
            texts = [texts] if isinstance(texts, str) else list(texts)
            rows = self.embed(texts)
            if isinstance(rows, Reply):
                return rows
            # Answer out of order: clients must follow "index", not position.
            data = [{"object": "embedding", "index": i, "embedding": r} for i, r in enumerate(rows)]
            model = record.get("model", "fake")
            return Reply(body={"object": "list", "model": model, "data": data[::-1]})
        answer = self.responder(record)
        if answer is None:
            return Reply(status=500, body={"error": {"message": "scripted failure"}})
        if isinstance(answer, int):
            return Reply(status=answer, body={"error": {"message": "scripted failure"}})
        if isinstance(answer, str):
            return Reply(content=answer)
        return answer

    def _payload(self, reply: Reply) -> bytes:
        if reply.body is not None:
            payload = reply.body
            if isinstance(payload, dict):
                payload = json.dumps(payload)
            return payload.encode() if isinstance(payload, str) else payload
        prompt, done = self.usage
        return json.dumps(
            completion(reply.content or "", prompt, done, finish=reply.finish_reason)
        ).encode()

    def stream_events(self, reply: Reply, include_usage: bool) -> list[bytes]:
        """The SSE events of a streamed reply: a role chunk, one chunk per piece of the
        content (a word and the space after it), the finish chunk, usage if asked, [DONE]."""

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake"}
            return f"data: {json.dumps({**chunk, 'choices': [choice]})}\n\n".encode()

        events = [event({"role": "assistant", "content": ""})]
        events += [event({"content": piece}) for piece in pieces(reply.content or "")]
        events.append(event({}, reply.finish_reason))
        if include_usage:
            prompt, done = self.usage
            usage = {"prompt_tokens": prompt, "completion_tokens": done}
            usage["total_tokens"] = prompt + done
            events.append(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        return events

    def script(self, *replies: Reply | str) -> None:
        """Queue replies, used in order (on either endpoint) before the responders."""
        with self._lock:
            self._script.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)

    @property
    def pending_replies(self) -> list[str | None]:
        """The content of the scripted replies not sent yet, in order."""
        with self._lock:
            return [reply.content for reply in self._script]

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def model_spec(self, model: str | None = None) -> str:
        """The ``openai:<url>#<model>`` spec of this server (for --llm and --embedder); the
        model is :attr:`model` unless named."""
        return f"openai:{self.base_url}#{model or self.model}"

    @property
    def spec(self) -> str:
        """:meth:`model_spec` of :attr:`model`."""
        return self.model_spec()

    def last_user(self, i: int) -> str:
        """The last user message of request ``i``: the turn the model was answering."""
        users = [m["content"] for m in self.requests[i]["messages"] if m["role"] == "user"]
        return str(users[-1])

    def system(self, i: int) -> str:
        """The system message of request ``i``."""
        return str(self.requests[i]["messages"][0]["content"])

    def close(self) -> None:
        """Stop serving; sleeping and trickling handlers wake up and end."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


NO_RETRY = HttpPolicy(retries=0)
"""A scripted server that runs out of replies answers 500: fail at once, not after retries."""


def client_for(server: FakeOpenAIServer, **chat_options: Any) -> LLMClient:
    """An LLM client of the scripted server that never retries."""
    return LLMClient(OpenAIChat(server.base_url, "scripted", http=NO_RETRY, **chat_options), None)


LLM_SECRET = "sk-test-NEVER-SHOW-7f3a9c"
"""The LLM's API key given to the server process: it must appear in no response and no log."""

RETRIEVE_REPLY = (
    "Thought: Etna is a volcano; I need to know where it is.\nRetrieve: Mount Etna Sicily"
)
ANSWER_REPLY = (
    "Thought: The documents say Mount Etna is on the east coast of Sicily.\nAnswer: Sicily"
)
SUMMARY_REPLY = "Volcanoes such as Etna and Vesuvius erupt lava and ash."


def cite_sicily(messages: list[dict[str, Any]]) -> str:
    """:data:`ANSWER_REPLY` ending with the labels of the documents of the last user turn
    that say "Sicily", as a model cites its support (none: no labels)."""
    users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
    blocks = re.split(r"(?m)^\[(\d+)\] ", users[-1] if users else "")
    labels = [blocks[i] for i in range(1, len(blocks) - 1, 2) if "Sicily" in blocks[i + 1]]
    return ANSWER_REPLY + "".join(f" [{n}]" for n in labels[:2])


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
                return cite_sicily(messages)
            return RETRIEVE_REPLY
        finally:
            with self.lock:
                self.in_flight -= 1


__all__ = [
    "ANSWER_REPLY",
    "EMBED_DIM",
    "LLM_SECRET",
    "NO_RETRY",
    "RETRIEVE_REPLY",
    "SUMMARY_REPLY",
    "FakeOpenAIServer",
    "Recorded",
    "Reply",
    "ScriptedLLM",
    "bag_of_words",
    "cite_sicily",
    "client_for",
    "completion",
    "echo_prompt",
    "no_more_replies",
    "pieces",
]
