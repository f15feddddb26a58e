"""Single-retrieval quality and search latency on 2WikiMultihopQA (no LLM).

Builds the index over the 6,119 passages with the default embedder (vectors cached in
bench-out/cache so reruns skip the embedding), then for all 1,000 questions reports Recall@2/5
of tree alone, BM25 alone and tree+BM25 RRF per beam width, with dense flat and BM25+dense RRF
as references; and search latency excluding the query embedding.
Usage: python benchmarks/bench_2wiki_retrieval.py [--beams 5 10 20 40 80] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import (
    OUT,
    ROOT,
    dataset,
    machine,
    minilm_cached,
    passage_text,
    peak_rss_mib,
    recall,
)

from psirag import Index, IndexConfig, SearchConfig
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.ranking import top_k


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--beams", type=int, nargs="+", default=[5, 10, 20, 40, 80])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--routing", default="leaf_mean", choices=["leaf_mean", "abstract", "blend"])
    args = ap.parse_args()
    corpus, questions = dataset("2wikimultihopqa")
    questions = questions[: args.limit]
    embedder = minilm_cached()
    t0 = time.perf_counter()
    index = Index.build(
        _docs(corpus),
        IndexConfig(routing=args.routing),
        embedder=embedder,
    )
    build_seconds = time.perf_counter() - t0
    index.save(OUT / f"2wiki-index-{args.routing}")
    texts = [c.text for c in index.chunks]
    assert texts == [passage_text(r) for r in corpus]
    golds = [{passage_text(corpus[i]) for i in q["supporting_passage_ids"]} for q in questions]
    qvecs = embedder.embed([q["question"] for q in questions])
    leaf_vecs = np.asarray(index.node_vectors[: index.tree.n_leaves])

    def evaluate(run) -> dict[str, float]:
        r2 = r5 = 0.0
        for q, vec, gold in zip(questions, qvecs, golds, strict=True):
            got = run(q["question"], vec)
            r2 += recall(got, gold, 2)
            r5 += recall(got, gold, 5)
        n = len(questions)
        return {"recall@2": round(100 * r2 / n, 2), "recall@5": round(100 * r5 / n, 2)}

    def texts_of(passages) -> list[str]:
        return [p.text for p in passages]

    def dense_ids(vec, k=10) -> list[int]:
        return top_k(leaf_vecs @ vec, k).tolist()

    rows: dict[str, dict] = {}
    rows["bm25"] = evaluate(
        lambda q, v: texts_of(index.search_vector(v, q, config=SearchConfig(use_tree=False)))
    )
    rows["dense flat"] = evaluate(lambda q, v: [texts[i] for i in dense_ids(v)])

    def hybrid_dense(q, v):
        bm = index.sparse.search(q, k=10)[0].tolist()
        return [texts[i] for i, _ in rrf_fuse([dense_ids(v), bm], k=5)]

    rows["bm25+dense rrf"] = evaluate(hybrid_dense)
    for beam in args.beams:
        tree_cfg = SearchConfig(beam=beam, use_bm25=False)
        fused_cfg = SearchConfig(beam=beam)
        rows[f"tree beam={beam}"] = evaluate(
            lambda q, v, c=tree_cfg: texts_of(index.search_vector(v, q, config=c))
        )
        rows[f"tree+bm25 rrf beam={beam}"] = evaluate(
            lambda q, v, c=fused_cfg: texts_of(index.search_vector(v, q, config=c))
        )

    # latency of the default search, query embedding excluded
    default = SearchConfig()
    lat = []
    for q, vec in zip(questions, qvecs, strict=True):
        t = time.perf_counter()
        index.search_vector(vec, q["question"], config=default)
        lat.append((time.perf_counter() - t) * 1000)
    tree_lat = []
    for vec in qvecs:
        t = time.perf_counter()
        index.retriever.searcher.search(vec, k=10, beam=default.beam)
        tree_lat.append((time.perf_counter() - t) * 1000)
    dense_lat = []
    for vec in qvecs:
        t = time.perf_counter()
        dense_ids(vec)
        dense_lat.append((time.perf_counter() - t) * 1000)
    result = {
        "dataset": "2wikimultihopqa",
        "n_questions": len(questions),
        "n_passages": len(corpus),
        "routing": args.routing,
        "default_beam": default.beam,
        "build_seconds_without_embedding": round(build_seconds, 2),
        "stage_seconds": {k: round(v, 3) for k, v in index.stats.seconds.items()},
        "layers": index.tree.layer_sizes(),
        "methods": rows,
        "search_ms": _pct(lat),
        "tree_search_only_ms": _pct(tree_lat),
        "dense_flat_ms": _pct(dense_lat),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "machine": machine(),
    }
    name = (
        "2wiki_retrieval.json"
        if args.routing == "leaf_mean"
        else f"2wiki_retrieval_{args.routing}.json"
    )
    (ROOT / "benchmarks" / "results" / name).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def _docs(corpus):
    from psirag.ingest import Document

    return [
        Document(str(r.get("idx", i)), r["title"], passage_text(r), is_record=True)
        for i, r in enumerate(corpus)
    ]


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p95": round(float(np.percentile(a, 95)), 3),
    }


if __name__ == "__main__":
    main()
