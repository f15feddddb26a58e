"""MiniLM against mpnet (all-mpnet-base-v2) on 2Wiki and HotpotQA-dev200, no LLM: Recall@2/5
of BM25, dense flat, hybrid, psi default and psi tree per embedder, mpnet - MiniLM paired
bootstrap intervals, embedding chunks/s and the index build time.

Two steps, so that the slow one can run alone in the background:

- ``--build SPEC`` builds each set's index with SPEC (``minilm`` or ``mpnet``) through an
  embedding cache (``bench-out/cache/embeddings-SPEC.npz``; MiniLM's is the shared
  ``embeddings-minilm.npz``), saves it under ``bench-out/index-SPEC-NAME`` and records the
  build's stage timings (from the index's own stats) in ``bench-out/cache/build-SPEC.json``.
  The questions are embedded into the same cache. With a warm cache the "embedding" stage is a
  lookup; the timings of a cold build are kept (a warm rebuild never overwrites them).
- ``--throughput N`` embeds the same N passages of 2Wiki with each embedder, interleaved
  (a warm-up batch first), and records chunks/s at the embedders' default batch size.
- The default step reads those indexes and caches and writes
  ``benchmarks/results/embedders.json`` and ``section_embedders.md``.

Recall@k is by passage identity (title + text), as bench_retrieval_variants.py scores it.
mpnet needs ``scripts/get_embedder.sh mpnet`` and ``psirag[torch]``.

Usage: python benchmarks/bench_embedders.py --build mpnet
       python benchmarks/bench_embedders.py --throughput 256
       python benchmarks/bench_embedders.py [--bootstrap 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import DATA, OUT, RESULTS, dataset, machine_info, passage_text

from psirag import Index, IndexConfig, SearchConfig
from psirag.config import PROFILES
from psirag.eval.embedcache import CachingEmbedder
from psirag.eval.metrics import paired_bootstrap_ci, passage_key, recall_at_k

DATASETS = ("2wikimultihopqa", "hotpotqa-dev200")
LABELS = {"2wikimultihopqa": "2Wiki (1,000 q)", "hotpotqa-dev200": "HotpotQA-dev200 (200 q)"}
SPECS = ("minilm", "mpnet")
GOLD = "supporting_passage_ids"
ROWS: dict[str, SearchConfig] = {
    "bm25": SearchConfig(use_tree=False),
    "dense flat": SearchConfig(use_tree=False, use_bm25=False, use_dense=True),
    "hybrid": SearchConfig(use_tree=False, use_bm25=True, use_dense=True, merge_duplicates=False),
    "psi default": PROFILES["default"],
    "psi tree": PROFILES["tree"],
}


def cache_path(spec: str) -> Path:
    return OUT / "cache" / f"embeddings-{spec}.npz"


def index_dir(spec: str, name: str) -> Path:
    return OUT / f"index-{spec}-{name}"


def timings_path(spec: str) -> Path:
    return OUT / "cache" / f"build-{spec}.json"


def cached_embedder(spec: str) -> Any:
    """``spec`` through its cache file; a read-only view of the file when it holds every text
    already (no model load: MiniLM's shared cache covers both sets and their questions)."""
    from _common import CachedVectors

    from psirag.embed import load_embedder

    (OUT / "cache").mkdir(parents=True, exist_ok=True)
    if spec == "minilm" and cache_path(spec).exists():
        return CachedVectors(cache_path(spec), spec=spec)
    return CachingEmbedder(load_embedder(spec), cache_path(spec))


def build(spec: str, sets: tuple[str, ...] = DATASETS) -> None:
    """Build (or load) each named set's index with ``spec`` and embed its questions, keeping
    the stage timings of builds that embedded for real."""
    embedder = cached_embedder(spec)
    path = timings_path(spec)
    timings: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    for name in sorted(sets, key=lambda n: n != "hotpotqa-dev200"):  # the small set first
        target = index_dir(spec, name)
        if not target.exists():
            misses = getattr(embedder, "misses", 0)
            t0 = time.perf_counter()
            prefill(embedder, name, spec)
            prefill_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            index = Index.build([DATA / name / "corpus.json"], IndexConfig(), embedder=embedder)
            total = time.perf_counter() - t0 + prefill_s
            index.save(target)
            cold = getattr(embedder, "misses", 0) - misses
            if cold or name not in timings:
                timings[name] = {
                    "seconds_total": round(total, 2),
                    "seconds_by_stage": {
                        **{k: round(v, 2) for k, v in index.data.stats.seconds.items()},
                        "embedding": round(prefill_s + index.data.stats.seconds["embedding"], 2),
                    },
                    "chunks": len(index.data.chunks),
                    "embedded_cold": cold,
                    "batch_size": getattr(getattr(embedder, "inner", None), "batch_size", None),
                    "torch_threads": torch_threads(),
                    "machine": machine_info(),
                }
                path.write_text(json.dumps(timings, indent=2))
            print(f"{spec} {name}: built in {total:.1f} s ({cold} texts embedded)", flush=True)
        _, questions = dataset(name)
        embedder.embed([q["question"] for q in questions])
        print(f"{spec} {name}: {len(questions)} questions embedded", flush=True)


def progress_path(spec: str) -> Path:
    return OUT / "cache" / f"progress-{spec}.json"


def prefill(embedder: Any, name: str, spec: str, step: int = 512) -> None:
    """Embed the set's chunks into the cache ``step`` at a time, so that a killed slow run
    keeps what it did (the cache file is saved after each call); the build then reads them.

    After each step ``progress-SPEC.json`` says how far the cache goes and how fast this run
    embeds (only steps that embedded count), so a run stopped at a deadline still has a
    measured rate for the table."""
    if not isinstance(embedder, CachingEmbedder):
        return
    from psirag.pipeline import chunk_documents, load_corpus

    chunks = chunk_documents(load_corpus([DATA / name / "corpus.json"]), IndexConfig())
    texts = [c.text for c in chunks]
    path = progress_path(spec)
    progress: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    record = progress.setdefault(name, {"chunks": len(texts), "runs": []})
    run: dict[str, Any] = {"embedded": 0, "seconds": 0.0, "machine": machine_info()}
    record["runs"].append(run)
    for start in range(0, len(texts), step):
        misses = embedder.misses
        t0 = time.perf_counter()
        embedder.embed(texts[start : start + step])
        done = min(start + step, len(texts))
        if embedder.misses > misses:
            run["embedded"] += embedder.misses - misses
            run["seconds"] = round(run["seconds"] + time.perf_counter() - t0, 3)
            run["chunks_per_s"] = round(run["embedded"] / max(run["seconds"], 1e-9), 3)
            now = round(os.getloadavg()[0], 2)
            low, high = run.get("loadavg_1m_range", [now, now])
            run["loadavg_1m_range"] = [min(low, now), max(high, now)]
        record["cached"] = done
        path.write_text(json.dumps(progress, indent=2))
        print(f"{name}: {done}/{len(texts)} embedded", flush=True)


def torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


def throughput(n: int, repeats: int = 2) -> None:
    """chunks/s of each embedder on the same 2Wiki passages, interleaved against load drift."""
    from psirag.embed import load_embedder

    corpus, _ = dataset("2wikimultihopqa")
    texts = [passage_text(r) for r in corpus[:n]]
    embedders = {spec: load_embedder(spec) for spec in SPECS}
    for e in embedders.values():
        e.embed(texts[:16])  # warm-up
    runs: dict[str, list[float]] = {spec: [] for spec in SPECS}
    for _ in range(repeats):
        for spec, e in embedders.items():
            t0 = time.perf_counter()
            e.embed(texts)
            runs[spec].append(n / (time.perf_counter() - t0))
    result = {
        spec: {
            "chunks_per_s": round(max(r), 2),
            "runs": [round(x, 2) for x in r],
            "batch_size": getattr(embedders[spec], "batch_size", None),
            "backend": type(embedders[spec]).__name__,
            "dim": embedders[spec].dim,
        }
        for spec, r in runs.items()
    }
    out = {
        "passages": n,
        "repeats": repeats,
        "torch_threads": torch_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "embedders": result,
        "machine": machine_info(),
    }
    (OUT / "cache").mkdir(parents=True, exist_ok=True)
    (OUT / "cache" / "throughput-embedders.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out["embedders"], indent=2))


def question_vectors(spec: str, questions: list[str]) -> np.ndarray:
    """The questions' vectors from ``spec``'s cache (``--build SPEC`` put them there)."""
    from _common import CachedVectors

    try:
        return CachedVectors(cache_path(spec), spec=spec).embed(questions)
    except KeyError as exc:
        raise SystemExit(f"{exc}: run --build {spec} first") from exc


def load_index(spec: str, name: str) -> Index:
    folder = index_dir(spec, name)
    if not folder.exists():
        raise SystemExit(f"{folder} not found: run benchmarks/bench_embedders.py --build {spec}")
    return Index.load(folder)


def scores_for(spec: str, name: str) -> dict[str, dict[str, list[float]]]:
    corpus, questions = dataset(name)
    retriever = load_index(spec, name).retriever
    vectors = question_vectors(spec, [q["question"] for q in questions])
    texts = [c.text for c in retriever.data.chunks]
    golds = [
        {passage_key(corpus[i].get("title"), corpus[i]["text"]) for i in q[GOLD]} for q in questions
    ]
    out: dict[str, dict[str, list[float]]] = {}
    for row, config in ROWS.items():
        r2: list[float] = []
        r5: list[float] = []
        for q, v, gold in zip(questions, vectors, golds, strict=True):
            got = [texts[i] for i, _ in retriever.ranked(v, q["question"], config=config)]
            r2.append(recall_at_k(got, gold, 2))
            r5.append(recall_at_k(got, gold, 5))
        out[row] = {"recall@2": r2, "recall@5": r5}
    return out


def table(n_boot: int) -> None:
    """Score every set whose indexes exist; a set without them keeps its rows (and build
    timings) from the earlier embedders.json, marked with that run's date, so that one set can
    be rebuilt without redoing the other."""
    earlier_file = RESULTS / "embedders.json"
    earlier: dict[str, Any] = json.loads(earlier_file.read_text()) if earlier_file.exists() else {}
    sets: dict[str, Any] = {}
    not_run: list[str] = []
    for name in DATASETS:
        if not all(index_dir(spec, name).exists() for spec in SPECS):
            if name in earlier.get("sets", {}):
                kept = dict(earlier["sets"][name])
                kept.setdefault("run_on", earlier.get("machine", {}).get("date"))
                sets[name] = kept
            else:
                not_run.append(name)
            continue
        by_spec = {spec: scores_for(spec, name) for spec in SPECS}
        recall = {
            spec: {
                row: {m: round(100 * float(np.mean(v)), 2) for m, v in by.items()}
                for row, by in rows.items()
            }
            for spec, rows in by_spec.items()
        }
        diffs: dict[str, Any] = {}
        for row in ROWS:
            for m in ("recall@2", "recall@5"):
                ci = paired_bootstrap_ci(
                    np.asarray(by_spec["mpnet"][row][m]) * 100,
                    np.asarray(by_spec["minilm"][row][m]) * 100,
                    n=n_boot,
                )
                diffs.setdefault(row, {})[m] = {
                    k: round(v, 2) if isinstance(v, float) else v for k, v in ci.to_dict().items()
                }
        n_q = len(by_spec["minilm"]["bm25"]["recall@5"])
        sets[name] = {"questions": n_q, "recall": recall, "mpnet_minus_minilm": diffs}
    builds = {
        spec: {
            **earlier.get("builds", {}).get(spec, {}),
            **(json.loads(timings_path(spec).read_text()) if timings_path(spec).exists() else {}),
        }
        for spec in SPECS
    }
    speed_file = OUT / "cache" / "throughput-embedders.json"
    speed = (
        json.loads(speed_file.read_text()) if speed_file.exists() else earlier.get("throughput", {})
    )
    progress = {
        spec: json.loads(progress_path(spec).read_text())
        for spec in SPECS
        if progress_path(spec).exists()
    }
    result = {
        "sets": sets,
        "not_run": not_run,
        "progress": progress,
        "builds": builds,
        "throughput": speed,
        "bootstrap": n_boot,
        "machine": machine_info(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embedders.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "section_embedders.md").write_text(section(result))
    print(section(result))


def section(r: dict[str, Any]) -> str:
    lines = [
        "## Embedders: MiniLM against mpnet (no LLM)",
        "",
        "`python benchmarks/bench_embedders.py --build minilm`, `--build mpnet`, `--throughput "
        "64`, then `python benchmarks/bench_embedders.py`. all-MiniLM-L6-v2 (384-d, `minilm`) "
        "against all-mpnet-base-v2 (768-d, `mpnet`: `scripts/get_embedder.sh mpnet`, run by "
        "sentence-transformers under psirag[torch]; no ONNX path for it yet). Same corpus, same "
        "default index config, each set's index built with each embedder; Recall@k in %, by "
        "passage identity. Nothing was tuned here. mpnet - MiniLM: paired bootstrap 95% interval "
        f"over the questions ({r['bootstrap']:,} resamples).",
        "",
        "| set | row | MiniLM R@2 | mpnet R@2 | MiniLM R@5 | mpnet R@5 "
        "| mpnet - MiniLM R@5 [95%] |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in r["sets"].items():
        for row in ROWS:
            a, b = s["recall"]["minilm"][row], s["recall"]["mpnet"][row]
            d = s["mpnet_minus_minilm"][row]["recall@5"]
            lines.append(
                f"| {LABELS[name]} | {row} | {a['recall@2']:.2f} | {b['recall@2']:.2f} | "
                f"{a['recall@5']:.2f} | {b['recall@5']:.2f} | "
                f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] |"
            )
    for name in r.get("not_run", []):
        lines.append(f"| {LABELS[name]} | {not_run_note(r, name)} ||||||")
    carried = [
        f"{LABELS[n]} from the run of {s['run_on']}"
        for n, s in r["sets"].items()
        if s.get("run_on")
    ]
    if carried:
        lines += [
            "",
            "Rows kept from an earlier run (its indexes were not rebuilt): "
            + "; ".join(carried)
            + ".",
        ]
    lines += ["", reading(r)]
    speed = r["throughput"].get("embedders", {})
    lines += [
        "",
        "Speed. chunks/s: the same 2Wiki passages through each embedder, interleaved, best of the "
        "runs (`--throughput`); index build: `Index.build` of the set with an empty embedding "
        "cache for that embedder (embedding included; a build whose vectors came from a cache "
        "shows its embedding stage as a lookup and is marked warm). 2 cores shared with other "
        "jobs (load average in the JSON), so absolute seconds are inflated.",
        "",
        "| embedder | dim | batch | torch threads | chunks/s | set | chunks | build s | "
        "of which embedding s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for spec in SPECS:
        sp = speed.get(spec, {})
        for name in DATASETS:
            b = r["builds"].get(spec, {}).get(name)
            if not b:
                continue
            cold = b["embedded_cold"]
            warm = (
                ""
                if cold >= b["chunks"]
                else " (warm)"
                if not cold
                else (f" (resumed: {cold:,} of {b['chunks']:,} embedded in this build)")
            )
            lines.append(
                f"| {spec} | {sp.get('dim', '-')} | {sp.get('batch_size', b['batch_size'])} | "
                f"{b['torch_threads']} | {sp.get('chunks_per_s', '-')} | {LABELS[name]} | "
                f"{b['chunks']:,} | {b['seconds_total']:.0f}{warm} | "
                f"{b['seconds_by_stage']['embedding']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def not_run_note(r: dict[str, Any], name: str) -> str:
    """Why a set has no rows: no mpnet index, and how far its embedding got if it started."""
    rec = r.get("progress", {}).get("mpnet", {}).get(name)
    if not rec:
        return "not run: no mpnet index yet (`--build mpnet`)"
    rates = [
        f"{x['chunks_per_s']} chunks/s over {x['embedded']:,} chunks at load "
        f"{x['loadavg_1m_range'][0]}-{x['loadavg_1m_range'][1]}"
        for x in rec["runs"]
        if x.get("embedded")
    ]
    return (
        f"not finished: mpnet has embedded {rec['cached']:,} of its {rec['chunks']:,} passages "
        f"(runs: {'; '.join(rates) or 'none embedded'}); Recall needs every passage"
    )


def reading(r: dict[str, Any]) -> str:
    """Which mpnet - MiniLM Recall@5 intervals exclude 0, from the numbers."""
    clear = [
        f"{row} on {LABELS[name]} ({d['diff']:+.2f})"
        for name, s in r["sets"].items()
        for row, by in s["mpnet_minus_minilm"].items()
        if (d := by["recall@5"])["low"] > 0 or d["high"] < 0
    ]
    sets = ", ".join(LABELS[n] for n in r["sets"]) or "no set"
    verdict = (
        "the intervals that exclude 0: " + "; ".join(clear)
        if clear
        else "every mpnet - MiniLM Recall@5 interval contains 0"
    )
    return (
        f"**Reading.** On {sets}, {verdict}. BM25 does not use the embedder (equal by "
        "construction). mpnet embeds far slower on this CPU (chunks/s below), so a stronger "
        "embedder is not free here."
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", choices=SPECS, help="build the indexes and caches of one embedder")
    ap.add_argument("--throughput", type=int, metavar="N", help="chunks/s on N 2Wiki passages")
    ap.add_argument("--sets", nargs="+", choices=DATASETS, default=list(DATASETS))
    ap.add_argument("--bootstrap", type=int, default=10000)
    args = ap.parse_args()
    if args.build:
        build(args.build, tuple(args.sets))
    elif args.throughput:
        throughput(args.throughput)
    else:
        table(args.bootstrap)


if __name__ == "__main__":
    main()
