"""Recall@2/5 against the tree-search beam width on all 2WikiMultihopQA questions (no LLM).

The index is the one ``bench_2wiki_retrieval.py`` builds (6,119 passages, MiniLM vectors from
the benchmark embedding cache, default ``IndexConfig``; no model is loaded). For every beam:
tree search alone (top 5 of its 10 leaves) and tree + BM25 fused by RRF (psi's default search
with that beam), plus the nodes a tree search scores per query. BM25 alone, dense flat and
BM25 + dense RRF are the flat references.

Usage: python benchmarks/bench_beam.py [--beams 5 10 20 40 80 160] [--limit N] [--replot]
Writes benchmarks/results/beam.json and recall_vs_beam.png.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import (
    RESULTS,
    dataset,
    machine_info,
    passage_text,
    recall,
    two_wiki_index,
    write_result,
)

from psirag import SearchConfig
from psirag.eval.harness import single_thread_blas
from psirag.retrieval.fusion import rrf_fuse

Run = Callable[[str, np.ndarray], list[int]]


def evaluate(
    run: Run, queries: list[str], vectors: np.ndarray, golds: list[set[str]], texts: list[str]
) -> dict[str, float]:
    """Recall@2 and @5 (in %) of ``run`` over all queries."""
    r2 = r5 = 0.0
    for q, vec, gold in zip(queries, vectors, golds, strict=True):
        got = [texts[i] for i in run(q, vec)]
        r2 += recall(got, gold, 2)
        r5 += recall(got, gold, 5)
    n = len(queries)
    return {"recall@2": round(100 * r2 / n, 2), "recall@5": round(100 * r5 / n, 2)}


def tree_cost(
    index: Any, vectors: np.ndarray, beams: list[int], block: int = 50, rounds: int = 3
) -> list[tuple[list[int], list[float]]]:
    """Nodes scored and CPU milliseconds (this thread's) of one tree search per query and beam.

    Single-thread BLAS; beams take turns in blocks of ``block`` queries, rotating; everything
    runs ``rounds`` times and each query keeps its fastest round.
    """
    n = len(vectors)
    scored = [[0] * n for _ in beams]
    ms = [[np.inf] * n for _ in beams]
    order = list(range(len(beams)))
    with single_thread_blas():
        for _ in range(rounds):
            for b, lo in enumerate(range(0, n, block)):
                r = b % len(beams)
                for j in order[r:] + order[:r]:
                    for i in range(lo, min(lo + block, n)):
                        t = time.thread_time_ns()
                        hits = index.retriever.searcher.search(
                            vectors[i], k=10, beam=beams[j], collect_visited=True
                        )
                        ms[j][i] = min(ms[j][i], (time.thread_time_ns() - t) / 1e6)
                        scored[j][i] = int(hits.visited.size)
    return list(zip(scored, ms, strict=True))


def plot(result: dict[str, Any], path: Any) -> None:
    """Recall@2, Recall@5 and nodes scored per query against the beam (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    beams = result["beams"]
    rows = result["per_beam"]
    refs = result["references"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    styles = {"bm25": ("tab:green", "--"), "dense flat": ("tab:red", ":")}
    styles["bm25+dense rrf"] = ("tab:purple", "-.")
    for ax, metric in zip(axes[:2], ("recall@2", "recall@5"), strict=True):
        ax.plot(beams, [r["tree"][metric] for r in rows], "o-", label="tree alone")
        ax.plot(beams, [r["tree+bm25"][metric] for r in rows], "s-", label="tree + BM25 (RRF)")
        for name, (color, ls) in styles.items():
            ax.axhline(refs[name][metric], color=color, ls=ls, label=name)
        ax.axvline(result["default_beam"], color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(beams, [str(b) for b in beams])
        ax.set_xlabel("beam (nodes kept per layer)")
        ax.set_ylabel(f"{metric.capitalize()} (%)")
        ax.set_title(f"{metric.capitalize()}, {result['n_questions']:,} 2Wiki questions")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    ax = axes[2]
    ax.plot(beams, [r["nodes_scored_mean"] for r in rows], "o-", color="tab:blue")
    ax.axhline(result["n_passages"], color="tab:red", ls=":", label="dense flat (every leaf)")
    ax.axvline(result["default_beam"], color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.set_xticks(beams, [str(b) for b in beams])
    ax.set_xlabel("beam (nodes kept per layer)")
    ax.set_ylabel("nodes scored per query")
    ax.set_title("cost of tree search")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """Sweep the beam on all 2Wiki questions; write beam.json and the plot."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--beams", type=int, nargs="+", default=[5, 10, 20, 40, 80, 160])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from beam.json")
    args = ap.parse_args()
    if args.replot:
        plot(json.loads((RESULTS / "beam.json").read_text()), RESULTS / "recall_vs_beam.png")
        return
    corpus, questions = dataset("2wikimultihopqa")
    questions = questions[: args.limit]
    t0 = time.perf_counter()
    index, embedder = two_wiki_index(corpus)
    build_s = time.perf_counter() - t0
    texts = [c.text for c in index.chunks]
    assert texts == [passage_text(r) for r in corpus]
    queries = [q["question"] for q in questions]
    golds = [{passage_text(corpus[i]) for i in q["supporting_passage_ids"]} for q in questions]
    vectors = embedder.embed(queries)
    dense = index.retriever.dense
    default = SearchConfig()

    def ev(run: Run) -> dict[str, float]:
        return evaluate(run, queries, vectors, golds, texts)

    def leaves(cfg: SearchConfig) -> Run:
        return lambda q, v: [p.leaf for p in index.search_vector(v, q, config=cfg)]

    def hybrid_dense(q: str, v: np.ndarray) -> list[int]:
        d = dense.ranked(v, default.candidates)[0].tolist()
        b = index.sparse.search(q, k=default.candidates)[0].tolist()
        return [i for i, _ in rrf_fuse([d, b], k=default.k)]

    refs = {
        "bm25": ev(leaves(default.with_(use_tree=False))),
        "dense flat": ev(lambda q, v: dense.ranked(v, default.k)[0].tolist()),
        "bm25+dense rrf": ev(hybrid_dense),
    }
    per_beam = []
    for beam in args.beams:
        cfg = default.with_(beam=beam)
        per_beam.append(
            {
                "beam": beam,
                "tree": ev(leaves(cfg.with_(use_bm25=False))),
                "tree+bm25": ev(leaves(cfg)),
            }
        )
    for row, (scored, ms) in zip(per_beam, tree_cost(index, vectors, args.beams), strict=True):
        row["nodes_scored_mean"] = round(float(np.mean(scored)), 1)
        row["tree_search_cpu_ms_p50"] = round(float(np.median(ms)), 3)
        print(row, flush=True)
    result = {
        "dataset": "2wikimultihopqa",
        "n_questions": len(questions),
        "n_passages": len(corpus),
        "n_nodes": index.tree.n_nodes,
        "layers": index.tree.layer_sizes(),
        "default_beam": default.beam,
        "beams": args.beams,
        "build_seconds_without_embedding": round(build_s, 2),
        "references": refs,
        "per_beam": per_beam,
        "note": "tree: top 5 of the 10 leaves tree search returns; tree+bm25: RRF of tree top 10 "
        "and BM25 top 10 into top 5; nodes scored and CPU ms (single-thread BLAS, collecting the "
        "visited nodes) are per tree search, beams taking turns in blocks of 50 queries, fastest "
        "of 3 rounds per query",
        "machine": machine_info(),
    }
    plot(result, RESULTS / "recall_vs_beam.png")
    print(f"wrote {write_result('beam.json', result)}")


if __name__ == "__main__":
    main()
