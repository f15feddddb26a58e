"""The ann and bucketed tree modes (SPEC 4, paper App. E.1) at scale, and their quality on 2Wiki.

(a) Synthetic clustered unit vectors (dim 384, 60 clusters, as in bench_knn.py): ``build_tree``
    (max_children 40, k 32, bucket bound 4096) in each mode and size, each in a fresh child
    process (nice 10), reporting wall seconds, CPU seconds (the process and its bucket worker
    processes), the peak RSS of the build process and of its largest worker. The knn mode of
    today runs at 100k beside them, with the same thread settings, for the ratio.
(b) 2WikiMultihopQA, all 6,119 passages, MiniLM vectors from the embedding cache: each mode's
    tree against the exact one: Recall@2/5 for psi (tree + BM25, RRF) and the tree alone, the
    share of the exact spanning edges the mode's spanning tree keeps (ann), or the share of
    exact spanning edges inside one bucket (bucketed: the edges its bucket trees can use), and
    Dasgupta's cost (1 - cos) of each tree over its expectation with the leaves permuted at random
    (``vs_random``, as in the skew section of BENCHMARKS.md; above 1 is better placement).

Usage: python benchmarks/bench_scale_ann.py [--sizes 100000] [--modes ann bucketed knn]
       [--no-2wiki] [--no-synthetic] [--budget SECONDS]; writes benchmarks/results/scale_ann.json
       (merging rows measured earlier, so sizes can be run on separate occasions).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np
from _common import (
    RESULTS,
    CachedVectors,
    clustered,
    current_rss_mib,
    machine_info,
    peak_rss_mib,
    question_vectors,
    search_recall,
    two_wiki_index,
    two_wiki_queries,
    write_result,
)

from psirag.config import PROFILES

MODES = ("ann", "bucketed", "bucketed-ann", "knn", "exact")


def worker(mode: str, n: int) -> dict[str, Any]:
    """Part (a), in a child process: one build, timed, with its memory."""
    from psirag.tree import build_tree

    e = clustered(n, 384, 60)
    before = current_rss_mib()
    c0, t0 = time.process_time(), time.perf_counter()
    if mode == "bucketed-ann":
        from psirag.tree.bucket import build_bucketed
        from psirag.tree.rebalance import rebalance, renumber

        parent, layer = build_bucketed(
            e, bucket_size=32_768, inner_mode="ann", neighbors=32, max_children=40
        )
        tree = rebalance(renumber(parent, layer, n), e, 40)
    else:
        tree = build_tree(e, max_children=40, mode=mode, neighbors=32)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "mode": mode,
        "n": n,
        "seconds": round(wall, 1),
        "cpu_seconds": round(cpu + kids.ru_utime + kids.ru_stime, 1),
        "layers": tree.layer_sizes(),
        "max_fan_out": int(tree.fan_out.max()),
        "vectors_mib": round(e.nbytes / 2**20, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_extra_mib": round(peak_rss_mib() - before, 1),
        "worker_peak_rss_mib": round(kids.ru_maxrss / 1024, 1),
    }


def run_child(mode: str, n: int, budget: float) -> dict[str, Any]:
    cmd = ["nice", "-n", "10", sys.executable, __file__, "--worker", mode, "--size", str(n)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=budget)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "n": n, "timed_out_after_seconds": budget}
    if proc.returncode != 0:
        return {"mode": mode, "n": n, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def two_wiki(bucket_sizes: list[int]) -> dict[str, Any]:
    """Part (b): each new mode against the exact tree over all 2Wiki passages."""
    from psirag.eval.harness import single_thread_blas
    from psirag.eval.skew import dasgupta_terms
    from psirag.tree import similarity_matrix, spanning_edges
    from psirag.tree.ann import spanning_edges_ann
    from psirag.tree.bucket import split_buckets

    corpus, queries, golds = two_wiki_queries()
    embedder = CachedVectors()  # passages; the questions come from their own cache
    qvecs = question_vectors(queries)
    # the default profile (beam 160) and the paper's (beam 40): at beam 160 the tree's top 10 is
    # mostly the exact dense top 10, so beam 40 shows more of what each tree's shape costs
    profiles = {
        "": PROFILES["default"],
        "_paper": PROFILES["paper"],
    }
    settings: list[tuple[str, dict[str, Any]]] = [("exact", {})]
    settings += [("ann", {"tree_neighbors": k}) for k in (8, 32)]
    settings += [("bucketed", {"tree_bucket_size": b}) for b in bucket_sizes]
    rows = []
    exact_set: set[tuple[int, int]] = set()
    with single_thread_blas():
        for mode, extra in settings:
            t0 = time.perf_counter()
            index, _ = two_wiki_index(corpus, embedder, tree_mode=mode, **extra)
            seconds = time.perf_counter() - t0
            e = np.asarray(index.node_vectors[: index.tree.n_leaves], dtype=np.float32)
            row: dict[str, Any] = {"mode": mode, **extra, "index_seconds": round(seconds, 2)}
            row["tree_stage_seconds"] = round(index.stats.seconds["tree"], 2)
            if mode == "exact":
                a, b, _ = spanning_edges(similarity_matrix(e))
                exact_set = set(zip(a.tolist(), b.tolist(), strict=True))
            elif mode == "ann":
                a, b, _ = spanning_edges_ann(e, extra["tree_neighbors"])
                got = set(zip(a.tolist(), b.tolist(), strict=True))
                row["exact_spanning_edges_kept_pct"] = round(
                    100 * len(got & exact_set) / len(exact_set), 2
                )
            else:
                label = np.empty(e.shape[0], dtype=np.int64)
                buckets = split_buckets(e, extra["tree_bucket_size"])
                for i, rows_ in enumerate(buckets):
                    label[rows_] = i
                inside = sum(label[x] == label[y] for x, y in exact_set)
                row["buckets"] = len(buckets)
                row["exact_spanning_edges_in_one_bucket_pct"] = round(
                    100 * inside / len(exact_set), 2
                )
            row["layers"] = index.tree.layer_sizes()
            row["dasgupta"] = dasgupta_terms(index.tree, e).as_dict()
            for tag, cfg in profiles.items():
                row["psi" + tag] = search_recall(index, queries, qvecs, golds, cfg)
                tree_cfg = cfg.with_(use_bm25=False)
                row["tree_alone" + tag] = search_recall(index, queries, qvecs, golds, tree_cfg)
            rows.append(row)
            print(row, flush=True)
    base = rows[0]
    for row in rows[1:]:
        for name in ("psi", "tree_alone", "psi_paper", "tree_alone_paper"):
            row[f"{name}_recall@5_minus_exact"] = round(
                row[name]["recall@5"] - base[name]["recall@5"], 2
            )
    return {
        "n_passages": len(corpus),
        "n_questions": len(queries),
        "profiles": {
            "psi, tree_alone": "default (beam 160, identical texts merged)",
            "psi_paper, tree_alone_paper": "paper (beam 40)",
        },
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    ap.add_argument("--modes", nargs="+", default=["ann", "bucketed", "knn"], choices=MODES)
    ap.add_argument("--bucket-sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--no-2wiki", action="store_true")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--budget", type=float, default=1800, help="seconds per build at most")
    ap.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.size)))
        return
    path = RESULTS / "scale_ann.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    # the machine facts belong to the synthetic builds: kept when they are not rerun
    keep = args.no_synthetic and "machine" in old
    result: dict[str, Any] = {"machine": old["machine"] if keep else machine_info()}
    synthetic = {(r["mode"], r["n"]): r for r in old.get("synthetic", [])}
    if not args.no_synthetic:
        for n in args.sizes:
            for mode in args.modes:
                if mode in ("knn", "exact") and n > 100_000:
                    continue  # O(n²) time (knn) or memory (exact): measured at 100k only
                row = run_child(mode, n, args.budget)
                row["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                synthetic[(mode, n)] = row
                print(row, flush=True)
    # other runs of this script may have written meanwhile: merge with the file as it is now
    now = json.loads(path.read_text()) if path.exists() else {}
    for r in now.get("synthetic", []):
        synthetic.setdefault((r["mode"], r["n"]), r)
    rows = sorted(synthetic.values(), key=lambda r: (r["n"], r["mode"]))
    knn = {r["n"]: r for r in rows if r["mode"] == "knn" and "seconds" in r}
    for r in rows:
        if r["mode"] != "knn" and "seconds" in r and r["n"] in knn:
            r["knn_seconds_ratio"] = round(knn[r["n"]]["seconds"] / r["seconds"], 1)
    result["synthetic"] = rows
    wiki = None if args.no_2wiki else two_wiki(args.bucket_sizes)
    if wiki is None:
        now = json.loads(path.read_text()) if path.exists() else {}
        wiki = now.get("2wiki")
    result["2wiki"] = wiki
    print(f"wrote {write_result('scale_ann.json', result)}")


if __name__ == "__main__":
    main()
