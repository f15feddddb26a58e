"""What one-document removals cost on a saved index, and the share of it spent re-homing
(issue 24: a change to a living index should cost O(change)).

A removal that leaves a node with one child re-homes that child under the most similar node of
its layer (``psirag.tree.update._Work.prune``). Up to main 8b6ee14 it read the float64 leaf sum
of every candidate of the layer (``_Sums.read`` with more than one node), which grows with the
corpus; since the stored sum norms (``IndexData.inner_norms``) it reads only the candidates
that the stored routing vectors cannot rule out with a proven margin
(``psirag.tree.update.RehomeHint``). This script loads a copy of ``--index`` once, then removes
each of ``--docs`` documents in memory, one removal per document, each from the loaded index
(not one after another), and reports per removal (with the prefilter also whether the exact
path, the same removal without norms, makes the same tree): the wall seconds of
``Index.remove``, the seconds inside the candidate reads (``_Sums.read`` of more than one node)
and how many rows they read, the candidates scored exactly per re-home, the seconds of the
prefilter (``rehome_shortlist``), of ``_Work.prune`` and of ``living._State.apply``, and how
many nodes were re-homed.

``--pick rehome`` chooses documents whose removal leaves a layer-1 node with one child (a
re-home), ``--pick mixed`` half of those and half of others, ``--pick every`` (default) every
``docs``-th document whatever it does. An index saved without norms gets them in memory first
(``--norms memory``, default, as a compaction or a new build would store them; timed as
``norms_seconds``) or is compacted first (``--norms compact``, which saves them); older
sources have neither and run as they are. ``--saves K``: then K of the chosen documents are
removed one after another, each saved on top of the last generation (what ``psirag remove``
does), and the bytes each save wrote are reported, those of the ``inner_norms`` table apart.

It also reports, for the layer-1 nodes of the loaded index, how far each stored routing
vector (float32, the normalised mean of the node's leaves when ``routing == "leaf_mean"`` and
the node's abstract is not waiting) is from the normalised float64 leaf sum, and the smallest
leaf-sum norm per leaf (``norm_per_leaf_min``).

``--chain`` removes the documents one after another from the same index instead (what a
server does: each removal from the index the previous one left). Per removal the stage
seconds of the update's summary are kept (``stages``), and for the load and each removal the
file pages it brought into this process (``rss_file_mib``: the growth of ``RssFile`` in
``/proc/self/status``, what a memory-mapped read touched, cached or not) and the bytes it
read by system calls (``rchar_mib``, ``/proc/self/io``). ``--adds N`` then adds N documents
one after another (each two chunks' texts joined, with a new word), timing ``_State.apply``
too.

``--src`` runs the same script against another checkout's sources (``git archive <commit> src
| tar -x -C DIR``), once per ``--src``, for a side-by-side table in one run.

Usage: nice python benchmarks/bench_removal_rehome.py --index DIR [--src DIR ...]
       [--docs 10] [--pick every|rehome|mixed] [--norms memory|compact] [--saves K]
       [--chain] [--adds 0] [--out removal_rehome.json]
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

HERE = Path(__file__).resolve().parent


def _rehomes(tree: Any, gone: np.ndarray) -> bool:
    """Whether removing the leaves ``gone`` (a mask) leaves a layer-1 node with one child."""
    leaves = np.flatnonzero(gone)
    parents, lost = np.unique(tree.parent[leaves], return_counts=True)
    ok = parents >= 0
    return bool(np.any(tree.fan_out[parents[ok]] - lost[ok] == 1))


def _choose(data: Any, n_docs: int, pick: str) -> list[str]:
    """The documents to remove (see the module docstring)."""
    docs = data.documents
    step = max(1, len(docs) // max(n_docs, 1))
    if pick == "every":
        return [docs[k * step + 17 % step] for k in range(n_docs)]
    want_yes = n_docs if pick == "rehome" else (n_docs + 1) // 2
    want_no = 0 if pick == "rehome" else n_docs // 2
    yes: list[str] = []
    no: list[str] = []
    directory = data.document_index
    stride = max(1, len(docs) // 5000)  # spread over the corpus, whatever it holds
    for k in range(0, len(docs) * stride, stride):
        doc = docs[(17 + k * 7919) % len(docs)]
        if doc in yes or doc in no:
            continue
        re = _rehomes(data.tree, directory.leaves_of([doc]))
        if re and len(yes) < want_yes:
            yes.append(doc)
        elif not re and len(no) < want_no:
            no.append(doc)
        if len(yes) >= want_yes and len(no) >= want_no:
            break
    return yes + no


def _written_bytes(folder: Path, generation: int) -> tuple[int, int]:
    """Bytes of the files generation ``generation`` wrote (those the generation before it
    does not list with the same checksum), and of those the ``inner_norms`` table's."""

    def files(g: int) -> dict[str, Any]:
        path = folder / "generations" / f"{g:06d}" / "manifest.json"
        if not path.exists():
            return {}
        got: dict[str, Any] = json.loads(path.read_text()).get("files", {})
        return got

    now, before = files(generation), files(generation - 1)
    total = norms = 0
    for name, meta in now.items():
        old = before.get(name)
        if old is not None and old.get("sha256") == meta.get("sha256"):
            continue
        size = int(meta.get("bytes", 0))
        total += size
        if "inner_norms" in name:
            norms += size
    return total, norms


def _io_mib() -> tuple[float, float]:
    """This process's file pages in memory (``RssFile``) and bytes read by system calls
    (``rchar``), in MiB (0 where /proc does not say)."""
    rss = rchar = 0.0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssFile:"):
                rss = int(line.split()[1]) / 1024
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                rchar = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return rss, rchar


def _io_since(before: tuple[float, float]) -> dict[str, float]:
    now = _io_mib()
    return {
        "rss_file_mib": round(now[0] - before[0], 1),
        "rchar_mib": round(now[1] - before[1], 1),
    }


def worker(source: Path, n_docs: int, analyse: bool, options: dict[str, Any]) -> dict[str, Any]:
    chain, n_adds = bool(options.get("chain")), int(options.get("adds", 0))
    from _common import copy_index, peak_rss_mib
    from bench_living_scale import LoopbackHashEmbedder

    import psirag.living as living
    import psirag.tree.update as upd
    from psirag import Index
    from psirag.eval.harness import single_thread_blas

    timers: dict[str, float] = {}
    scored: list[int] = []
    read_rows = [0]

    def timed(owner: Any, name: str, key: str, when: Any = None) -> None:
        orig = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                if when is None or when(*args, **kwargs):
                    timers[key] = timers.get(key, 0.0) + time.perf_counter() - t0

        setattr(owner, name, wrapper)

    def many(self: Any, nodes: list[int]) -> bool:
        if len(nodes) > 1:
            read_rows[0] += len(nodes)
            return True
        return False

    timed(upd._Sums, "read", "candidate_reads", many)
    timed(upd._Work, "prune", "prune")
    timed(living._State, "apply", "apply")
    new_code = hasattr(upd, "rehome_shortlist")
    if new_code:
        timed(upd, "rehome_shortlist", "prefilter")
        orig_remove = living.remove_leaves

        def remove_leaves(*args: Any, **kwargs: Any) -> Any:
            got = orig_remove(*args, **kwargs)
            scored.extend(got.rehome_scored)
            return got

        living.remove_leaves = remove_leaves
    out: dict[str, Any] = {"index": source.name, "prefilter": new_code}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp, single_thread_blas():
        folder = Path(tmp) / "ix"
        copy_index(source, folder, sync=False)
        emb = LoopbackHashEmbedder()
        if new_code and options["norms"] == "compact":
            t0 = time.perf_counter()
            living.compact_saved(folder)
            out["compact_seconds"] = round(time.perf_counter() - t0, 3)
        io0 = _io_mib()
        t0 = time.perf_counter()
        base = Index.load(folder, embedder=emb)
        out["load_seconds"] = round(time.perf_counter() - t0, 3)
        out["load_io"] = _io_since(io0)
        out["mode"] = "chain" if chain else "each from the loaded index"
        out["norms_saved"] = getattr(base.data, "inner_norms", None) is not None
        if new_code and base.data.inner_norms is None:
            t0 = time.perf_counter()
            base = Index.from_data(living.with_sum_norms(base.data), embedder=emb)
            out["norms_seconds"] = round(time.perf_counter() - t0, 3)
        tree = base.data.tree
        out["n"] = int(tree.n_leaves)
        out["layers"] = tree.layer_sizes()[:4]
        t0 = time.perf_counter()
        chosen = _choose(base.data, n_docs, options["pick"])
        out["choose_seconds"] = round(time.perf_counter() - t0, 3)
        rows = []
        chained = Index.from_data(base.data, embedder=emb)
        for doc in chosen:
            ix = chained if chain else Index.from_data(base.data, embedder=emb)
            timers.clear()
            scored.clear()
            read_rows[0] = 0
            io0 = _io_mib()
            t0 = time.perf_counter()
            summary = ix.remove([doc])
            seconds = time.perf_counter() - t0
            io = _io_since(io0)
            rows.append(
                {
                    "seconds": round(seconds, 3),
                    "tree_seconds": round(summary.seconds.get("tree", 0.0), 3),
                    "candidate_read_seconds": round(timers.get("candidate_reads", 0.0), 3),
                    "candidate_rows_read": read_rows[0],
                    "scored_exactly": list(scored) if new_code else None,
                    "prefilter_seconds": round(timers.get("prefilter", 0.0), 4),
                    "prune_seconds": round(timers.get("prune", 0.0), 3),
                    "apply_seconds": round(timers.get("apply", 0.0), 3),
                    "rehomed": int(summary.tree.get("rehomed", 0)),
                    "chunks": int(summary.chunks_removed),
                    "stages": {k: round(v, 3) for k, v in summary.seconds.items()},
                    **io,
                }
            )
            if new_code:  # the same removal on the exact path: the very same tree
                exact = Index.from_data(base.data.replace(inner_norms=None), embedder=emb)
                exact.remove([doc])
                rows[-1]["same_as_exact"] = bool(
                    np.array_equal(exact.data.tree.parent, ix.data.tree.parent)
                    and np.array_equal(exact.data.tree.layer, ix.data.tree.layer)
                )
                del exact
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            del ix, summary
        adds = []
        for k in range(n_adds):  # one document each, after the removals (chained)
            text = " ".join(
                chained.data.chunks[(k * 7919) % chained.data.n_leaves].text for _ in range(2)
            )
            timers.clear()
            io0 = _io_mib()
            t0 = time.perf_counter()
            summary = chained.add([f"{text} Addedmarker{k}."], texts=True)
            seconds = time.perf_counter() - t0
            adds.append(
                {
                    "seconds": round(seconds, 3),
                    "apply_seconds": round(timers.get("apply", 0.0), 3),
                    "chunks": int(summary.chunks_added),
                    "stages": {k: round(v, 3) for k, v in summary.seconds.items()},
                    **_io_since(io0),
                }
            )
            print(json.dumps(adds[-1]), file=sys.stderr, flush=True)
        del chained
        out["removals"] = rows
        out["adds"] = adds
        out["summary"] = _summary(rows, out)
        if adds:
            out["summary"]["add_seconds_median"] = round(
                float(np.median([a["seconds"] for a in adds])), 3
            )
            out["summary"]["add_apply_seconds_median"] = round(
                float(np.median([a["apply_seconds"] for a in adds])), 3
            )
        saves = []
        ix = Index.from_data(base.data, embedder=emb)
        if options["saves"] and base.data.origin is None:  # (in-memory norms: save as loaded)
            ix.save(folder)
        for doc in chosen[: options["saves"]]:
            summary = ix.remove([doc])
            t0 = time.perf_counter()
            ix.save(folder)
            seconds = time.perf_counter() - t0
            generation = int(ix.data.origin.generation) if ix.data.origin else -1
            total, norms = _written_bytes(folder, generation)
            saves.append(
                {
                    "save_seconds": round(seconds, 3),
                    "rehomed": int(summary.tree.get("rehomed", 0)),
                    "bytes_written": total,
                    "inner_norms_bytes": norms,
                }
            )
            print(json.dumps(saves[-1]), file=sys.stderr, flush=True)
        out["saves"] = saves
        if analyse:
            out["layer1_vectors"] = _layer1_analysis(base)
    out["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return out


def _summary(rows: list[dict[str, Any]], out: dict[str, Any]) -> dict[str, Any]:
    def med(key: str, subset: list[dict[str, Any]]) -> float | None:
        vals = [r[key] for r in subset]
        return round(float(np.median(vals)), 3) if vals else None

    yes = [r for r in rows if r["rehomed"]]
    no = [r for r in rows if not r["rehomed"]]
    sec = [r["seconds"] for r in rows]
    scored = [s for r in yes for s in (r["scored_exactly"] or [])]
    return {
        "removals": len(rows),
        "with_rehome": len(yes),
        "seconds_median": round(float(np.median(sec)), 3) if sec else None,
        "seconds_max": round(max(sec), 3) if sec else None,
        "seconds_median_with_rehome": med("seconds", yes),
        "seconds_median_without": med("seconds", no),
        "candidate_read_seconds_median_with_rehome": med("candidate_read_seconds", yes),
        "candidate_rows_read_median_with_rehome": med("candidate_rows_read", yes),
        "scored_exactly_max": max(scored) if scored else None,
        "prefilter_seconds_median_with_rehome": med("prefilter_seconds", yes),
        "apply_seconds_median": med("apply_seconds", rows),
        "seconds_total": round(sum(sec), 3),
        "all_same_as_exact": all(r.get("same_as_exact", True) for r in rows),
        "first_seconds": rows[0]["seconds"] if rows else None,
        "first_rss_file_mib": rows[0]["rss_file_mib"] if rows else None,
        "load_seconds": out["load_seconds"],
        "load_rss_file_mib": out["load_io"]["rss_file_mib"],
        "stage_medians": {
            k: round(float(np.median([r["stages"].get(k, 0.0) for r in rows])), 3)
            for k in sorted({k for r in rows for k in r["stages"]})
        },
    }


def _layer1_analysis(index: Any) -> dict[str, Any]:
    """Stored layer-1 routing vectors against the normalised float64 leaf sums."""
    data = index.data
    tree = data.tree
    n = tree.n_leaves
    nodes = np.flatnonzero(tree.layer == 1)
    rows = data.vector_rows()
    leaves = np.asarray(rows[:n], dtype=np.float64)
    member = tree.leaf_membership[nodes]
    sums = np.asarray(member @ leaves)
    norms = np.linalg.norm(sums, axis=1)
    stored = np.asarray(rows[nodes], dtype=np.float64)
    err = np.linalg.norm(stored - sums / norms[:, None], axis=1)
    drift = data.abstract_drift
    waiting = 0 if drift is None else int(np.count_nonzero(np.asarray(drift)[nodes - n]))
    counts = tree.leaf_counts[nodes]
    return {
        "nodes": int(nodes.size),
        "waiting": waiting,
        "unit_error_max": float(err.max()),
        "unit_error_p99": float(np.percentile(err, 99)),
        "norm_per_leaf_min": round(float((norms / counts).min()), 4),
        "leaves_max": int(counts.max()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--index", type=Path, required=True)
    p.add_argument("--src", type=Path, action="append", default=None)
    p.add_argument("--docs", type=int, default=10)
    p.add_argument("--pick", choices=["every", "rehome", "mixed"], default="every")
    p.add_argument("--norms", choices=["memory", "compact"], default="memory")
    p.add_argument("--saves", type=int, default=0)
    p.add_argument("--out", default="removal_rehome.json")
    p.add_argument("--no-analysis", action="store_true", help="skip the layer-1 vector check")
    p.add_argument("--chain", action="store_true", help="each removal from the previous one's")
    p.add_argument("--adds", type=int, default=0, help="then add this many documents, one each")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        options = {
            "pick": args.pick,
            "norms": args.norms,
            "saves": args.saves,
            "chain": args.chain,
            "adds": args.adds,
        }
        print(json.dumps(worker(args.index, args.docs, not args.no_analysis, options)))
        return
    if not (args.index / "manifest.json").exists():
        p.error(f"--index {args.index}: no saved index there (no manifest.json)")
    result: dict[str, Any] = {"runs": []}
    from _common import src_worker

    for src in args.src or [HERE.parent / "src"]:
        extra = ["--no-analysis"] if args.no_analysis else []
        extra += ["--pick", args.pick, "--norms", args.norms, "--saves", str(args.saves)]
        extra += ["--chain"] if args.chain else []
        extra += ["--adds", str(args.adds)] if args.adds else []
        row = src_worker(
            __file__, src, ["--index", str(args.index.resolve()), "--docs", str(args.docs), *extra]
        )
        print(json.dumps({"src": row["src"], **row["summary"]}), flush=True)
        if "layer1_vectors" in row:
            print(json.dumps(row["layer1_vectors"]), flush=True)
        result["runs"].append(row)
    out = HERE / "results" / args.out
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.name}")


if __name__ == "__main__":
    main()
