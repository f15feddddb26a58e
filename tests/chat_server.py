"""A real OpenAI-compatible chat endpoint on 127.0.0.1 for tests: it stands for the user's LLM
server, records every request, and answers with whatever ``reply(body)`` returns."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], "str | int | None"]


class ChatServer:
    """``reply(body)`` returns the assistant text, an HTTP error status, or None for a 500."""

    def __init__(self, reply: Reply, usage: tuple[int, int] = (11, 7)) -> None:
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests.append(body)
                    text = reply(body) if self.path == "/v1/chat/completions" else None
                if text is None or isinstance(text, int):
                    status = 500 if text is None else text
                    self._send(status, {"error": {"message": "scripted failure"}})
                    return
                message = {"role": "assistant", "content": text}
                self._send(
                    200,
                    {
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
