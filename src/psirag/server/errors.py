"""The server's errors and the one JSON shape every non-2xx answer has:
``{"error": {"type", "message"}}`` (a validation error adds ``fields``: each bad field with its
message). A traceback goes to the server log, never to the client."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from psirag.errors import EmbedderMismatchError, IndexFormatError, InputError, PsiragError
from psirag.llm.errors import LLMError

if TYPE_CHECKING:  # the web framework loads only when a server is built (see server/__init__)
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

log = logging.getLogger("psirag.server")

MAX_FIELD_ERRORS = 3
"""Bad fields named in a validation message."""
MAX_LISTED = 10
"""Problems an error body lists (its ``fields``) before it gives only their count: 20,000 bad
list items must not make a 2 MB answer."""


class ServerBusyError(PsiragError):
    """Too many asks are running or waiting (503, with ``Retry-After``)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PayloadTooLargeError(PsiragError):
    """A request body, URL or query is over the server's limit (413)."""


class RequestTimeoutError(PsiragError):
    """The request ran past the server's per-request timeout (504)."""


class NotFoundError(PsiragError):
    """A node, document or job id that does not exist (404)."""


class UnprocessableError(PsiragError):
    """A well-formed request whose value is out of range (422)."""


class NotImplementedYetError(PsiragError):
    """A feature this index object does not offer (501)."""


class LLMNotConfiguredError(PsiragError):
    """An endpoint needs an LLM and the server was started without ``--llm``."""


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def error_response(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    from fastapi.responses import JSONResponse

    return JSONResponse(error_body(kind, message, **extra), status_code=status, headers=headers)


_STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (PayloadTooLargeError, 413),
    (RequestTimeoutError, 504),
    (NotFoundError, 404),
    (UnprocessableError, 422),
    (NotImplementedYetError, 501),
    (LLMNotConfiguredError, 503),
    (LLMError, 502),
    (IndexFormatError, 500),
    (EmbedderMismatchError, 500),
    (InputError, 400),
    (PsiragError, 400),
)

_HTTP_KINDS = {
    400: "BadRequest",
    401: "Unauthorized",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    414: "URITooLong",
}


def exception_response(exc: BaseException, *, log_it: bool = True) -> JSONResponse:
    """The JSON error for any exception a route raises (what the user can fix, or a 500)."""
    if isinstance(exc, ServerBusyError):
        headers = {"Retry-After": str(exc.retry_after)}
        return error_response(503, "ServerBusyError", str(exc), headers=headers)
    for kind, status in _STATUS_OF:
        if isinstance(exc, kind):
            return error_response(status, type(exc).__name__, str(exc))
    if log_it:
        log.error("unexpected error", exc_info=(type(exc), exc, exc.__traceback__))
    return error_response(
        500, "InternalError", "the server failed on this request; its log says why"
    )


NOT_JSON = "request body is not valid JSON"
"""The message of every body that does not parse as JSON (400)."""


def field_errors(errors: Sequence[Any]) -> tuple[str, list[dict[str, str]]]:
    """A short message naming the first bad fields (and how many more there are), and the
    first :data:`MAX_LISTED` fields with their messages, from pydantic's error list (never its
    raw dump: no input values, no documentation links)."""
    fields = []
    for err in errors[:MAX_LISTED]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        fields.append({"field": where, "message": str(err.get("msg", "")).rstrip(".")})
    parts = [f"{f['field']}: {f['message']}" for f in fields[:MAX_FIELD_ERRORS]]
    more = len(errors) - len(parts)
    message = "invalid request: " + "; ".join(parts) + (f"; and {more:,} more" if more else "")
    return message, fields


def is_json_error(errors: Sequence[Any]) -> bool:
    return any(err.get("type") == "json_invalid" for err in errors)


def validation_response(errors: Sequence[Any]) -> JSONResponse:
    """The 400 of a body that is not JSON, or the 422 of one whose fields are wrong."""
    if is_json_error(errors):
        return error_response(400, "InvalidJSON", NOT_JSON)
    message, fields = field_errors(errors)
    extra: dict[str, Any] = {"fields": fields}
    if len(errors) > len(fields):
        extra["more_fields"] = len(errors) - len(fields)
    return error_response(422, "ValidationError", message, **extra)


def install_error_handlers(app: FastAPI) -> None:
    """Every error, the framework's own included, answers in psirag's JSON shape."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, PayloadTooLargeError):  # a body too large while read
            return exception_response(exc.__cause__)
        kind = _HTTP_KINDS.get(exc.status_code, "HTTPError")
        message = str(exc.detail) if exc.detail else kind
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; see /docs or /openapi.json"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, kind, message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(exc.errors())

    @app.exception_handler(PsiragError)
    async def psirag_error(request: Request, exc: PsiragError) -> JSONResponse:
        return exception_response(exc)

    @app.exception_handler(Exception)
    async def anything(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises it after this answer, so the server logs the traceback once.
        return exception_response(exc, log_it=False)


__all__ = [
    "NOT_JSON",
    "LLMNotConfiguredError",
    "NotFoundError",
    "NotImplementedYetError",
    "PayloadTooLargeError",
    "RequestTimeoutError",
    "UnprocessableError",
    "error_body",
    "error_response",
    "exception_response",
    "field_errors",
    "install_error_handlers",
    "validation_response",
]
