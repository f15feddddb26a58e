"""Plain data shapes shared by every layer: chunks (leaves) and retrieved passages."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Source:
    """Where a passage comes from: the document, its title, the chunk number and character span."""

    document: str
    title: str
    chunk: int
    start: int
    end: int
    page: int | None = None
    """The page (from 1) of a PDF the chunk starts on; None for other documents."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "document": self.document,
            "title": self.title,
            "chunk": self.chunk,
            "span": [self.start, self.end],
        }
        if self.page is not None:
            out["page"] = self.page
        return out


@dataclass(frozen=True, slots=True)
class Chunk:
    """One leaf of the tree: a piece of a document, with a stable content-derived id."""

    id: str
    text: str
    source: Source


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved leaf. The single shape every search result and `--json` output uses."""

    id: str
    text: str
    score: float
    source: Source
    leaf: int = field(default=-1, compare=False)
    """Position of the leaf in the index (not stable across rebuilds; use `id` for that)."""
    also: tuple[Source, ...] = ()
    """Other places the same text occurs (another document repeating it), when the search
    merged identical texts into this one result."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "score": float(self.score),
            "source": self.source.to_dict(),
            "also": [s.to_dict() for s in self.also],
        }


def source_from_dict(data: dict[str, Any]) -> Source:
    start, end = data["span"]
    page = data.get("page")
    return Source(
        data["document"],
        data["title"],
        int(data["chunk"]),
        int(start),
        int(end),
        None if page is None else int(page),
    )


_SURROGATES = range(0xD800, 0xE000)


def first_surrogate(text: str) -> int | None:
    """Position of the first lone surrogate in ``text`` (a byte that was not UTF-8, as Python
    decodes such command-line bytes, or a ``\\ud800`` escape in JSON), or None."""
    for position, char in enumerate(text):
        if ord(char) in _SURROGATES:
            return position
    return None


__all__ = ["Chunk", "Passage", "Source", "asdict", "first_surrogate", "source_from_dict"]
