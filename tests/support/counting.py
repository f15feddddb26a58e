"""Count the calls of one function while a test runs (how tests show that work was skipped)."""

from __future__ import annotations

from typing import Any

import pytest


class CallCount:
    """How many times the wrapped function has been called so far (``n``)."""

    n: int = 0


def count_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> CallCount:
    """Replace ``owner.name`` with a wrapper that counts its calls and then calls it."""
    count = CallCount()
    real = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        count.n += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return count


def record_tables(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[str]:
    """Replace ``owner.name`` (a reader of one table, called as ``(reader, table, where)``)
    with a wrapper that records the table names it reads, in order, and then reads."""
    seen: list[str] = []
    real = getattr(owner, name)

    def recorded(reader: Any, table: Any, where: str) -> Any:
        seen.append(where.rsplit(" table ", 1)[-1])
        return real(reader, table, where)

    monkeypatch.setattr(owner, name, recorded)
    return seen
