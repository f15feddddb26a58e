"""What one saved update reads and writes (issue 24: "a 1-document add writes <= 20 MiB at 1M").

Builds a synthetic index of ``--chunks`` chunks once (``bench_living_scale``'s corpus and
hashed embedder, default ``IndexConfig``) into ``--index DIR`` (reused when it exists, so that
two checkouts can be measured on the very same saved index), copies it, then runs ``--steps``
on the copy as ``psirag add`` / ``psirag remove`` do: load, change, save. Per step: the save's
wall and CPU seconds, the bytes of the inodes it created (a hard link is none), the bytes it
passed to write() and read() (``/proc/self/io``: a file written and then swapped for a hard link
counts there, and so do base files read back to compare; memory-mapped reads do not), the
descriptors open before it, and its largest new files.

Run it once per checkout on the same ``--index``: ``PYTHONPATH=OLD/src:benchmarks python
benchmarks/bench_save_io.py --chunks 200000 --index DIR --label old`` then the same
with this checkout's ``src`` and ``--label new`` (an index saved by the old checkout: the new
one's first save migrates it, so compare the later steps).

Usage: nice python benchmarks/bench_save_io.py [--chunks 20000] [--index DIR]
       [--steps add,add,remove] [--label new] [--out save_io.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_living_scale import LoopbackHashEmbedder, _inodes, _io_bytes, _largest_new, corpus

HERE = Path(__file__).resolve().parent


def _new_text(k: int) -> str:
    _, _, vocab = corpus(200)
    rng = np.random.default_rng(99 + k)
    return "\n\n".join(
        " ".join(rng.choice(vocab[k % len(vocab)], 12).tolist() + rng.choice(vocab[-1], 8).tolist())
        + "."
        for _ in range(8)
    )


def run(chunks: int, index: Path, steps: list[str]) -> dict[str, Any]:
    from _common import copy_index

    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    emb = LoopbackHashEmbedder()
    out: dict[str, Any] = {"chunks": chunks, "steps": []}
    if not index.exists():
        texts, _, _ = corpus(chunks)
        docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
        t0 = time.perf_counter()
        Index.build(docs, IndexConfig(), embedder=emb).save(index)
        out["build_and_save_seconds"] = round(time.perf_counter() - t0, 2)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        work = Path(tmp) / "ix"
        copy_index(index, work)
        for k, step in enumerate(steps):
            t0 = time.perf_counter()
            ix = Index.load(work, embedder=emb)
            t1 = time.perf_counter()
            if step == "add":
                ix.add([Document(f"new-{k}", "", _new_text(k), is_record=False)])
            elif step == "remove":
                ix.remove([str(17 + k)])
            else:
                raise SystemExit(f"unknown step {step!r}: add or remove")
            t2 = time.perf_counter()
            seen = _inodes(work)
            fds = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
            io0, cpu0, w0 = _io_bytes(), time.process_time(), time.perf_counter()
            ix.save(work)
            io1, cpu1, w1 = _io_bytes(), time.process_time(), time.perf_counter()
            new = _largest_new(work, seen, k=10_000)
            out["steps"].append(
                {
                    "step": step,
                    "load_seconds": round(t1 - t0, 3),
                    "change_seconds": round(t2 - t1, 3),
                    "save_seconds": round(w1 - w0, 3),
                    "save_cpu_seconds": round(cpu1 - cpu0, 3),
                    "bytes_written": sum(size for _, size in new),
                    "write_call_bytes": io1[0] - io0[0],
                    "read_call_bytes": io1[1] - io0[1],
                    "files_written": len(new),
                    "descriptors_before_save": fds,
                    "largest_files": new[:12],
                }
            )
            print(json.dumps(out["steps"][-1]), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--index", type=Path, default=None, help="saved index to reuse or create")
    p.add_argument("--steps", default="add,add,remove")
    p.add_argument("--label", default="new")
    p.add_argument("--out", default="save_io.json")
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    index = args.index or Path(tempfile.mkdtemp()) / f"ix{args.chunks}"
    got = run(args.chunks, index, args.steps.split(","))
    got["machine"] = machine_info()
    target = HERE / "results" / args.out
    results = json.loads(target.read_text()) if target.exists() else {}
    results[f"{args.label}-{args.chunks}"] = got
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
