"""The max_children ablation on 2WikiMultihopQA (no LLM): the fan-out cap of the rebalanced tree.

For each cap (default 10, 20, 40 (the paper's), 80, and none: no rebalancing) the index is built
over the 6,119 passages with MiniLM vectors from the benchmark embedding cache and otherwise the
default ``IndexConfig``. Reported: the layer sizes, the widest node, the tree-stage seconds, the
mean number of nodes one tree search scores, and Recall@2/5 over the 1,000 questions of psi
(tree + BM25, RRF) and of the tree alone, at the default beam (40) and at a beam equal to the
cap (so the search can keep one whole family of siblings).

Usage: python benchmarks/bench_max_children.py [--caps 10 20 40 80 0] [--limit N]
       (cap 0 = no rebalancing). Writes benchmarks/results/max_children.json.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from _common import (
    CachedVectors,
    machine_info,
    search_recall,
    two_wiki_index,
    two_wiki_queries,
    write_result,
)

from psirag import SearchConfig
from psirag.eval.harness import single_thread_blas


def nodes_scored(index: Any, vectors: np.ndarray, beam: int) -> float:
    """Mean number of nodes one tree search scores (its work per query)."""
    visited = [
        index.retriever.searcher.search(vec, k=10, beam=beam, collect_visited=True).visited.size
        for vec in vectors
    ]
    return round(float(np.mean(visited)), 1)


def main() -> None:
    """Build one index per cap and score it; write max_children.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--caps", type=int, nargs="+", default=[10, 20, 40, 80, 0])
    ap.add_argument("--limit", type=int, default=None, help="first N questions only")
    args = ap.parse_args()
    corpus, queries, golds = two_wiki_queries(args.limit)
    embedder = CachedVectors()
    qvecs = embedder.embed(queries)
    default_beam = SearchConfig().beam
    rows = []
    with single_thread_blas():
        for cap in args.caps:
            index, _ = two_wiki_index(corpus, embedder, max_children=cap or None)
            widest = int(np.bincount(index.tree.parent[index.tree.parent >= 0]).max())
            beams = sorted({default_beam, cap} - {0})
            row: dict[str, Any] = {
                "max_children": cap or None,
                "layers": index.tree.layer_sizes(),
                "widest_node": widest,
                "tree_stage_seconds": round(index.stats.seconds["tree"], 3),
                "beams": {},
            }
            for beam in beams:
                row["beams"][str(beam)] = {
                    "psi": search_recall(index, queries, qvecs, golds, SearchConfig(beam=beam)),
                    "tree_alone": search_recall(
                        index, queries, qvecs, golds, SearchConfig(beam=beam, use_bm25=False)
                    ),
                    "nodes_scored": nodes_scored(index, qvecs, beam),
                }
            rows.append(row)
            print(row, flush=True)
            del index
    result = {
        "machine": machine_info(),
        "n_passages": len(corpus),
        "n_questions": len(queries),
        "default_beam": default_beam,
        "rows": rows,
    }
    print(f"wrote {write_result('max_children.json', result)}")


if __name__ == "__main__":
    main()
