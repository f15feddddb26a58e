"""LLM failures, split by what the caller can do about them (retry, fix the URL, fix the server).

``retryable`` is what :class:`psirag.llm.client.LLMClient` reads to decide whether to try again:
transient trouble (timeouts, refused or dropped connections, 429, 5xx) is retried, a request the
server rejected for good (other 4xx) or an answer it cannot parse is not.
"""

from __future__ import annotations

from psirag.errors import PsiragError


class LLMError(PsiragError):
    """An LLM call failed. Messages name the endpoint and never contain an API key."""

    retryable: bool = False


class LLMConnectionError(LLMError):
    """The server could not be reached (refused, reset, unknown host)."""

    retryable = True


class LLMTimeoutError(LLMError):
    """The server did not answer within the timeout."""

    retryable = True


class LLMHTTPError(LLMError):
    """The server answered with an HTTP error status; the message carries the server's reason."""

    def __init__(self, message: str, status: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    @property  # type: ignore[override]
    def retryable(self) -> bool:
        return self.status == 429 or self.status >= 500


class LLMResponseError(LLMError):
    """The server answered 200 but not with a usable chat completion (bad JSON, missing field)."""


class LLMBackendMissingError(LLMError):
    """An optional backend package is not installed."""


__all__ = [
    "LLMBackendMissingError",
    "LLMConnectionError",
    "LLMError",
    "LLMHTTPError",
    "LLMResponseError",
    "LLMTimeoutError",
]
