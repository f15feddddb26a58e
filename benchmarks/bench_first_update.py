"""The first update after a load, what ``psirag add`` pays (issue 24): load a saved index, add
one document, save, timed apart, with the imports already warm (a first round on a small
index), so the figures are the index's own costs and not the interpreter's start-up.

Each round runs in a fresh child process on a fresh copy of the index. ``--src`` gives the
sources of each side, so two commits run alternately in one run (old, new, old, new...), on
the same saved index: ``git worktree add --detach <dir> <commit>`` and ``--src <dir>/src src``.
The embedder is the hashed bag of words of ``bench_living_scale.py`` (the index must have been
built with it, e.g. ``bench_living_scale.py --build-only --save DIR``).

Usage: python benchmarks/bench_first_update.py --index DIR --warm SMALL_INDEX
       [--src SRC [SRC ...]] [--pairs 2] [--out first_update.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _round(index: Path, copy: Path) -> dict[str, Any]:
    """Copy ``index`` to ``copy``; load, add one document, save (``_saved_update``)."""
    from _common import copy_index
    from bench_living_scale import LoopbackHashEmbedder, _saved_update, corpus_vocab, new_document

    from psirag.eval.harness import single_thread_blas

    if copy.exists():
        shutil.rmtree(copy)
    copy_index(index, copy)
    n = json.loads((copy / "manifest.json").read_text())["counts"]["chunks"]
    topic, vocab = corpus_vocab(n)
    doc = new_document(topic, vocab, doc_id="first-update")
    stages: dict[str, float] = {}

    def add(ix: Any) -> None:
        stages.update(ix.add([doc]).seconds)

    with single_thread_blas():
        row = _saved_update(copy, LoopbackHashEmbedder(), add)
    row["stages"] = {k: round(v, 3) for k, v in stages.items()}
    return row


def _child(index: Path, warm: Path) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        _round(warm, Path(tmp) / "warm")  # imports and first-use caches
        print(json.dumps(_round(index, Path(tmp) / "ix")))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True, help="the saved index to update")
    p.add_argument("--warm", type=Path, required=True, help="a small saved index to warm up on")
    p.add_argument("--src", type=Path, nargs="+", default=[HERE.parent / "src"])
    p.add_argument("--pairs", type=int, default=2, help="rounds of each source, alternating")
    p.add_argument("--out", default="first_update.json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.index, args.warm)
        return
    for folder in (args.index, args.warm):
        if not (folder / "manifest.json").exists():
            p.error(f"{folder}: no saved index there (no manifest.json)")
    rows: list[dict[str, Any]] = []
    for k in range(args.pairs):
        for src in args.src:
            env = {**os.environ, "PYTHONPATH": f"{src.resolve()}{os.pathsep}{HERE}"}
            env["OMP_NUM_THREADS"] = "1"
            cmd = [sys.executable, __file__, "--child", "--index", str(args.index)]
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
            done = subprocess.run(
                [*cmd, "--warm", str(args.warm)], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                sys.exit(f"round {k} with {src} failed:\n{done.stderr[-3000:]}")
            row: dict[str, Any] = {"src": src.resolve().parent.name, "round": k}
            row["load_average_before"] = None if load is None else round(load, 2)
            row.update(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(row), flush=True)
            rows.append(row)
    sys.path.insert(0, str(HERE))
    from _common import machine_info, write_result

    write_result(args.out, {"index": args.index.name, "rows": rows, "machine": machine_info()})


if __name__ == "__main__":
    main()
