"""The tree modes and their check: a light module, so that reading a config or building the
command line does not load the tree builders (:mod:`psirag.tree.build` re-exports these)."""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from psirag.errors import InputError

TreeMode = Literal["auto", "exact", "knn", "ann", "bucketed"]
"""How the spanning edges are found: the exact n x n walk, k nearest neighbours found exactly
(knn) or through an HNSW graph (ann, the ``psirag[ann]`` extra), one tree per k-means bucket
merged on top (bucketed), or chosen by size and free memory (auto,
:func:`psirag.tree.build.resolve_tree_mode`)."""
TREE_MODES: tuple[str, ...] = get_args(TreeMode)
MODES_TEXT = ", ".join(TREE_MODES)


def check_tree_mode(
    mode: str, neighbors: int, *, names: tuple[str, str] = ("tree mode", "tree neighbours")
) -> None:
    """Reject an unknown tree mode or a neighbour count below one, naming the allowed values.

    ``names`` are the two settings as the caller's user knows them (``IndexConfig`` passes its
    field names), so one check serves the config and the pure builder alike.
    """
    mode_name, neighbors_name = names
    if mode not in TREE_MODES:
        raise InputError(f"{mode_name} must be one of {MODES_TEXT}, got {mode!r}")
    if isinstance(neighbors, bool) or not isinstance(neighbors, (int, np.integer)) or neighbors < 1:
        raise InputError(f"{neighbors_name} must be a positive integer, got {neighbors!r}")


__all__ = ["MODES_TEXT", "TREE_MODES", "TreeMode", "check_tree_mode"]
