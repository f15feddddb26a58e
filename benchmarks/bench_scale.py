"""Index build time and peak memory against corpus size.

(a) 2WikiMultihopQA: random subsamples of the passages (seed 0; default 500, 1,000, 2,000,
    4,000 and all 6,119). ``Index.build`` with the default ``IndexConfig`` and MiniLM vectors
    read from the benchmark embedding cache, so the timed stages are tree, keyword abstracts,
    routing vectors and BM25; embedding is excluded (see ``bench_index_e2e.py`` for its cost).
(b) Synthetic clustered unit vectors (dim 384, 60 clusters; default up to 12,000): the exact
    ``build_tree`` alone, with one float32 ``E @ E.T`` of the same matrix for reference.

BLAS is limited to one thread (the 2 cores were shared with another job; a multi-threaded
BLAS on a busy machine measured slower, not faster). Each size runs in a fresh child process,
so its peak RSS is its own: reported as the peak during the build minus the RSS just before
it (the data and libraries already loaded). With ``--repeats`` > 1 each figure is the fastest
repeat. Stage seconds are wall time (``Index.build``'s own timers); the process CPU time of
each whole build is recorded too, since wall time on a shared machine includes waiting for the
cores.

Usage: python benchmarks/bench_scale.py [--sizes 500 1000 2000 4000 0] [--synthetic 1000 ...]
       (size 0 = the whole corpus); --replot redraws the PNG from the saved JSON.
       Writes benchmarks/results/scale.json and index_time_vs_size.png.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    RESULTS,
    clustered,
    current_rss_mib,
    dataset,
    machine_info,
    peak_rss_mib,
    run_worker,
    two_wiki_index,
    write_result,
)

from psirag.eval.harness import single_thread_blas

STAGES = ("tree", "abstracts", "routing", "bm25")


def worker_2wiki(size: int, repeats: int) -> dict[str, Any]:
    """Build the index over a random ``size``-passage subsample (0: all) ``repeats`` times."""
    corpus, _ = dataset("2wikimultihopqa")
    if 0 < size < len(corpus):
        pick = np.sort(np.random.default_rng(0).choice(len(corpus), size, replace=False))
        corpus = [corpus[i] for i in pick.tolist()]
    from _common import CachedVectors

    embedder = CachedVectors()
    before = current_rss_mib()
    runs: list[dict[str, float]] = []
    cpu: list[float] = []
    with single_thread_blas():
        for _ in range(repeats):
            c0 = time.process_time()
            index, _ = two_wiki_index(corpus, embedder)
            cpu.append(time.process_time() - c0)
            runs.append({k: v for k, v in index.stats.seconds.items() if k in STAGES})
            layers = index.tree.layer_sizes()
            del index
    best = {k: min(r[k] for r in runs) for k in STAGES}
    return {
        "n": len(corpus),
        "seconds": {k: round(v, 3) for k, v in best.items()},
        "total_seconds": round(sum(best.values()), 3),
        "all_totals": [round(sum(r.values()), 3) for r in runs],
        "cpu_seconds": round(min(cpu), 3),
        "layers": layers,
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_extra_mib": round(peak_rss_mib() - before, 1),
    }


def worker_tree(n: int, repeats: int) -> dict[str, Any]:
    """``build_tree`` on ``n`` clustered vectors, and one ``E @ E.T``, ``repeats`` times."""
    from psirag.tree import build_tree

    e = clustered(n, 384, 60)
    before = current_rss_mib()
    build, matmul, build_cpu, matmul_cpu = [], [], [], []
    with single_thread_blas():
        for _ in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            tree = build_tree(e, max_children=40)
            build.append(time.perf_counter() - t0)
            build_cpu.append(time.process_time() - c0)
            c0, t0 = time.process_time(), time.perf_counter()
            s = e @ e.T
            matmul.append(time.perf_counter() - t0)
            matmul_cpu.append(time.process_time() - c0)
            del s
    return {
        "n": n,
        "build_tree_seconds": round(min(build), 3),
        "matmul_seconds": round(min(matmul), 3),
        "build_tree_cpu_seconds": round(min(build_cpu), 3),
        "matmul_cpu_seconds": round(min(matmul_cpu), 3),
        "layers": tree.layer_sizes(),
        "matrix_mib": round(4 * n * n / 2**20, 1),
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "peak_extra_mib": round(peak_rss_mib() - before, 1),
    }


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares exponent b of y ~ a * x**b."""
    return round(float(np.polyfit(np.log(xs), np.log(ys), 1)[0]), 2)


def embedding_reference() -> dict[str, Any] | None:
    """Seconds per passage of the uncached end-to-end run, when its result exists."""
    path = RESULTS / "index_e2e_2wikimultihopqa.json"
    if not path.exists():
        return None
    r = json.loads(path.read_text())
    sec = r["stage_seconds"]["embedding"]
    return {
        "source": path.name,
        "embedding_seconds": sec,
        "chunks": r["chunks"],
        "seconds_per_passage": round(sec / r["chunks"], 4),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Stage seconds of the 2Wiki builds, synthetic tree time (log-log), peak extra RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wiki, syn = result["2wiki"], result["synthetic_tree"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    ax = axes[0]
    xs = [r["n"] for r in wiki]
    for stage in STAGES:
        ax.plot(xs, [r["seconds"][stage] for r in wiki], "o-", label=stage)
    ax.plot(xs, [r["total_seconds"] for r in wiki], "k--", label="total (no embedding)")
    ax.set_xlabel("2Wiki passages")
    ax.set_ylabel("seconds (wall)")
    ax.set_title("Index.build stages, 2Wiki subsamples")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[1]
    ns = [r["n"] for r in syn]
    ax.loglog(ns, [r["build_tree_seconds"] for r in syn], "o-", label="build_tree, wall")
    ax.loglog(ns, [r["build_tree_cpu_seconds"] for r in syn], "o--", label="build_tree, CPU")
    ax.loglog(ns, [r["matmul_cpu_seconds"] for r in syn], "s:", label="one E @ E.T, CPU")
    ax.set_xlabel("leaves")
    ax.set_ylabel("seconds")
    ax.set_title("exact tree build (synthetic, dim 384, 1 BLAS thread)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax = axes[2]
    ax.plot(xs, [r["peak_extra_mib"] for r in wiki], "o-", label="Index.build, 2Wiki")
    ax.plot(ns, [r["peak_extra_mib"] for r in syn], "s-", label="build_tree, synthetic")
    ax.plot(ns, [r["matrix_mib"] for r in syn], "k:", label="one n x n float32 matrix")
    ax.set_xlabel("leaves")
    ax.set_ylabel("MiB")
    ax.set_title("peak RSS above the pre-build RSS")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """Run every size in a child process (or be that child); write scale.json and the plot."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000, 0])
    ap.add_argument("--synthetic", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 12000])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--worker", choices=["2wiki", "tree"], help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from scale.json")
    args = ap.parse_args()
    if args.replot:
        plot(json.loads((RESULTS / "scale.json").read_text()), RESULTS / "index_time_vs_size.png")
        return
    if args.worker:
        fn = worker_2wiki if args.worker == "2wiki" else worker_tree
        print(json.dumps(fn(args.size, args.repeats)))
        return
    result: dict[str, Any] = {"machine": machine_info(), "repeats": args.repeats}
    wiki = []
    for size in args.sizes:
        wiki.append(run_worker(__file__, "2wiki", size, args.repeats))
        print(wiki[-1], flush=True)
    syn = []
    for n in args.synthetic:
        syn.append(run_worker(__file__, "tree", n, args.repeats))
        print(syn[-1], flush=True)
    result["2wiki"] = wiki
    result["synthetic_tree"] = syn
    result["exponents"] = {
        "2wiki_total": slope([r["n"] for r in wiki], [r["total_seconds"] for r in wiki]),
        "2wiki_tree": slope([r["n"] for r in wiki], [r["seconds"]["tree"] for r in wiki]),
        "synthetic_build_tree": slope(
            [r["n"] for r in syn], [r["build_tree_seconds"] for r in syn]
        ),
        "synthetic_matmul": slope([r["n"] for r in syn], [r["matmul_seconds"] for r in syn]),
    }
    result["embedding"] = embedding_reference()
    plot(result, RESULTS / "index_time_vs_size.png")
    print(f"wrote {write_result('scale.json', result)}")


if __name__ == "__main__":
    main()
