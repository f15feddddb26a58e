"""`psirag index` end to end on the 2Wiki corpus: stage times and peak RSS of the process.

Nothing is cached: this is what a user pays on this machine. Target: peak RSS under 2 GiB.
Usage: python benchmarks/bench_index_e2e.py [--dataset 2wikimultihopqa]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time

from _common import DATA, OUT, ROOT, machine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="2wikimultihopqa")
    args = ap.parse_args()
    target = OUT / f"e2e-{args.dataset}"
    shutil.rmtree(target, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "psirag.cli",
        "index",
        str(DATA / args.dataset / "corpus.json"),
        "--out",
        str(target),
        "--json",
        "-q",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    summary = json.loads(proc.stdout)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "command": "psirag index <data>/" + args.dataset + "/corpus.json --out DIR --json -q",
        "wall_seconds": round(wall, 1),
        "stage_seconds": summary["seconds"],
        "chunks": summary["chunks"],
        "nodes_per_layer": summary["nodes_per_layer"],
        "truncated_chunks": summary["truncated_chunks"],
        "peak_rss_mib": round(rss, 1),
        "machine": machine(),
    }
    name = f"index_e2e_{args.dataset}.json"
    (ROOT / "benchmarks" / "results" / name).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
