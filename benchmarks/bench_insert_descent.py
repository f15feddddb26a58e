"""Insertion points by descent against a scan of every leaf (issue 24 item 5), at the tree level.

Synthetic clustered unit vectors (384 dimensions, MiniLM's width; 40 clusters per 10k leaves),
a tree built in the mode a living index of that size gets (``auto``: exact up to 30k, bucketed
beyond), leaf-mean routing vectors as the index keeps them. Then ``insert_leaves`` of 1 chunk
and of 8 chunks (a small document) drawn from the same clusters, with ``--insert scan`` (every leaf
compared, the code before item 5) and by descent (beam 40), interleaved, best of ``--repeats``
in wall and CPU seconds on one BLAS thread; and how often the descent finds the scan's leaf
over 500 such chunks (and how much less similar its leaf is when it does not).

Usage: nice python benchmarks/bench_insert_descent.py [--sizes 20000 200000] [--repeats 5]
       Writes benchmarks/results/insert_descent.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import machine_info, write_result

from psirag.eval.harness import single_thread_blas
from psirag.tree import build_tree, insert_leaves
from psirag.tree.build import resolve_tree_mode
from psirag.tree.update import INSERT_BEAM, descend

DIM = 384


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> np.ndarray:
    """``n`` new points of random clusters: the corpus, and new chunks like it."""
    labels = rng.integers(0, centres.shape[0], n)
    return unit(centres[labels] + 1.5 * rng.normal(size=(n, DIM)))


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def one_size(n: int, repeats: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(8, n * 40 // 10_000), DIM))
    leaves = clustered(rng, centres, n)
    mode = resolve_tree_mode("auto", n)
    t0 = time.perf_counter()
    tree = build_tree(leaves, max_children=40, mode=mode)
    build_s = time.perf_counter() - t0
    mean = np.asarray(tree.leaf_membership[n:] @ leaves, dtype=np.float64)
    nodes = np.vstack([leaves, unit(mean)])
    _ = tree._children_csr  # what a loaded index's tree has after its first search
    row: dict[str, Any] = {"n": n, "mode": mode, "depth": tree.depth, "build_seconds": build_s}
    jobs: dict[str, Callable[[], Any]] = {}
    for m in (1, 8):
        new = clustered(rng, centres, m)
        jobs[f"scan, {m} chunk(s)"] = lambda new=new: insert_leaves(tree, leaves, new)
        jobs[f"descent, {m} chunk(s)"] = lambda new=new: insert_leaves(
            tree, leaves, new, node_vectors=nodes
        )
    walls: dict[str, list[float]] = {k: [] for k in jobs}
    cpus: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(repeats):
        for name, job in jobs.items():
            wall, cpu = timed(job)
            walls[name].append(wall)
            cpus[name].append(cpu)
    row["seconds"] = {k: round(min(v), 4) for k, v in walls.items()}
    row["cpu_seconds"] = {k: round(min(v), 4) for k, v in cpus.items()}
    queries = clustered(rng, centres, 500)
    got, got_sim = descend(tree, nodes, queries, beam=INSERT_BEAM)
    sims = queries @ leaves.T
    want = np.argmax(sims, axis=1)
    want_sim = sims[np.arange(500), want]
    row["same_leaf_as_scan"] = round(float((got == want).mean()), 4)
    row["similarity_lost_mean"] = round(float((want_sim - got_sim).mean()), 5)
    row["similarity_lost_max"] = round(float((want_sim - got_sim).max()), 5)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    with single_thread_blas():
        for n in args.sizes:
            row = one_size(n, args.repeats, args.seed)
            print(row, flush=True)
            rows.append(row)
    result = {"machine": machine_info(), "dim": DIM, "beam": INSERT_BEAM, "rows": rows}
    print(f"wrote {write_result('insert_descent.json', result)}")


if __name__ == "__main__":
    main()
