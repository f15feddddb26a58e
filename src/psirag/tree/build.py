"""Abstract-tree construction (paper Algorithm 1; SPEC 1.3-1.5): modes, and the entry points.

The exact walk's edges come from :mod:`psirag.tree.exact`, Algorithm 1's merge from
:mod:`psirag.tree.merge` and the rebalance (SPEC 1.5) from :mod:`psirag.tree.rebalance`;
:mod:`psirag.tree.walk` puts them together for one tree.

Corpora whose matrix does not fit use ``mode="knn"`` (SPEC 4, :mod:`psirag.tree.approx`): the
same replay on an approximate spanning tree from nearest-neighbour pairs, in O(n·k) memory;
``mode="ann"`` (:mod:`psirag.tree.ann`) finds those pairs through an HNSW graph instead, with no
O(n²) step; ``mode="bucketed"`` (:mod:`psirag.tree.bucket`) builds one tree per k-means bucket
and merges them on top (paper App. E.1).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from psirag.errors import InputError
from psirag.tree.bucket import DEFAULT_BUCKET_SIZE, BucketRunner, build_bucketed
from psirag.tree.exact import (
    Progress,
    check_exact_memory,
    exact_fits,
    similarity_matrix,
    spanning_edges,
    validate_embeddings,
)
from psirag.tree.machine import available_memory_bytes
from psirag.tree.merge import merge_walk
from psirag.tree.model import Tree
from psirag.tree.modes import MODES_TEXT, TREE_MODES, TreeMode, check_tree_mode
from psirag.tree.rebalance import (
    rebalance,
    renumber,
    renumber_order,
    reorder,
    split_overfull,
)
from psirag.tree.walk import build_walk_tree

ResolvedTreeMode = Literal["exact", "knn", "ann", "bucketed"]

AUTO_EXACT_MAX = 30_000
"""Auto uses the exact walk up to this many chunks when its matrix fits: a 3.4 GiB matrix and
O(n²) time at 30k (the exact build took 10.6 CPU s at 25k, bench_knn.py), while the bucketed
build took 12 CPU s for 100k leaves (164 s wall, 3.0 GiB for 1M) and kept 2Wiki's Recall@5
within +0.2..+0.4 points of the exact tree for every bucket bound from 512 to 4,096
(BENCHMARKS.md "Scale")."""


def resolve_tree_mode(mode: str, n: int) -> ResolvedTreeMode:
    """The mode a build over ``n`` leaves runs in.

    ``auto``: exact up to :data:`AUTO_EXACT_MAX` chunks when the n x n matrix fits in half the
    free memory; knn up to that size when it does not (the closest approximation: the exact
    tree from 16 neighbours on 2Wiki); bucketed beyond (linear time, O(n·d) memory, no optional
    dependency; ann needs hnswlib and builds its graph on one thread, several times slower;
    measured in BENCHMARKS.md "Scale").
    """
    if mode not in TREE_MODES:
        raise InputError(f"tree mode must be one of {MODES_TEXT}, got {mode!r}")
    if mode == "auto":
        if n <= AUTO_EXACT_MAX:
            return "exact" if exact_fits(n) else "knn"
        return "bucketed"
    return mode  # type: ignore[return-value]


def build_tree(
    embeddings: np.ndarray,
    max_children: int | None = 40,
    *,
    similarity: np.ndarray | None = None,
    progress: Progress | None = None,
    mode: TreeMode = "exact",
    neighbors: int = 32,
    bucket_size: int = DEFAULT_BUCKET_SIZE,
    workers: int | None = None,
    bucket_runner: BucketRunner | None = None,
) -> Tree:
    """Build the abstract tree over unit-normalised chunk embeddings (one leaf per row).

    ``mode="exact"`` equals the full descending-order walk of SPEC 1.3-1.4 (n - 1 effective
    unions, one root); it holds one n x n float32 matrix and refuses with
    :class:`ResourceError` when that would not fit in memory. ``mode="knn"`` walks only each
    leaf's ``neighbors`` most similar leaves plus the best joins between the resulting
    components (SPEC 4, :mod:`psirag.tree.approx`): O(n·k) memory, the exact tree when
    ``neighbors >= n - 1``. ``mode="ann"`` takes the same path with neighbours from an HNSW
    graph (:mod:`psirag.tree.ann`); ``mode="bucketed"`` builds one tree per k-means bucket of at
    most ``bucket_size`` leaves on ``workers`` processes and merges them
    (:mod:`psirag.tree.bucket`; ``bucket_runner``, e.g. a Ray one, builds the buckets instead
    of local processes). ``mode="auto"`` picks one by size and memory
    (:func:`resolve_tree_mode`).
    Either way the tree is then rebalanced per SPEC 1.5 unless ``max_children`` is None.
    ``similarity`` may pass a precomputed symmetric ``E @ E.T`` for the exact walk (it is read,
    not modified). ``progress(done, total)`` is called while the spanning edges are found.
    """
    check_tree_mode(mode, neighbors)
    e = validate_embeddings(embeddings)
    n = e.shape[0]
    if similarity is not None and mode not in ("exact", "auto"):
        raise InputError(f"a precomputed similarity matrix is for the exact mode, not {mode}")
    if n == 1:
        return Tree(parent=np.array([-1], dtype=np.int64), layer=np.array([0], dtype=np.int32))
    resolved = "exact" if similarity is not None else resolve_tree_mode(mode, n)
    if resolved == "bucketed":
        parent, layer = build_bucketed(
            e,
            bucket_size=bucket_size,
            neighbors=neighbors,
            max_children=max_children,
            workers=workers,
            runner=bucket_runner,
        )
        tree = renumber(parent, layer, n)
        return tree if max_children is None else rebalance(tree, e, max_children)
    return build_walk_tree(
        e,
        resolved,
        neighbors=neighbors,
        max_children=max_children,
        similarity=similarity,
        progress=progress,
        workers=workers,
    )


def build_forest(
    embeddings: np.ndarray,
    groups: np.ndarray,
    max_children: int | None = 40,
    *,
    progress: Progress | None = None,
    mode: TreeMode = "exact",
    neighbors: int = 32,
    bucket_size: int = DEFAULT_BUCKET_SIZE,
    bucket_runner: BucketRunner | None = None,
) -> Tree:
    """One tree per group of leaves (the single-document setting), as one forest.

    ``groups[i]`` names the group of leaf ``i``. Leaves keep their ids; each group's abstract
    nodes are built by :func:`build_tree` on that group alone, so trees never mix groups.
    ``mode`` and ``neighbors`` apply per group (``auto`` decides for each group's size).
    """
    check_tree_mode(mode, neighbors)
    e = validate_embeddings(embeddings)
    n = e.shape[0]
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError("groups needs one entry per embedding row")
    parent_parts: list[np.ndarray] = [np.full(n, -1, dtype=np.int64)]
    layer_parts: list[np.ndarray] = [np.zeros(n, dtype=np.int64)]
    next_id = n
    values = np.unique(groups)
    for done, value in enumerate(values):
        if progress is not None:
            progress(done, values.size)
        members = np.flatnonzero(groups == value)
        sub = build_tree(
            e[members],
            max_children=max_children,
            mode=mode,
            neighbors=neighbors,
            bucket_size=bucket_size,
            bucket_runner=bucket_runner,
        )
        m = members.size
        # sub ids: 0..m-1 are its leaves (global ids `members`), m.. its abstract nodes
        to_global = np.concatenate([members, next_id + np.arange(sub.n_nodes - m)])
        sub_parent = np.where(sub.parent >= 0, to_global[np.maximum(sub.parent, 0)], -1)
        parent_parts[0][members] = sub_parent[:m]
        parent_parts.append(sub_parent[m:])
        layer_parts.append(sub.layer[m:].astype(np.int64))
        next_id += sub.n_nodes - m
    if progress is not None:
        progress(values.size, values.size)
    return renumber(np.concatenate(parent_parts), np.concatenate(layer_parts), n)


__all__ = [
    "AUTO_EXACT_MAX",
    "TREE_MODES",
    "Progress",
    "ResolvedTreeMode",
    "TreeMode",
    "available_memory_bytes",
    "build_forest",
    "build_tree",
    "check_exact_memory",
    "check_tree_mode",
    "exact_fits",
    "merge_walk",
    "rebalance",
    "renumber",
    "renumber_order",
    "reorder",
    "resolve_tree_mode",
    "similarity_matrix",
    "spanning_edges",
    "split_overfull",
    "validate_embeddings",
]
