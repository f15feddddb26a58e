"""The pure core: arrays in, arrays out. No I/O, no models, no LLM."""

from psirag.tree.approx import knn_candidates, spanning_edges_knn
from psirag.tree.build import (
    TreeMode,
    build_forest,
    build_tree,
    merge_walk,
    rebalance,
    similarity_matrix,
    spanning_edges,
)
from psirag.tree.model import Tree

__all__ = [
    "Tree",
    "TreeMode",
    "build_forest",
    "build_tree",
    "knn_candidates",
    "merge_walk",
    "rebalance",
    "similarity_matrix",
    "spanning_edges",
    "spanning_edges_knn",
]
