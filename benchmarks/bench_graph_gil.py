"""The HNSW graph's insertion beside Python work (issue 24 item 6): why a build makes its graph
in a child process.

One graph of ``--n`` random unit vectors (``--dim``), inserted on one usearch thread three
ways: alone; on a thread beside a pure-Python loop on the main thread (what the keyword
abstracts and BM25 stages are); and in a child process (:mod:`psirag.retrieval.graph_process`)
beside the same loop. Each reports the insertion's wall seconds, and the loop's iterations per
second while the graph was being built (against the loop alone), so both sides of the slowdown
show.

Usage: nice python benchmarks/bench_graph_gil.py [--n 100000] [--dim 64] [--out graph_gil.json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def _loop_rate(stop: threading.Event, out: list[float]) -> None:
    """Count a pure-Python loop's iterations until ``stop``; append iterations per second."""
    t0 = time.perf_counter()
    n = 0
    while not stop.is_set():
        x = 0
        for i in range(10_000):
            x += i
        n += 1
    out.append(n / (time.perf_counter() - t0))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--out", default="graph_gil.json")
    args = p.parse_args()

    from psirag.retrieval.graph_process import GraphProcess
    from psirag.retrieval.leaf_graph import LeafGraph

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(args.n, args.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows: dict[str, Any] = {"n": args.n, "dim": args.dim}

    # the loop alone, for its rate
    stop, rate = threading.Event(), []
    t = threading.Thread(target=_loop_rate, args=(stop, rate))
    t.start()
    time.sleep(10)
    stop.set()
    t.join()
    rows["loop_alone_per_s"] = round(rate[0], 1)

    t0 = time.perf_counter()
    LeafGraph.build(vectors, threads=1)
    rows["graph_alone_s"] = round(time.perf_counter() - t0, 2)

    # on a thread beside the loop (the loop on this, the main, thread)
    done: list[float] = []

    def graph_on_thread() -> None:
        t1 = time.perf_counter()
        LeafGraph.build(vectors, threads=1)
        done.append(time.perf_counter() - t1)
        stop.set()

    stop, rate = threading.Event(), []
    g = threading.Thread(target=graph_on_thread)
    g.start()
    _loop_rate(stop, rate)
    g.join()
    rows["graph_on_thread_beside_loop_s"] = round(done[0], 2)
    rows["loop_beside_graph_thread_per_s"] = round(rate[0], 1)

    # in a child process beside the loop
    stop, rate = threading.Event(), []
    job = GraphProcess(vectors)
    watcher = threading.Thread(target=lambda: (job.proc.wait(), stop.set()))
    watcher.start()
    _loop_rate(stop, rate)
    watcher.join()
    _, seconds = job.result()
    rows["graph_in_process_beside_loop_s"] = round(seconds, 2)
    rows["loop_beside_graph_process_per_s"] = round(rate[0], 1)
    print(json.dumps(rows))
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
