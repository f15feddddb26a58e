"""Where a full build's memory goes, stage by stage (issue 24 item 6: a 1M-chunk index with
keyword abstracts and BM25 in at most 8 GiB).

The corpus and embedder are bench_living_scale's (synthetic passages, a 64-d hashed bag of
words, so embedding costs little). The build runs the pipeline's own stage functions in
:func:`psirag.pipeline.build_index_data`'s order, with the phrase table, its layout and the
keyword scoring apart; a thread samples the process's RSS every 50 ms. Each stage prints one
JSON line when it ends (seconds, RSS at its start, its peak, RSS at its end), so a run that is
stopped still says how far it got. ``--src`` runs another checkout's sources (``git archive
<commit> src | tar -x``) for a before/after table.

Usage: nice python benchmarks/bench_build_memory.py 200000 [--src DIR] [--label new]
       [--out build_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def worker(n: int) -> dict[str, Any]:
    from _common import current_rss_mib, peak_rss_mib
    from bench_living_scale import LoopbackHashEmbedder, corpus

    from psirag import pipeline
    from psirag.abstracts.phrases import PhraseTable
    from psirag.config import IndexConfig
    from psirag.eval.harness import single_thread_blas
    from psirag.ingest import Document

    peak = [0.0]
    lock = threading.Lock()  # a stage's reset must not race a sample of the stage before

    def sample() -> None:
        while True:
            with lock:
                peak[0] = max(peak[0], current_rss_mib())
            time.sleep(0.05)

    threading.Thread(target=sample, daemon=True).start()
    stages: list[dict[str, Any]] = []
    state: dict[str, Any] = {}

    def stage(name: str | None) -> None:
        with lock:
            stage_locked(name)

    def stage_locked(name: str | None) -> None:
        now = time.perf_counter()
        rss = current_rss_mib()
        if state:
            row = {
                "stage": state["name"],
                "seconds": round(now - state["t0"], 1),
                "start_mib": round(state["rss"]),
                "peak_mib": round(max(peak[0], rss)),
                "end_mib": round(rss),
            }
            stages.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        state.update(name=name, t0=time.perf_counter(), rss=rss)
        peak[0] = rss

    config = IndexConfig()
    t_all = time.perf_counter()
    with single_thread_blas():
        stage("corpus")
        texts, _, _ = corpus(n)
        docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
        del texts
        stage("chunking")
        chunks = pipeline.chunk_documents(docs, config)
        stage("embedding")
        embedded = pipeline.embed_chunks(chunks, LoopbackHashEmbedder())
        stage("tree")
        built = pipeline.build_chunk_tree(embedded.vectors, chunks, config)
        leaf_texts = [c.text for c in chunks]
        stage("phrase table")
        table = PhraseTable.build(leaf_texts)
        if hasattr(table, "spill_idle"):  # as write_abstracts does first, in a big build
            table.spill_idle()
        stage("phrase layout")
        table.phrases()
        stage("keyword scoring")
        abstracts = pipeline.write_abstracts(built.tree, leaf_texts, config, table=table)
        stage("routing")
        pipeline.routing_vectors(built.tree, embedded.vectors, abstracts.texts, config, None)
        stage("bm25")
        pipeline.sparse_index(leaf_texts, config)
        stage(None)
    return {
        "n": n,
        "seconds": round(time.perf_counter() - t_all, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "stages": stages,
        "phrases": int(table.p_key.size),
        "leaf_phrase_entries": int(table.lp_pid.size),
        "inner_nodes": int(built.tree.n_nodes - built.tree.n_leaves),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("n", type=int, help="chunks")
    p.add_argument("--src", type=Path, default=None, help="sources to run (default: this repo)")
    p.add_argument("--label", default="new")
    p.add_argument("--out", default="build_memory.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.n)))
        return
    src = (args.src or HERE.parent / "src").resolve()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(args.n), "--worker"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the build of {args.n} chunks failed (exit {done.returncode})")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    row.update(label=args.label, src=src.name, machine=machine_info())
    print(json.dumps(row))
    target = HERE / "results" / args.out if "/" not in args.out else Path(args.out)
    old = json.loads(target.read_text()) if target.exists() else {}
    old[f"{args.label}-{args.n}"] = row
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(old, indent=1) + "\n")
    shutil.move(tmp, target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
