"""The BM25 stage of a build on its own (issue 24, build time): the term counts of the
synthetic corpus of ``bench_living_scale.py`` (``TermCounts.of``), then the postings and the
duplicate map (``SparseIndex.from_counts``), with a digest of the arrays each makes, so two
checkouts' sources can be compared for speed and for equal output in one run.

Usage (one child process per run, alternating old and new):

    PYTHONPATH=src:benchmarks nice python benchmarks/bench_bm25_build.py --n 200000 \\
        --src <old src dir> --src src --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import hashlib, json, sys, time
import numpy as np
from bench_living_scale import corpus
from _common import current_rss_mib
from psirag.retrieval.bm25 import SparseIndex, TermCounts
texts = corpus(int(sys.argv[1]))[0]
t = time.perf_counter(); c = TermCounts.of(texts); t_counts = time.perf_counter() - t
t = time.perf_counter(); s = SparseIndex.from_counts(c, texts); t_rest = time.perf_counter() - t
h = hashlib.sha256()
for a in (c.doc_ptr, c.terms, c.tf):
    h.update(np.ascontiguousarray(a).tobytes())
h.update(json.dumps(sorted(c.vocab.items())).encode())
d = hashlib.sha256(np.asarray(s.duplicates.hashes).tobytes() + s.first_copy.tobytes())
print(json.dumps({"term_counts_s": round(t_counts, 2), "postings_and_dups_s": round(t_rest, 2),
    "rss_after_mib": round(current_rss_mib(), 1), "counts_sha": h.hexdigest()[:16],
    "dups_sha": d.hexdigest()[:16]}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--src", type=Path, action="append", help="sources to run (repeatable)")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args()
    rows = []
    for _ in range(args.repeat):
        for src in args.src or [HERE.parent / "src"]:
            env = {**os.environ, "PYTHONPATH": f"{src.resolve()}{os.pathsep}{HERE}"}
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(args.n)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            row = {"src": src.name if src.name != "src" else str(src), **json.loads(out)}
            print(json.dumps(row), flush=True)
            rows.append(row)


if __name__ == "__main__":
    main()
