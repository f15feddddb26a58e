"""Steady one-document updates on a saved index (issue 24): the stage timers of repeated
one-document adds, then removals, on one loaded index kept in memory (what a running server
does), in CPU seconds, for this checkout and (``--src``) another one, side by side.

Why CPU seconds: the machine's cores are shared, and wall time there is mostly waiting; the
update's own stage timers (``UpdateSummary.seconds``) are switched to ``time.process_time``
for the run. The first add and removal after the load are reported apart (they make the
loaded tree's derived tables); the steady figures are medians of the ``--steps`` after them.
The documents are :mod:`bench_living_scale`'s (its loopback embedder and vocabularies); the
removals take the index's documents ``17``, ``18``, ... (one record each).

Usage: BENCH_TMP=DIR python benchmarks/bench_steady_updates.py --index <index>
       [--src OTHER_SRC --other-label main] [--steps 5] [--out steady_updates.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
KEYS = ("cpu", "tree", "abstracts", "routing", "bm25")


def worker(folder: Path, steps: int) -> dict[str, Any]:
    from bench_living_scale import LoopbackHashEmbedder, corpus_vocab, new_document

    import psirag.living as living
    from psirag import Index
    from psirag.eval.harness import single_thread_blas

    living.time = types.SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]
    emb = LoopbackHashEmbedder()
    rows: dict[str, list[dict[str, float]]] = {"add": [], "remove": []}
    with single_thread_blas():
        index = Index.load(folder, embedder=emb)
        n = index.data.tree.n_leaves
        topic, vocab = corpus_vocab(n)
        for i in range(steps + 1):
            doc = new_document((topic + i) % len(vocab), vocab, f"new-doc-{i}")
            t0 = time.process_time()
            summary = index.add([doc])
            rows["add"].append({"cpu": time.process_time() - t0, **summary.seconds})
        for i in range(steps + 1):
            t0 = time.process_time()
            summary = index.remove([str(17 + i)])
            rows["remove"].append({"cpu": time.process_time() - t0, **summary.seconds})
    out: dict[str, Any] = {"n": n}
    for what, got in rows.items():
        out[f"{what}_first"] = {k: round(got[0].get(k, 0.0), 4) for k in KEYS}
        out[f"{what}_median"] = {
            k: round(float(np.median([r.get(k, 0.0) for r in got[1:]])), 4) for k in KEYS
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True, help="a saved index (read: copied)")
    p.add_argument("--src", type=Path, default=None, help="another checkout's sources")
    p.add_argument("--other-label", default="main")
    p.add_argument("--label", default="new")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default="steady_updates.json")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.steps)))
        return
    if not (args.index / "manifest.json").exists():
        p.error(f"--index {args.index}: no saved index there (no manifest.json)")
    runs = [(args.label, (HERE.parent / "src").resolve())]
    if args.src is not None:
        runs.insert(0, (args.other_label, args.src.resolve()))
    result: dict[str, Any] = {"index": args.index.name}  # no path of this machine in results
    sys.path.insert(0, str(HERE))
    from _common import copy_index

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        folder = Path(tmp) / "ix"
        copy_index(args.index, folder)  # updates stay in memory; a copy
        for label, src in runs:
            env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--index", str(args.index),
                 "--steps", str(args.steps), "--worker", str(folder)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
            result[label] = json.loads(done.stdout.strip().splitlines()[-1])
            print(label, json.dumps(result[label]), flush=True)
    from _common import machine_info

    result["machine"] = machine_info()
    target = HERE / "results" / args.out
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
