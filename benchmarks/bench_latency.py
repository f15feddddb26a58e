"""Query latency, side by side in one run: psi (tree + BM25, RRF) vs dense flat vs tree vs BM25.

Two corpora:

(a) 2WikiMultihopQA: the 6,119 passages and the 1,000 questions, MiniLM vectors read from the
    benchmark embedding cache (no model is loaded; query embedding is not timed).
(b) Synthetic: ``--n`` (default 100,000) clustered random unit vectors of dimension 384, each
    with a text of pseudo-words drawn mostly from its cluster's own vocabulary (so BM25 has
    something to match). The exact tree builder needs an n x n float32 matrix (40 GB at 100k)
    and refuses; so by default (``--tree knn``) one tree is built in the knn mode (SPEC 4,
    k 32, O(n·k) memory). ``--tree forest`` instead cuts the corpus into spherical k-means
    buckets of about ``--bucket`` leaves and :func:`psirag.tree.build_forest` builds one exact
    tree per bucket. ``--tree bucketed`` builds one tree in the bucketed mode (SPEC 4, paper
    App. E.1: exact trees inside k-means buckets of at most ``--bucket`` leaves, merged on top;
    no O(n²) step, so it reaches 1M leaves). The :class:`psirag.Index` is then constructed
    around the tree from arrays
    (its constructor, not ``Index.build``, so no abstracts are written), and all four methods
    run through the same calls as on 2Wiki.

Every method is timed per query, in CPU time of the thread (what the search costs, without the
waits a shared machine adds), in CPU time of the whole process (``time.process_time``: any
helper thread included) and in wall time, with BLAS limited to one thread (so the thread's
CPU time is all of the work), garbage collection off, and
the method order rotating from block to block (50 queries), so machine load hits them
alike; a second pass interleaves the methods on every query (colder caches). Each pass runs
``--rounds`` times (default 3) and every query keeps its fastest round. Methods:

- psi: ``Index.search_vector`` with the default ``SearchConfig`` (tree beam 40 + BM25 top 10
  each, RRF, top 5 passages);
- tree: the same call with ``use_bm25=False``; bm25: with ``use_tree=False``;
- dense flat: ``psirag.retrieval.retriever.DenseFlat`` exact cosine over every leaf, top 5 passages.

Usage: python benchmarks/bench_latency.py [--n 100000] [--queries 1000]
       [--tree knn|forest|bucketed] [--bucket N] [--profile default|paper] [--skip-synthetic]
       [--skip-2wiki] [--out latency.json]
Writes benchmarks/results/latency.json (or ``--out``). The 1M-leaf run of BENCHMARKS.md:
``--n 1000000 --tree bucketed --queries 200 --rounds 2 --skip-2wiki --also-profile paper
--out latency_1m.json``.
"""

from __future__ import annotations

import argparse
import gc
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import (
    clustered_with_labels,
    dataset,
    latency_stats,
    machine_info,
    passage_text,
    peak_rss_mib,
    synthetic_texts,
    two_wiki_index,
    write_result,
)

from psirag import Index, IndexConfig, SearchConfig
from psirag.config import PROFILES
from psirag.eval.harness import single_thread_blas
from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.retriever import DenseFlat
from psirag.tree import build_forest, build_tree
from psirag.tree.bucket import DEFAULT_BUCKET_SIZE
from psirag.types import Chunk, Source

METHODS = ("psi", "dense flat", "tree", "bm25")
WARMUP = 20
BLOCK = 50


def method_calls(
    index: Index, dense: DenseFlat, config: SearchConfig, extra: str | None = None
) -> dict[str, Callable[[np.ndarray, str], list[Any]]]:
    """The four timed calls; each returns the top ``config.k`` passages. ``extra`` names a
    search profile whose psi and tree searches are timed beside them ("psi paper", ...)."""
    tree_cfg = config.with_(use_bm25=False)
    bm25_cfg = config.with_(use_tree=False)
    more: dict[str, Callable[[np.ndarray, str], list[Any]]] = {}
    if extra is not None:
        other = PROFILES[extra]
        other_tree = other.with_(use_bm25=False)
        more[f"psi {extra}"] = lambda v, q: index.search_vector(v, q, config=other)
        more[f"tree {extra}"] = lambda v, q: index.search_vector(v, q, config=other_tree)

    def dense_search(vec: np.ndarray, _q: str) -> list[Any]:
        leaves, scores = dense.ranked(vec, config.k)
        return [index.passage(int(i), float(s)) for i, s in zip(leaves, scores, strict=True)]

    return {
        "psi": lambda v, q: index.search_vector(v, q, config=config),
        "dense flat": dense_search,
        "tree": lambda v, q: index.search_vector(v, q, config=tree_cfg),
        "bm25": lambda v, q: index.search_vector(v, q, config=bm25_cfg),
        **more,
    }


Times = dict[str, dict[str, list[float]]]
"""Per method: ``cpu`` (thread), ``process_cpu`` and ``wall`` milliseconds per query."""


def time_methods(
    calls: dict[str, Callable[[np.ndarray, str], list[Any]]],
    vectors: np.ndarray,
    queries: list[str],
    block: int = BLOCK,
    rounds: int = 1,
) -> tuple[Times, dict[str, list[list[int]]]]:
    """Per-query CPU and wall milliseconds, and the returned leaves, of every method.

    CPU time is this thread's (``time.thread_time_ns``; BLAS runs in this thread): it leaves out
    the time the process waited while other jobs held the cores. Queries go in blocks of
    ``block``; each method answers a whole block before the next method starts (its caches stay
    warm), and the method order rotates from block to block so slow spells of the shared
    machine hit every method alike. ``block=1`` interleaves the methods on every query. With
    ``rounds`` > 1 everything is repeated and each query keeps its fastest round (CPU and wall
    separately), which filters out the moments another job took the core or its caches.
    """
    names = list(calls)
    n = len(queries)
    times: Times = {
        m: {"cpu": [np.inf] * n, "process_cpu": [np.inf] * n, "wall": [np.inf] * n} for m in names
    }
    got: dict[str, list[list[int]]] = {m: [[] for _ in range(n)] for m in names}
    for i in range(min(WARMUP, n)):
        for name in names:
            calls[name](vectors[i], queries[i])
    gc.collect()
    gc.disable()
    try:
        with single_thread_blas():
            for _ in range(rounds):
                for b, lo in enumerate(range(0, n, block)):
                    hi = min(lo + block, n)
                    r = b % len(names)
                    for name in names[r:] + names[:r]:
                        call, cpu, wall = calls[name], times[name]["cpu"], times[name]["wall"]
                        pcpu = times[name]["process_cpu"]
                        leaves = got[name]
                        for i in range(lo, hi):
                            p0 = time.process_time_ns()
                            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
                            out = call(vectors[i], queries[i])
                            w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                            p1 = time.process_time_ns()
                            cpu[i] = min(cpu[i], (c1 - c0) / 1e6)
                            pcpu[i] = min(pcpu[i], (p1 - p0) / 1e6)
                            wall[i] = min(wall[i], (w1 - w0) / 1e6)
                            leaves[i] = [p.leaf for p in out]
    finally:
        gc.enable()
    return times, got


def tree_vs_exact(
    index: Index, dense: DenseFlat, vectors: np.ndarray, beam: int, k: int = 10
) -> dict[str, float]:
    """Mean share (%) of the exact top-k leaves (by cosine) that tree search alone finds in its
    own top k, and the mean number of nodes it scores per query."""
    shares, scored = [], []
    for vec in vectors:
        exact = set(dense.ranked(vec, k)[0].tolist())
        hits = index.retriever.searcher.search(vec, k=k, beam=beam, collect_visited=True)
        shares.append(len(exact & set(hits.leaves.tolist())) / len(exact))
        scored.append(hits.visited.size)
    return {
        "tree_recall@10_of_exact_top10": round(100 * float(np.mean(shares)), 2),
        "tree_nodes_scored_mean": round(float(np.mean(scored)), 1),
    }


def measure(
    calls: dict[str, Callable[[np.ndarray, str], list[Any]]],
    vectors: np.ndarray,
    queries: list[str],
    rounds: int,
) -> tuple[dict[str, Any], dict[str, list[list[int]]]]:
    """Blocked timing (the headline figures) and per-query interleaved timing (cold caches),
    each as CPU and wall milliseconds; ratios to dense flat use CPU p50."""
    warm, got = time_methods(calls, vectors, queries, rounds=rounds)
    cold, _ = time_methods(calls, vectors, queries, block=1, rounds=rounds)

    def stats(t: Times, kind: str) -> dict[str, dict[str, float]]:
        return {name: latency_stats(v[kind]) for name, v in t.items()}

    cpu = stats(warm, "cpu")
    base = cpu["dense flat"]["p50"]
    summary = {
        "cpu_ms": cpu,
        "process_cpu_ms": stats(warm, "process_cpu"),
        "wall_ms": stats(warm, "wall"),
        "p50_over_dense_flat": {n: round(s["p50"] / base, 3) for n, s in cpu.items()},
        "interleaved_cpu_ms": stats(cold, "cpu"),
        "interleaved_wall_ms": stats(cold, "wall"),
    }
    return summary, got


def run_2wiki(limit: int | None, config: SearchConfig, rounds: int) -> dict[str, Any]:
    corpus, questions = dataset("2wikimultihopqa")
    questions = questions[:limit]
    t0 = time.perf_counter()
    index, embedder = two_wiki_index(corpus)
    build_s = time.perf_counter() - t0
    dense = index.retriever.dense
    queries = [q["question"] for q in questions]
    vectors = embedder.embed(queries)
    timing, got = measure(method_calls(index, dense, config), vectors, queries, rounds)
    texts = [c.text for c in index.chunks]
    golds = [{passage_text(corpus[i]) for i in q["supporting_passage_ids"]} for q in questions]
    recall5 = {
        name: round(
            100
            * float(
                np.mean(
                    [
                        len(g & {texts[i] for i in leaves}) / len(g)
                        for g, leaves in zip(golds, got[name], strict=True)
                    ]
                )
            ),
            2,
        )
        for name in got
    }
    return {
        "corpus": "2wikimultihopqa",
        "n_passages": len(corpus),
        "n_queries": len(queries),
        "layers": index.tree.layer_sizes(),
        "build_seconds_without_embedding": round(build_s, 2),
        **timing,
        "recall@5": recall5,
        **tree_vs_exact(index, dense, vectors, config.beam),
    }


def spherical_buckets(e: np.ndarray, target: int, seed: int = 0, iters: int = 10) -> np.ndarray:
    """Bucket label per row: spherical k-means with ceil(n / target) centroids, and any bucket
    over twice ``target`` split again the same way (a median cut if k-means cannot split it)."""
    n = e.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    todo = [np.arange(n)]
    next_label = 0
    rng = np.random.default_rng(seed)
    while todo:
        rows = todo.pop()
        if rows.size <= 2 * target:
            labels[rows] = next_label
            next_label += 1
            continue
        x = e[rows]
        k = math.ceil(rows.size / target)
        cents = x[rng.choice(rows.size, k, replace=False)]
        assign = np.zeros(rows.size, dtype=np.int64)
        for _ in range(iters):
            assign = np.argmax(x @ cents.T, axis=1)
            sums = np.zeros_like(cents)
            np.add.at(sums, assign, x)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            empty = norms[:, 0] == 0
            sums[empty] = x[rng.choice(rows.size, int(empty.sum()), replace=False)]
            norms[empty] = 1.0
            cents = sums / norms
        parts = [rows[assign == j] for j in range(k) if (assign == j).any()]
        if len(parts) == 1:  # k-means made no cut: split at the median of a random direction
            proj = x @ rng.normal(size=x.shape[1]).astype(np.float32)
            cut = proj <= np.median(proj)
            parts = [rows[cut], rows[~cut]]
        todo.extend(parts)
    return labels


def synthetic_index(
    n: int, dim: int, clusters: int, bucket: int, tree_kind: str = "knn", seed: int = 0
) -> tuple[Index, np.ndarray, list[str], list[list[str]], dict[str, Any]]:
    """Build the synthetic corpus and its index (one knn tree, or a forest of exact trees);
    returns index, vectors, texts, the per-cluster vocabularies and build facts (stage
    seconds, bucket sizes for a forest)."""
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    e, labels = clustered_with_labels(n, dim, clusters, seed)
    texts, vocab = synthetic_texts(labels, seed=seed)
    seconds["generate"] = time.perf_counter() - t0
    facts: dict[str, Any] = {"tree_kind": tree_kind}
    if tree_kind == "forest":
        t0 = time.perf_counter()
        groups = spherical_buckets(e, bucket, seed)
        seconds["buckets (spherical k-means)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tree = build_forest(e, groups, max_children=40)
        seconds["tree (forest of exact trees)"] = time.perf_counter() - t0
        sizes = np.bincount(groups)
        facts["bucket_target"] = bucket
        facts["buckets"] = int(sizes.size)
        facts["bucket_size_min_median_max"] = [
            int(sizes.min()),
            int(np.median(sizes)),
            int(sizes.max()),
        ]
    elif tree_kind == "bucketed":
        t0, c0 = time.perf_counter(), time.process_time()
        tree = build_tree(e, max_children=40, mode="bucketed", bucket_size=bucket)
        seconds[f"tree (bucketed, bucket {bucket})"] = time.perf_counter() - t0
        facts["tree_build_cpu_seconds_this_process"] = round(time.process_time() - c0, 1)
        facts["bucket_target"] = bucket
    else:
        t0 = time.perf_counter()
        tree = build_tree(e, max_children=40, mode="knn", neighbors=32)
        seconds["tree (knn, k 32)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean = np.asarray(tree.leaf_membership[n:] @ e)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    node_vectors = np.concatenate([e, mean]).astype(np.float32)
    seconds["routing (leaf means)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sparse = SparseIndex.build(texts)
    seconds["bm25"] = time.perf_counter() - t0
    chunks = [
        Chunk(id=f"s{i}", text=t, source=Source(f"s{i}", "", 0, 0, len(t)))
        for i, t in enumerate(texts)
    ]
    index = Index(
        config=IndexConfig(abstracts="none"),
        chunks=chunks,
        tree=tree,
        node_vectors=node_vectors,
        abstracts=[""] * (tree.n_nodes - n),
        sparse=sparse,
        embedder_id="synthetic",
    )
    facts["stage_seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    facts["roots"] = int(tree.roots.size)
    return index, e, texts, vocab, facts


def run_synthetic(
    n: int,
    n_queries: int,
    clusters: int,
    bucket: int,
    config: SearchConfig,
    rounds: int,
    tree_kind: str = "knn",
    seed: int = 0,
    extra: str | None = None,
) -> dict[str, Any]:
    index, e, texts, vocab, facts = synthetic_index(n, 384, clusters, bucket, tree_kind, seed)
    facts["peak_rss_mib_after_build"] = round(peak_rss_mib(), 1)
    rng = np.random.default_rng(seed + 2)
    src = rng.choice(n, n_queries, replace=False)
    noisy = e[src] + 0.05 * rng.normal(size=(n_queries, e.shape[1])).astype(np.float32)
    vectors = (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)
    labels_of = {t: c for c, words in enumerate(vocab) for t in words}
    queries = []
    for i in src.tolist():
        words = texts[i].split()
        own = [w for w in words if w in labels_of][:4]
        queries.append(" ".join(own + list(rng.choice(words, 2))))
    dense = index.retriever.dense
    timing, got = measure(method_calls(index, dense, config, extra), vectors, queries, rounds)
    found = {
        name: round(100 * float(np.mean([s in g for s, g in zip(src, got[name], strict=True)])), 2)
        for name in got
    }
    return {
        "corpus": "synthetic",
        "n_passages": n,
        "dim": 384,
        "clusters": clusters,
        "words_per_text": 30,
        "n_queries": n_queries,
        "query": "a corpus vector plus Gaussian noise (sd 0.05 per dimension), renormalised; "
        "text: 4 cluster words of that item's text plus 2 random words of it",
        **facts,
        "layers": index.tree.layer_sizes(),
        **timing,
        "source_item_in_top5": found,
        **tree_vs_exact(index, dense, vectors, config.beam),
    }


def main() -> None:
    """Time the four searches on 2Wiki and on the synthetic corpus; write latency.json."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000, help="synthetic corpus size")
    ap.add_argument("--queries", type=int, default=1000, help="synthetic queries")
    ap.add_argument("--clusters", type=int, default=200)
    ap.add_argument(
        "--tree",
        choices=["knn", "forest", "bucketed"],
        default="knn",
        help="synthetic index: one knn-mode tree, a forest of exact trees over buckets, or one "
        "bucketed-mode tree",
    )
    ap.add_argument(
        "--bucket",
        type=int,
        default=None,
        help=f"leaves per bucket (--tree forest: 5000; bucketed: {DEFAULT_BUCKET_SIZE})",
    )
    ap.add_argument("--profile", choices=sorted(PROFILES), default="default")
    ap.add_argument(
        "--also-profile",
        choices=sorted(PROFILES),
        default=None,
        help="synthetic run: also time psi and tree under this profile",
    )
    ap.add_argument("--out", default="latency.json", help="results file in benchmarks/results")
    ap.add_argument("--limit", type=int, default=None, help="first N 2Wiki questions only")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds; fastest per query")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--skip-2wiki", action="store_true")
    args = ap.parse_args()
    config = PROFILES[args.profile]
    bucket = args.bucket or (5000 if args.tree == "forest" else DEFAULT_BUCKET_SIZE)
    result: dict[str, Any] = {
        "profile": args.profile,
        "search_config": {
            "beam": config.beam,
            "candidates": config.candidates,
            "k": config.k,
            "rrf_k": config.rrf_k,
            "merge_duplicates": config.merge_duplicates,
        },
        "methods": list(METHODS),
        "protocol": "single-thread BLAS (threadpoolctl), gc off while timing, "
        f"{WARMUP} warm-up queries, query embedding excluded, each call returns Passage "
        "objects; cpu_ms: this thread's CPU time (time.thread_time_ns), wall_ms: "
        f"perf_counter; blocks of {BLOCK} queries per method, method order rotating per "
        f"block; {args.rounds} rounds, each query keeping its fastest round; interleaved_*: "
        "the four methods in rotating order on every query (colder caches)",
        "rounds": args.rounds,
        "machine": machine_info(),
        "runs": [],
    }
    if not args.skip_2wiki:
        result["runs"].append(run_2wiki(args.limit, config, args.rounds))
        print(result["runs"][-1], flush=True)
    if not args.skip_synthetic:
        run = run_synthetic(
            args.n,
            args.queries,
            args.clusters,
            bucket,
            config,
            args.rounds,
            args.tree,
            extra=args.also_profile,
        )
        result["methods"] = list(run["cpu_ms"])
        result["runs"].append(run)
        print(run, flush=True)
    result["peak_rss_mib"] = round(peak_rss_mib(), 1)
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
