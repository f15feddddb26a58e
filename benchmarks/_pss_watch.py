"""Read the summed PSS of a process and all its descendants every few tenths of a second, at
the lowest CPU priority, from a process of its own (not one of the watched: a benchmark starts
it detached), and append ``time pss_mib processes`` lines to a file until a stop file appears
or the process is gone. Reading smaps_rollup walks a process's page tables (about 55 ms of CPU
for a 5 GiB build); a thread of the build doing that once a second took 5-12% of a core from
the build it measured, while this process only gets a core the build leaves idle.

Usage (from a benchmark): python _pss_watch.py PID OUT STOP [EVERY]"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def descendant_pids(pid: int | None = None) -> list[int]:
    """The ids of every process below ``pid`` (this one by default), children first (Linux
    /proc's children lists; empty elsewhere)."""
    todo = [os.getpid() if pid is None else pid]
    out: list[int] = []
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def pss_mib(pid: int) -> float:
    """The proportional set size of process ``pid`` now, in MiB (``Pss`` of
    /proc/<pid>/smaps_rollup: a page shared by k processes counts 1/k in each, so the sum over
    processes counts a copy-on-write page once); 0 when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def main() -> None:
    pid, out, stop = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    every = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    os.nice(19)
    with out.open("a") as fh:
        while not stop.exists() and Path(f"/proc/{pid}").exists():
            now = time.perf_counter()  # CLOCK_MONOTONIC: the build's own clock
            pids = [pid, *descendant_pids(pid)]
            total = sum(pss_mib(p) for p in pids)
            fh.write(f"{now:.3f} {total:.1f} {len(pids)}\n")
            fh.flush()
            time.sleep(every)
        fh.write(f"cpu {time.process_time():.2f}\n")


if __name__ == "__main__":
    main()
