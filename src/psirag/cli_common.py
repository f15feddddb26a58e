"""Argument types and groups that ``psirag`` and ``psirag eval`` share, in a module of their own
so that the eval CLI does not import the main one (which imports it: a cycle)."""

from __future__ import annotations

import argparse
from typing import get_args

from psirag.config import (
    EXACT_DENSE_LEAVES,
    IndexConfig,
    ProfileName,
    SearchConfig,
    profile_config,
)
from psirag.tree.build import TREE_MODES


def profile_argument(p: argparse.ArgumentParser) -> None:
    """``--profile NAME``: the search preset (config.PROFILES) that other search flags refine."""
    p.add_argument(
        "--profile",
        choices=get_args(ProfileName),
        default="default",
        help="search preset: default (tree + BM25, wide beam, identical texts merged; on an "
        f"index of at most {EXACT_DENSE_LEAVES:,} leaves an exact flat scan stands in for the "
        "tree search), tree (the default with the tree search at every size) or paper (the "
        "paper's tree + BM25, beam 40)",
    )


def profile_from(args: argparse.Namespace) -> SearchConfig:
    return profile_config(getattr(args, "profile", "default"))


def max_children(value: str) -> int | None:
    """``--max-children``: a cap of at least 2, or none."""
    if value.lower() in ("none", "0", "off"):
        return None
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError("--max-children must be at least 2, or 'none'")
    return number


def tree_neighbors(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("--tree-neighbors must be at least 1")
    return number


def bucket_size(value: str) -> int:
    """``--tree-bucket-size``: at least two chunks per bucket."""
    number = int(value)
    if number < 2:
        raise argparse.ArgumentTypeError("--tree-bucket-size must be at least 2")
    return number


def tree_mode_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--tree-mode``, ``--tree-neighbors`` and ``--tree-bucket-size``, shared by ``psirag
    index`` and ``psirag eval``; the mode choices are the config's ``TreeMode`` values."""
    p.add_argument(
        "--tree-mode",
        choices=TREE_MODES,
        default=IndexConfig.tree_mode,
        help="exact: the paper's walk over all chunk pairs (an n x n matrix in memory); knn: "
        "each chunk's nearest neighbours plus the best joins between the pieces, O(n·k) memory; "
        "ann: the same from an HNSW graph, no O(n²) step (pip install 'psirag[ann]'); "
        "bucketed: one tree per k-means bucket, merged on top (paper App. E.1); auto (default): "
        "exact up to 30k chunks when the matrix fits in half the free memory, else knn up to "
        "30k, else bucketed",
    )
    p.add_argument(
        "--tree-neighbors",
        type=tree_neighbors,
        default=IndexConfig.tree_neighbors,
        metavar="K",
        help="neighbours per chunk in the knn and ann tree modes "
        f"(default {IndexConfig.tree_neighbors})",
    )
    p.add_argument(
        "--tree-bucket-size",
        type=bucket_size,
        default=IndexConfig.tree_bucket_size,
        metavar="N",
        help="most chunks per bucket in the bucketed tree mode "
        f"(default {IndexConfig.tree_bucket_size})",
    )


__all__ = ["bucket_size", "max_children", "tree_mode_arguments", "tree_neighbors"]
