"""The tree stage of a one-document add and removal (issue 24), alone and in CPU seconds:
insertion into (removal from) the tree, carrying the per-node data over to the new tree
(``living._State.apply``) and the dirty nodes' leaf-mean routing vectors, at several sizes,
for this checkout and (``--src``) another one, side by side in one run.

Why CPU seconds: the machine's two cores are shared, and wall time there is mostly waiting.
Why a synthetic tree: the tree stage reads only the tree and the vectors, and a balanced tree
of fan-out 30 over random unit vectors is made in a second where a build takes minutes. Each
add puts 8 new chunks (one document) under given insertion points (as the HNSW graph gives
them), then the next add starts from the tree the last one made (as a running server does);
then as many removals of 8 neighbouring leaves.

Usage: nice python benchmarks/bench_tree_stage.py [--sizes 20000 200000 1000000]
       [--src OTHER_SRC --other-label main] [--out tree_stage.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DIM = 64
FAN = 30
ADDS = 7


def synthetic_tree(n: int, seed: int = 0) -> tuple[Any, np.ndarray]:
    """A balanced tree of fan-out :data:`FAN` over ``n`` random unit vectors."""
    from psirag.tree.model import Tree

    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    parents, layers = [], [np.zeros(n, dtype=np.int32)]
    width, first, layer = n, 0, 0
    while width > 1:
        layer += 1
        above = -(-width // FAN)
        parents.append(first + width + np.arange(width) // FAN)
        layers.append(np.full(above, layer, dtype=np.int32))
        first, width = first + width, above
    parents.append(np.full(1, -1))
    tree = Tree(np.concatenate(parents).astype(np.int64), np.concatenate(layers))
    return tree, vectors


def worker(n: int) -> dict[str, Any]:
    from psirag import living
    from psirag.config import IndexConfig
    from psirag.pipeline import routing_vectors
    from psirag.tree.update import check_invariants, insert_leaves, remove_leaves

    tree, vectors = synthetic_tree(n)
    k = tree.n_nodes - n
    nodes = np.concatenate([vectors, np.zeros((k, DIM), dtype=np.float32)])
    state = living._State(
        tree, [None] * n, vectors, [""] * k, nodes, np.empty(0, dtype=np.int64),
        drift=np.zeros(tree.n_nodes, dtype=np.int64), fresh=np.empty(0, dtype=np.int64),
    )  # fmt: skip
    appends = "appended" in inspect.signature(living._State.apply).parameters
    config = IndexConfig(abstracts="none")
    rng = np.random.default_rng(1)
    _ = tree.children_table  # the loaded tree's table, made by the search before an add
    cpu: dict[str, list[float]] = {"insert": [], "apply": [], "routing": [], "total": []}
    for _ in range(ADDS):
        new = rng.normal(size=(8, DIM)).astype(np.float32)
        new /= np.linalg.norm(new, axis=1, keepdims=True)
        near = (rng.integers(0, state.tree.n_leaves, 8), np.full(8, 0.5, dtype=np.float32))
        t0 = time.process_time()
        update = insert_leaves(
            state.tree, state.leaf_vectors, new, max_children=40, nearest=near,
            node_vectors=state.vectors,
        )  # fmt: skip
        t1 = time.process_time()
        chunks = state.chunks + [None] * 8
        if appends:
            state.apply(update, chunks, state.leaf_vectors, appended=new)
        else:
            state.apply(update, chunks, np.concatenate([state.leaf_vectors, new]))
        t2 = time.process_time()
        dirty = state.dirty
        state.vectors[dirty] = routing_vectors(
            state.tree, state.leaf_vectors, state.abstracts, config, None, nodes=dirty.tolist()
        )
        state.dirty = np.empty(0, dtype=np.int64)
        t3 = time.process_time()
        for key, v in (("insert", t1 - t0), ("apply", t2 - t1), ("routing", t3 - t2)):
            cpu[key].append(v)
        cpu["total"].append(t3 - t0)
    check_invariants(state.tree, 40)
    # then as many one-document removals (8 neighbouring leaves), as living.update_documents
    # makes them: the tree's removal, the kept leaves' vectors, carrying the per-node data
    trusted = "check_vectors" in inspect.signature(remove_leaves).parameters
    gone_cpu: dict[str, list[float]] = {"remove": [], "apply": [], "routing": [], "total": []}
    for _ in range(ADDS):
        start = int(rng.integers(0, state.tree.n_leaves - 8))
        gone = np.arange(start, start + 8)
        t0 = time.process_time()
        extra = {"check_vectors": False} if trusted else {}
        update = remove_leaves(state.tree, gone, state.leaf_vectors, max_children=40, **extra)
        t1 = time.process_time()
        keep = np.ones(state.tree.n_leaves, dtype=bool)
        keep[gone] = False
        kept = np.flatnonzero(keep)
        state.apply(update, [state.chunks[i] for i in kept.tolist()], state.leaf_vectors[kept])
        t2 = time.process_time()
        dirty = state.dirty
        state.vectors[dirty] = routing_vectors(
            state.tree, state.leaf_vectors, state.abstracts, config, None, nodes=dirty.tolist()
        )
        state.dirty = np.empty(0, dtype=np.int64)
        t3 = time.process_time()
        for key, v in (("remove", t1 - t0), ("apply", t2 - t1), ("routing", t3 - t2)):
            gone_cpu[key].append(v)
        gone_cpu["total"].append(t3 - t0)
    check_invariants(state.tree, 40)
    return {
        "n": n,
        "cpu_ms_median": {k: round(1000 * float(np.median(v)), 2) for k, v in cpu.items()},
        "cpu_ms_all_total": [round(1000 * v, 2) for v in cpu["total"]],
        "remove_cpu_ms_median": {
            k: round(1000 * float(np.median(v)), 2) for k, v in gone_cpu.items()
        },
    }


def run(src: Path, sizes: list[int]) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}
    rows = []
    for n in sizes:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(n)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{src} size {n} failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(src.name, json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000, 1_000_000])
    p.add_argument("--src", type=Path, default=None, help="another checkout's sources")
    p.add_argument("--other-label", default="main")
    p.add_argument("--label", default="new")
    p.add_argument("--out", default="tree_stage.json")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))
        return
    result: dict[str, Any] = {}
    runs = [(args.label, (HERE.parent / "src").resolve())]
    if args.src is not None:
        runs.insert(0, (args.other_label, args.src.resolve()))
    for label, src in runs:
        rows = run(src, args.sizes)
        totals = {r["n"]: r["cpu_ms_median"]["total"] for r in rows}
        removals = {r["n"]: r["remove_cpu_ms_median"]["total"] for r in rows}
        entry: dict[str, Any] = {"rows": rows}
        if 20_000 in totals and 200_000 in totals:
            entry["ratio_200k_20k"] = round(totals[200_000] / totals[20_000], 2)
            entry["remove_ratio_200k_20k"] = round(removals[200_000] / removals[20_000], 2)
        result[label] = entry
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    result["machine"] = machine_info()
    target = HERE / "results" / args.out
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
