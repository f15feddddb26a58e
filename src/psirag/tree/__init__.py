"""The pure core: arrays in, arrays out. No I/O, no models, no LLM.

Names load on first use (PEP 562): loading a saved index needs :class:`Tree` alone, not the
builders (process pools, neighbour search) that building one needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psirag.lazy import lazy_exports

# ``rebalance`` is also a submodule's name: importing that submodule (as the builders do) binds
# the package attribute to the module, so the function is bound here, before any such import
from psirag.tree.rebalance import rebalance

if TYPE_CHECKING:
    from psirag.tree.approx import knn_candidates, spanning_edges_knn
    from psirag.tree.build import (
        TreeMode,
        build_forest,
        build_tree,
        merge_walk,
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

_WHERE = {
    "knn_candidates": "approx",
    "spanning_edges_knn": "approx",
    "TreeMode": "build",
    "build_forest": "build",
    "build_tree": "build",
    "merge_walk": "build",
    "similarity_matrix": "build",
    "spanning_edges": "build",
    "Tree": "model",
    "RebuildRule": "update",
    "TreeUpdate": "update",
    "check_invariants": "update",
    "insert_leaves": "update",
    "remove_leaves": "update",
    "tree_drift": "update",
    "tree_shape": "update",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())


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
