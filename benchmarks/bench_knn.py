"""The knn tree mode (SPEC 4) against the exact walk: how close, how fast, how much memory.

(a) 2WikiMultihopQA, all 6,119 passages, MiniLM vectors from the benchmark embedding cache. The
    exact spanning tree (the one Algorithm 1's walk follows) against the knn one for several
    neighbour counts k: the share of the exact tree's edges the knn tree keeps, its total
    similarity against the exact maximum, the layer sizes, the tree-stage seconds of
    ``Index.build`` and Recall@2/5 over the 1,000 questions, for psi (tree + BM25, RRF, the
    default search) and for the tree alone.
(b) Synthetic clustered unit vectors (dim 384, 60 clusters): ``build_tree`` in knn mode (k 32,
    the default) at sizes where the exact n x n matrix grows to gigabytes, and the exact build
    where it fits; each size in a fresh child process with one BLAS thread, reporting seconds,
    process CPU seconds and the peak RSS above the pre-build RSS.

Usage: python benchmarks/bench_knn.py [--neighbors 4 8 16 32 64]
       [--knn-sizes 12000 25000 50000 100000] [--exact-sizes 12000 25000] [--limit N]
       Writes benchmarks/results/knn.json.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from _common import (
    CachedVectors,
    clustered,
    current_rss_mib,
    machine_info,
    peak_rss_mib,
    run_worker,
    search_recall,
    two_wiki_index,
    two_wiki_queries,
    write_result,
)

from psirag import SearchConfig
from psirag.eval.harness import single_thread_blas
from psirag.tree.approx import spanning_edges_knn
from psirag.tree.build import similarity_matrix, spanning_edges


def edge_agreement(
    exact: tuple[np.ndarray, np.ndarray, np.ndarray], approx: tuple[np.ndarray, ...]
) -> dict[str, float]:
    """Share of the exact spanning edges that the approximate tree has, and its weight ratio."""
    n_edges = exact[0].size
    mine = {(int(a), int(b)) for a, b in zip(approx[0], approx[1], strict=True)}
    shared = sum((int(a), int(b)) in mine for a, b in zip(exact[0], exact[1], strict=True))
    return {
        "shared_edges_pct": round(100 * shared / max(n_edges, 1), 2),
        "weight_ratio": round(float(approx[2].sum(dtype=np.float64) / exact[2].sum()), 6),
    }


def two_wiki(neighbors: list[int], limit: int | None) -> dict[str, Any]:
    """Part (a): exact against knn trees over all 2Wiki passages."""
    corpus, queries, golds = two_wiki_queries(limit)
    embedder = CachedVectors()
    qvecs = embedder.embed(queries)
    fused, tree_only = SearchConfig(), SearchConfig(use_bm25=False)

    rows = []
    exact_edges: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    with single_thread_blas():
        for k in [0, *neighbors]:  # 0: the exact walk
            mode = "exact" if k == 0 else "knn"
            index, _ = two_wiki_index(corpus, embedder, tree_mode=mode, tree_neighbors=k or 32)
            e = np.asarray(index.node_vectors[: index.tree.n_leaves], dtype=np.float32)
            c0, t0 = time.process_time(), time.perf_counter()
            edges = spanning_edges(similarity_matrix(e)) if k == 0 else spanning_edges_knn(e, k)
            edge_seconds, edge_cpu = time.perf_counter() - t0, time.process_time() - c0
            if exact_edges is None:
                exact_edges = edges
            row = {
                "mode": mode,
                "neighbors": k or None,
                "spanning_edges_seconds": round(edge_seconds, 3),
                "spanning_edges_cpu_seconds": round(edge_cpu, 3),
                "tree_stage_seconds": round(index.stats.seconds["tree"], 3),
                "layers": index.tree.layer_sizes(),
                **edge_agreement(exact_edges, edges),
                "psi": search_recall(index, queries, qvecs, golds, fused),
                "tree_alone": search_recall(index, queries, qvecs, golds, tree_only),
            }
            rows.append(row)
            print(row, flush=True)
            del index
    return {"n_passages": len(corpus), "n_questions": len(queries), "rows": rows}


def worker(kind: str, n: int, repeats: int) -> dict[str, Any]:
    """Part (b), in a child process: ``build_tree`` in one mode on ``n`` clustered vectors."""
    from psirag.tree import build_tree

    e = clustered(n, 384, 60)
    before = current_rss_mib()
    wall, cpu = [], []
    with single_thread_blas():
        for _ in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            tree = build_tree(e, max_children=40, mode=kind, neighbors=32)  # type: ignore[arg-type]
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return {
        "mode": kind,
        "n": n,
        "seconds": round(min(wall), 2),
        "cpu_seconds": round(min(cpu), 2),
        "layers": tree.layer_sizes(),
        "matrix_mib": round(4 * n * n / 2**20, 1),
        "peak_extra_mib": round(peak_rss_mib() - before, 1),
    }


def main() -> None:
    """Run part (a) here and part (b) size by size in child processes; write knn.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--neighbors", type=int, nargs="+", default=[4, 8, 16, 32, 64])
    ap.add_argument("--knn-sizes", type=int, nargs="+", default=[12_000, 25_000, 50_000, 100_000])
    ap.add_argument("--exact-sizes", type=int, nargs="+", default=[12_000, 25_000])
    ap.add_argument("--limit", type=int, default=None, help="first N 2Wiki questions only")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--worker", choices=["exact", "knn"], help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.size, args.repeats)))
        return
    result: dict[str, Any] = {"machine": machine_info()}
    result["2wiki"] = two_wiki(args.neighbors, args.limit)
    synthetic = []
    for kind, sizes in (("exact", args.exact_sizes), ("knn", args.knn_sizes)):
        for n in sizes:
            synthetic.append(run_worker(__file__, kind, n, args.repeats))
            print(synthetic[-1], flush=True)
    result["synthetic"] = synthetic
    print(f"wrote {write_result('knn.json', result)}")


if __name__ == "__main__":
    main()
