"""Citations: the passages an agent answer names as its support (issue 16, item 5).

Every passage shown to the model in an episode gets a short label, ``[1]``, ``[2]``, ... in the
order it was first shown (a passage retrieved again keeps its label), and the prompt asks the
model to end its answer with the labels of the documents that support it
(``Answer: 1887 [2][4]``). :func:`split_citations` takes the labels off the answer; a label that
names no passage shown in the episode is dropped and counted (``AgentStats.dropped_citations``),
so a citation always points at a passage the model really read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psirag.types import Passage

# "[2]", "[2][4]", "[2, 4]", "[2], [4]", "(documents [2] and [4])", "[Document 2]" at the end.
_LABEL = re.compile(
    r"\[\s*(?:doc(?:ument)?s?\s*)?(\d{1,3}(?:\s*(?:,|and|&)\s*\d{1,3})*)\s*\]", re.I
)
_TAIL = re.compile(
    r"(?:[\s,;:.]*(?:\(|\bsee\b|\bfrom\b|\bsources?\b|\bdocuments?\b|\bdocs?\b|\band\b|\)|"
    r"\[\s*(?:doc(?:ument)?s?\s*)?\d{1,3}(?:\s*(?:,|and|&)\s*\d{1,3})*\s*\]))+[\s.)]*$",
    re.I,
)


@dataclass(frozen=True)
class Citation:
    """One verified citation: the label the model used and the passage it stands for."""

    label: int
    passage: Passage

    def to_dict(self) -> dict[str, Any]:
        src = self.passage.source
        return {
            "label": self.label,
            "passage_id": self.passage.id,
            "document": src.document,
            "title": src.title,
            "chunk": src.chunk,
            "span": [src.start, src.end],
        }


class Labels:
    """Episode-wide labels of the passages shown to the model, in order of first showing."""

    def __init__(self) -> None:
        self.by_id: dict[str, int] = {}
        self.passages: dict[int, Passage] = {}

    def assign(self, passages: Sequence[Passage]) -> list[int]:
        out = []
        for p in passages:
            label = self.by_id.get(p.id)
            if label is None:
                label = len(self.by_id) + 1
                self.by_id[p.id] = label
                self.passages[label] = p
            out.append(label)
        return out

    def of(self, passages: Sequence[Passage]) -> list[int]:
        """Labels of passages already assigned (assigning any that are not)."""
        return self.assign(passages)

    def resolve(self, labels: Sequence[int]) -> tuple[list[Citation], int]:
        """The citations for ``labels`` (each once, in the order cited) and how many labels
        were dropped for naming no passage shown in the episode."""
        citations: list[Citation] = []
        seen: set[int] = set()
        dropped = 0
        for label in labels:
            if label in seen:
                continue
            seen.add(label)
            passage = self.passages.get(label)
            if passage is None:
                dropped += 1
            else:
                citations.append(Citation(label, passage))
        return citations, dropped


def split_citations(answer: str) -> tuple[str, list[int]]:
    """The answer without the trailing citation labels, and those labels in order.

    Only labels at the end of the answer count (``1887 [2][4]``, ``1887 (see [2], [4])``); a
    bracketed number inside the answer ("the [1] album") is kept as answer text.
    """
    tail = _TAIL.search(answer)
    if tail is None or not _LABEL.search(tail.group(0)):
        return answer.strip(), []
    labels = [int(n) for group in _LABEL.findall(tail.group(0)) for n in re.findall(r"\d+", group)]
    return answer[: tail.start()].strip().rstrip(",;:"), labels


__all__ = ["Citation", "Labels", "split_citations"]
