"""``psirag add INDEX FILE`` as a user runs it (issue 24: one document at 1M in 3 s or less):
a fresh process each time, with its start-up, imports, load, add and save, timed from outside.

Each source (``--src``, e.g. an old commit's ``git archive <commit> src`` and this repo's
``src``) updates its own copy of ``--index`` (``cp -a``: the generations' hard links kept),
one document at a time, the sources taking turns (old, new, old, new...), so that each copy
sees the same sequence of adds. The first round of each copy is reported apart (the copy's
pages are cold, and an index saved before the word hashes writes them then). The command is
``psirag add`` behind the hash embedder of ``bench_living_scale.py`` (the index must have
been built with it): ``bench_server_add.py --cli``. The documents are
``bench_living_scale.new_document`` with twelve new made-up words each.

Usage: python benchmarks/bench_cli_add.py --index DIR --src OLD_SRC NEW_SRC [--rounds 4]
       [--out cli_add.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _document(n: int, k: int) -> str:
    """The benchmark's new document at an index of ``n`` chunks, with twelve new words."""
    sys.path.insert(0, str(HERE))
    from bench_living_scale import corpus_vocab, new_document

    topic, vocab = corpus_vocab(n)
    rng = random.Random(k)
    extra = " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(9)) for _ in range(12)
    )
    return str(new_document(topic, vocab).text) + "\n\n" + extra.capitalize() + "."


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True, help="a saved index (hash embedder)")
    p.add_argument("--src", type=Path, nargs="+", required=True, help="sources to compare")
    p.add_argument("--rounds", type=int, default=4, help="adds per source, alternating")
    p.add_argument("--out", default="cli_add.json")
    args = p.parse_args()
    if not (args.index / "manifest.json").exists():
        p.error(f"{args.index}: no saved index there (no manifest.json)")
    n = json.loads((args.index / "manifest.json").read_text())["counts"]["chunks"]
    times: dict[str, list[float]] = {}
    loads: dict[str, list[float | None]] = {}  # the 1-minute load average before each round
    sys.path.insert(0, str(HERE))
    from _common import copy_index

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        copies = {}
        for i, src in enumerate(args.src):
            copy = Path(tmp) / f"ix{i}"
            copy_index(args.index, copy, sync=False)
            copies[src] = copy
        os.sync()
        # an installed psirag runs from compiled bytecode: compile every source (and this
        # folder) once, and let the children write what is missing, so that no round pays
        # for compiling edited modules (PYTHONDONTWRITEBYTECODE=1 in the environment made
        # each round recompile them: 0.1-0.6 s)
        for folder in [*args.src, HERE]:
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder)], check=False)
        for k in range(args.rounds):
            path = Path(tmp) / f"doc-{k}.txt"  # the document id is the file's path
            path.write_text(_document(n, k), encoding="utf-8")
            for src in args.src:
                env = {**os.environ, "PYTHONPATH": f"{src.resolve()}{os.pathsep}{HERE}"}
                env["OMP_NUM_THREADS"] = "1"
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                cmd = [sys.executable, str(HERE / "bench_server_add.py"), "--cli"]
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
                loads.setdefault(src.resolve().parent.name, []).append(
                    None if load is None else round(load, 2)
                )
                t0 = time.perf_counter()
                done = subprocess.run(
                    [*cmd, str(copies[src]), str(path)], env=env, capture_output=True, text=True
                )
                seconds = time.perf_counter() - t0
                if done.returncode != 0:
                    sys.exit(f"round {k} with {src} failed:\n{done.stderr[-3000:]}")
                label = src.resolve().parent.name
                times.setdefault(label, []).append(round(seconds, 3))
                print(json.dumps({"src": label, "round": k, "seconds": round(seconds, 3)}))
    out: dict[str, Any] = {"index": args.index.name, "chunks": n, "rounds": {}}
    for label, row in times.items():
        later = row[1:] or row
        out["rounds"][label] = {
            "seconds": row,
            "first": row[0],
            "median_after_first": round(statistics.median(later), 3),
            "min_after_first": min(later),
            "load_average_before": loads.get(label, []),
        }
    sys.path.insert(0, str(HERE))
    from _common import machine_info, write_result

    out["machine"] = machine_info()
    print(json.dumps(out["rounds"], indent=2))
    write_result(args.out, out)


if __name__ == "__main__":
    main()
