"""The leaf graph's insertion breadth (usearch ``expansion_add``, HNSW's ef_construction;
``leaf_graph.EXPANSION_ADD``) against its build CPU and its recall (issue 24: the 1M build's
graph is about half the build's CPU).

For each breadth: a graph built as the build's child process builds it (f16, inner product,
connectivity 16, batches of 8,192 leaves on one thread, huge pages asked after each batch),
its CPU seconds, and recall@10 against exact search (and whether the exact nearest is among
the 10) at the search breadths the index uses: 64, 128 (``INSERT_EF``, an add's insertion
points) and 160 (``SearchConfig.beam``, the ``hnsw`` list).

Vectors: ``--minilm``: the MiniLM embedding cache (``_common.MINILM_CACHE``: the first 6,119
rows as the graph, the other rows as queries, as BENCHMARKS.md's "recall@10 0.9772" check);
``--vectors FILE.npy``: the first ``--n`` rows as the graph and the last 500 as queries (the
1M benchmark's hash vectors, saved beforehand).

Usage: nice python benchmarks/bench_graph_expansion.py --minilm [--vectors F --n 200000]
       [--expansion 100 80 64] [--out graph_expansion.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MINILM_CACHE, RESULTS, machine_info

from psirag.heap import ask_for_huge_pages
from psirag.retrieval.leaf_graph import BUILD_BATCH, INSERT_EF, new_graph

SEARCH_EF = (64, INSERT_EF, 160)


def measure(base: np.ndarray, queries: np.ndarray, expansion: int) -> dict[str, Any]:
    exact = np.argsort(-(queries @ base.T), axis=1)[:, :10]
    graph = new_graph(int(base.shape[1]), expansion)
    keys = np.arange(base.shape[0], dtype=np.uint64)
    t0 = time.process_time()
    for lo in range(0, base.shape[0], BUILD_BATCH):
        graph.add(keys[lo : lo + BUILD_BATCH], base[lo : lo + BUILD_BATCH], threads=1)
        ask_for_huge_pages()
    row: dict[str, Any] = {
        "expansion_add": expansion,
        "build_cpu_s": round(time.process_time() - t0, 2),
    }
    for ef in SEARCH_EF:
        graph.expansion_search = ef
        found = np.asarray(graph.search(queries, 10, threads=1).keys)
        hits = [len(set(exact[i].tolist()) & set(found[i].tolist())) for i in range(len(queries))]
        first = [int(exact[i, 0]) in set(found[i].tolist()) for i in range(len(queries))]
        row[f"recall@10_ef{ef}"] = round(float(np.mean(hits)) / 10, 4)
        row[f"nearest_found_ef{ef}"] = round(float(np.mean(first)), 4)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minilm", action="store_true", help="the MiniLM cache's vectors")
    p.add_argument("--vectors", type=Path, default=None, help="a float32 .npy of unit vectors")
    p.add_argument("--n", type=int, default=200_000, help="graph rows of --vectors")
    p.add_argument("--expansion", type=int, nargs="+", default=[100, 80, 64])
    p.add_argument("--out", default="graph_expansion.json")
    args = p.parse_args()
    sets: list[tuple[str, np.ndarray, np.ndarray]] = []
    if args.minilm:
        with np.load(MINILM_CACHE, allow_pickle=False) as data:
            v = np.asarray(data["vectors"], dtype=np.float32)
        sets.append((f"minilm-cache {v.shape[0]}x{v.shape[1]}", v[:6119], v[6119:]))
    if args.vectors is not None:
        v = np.load(args.vectors, mmap_mode="r", allow_pickle=False)
        base = np.ascontiguousarray(v[: args.n], dtype=np.float32)
        queries = np.ascontiguousarray(v[-500:], dtype=np.float32)
        sets.append((f"{args.vectors.name} first {args.n}", base, queries))
    if not sets:
        p.error("give --minilm and/or --vectors")
    result: dict[str, Any] = {"rows": []}
    for name, base, queries in sets:
        for expansion in args.expansion:
            row = {"vectors": name, "graph": int(base.shape[0]), "queries": len(queries)}
            row.update(measure(base, queries, expansion))
            print(json.dumps(row), flush=True)
            result["rows"].append(row)
    result["machine"] = machine_info()
    target = RESULTS / args.out
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
