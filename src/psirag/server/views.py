"""The JSON documents the HTTP API and the MCP tools return, built from one index object.

Kept apart from the web framework so the MCP tools and the HTTP routes answer with the same
shapes (and so they can be tested without a server).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag.errors import InputError
from psirag.schemas import SEARCH_SCHEMA
from psirag.server import labels
from psirag.types import Passage

if TYPE_CHECKING:
    from psirag.agent.citations import Citation
    from psirag.agent.loop import AgentResult
    from psirag.index import Index

SAMPLE_LEAVES = 5


def node_path(index: Index, node: int) -> list[int]:
    """Node ids from the node's root down to the node itself."""
    parent = index.tree.parent
    path = [int(node)]
    while parent[path[-1]] >= 0:
        path.append(int(parent[path[-1]]))
    return path[::-1]


def check_node(index: Index, node: int) -> None:
    n = index.tree.n_nodes
    if not 0 <= node < n:
        raise InputError(f"node {node} does not exist: the index has nodes 0..{n - 1}")


def node_label(index: Index, node: int) -> str:
    """A short name for a node that tells it apart from its siblings (:mod:`.labels`)."""
    return labels.node_label(index, node)


def node_document(index: Index, node: int) -> str | None:
    """The document of a leaf, or of an inner node whose leaves all come from one document."""
    first, one = _node_documents.of(index)
    return index.data.chunks[int(first[node])].source.document if one[node] else None


NodeDocuments = tuple[np.ndarray, np.ndarray]
"""Per node: its first leaf, and whether all its leaves come from one document."""


class _NodeDocuments:
    """:data:`NodeDocuments` of the last index data asked (an add or a removal makes new
    data), computed once bottom-up: a /tree answer names thousands of nodes, and gathering each
    one's leaves costs as much as the whole tree per level."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: object = None
        self.documents: NodeDocuments | None = None

    def of(self, index: Index) -> NodeDocuments:
        with self.lock:
            if self.data is not index.data or self.documents is None:
                self.data, self.documents = index.data, _documents_per_node(index)
            return self.documents


def _leaf_document_codes(index: Index) -> np.ndarray:
    """Per leaf, a number of its document (equal numbers, equal documents). From the saved
    document keys when no two documents share a key (as many distinct keys as documents),
    so a loaded index decodes no chunk; else from every leaf's document id."""
    data = index.data
    keyed = data.leaf_document_keys()
    if keyed is not None:
        distinct, codes = np.unique(keyed[0], return_inverse=True)
        if distinct.size == keyed[1]:
            return codes.reshape(-1).astype(np.int64)
    code: dict[str, int] = {}
    docs = data.leaf_documents
    return np.fromiter((code.setdefault(d, len(code)) for d in docs), np.int64, len(docs))


def _documents_per_node(index: Index) -> NodeDocuments:
    tree = index.tree
    codes = _leaf_document_codes(index)
    n = tree.n_leaves
    low = np.full(tree.n_nodes, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(tree.n_nodes, -1, dtype=np.int64)
    first = np.full(tree.n_nodes, n, dtype=np.int64)
    low[:n] = high[:n] = codes
    first[:n] = np.arange(n)
    parent, layer = np.asarray(tree.parent), np.asarray(tree.layer)
    for depth in np.unique(layer):  # children before parents: a parent is layers above
        nodes = np.flatnonzero((layer == depth) & (parent >= 0))
        np.minimum.at(low, parent[nodes], low[nodes])
        np.maximum.at(high, parent[nodes], high[nodes])
        np.minimum.at(first, parent[nodes], first[nodes])
    return first, low == high


_node_documents = _NodeDocuments()


def search_payload(index: Index, query: str, k: int, passages: Sequence[Passage]) -> dict[str, Any]:
    """``search --json``'s document plus each passage's place in the tree."""
    hits = []
    for p in passages:
        leaf = int(p.leaf)
        hits.append(
            {
                "passage": p.id,
                "node": leaf,
                "path": node_path(index, leaf) if leaf >= 0 else [],
            }
        )
    return {
        "schema": SEARCH_SCHEMA,
        "query": query,
        "k": k,
        "passages": [p.to_dict() for p in passages],
        "hits": hits,
    }


def tree_payload(index: Index, node: int | None, depth: int) -> dict[str, Any]:
    """The subtree under ``node`` (default: the root; a forest starts from all its roots),
    ``depth`` levels deep, breadth first."""
    tree = index.tree
    if depth < 0:
        raise InputError(f"depth must be 0 or more, got {depth}")
    if node is None:
        start = [int(r) for r in tree.roots.tolist()]
    else:
        check_node(index, node)
        start = [int(node)]
    nodes: list[dict[str, Any]] = []
    level = start
    names = labels.sibling_labels(index, labels.siblings_of(index, start[0]))
    for d in range(depth + 1):
        below: list[int] = []
        for u in level:
            children = tree.children(u).tolist() if u >= tree.n_leaves else []
            if d < depth and children:
                names.update(labels.sibling_labels(index, children))
            nodes.append(
                {
                    "id": u,
                    "parent": int(tree.parent[u]),
                    "layer": int(tree.layer[u]),
                    "leaves": int(tree.leaf_counts[u]),
                    "label": names[u],
                    "document": node_document(index, u),
                    "has_children": bool(children),
                }
            )
            if d < depth:
                below.extend(int(c) for c in children)
        level = below
    root = start[0] if len(start) == 1 else -1
    return {"root": root, "roots": start, "n_leaves": int(tree.n_leaves), "nodes": nodes}


def node_payload(index: Index, node: int) -> dict[str, Any]:
    """One node: its abstract (a leaf: its text), children, and the leaves most like it."""
    check_node(index, node)
    tree = index.tree
    is_leaf = node < tree.n_leaves
    children = [] if is_leaf else tree.children(node).tolist()
    child_names = labels.sibling_labels(index, children)
    if is_leaf:
        sample = [index.passage(node, 1.0)]
    else:
        leaves = tree.leaves_under(node)
        scores = index.node_vectors[leaves] @ index.node_vectors[node]
        order = np.lexsort((leaves, -scores))[:SAMPLE_LEAVES]
        sample = [index.passage(int(leaves[i]), float(scores[i])) for i in order]
    payload: dict[str, Any] = {
        "id": node,
        "layer": int(tree.layer[node]),
        "parent": int(tree.parent[node]),
        "path": node_path(index, node),
        "abstract": index.node_text(node),
        "label": node_label(index, node),
        "document": node_document(index, node),
        "leaf_count": int(tree.leaf_counts[node]),
        "children": [
            {
                "id": int(c),
                "layer": int(tree.layer[c]),
                "leaves": int(tree.leaf_counts[c]),
                "label": child_names[int(c)],
            }
            for c in children
        ],
        "sample": [p.to_dict() for p in sample],
    }
    if is_leaf:
        payload["source"] = index.source(node).to_dict()
    return payload


def documents_payload(index: Index) -> dict[str, Any]:
    """Every document with its title and chunk count, in corpus order."""
    from psirag.document_keys import document_rows

    rows = document_rows(index.data)
    return {"documents": [{"id": doc, "title": title, "chunks": n} for doc, title, n in rows]}


def passage_entry(n: int, p: Passage) -> dict[str, Any]:
    """One numbered passage of an answer: the passage's own fields (``id``, ``text``, ``score``,
    ``source``, ``also``), its provenance flattened (``document``, ``title``, ``chunk``,
    ``span``, ``page`` of a PDF), and its leaf in the tree (``node``; -1 when unknown)."""
    entry = p.to_dict()
    entry.update(n=n, passage=p.id, node=int(p.leaf), **p.source.to_dict())
    entry.setdefault("page", None)
    return entry


def citations(passages: Sequence[Passage]) -> list[dict[str, Any]]:
    """Numbered passages: ``[n]`` in the text is ``entries[n - 1]`` (see :func:`passage_entry`).
    Used for the top-k ``evidence`` of an answer."""
    return [passage_entry(i, p) for i, p in enumerate(passages, start=1)]


def verified_citations(cited: Sequence[Citation]) -> list[dict[str, Any]]:
    """The citations the model gave and the agent verified (each names a passage it was
    shown), numbered 1.. in the order cited; ``label`` is the model's own label and
    ``passage_id`` the passage's id, as ``psirag ask --json`` has them."""
    out = []
    for i, c in enumerate(cited, start=1):
        entry = passage_entry(i, c.passage)
        entry.update(c.to_dict())  # label and passage_id, as in ``psirag ask --json``
        out.append(entry)
    return out


def answer_payload(result: AgentResult, k: int) -> dict[str, Any]:
    """``citations`` (verified, the model's) and ``evidence`` (the episode's top ``k``) of an
    agent answer, as the HTTP API, the chat endpoints and MCP return them."""
    return {
        "citations": verified_citations(result.citations),
        "evidence": citations(result.evidence[:k]),
    }


def marked_answer(answer: str, cites: Sequence[dict[str, Any]]) -> str:
    """The answer with a ``[n]`` marker per verified citation (``n`` numbers the sources
    list)."""
    marks = "".join(f"[{c['n']}]" for c in cites)
    return f"{answer} {marks}".strip()


def sources_text(cites: Sequence[dict[str, Any]]) -> str:
    """The citations as lines under an answer, for chat front ends that show plain text."""
    lines = []
    for c in cites:
        title = c["title"] or c["document"]
        where = f"{c['document']}, chunk {c['chunk']}, chars {c['span'][0]}-{c['span'][1]}"
        if c.get("page") is not None:
            where += f", page {c['page']}"
        lines.append(f"[{c['n']}] {title} ({where})")
    return "Sources:\n" + "\n".join(lines) if lines else ""


__all__ = [
    "answer_payload",
    "check_node",
    "citations",
    "documents_payload",
    "marked_answer",
    "node_label",
    "node_path",
    "node_payload",
    "passage_entry",
    "search_payload",
    "sources_text",
    "tree_payload",
    "verified_citations",
]
