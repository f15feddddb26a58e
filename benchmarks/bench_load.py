"""What opening a saved index costs (issue 24 item 6, issue 23 item 3): ``Index.load`` wall
and CPU seconds, RSS after the load, and the first search after it, at 20k and 200k chunks,
for two checkouts side by side in one run.

The indexes are the synthetic corpus and loopback hash embedder of
``bench_living_scale.py`` (default ``IndexConfig``: keyword abstracts, BM25, default tree),
built once per size with this checkout and saved (format 3) under ``--indexes``; a second
copy is the same index after a one-document ``psirag add`` and a save (two segments per
table, the shape a living index has), and a third is that one after ``psirag compact`` by
this checkout (one segment per table, with the line starts a save now writes beside each
JSON-lines segment; the first two, saved by the old checkout, have none). Each measurement
runs in a fresh child process per checkout, size and index, so its RSS is its own:

- ``load``: ``Index.load(folder)``, wall and CPU seconds (user + system), RSS after it;
- ``first search``: ``index.search(q, k=10)`` right after the load (the query embedded by
  the hash embedder, so this is the candidate lists, fusion and the passages), then the
  median of 5 more;
- RSS after the first search.

``--index DIR`` measures a saved index of the same corpus instead (e.g. a kept 1M index after
a few adds), read only, ``--repeats`` times per checkout, the checkouts taking turns.

Usage: nice python benchmarks/bench_load.py --indexes /tmp/loadbench [--sizes 20000 200000]
       [--old DIR] [--out load.json]
       nice python benchmarks/bench_load.py --index DIR [--old DIR] [--repeats 3]
(``--old``: another checkout's ``src`` folder, e.g. ``git archive main src | tar -x -C DIR``.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

QUERIES = 6


def build(folder: Path, n: int) -> None:
    """Build the ``n``-chunk index into ``folder/base`` and its one-add copy ``folder/added``."""
    from bench_living_scale import LoopbackHashEmbedder, corpus

    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    texts, _, vocab = corpus(n)
    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
    emb = LoopbackHashEmbedder()
    index = Index.build(docs, IndexConfig(), embedder=emb)
    base = folder / "base"
    index.save(base)
    added = folder / "added"
    shutil.copytree(base, added, copy_function=os.link)
    again = Index.load(added, embedder=emb)
    text = "\n\n".join(" ".join(vocab[0][:12] + vocab[-1][:8]) + f" {k}." for k in range(8))
    again.add([Document("new-doc", "", text, is_record=False)])
    again.save(added)


def queries(n: int) -> list[str]:
    from bench_living_scale import corpus

    _, _, vocab = corpus(min(n, 2000))
    return [" ".join(vocab[k % len(vocab)][k : k + 3]) for k in range(QUERIES)]


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(folder: Path, n: int) -> dict[str, Any]:
    """One checkout's load and first searches of ``folder`` (run in a fresh process)."""
    from bench_living_scale import LoopbackHashEmbedder

    from psirag import Index

    qs = queries(n)
    emb = LoopbackHashEmbedder()
    import numpy  # noqa: F401  (imported by psirag anyway: not the load's cost)

    rss0 = _rss_mib()
    c0, t0 = _cpu(), time.perf_counter()
    index = Index.load(folder, embedder=emb)
    t1, c1 = time.perf_counter(), _cpu()
    rss_load = _rss_mib()
    first = index.search(qs[0], k=10)
    t2, c2 = time.perf_counter(), _cpu()
    rest = []
    for q in qs[1:]:
        s0 = time.perf_counter()
        index.search(q, k=10)
        rest.append(time.perf_counter() - s0)
    rest.sort()
    return {
        "load_s": round(t1 - t0, 3),
        "load_cpu_s": round(c1 - c0, 3),
        "rss_before_mib": round(rss0, 1),
        "rss_after_load_mib": round(rss_load, 1),
        "first_search_s": round(t2 - t1, 3),
        "first_search_cpu_s": round(c2 - c1, 3),
        "next_search_p50_ms": round(1000 * rest[len(rest) // 2], 2),
        "rss_after_search_mib": round(_rss_mib(), 1),
        "top_ids": [p.id for p in first[:3]],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--indexes", type=Path, default=None, help="where the indexes are kept")
    p.add_argument("--index", type=Path, default=None, help="measure this saved index only")
    p.add_argument("--repeats", type=int, default=3, help="with --index: runs per checkout")
    p.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000])
    p.add_argument("--old", type=Path, default=None, help="the other checkout's src folder")
    p.add_argument("--out", default="load.json")
    p.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    p.add_argument("--build", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--compact", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.build is not None:
        assert args.indexes is not None
        build(args.indexes, args.build)
        return
    if args.compact is not None:
        from psirag.living import compact_saved

        compact_saved(args.compact)
        return
    if args.worker is not None:
        print(json.dumps(measure(Path(args.worker[0]), int(args.worker[1]))))
        return
    new_src = (HERE.parent / "src").resolve()
    checkouts = [("new", new_src)] + ([("old", args.old.resolve())] if args.old else [])

    def env(src: Path) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}", "OMP_NUM_THREADS": "1"}

    def child(src: Path, extra: list[str]) -> str:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *extra],
            env=env(src),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{extra} failed (exit {done.returncode})")
        return done.stdout

    rows = []
    if args.index is not None:
        if not (args.index / "manifest.json").is_file():
            p.error(f"--index {args.index}: no saved index there (no manifest.json)")
        for k in range(args.repeats):
            for label, src in checkouts[::-1]:
                out = child(src, ["--worker", str(args.index), "2000"])
                row = {"index": args.index.name, "run": k, "checkout": label}
                row.update(json.loads(out.splitlines()[-1]))
                print(json.dumps(row), flush=True)
                rows.append(row)
    elif args.indexes is None:
        p.error("give --indexes (built here) or --index (a saved index)")
    for n in [] if args.index is not None else args.sizes:
        assert args.indexes is not None
        folder = args.indexes / str(n)
        if not (folder / "added").is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            # built by the old checkout when given: an index saved before this change
            child(checkouts[-1][1], ["--indexes", str(folder), "--build", str(n)])
            print(f"built {n} in {time.perf_counter() - t0:.0f} s", flush=True)
        if not (folder / "compacted").is_dir():
            shutil.copytree(folder / "added", folder / "compacted", copy_function=os.link)
            child(new_src, ["--indexes", str(folder), "--compact", str(folder / "compacted")])
        for shape in ("base", "added", "compacted"):
            for label, src in checkouts:
                out = child(
                    src, ["--indexes", str(folder), "--worker", str(folder / shape), str(n)]
                )
                row = {
                    "n": n,
                    "index": shape,
                    "checkout": label,
                    **json.loads(out.splitlines()[-1]),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    result = {"rows": rows, "machine": machine_info()}
    target = HERE / "results" / args.out if "/" not in args.out else Path(args.out)
    target.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
