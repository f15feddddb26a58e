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
from psirag.tree.update import (
    RebuildRule,
    TreeUpdate,
    check_invariants,
    insert_leaves,
    remove_leaves,
    tree_drift,
    tree_shape,
)

__all__ = [
    "RebuildRule",
    "Tree",
    "TreeMode",
    "TreeUpdate",
    "build_forest",
    "build_tree",
    "check_invariants",
    "insert_leaves",
    "knn_candidates",
    "merge_walk",
    "rebalance",
    "remove_leaves",
    "similarity_matrix",
    "spanning_edges",
    "spanning_edges_knn",
    "tree_drift",
    "tree_shape",
]
