"""Insertion points by descent against a scan of every leaf (issue 24 item 5), at the tree level.

Synthetic clustered unit vectors (384 dimensions, MiniLM's width; 40 clusters per 10k leaves),
a tree built in the mode a living index of that size gets (``auto``: exact up to 30k, bucketed
beyond), leaf-mean routing vectors as the index keeps them. Then ``insert_leaves`` of 1 chunk
and of 8 chunks (a small document) drawn from the same clusters, with ``--insert scan`` (every leaf
compared, the code before item 5) and by descent (beam 40), interleaved, best of ``--repeats``
in wall and CPU seconds on one BLAS thread; and how often the descent finds the scan's leaf
over 500 such chunks (and how much less similar its leaf is when it does not).

With ``psirag[hnsw]`` installed, the same for insertion points found through the leaves' HNSW
graph (``LeafGraph.nearest``: 10 graph hits at ef 128 rescored exactly, what an index with a
graph uses), its time included; the graph's build time is reported apart (the index builds it
anyway). ``--no-graph`` skips it.

Usage: nice python benchmarks/bench_insert_descent.py [--sizes 20000 200000] [--repeats 5]
       [--no-graph] [--out insert_descent.json]
       Writes benchmarks/results/<out>.
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


def one_size(n: int, repeats: int, seed: int, with_graph: bool = True) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(8, n * 40 // 10_000), DIM))
    leaves = clustered(rng, centres, n)
    mode = resolve_tree_mode("auto", n)
    t0 = time.perf_counter()
    tree = build_tree(leaves, max_children=40, mode=mode)
    build_s = time.perf_counter() - t0
    mean = np.asarray(tree.leaf_membership[n:] @ leaves, dtype=np.float64)
    nodes = np.vstack([leaves, unit(mean)])
    _ = tree.children_table  # what a loaded index's tree has after its first search
    row: dict[str, Any] = {"n": n, "mode": mode, "depth": tree.depth, "build_seconds": build_s}
    graph = None
    if with_graph:
        from psirag.retrieval.leaf_graph import LeafGraph, usearch_available

        if usearch_available():
            t0 = time.perf_counter()
            graph = LeafGraph.build(leaves)
            row["graph_build_seconds"] = round(time.perf_counter() - t0, 1)
    jobs: dict[str, Callable[[], Any]] = {}
    for m in (1, 8):
        new = clustered(rng, centres, m)
        jobs[f"scan, {m} chunk(s)"] = lambda new=new: insert_leaves(tree, leaves, new)
        jobs[f"descent, {m} chunk(s)"] = lambda new=new: insert_leaves(
            tree, leaves, new, node_vectors=nodes
        )
        if graph is not None:
            jobs[f"graph, {m} chunk(s)"] = lambda new=new, g=graph: insert_leaves(
                tree, leaves, new, node_vectors=nodes, nearest=g.nearest(new, leaves, threads=1)
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
    c0 = time.process_time()
    got, got_sim = descend(tree, nodes, queries, beam=INSERT_BEAM)
    c1 = time.process_time()
    sims = queries @ leaves.T
    want = np.argmax(sims, axis=1)
    c2 = time.process_time()
    # the insertion points alone (without the rest of insert_leaves), per chunk, over 500
    per_chunk = {"descent": (c1 - c0) / 500, "scan": (c2 - c1) / 500}
    want_sim = sims[np.arange(500), want]
    row["same_leaf_as_scan"] = round(float((got == want).mean()), 4)
    row["similarity_lost_mean"] = round(float((want_sim - got_sim).mean()), 5)
    row["similarity_lost_max"] = round(float((want_sim - got_sim).max()), 5)
    if graph is not None:
        c0 = time.process_time()
        by_graph, graph_sim = graph.nearest(queries, leaves, threads=1)
        per_chunk["graph"] = (time.process_time() - c0) / 500
        row["graph_same_leaf_as_scan"] = round(float((by_graph == want).mean()), 4)
        row["graph_similarity_lost_mean"] = round(float((want_sim - graph_sim).mean()), 5)
        row["graph_similarity_lost_max"] = round(float((want_sim - graph_sim).max()), 5)
    row["points_cpu_seconds_per_chunk"] = {k: round(v, 6) for k, v in per_chunk.items()}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-graph", action="store_true", help="skip the HNSW graph's insertion")
    ap.add_argument("--out", default="insert_descent.json")
    args = ap.parse_args()
    rows = []
    with single_thread_blas():
        for n in args.sizes:
            row = one_size(n, args.repeats, args.seed, not args.no_graph)
            print(row, flush=True)
            rows.append(row)
    result = {"machine": machine_info(), "dim": DIM, "beam": INSERT_BEAM, "rows": rows}
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
