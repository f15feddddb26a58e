"""The summary of a saved index: what ``psirag inspect --json`` prints under "index" and what
``GET /index`` serves. It sits below the CLI and the server so neither imports the other."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psirag.index import Index

FAN_OUT_EDGES = (1, 2, 3, 5, 9, 17, 33, 65, 129, 257, 513, 1025)
"""Bucket edges of the fan-out histogram (each bucket is ``lo..hi-1``)."""


def inspect_summary(index: Index, folder: str | Path, *, verify: bool = False) -> dict[str, Any]:
    """What ``psirag inspect --json`` prints under "index" (also served by ``GET /index``)."""
    from psirag.storage import IndexStore

    tree = index.tree
    fan = tree.fan_out[tree.n_leaves :]
    hist = dict(
        sorted(Counter(fan_out_bucket(int(f)) for f in fan).items(), key=lambda kv: kv[0][0])
    )
    manifest = index.describe()
    storage = IndexStore(folder).describe()
    storage["verified"] = "sha256" if verify else "sizes"
    return {
        "index": str(folder),
        "storage": storage,
        "drift": index.drift() if callable(getattr(index, "drift", None)) else None,
        "embedder": manifest["embedder"],
        "config": manifest["config"],
        **manifest["counts"],
        "roots": tree.roots.tolist()[:20],
        "fan_out": {
            "min": int(fan.min()) if fan.size else 0,
            "max": int(fan.max()) if fan.size else 0,
            "mean": round(float(fan.mean()), 2) if fan.size else 0.0,
            "histogram": {f"{lo}-{hi}": n for (lo, hi), n in hist.items()},
        },
    }


def fan_out_bucket(f: int) -> tuple[int, int]:
    """The histogram bucket ``(lo, hi)`` (both inclusive) that a fan-out of ``f`` falls in."""
    for lo, hi in itertools.pairwise(FAN_OUT_EDGES):
        if f < hi:
            return lo, hi - 1
    return FAN_OUT_EDGES[-1], 10**9


__all__ = ["fan_out_bucket", "inspect_summary"]
