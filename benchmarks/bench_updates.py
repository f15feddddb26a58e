"""Tree updates (SPEC 4, paper App. G) on 2Wiki: recall after inserts and removals, drift from a
fresh build, and what an update costs against a full tree build.

All at the tree level (no abstracts, no index files): cached MiniLM vectors of the 6,119
passages, routing vectors = normalised leaf means, the default search (beam 40, 10 candidates per
retriever, top 5), tree alone and psi (tree + BM25 over all passages, RRF). BM25 does not depend
on the tree, so its lists are computed once.

- Recall: build on a random 90% of the passages, add the other 10% as one batch, as 10 batches
  of 1% and one chunk at a time, under each insert rule (auto, single, batch); remove a random
  10% of the full tree and add it back. Each against the full build over 100%.
- Drift: each updated tree against the full build (``tree_drift``); and, for the rebuild rule,
  trees built on 50-95% of the passages and grown to 100% in 1% batches.
- Cost: ``build_tree`` over all passages against inserting 1% and 10% (and removing 10%), with
  one BLAS thread, interleaved, best of ``--repeats`` in wall and in process CPU seconds.

- Insertion points: ``--insert scan`` compares each new chunk with every leaf (the code before
  issue 24 item 5); ``--insert descent`` finds them by a beam descent over the routing vectors
  (what the living index does now), the vectors of the tree as it stands before each batch.

Usage: python benchmarks/bench_updates.py [--limit N] [--repeats 3] [--seed 0]
       [--insert scan|descent] [--no-churn] [--out updates.json]
       Writes benchmarks/results/updates.json (or --out).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import (
    machine_info,
    minilm_cached,
    passage_text,
    recall,
    two_wiki_queries,
    write_result,
)

from psirag import SearchConfig
from psirag.eval.harness import single_thread_blas
from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.tree_search import TreeSearcher
from psirag.tree import Tree, TreeUpdate, build_tree, insert_leaves, remove_leaves, tree_drift
from psirag.tree.update import InsertRule

MAX_CHILDREN = 40
INSERT = {"mode": "scan"}  # set from --insert


def leaf_mean_vectors(tree: Tree, leaf_vecs: np.ndarray) -> np.ndarray:
    """One row per node: leaves their vectors, inner nodes their leaves' normalised mean."""
    mean = np.asarray(tree.leaf_membership[tree.n_leaves :] @ leaf_vecs)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    return np.vstack([leaf_vecs, mean]).astype(np.float32)


def insert(tree: Tree, leaf_vecs: np.ndarray, new: np.ndarray, **kw: Any) -> TreeUpdate:
    """``insert_leaves`` the way ``--insert`` says (descent: routing vectors as an index has
    them, so they are not timed)."""
    if INSERT["mode"] == "descent":
        if kw.get("node_vectors") is None:
            kw["node_vectors"] = leaf_mean_vectors(tree, leaf_vecs)
        kw["scan_below"] = 0
    else:
        kw.pop("node_vectors", None)  # the scan reads every leaf
    return insert_leaves(tree, leaf_vecs, new, max_children=MAX_CHILDREN, **kw)


class Scorer:
    """Recall@2/5 of the tree alone and of psi for a tree whose leaf ``i`` is passage
    ``pid[i]``."""

    def __init__(
        self, texts: list[str], vectors: np.ndarray, queries: list[str], golds: list[set[str]]
    ) -> None:
        self.texts = texts
        self.vectors = vectors
        self.golds = golds
        self.config = SearchConfig()
        embedder = minilm_cached()
        self.qvecs = embedder.embed(queries)
        sparse = SparseIndex.build(texts)
        self.bm25 = [sparse.search(q, k=self.config.candidates)[0].tolist() for q in queries]

    def __call__(self, tree: Tree, pid: np.ndarray) -> dict[str, dict[str, float]]:
        searcher = TreeSearcher(tree, leaf_mean_vectors(tree, self.vectors[pid]))
        c = self.config
        sums = {"tree_alone": [0.0, 0.0], "psi": [0.0, 0.0]}
        for q, bm25, gold in zip(self.qvecs, self.bm25, self.golds, strict=True):
            hits = searcher.search(q, k=c.candidates, beam=c.beam)
            tree_ids = pid[hits.leaves].tolist()
            fused = [i for i, _ in rrf_fuse([tree_ids, bm25], k=c.k, rrf_k=c.rrf_k)]
            for name, ids in (("tree_alone", tree_ids[: c.k]), ("psi", fused)):
                got = [self.texts[i] for i in ids]
                sums[name][0] += recall(got, gold, 2)
                sums[name][1] += recall(got, gold, 5)
        n = len(self.golds)
        return {
            name: {"recall@2": round(100 * a / n, 2), "recall@5": round(100 * b / n, 2)}
            for name, (a, b) in sums.items()
        }


def in_passage_order(tree: Tree, pid: np.ndarray) -> Tree:
    """The same tree with leaf ``i`` renumbered to passage ``pid[i]`` (for ``tree_drift``)."""
    parent = tree.parent.copy()
    parent[pid] = tree.parent[: tree.n_leaves]
    return Tree(parent=parent, layer=tree.layer.copy())


def new_leaf_bias(tree: Tree, is_new: np.ndarray) -> dict[str, float]:
    """App. G's worry: how many new leaves pile up under one layer-1 node."""
    parents = tree.parent[: tree.n_leaves]
    per_parent = np.bincount(parents[is_new], minlength=tree.n_nodes)[tree.n_leaves :]
    holders = per_parent[per_parent > 0]
    return {
        "max_new_under_one_parent": int(holders.max()) if holders.size else 0,
        "parents_holding_new": int(holders.size),
    }


def grow(
    tree: Tree, vectors: np.ndarray, pid: np.ndarray, batches: list[np.ndarray], rule: InsertRule
) -> tuple[Tree, np.ndarray, dict[str, int], float]:
    """Insert ``batches`` of passage ids one after another; the tree, its pid, counts, seconds."""
    counts: dict[str, int] = {}
    seconds = 0.0
    for batch in batches:
        leaf_vecs = vectors[pid]
        nodes = leaf_mean_vectors(tree, leaf_vecs) if INSERT["mode"] == "descent" else None
        t0 = time.perf_counter()
        if nodes is None:
            update = insert(tree, leaf_vecs, vectors[batch], rule=rule)
        else:
            update = insert(tree, leaf_vecs, vectors[batch], rule=rule, node_vectors=nodes)
        seconds += time.perf_counter() - t0
        tree, pid = update.tree, np.concatenate([pid, batch])
        for key, value in update.counts.items():
            counts[key] = counts.get(key, 0) + value
    return tree, pid, counts, seconds


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and process-CPU seconds of one call (CPU time does not count other jobs' load)."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return round(time.perf_counter() - t0, 4), round(time.process_time() - c0, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="first N questions only")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--churn-bases", type=float, nargs="+", default=[0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.3]
    )
    ap.add_argument("--no-churn", action="store_true", help="skip the rebuild-rule rows")
    ap.add_argument("--insert", choices=["scan", "descent"], default="scan")
    ap.add_argument("--out", default="updates.json")
    args = ap.parse_args()
    INSERT["mode"] = args.insert

    corpus, queries, golds = two_wiki_queries(args.limit)
    texts = [passage_text(r) for r in corpus]
    vectors = minilm_cached().embed(texts)
    n = len(texts)
    score = Scorer(texts, vectors, queries, golds)
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(n)
    tenth = n // 10
    base_ids, rest = np.sort(perm[tenth:]), perm[:tenth]
    result: dict[str, Any] = {
        "machine": machine_info(),
        "n_passages": n,
        "n_questions": len(queries),
        "max_children": MAX_CHILDREN,
        "seed": args.seed,
        "insert": args.insert,
    }

    with single_thread_blas():
        t0 = time.perf_counter()
        full = build_tree(vectors, max_children=MAX_CHILDREN)
        full_seconds = time.perf_counter() - t0
        all_ids = np.arange(n)
        full_row = {"scenario": "full build on 100%", "seconds": round(full_seconds, 3)}
        full_row.update(score(full, all_ids))
        full_row["shape"] = tree_drift(full, full, vectors)["fresh"]
        print(full_row, flush=True)
        rows = [full_row]

        base = build_tree(vectors[base_ids], max_children=MAX_CHILDREN)

        def record(
            name: str,
            rule: str,
            tree: Tree,
            pid: np.ndarray,
            counts: dict,
            secs: float,
            added: np.ndarray = rest,
        ) -> None:
            row: dict[str, Any] = {"scenario": name, "rule": rule, "seconds": round(secs, 3)}
            row.update(score(tree, pid))
            row["counts"] = counts
            row["drift"] = tree_drift(in_passage_order(tree, pid), full, vectors)
            is_new = np.zeros(tree.n_leaves, dtype=bool)
            is_new[np.isin(pid, added)] = True
            row["bias"] = new_leaf_bias(tree, is_new)
            rows.append(row)
            print(
                {k: row[k] for k in ("scenario", "rule", "seconds", "tree_alone", "psi")},
                flush=True,
            )

        plans = {
            "add 10% as one batch": [rest],
            "add 10% as 10 batches of 1%": np.array_split(rest, 10),
        }
        for rule in ("auto", "batch", "single"):
            for name, batches in plans.items():
                tree, pid, counts, secs = grow(base, vectors, base_ids, batches, rule)  # type: ignore[arg-type]
                record(name, rule, tree, pid, counts, secs)
        tree, pid, counts, secs = grow(
            base, vectors, base_ids, [rest[i : i + 1] for i in range(tenth)], "auto"
        )
        record("add 10% one chunk at a time", "single", tree, pid, counts, secs)

        # new topics: the leaves of random layer-2 nodes of the full build (about 10%), the
        # case App. G warns about (new content unlike the indexed one)
        topics: list[int] = []
        for node in rng.permutation(np.flatnonzero(full.layer == 2)).tolist():
            if len(topics) >= tenth:
                break
            topics.extend(full.leaves_under(node).tolist())
        topic_ids = np.asarray(topics, dtype=np.int64)
        t_base_ids = np.setdiff1d(all_ids, topic_ids)
        t_base = build_tree(vectors[t_base_ids], max_children=MAX_CHILDREN)
        t_name = f"add {topic_ids.size / n:.0%} as whole topics, one batch"
        for rule in ("auto", "batch", "single"):
            tree, pid, counts, secs = grow(t_base, vectors, t_base_ids, [topic_ids], rule)  # type: ignore[arg-type]
            record(t_name, rule, tree, pid, counts, secs, topic_ids)

        # remove a random 10% of the full tree, then add it back
        t0 = time.perf_counter()
        gone = remove_leaves(full, np.sort(rest), vectors, max_children=MAX_CHILDREN)
        remove_secs = time.perf_counter() - t0
        left = np.setdiff1d(all_ids, rest)
        is_left = np.zeros(n, dtype=bool)
        is_left[left] = True
        removed_row: dict[str, Any] = {
            "scenario": "full, 10% removed",
            "rule": "-",
            "seconds": round(remove_secs, 3),
        }
        removed_row.update(score(gone.tree, left))
        removed_row["counts"] = gone.counts
        rows.append(removed_row)
        for name, batches in (
            ("full, 10% removed, added back as one batch", [rest]),
            ("full, 10% removed, added back as 10 batches of 1%", np.array_split(rest, 10)),
        ):
            tree, pid, counts, secs = grow(gone.tree, vectors, left, batches, "auto")
            record(name, "auto", tree, pid, counts, secs + remove_secs)
        result["rows"] = rows

        # drift against recall as the churn grows (the rebuild rule)
        churn_rows = []
        for share in [] if args.no_churn else args.churn_bases:
            k = round(n * share)
            b_ids, r_ids = np.sort(perm[n - k :]), perm[: n - k]
            b_tree = build_tree(vectors[b_ids], max_children=MAX_CHILDREN)
            batches = np.array_split(r_ids, max(1, round(r_ids.size / (n / 100))))
            tree, pid, counts, secs = grow(b_tree, vectors, b_ids, batches, "auto")
            row = {
                "base_share": share,
                "added_share": round(r_ids.size / k, 4),
                "batches": len(batches),
            }
            row.update(score(tree, pid))
            d = tree_drift(in_passage_order(tree, pid), full, vectors)
            row.update(
                {
                    key: d[key]
                    for key in ("kept_pairs_layer1", "kept_pairs_layer2", "placement_ratio")
                }
            )
            row["shape"] = d["updated"]
            churn_rows.append(row)
            print(row, flush=True)
        result["churn"] = churn_rows

        # cost, side by side: full build against updates, interleaved
        one_pct = rest[: n // 100]
        base_vecs = vectors[base_ids]
        base_nodes = leaf_mean_vectors(base, base_vecs)
        jobs: dict[str, Callable[[], Any]] = {
            "full build": lambda: build_tree(vectors, max_children=MAX_CHILDREN),
            "add 1%": lambda: insert(base, base_vecs, vectors[one_pct], node_vectors=base_nodes),
            "add 10%": lambda: insert(base, base_vecs, vectors[rest], node_vectors=base_nodes),
            "remove 10%": lambda: remove_leaves(
                full, np.sort(rest), vectors, max_children=MAX_CHILDREN
            ),
        }
        walls: dict[str, list[float]] = {name: [] for name in jobs}
        cpus: dict[str, list[float]] = {name: [] for name in jobs}
        for _ in range(args.repeats):  # interleaved, so load changes hit every job alike
            for name, job in jobs.items():
                wall, cpu = timed(job)
                walls[name].append(wall)
                cpus[name].append(cpu)
        result["cost"] = {
            name: {
                "seconds": min(walls[name]),
                "cpu_seconds": min(cpus[name]),
                "all": walls[name],
                "all_cpu": cpus[name],
                "vs_full_build": round(min(cpus[name]) / min(cpus["full build"]), 4),
            }
            for name in jobs
        }
        print(result["cost"], flush=True)
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
