"""BM25's share of ``psirag add`` (issue 24): load a saved index's BM25 folder, add one chunk
(what an add does to the postings) and look up a query's terms, each source (``--src``) in a
fresh process, the sources taking turns. Read-only: nothing is saved. An index saved with the
term hashes loads them (new code) or ignores them (code from before them); one saved without
them loads a dict either way.

Usage: python benchmarks/bench_bm25_load.py --bm25 GENERATION/bm25 --src OLD_SRC NEW_SRC
       [--rounds 3] [--out bm25_load.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

_CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import numpy as np
from psirag.retrieval.bm25 import Postings, SparseIndex
t1 = time.perf_counter()
postings = Postings.load(Path(sys.argv[1]))  # (the index keeps first_copy in its own table)
t2 = time.perf_counter()
grown = postings.add(["Zqxvolcanic ash over the harbour of Naples, ferry quay and crater walks."])
t3 = time.perf_counter()
sparse = SparseIndex(None, np.arange(postings.n_docs), postings=postings)
t4 = time.perf_counter()
sparse.scores("ferry harbour crater")
t5 = time.perf_counter()
t4, t3 = t5 - t4 + t3, t3
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "add": t3 - t2, "query": t4 - t3,
                  "terms": len(grown.vocab), "vocab": type(postings.vocab).__name__}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bm25", type=Path, required=True, help="a saved generation's bm25 folder")
    p.add_argument("--src", type=Path, nargs="+", required=True, help="sources to compare")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="bm25_load.json")
    args = p.parse_args()
    if not (args.bm25 / "postings.json").is_file():
        p.error(f"{args.bm25}: no postings.json there")
    rows: dict[str, list[dict[str, Any]]] = {}
    for k in range(args.rounds):
        for src in args.src:
            env = {**os.environ, "PYTHONPATH": str(src.resolve()), "OMP_NUM_THREADS": "1"}
            load = os.getloadavg()[0]
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, str(args.bm25)],
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                sys.exit(f"round {k} with {src} failed:\n{done.stderr[-3000:]}")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            got = {key: round(v, 4) if isinstance(v, float) else v for key, v in got.items()}
            got["loadavg"] = round(load, 2)
            label = src.resolve().parent.name
            rows.setdefault(label, []).append(got)
            print(json.dumps({"src": label, "round": k, **got}))
    out: dict[str, Any] = {"bm25": args.bm25.name, "rounds": rows, "median": {}}
    for label, got in rows.items():
        out["median"][label] = {
            key: round(statistics.median(r[key] for r in got), 4)
            for key in ("import", "load", "add", "query")
        }
    sys.path.insert(0, str(HERE))
    from _common import machine_info, write_result

    out["machine"] = machine_info()
    print(json.dumps(out["median"], indent=2))
    write_result(args.out, out)


if __name__ == "__main__":
    main()
