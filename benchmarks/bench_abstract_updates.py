"""The keyword-abstract part of an update at scale (issue 24 item 4): what the phrase table's
add and removal and the rescoring of the changed nodes cost on a saved index, first after a
load and then steady, for this checkout's sources and others' (``--src``), in one run.

Each source runs in its own child processes, one for a run of adds and one for a run of
removals, each on a fresh load of ``--index`` (read only: nothing is saved). An add is one new
document (8 passages of a topic, made as ``bench_living_scale.py`` makes them); a removal
removes one of the indexed documents (ids 17, 18, ...). Per update: the update summary's
``abstracts`` stage (wall seconds: the phrase table's add or removal and the changed nodes'
rescoring), and the CPU seconds of the phrase table's own add or removal
(``PhraseTable.add`` / ``remove``, timed around the call: CPU time, so the other processes of a
shared machine inflate it less than wall time). The sources alternate (A, B, A, B) for
``--rounds`` rounds, so load drifts hit both alike; medians are reported.

Usage: nice python benchmarks/bench_abstract_updates.py --index DIR [--src NAME=DIR ...]
       [--updates 6] [--rounds 2] [--label L] [--out abstract_updates.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def worker(index: Path, kind: str, updates: int) -> dict[str, Any]:
    from bench_living_scale import LoopbackHashEmbedder, corpus_vocab, new_document

    from psirag import Index
    from psirag.abstracts.phrases import PhraseTable
    from psirag.eval.harness import single_thread_blas

    table_cpu: list[float] = []
    for name in ("add", "remove"):
        original = getattr(PhraseTable, name)

        def timed(self: Any, *a: Any, _f: Any = original, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return _f(self, *a, **k)
            finally:
                table_cpu.append(time.process_time() - t0)

        setattr(PhraseTable, name, timed)
    emb = LoopbackHashEmbedder()
    out: dict[str, Any] = {"kind": kind, "abstracts_s": [], "table_cpu_s": [], "update_s": []}
    with single_thread_blas():
        t0 = time.perf_counter()
        ix = Index.load(index, embedder=emb)
        out["load_s"] = round(time.perf_counter() - t0, 3)
        n = ix.data.tree.n_leaves
        topic, vocab = corpus_vocab(n)
        out["n"] = n
        for k in range(updates):
            table_cpu.clear()
            t0 = time.perf_counter()
            if kind == "add":
                summary = ix.add([new_document(topic, vocab, doc_id=f"bench-new-{k}")])
            else:
                summary = ix.remove([str(17 + k)])
            out["update_s"].append(round(time.perf_counter() - t0, 4))
            out["abstracts_s"].append(round(summary.seconds.get("abstracts", 0.0), 4))
            out["table_cpu_s"].append(round(sum(table_cpu), 4))
    return out


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """First update after the load and the steady ones (the rest), medians over the runs."""
    first = [r["abstracts_s"][0] for r in runs]
    steady = [x for r in runs for x in r["abstracts_s"][1:]]
    first_cpu = [r["table_cpu_s"][0] for r in runs]
    steady_cpu = [x for r in runs for x in r["table_cpu_s"][1:]]
    return {
        "abstracts_first_s": round(statistics.median(first), 4),
        "abstracts_steady_s": round(statistics.median(steady), 4) if steady else None,
        "table_cpu_first_s": round(statistics.median(first_cpu), 4),
        "table_cpu_steady_s": round(statistics.median(steady_cpu), 4) if steady_cpu else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True, help="a saved index (read only)")
    p.add_argument(
        "--src",
        action="append",
        default=[],
        help="NAME=DIR: other sources to run beside this checkout's (repeatable)",
    )
    p.add_argument("--updates", type=int, default=6, help="adds and removals per process")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--label", default="new")
    p.add_argument("--out", default="abstract_updates.json")
    p.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        kind, updates = args.worker
        print(json.dumps(worker(args.index, kind, int(updates))))
        return
    if not (args.index / "manifest.json").exists():
        p.error(f"--index {args.index}: no saved index there (no manifest.json)")
    sources = {"this": HERE.parent / "src"}
    for spec in args.src:
        name, sep, folder = spec.partition("=")
        if not sep or not (Path(folder) / "psirag").is_dir():
            p.error(f"--src {spec}: give NAME=DIR, DIR holding the psirag package")
        sources[name] = Path(folder)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {"add": [], "remove": []} for s in sources
    }
    for _round in range(args.rounds):
        for kind in ("add", "remove"):
            for name, src in sources.items():
                env = {
                    **os.environ,
                    "PYTHONPATH": f"{src.resolve()}{os.pathsep}{HERE}",
                    "OMP_NUM_THREADS": "1",
                }
                cmd = [sys.executable, str(Path(__file__).resolve()), "--index"]
                cmd += [str(args.index.resolve()), "--worker", kind, str(args.updates)]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{name} {kind} failed (exit {done.returncode})")
                row = json.loads(done.stdout.strip().splitlines()[-1])
                print(name, json.dumps(row), flush=True)
                runs[name][kind].append(row)
    sys.path.insert(0, str(HERE))
    from _common import machine_info

    result: dict[str, Any] = {
        "label": args.label,
        "index": args.index.name,  # no path of this machine in results
        "load_after": os.getloadavg()[0],
        "machine": machine_info(),
        "sources": {
            name: {kind: {"summary": _summary(r), "runs": r} for kind, r in by_kind.items()}
            for name, by_kind in runs.items()
        },
    }
    for name in sources:
        print(name, {k: v["summary"] for k, v in result["sources"][name].items()})
    target = HERE / "results" / args.out if "/" not in args.out else Path(args.out)
    old = json.loads(target.read_text()) if target.exists() else {}
    old[args.label] = result
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(old, indent=1) + "\n")
    shutil.move(tmp, target)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
