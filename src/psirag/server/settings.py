"""Server settings as one frozen dataclass, checked once at start-up (before anything binds)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal

from psirag.errors import InputError
from psirag.server.read_ahead import READ_AHEAD_SHARE

API_KEY_ENV = "PSIRAG_API_KEY"
"""Environment variable read when ``--api-key`` is not given."""
MAX_RETRIEVALS = 10
"""The largest retrieval budget a server setting or a request may ask for."""
MAX_WORKERS = 64
"""The most server processes ``--workers`` may start (each holds its own query model)."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses no other machine can reach."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServerSettings:
    """How the server runs. Limits are per request; ``api_key=None`` turns authentication off."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    insecure: bool = False
    """Allow a non-loopback host without an API key (the operator takes the risk)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed by CORS; empty: no CORS headers at all (browsers block cross-origin)."""
    request_timeout: float = 300.0
    """Seconds a request may run before it is answered 504 (agent runs included)."""
    max_body_bytes: int = 10 * 1024 * 1024
    max_query_chars: int = 4000
    """Longest accepted query or chat message (characters); longer: 413."""
    max_url_bytes: int = 8192
    max_k: int = 100
    llm_concurrency: int = 4
    max_asks: int = 8
    """LLM requests (asks, chat completions, summaries) running at once, on their own threads."""
    ask_queue: int = 32
    """LLM requests waiting for a place; beyond these, 503 with Retry-After."""
    model_name: str = "psirag"
    """The model id ``/v1/models`` lists."""
    max_retrievals: int | Literal["auto"] = 1
    """Retrievals after the first for an ask that names none; ``auto``: from the question's
    predicted hops (the shipped query-hop discriminator), as ``psirag ask --max-retrievals
    auto``."""
    workers: int = 1
    """Server processes on the one listening socket (``psirag serve --workers N``); each loads
    the index (arrays memory-mapped, so shared by the page cache) and its own query model."""
    read_ahead_share: float = READ_AHEAD_SHARE
    """The largest share of the system's available memory the warm-up reads the index's
    mapped files into the page cache with (``psirag serve --read-ahead-share``; 0: none);
    files beyond it are skipped and logged (see :mod:`psirag.server.read_ahead`)."""
    exempt_paths: tuple[str, ...] = field(default=("/health",), repr=False)

    def check(self) -> None:
        """Refuse settings that would expose the index by accident, or make no sense."""
        if not 0 <= self.port < 65536:
            raise InputError(f"--port must be 0..65535 (0: any free port), got {self.port}")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError(f"the API key is empty: give --api-key KEY or unset ${API_KEY_ENV}")
        if not is_loopback(self.host) and self.api_key is None and not self.insecure:
            raise InputError(
                f"refusing to listen on {self.host!r} (reachable from other machines) without an "
                f"API key: pass --api-key KEY or set ${API_KEY_ENV}, or add --insecure to serve "
                "the index to anyone who can reach this address"
            )
        for name, value in (
            ("--timeout", self.request_timeout),
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-query-chars", self.max_query_chars),
        ):
            if value <= 0:
                raise InputError(f"{name} must be positive, got {value}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise InputError(f"--workers must be 1..{MAX_WORKERS}, got {self.workers}")
        if self.max_asks < 1 or self.ask_queue < 0:
            raise InputError(
                f"--max-asks must be at least 1 and --ask-queue 0 or more, got {self.max_asks} "
                f"and {self.ask_queue}"
            )
        if not 0 <= self.read_ahead_share <= 1:
            raise InputError(
                f"--read-ahead-share must be 0..1 (a share of the available memory), got "
                f"{self.read_ahead_share}"
            )
        if self.llm_concurrency < 1:
            raise InputError(f"--llm-concurrency must be at least 1, got {self.llm_concurrency}")
        if self.max_retrievals != "auto" and not 0 <= int(self.max_retrievals) <= MAX_RETRIEVALS:
            raise InputError(
                f"--max-retrievals must be 0..{MAX_RETRIEVALS} or auto, got {self.max_retrievals!r}"
            )


__all__ = ["API_KEY_ENV", "MAX_RETRIEVALS", "MAX_WORKERS", "ServerSettings", "is_loopback"]
