"""Where a fresh build's save holds memory (issue 24 item 6: a 1M-chunk build, save included,
in 8 GiB): builds ``--chunks`` synthetic one-chunk records as ``bench_living_scale.py`` does
(its corpus and fast hashed embedder, the default ``IndexConfig``), then saves the index and
records, after each file the save writes, this process's resident memory as anonymous and
file-backed pages (``RssAnon``, ``RssFile``: a big build's arrays spilled to mapped temporary
files count there once read) and its high-water mark (``VmHWM``, which the goal bounds).

``--src DIR`` runs other sources (an old commit's ``git archive``), for a side-by-side run.

Usage: PYTHONPATH=src:benchmarks python benchmarks/bench_save_memory.py [--chunks 200000]
       [--src DIR] [--out save_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def worker(n: int) -> dict[str, Any]:
    from _common import process_memory_mib
    from bench_living_scale import LoopbackHashEmbedder, corpus

    from psirag import Index, IndexConfig, storage
    from psirag.eval.harness import single_thread_blas
    from psirag.ingest import Document

    texts, _, _ = corpus(n)
    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
    del texts
    files: list[dict[str, Any]] = []
    for method in ("save_array", "save_jsonl", "keep"):
        original = getattr(storage.IndexWriter, method)

        def traced(self: Any, name: str, *a: Any, _original: Any = original, **k: Any) -> Any:
            before = process_memory_mib()
            got = _original(self, name, *a, **k)
            files.append({"file": name, "before": before, "after": process_memory_mib()})
            return got

        setattr(storage.IndexWriter, method, traced)
    out: dict[str, Any] = {"n": n}
    with single_thread_blas(), tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        t0 = time.perf_counter()
        index = Index.build(docs, IndexConfig(), embedder=LoopbackHashEmbedder())
        out["build_seconds"] = round(time.perf_counter() - t0, 1)
        out["built"] = process_memory_mib()
        t0 = time.perf_counter()
        index.save(Path(tmp) / "ix")
        out["save_seconds"] = round(time.perf_counter() - t0, 1)
        out["saved"] = process_memory_mib()
    out["files"] = files
    return out


def main() -> None:
    from _common import src_worker

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=200_000)
    p.add_argument("--src", type=Path, default=None, help="sources to run (default: this repo)")
    p.add_argument("--out", default="save_memory.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.chunks)))
        return
    row = src_worker(__file__, args.src or HERE.parent / "src", ["--chunks", str(args.chunks)])
    for f in row["files"]:
        b, a = f["before"], f["after"]
        print(
            f"{f['file'][:52]:52s} anon {b['RssAnon']:6d} -> {a['RssAnon']:6d}  "
            f"file {b['RssFile']:6d} -> {a['RssFile']:6d}  peak {a['VmHWM']:6d} MiB"
        )
    print(f"built {row['built']}, saved {row['saved']} ({row['save_seconds']} s)")
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / args.out).write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
