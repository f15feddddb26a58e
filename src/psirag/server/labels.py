"""Short names for the nodes of the tree view that tell siblings apart.

A keyword abstract lists a cluster's phrases broad themes first, so siblings under one parent
often start alike ("American, film, ..."). A node's label here is its phrases that its siblings
share least (ties: the abstract's own order), computed from the abstracts alone, without an LLM.
An LLM-written abstract (a sentence) is named by its first words instead.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psirag.index import Index

LABEL_PHRASES = 3
"""Phrases of a keyword abstract in a label."""
LABEL_CHARS = 48
"""Longest label of an inner node; longer ones end with an ellipsis."""
LABEL_WORDS = 8
"""Words of a leaf without a title (or of an LLM abstract) shown as its label."""
_WORD = re.compile(r"\w+", re.UNICODE)


def _phrases(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _words(phrase: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(phrase)}


def _first_words(text: str, count: int = LABEL_WORDS) -> str:
    words = text.split()
    head = " ".join(words[:count])
    return head + ("…" if len(words) > count else "")


def _shorten(label: str) -> str:
    if len(label) <= LABEL_CHARS:
        return label
    return label[: LABEL_CHARS - 1].rstrip(" ,") + "…"


def is_keyword_abstract(index: Index) -> bool:
    """Whether the inner nodes' texts are keyword lists (not LLM prose)."""
    mode = str(getattr(index.config, "abstracts", "keywords"))
    return mode in ("keywords", "llm-keywords")


def leaf_label(index: Index, leaf: int) -> str:
    """A leaf: its document's title and chunk number, or its first words."""
    source = index.source(leaf)
    if source.title:
        return f"{source.title} #{source.chunk}"
    text = index.node_text(leaf)
    return _first_words(text) if text.split() else f"node {leaf}"


def distinctive(abstracts: Sequence[str], count: int = LABEL_PHRASES) -> list[str]:
    """For each keyword abstract, the ``count`` phrases that the other abstracts share least.

    A phrase's weight is how many other siblings use one of its words (a word in every sibling
    names the parent, not this node); the abstract's order breaks ties, and the chosen phrases
    keep that order.
    """
    phrase_lists = [_phrases(a) for a in abstracts]
    # each phrase's words once (a 100,000-leaf tree's first view names 3,000 nodes)
    phrase_words = [[_words(p) for p in ps] for ps in phrase_lists]
    word_sets = [set().union(*ws) for ws in phrase_words]
    users: Counter[str] = Counter(w for ws in word_sets for w in ws)
    labels = []
    for phrases, words_of in zip(phrase_lists, phrase_words, strict=True):
        if not phrases:
            labels.append("")
            continue
        weight = []
        for i, (phrase, words) in enumerate(zip(phrases, words_of, strict=True)):
            others = [users[w] - 1 for w in words] if words else [users[phrase.lower()]]
            weight.append((min(others), i))
        chosen = sorted(i for _, i in sorted(weight)[:count])
        labels.append(_shorten(", ".join(phrases[i] for i in chosen)))
    return labels


class _Remembered:
    """Inner-node labels of the last index object asked (an index object never changes; a
    write publishes a new one), so the page's repeated /tree calls compute each group once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.index: Index | None = None
        self.labels: dict[int, str] = {}

    def get(self, index: Index, nodes: list[int]) -> dict[int, str] | None:
        with self.lock:
            if self.index is not index or any(u not in self.labels for u in nodes):
                return None
            return {u: self.labels[u] for u in nodes}

    def put(self, index: Index, labels: dict[int, str]) -> None:
        with self.lock:
            if self.index is not index:
                self.index, self.labels = index, {}
            self.labels.update(labels)


_remembered = _Remembered()


def sibling_labels(index: Index, nodes: Sequence[int]) -> dict[int, str]:
    """Labels for a group of siblings (children of one parent, or the roots of a forest)."""
    n_leaves = index.tree.n_leaves
    labels = {int(u): leaf_label(index, int(u)) for u in nodes if u < n_leaves}
    inner = [int(u) for u in nodes if u >= n_leaves]
    if not inner:
        return labels
    known = _remembered.get(index, inner)
    if known is None:
        texts = [index.node_text(u) for u in inner]
        if is_keyword_abstract(index):
            named = distinctive(texts)
        else:
            named = [_shorten(_first_words(t, 6)) for t in texts]
        known = {u: text or f"node {u}" for u, text in zip(inner, named, strict=True)}
        _remembered.put(index, known)
    labels.update(known)
    return labels


def siblings_of(index: Index, node: int) -> list[int]:
    """The node and its siblings (a root's siblings are the other roots)."""
    tree = index.tree
    parent = int(tree.parent[node])
    if parent < 0:
        return [int(r) for r in tree.roots.tolist()]
    return [int(c) for c in tree.children(parent).tolist()]


def node_label(index: Index, node: int) -> str:
    """The label of one node, told apart from its siblings."""
    return sibling_labels(index, siblings_of(index, node))[int(node)]


__all__ = ["distinctive", "leaf_label", "node_label", "sibling_labels", "siblings_of"]
