"""The one HTTP client behind every OpenAI-compatible call (chat and embeddings).

Why one: a deadline, a retry rule, a size cap and key hygiene must hold for every request, and two
clients drift apart. The rules, with their defaults in :class:`HttpPolicy`:

- ``timeout`` bounds the whole call: connecting, every wait between attempts, every retry and
  reading the body. Socket timeouts alone apply per read, so a server trickling one byte every
  10 s would never time out; here each read may take no longer than the time left, the body is
  read in chunks with the deadline checked between them, and a watchdog closes the socket when
  the deadline passes (a server that trickles its headers is cut off too).
- Timeouts, refused or dropped connections, HTTP 408/409/425/429 and 5xx are retried up to
  ``retries`` times, waiting ``backoff * 2**n`` seconds, or the server's ``Retry-After``; no wait
  is longer than ``max_wait`` or the time left, and a capped wait is said on the log.
- Bodies are read up to ``max_body_bytes``; a larger one is an error, not a memory blow-up.
- The API key is read from the environment on every call and lives only in the request header:
  it is never kept on an object, and it is scrubbed from anything a server or socket sends back.
  A key about to go over plain ``http://`` to a host that is not this machine is warned about,
  once per host.
- A server on this machine is never reached through an HTTP proxy from the environment.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from psirag import cancel
from psirag.errors import InputError, PsiragError

if TYPE_CHECKING:  # imported where a call is made: a search loads no HTTP client
    import http.client
    import ssl

log = logging.getLogger("psirag.http")

RETRY_STATUS = frozenset({408, 409, 425, 429})
"""HTTP statuses worth another try (with every 5xx): the server is busy, not refusing."""
MAX_SERVER_MESSAGE = 500
"""Characters of a server's error body quoted in an error message."""
_ERROR_BODY_BYTES = 64 * 1024
"""An error body is read only this far: it is quoted, never parsed for data."""
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class HttpPolicy:
    """Deadline, retries and size cap of every HTTP call to an LLM or embedding server.

    The CLI's ``--timeout`` and ``--retries`` (on ask, summarize, eval, index, demo) set the first
    two; the defaults below are the documented ones.
    """

    timeout: float = 120.0
    """Seconds one call may take in all: connecting, waiting, retrying, reading."""
    retries: int = 3
    """Extra attempts after a transient failure (0: one attempt only)."""
    backoff: float = 1.0
    """First wait between attempts, in seconds; doubled after each failed attempt."""
    max_wait: float = 30.0
    """Cap on any one wait, a server's ``Retry-After`` included."""
    max_body_bytes: int = 64 * 2**20
    """Largest response body read (64 MiB: a 64-text batch of 3072-dim embeddings is ~5 MiB)."""

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise InputError(
                f"the HTTP timeout must be a positive number of seconds, got {self.timeout}"
            )
        if self.retries < 0:
            raise InputError(f"the HTTP retries must be 0 or more, got {self.retries}")
        if self.backoff < 0 or self.max_wait < 0:
            raise InputError("the HTTP backoff and max_wait must be 0 or more seconds")
        if self.max_body_bytes < 1:
            raise InputError(f"max_body_bytes must be positive, got {self.max_body_bytes}")


ErrorKind = Literal["timeout", "refused", "connection", "tls", "status", "too_large"]


class HTTPCallError(PsiragError):
    """A call failed for good. The message names the URL, is free of the key, and says what to do.

    The chat and embedding clients turn it into their own error classes; ``kind``, ``status``,
    ``retry_after`` and ``attempts`` say what happened.
    """

    def __init__(
        self,
        message: str,
        kind: ErrorKind,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.attempts = attempts

    @property
    def retryable(self) -> bool:
        if self.kind == "status":
            return self.status is not None and (self.status in RETRY_STATUS or self.status >= 500)
        return self.kind in ("timeout", "refused", "connection")


@dataclass(frozen=True)
class Response:
    """A 2xx body and how many attempts it took."""

    body: bytes
    attempts: int


def is_loopback(host: str) -> bool:
    """True for this machine: ``localhost``, 127.0.0.0/8 and ::1 (by name, never by DNS)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_warned_hosts: set[str] = set()
_warned_lock = threading.Lock()


def warn_plain_http_key(url: str, api_key_env: str) -> None:
    """Warn once per host that a key is about to cross the network unencrypted."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or is_loopback(host):
        return
    where = parts.netloc.rpartition("@")[2]
    with _warned_lock:
        if where in _warned_hosts:
            return
        _warned_hosts.add(where)
    log.warning(
        "psirag: warning: the API key in $%s goes over plain http:// to %s, which is not this "
        "machine, so anyone on the way can read it; use https:// or unset $%s",
        api_key_env,
        where,
        api_key_env,
    )


def scrub(text: str, key: str) -> str:
    """Remove the API key from text that came back from a server or a socket error."""
    return text.replace(key, "***") if key else text


def server_message(body: str) -> str:
    """The human part of an error body: OpenAI's ``error.message``, or the text itself."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body.strip()[:MAX_SERVER_MESSAGE]
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:MAX_SERVER_MESSAGE]
    return body.strip()[:MAX_SERVER_MESSAGE]


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from API servers; the backoff applies instead
    return seconds if seconds >= 0 else None


class HttpClient:
    """POSTs JSON to one URL under an :class:`HttpPolicy`; ``what`` names the server in messages.

    ``api_key_env`` names the environment variable holding the key (read on every call, never
    stored). ``sleep`` and ``clock`` are injectable for tests of the waiting rule.
    """

    def __init__(
        self,
        url: str,
        *,
        what: str,
        policy: HttpPolicy | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"{what} URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.what = what
        self.policy = policy or HttpPolicy()
        self.api_key_env = api_key_env
        self._sleep = sleep
        self._clock = clock
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        self._proxy = None if is_loopback(self._host) else _proxy_for(parts.scheme, self._host)
        self._tls: ssl.SSLContext | None = None

    def __repr__(self) -> str:
        return f"HttpClient({self.url!r}, what={self.what!r}, policy={self.policy!r})"

    # -- the call -------------------------------------------------------------------------------

    def post_json(self, payload: Any, on_data: Callable[[bytes], None] | None = None) -> Response:
        """One call: attempts until a 2xx, a failure not worth retrying, or the deadline.

        ``on_data`` sees each piece of a 2xx body as it arrives (a streamed response); once a
        piece has been passed on, a failure is not retried (that would repeat the pieces).
        """
        delivered = False

        def deliver(chunk: bytes) -> None:
            nonlocal delivered
            delivered = True
            if on_data is not None:
                on_data(chunk)

        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            warn_plain_http_key(self.url, self.api_key_env or "")
        data = json.dumps(payload).encode("utf-8")
        policy = self.policy
        deadline = self._clock() + policy.timeout
        attempt = 0
        token = cancel.current()
        while True:
            attempt += 1
            if token is not None:
                token.check()  # a cancelled ask starts no new call
            try:
                sink = deliver if on_data is not None else None
                return Response(self._once(data, key, deadline, sink), attempt)
            except HTTPCallError as exc:
                if token is not None:
                    token.check()  # cut off by a cancel, not by the server: no retry
                exc.attempts = attempt
                if not exc.retryable or attempt > policy.retries or delivered:
                    raise self._final(exc, attempt) from None
                wait = self._wait(exc, attempt, deadline - self._clock())
                if wait is None:
                    raise self._final(exc, attempt) from None
                self._sleep(wait)

    def _wait(self, exc: HTTPCallError, attempt: int, left: float) -> float | None:
        """Seconds to wait before the next attempt; None when the deadline leaves no room."""
        policy = self.policy
        wait = min(policy.backoff * 2 ** (attempt - 1), policy.max_wait)
        note = ""
        if exc.retry_after is not None:
            wait = min(exc.retry_after, policy.max_wait)
            if exc.retry_after > policy.max_wait:
                note = (
                    f"; the server asked to wait {exc.retry_after:g} s (Retry-After), "
                    f"capped at {policy.max_wait:g} s"
                )
        if wait >= left:
            if exc.kind == "timeout":
                return None  # the deadline itself ran out: the message already says so
            asked = f" (it asked to wait {exc.retry_after:g} s)" if exc.retry_after else ""
            exc.args = (
                f"{exc.args[0]}; not retried{asked}: only {max(left, 0):.1f} s were left of the "
                f"{policy.timeout:g} s timeout (raise it with --timeout)",
            )
            return None
        log.warning(
            "psirag: %s at %s: %s; waiting %s s before attempt %d of %d%s",
            self.what,
            self.url,
            _short(exc),
            f"{wait:g}",
            attempt + 1,
            policy.retries + 1,
            note,
        )
        return wait

    def _final(self, exc: HTTPCallError, attempt: int) -> HTTPCallError:
        if attempt > 1:
            exc.args = (f"{exc.args[0]} (gave up after {attempt} attempts)",)
        return exc

    def _once(
        self,
        data: bytes,
        key: str,
        deadline: float,
        on_data: Callable[[bytes], None] | None = None,
    ) -> bytes:
        left = deadline - self._clock()
        if left <= 0:
            raise self._timeout()
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if on_data is not None else "application/json",
            "User-Agent": "psirag",
        }
        if key:
            headers["Authorization"] = f"Bearer {key}"
        conn, target = self._connection(left, headers)
        expired = threading.Event()
        # Our own reference to the socket: after getresponse() on a reply that closes the
        # connection (HTTP/1.0, "Connection: close"), http.client sets conn.sock to None while
        # the response still reads from that socket, so conn.sock cannot be relied on.
        held: list[socket.socket] = []

        def cut_off() -> None:
            # The deadline passed mid-exchange: shutting the socket down ends any blocked read.
            expired.set()
            for sock in [*held, conn.sock]:
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(left, cut_off)
        watchdog.daemon = True
        watchdog.start()
        token = cancel.current()
        forget = token.on_cancel(cut_off) if token is not None else None
        try:
            conn.connect()
            if conn.sock is not None:
                held.append(conn.sock)
                if expired.is_set():  # the deadline passed while connecting
                    raise self._timeout()
            conn.request("POST", target, body=data, headers=headers)
            response = conn.getresponse()
            status = response.status
            sock = held[0] if held else None
            if 200 <= status < 300:
                return self._read(
                    sock, response, deadline, self.policy.max_body_bytes, expired, on_data=on_data
                )
            body = self._read(sock, response, deadline, _ERROR_BODY_BYTES, expired, strict=False)
            raise self._status_error(status, body, response.getheader("Retry-After"), key)
        except HTTPCallError:
            raise
        except TimeoutError:
            if token is not None:
                token.check()
            raise self._timeout() from None
        except (OSError, _http_client().HTTPException, ValueError) as exc:
            # ValueError: http.client's reading of a chunk size cut off by the watchdog
            if token is not None:
                token.check()  # cut off because the work was cancelled
            if expired.is_set() or self._clock() >= deadline:
                raise self._timeout() from None
            raise self._connection_error(exc, key) from None
        finally:
            if forget is not None:
                forget()
            watchdog.cancel()
            conn.close()

    def _read(
        self,
        sock: socket.socket | None,
        response: http.client.HTTPResponse,
        deadline: float,
        limit: int,
        expired: threading.Event,
        *,
        strict: bool = True,
        on_data: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """The body in chunks, each read bounded by the time left; at most ``limit`` bytes
        (``strict``: more is an error; else the rest is dropped, as for an error body)."""
        length = response.getheader("Content-Length")
        if strict and length and length.isdigit() and int(length) > limit:
            raise self._too_large(limit)
        parts: list[bytes] = []
        size = 0
        while True:
            left = deadline - self._clock()
            if left <= 0:
                raise self._timeout()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.settimeout(left)
            chunk = response.read1(_CHUNK)
            if not chunk:
                if expired.is_set():
                    raise self._timeout()
                break
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                if strict:
                    raise self._too_large(limit)
                break
            if on_data is not None:
                on_data(chunk)
        return b"".join(parts)[:limit]

    def _connection(
        self, timeout: float, headers: dict[str, str]
    ) -> tuple[http.client.HTTPConnection, str]:
        import http.client
        import ssl

        proxy = self._proxy
        if self._https and self._tls is None:
            self._tls = ssl.create_default_context()  # loads the CA store once per client
        if proxy is None:
            if self._https:
                return (
                    http.client.HTTPSConnection(
                        self._host, self._port, timeout=timeout, context=self._tls
                    ),
                    self._target,
                )
            return http.client.HTTPConnection(self._host, self._port, timeout=timeout), self._target
        proxy_host, proxy_port, auth = proxy
        if self._https:
            conn = http.client.HTTPSConnection(
                proxy_host, proxy_port, timeout=timeout, context=self._tls
            )
            conn.set_tunnel(self._host, self._port, headers=auth)
            return conn, self._target
        headers.update(auth)
        return http.client.HTTPConnection(proxy_host, proxy_port, timeout=timeout), self.url

    # -- errors ---------------------------------------------------------------------------------

    def _timeout(self) -> HTTPCallError:
        return HTTPCallError(
            f"{self.what} at {self.url} did not answer within {self.policy.timeout:g} s "
            "(the whole call, retries included); raise the limit with --timeout or check that "
            "the server is not overloaded",
            "timeout",
        )

    def _too_large(self, limit: int) -> HTTPCallError:
        return HTTPCallError(
            f"{self.what} at {self.url} sent a response larger than {_size(limit)}, the limit; "
            "check that the URL points at an OpenAI-compatible server (for embeddings, a smaller "
            "--batch-size makes smaller responses)",
            "too_large",
        )

    def _connection_error(self, exc: BaseException, key: str) -> HTTPCallError:
        import ssl

        if isinstance(exc, ssl.SSLError):  # not transient: retrying cannot fix a certificate
            detail = scrub(getattr(exc, "verify_message", None) or str(exc), key)
            return HTTPCallError(
                f"TLS with the {self.what} at {self.url} failed: {detail}; check the URL and "
                "the server's certificate",
                "tls",
            )
        if isinstance(exc, ConnectionRefusedError):
            return HTTPCallError(
                f"could not connect to the {self.what} at {self.url}: connection refused; "
                "check that the server is running and that the base URL and port are right",
                "refused",
            )
        detail = scrub(f"{type(exc).__name__}: {exc}", key)
        return HTTPCallError(
            f"could not reach the {self.what} at {self.url}: {detail}; "
            "check the server and the base URL",
            "connection",
        )

    def _status_error(
        self, status: int, body: bytes, retry_after: str | None, key: str
    ) -> HTTPCallError:
        text = body.decode("utf-8", errors="replace")
        reason = scrub(server_message(text) or _http_client().responses.get(status, ""), key)
        hint = ""
        if status in (401, 403) and self.api_key_env:
            hint = f" (check the API key in ${self.api_key_env})"
        elif status == 404:
            hint = " (check the base URL, which usually ends in /v1, and the model name)"
        return HTTPCallError(
            f"{self.what} at {self.url} answered HTTP {status}{hint}: {reason or 'no message'}",
            "status",
            status=status,
            retry_after=_retry_after(retry_after),
        )


def _short(exc: HTTPCallError) -> str:
    if exc.kind == "status":
        return f"HTTP {exc.status}"
    return {"timeout": "timed out", "refused": "connection refused"}.get(
        exc.kind, "connection failed"
    )


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


def _http_client() -> Any:
    """``http.client``, imported on first use (with ssl and email: 0.02-0.04 s of start-up)."""
    import http.client

    return http.client


def _proxy_for(scheme: str, host: str) -> tuple[str, int, dict[str, str]] | None:
    """The environment's proxy for this URL (``https_proxy``, ``no_proxy``, ...), if any."""
    import urllib.request

    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    parts = urllib.parse.urlsplit(proxy)
    if not parts.hostname:
        return None
    auth: dict[str, str] = {}
    if parts.username:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        auth["Proxy-Authorization"] = f"Basic {token}"
    return parts.hostname, parts.port or 8080, auth


__all__ = [
    "RETRY_STATUS",
    "HTTPCallError",
    "HttpClient",
    "HttpPolicy",
    "Response",
    "is_loopback",
    "scrub",
    "server_message",
    "warn_plain_http_key",
]
