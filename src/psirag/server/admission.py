"""Admission control for LLM work (asks, chat completions, summaries, the MCP ask tool).

Why: every request used to run its blocking work on one shared pool of 40 worker threads. With
an LLM that answers slowly, 45 open asks took every thread and ``/search`` and ``/tree`` waited
behind them (over 30 s); clients that went away left their agents running, still calling the
LLM ten minutes later. Now:

- LLM work runs under its own limit (:class:`AskPool`, ``max_asks`` at a time and ``ask_queue``
  more waiting), apart from the threads that searches and tree reads use, so a search never
  waits for an ask;
- over that bound a new ask is answered at once with 503 and ``Retry-After``
  (:class:`ServerBusyError`), never left hanging;
- each admitted ask carries a :class:`psirag.cancel.CancelToken`. It is cancelled when the
  client disconnects (a stream closed, or a plain request whose client is gone), when the
  request's deadline passes, and when the request ends in any way: the ask's next LLM call
  does not start, one waiting for the LLM gate gives up, one in flight has its socket shut
  down, and the worker thread ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from psirag.cancel import CancelToken
from psirag.server.errors import RequestTimeoutError, ServerBusyError

if TYPE_CHECKING:
    from starlette.requests import Request

T = TypeVar("T")

DISCONNECT_POLL_S = 0.25
"""How often a plain (non-streaming) request checks whether its client is still there."""


class Admission:
    """One admitted ask: its cancel token and its place in the pool (given back by
    :meth:`close`, which also cancels the token)."""

    def __init__(self, pool: AskPool) -> None:
        self.pool = pool
        self.token = CancelToken()
        self._closed = False

    async def run(
        self, fn: Callable[[], T], *, timeout: float, request: Request | None = None
    ) -> T:
        """``fn()`` in a worker thread under the pool's limit, the token current; cancelled
        when ``request``'s client disconnects or ``timeout`` seconds pass."""
        import anyio
        import anyio.to_thread

        watcher = asyncio.create_task(self._watch(request)) if request is not None else None
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(
                    lambda: self.token.run(fn),
                    limiter=self.pool.limiter,
                    abandon_on_cancel=True,  # the token ends the thread's work
                )
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"the request took longer than {timeout:g} s (psirag serve --request-timeout)"
            ) from exc
        finally:
            self.token.cancel()
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    async def _watch(self, request: Request) -> None:
        while not self.token.cancelled:
            if await request.is_disconnected():
                self.token.cancel()
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    def __del__(self) -> None:
        self.close()  # a place is never lost, even if no code path closed it

    def close(self) -> None:
        """Cancel whatever still runs for this ask and free its place (idempotent)."""
        self.token.cancel()
        if not self._closed:
            self._closed = True
            self.pool._release()


class AskPool:
    """At most ``workers`` asks run at a time and ``waiting`` more wait; beyond, 503."""

    def __init__(self, workers: int, waiting: int, retry_after: int = 5) -> None:
        import anyio

        self.workers = workers
        self.waiting = waiting
        self.retry_after = retry_after
        self.limiter = anyio.CapacityLimiter(workers)
        self._lock = threading.Lock()
        self._admitted = 0
        self.refused = 0

    @property
    def admitted(self) -> int:
        """Asks running or waiting now."""
        return self._admitted

    def admit(self) -> Admission:
        """A place for one more ask, or :class:`ServerBusyError` when the pool is full."""
        with self._lock:
            if self._admitted >= self.workers + self.waiting:
                self.refused += 1
                raise ServerBusyError(
                    f"the server is answering {self.workers} questions and has "
                    f"{self.waiting} more waiting, its limit (psirag serve --max-asks, "
                    f"--ask-queue); try again in {self.retry_after} s. /search is not "
                    "affected",
                    self.retry_after,
                )
            self._admitted += 1
        return Admission(self)

    def _release(self) -> None:
        with self._lock:
            self._admitted = max(0, self._admitted - 1)


__all__ = ["DISCONNECT_POLL_S", "Admission", "AskPool", "ServerBusyError"]
