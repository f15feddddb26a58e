"""MiniLM embedding speed, torch against ONNX Runtime (fp32 and int8), side by side.

A fixed sample of 2WikiMultihopQA passages (the first ``--sample`` of the corpus, title + text
as indexed) is cut into slices of ``--slice`` texts; every slice is embedded by each backend in
turn (the order rotating), ``--rounds`` times over, so that load from other processes hits all
of them alike. Speed-up: total torch seconds over total backend seconds (also the median of the
per-slice ratios). Both run on ``--threads`` threads (torch.set_num_threads / ONNX
intra-op threads). Vector agreement with torch: cosine (min and mean) and max abs difference.
With ``--quality``, Recall@5 on all 2Wiki questions for an index built with each backend's
vectors (exact tree, psi and tree-alone), to measure what int8 costs.

Usage: python benchmarks/bench_embed_onnx.py [--sample 1000] [--threads 2] [--rounds 3]
       [--batch-sizes 32] [--quality] [--out embed_onnx.json]; writes
       benchmarks/results/embed_onnx.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import (
    CachedVectors,
    dataset,
    machine_info,
    passage_text,
    search_recall,
    two_wiki_index,
    two_wiki_queries,
    write_result,
)

from psirag import SearchConfig
from psirag.embed import load_embedder

SPECS = ("minilm-torch", "minilm-onnx", "minilm-onnx-int8")
SPINNING = "minilm-onnx-spinning"
"""fp32 with ONNX Runtime's spinning idle threads, for comparison (a label, not a spec)."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slice", type=int, default=50, help="texts per interleaved slice")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32])
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--no-int8", action="store_true", help="fp32 against torch only (faster)")
    ap.add_argument(
        "--spinning-too",
        action="store_true",
        help="also fp32 with ONNX Runtime's spinning intra-op threads (its default; psirag's "
        "threads sleep)",
    )
    ap.add_argument("--out", default="embed_onnx.json", help="results file in benchmarks/results")
    args = ap.parse_args()
    if args.quality and args.no_int8:
        ap.error("--quality compares int8 vectors: drop --no-int8")

    import torch

    torch.set_num_threads(args.threads)
    corpus, _ = dataset("2wikimultihopqa")
    texts = [passage_text(r) for r in corpus[: args.sample]]
    runs: list[tuple[str, int]] = [("minilm-torch", 16)]
    specs = SPECS[1:2] if args.no_int8 else SPECS[1:]
    runs += [(s, b) for s in specs for b in args.batch_sizes]
    if args.spinning_too:
        runs += [(SPINNING, b) for b in args.batch_sizes]
    embedders: dict[tuple[str, int], Any] = {}
    for spec, batch in runs:
        if spec == "minilm-torch":
            embedders[(spec, batch)] = load_embedder(spec, batch_size=batch)
        else:
            from psirag.embed.base import minilm_path
            from psirag.embed.onnx import OnnxEmbedder

            embedders[(spec, batch)] = OnnxEmbedder(
                minilm_path(),
                batch_size=batch,
                precision="int8" if spec.endswith("int8") else "fp32",
                threads=args.threads,
                spinning=spec == SPINNING,
                name="all-MiniLM-L6-v2",
                spec=spec,
            )
        embedders[(spec, batch)].embed(texts[:32])  # warm-up
    # Interleaved in small slices (each slice embedded by every backend in turn, the order
    # rotating), so that a burst of load from other processes hits all backends alike.
    seconds: dict[tuple[str, int], list[float]] = {r: [0.0] * args.rounds for r in runs}
    per_slice: dict[tuple[str, int], list[float]] = {r: [] for r in runs}
    parts: dict[tuple[str, int], list[np.ndarray]] = {r: [] for r in runs}
    cpu: dict[tuple[str, int], float] = dict.fromkeys(runs, 0.0)
    """Process CPU seconds during each backend's calls (all its threads; others' idle threads
    sleep or spin only briefly), over all rounds: less sensitive to other jobs than wall time."""
    step = args.slice
    for rnd in range(args.rounds):
        for lo in range(0, len(texts), step):
            chunk = texts[lo : lo + step]
            turn = (lo // step + rnd) % len(runs)
            for run in runs[turn:] + runs[:turn]:
                t0, c0 = time.perf_counter(), time.process_time()
                got = embedders[run].embed(chunk)
                dt = time.perf_counter() - t0
                cpu[run] += time.process_time() - c0
                seconds[run][rnd] += dt
                if rnd == 0:
                    parts[run].append(got)
                per_slice[run].append(dt)
        print({r: round(seconds[r][rnd], 1) for r in runs}, flush=True)
    vectors = {r: np.concatenate(parts[r]) for r in runs}
    ref = vectors[runs[0]]
    torch_best = min(seconds[runs[0]])
    rows = []
    for run in runs:
        v = vectors[run]
        cos = (v * ref).sum(axis=1)
        best = min(seconds[run])
        ratios = np.asarray(per_slice[runs[0]]) / np.asarray(per_slice[run])
        rows.append(
            {
                "backend": run[0],
                "batch_size": run[1],
                "embedder_id": embedders[run].id,
                "seconds_best": round(best, 2),
                "seconds_all": [round(x, 2) for x in seconds[run]],
                "chunks_per_second": round(len(texts) / best, 1),
                "cpu_seconds_all_rounds": round(cpu[run], 2),
                "speedup_vs_torch": round(sum(seconds[runs[0]]) / sum(seconds[run]), 2),
                "speedup_vs_torch_best_rounds": round(torch_best / best, 2),
                "speedup_vs_torch_median_slice": round(float(np.median(ratios)), 2),
                "cosine_vs_torch_min": round(float(cos.min()), 7),
                "cosine_vs_torch_mean": round(float(cos.mean()), 7),
                "max_abs_diff_vs_torch": float(np.abs(v - ref).max()),
            }
        )
        print(rows[-1], flush=True)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "sample": f"first {len(texts)} 2WikiMultihopQA passages (title + text)",
        "threads": args.threads,
        "rounds": args.rounds,
        "slice": args.slice,
        "rows": rows,
    }
    if args.quality:
        result["quality"] = quality(embedders, runs)
    print(f"wrote {write_result(args.out, result)}")


def quality(embedders: dict[tuple[str, int], Any], runs: list[tuple[str, int]]) -> list[dict]:
    """Recall@5 on all 2Wiki questions: torch vectors (the embedding cache) against int8 ones.

    fp32 ONNX is left out: its vectors equal torch's to ~1e-7 (the speed rows), so its recall is
    torch's.
    """
    corpus, queries, golds = two_wiki_queries()
    out = []
    int8 = embedders[next(r for r in runs if r[0] == "minilm-onnx-int8")]
    pairs = (("minilm-torch (cached vectors)", CachedVectors()), ("minilm-onnx-int8", int8))
    for name, emb in pairs:
        t0 = time.perf_counter()
        index, _ = two_wiki_index(corpus, emb, tree_mode="exact")
        qvecs = emb.embed(queries)
        row = {
            "backend": name,
            "index_and_query_embedding_seconds": round(time.perf_counter() - t0, 1),
            "psi": search_recall(index, queries, qvecs, golds, SearchConfig()),
            "tree_alone": search_recall(index, queries, qvecs, golds, SearchConfig(use_bm25=False)),
        }
        out.append(row)
        print(row, flush=True)
    return out


if __name__ == "__main__":
    main()
