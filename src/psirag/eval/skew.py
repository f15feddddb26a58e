"""The skewed-distribution study of paper Section 4: does a tree keep a minor topic apart?

A corpus mixes many passages of a *major* topic with few of a semantically distant *minor* one.
k-means-type cluster trees (RAPTOR's GMM) tend to make clusters of similar size (the "uniform
effect"), so minor passages end up under abstract nodes dominated by major ones; Ψ's merge order
(a maximum spanning tree of the similarity graph) should keep a minor topic in its own subtrees.

Measured here, for any tree given as node leaf sets (psi's :class:`Tree`, or a RAPTOR tree whose
soft leaf sets overlap):

- **mixed nodes**: abstract nodes whose leaf set holds both minor and major leaves, per layer;
- **minor leaves under mixed nodes**: the share of minor leaves that sit in at least one mixed
  node of a layer (layer 1: the abstract that first summarises them is a blend);
- **Dasgupta's cost** (paper Def. 4.2), ``Σ_{i<j} d(i, j) · |leaves(LCA(i, j))|`` with
  ``d = 1 − cos`` (SPEC 3 reads it "lower is better"), beside the similarity-weighted form and
  the shape term, which tell apart what the distance form mixes (:class:`DasguptaTerms`). For
  RAPTOR's soft assignment the LCA is taken in the tree of hard (most probable) parents,
  :meth:`RaptorTree.hard_tree`.

Topic labels for 2WikiMultihopQA come from the first sentence of a passage
(:func:`label_2wiki`): "X is a 1973 film ..." is a film; footballers, albums/songs, politicians
and geographic features (rivers, mountains, villages) are the distant minor topics.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from psirag.tree.dasgupta import (
    DasguptaTerms,
    dasgupta_cost,
    dasgupta_terms,
    flat_dasgupta_cost,
    node_depth_order,
)
from psirag.tree.model import Tree

__all__ = [
    "TOPIC_PATTERNS",
    "DasguptaTerms",
    "dasgupta_cost",
    "dasgupta_terms",
    "flat_dasgupta_cost",
    "label_2wiki",
    "mixed_node_stats",
    "node_depth_order",
    "plot_layers",
    "skewed_sample",
]

# ------------------------------------------------------------------ mixed nodes


def mixed_node_stats(
    membership: sp.spmatrix, layer: np.ndarray, is_minor: np.ndarray
) -> dict[str, Any]:
    """Per-layer counts of abstract nodes that mix minor with major leaves.

    ``membership`` is the node x leaf 0/1 matrix of leaf sets (psi: ``tree.leaf_membership``;
    RAPTOR: ``RaptorTree.membership``, soft sets that may overlap); ``layer[u]`` is 0 for leaves.
    Returns, per layer >= 1: nodes, nodes holding any minor leaf, mixed nodes, pure-minor nodes,
    the share of minor leaves inside at least one mixed node of that layer, and the mean minor
    share of the nodes holding a minor leaf (1.0 when every minor leaf is kept apart).
    """
    m = sp.csr_matrix(membership, dtype=np.float64)
    minor = np.asarray(is_minor, dtype=bool)
    layer = np.asarray(layer)
    size = np.asarray(m.sum(axis=1)).ravel()
    n_minor = m @ minor.astype(np.float64)
    n_major = size - n_minor
    out: list[dict[str, Any]] = []
    for lv in range(1, int(layer.max()) + 1 if layer.size else 1):
        nodes = np.flatnonzero((layer == lv) & (size > 0))
        if nodes.size == 0:
            continue
        has_minor = n_minor[nodes] > 0
        mixed = has_minor & (n_major[nodes] > 0)
        mixed_nodes = nodes[mixed]
        covered = np.asarray(m[mixed_nodes].sum(axis=0)).ravel() > 0
        share = n_minor[nodes[has_minor]] / size[nodes[has_minor]]
        out.append(
            {
                "layer": lv,
                "nodes": int(nodes.size),
                "with_minor": int(has_minor.sum()),
                "mixed": int(mixed.sum()),
                "pure_minor": int((has_minor & ~mixed).sum()),
                "minor_under_mixed": float(covered[minor].mean()) if minor.any() else 0.0,
                "minor_share_of_minor_nodes": float(share.mean()) if share.size else 0.0,
            }
        )
    return {
        "layers": out,
        "mixed_total": int(sum(row["mixed"] for row in out)),
        "minor_under_mixed_layer1": out[0]["minor_under_mixed"] if out else 0.0,
    }


# ------------------------------------------------------------------ data


TOPIC_PATTERNS: dict[str, str] = {
    # a film as a work ("is a 1973 British drama film"), not a film person
    "film": r"\b(?:is|was) an? \d{4} (?:[\w'’\-]+ ){0,6}?(?:film|movie)\b"
    r"(?! (?:director|actor|actress|producer|editor|critic|composer|maker))",
    "football": r"\b(?:footballer|football player|soccer player)\b",
    "music": r"\b(?:is|was) (?:an?|the) (?:[\w'’\-.,]+ ){0,7}?(?:album|song|single|EP)\b",
    "politics": r"\bpolitician\b",
    "geography": r"\b(?:is|was) (?:an?|the) (?:[\w'’\-.,]+ ){0,7}?"
    r"(?:village|town|river|mountain|commune|municipality|lake|island)\b",
}
"""First-sentence patterns of the 2Wiki topics (a passage matching several gets no label)."""

_FIRST_SENTENCE = re.compile(r"(.+?[.!?])(?:\s|$)", re.S)


def label_2wiki(records: Sequence[dict[str, Any]]) -> list[str | None]:
    """Topic of each ``{title, text}`` record from its first sentence, or None."""
    compiled = {k: re.compile(p) for k, p in TOPIC_PATTERNS.items()}
    labels: list[str | None] = []
    for record in records:
        match = _FIRST_SENTENCE.match(record["text"])
        first = match.group(1) if match else record["text"]
        hits = [k for k, rx in compiled.items() if rx.search(first)]
        labels.append(hits[0] if len(hits) == 1 else None)
    return labels


def skewed_sample(
    labels: Sequence[str | None],
    major: str,
    minor: str,
    *,
    n_total: int,
    minor_share: float,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a random major/minor mixture and its minor mask, in corpus order.

    ``round(n_total * minor_share)`` minor records, the rest major, sampled without replacement.
    """
    rng = np.random.default_rng(seed)
    lab = np.asarray(labels, dtype=object)
    n_minor = round(n_total * minor_share)
    pools = {
        major: np.flatnonzero(lab == major),
        minor: np.flatnonzero(lab == minor),
    }
    need = {major: n_total - n_minor, minor: n_minor}
    for topic, pool in pools.items():
        if pool.size < need[topic]:
            raise ValueError(f"only {pool.size} {topic!r} records, {need[topic]} needed")
    picked = np.concatenate(
        [rng.choice(pools[t], size=need[t], replace=False) for t in (major, minor)]
    )
    order = np.sort(picked)
    return order, np.isin(order, pools[minor])


# ------------------------------------------------------------------ pictures


def _minor_share(membership: sp.spmatrix, minor: np.ndarray) -> np.ndarray:
    """Share of minor leaves in each row's leaf set (NaN for an empty set)."""
    m = sp.csr_matrix(membership, dtype=np.float64)
    size = np.asarray(m.sum(axis=1)).ravel()
    n_min = m @ minor.astype(np.float64)
    return np.divide(n_min, size, out=np.full(size.shape, np.nan), where=size > 0)


def plot_layers(
    ax: Any,
    tree: Tree,
    is_minor: np.ndarray,
    *,
    colour_membership: sp.spmatrix | None = None,
    title: str = "",
) -> None:
    """Icicle picture of a tree: one band per layer (leaves at the bottom), each node a box
    as wide as its leaf count, coloured by its minor share (grey: no leaves); mixed nodes outlined.

    Layout follows ``tree`` (for RAPTOR: the hard tree). ``colour_membership`` may give other
    leaf sets for the colours (RAPTOR's soft sets: a node coloured by what its abstract covers).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    minor = np.asarray(is_minor, dtype=bool)
    n = tree.n_leaves
    counts = tree.leaf_counts
    offsets, order = tree.children_table
    # x position: leaf order of a depth-first walk, so every node's leaves are contiguous
    x0 = np.zeros(tree.n_nodes)
    cursor = 0.0
    stack = sorted(tree.roots.tolist(), reverse=True)
    while stack:
        u = stack.pop()
        x0[u] = cursor
        if tree.layer[u] == 0:
            cursor += 1.0
            continue
        kids = order[offsets[u] : offsets[u + 1]].tolist()
        stack.extend(reversed(kids))
    share = _minor_share(tree.leaf_membership, minor)
    if colour_membership is not None:  # rows it lacks (a virtual root) keep the layout's sets
        soft = _minor_share(colour_membership, minor)
        share[: soft.size] = soft
    cmap = plt.get_cmap("RdYlBu")  # red: major only, yellow: half and half, blue: minor only
    depth = tree.depth
    for u in range(tree.n_nodes):
        if counts[u] == 0:
            continue
        lv = int(tree.layer[u])
        s = share[u]
        mixed = bool(lv > 0 and 0 < s < 1)
        ax.add_patch(
            Rectangle(
                (x0[u], lv),
                counts[u],
                0.9,
                facecolor="0.8" if np.isnan(s) else cmap(s),
                edgecolor="black" if mixed else "white",
                linewidth=0.8 if mixed else 0.3,
                zorder=3 if mixed else 2,
            )
        )
    ax.set_xlim(0, n)
    ax.set_ylim(0, depth + 1)
    ax.set_yticks(np.arange(depth + 1) + 0.45, [str(i) for i in range(depth + 1)])
    ax.set_ylabel("layer")
    ax.set_xlabel("leaves (depth-first order)")
    ax.set_title(title, fontsize=9)
