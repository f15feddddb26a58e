"""Cancelling work that runs in a thread: a token the work's LLM and HTTP calls look at.

Why: an agent runs in a worker thread, mostly waiting on LLM calls. When the client that asked
for it goes away, the server used to abandon the thread, which went on calling the LLM for
minutes. Now the server cancels the ask's :class:`CancelToken`: no new LLM call starts
(:class:`psirag.server.state.GatedLLM` and :class:`psirag.http.HttpClient` check the token), a
call waiting for the LLM gate gives up, and a call in flight has its socket shut down, so the
thread ends within a moment.

The token travels in a context variable set for the duration of :meth:`CancelToken.run`, so
code deep in the agent needs no new parameter.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

from psirag.errors import PsiragError

T = TypeVar("T")

_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "psirag_cancel", default=None
)


class CancelledError(PsiragError):
    """The work was cancelled (its client went away, or its deadline passed)."""


class CancelToken:
    """Set once; callbacks registered with :meth:`on_cancel` run when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._next = 0

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        """Set the token and run the registered callbacks (once)."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks = list(self._callbacks.values())
            self._callbacks.clear()
        for callback in callbacks:
            with contextlib.suppress(Exception):  # one failing must not stop the others
                callback()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` when cancelled (at once if it already is); returns an unregister."""
        with self._lock:
            if not self._event.is_set():
                key = self._next
                self._next += 1
                self._callbacks[key] = callback

                def unregister() -> None:
                    with self._lock:
                        self._callbacks.pop(key, None)

                return unregister
        callback()
        return lambda: None

    def check(self) -> None:
        """Raise :class:`CancelledError` if cancelled."""
        if self._event.is_set():
            raise CancelledError("the request was cancelled (its client went away)")

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` with this token as the current one (in the calling thread)."""
        reset = _current.set(self)
        try:
            return fn()
        finally:
            _current.reset(reset)


def current() -> CancelToken | None:
    """The token of the work running in this thread, if any."""
    return _current.get()


def check() -> None:
    """Raise :class:`CancelledError` if the current work was cancelled."""
    token = _current.get()
    if token is not None:
        token.check()


__all__ = ["CancelToken", "CancelledError", "check", "current"]
