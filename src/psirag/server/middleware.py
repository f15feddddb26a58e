"""The server's ASGI middleware: request limits (413/414), the API key (401) and CORS, and the
OpenAPI note that requests need the key. :func:`install_middleware` stacks them in order."""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psirag.server.errors import PayloadTooLargeError, error_body
from psirag.server.settings import ServerSettings

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DOCS_ASSETS = "/docs/assets"
"""Where the Swagger UI's files are served (without a key)."""


async def _send_json(send: Send, status: int, body: dict[str, Any], headers: Any = ()) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class LimitsMiddleware:
    """413 for a body over ``max_body_bytes`` (by its Content-Length, or counted while it
    streams in), 414 for a URL over ``max_url_bytes``."""

    def __init__(self, app: ASGIApp, max_body: int, max_url: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_url = max_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        url_bytes = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if url_bytes > self.max_url:
            await _send_json(
                send,
                414,
                error_body("URITooLong", f"the URL is over the limit of {self.max_url} bytes"),
            )
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_large = error_body(
            "PayloadTooLarge",
            f"the request body is over the limit of {self.max_body:,} bytes "
            "(psirag serve --max-body-bytes)",
        )
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size > self.max_body:
                await _send_json(send, 413, too_large)
                return
        seen = 0
        limit = self.max_body

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLargeError(too_large["error"]["message"])
            return message

        await self.app(scope, counted, send)


class AuthMiddleware:
    """Every request except the exempt paths must carry the key: ``Authorization: Bearer KEY``
    or ``X-API-Key: KEY``, compared in constant time."""

    def __init__(self, app: ASGIApp, key: str, exempt: Callable[[str], bool]) -> None:
        self.app = app
        self.key = key.encode()
        self.exempt = exempt

    def _given(self, scope: Scope) -> bytes | None:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    return token.strip()
            elif name == b"x-api-key":
                return value.strip()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS" and any(
            name == b"access-control-request-method" for name, _ in scope.get("headers") or []
        ):
            await self.app(scope, receive, send)  # a CORS preflight carries no credentials
            return
        given = self._given(scope)
        if given is None or not hmac.compare_digest(given, self.key):
            message = (
                "this server needs an API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'"
                if given is None
                else "the API key is wrong"
            )
            await _send_json(
                send,
                401,
                error_body("Unauthorized", message),
                headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        await self.app(scope, receive, send)


def install_middleware(app: FastAPI, settings: ServerSettings, *, web_page: bool) -> None:
    """The limits, the key check and CORS, as ``settings`` asks. ``web_page``: the page and its
    static files are served (they need no key, as the page asks for it)."""

    def exempt(path: str) -> bool:
        """/health, the API description and the static files of the docs and the web page."""
        if path in settings.exempt_paths or path in ("/openapi.json", "/docs"):
            return True
        if path.startswith(DOCS_ASSETS + "/"):
            return True
        return web_page and (path == "/" or path.startswith("/static/"))

    # Added innermost first: CORS outside auth (a 401 still carries CORS headers), auth outside
    # the limits (an unauthenticated client learns nothing about them).
    app.add_middleware(
        LimitsMiddleware, max_body=settings.max_body_bytes, max_url=settings.max_url_bytes
    )
    if settings.api_key is not None:
        app.add_middleware(AuthMiddleware, key=settings.api_key, exempt=exempt)
        declare_bearer_auth(app)
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=[
                "Authorization",
                "X-API-Key",
                "Content-Type",
                "Accept",
                "Mcp-Session-Id",
                "Mcp-Protocol-Version",
            ],
            expose_headers=["Mcp-Session-Id"],
        )


def declare_bearer_auth(app: FastAPI) -> None:
    """Say in the OpenAPI schema that requests need the key, so /docs offers "Authorize"."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "apiKey": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"apiKey": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


WORKER_HEADER = "X-Psirag-Worker"
"""With ``psirag serve --workers N``: the process id of the worker that answered."""


class WorkerHeaderMiddleware:
    """Names the answering worker (its pid) on every HTTP response, so a client or a test can
    see how requests spread over the workers."""

    def __init__(self, app: ASGIApp) -> None:
        import os

        self.app = app
        self.pid = str(os.getpid()).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (WORKER_HEADER.lower().encode(), self.pid)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_header)


def install_worker_header(app: FastAPI) -> None:
    """:class:`WorkerHeaderMiddleware`, outermost (added last)."""
    app.add_middleware(WorkerHeaderMiddleware)


__all__ = [
    "DOCS_ASSETS",
    "WORKER_HEADER",
    "AuthMiddleware",
    "LimitsMiddleware",
    "WorkerHeaderMiddleware",
    "declare_bearer_auth",
    "install_middleware",
    "install_worker_header",
]
