"""Wall time of one ``psirag search`` and of ``psirag mcp`` up to its ``initialize`` answer,
for several checkouts side by side on the same saved index.

Each candidate is a source folder run as ``python -m psirag.cli`` with ``PYTHONPATH=<src>`` in
the same interpreter environment, with its own ``PSIRAG_CACHE`` (warmed by one untimed run, so
that writing a cached model is not timed). Runs alternate between the candidates, round after
round, so that load from other processes hits all of them alike; the ratio of medians measured
this way is the figure to read on a busy machine.

``--index-for NAME=DIR`` gives a candidate its own index instead of INDEX (e.g. a format-3
copy made by ``psirag compact``, which an older checkout cannot read); the same name may be a
second candidate on the same source folder: ``--candidate f3=src --index-for f3=/tmp/ix3``.

Usage: python benchmarks/bench_cli_startup.py INDEX --candidate new=src --candidate old=../old/src
       [--index-for new=OTHER_INDEX] [--rounds 5] [--query "..."] [--out cli_startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, write_result

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench_cli_startup", "version": "0"},
    },
}


def _env(src: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src), "PSIRAG_CACHE": str(cache)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system) of each timed search process, by candidate: far less sensitive
than wall time to what else runs on the machine."""


def time_search(src: Path, cache: Path, index: Path, query: str, name: str = "") -> float:
    cmd = [sys.executable, "-m", "psirag.cli", "search", str(index), query, "-k", "5"]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=_env(src, cache), capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    CPU.setdefault(name or str(src), []).append(_children_cpu() - cpu0)
    if proc.returncode != 0:
        raise SystemExit(f"search with {src} failed: {proc.stderr[-2000:]}")
    return seconds


def time_mcp_initialize(src: Path, cache: Path, index: Path) -> float:
    cmd = [sys.executable, "-m", "psirag.cli", "mcp", str(index)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        env=_env(src, cache),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(INITIALIZE) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        seconds = time.perf_counter() - t0
        reply = json.loads(line)
        if reply.get("id") != 1 or "result" not in reply:
            raise SystemExit(f"mcp with {src} answered {line[:300]!r}")
    finally:
        proc.kill()
        proc.wait()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME=SRC")
    ap.add_argument("--index-for", action="append", default=[], metavar="NAME=INDEX")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--query", default="Who was the director of the film Polish-Russian War?")
    ap.add_argument("--no-mcp", action="store_true")
    ap.add_argument("--out", default="cli_startup.json")
    args = ap.parse_args()
    index = Path(args.index).resolve()
    cands = [(n, Path(p).resolve()) for n, _, p in (c.partition("=") for c in args.candidate)]
    own = {n: Path(p).resolve() for n, _, p in (c.partition("=") for c in args.index_for)}
    unknown = set(own) - {n for n, _ in cands}
    if unknown:
        raise SystemExit(f"--index-for names no candidate: {sorted(unknown)}")
    index_of = {n: own.get(n, index) for n, _ in cands}
    times: dict[str, dict[str, list[float]]] = {n: {"search": [], "mcp": []} for n, _ in cands}
    with tempfile.TemporaryDirectory(prefix="psirag-startup-") as tmp:
        caches = {n: Path(tmp) / n for n, _ in cands}
        for name, src in cands:  # warm: writes each candidate's cached model, untimed
            time_search(src, caches[name], index_of[name], args.query, name)
        CPU.clear()
        for rnd in range(args.rounds):
            order = cands[rnd % len(cands) :] + cands[: rnd % len(cands)]
            for name, src in order:
                seconds = time_search(src, caches[name], index_of[name], args.query, name)
                times[name]["search"].append(seconds)
                if not args.no_mcp:
                    seconds = time_mcp_initialize(src, caches[name], index_of[name])
                    times[name]["mcp"].append(seconds)
            print({n: {k: round(v[-1], 2) for k, v in t.items() if v} for n, t in times.items()})
    rows: list[dict[str, Any]] = []
    for name, _ in cands:
        row: dict[str, Any] = {"candidate": name, "index": index_of[name].name}
        for kind, values in times[name].items():
            if values:
                row[f"{kind}_median_s"] = round(statistics.median(values), 2)
                row[f"{kind}_min_s"] = round(min(values), 2)
                row[f"{kind}_all_s"] = [round(v, 2) for v in values]
        cpu = CPU.get(name, [])
        if cpu:
            row["search_cpu_median_s"] = round(statistics.median(cpu), 2)
            row["search_cpu_min_s"] = round(min(cpu), 2)
        rows.append(row)
    first = rows[0]
    for row in rows[1:]:
        for kind in ("search", "mcp", "search_cpu"):
            key = f"{kind}_median_s"
            if key in row and key in first:
                row[f"{kind}_ratio_vs_{first['candidate']}"] = round(row[key] / first[key], 1)
    result = {"machine": machine_info(), "index": index.name, "rounds": args.rounds, "rows": rows}
    print(json.dumps(rows, indent=1))
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
