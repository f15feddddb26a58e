"""Summarization mode (SPEC 2.5, paper C.2): one tree retrieval, no sparse index, no iterations.

Tree retrieval visits abstracts on its way down; for a summary those abstracts are the point (a
layer-3 abstract condenses a whole stretch of the document), so every visited node competes,
ranked by cosine with the query. The top-k are shown to the model in document order, each marked
with its layer, because a summary follows the document and the model should know which texts are
condensed overviews and which are verbatim passages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from psirag.agent.chat import REPEAT_PENALTY, call_model, clip, fit_messages
from psirag.agent.parsing import strip_thinking
from psirag.errors import InputError
from psirag.llm.base import ChatModel, GenerationParams, Message
from psirag.prompts import summarize_docs_prompt, summarize_docs_text

DEFAULT_QUERY = "Summarize the contents of this document."
"""The paper asks a fixed summative query per task ("Summarize the whole meeting." for QMSum)."""

WORDS_PER_TOKEN = 0.75
"""English words per generated token: the word limit asked in the prompt is set from the token
cap so that a summary that obeys the prompt is not cut mid-sentence by the cap."""


@runtime_checkable
class VisitedNode(Protocol):
    """A node tree retrieval visited: an abstract (layer >= 1) or a leaf (layer 0).

    ``node`` is its position in the tree; ``order`` its position in document order (for an
    abstract, that of its first leaf); ``score`` its cosine with the query. ``psirag.NodeHit``
    (what ``Index.visit`` returns) is one.
    """

    # Read-only members, so that frozen dataclasses (``NodeHit``, :class:`Node`) conform.
    @property
    def node(self) -> int: ...
    @property
    def layer(self) -> int: ...
    @property
    def score(self) -> float: ...
    @property
    def text(self) -> str: ...
    @property
    def order(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Node:
    """A plain :class:`VisitedNode`, for callers and tests without an index."""

    node: int
    layer: int
    score: float
    text: str
    order: int
    document: str | None = None


def node_to_dict(node: VisitedNode) -> dict[str, Any]:
    return {
        "node": int(node.node),
        "layer": int(node.layer),
        "score": float(node.score),
        "text": node.text,
        "order": int(node.order),
        "document": getattr(node, "document", None),
    }


def select_nodes(nodes: Sequence[VisitedNode], top_k: int) -> list[VisitedNode]:
    """Top-k by cosine (ties: earlier in the document, then the leaf side), in document order.

    At the same position an abstract comes before the leaves it condenses (higher layer first).
    """
    best = sorted(nodes, key=lambda n: (-float(n.score), n.order, n.layer, n.node))[:top_k]
    return sorted(best, key=lambda n: (n.order, -n.layer, n.node))


def render_nodes(nodes: Sequence[VisitedNode], limit: int | None = None) -> str:
    """Nodes (already in document order) numbered ``[1]``, ``[2]``, ... with their layer marked."""
    return summarize_docs_text(
        [(i, int(node.layer), clip(node.text.strip(), limit)) for i, node in enumerate(nodes, 1)]
    )


_LABEL = re.compile(r"^\W*(?:summary|answer)\W*:\W*?(?=\w)", re.IGNORECASE)


def clean_summary(text: str) -> str:
    """Drop hidden reasoning and a leading ``Summary:`` label that models copy from abstracts."""
    text = strip_thinking(text).strip()
    return _LABEL.sub("", text, count=1).strip()


@dataclass
class SummaryResult:
    answer: str
    evidence: list[VisitedNode]
    """The nodes given to the model, in the order it saw them."""
    query: str = ""
    raw: str = ""
    clipped_nodes: int = 0
    """Nodes shown shortened so that the request fit the context window."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "evidence": [node_to_dict(n) for n in self.evidence],
            "query": self.query,
            "raw": self.raw,
            "clipped_nodes": self.clipped_nodes,
        }


class Summarizer:
    """Answer a summative query from the nodes a single tree retrieval visits.

    ``visit(query)`` returns the visited nodes (any order). Defaults are QMSum's (paper C.2):
    top 20 nodes, a 200-token answer; WCEP uses 15 and 150.
    """

    def __init__(
        self,
        llm: ChatModel,
        visit: Callable[[str], Sequence[VisitedNode]],
        *,
        top_k: int = 20,
        max_tokens: int = 200,
        max_words: int | None = None,
        repeat_penalty: float = REPEAT_PENALTY,
        temperature: float = 0.0,
        stage: str = "summarize",
    ) -> None:
        if top_k < 1:
            raise InputError(f"top_k must be positive, got {top_k}")
        if max_tokens < 1:
            raise InputError(f"max_tokens must be positive, got {max_tokens}")
        self.llm = llm
        self.visit = visit
        self.top_k = top_k
        self.max_words = max_words if max_words is not None else int(max_tokens * WORDS_PER_TOKEN)
        if self.max_words < 1:
            raise InputError(f"max_words must be positive, got {self.max_words}")
        self.params = GenerationParams(
            max_tokens=max_tokens, temperature=temperature, repeat_penalty=repeat_penalty
        )
        self.stage = stage

    def _messages(
        self, query: str, nodes: Sequence[VisitedNode], limit: int | None
    ) -> list[Message]:
        return summarize_docs_prompt(query, render_nodes(nodes, limit), self.max_words)

    def run(self, query: str = DEFAULT_QUERY) -> SummaryResult:
        query = query.strip()
        if not query:
            raise InputError("the summarization query is empty")
        nodes = select_nodes(list(self.visit(query)), self.top_k)
        if not nodes:
            raise InputError("tree retrieval visited no nodes: is the index (or document) empty?")
        longest = max(len(n.text.strip()) for n in nodes)
        messages, limit = fit_messages(
            lambda cap: self._messages(query, nodes, cap), longest, self.llm, self.params.max_tokens
        )
        result = call_model(self.llm, messages, self.params, self.stage)
        clipped = 0 if limit is None else sum(1 for n in nodes if len(n.text.strip()) > limit)
        return SummaryResult(clean_summary(result.text), nodes, query, result.text, clipped)


__all__ = [
    "DEFAULT_QUERY",
    "Node",
    "Summarizer",
    "SummaryResult",
    "VisitedNode",
    "clean_summary",
    "node_to_dict",
    "render_nodes",
    "select_nodes",
]
