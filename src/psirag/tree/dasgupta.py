"""Dasgupta's cost of a tree (paper Def. 4.2, SPEC 3) and its parts, in O(n_nodes · dim).

Pure numpy over a :class:`Tree` and its leaf vectors: the tree updates' drift measure
(:func:`psirag.tree.update.tree_drift`) and the skew study (:mod:`psirag.eval.skew`) both read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psirag.tree.model import Tree

__all__ = [
    "DasguptaTerms",
    "dasgupta_cost",
    "dasgupta_terms",
    "flat_dasgupta_cost",
    "node_depth_order",
]


def node_depth_order(parent: np.ndarray) -> np.ndarray:
    """Node ids ordered deepest first (children before parents), for any parent array."""
    parent = np.asarray(parent, dtype=np.int64)
    depth = np.zeros(parent.size, dtype=np.int64)
    anc = parent.copy()
    while True:  # pointer walk: one step per level, vectorised over all nodes
        alive = anc >= 0
        if not alive.any():
            break
        depth[alive] += 1
        anc[alive] = parent[anc[alive]]
    return np.argsort(-depth, kind="stable")


@dataclass(frozen=True)
class DasguptaTerms:
    """Dasgupta-type sums ``Σ_{i<j} w(i, j) · |leaves(LCA(i, j))|`` of one tree, three weights.

    - ``distance``: w = 1 − cos, the paper's Def. 4.2 and SPEC 3 ("lower is better").
    - ``similarity``: w = cos, Dasgupta's (2016) original form, similarity-weighted: lower is
      better (similar pairs should meet low in the tree).
    - ``pairs``: w = 1, the shape term ``P(T)`` alone (the setting of the paper's Theorems 4.3
      and 4.4, which assume d = 1 for every pair).

    ``distance = pairs − similarity`` exactly. So for a *fixed* tree shape a lower ``distance``
    cost means *more* similar pairs under large LCAs: with a distance weight the sum rewards
    refined (deep, near-binary) shapes through ``P(T)`` but penalises good leaf placement. The
    dissimilarity literature maximises it for that reason (Cohen-Addad et al., 2018).
    ``vs_random`` separates the two effects: the distance cost over its expectation when the
    same tree's leaves are permuted at random (``P(T) · mean d``); above 1, dissimilar pairs are
    split higher in the tree than chance would put them (good placement).
    """

    distance: float
    similarity: float
    pairs: float
    mean_distance: float

    @property
    def vs_random(self) -> float:
        expected = self.pairs * self.mean_distance
        return self.distance / expected if expected > 0 else float("nan")

    def as_dict(self) -> dict[str, float]:
        return {
            "distance": self.distance,
            "similarity": self.similarity,
            "pairs": self.pairs,
            "mean_distance": self.mean_distance,
            "distance_vs_random": self.vs_random,
        }


def dasgupta_terms(tree: Tree, embeddings: np.ndarray) -> DasguptaTerms:
    """Exact Dasgupta sums (distance, similarity and unit weights) in O(n_nodes · dim) time.

    With unit rows, the cosine sum over the pairs of a leaf set ``L`` is
    ``(‖Σ_L e‖² − |L|) / 2``, and there are ``C(|L|, 2)`` pairs. The pairs whose LCA is node
    ``u`` are the pairs of ``u``'s leaves not inside one child, so every sum is
    ``Σ_u |L_u| · (S(L_u) − Σ_child S(L_c))``. Float64 throughout. A forest is scored as if one
    virtual root joined its trees.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    parent = np.asarray(tree.parent, dtype=np.int64)
    n_nodes, n = parent.size, tree.n_leaves
    if e.ndim != 2 or e.shape[0] != n:
        raise ValueError(f"{e.shape[0]} embeddings for a tree with {n} leaves")
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    count = np.zeros(n_nodes + 1, dtype=np.float64)  # last slot: the virtual root
    total = np.zeros((n_nodes + 1, e.shape[1]), dtype=np.float64)
    count[:n] = 1.0  # a Tree numbers its leaves 0 .. n-1
    total[:n] = e
    kids_pairs = np.zeros(n_nodes + 1, dtype=np.float64)  # Σ over children of C(|L_c|, 2)
    kids_cos = np.zeros(n_nodes + 1, dtype=np.float64)  # Σ over children of their cosine sums
    target = np.where(parent >= 0, parent, n_nodes)
    cost_pairs = cost_cos = 0.0

    def close(u: int) -> tuple[float, float]:
        nonlocal cost_pairs, cost_cos
        pairs_u = count[u] * (count[u] - 1) / 2
        cos_u = (float(total[u] @ total[u]) - count[u]) / 2
        if count[u] > 1:
            cost_pairs += count[u] * (pairs_u - kids_pairs[u])
            cost_cos += count[u] * (cos_u - kids_cos[u])
        return pairs_u, cos_u

    for u in node_depth_order(parent).tolist():
        pairs_u, cos_u = close(u)
        p = target[u]
        count[p] += count[u]
        total[p] += total[u]
        kids_pairs[p] += pairs_u
        kids_cos[p] += cos_u
    if tree.roots.size > 1:
        close(n_nodes)
    all_pairs = n * (n - 1) / 2
    all_cos = (float(e.sum(axis=0) @ e.sum(axis=0)) - n) / 2
    mean_d = (all_pairs - all_cos) / all_pairs if all_pairs else 0.0
    return DasguptaTerms(
        distance=cost_pairs - cost_cos,
        similarity=cost_cos,
        pairs=cost_pairs,
        mean_distance=mean_d,
    )


def dasgupta_cost(tree: Tree, embeddings: np.ndarray) -> float:
    """Def. 4.2 with ``d = 1 − cosine`` (SPEC 3); see :class:`DasguptaTerms` for how to read it."""
    return dasgupta_terms(tree, embeddings).distance


def flat_dasgupta_cost(embeddings: np.ndarray) -> float:
    """Distance cost of the flat tree (every leaf under one root): ``n · Σ_{i<j} d``."""
    e = np.asarray(embeddings, dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    n = e.shape[0]
    total = e.sum(axis=0)
    return n * (n * (n - 1) / 2 - (float(total @ total) - n) / 2)
