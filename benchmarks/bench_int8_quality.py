"""What int8 quantisation of the ONNX MiniLM costs in retrieval quality on 2WikiMultihopQA.

All 6,119 passages and 1,000 questions, embedded twice: by the default torch MiniLM (vectors
read from the benchmark embedding cache) and by ``minilm-onnx-int8`` (embedded here once and kept
in their own cache file, ``--int8-cache``, outside the repository: the int8 vectors have their
own embedder id, so they can never be mixed with the torch ones). For each, an index over the
same passages (exact tree, default config) and Recall@2/5 of psi (the default search: tree +
BM25, RRF), the tree alone and dense flat (exact cosine over all leaves), plus the cosine
agreement of the int8 vectors with the torch ones (passages and questions).

Usage: nice -n 10 python benchmarks/bench_int8_quality.py [--int8-cache PATH] [--threads 2]
       [--torch-cache PATH] [--question-cache PATH]; writes benchmarks/results/int8_quality.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MINILM_CACHE,
    OUT,
    QUESTION_CACHE,
    CachedVectors,
    machine_info,
    passage_text,
    question_vectors,
    search_recall,
    two_wiki_index,
    two_wiki_queries,
    write_result,
)

from psirag import SearchConfig
from psirag.eval.embedcache import CachingEmbedder

SLICE = 500
"""Passages per embed call: the int8 cache file is saved after each, so a stopped run resumes."""


def int8_embedder(cache: Path, threads: int) -> CachingEmbedder:
    """The int8 ONNX MiniLM behind its own cache file."""
    from psirag.embed.base import minilm_path
    from psirag.embed.onnx import OnnxEmbedder

    inner = OnnxEmbedder(
        minilm_path(),
        precision="int8",
        threads=threads,
        name="all-MiniLM-L6-v2",
        spec="minilm-onnx-int8",
    )
    return CachingEmbedder(inner, cache)


def cosine_stats(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Row-wise cosine of two sets of unit vectors: min, 1st percentile, mean."""
    cos = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {
        "min": round(float(cos.min()), 6),
        "p1": round(float(np.percentile(cos, 1)), 6),
        "mean": round(float(cos.mean()), 6),
        "max_abs_diff": round(float(np.abs(a - b).max()), 5),
    }


def recalls(index: Any, queries: list[str], qvecs: np.ndarray, golds: list[set[str]]) -> dict:
    """psi (the default search), tree alone and dense flat, each Recall@2/5 in %."""
    configs = {
        "psi": SearchConfig(),
        "tree_alone": SearchConfig(use_bm25=False),
        "dense_flat": SearchConfig(use_tree=False, use_bm25=False, use_dense=True),
    }
    return {name: search_recall(index, queries, qvecs, golds, c) for name, c in configs.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--int8-cache", type=Path, default=OUT / "cache" / "embeddings-minilm-onnx-int8.npz"
    )
    ap.add_argument("--torch-cache", type=Path, default=MINILM_CACHE)
    ap.add_argument("--question-cache", type=Path, default=QUESTION_CACHE)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    corpus, queries, golds = two_wiki_queries()
    texts = [passage_text(r) for r in corpus]
    torch_vecs = CachedVectors(args.torch_cache)
    int8 = int8_embedder(args.int8_cache, args.threads)
    t0, misses0 = time.perf_counter(), int8.misses
    for lo in range(0, len(texts), SLICE):
        int8.embed(texts[lo : lo + SLICE])
        print(f"int8 passages {min(lo + SLICE, len(texts))}/{len(texts)}", flush=True)
    int8_q = int8.embed(queries)
    embed_seconds = time.perf_counter() - t0
    fresh = int8.misses - misses0
    torch_q = question_vectors(queries, args.question_cache)
    agreement = {
        "passages": cosine_stats(int8.embed(texts), torch_vecs.embed(texts)),
        "questions": cosine_stats(int8_q, torch_q),
    }
    print(agreement, flush=True)
    rows = []
    for name, emb, qvecs in (
        ("minilm-torch", torch_vecs, torch_q),
        ("minilm-onnx-int8", int8, int8_q),
    ):
        index, _ = two_wiki_index(corpus, emb, tree_mode="exact")
        rows.append(
            {"embedder": name, "embedder_id": emb.id, **recalls(index, queries, qvecs, golds)}
        )
        print(rows[-1], flush=True)
    base, q8 = rows
    delta = {
        f"{m}_{k}": round(q8[m][k] - base[m][k], 2)
        for m in ("psi", "tree_alone", "dense_flat")
        for k in ("recall@2", "recall@5")
    }
    result = {
        "machine": machine_info(),
        "n_passages": len(texts),
        "n_questions": len(queries),
        "int8_texts_embedded_this_run": fresh,
        "int8_embed_seconds_this_run": round(embed_seconds, 1),
        "cosine_int8_vs_torch": agreement,
        "rows": rows,
        "int8_minus_torch": delta,
    }
    print(f"wrote {write_result('int8_quality.json', result)}")


if __name__ == "__main__":
    main()
