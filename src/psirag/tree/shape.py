"""A tree's shape in a few numbers (fan-out statistics and a histogram), computed once when an
index is saved so that ``psirag inspect`` reads them from the manifest instead of loading the
index."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from psirag.tree.model import Tree

FAN_OUT_EDGES = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025)
"""Bucket edges of the fan-out histogram (each bucket is ``lo..hi-1``)."""

ROOTS_SHOWN = 20
"""How many root ids a summary lists (a forest can have one per document)."""


def fan_out_bucket(f: int) -> tuple[int, int]:
    """The histogram bucket ``(lo, hi)`` (both inclusive) that a fan-out of ``f`` falls in."""
    for lo, hi in itertools.pairwise(FAN_OUT_EDGES):
        if f < hi:
            return lo, hi - 1
    return FAN_OUT_EDGES[-1], 10**9


def fan_out_summary(tree: Tree) -> dict[str, Any]:
    """Min, max, mean and a bucketed histogram of the inner nodes' numbers of children."""
    fan = tree.fan_out[tree.n_leaves :]
    # one count per bucket with numpy (a bucket per node in Python cost 0.9 s of every save
    # at 1M chunks); the same buckets as fan_out_bucket
    edges = np.asarray(FAN_OUT_EDGES)
    at = np.maximum(np.searchsorted(edges, fan, side="right") - 1, 0)  # 0 as fan_out_bucket
    hist = {
        fan_out_bucket(int(edges[k])): int(n)
        for k, n in enumerate(np.bincount(at, minlength=edges.size).tolist())
        if n
    }
    return {
        "min": int(fan.min()) if fan.size else 0,
        "max": int(fan.max()) if fan.size else 0,
        "mean": round(float(fan.mean()), 2) if fan.size else 0.0,
        "histogram": {f"{lo}-{hi}": n for (lo, hi), n in hist.items()},
    }


def shape_summary(tree: Tree) -> dict[str, Any]:
    """What the manifest keeps of the tree's shape: the first roots and the fan-out summary."""
    return {
        "roots": tree.roots.tolist()[:ROOTS_SHOWN],
        "fan_out": fan_out_summary(tree),
    }
