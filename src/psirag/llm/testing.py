"""A scriptable OpenAI-compatible server on 127.0.0.1, for tests of anything that calls an LLM.

A real HTTP server in a thread (not a mock), so tests exercise the real client code: sockets,
timeouts, status codes, JSON parsing. Replies come from a queue of scripted :class:`Reply` objects
first, then from a ``responder`` function of the request body. Every request is recorded.

    with FakeOpenAIServer(responder=lambda body: "Answer: Delhi") as server:
        model = OpenAIChat(server.base_url, "fake")
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. ``content`` becomes a chat completion; ``body`` (dict, str or bytes)
    is sent verbatim instead when given. ``delay`` seconds pass before anything is sent."""

    content: str | None = None
    status: int = 200
    body: dict[str, Any] | str | bytes | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


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


Responder = Callable[[dict[str, Any]], "str | Reply"]


def _default_responder(body: dict[str, Any]) -> str:
    return "ok"


def echo_prompt(body: dict[str, Any], *, whole: bool = False) -> str:
    """Echo mode (a responder): reply with the request's last user message verbatim, or with every
    message's text when ``whole``. It plays a model that repeats its prompt, documents and all, so
    tests can check that nothing a document says becomes the agent's answer."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if not whole:
        messages = [m for m in messages if m.get("role") == "user"][-1:]
    return "\n\n".join(str(m.get("content") or "") for m in messages)


class FakeOpenAIServer:
    """Serves ``POST /v1/chat/completions`` on a free loopback port until closed."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder = responder or _default_responder
        self.requests: list[dict[str, Any]] = []
        """Each request: {"path", "body" (parsed JSON or None), "headers" (dict)}."""
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
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
                with server._lock:
                    server.requests.append(
                        {"path": self.path, "body": body, "headers": dict(self.headers)}
                    )
                    scripted = server._script.popleft() if server._script else None
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "unknown path"}}', {})
                    return
                reply = scripted if scripted is not None else server.responder(body or {})
                if isinstance(reply, str):
                    reply = Reply(content=reply)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.body is not None:
                    payload = reply.body
                    if isinstance(payload, dict):
                        payload = json.dumps(payload)
                    data = payload.encode() if isinstance(payload, str) else payload
                else:
                    data = json.dumps(
                        completion(reply.content or "", finish=reply.finish_reason)
                    ).encode()
                self._send(reply.status, data, reply.headers)

            def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test); nothing to do

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self.port = int(self._httpd.server_address[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def script(self, *replies: Reply | str) -> None:
        """Queue replies, used in order before the responder."""
        with self._lock:
            self._script.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)

    @property
    def calls(self) -> int:
        with self._lock:
            return len(self.requests)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FakeOpenAIServer", "Reply", "completion", "echo_prompt"]
