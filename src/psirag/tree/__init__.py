"""The pure core: arrays in, arrays out. No I/O, no models, no LLM."""

from psirag.tree.build import (
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
    "build_forest",
    "build_tree",
    "merge_walk",
    "rebalance",
    "similarity_matrix",
    "spanning_edges",
]
