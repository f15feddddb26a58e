"""What ``PhraseTable.add`` (keyword abstracts' per-leaf phrase table, run by every update that
adds chunks) costs for one new document on a saved index, side by side for several sources.

Loads a copy of ``--index`` once per ``--src``, then adds the benchmark's one new document (the
texts of :func:`bench_living_scale.new_document`, chunked as one record per passage) to the
loaded table ``--repeat`` times, each time to the loaded table (not one after another), and
reports the median and minimum seconds. One child process per source, run in turn. A fold
(the tails merged into the sorted counts) comes once in hundreds of one-document adds;
``--fold`` sets ``TAIL_MAX = 0`` so that every add folds, to time the fold itself.

Usage: nice python benchmarks/bench_phrase_add.py --index DIR --src OLD/src --src NEW/src
       [--repeat 7] [--out phrase_add.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def worker(source: Path, repeat: int, fold: bool) -> dict[str, Any]:
    from _common import copy_index
    from bench_living_scale import LoopbackHashEmbedder, corpus_vocab, new_document

    from psirag import Index
    from psirag.eval.harness import single_thread_blas

    if fold:  # every add folds its tails into the sorted counts (a fold's cost)
        import psirag.abstracts.phrases as phrases

        phrases.TAIL_MAX = 0
    out: dict[str, Any] = {"index": source.name, "fold": fold}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp, single_thread_blas():
        folder = Path(tmp) / "ix"
        copy_index(source, folder, sync=False)
        base = Index.load(folder, embedder=LoopbackHashEmbedder())
        table = base.data.phrase_table
        n = base.data.tree.n_leaves
        topic, vocab = corpus_vocab(n)
        texts = [p for p in new_document(topic, vocab).text.split("\n\n") if p.strip()]
        out["n"] = n
        out["texts"] = len(texts)
        seconds = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            table.add(texts)
            seconds.append(time.perf_counter() - t0)
        out["seconds_median"] = round(float(np.median(seconds)), 4)
        out["seconds_min"] = round(min(seconds), 4)
        out["seconds"] = [round(s, 4) for s in seconds]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--src", type=Path, action="append", default=[])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default="phrase_add.json")
    p.add_argument("--fold", action="store_true", help="every add folds (TAIL_MAX = 0)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.index, args.repeat, args.fold)))
        return
    if not args.src:
        p.error("give at least one --src")
    runs = []
    from _common import src_worker

    for src in args.src:
        row = src_worker(
            __file__, src,
            ["--index", str(args.index.resolve()), "--repeat", str(args.repeat),
             *(["--fold"] if args.fold else [])],
        )  # fmt: skip
        print(json.dumps(row), flush=True)
        runs.append(row)
    (HERE / "results" / args.out).write_text(json.dumps({"runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    main()
