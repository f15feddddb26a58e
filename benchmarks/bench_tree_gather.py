"""Tree search with its rows gathered by ``np.take`` and children by one fancy index, against
the per-node version it replaced (a Python slice per kept node, rows by plain fancy indexing).

One bucketed-mode tree over ``--n`` synthetic clustered unit vectors (dim 384, 200 clusters, as
bench_latency.py), leaf-mean routing; ``--queries`` noisy corpus vectors; every query runs both
versions in alternating order (the same caches and load for both), in this thread's CPU time,
BLAS on one thread, per beam width. Both versions must return the same leaves and scores, bit
for bit (the script stops otherwise).

Usage: nice -n 10 python benchmarks/bench_tree_gather.py [--n 100000] [--queries 300]
       [--beams 40 160]; writes benchmarks/results/tree_gather.json.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import clustered_with_labels, latency_stats, machine_info, write_result

from psirag.eval.harness import single_thread_blas
from psirag.retrieval.tree_search import TreeSearcher
from psirag.tree import build_tree


class PerNodeSearcher(TreeSearcher):
    """The search as it was: one slice per kept node, rows by fancy indexing."""

    def _children(self, nodes: np.ndarray) -> np.ndarray:
        starts, ends = self.offsets[nodes], self.offsets[nodes + 1]
        if nodes.size == 1:
            return self.order[starts[0] : ends[0]]
        return np.concatenate([self.order[s:e] for s, e in zip(starts, ends, strict=True)])

    def _score(self, nodes: np.ndarray, q: np.ndarray) -> np.ndarray:
        return self.vectors[nodes] @ q


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--beams", type=int, nargs="+", default=[40, 160])
    args = ap.parse_args()
    e, _ = clustered_with_labels(args.n, 384, 200, 0)
    tree = build_tree(e, max_children=40, mode="bucketed")
    means = np.asarray(tree.leaf_membership[args.n :] @ e)
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    vectors = np.concatenate([e, means]).astype(np.float32)
    searchers = {"this": TreeSearcher(tree, vectors), "per-node": PerNodeSearcher(tree, vectors)}
    rng = np.random.default_rng(2)
    noisy = e[rng.choice(args.n, args.queries, replace=False)]
    noisy = noisy + 0.05 * rng.normal(size=noisy.shape).astype(np.float32)
    queries = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    rows: list[dict[str, Any]] = []
    with single_thread_blas():
        for beam in args.beams:
            ms: dict[str, list[float]] = {name: [] for name in searchers}
            for i, q in enumerate(queries):
                names = list(searchers) if i % 2 else list(searchers)[::-1]
                hits = {}
                for name in names:
                    c0 = time.thread_time_ns()
                    hits[name] = searchers[name].search(q, k=10, beam=beam)
                    ms[name].append((time.thread_time_ns() - c0) / 1e6)
                a, b = hits["this"], hits["per-node"]
                if not (np.array_equal(a.leaves, b.leaves) and np.array_equal(a.scores, b.scores)):
                    raise SystemExit(f"query {i}, beam {beam}: the two versions disagree")
            stats = {name: latency_stats(v) for name, v in ms.items()}
            scored = searchers["this"].search(queries[0], k=10, beam=beam, collect_visited=True)
            rows.append(
                {
                    "beam": beam,
                    "cpu_ms": stats,
                    "per_node_over_this_p50": round(
                        stats["per-node"]["p50"] / stats["this"]["p50"], 2
                    ),
                    "nodes_scored_first_query": int(scored.visited.size),
                    "same_results": True,
                }
            )
            print(rows[-1], flush=True)
    result = {
        "machine": machine_info(),
        "n": args.n,
        "queries": args.queries,
        "layers": tree.layer_sizes(),
        "rows": rows,
    }
    print(f"wrote {write_result('tree_gather.json', result)}")


if __name__ == "__main__":
    main()
