"""build_tree on 12,000 x 384 clustered unit vectors vs one float32 E @ E.T, same run.

Goal (issue: core): build_tree at most 3x the time of the matmul; peak memory stated.
Usage: python benchmarks/bench_tree.py [--n 12000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np
from _common import ROOT, machine, peak_rss_mib

from psirag.tree import build_tree


def clustered(n: int, dim: int, clusters: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim))
    labels = rng.integers(0, clusters, n)
    e = (centers[labels] + 0.7 * rng.normal(size=(n, dim))).astype(np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=12_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    e = clustered(args.n, args.dim, 60)
    matmul, build = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        t0 = time.perf_counter()
        s = e @ e.T
        matmul.append(time.perf_counter() - t0)
        del s
        t0 = time.perf_counter()
        tree = build_tree(e, max_children=40)
        build.append(time.perf_counter() - t0)
    tracemalloc.start()
    build_tree(e, max_children=40)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    result = {
        "n": args.n,
        "dim": args.dim,
        "matmul_seconds_min": min(matmul),
        "build_tree_seconds_min": min(build),
        "ratio_min_over_min": min(build) / min(matmul),
        "matmul_seconds": matmul,
        "build_tree_seconds": build,
        "matrix_mib": 4 * args.n * args.n / 2**20,
        "traced_peak_mib": traced_peak / 2**20,
        "process_peak_rss_mib": peak_rss_mib(),
        "layers": tree.layer_sizes(),
        "max_fan_out": int(tree.fan_out.max()),
        "machine": machine(),
    }
    (ROOT / "benchmarks" / "results" / "tree.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
