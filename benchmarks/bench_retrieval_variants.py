"""Retrieval variants on 2Wiki and HotpotQA-dev200 (no LLM): the ablation behind the default
search profile, psi against hybrid with paired bootstrap intervals, and p50 search latency.

Tuning discipline: variants were chosen on 2Wiki questions 500-999 only ("tune"). They are
reported on 2Wiki questions 0-499 (held out), on all 1,000, and on HotpotQA-dev200 (held out,
never looked at while tuning); the tuning half is listed too, marked as such.

Each index is loaded from ``--index NAME=DIR`` (a saved MiniLM index, e.g. from
``psirag index <data>/NAME/corpus.json``) or built here from the MiniLM embedding cache and
saved under bench-out/. Question vectors come from ``--vectors NPZ`` (an embedding cache; the
questions missing from it are embedded with MiniLM and added), so a variant over 1,000
questions takes seconds. Recall@k is by passage identity (title + text), as the eval scores it.

Usage: python benchmarks/bench_retrieval_variants.py [--index 2wikimultihopqa=DIR ...]
       [--vectors NPZ] [--bootstrap 10000]
Writes benchmarks/results/retrieval_variants.json and section_retrieval_variants.md.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    DATA,
    MINILM_CACHE,
    OUT,
    RESULTS,
    CachedVectors,
    dataset,
    machine_info,
    minilm_cached,
)

from psirag import Index, IndexConfig, SearchConfig
from psirag.config import PROFILES
from psirag.eval.embedcache import CachingEmbedder
from psirag.eval.metrics import paired_bootstrap_ci, passage_key, recall_at_k
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.retriever import Retriever

DATASETS = ("2wikimultihopqa", "hotpotqa-dev200")
TUNE = slice(500, 1000)
"""The only questions variants were tuned on (2Wiki's second half)."""
PAPER = PROFILES["paper"]
DEFAULT = PROFILES["default"]
TREE = PROFILES["tree"]
HYBRID = SearchConfig(use_tree=False, use_bm25=True, use_dense=True, merge_duplicates=False)

Run = Callable[[Retriever, str, np.ndarray], list[int]]
COMPARED = ("psi default", "psi tree", "psi paper")
"""The rows whose difference from hybrid gets a paired bootstrap interval."""


def config_run(config: SearchConfig) -> Run:
    return lambda r, q, v: [i for i, _ in r.ranked(v, q, config=config)]


def passdown_run(beam: int, alpha: float) -> Run:
    """Tree list re-scored by ``cos(leaf) + alpha * cos(parent)`` over the visited leaves (the
    parents' scores passed down), fused with BM25: measured, not adopted (script-only)."""

    def run(r: Retriever, q: str, v: np.ndarray) -> list[int]:
        data = r.data
        hits = r.searcher.search(v, k=10, beam=beam, collect_visited=True)
        score = np.zeros(data.tree.n_nodes, dtype=np.float32)
        score[hits.visited] = hits.visited_scores
        leaves = hits.visited[hits.visited < data.n_leaves]
        parent = np.asarray(data.tree.parent)[leaves]
        total = score[leaves] + alpha * np.where(parent >= 0, score[np.maximum(parent, 0)], 0.0)
        tree = leaves[np.lexsort((leaves, -total))][:10].tolist()
        bm25 = data.sparse.search(q, k=10)[0].tolist()
        return [i for i, _ in rrf_fuse([tree, bm25], k=5)]

    return run


# (row name, what it changes, the run); the first rows are the flat baselines.
VARIANTS: list[tuple[str, str, Run]] = [
    ("bm25", "BM25 alone", config_run(SearchConfig(use_tree=False))),
    (
        "dense flat",
        "exact cosine over every leaf",
        config_run(SearchConfig(use_tree=False, use_bm25=False, use_dense=True)),
    ),
    ("hybrid", "dense flat + BM25, RRF (the best flat method)", config_run(HYBRID)),
    (
        "tree (beam 40)",
        "tree alone, the paper profile's beam",
        config_run(PAPER.with_(use_bm25=False)),
    ),
    (
        "tree (beam 160)",
        "tree alone, the default's beam",
        config_run(TREE.with_(use_bm25=False)),
    ),
    ("psi paper", "tree + BM25, beam 40 (`--profile paper`)", config_run(PAPER)),
    ("psi beam 80", "paper + beam 80", config_run(PAPER.with_(beam=80))),
    ("psi beam 160", "paper + beam 160", config_run(PAPER.with_(beam=160))),
    ("psi beam 320", "paper + beam 320", config_run(PAPER.with_(beam=320))),
    (
        "psi merged",
        "paper + identical texts merged",
        config_run(PAPER.with_(merge_duplicates=True)),
    ),
    (
        "psi tree",
        "beam 160 + identical texts merged, the tree at every size (`--profile tree`)",
        config_run(TREE),
    ),
    (
        "psi default",
        f"psi tree + a flat scan in the tree's place up to {DEFAULT.exact_dense_leaves:,} "
        "leaves (the default)",
        config_run(DEFAULT),
    ),
    ("psi candidates 20", "paper + 20 candidates per list", config_run(PAPER.with_(candidates=20))),
    ("psi rrf_k 20", "paper + RRF constant 20", config_run(PAPER.with_(rrf_k=20))),
    (
        "three-way",
        "tree + dense flat + BM25, RRF, beam 40",
        config_run(PAPER.with_(use_dense=True)),
    ),
    (
        "three-way candidates 20",
        "three-way + 20 candidates per list",
        config_run(PAPER.with_(use_dense=True, candidates=20)),
    ),
    (
        "psi passdown 0.6",
        "beam 160, leaf + 0.6 x parent score (script-only)",
        passdown_run(160, 0.6),
    ),
]


def load_index(name: str, given: dict[str, str]) -> Index:
    if name in given:
        return Index.load(given[name])
    folder = OUT / f"index-{name}"
    if not folder.exists():
        embedder = CachedVectors() if MINILM_CACHE.exists() else minilm_cached()
        Index.build([DATA / name / "corpus.json"], IndexConfig(), embedder=embedder).save(folder)
    return Index.load(folder)


def question_vectors(questions: list[str], path: Path) -> np.ndarray:
    try:
        return CachedVectors(path).embed(questions)
    except (KeyError, SystemExit):
        from psirag.embed import load_embedder

        return CachingEmbedder(load_embedder("minilm"), path).embed(questions)


def per_question(
    retriever: Retriever,
    run: Run,
    questions: list[dict],
    vectors: np.ndarray,
    golds: list[set[str]],
) -> dict[str, list[float]]:
    texts = [c.text for c in retriever.data.chunks]
    r2: list[float] = []
    r5: list[float] = []
    for q, v, gold in zip(questions, vectors, golds, strict=True):
        got = [texts[i] for i in run(retriever, q["question"], v)]
        r2.append(recall_at_k(got, gold, 2))
        r5.append(recall_at_k(got, gold, 5))
    return {"recall@2": r2, "recall@5": r5}


def same_as_dense(retriever: Retriever, vectors: np.ndarray, beams: tuple[int, ...]) -> dict:
    """Share (%) of questions whose tree top-10 holds the same leaves as the exact dense top-10
    (duplicates of a text count as that text), per beam: how close the tree is to flat."""
    first = np.asarray(retriever.data.sparse.first_copy)
    same = dict.fromkeys(beams, 0)
    for v in vectors:
        dense = set(retriever.dense.ranked(v, 10)[0].tolist())
        for beam in beams:
            tree = set(first[retriever.searcher.search(v, k=10, beam=beam).leaves].tolist())
            same[beam] += tree == dense
    return {str(b): round(100 * c / len(vectors), 1) for b, c in same.items()}


def latency(
    retriever: Retriever, questions: list[dict], vectors: np.ndarray
) -> dict[str, dict[str, float]]:
    """p50/p95 ms of ``search_vector`` (query embedding excluded) per config, interleaved per
    query so that the machine's load hits each alike."""
    configs = {"psi default": DEFAULT, "psi tree": TREE, "psi paper": PAPER, "hybrid": HYBRID}
    ms: dict[str, list[float]] = {name: [] for name in configs}
    for q, v in zip(questions, vectors, strict=True):
        for name, config in configs.items():
            t = time.perf_counter()
            retriever.search_vector(v, q["question"], config=config)
            ms[name].append((time.perf_counter() - t) * 1000)
    return {
        name: {
            "p50": round(float(np.percentile(a, 50)), 3),
            "p95": round(float(np.percentile(a, 95)), 3),
        }
        for name, a in ms.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--vectors", type=Path, default=MINILM_CACHE, metavar="NPZ")
    ap.add_argument("--bootstrap", type=int, default=10000)
    args = ap.parse_args()
    given = dict(item.split("=", 1) for item in args.index)
    sets: dict[str, dict[str, Any]] = {}
    lat: dict[str, Any] = {}
    overlap: dict[str, Any] = {}
    for name in DATASETS:
        corpus, questions = dataset(name)
        index = load_index(name, given)
        retriever = index.retriever
        vectors = question_vectors([q["question"] for q in questions], args.vectors)
        golds = [
            {
                passage_key(corpus[i].get("title"), corpus[i]["text"])
                for i in q["supporting_passage_ids"]
            }
            for q in questions
        ]
        overlap[name] = same_as_dense(retriever, vectors, (40, 160, 320))
        scores = {
            row: per_question(retriever, run, questions, vectors, golds) for row, _, run in VARIANTS
        }
        if name == "2wikimultihopqa":
            parts = {
                "2wiki 0-499 (held out)": slice(0, 500),
                "2wiki all 1,000": slice(0, 1000),
                "2wiki 500-999 (tuned on)": TUNE,
            }
            lat = latency(retriever, questions, vectors)
        else:
            parts = {"HotpotQA-dev200 (held out)": slice(0, len(questions))}
        for label, part in parts.items():
            sets[label] = summarize(scores, part, args.bootstrap)
    result = {
        "variants": [{"name": n, "what": w} for n, w, _ in VARIANTS],
        "sets": sets,
        "search_ms_2wiki": lat,
        "tree_top10_equals_dense_top10_pct": overlap,
        "tuned_on": "2wikimultihopqa questions 500-999",
        "machine": machine_info(),
    }
    (RESULTS / "retrieval_variants.json").write_text(json.dumps(result, indent=2))
    (RESULTS / "section_retrieval_variants.md").write_text(section(result))
    print(section(result))


def summarize(scores: dict[str, dict[str, list[float]]], part: slice, n: int) -> dict[str, Any]:
    rows = {
        row: {m: round(100 * float(np.mean(v[part])), 2) for m, v in by.items()}
        for row, by in scores.items()
    }
    cis = {}
    for row in COMPARED:
        ci = paired_bootstrap_ci(
            np.asarray(scores[row]["recall@5"][part]) * 100,
            np.asarray(scores["hybrid"]["recall@5"][part]) * 100,
            n=n,
        )
        cis[f"{row} - hybrid"] = {
            k: round(v, 2) if isinstance(v, float) else v for k, v in ci.to_dict().items()
        }
    return {"n": len(scores["hybrid"]["recall@5"][part]), "recall": rows, "vs_hybrid": cis}


def section(r: dict[str, Any]) -> str:
    sets = r["sets"]
    labels = list(sets)
    head = "| variant | what it changes | " + " | ".join(f"{lb} R@5" for lb in labels) + " |"
    lines = [
        "## Retrieval variants (the ablation behind the default profile)",
        "",
        "`python benchmarks/bench_retrieval_variants.py` (MiniLM, no LLM). Variants were tuned",
        "on **2Wiki questions 500-999 only**; 2Wiki 0-499 and HotpotQA-dev200 were held out (the",
        "HotpotQA set was never looked at while tuning). Recall@5 in %, by passage identity.",
        "",
        head,
        "|" + "---|" * (len(labels) + 2),
    ]
    for v in r["variants"]:
        cells = [f"{sets[lb]['recall'][v['name']]['recall@5']:.2f}" for lb in labels]
        lines.append(f"| {v['name']} | {v['what']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "psi against hybrid, Recall@5 difference in points with its paired bootstrap 95% interval",
        "(10,000 resamples of the questions):",
        "",
        "| set | questions | " + " | ".join(f"{row} - hybrid" for row in COMPARED) + " |",
        "|---|---|" + "---|" * len(COMPARED),
    ]
    for lb in labels:
        s = sets[lb]
        cells = []
        for row in (f"{name} - hybrid" for name in COMPARED):
            c = s["vs_hybrid"][row]
            cells.append(f"{c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]")
        lines.append(f"| {lb} | {s['n']} | " + " | ".join(cells) + " |")
    ms = r["search_ms_2wiki"]
    lines += [
        "",
        "Search latency on 2Wiki (6,119 passages), query embedding excluded, the configs",
        "interleaved per query in one run, all 1,000 questions:",
        "",
        "| config | p50 ms | p95 ms |",
        "|---|---|---|",
    ]
    for name, st in ms.items():
        lines.append(f"| {name} | {st['p50']:.2f} | {st['p95']:.2f} |")
    lines += ["", reading(r)]
    return "\n".join(lines) + "\n"


def reading(r: dict[str, Any]) -> str:
    """What the table says, with its numbers (prose around them is fixed)."""
    sets = r["sets"]
    rec = {lb: {v: x["recall@5"] for v, x in s["recall"].items()} for lb, s in sets.items()}
    hot = "HotpotQA-dev200 (held out)"
    held = "2wiki 0-499 (held out)"
    tune = rec["2wiki 500-999 (tuned on)"]
    ci = sets[hot]["vs_hybrid"]["psi default - hybrid"]
    tree_ci = sets[hot]["vs_hybrid"]["psi tree - hybrid"]
    ms = r["search_ms_2wiki"]
    same = r["tree_top10_equals_dense_top10_pct"]
    w, h = same["2wikimultihopqa"], same["hotpotqa-dev200"]
    return (
        "**Reading.** The only change that helped on the tuning half is a wider beam, and it "
        "helps by making the tree a flat dense search: its top-10 is the exact dense top-10 for "
        f"{w['160']:.0f}% of 2Wiki questions and {h['160']:.0f}% of HotpotQA's at beam 160 "
        f"({w['40']:.0f}% and {h['40']:.0f}% at beam 40, {w['320']:.0f}% and {h['320']:.0f}% at "
        "320), so tree + BM25 becomes hybrid (tree alone "
        f"{rec[held]['tree (beam 40)']:.2f} -> {rec[held]['tree (beam 160)']:.2f} on the held-out "
        f"half, dense flat {rec[held]['dense flat']:.2f}). Beams 160 and 320 tie on the tuning "
        "half, so the default takes the cheaper 160 (choosing 320 after seeing HotpotQA would be "
        "tuning on held-out data). Every other signal either did nothing (RRF constant, merging "
        "identical texts: no Recall change, it only frees a slot for the user) or hurt "
        "(three-way RRF counts the same dense signal twice; 20 candidates per list). Passing "
        "parent scores down to leaves moved the tuning half by "
        f"{tune['psi passdown 0.6'] - tune['psi beam 160']:+.2f} "
        "points, within noise, and loses on HotpotQA, so it is not in the default. Result: the "
        "tree at the default beam (psi tree) equals hybrid on 2Wiki (held-out half and all "
        f"1,000) and is {tree_ci['diff']:+.2f} points [{tree_ci['low']:+.2f}, "
        f"{tree_ci['high']:+.2f}] from it on HotpotQA-dev200, where its top 10 misses the exact "
        "one for a few questions. So the default adds what it takes not to lose to flat "
        "retrieval: on an index of at most "
        f"{DEFAULT.exact_dense_leaves:,} leaves, where a flat scan costs about what the "
        'beam-160 search does ("Flat scan against tree search by corpus size"), its dense '
        "list is ranked exactly. The bound comes from that cost measurement, not from recall. It "
        "changes nothing on 2Wiki (6,119 leaves: the tree search runs), and on HotpotQA-dev200 "
        f"(1,971 leaves) the default is then {ci['diff']:+.2f} points [{ci['low']:+.2f}, "
        f"{ci['high']:+.2f}] from hybrid. The tree does not beat flat dense retrieval on either "
        "set, and at these sizes it is not faster either (p50 "
        f"{ms['psi tree']['p50']:.2f} ms for psi tree against {ms['hybrid']['p50']:.2f} ms for "
        f"hybrid here, {ms['psi paper']['p50']:.2f} ms for the paper profile). What it buys is "
        "a search whose cost grows far slower than the corpus (the 1M-leaf rows under Scale) "
        "and the abstracts that summarization visits (`visit`)."
    )


if __name__ == "__main__":
    main()
