"""Which ANN library the ``ann`` tree mode uses: hnswlib, usearch and faiss-cpu side by side.

Each library builds an HNSW graph (M 16, ef_construction 100) over ``n`` synthetic clustered unit
vectors (dim 384, 60 clusters, as in bench_knn.py) and then answers every row's top-(k+1) query
(ef_search 64), which is what the tree mode needs. Recall@k is measured on a sample of rows
against exact top-k from a blocked matrix product. Each library runs in its own child process
(peak RSS is its own), one after another, with the same thread count.

Usage: python benchmarks/bench_ann_libs.py [--size 100000] [--k 32] [--threads 2]
       Writes benchmarks/results/ann_libs.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np
from _common import clustered, current_rss_mib, machine_info, peak_rss_mib, write_result

LIBS = ("hnswlib", "usearch", "faiss")
M, EF_CONSTRUCTION, EF_SEARCH = 16, 100, 64


def _exact_topk(e: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    sims = e[rows] @ e.T
    sims[np.arange(rows.size), rows] = -np.inf
    return np.argsort(-sims, axis=1)[:, :k]


def _run(lib: str, e: np.ndarray, k: int, threads: int) -> tuple[np.ndarray, float, float]:
    n, d = e.shape
    t0 = time.perf_counter()
    if lib == "hnswlib":
        import hnswlib

        index = hnswlib.Index(space="ip", dim=d)
        index.init_index(max_elements=n, ef_construction=EF_CONSTRUCTION, M=M, random_seed=0)
        index.set_num_threads(threads)
        index.add_items(e, np.arange(n))
        build = time.perf_counter() - t0
        index.set_ef(EF_SEARCH)
        labels, _ = index.knn_query(e, k=k + 1, num_threads=threads)
    elif lib == "usearch":
        from usearch.index import Index

        index = Index(
            ndim=d,
            metric="ip",
            dtype="f32",
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
            expansion_search=EF_SEARCH,
        )
        index.add(np.arange(n), e, threads=threads)
        build = time.perf_counter() - t0
        labels = index.search(e, k + 1, threads=threads).keys
    else:
        import faiss

        faiss.omp_set_num_threads(threads)
        index = faiss.IndexHNSWFlat(d, M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = EF_CONSTRUCTION
        index.add(e)
        build = time.perf_counter() - t0
        index.hnsw.efSearch = EF_SEARCH
        _, labels = index.search(e, k + 1)
    query = time.perf_counter() - t0 - build
    return np.asarray(labels, dtype=np.int64), build, query


def worker(lib: str, n: int, k: int, threads: int) -> dict[str, Any]:
    e = clustered(n, 384, 60)
    before = current_rss_mib()
    labels, build, query = _run(lib, e, k, threads)
    peak = peak_rss_mib() - before
    rng = np.random.default_rng(1)
    rows = rng.choice(n, size=min(1000, n), replace=False)
    truth = _exact_topk(e, rows, k)
    hits = 0
    for r, t in zip(rows.tolist(), truth, strict=True):
        got = [x for x in labels[r].tolist() if x != r][:k]
        hits += len(set(got) & set(t.tolist()))
    return {
        "library": lib,
        "n": n,
        "k": k,
        "threads": threads,
        "build_seconds": round(build, 2),
        "query_all_seconds": round(query, 2),
        "total_seconds": round(build + query, 2),
        "recall_at_k": round(hits / (rows.size * k), 4),
        "peak_extra_mib": round(peak, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS)
    ap.add_argument("--worker", choices=LIBS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.size, args.k, args.threads)))
        return
    rows = []
    for lib in args.libs:
        cmd = [sys.executable, __file__, "--worker", lib, "--size", str(args.size)]
        cmd += ["--k", str(args.k), "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    result = {
        "machine": machine_info(),
        "params": {"M": M, "ef_construction": EF_CONSTRUCTION, "ef_search": EF_SEARCH},
        "rows": rows,
    }
    print(f"wrote {write_result('ann_libs.json', result)}")


if __name__ == "__main__":
    main()
