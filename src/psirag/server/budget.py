"""The retrieval budget a request may name, validated once for ``/ask``, the chat endpoint and
the MCP ``ask`` tool."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, WithJsonSchema

from psirag.server.settings import MAX_RETRIEVALS


def _check_budget(value: object) -> object:
    """One plain message for a bad budget, in place of pydantic's error per union branch."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_RETRIEVALS:
        return value
    raise ValueError(f"must be a whole number from 0 to {MAX_RETRIEVALS}, or 'auto'; got {value!r}")


Budget = Annotated[
    int | Literal["auto"],
    BeforeValidator(_check_budget),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_RETRIEVALS},
                {"type": "string", "const": "auto"},
            ]
        }
    ),
]
"""A request's retrieval budget: a count, or ``auto`` (the query-hop discriminator)."""


__all__ = ["Budget"]
