"""How much of ``psirag compact``'s peak resident memory is its own and how much is the index's
mapped files (issue 24 item 6): a compaction reads every segment of the index through memory
maps, and the pages it has read count in its resident size (``RssFile``) as long as they stay
mapped, though the kernel can drop them at any time; what the process allocates counts as
``RssAnon``. ``/usr/bin/time -v`` gives only the sum's peak.

Runs ``python -m psirag.cli compact --json`` on a copy of ``--index`` (``cp -a``) in a child process
and reads its ``/proc/<pid>/status`` every ``--every`` seconds: the peaks of ``RssAnon``,
``RssFile`` and ``VmRSS``, the split at the moment of the largest ``VmRSS``, and ``VmHWM`` (the
kernel's own high-water mark, which a sample can miss by up to ``--every``). Child processes of
the compaction, if any, are summed in (``RssAnon`` and ``RssFile`` of each).

``--src DIR`` runs other sources (an old commit's ``git archive``), for a side-by-side run.

Usage: python benchmarks/bench_compact_memory.py --index DIR [--src DIR] [--every 0.05]
       [--label NAME] [--out compact_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _sample(pid: int) -> dict[str, int] | None:
    """The compaction's memory now in MiB: its own ``/proc`` status, with its children's
    ``RssAnon`` and ``RssFile`` added (None once it is gone)."""
    from _common import process_memory_mib
    from _pss_watch import descendant_pids

    own = process_memory_mib(pid)
    if not own:
        return None
    for child in descendant_pids(pid):
        more = process_memory_mib(child) or {}
        for key in ("RssAnon", "RssFile", "VmRSS"):
            own[key] = own.get(key, 0) + more.get(key, 0)
    return own


def measure(index: Path, src: Path, every: float) -> dict[str, Any]:
    """Compact a copy of ``index`` with the sources ``src``, sampled every ``every`` s."""
    from _common import copy_index

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        copy = Path(tmp) / "ix"
        copy_index(index, copy)
        env = {**os.environ, "PYTHONPATH": f"{src.resolve()}{os.pathsep}{HERE}"}
        env["OMP_NUM_THREADS"] = "1"
        t0 = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "psirag.cli", "compact", "--json", str(copy)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        peaks = {"RssAnon": 0, "RssFile": 0, "VmRSS": 0, "VmHWM": 0}
        at_peak: dict[str, int] = {}
        samples = 0
        while child.poll() is None:
            got = _sample(child.pid)
            if got:
                samples += 1
                if got.get("VmRSS", 0) > peaks["VmRSS"]:
                    at_peak = {k: got[k] for k in ("RssAnon", "RssFile", "VmRSS") if k in got}
                for key in peaks:
                    peaks[key] = max(peaks[key], got.get(key, 0))
            time.sleep(every)
        out, err = child.communicate()
        seconds = time.perf_counter() - t0
        if child.returncode != 0:
            sys.exit(f"psirag compact failed:\n{err[-3000:]}")
    return {
        "seconds": round(seconds, 2),
        "compact": json.loads(out),
        "peak_mib": peaks,
        "at_largest_rss_mib": at_peak,
        "samples": samples,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True, help="a saved index (left unchanged)")
    p.add_argument("--src", type=Path, default=None, help="the psirag sources (default: src)")
    p.add_argument("--label", default=None, help="names --src in the results (no paths)")
    p.add_argument("--every", type=float, default=0.05, help="seconds between two samples")
    p.add_argument("--out", default="compact_memory.json")
    args = p.parse_args()
    if not (args.index / "manifest.json").exists():
        p.error(f"{args.index}: no saved index there (no manifest.json)")
    sys.path.insert(0, str(HERE))
    from _common import machine_info, write_result

    src = args.src or ROOT / "src"
    result = measure(args.index, src, args.every)
    result = {
        "index": args.index.name,
        "src": args.label or ("this tree" if args.src is None else src.resolve().parent.name),
        **result,
        "machine": machine_info(),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    write_result(args.out, result)


if __name__ == "__main__":
    main()
