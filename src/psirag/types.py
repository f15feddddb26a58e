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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "score": float(self.score),
            "source": self.source.to_dict(),
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


__all__ = ["Chunk", "Passage", "Source", "asdict", "source_from_dict"]
