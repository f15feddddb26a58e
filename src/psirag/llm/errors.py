"""LLM failures, split by what the caller can do about them (wait, fix the URL, fix the server).

``retryable`` says whether the trouble was transient (timeouts, refused or dropped connections,
429, 5xx) rather than a request the server rejected for good (other 4xx) or an answer it cannot
parse. HTTP backends have already spent their retries (:mod:`psirag.http`) when they raise one;
``retries`` says how many.
"""

from __future__ import annotations

from psirag.errors import PsiragError


class LLMError(PsiragError):
    """An LLM call failed. Messages name the endpoint and never contain an API key."""

    retryable: bool = False
    retries: int = 0
    """Retries spent before this error was raised."""


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

    @property
    def retryable(self) -> bool:  # type: ignore[override]
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
