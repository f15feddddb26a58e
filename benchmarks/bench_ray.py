"""`psirag index` on 2Wiki locally and with `--ray` on a local 2-CPU Ray cluster: the wall-time
overhead ratio and the equality check (same ids, vectors, tree, abstracts).

Both builds run the real CLI in a child process on the same passages (the first ``--limit``
2WikiMultihopQA records, title + text, one leaf each), with the default MiniLM embedder and
nothing cached. The Ray side starts its own local cluster (``--ray --ray-cpus 2``), so its wall
time includes starting Ray, its embedding actors (each loading MiniLM) and the bucket tasks.
With ``--rounds 2`` the order alternates (local, Ray, Ray, local) so that a machine whose load
drifts does not favour one side.

Usage: nice -n 10 python benchmarks/bench_ray.py [--limit 1000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import dataset, machine_info, write_result

from psirag.index import Index


def run_index(corpus: Path, out: Path, extra: list[str]) -> tuple[float, dict[str, Any]]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "psirag.cli", "index", str(corpus), "--out", str(out)]
    cmd += ["--json", "-q", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def compare(a: Index, b: Index) -> dict[str, Any]:
    """The equality check of the issue, as numbers."""
    same_ids = [c.id for c in a.chunks] == [c.id for c in b.chunks]
    diff = (
        float(np.abs(a.node_vectors - b.node_vectors).max())
        if a.node_vectors.shape == b.node_vectors.shape
        else float("inf")
    )
    leaves = a.tree.n_leaves
    leaf_diff = (
        float(np.abs(a.node_vectors[:leaves] - b.node_vectors[:leaves]).max())
        if a.node_vectors.shape == b.node_vectors.shape
        else float("inf")
    )
    same_tree = bool(
        np.array_equal(a.tree.parent, b.tree.parent) and np.array_equal(a.tree.layer, b.tree.layer)
    )
    return {
        "same_ids": same_ids,
        "max_abs_leaf_vector_diff": leaf_diff,
        "max_abs_node_vector_diff": diff,
        "vectors_within_1e-5": diff <= 1e-5,
        "same_tree": same_tree,
        "same_abstracts": a.abstracts == b.abstracts,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=1000, help="first N passages (0: all 6,119)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tree-mode", default="bucketed")
    ap.add_argument("--bucket-size", type=int, default=256)
    args = ap.parse_args()
    records, _ = dataset("2wikimultihopqa")
    if args.limit:
        records = records[: args.limit]
    work = Path(tempfile.mkdtemp(prefix="psirag-bench-ray-"))
    try:
        corpus = work / "corpus.json"
        corpus.write_text(
            json.dumps([{"title": r["title"], "text": r["text"]} for r in records]),
            encoding="utf-8",
        )
        common = ["--tree-mode", args.tree_mode, "--tree-bucket-size", str(args.bucket_size)]
        sides = {"local": common, "ray": [*common, "--ray", "--ray-cpus", "2"]}
        order = ["local", "ray"]
        plan = [s for r in range(args.rounds) for s in (order if r % 2 == 0 else order[::-1])]
        walls: dict[str, list[float]] = {"local": [], "ray": []}
        stages: dict[str, dict[str, float]] = {}
        for side in plan:
            wall, summary = run_index(corpus, work / side, sides[side])
            walls[side].append(round(wall, 1))
            stages[side] = summary["seconds"]
            print(f"{side}: {wall:.1f} s {summary['seconds']}", flush=True)
        check = compare(Index.load(work / "local"), Index.load(work / "ray"))
        local_s, ray_s = sum(walls["local"]), sum(walls["ray"])
        result = {
            "passages": len(records),
            "tree_mode": args.tree_mode,
            "bucket_size": args.bucket_size,
            "order": plan,
            "wall_seconds": walls,
            "stage_seconds_last": stages,
            "overhead_ratio_ray_over_local": round(ray_s / local_s, 3),
            "equality": check,
            "machine": machine_info(),
        }
        path = write_result("ray.json", result)
        print(json.dumps(result, indent=2))
        print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
