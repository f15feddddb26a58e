"""One tree by Algorithm 1's walk: spanning edges (exact, knn or ann), the merge, the rebalance.

What :func:`psirag.tree.build.build_tree` runs for every mode but ``bucketed``, and what each
bucket of a bucketed build runs (:mod:`psirag.tree.bucket`), so neither imports the other.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from psirag.tree.ann import spanning_edges_ann
from psirag.tree.approx import spanning_edges_knn
from psirag.tree.exact import Progress, check_exact_memory, similarity_matrix, spanning_edges
from psirag.tree.merge import merge_walk
from psirag.tree.model import Tree
from psirag.tree.rebalance import rebalance, renumber

WalkMode = Literal["exact", "knn", "ann"]
"""How the spanning edges are found: the exact n x n walk, or k nearest neighbours found
exactly (knn) or through an HNSW graph (ann)."""


def build_walk_tree(
    embeddings: np.ndarray,
    mode: WalkMode,
    *,
    neighbors: int = 32,
    max_children: int | None = 40,
    similarity: np.ndarray | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Tree:
    """The tree over validated unit rows (C-contiguous float32), rebalanced unless
    ``max_children`` is None. ``similarity`` (exact mode only) is a precomputed ``E @ E.T``;
    without it the exact mode refuses a matrix that would not fit in memory."""
    n = embeddings.shape[0]
    if n == 1:
        return Tree(parent=np.array([-1], dtype=np.int64), layer=np.array([0], dtype=np.int32))
    if mode == "ann":
        edge_a, edge_b, _ = spanning_edges_ann(
            embeddings, neighbors, progress, threads=workers or 0
        )
    elif mode == "knn":
        edge_a, edge_b, _ = spanning_edges_knn(embeddings, neighbors, progress)
    else:
        if similarity is None:
            check_exact_memory(n)
            similarity = similarity_matrix(embeddings)
        edge_a, edge_b, _ = spanning_edges(similarity, progress)
        del similarity
    parent, layer = merge_walk(n, edge_a, edge_b)
    tree = renumber(parent, layer, n)
    if max_children is not None:
        tree = rebalance(tree, embeddings, max_children)
    return tree


__all__ = ["WalkMode", "build_walk_tree"]
