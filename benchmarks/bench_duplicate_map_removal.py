"""What a removal pays to keep BM25's duplicate map (issue 24): ``DuplicateMap.kept`` at 200k
and 1M texts, the code of a git revision (``--old REV``) against the working tree's, on the
same synthetic map (5% of the texts copies of another), side by side in one run.

The old map sorted every text's key hash twice per removal; the new one renumbers the groups
of copies and sorts only those whose first copy was removed.

Usage: python benchmarks/bench_duplicate_map_removal.py [--old 137eadb] [--sizes 200000 1000000]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from typing import Any

import numpy as np
from _common import ROOT, machine_info, write_result

from psirag.retrieval.duplicates import DuplicateMap


def _old_class(rev: str) -> Any:
    """``DuplicateMap`` as the module was at ``rev`` (read from git, run in its own namespace)."""
    path = "src/psirag/retrieval/duplicates.py"
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    space: dict[str, Any] = {"__name__": "old_duplicates"}
    exec(compile(source, f"{rev}:{path}", "exec"), space)  # our own file, as it was at rev
    return space["DuplicateMap"]


def _map(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    hashes = rng.integers(-(2**62), 2**62, n)
    copies = rng.random(n) < 0.05
    hashes[copies] = hashes[rng.integers(0, n, int(copies.sum()))]
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)], hashes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", default="137eadb", help="git revision of the old code")
    p.add_argument("--sizes", type=int, nargs="+", default=[200_000, 1_000_000])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    sides = {f"old {args.old}": _old_class(args.old), "new": DuplicateMap}
    rows = []
    for n in args.sizes:
        first, hashes = _map(n)
        copied = np.flatnonzero(first != np.arange(n))
        removals = {
            "one document (10 texts)": np.arange(n // 2, n // 2 + 10),
            "first copies of 50 groups": np.unique(first[copied])[:50],
        }
        for what, gone in removals.items():
            keep = np.ones(n, dtype=bool)
            keep[gone] = False
            results = {}
            for side, cls in sides.items():
                seconds = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    got = cls(first, hashes).kept(keep)
                    seconds.append(time.perf_counter() - t0)
                results[side] = got.first_copy
                rows.append({"n": n, "removal": what, "side": side, "ms": 1e3 * min(seconds)})
                print(f"{n:>9,} {what:<26} {side:<12} {1e3 * min(seconds):8.2f} ms", flush=True)
            old, new = results.values()
            assert np.array_equal(old, new), "the two sides disagree"
    write_result("duplicate_map_removal.json", {"machine": machine_info(), "rows": rows})


if __name__ == "__main__":
    main()
