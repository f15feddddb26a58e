"""Where a flat cosine scan stops being cheaper than the tree search (no LLM).

The default search profile ranks the dense list exactly (a flat scan over every leaf) up to
``SearchConfig.exact_dense_leaves`` leaves and by tree search above that. This script measures
the two side by side on real indexes of growing size, so that the threshold is a cost choice:
2Wiki's and HotpotQA-dev200's passages pooled (MiniLM vectors from the embedding cache) in a
fixed shuffled order, and an index built over the first n of them for each size. Tree search
runs at the default beam and at the paper's.

Protocol (as bench_latency.py): one BLAS thread (threadpoolctl), garbage collection off while
timing, the methods interleaved per query, each query's fastest of 3 rounds, CPU time of the
thread. 300 2Wiki questions.

Usage: python benchmarks/bench_dense_crossover.py [--sizes 1000 2000 ...] [--queries 300]
Writes benchmarks/results/dense_crossover.json and section_retrieval_variants_size.md.
"""

from __future__ import annotations

import argparse
import gc
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MINILM_CACHE,
    QUESTION_CACHE,
    RESULTS,
    CachedVectors,
    dataset,
    documents,
    machine_info,
    write_result,
)

from psirag import Index, IndexConfig
from psirag.config import PROFILES

SIZES = (1000, 2000, 3000, 4000, 6000, 8000)
ROUNDS = 3


def pooled_documents(seed: int) -> list[Any]:
    """2Wiki's and HotpotQA-dev200's passages in one fixed shuffled order."""
    docs = []
    for name in ("2wikimultihopqa", "hotpotqa-dev200"):
        corpus, _ = dataset(name)
        docs += [replace(d, id=f"{name}:{d.id}") for d in documents(corpus)]
    order = np.random.default_rng(seed).permutation(len(docs))
    return [docs[i] for i in order]


def time_methods(index: Index, vectors: np.ndarray) -> dict[str, float]:
    """p50 CPU ms per method, interleaved per query, fastest of ROUNDS per query."""
    retriever = index.retriever
    beams = {"tree beam 160": PROFILES["default"].beam, "tree beam 40": PROFILES["paper"].beam}
    methods: dict[str, Any] = {
        "flat": lambda v: retriever.dense.ranked(v, 10),
        **{
            name: (lambda v, b=b: retriever.searcher.search(v, k=10, beam=b))
            for name, b in beams.items()
        },
    }
    best = {name: np.full(len(vectors), np.inf) for name in methods}
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for i, v in enumerate(vectors):
                for name, run in methods.items():
                    t = time.thread_time_ns()
                    run(v)
                    best[name][i] = min(best[name][i], (time.thread_time_ns() - t) / 1e6)
    finally:
        gc.enable()
    return {name: round(float(np.median(ms)), 3) for name, ms in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--vectors", type=Path, default=QUESTION_CACHE, metavar="NPZ")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--passages", type=Path, default=MINILM_CACHE, metavar="NPZ")
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    docs = pooled_documents(args.seed)
    _, questions = dataset("2wikimultihopqa")
    vectors = CachedVectors(args.vectors).embed([q["question"] for q in questions[: args.queries]])
    embedder = CachedVectors(args.passages)
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        for n in args.sizes:
            if n > len(docs):
                raise SystemExit(f"--sizes: at most {len(docs)} pooled passages, got {n}")
            index = Index.build(docs[:n], IndexConfig(abstracts="none"), embedder=embedder)
            ms = time_methods(index, vectors)
            rows.append({"leaves": n, "nodes": int(index.tree.n_nodes), "p50_cpu_ms": ms})
            print(n, ms, flush=True)
    result = {"machine": machine_info(), "queries": len(vectors), "rows": rows}
    write_result("dense_crossover.json", result)
    (RESULTS / "section_retrieval_variants_size.md").write_text(section(result))
    print(RESULTS / "dense_crossover.json")


def section(result: dict[str, Any]) -> str:
    default_leaves = PROFILES["default"].exact_dense_leaves
    lines = [
        "## Flat scan against tree search by corpus size (no LLM)",
        "",
        "`python benchmarks/bench_dense_crossover.py`: indexes over the first n of 2Wiki's and "
        "HotpotQA-dev200's passages pooled in a fixed shuffled order (MiniLM vectors from the "
        f"embedding cache), {result['queries']} 2Wiki questions; p50 CPU ms of one dense list "
        "of 10 (query embedding excluded), one BLAS thread, methods interleaved per query, "
        f"fastest of {ROUNDS} rounds per query.",
        "",
        "| leaves | nodes | flat scan | tree, beam 160 (default) | tree, beam 40 (paper) "
        "| flat / beam 160 |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        ms = row["p50_cpu_ms"]
        ratio = ms["flat"] / ms["tree beam 160"]
        lines.append(
            f"| {row['leaves']:,} | {row['nodes']:,} | {ms['flat']:.3f} | "
            f"{ms['tree beam 160']:.3f} | {ms['tree beam 40']:.3f} | {ratio:.2f}x |"
        )
    cheaper = [
        r["leaves"]
        for r in result["rows"]
        if r["p50_cpu_ms"]["flat"] <= r["p50_cpu_ms"]["tree beam 160"]
    ]
    dearer = [r["leaves"] for r in result["rows"] if r["leaves"] not in cheaper]
    if cheaper and dearer:
        lines += [
            "",
            f"The flat scan costs at most the beam-160 search up to {max(cheaper):,} leaves and "
            f"more from {min(dearer):,}; its cost grows with the corpus, the tree search's far "
            'slower (at 1M leaves, "Query latency at 1M leaves", psi takes 6.76 ms of CPU '
            "against 202 ms for dense flat).",
        ]
    lines += [
        "",
        f"The default profile ranks the dense list by a flat scan up to {default_leaves:,} "
        "leaves (`SearchConfig.exact_dense_leaves`) and by tree search above; `--profile tree` "
        "and `--profile paper` search the tree at every size.",
        "",
    ]
    from report import reflow

    return reflow("\n".join(lines))


if __name__ == "__main__":
    main()
