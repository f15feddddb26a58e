"""The tree against an HNSW graph as a nearest-leaf index (issue 27, item 5).

Both rank leaves for a query vector; the truth is the exact top 10 by cosine over all leaves.
Per index and setting: recall@10 against that truth and per-query latency (p50/p95 ms) on one
thread (BLAS limited to one thread, usearch with ``threads=1``, hnswlib with
``num_threads=1``; the settings interleaved with staggered queries, see :func:`timed`), plus
build time and each build's peak RSS (the process's VmHWM, reset before each build; vectors
included).

- Synthetic: clustered unit vectors (dim 384, ``--clusters`` centres, Gaussian noise 0.7 of the
  centre scale, as ``_common.clustered``), ``--queries`` noisy queries drawn the same way (a
  centre plus fresh noise: near a cluster, on no stored row).
- Real: the 2Wiki index's leaf vectors (MiniLM, 6,119 passages, ``bench-out/index-...`` as
  bench_retrieval_variants.py builds it) with its own tree, and its 1,000 question vectors.

Tree: ``build_tree(mode="auto")``, max 40 children, leaf-mean routing (the default), searched
by ``TreeSearcher`` at beams 10/40/160. HNSW as shipped: the ``hnsw`` list's ranker
(``psirag.retrieval.lists.hnsw.GraphRanker`` over a ``LeafGraph``: usearch, M 16,
expansion_add 100, half-precision vectors, candidates rescored exactly; built with every core)
at ef 16/32/64/128; with ``--hnswlib`` also a plain hnswlib graph (M 16, ef_construction 100,
float32), the library the list used before.

``--checkpoint DIR`` keeps each synthetic size's steps on disk (vectors and queries, the exact
top 10, the tree, the graph, with each build's measured seconds and peak): a rerun with the same
folder and arguments loads the finished steps (the row then says which, under ``resumed``)
instead of repeating them, so that a crash at 1M costs only the step it happened in.

Usage: python benchmarks/bench_tree_vs_hnsw.py [--sizes 100000 1000000] [--clusters 2000]
       [--queries 300] [--no-2wiki] [--hnswlib] [--checkpoint DIR] [--beams B ...]
       [--efs EF ...] [--order staggered|random|fixed]; writes
       benchmarks/results/tree_vs_hnsw.json (rows merged with earlier runs by (set, n)).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    OUT,
    RESULTS,
    current_rss_mib,
    latency_stats,
    machine_info,
    peak_rss_mib,
    write_result,
)

from psirag.config import IndexConfig
from psirag.eval.harness import single_thread_blas
from psirag.pipeline import routing_vectors
from psirag.retrieval.leaf_graph import (
    GRAPH_FILE,
    KEYS_FILE,
    GraphBase,
    LeafGraph,
    new_base_id,
    require_usearch,
)
from psirag.retrieval.lists.hnsw import GraphRanker
from psirag.retrieval.ranking import top_k
from psirag.retrieval.tree_search import TreeSearcher
from psirag.tree import build_tree
from psirag.tree.model import Tree

BEAMS = (10, 40, 160)
EFS = (16, 32, 64, 128)
K = 10


def synthetic(n: int, clusters: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    dim = 384
    centers = rng.normal(size=(clusters, dim)).astype(np.float32)

    def draw(count: int) -> np.ndarray:
        out = np.empty((count, dim), dtype=np.float32)
        labels = rng.integers(0, clusters, count)
        for lo in range(0, count, 20_000):
            hi = min(lo + 20_000, count)
            block = centers[labels[lo:hi]] + 0.7 * rng.normal(size=(hi - lo, dim)).astype(
                np.float32
            )
            out[lo:hi] = block / np.linalg.norm(block, axis=1, keepdims=True)
        return out

    return draw(n), draw(queries)


def reset_peak_rss() -> None:
    """Start a new peak (VmHWM) for this process, so that each build's peak RSS is its own:
    writing 5 to /proc/self/clear_refs resets it on Linux (a no-op elsewhere)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def exact_top(e: np.ndarray, q: np.ndarray) -> list[set[int]]:
    return [set(top_k(e @ v, K).tolist()) for v in q]


class Checkpoint:
    """One synthetic size's finished steps in a folder (None: keep nothing): arrays as .npz,
    the tree as its parent and layer arrays, the graph in usearch's format, and what each
    build measured in ``meta.json``. Every file is written under a temporary name and renamed,
    so a step killed half-way leaves nothing that a rerun would take for finished."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.resumed: list[str] = []
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    def _path(self, name: str) -> Path | None:
        return None if self.folder is None else self.folder / name

    def _replace(self, name: str, write: Any) -> None:
        path = self._path(name)
        if path is None:
            return
        tmp = path.with_name(f".{path.name}.tmp")
        write(tmp)
        os.replace(tmp, path)

    def meta(self) -> dict[str, Any]:
        path = self._path("meta.json")
        return json.loads(path.read_text()) if path is not None and path.exists() else {}

    def note(self, **values: Any) -> None:
        merged = {**self.meta(), **values}
        self._replace("meta.json", lambda tmp: tmp.write_text(json.dumps(merged, indent=1)))

    def arrays(self, name: str) -> dict[str, np.ndarray] | None:
        """The arrays saved under ``name`` (an .npz, read whole into memory), or None."""
        path = self._path(f"{name}.npz")
        if path is None or not path.exists():
            return None
        with np.load(path, allow_pickle=False) as saved:
            out = {key: saved[key] for key in saved.files}
        self.resumed.append(name)
        return out

    def keep_arrays(self, name: str, **arrays: np.ndarray) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)

        self._replace(f"{name}.npz", write)

    def graph(self, n: int) -> LeafGraph | None:
        """The saved graph, loaded whole into memory (not memory-mapped: searched as a graph
        built in this process is), or None."""
        path = self._path("graph.usearch")
        if path is None or not path.exists():
            return None
        loaded = require_usearch().restore(str(path), view=False)
        if loaded is None or len(loaded) != n:
            raise ValueError(f"{path}: not a graph of {n} vectors; delete it to rebuild")
        self.resumed.append("graph")
        return LeafGraph(GraphBase(loaded, np.arange(n), new_base_id(), read_only=False))

    def keep_graph(self, graph: LeafGraph) -> None:
        self._replace("graph.usearch", lambda tmp: graph.graph.save(str(tmp)))


def synthetic_set(
    n: int, clusters: int, queries: int, store: Checkpoint
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`synthetic`'s vectors and queries, from the checkpoint when it has them."""
    saved = store.arrays("vectors")
    if saved is not None:
        if saved["leaves"].shape[0] != n or saved["queries"].shape[0] != queries:
            raise ValueError(f"{store.folder}: saved for another size; use another folder")
        return saved["leaves"], saved["queries"]
    e, q = synthetic(n, clusters, queries)
    store.keep_arrays("vectors", leaves=e, queries=q)
    return e, q


def exact_truth(e: np.ndarray, q: np.ndarray, store: Checkpoint) -> list[set[int]]:
    """:func:`exact_top`, from the checkpoint when it has it."""
    saved = store.arrays("truth")
    if saved is not None:
        return [set(row.tolist()) for row in saved["top"]]
    truth = exact_top(e, q)
    store.keep_arrays("truth", top=np.asarray([sorted(t) for t in truth], dtype=np.int64))
    return truth


ORDERS = ("staggered", "random", "fixed")


def timed(
    searches: dict[str, Any],
    q: np.ndarray,
    truth: list[set[int]],
    seed: int = 0,
    *,
    order: str = "staggered",
) -> dict[str, Any]:
    """Recall@10 and latency of each search, all searches interleaved step by step so that the
    machine's load (shared, busy) hits each alike, in a fresh random order per step (seeded).

    ``staggered`` (the default): at each step every search runs a *different* query (search s
    at step j runs query (j + s * Q / S) mod Q), so no search follows another on the same
    query, whose neighbourhood that one has just brought into the caches; each still runs
    every query once. ``random``: every search on the same query per step. ``fixed``: that,
    in the listed order (the runs before 2026-12-02's 1M row): there the first search of each
    family ran on caches the exact scan had evicted and the rest on the same query's warm
    ones, so usearch ef 16 measured slower than ef 32 at every size."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {', '.join(ORDERS)}")
    ms: dict[str, list[float]] = {name: [] for name in searches}
    hits = dict.fromkeys(searches, 0.0)
    names = list(searches)
    spread = max(1, len(q) // max(1, len(names))) if order == "staggered" else 0
    rng = np.random.default_rng(seed)
    for step in range(len(q)):
        turn = range(len(names)) if order == "fixed" else rng.permutation(len(names))
        for at in turn:
            name = names[int(at)]
            i = (step + int(at) * spread) % len(q)
            t = time.perf_counter()
            got = searches[name](q[i])
            ms[name].append((time.perf_counter() - t) * 1000)
            hits[name] += len(truth[i] & set(np.asarray(got).tolist())) / K
    return {
        name: {"recall@10": round(hits[name] / len(truth), 4), **latency_stats(ms[name])}
        for name in searches
    }


def blas_threads() -> list[int] | None:
    """Threads of each BLAS library loaded now (None: threadpoolctl is not installed, so
    nothing limited them): the row shows that the timed searches ran on one."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return [int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"]


def hnswlib_search(e: np.ndarray) -> tuple[Any, float]:
    """A plain hnswlib graph (float32, M 16, ef_construction 100) and its build seconds."""
    import hnswlib

    t0 = time.perf_counter()
    graph = hnswlib.Index(space="ip", dim=e.shape[1])
    graph.init_index(max_elements=e.shape[0], ef_construction=100, M=16)
    graph.set_num_threads(os.cpu_count() or 1)
    graph.add_items(e, np.arange(e.shape[0]))
    graph.set_num_threads(1)
    seconds = time.perf_counter() - t0

    def search(v: np.ndarray, ef: int) -> np.ndarray:
        graph.set_ef(max(ef, K))
        return graph.knn_query(v.reshape(1, -1), k=K, num_threads=1)[0][0]

    return search, seconds


def graph_upkeep(graph: LeafGraph, q: np.ndarray) -> dict[str, float]:
    """Seconds the living index spends on the graph (log-structured, leaf_graph.py): an add of
    10 leaves (a delta) and a removal of 100 (tombstones), neither touching the base; the fold
    of those changes into a new base (a copy of the graph, as every ``fold_limit`` changes and
    ``compact`` do); that base's save into a generation and a memory-mapped open."""
    import tempfile

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    added = graph.updated(None, q[:10], fold=False)
    out["add 10 leaves"] = round(time.perf_counter() - t0, 3)
    keep = np.ones(added.n_leaves, dtype=bool)
    keep[: added.n_base : max(1, added.n_base // 100)] = False
    t0 = time.perf_counter()
    removed = added.updated(keep, None, fold=False)
    out["remove 100 leaves"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    folded = removed.folded()
    out["fold those changes"] = round(time.perf_counter() - t0, 2)
    OUT.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no bench-out yet
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        t0 = time.perf_counter()
        folded.save_base(Path(tmp) / GRAPH_FILE, Path(tmp) / KEYS_FILE)
        out["save"] = round(time.perf_counter() - t0, 2)
        out["file_mib"] = round((Path(tmp) / GRAPH_FILE).stat().st_size / 2**20, 1)
        t0 = time.perf_counter()
        LeafGraph.open(Path(tmp), folded.n_leaves, int(q.shape[1]))
        out["open (memory-mapped)"] = round(time.perf_counter() - t0, 3)
    return out


def compare(
    name: str,
    e: np.ndarray,
    q: np.ndarray,
    tree: Tree | None = None,
    vectors: np.ndarray | None = None,
    *,
    with_hnswlib: bool = False,
    store: Checkpoint | None = None,
    order: str = "staggered",
    beams: tuple[int, ...] = BEAMS,
    efs: tuple[int, ...] = EFS,
) -> dict[str, Any]:
    store = store or Checkpoint(None)
    n = e.shape[0]
    row: dict[str, Any] = {"set": name, "n": n, "queries": int(q.shape[0])}
    row["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    truth = exact_truth(e, q, store)
    row["rss_before_builds_mib"] = round(current_rss_mib())
    if tree is None:
        saved = store.arrays("tree")
        if saved is not None:
            tree = Tree(saved["parent"], saved["layer"])
            row.update({k: v for k, v in store.meta().items() if k.startswith("tree_")})
        else:
            reset_peak_rss()
            t0 = time.perf_counter()
            tree = build_tree(e, max_children=40, mode="auto")
            row["tree_build_s"] = round(time.perf_counter() - t0, 1)
    if vectors is None:
        abstracts = [""] * (tree.n_nodes - n)
        vectors = routing_vectors(tree, e, abstracts, IndexConfig(abstracts="none"), None)
        if "tree" not in store.resumed:
            row["tree_build_peak_rss_mib"] = round(peak_rss_mib())
            store.keep_arrays("tree", parent=tree.parent, layer=tree.layer)
            store.note(
                tree_build_s=row["tree_build_s"],
                tree_build_peak_rss_mib=row["tree_build_peak_rss_mib"],
            )
    row["tree_depth"] = len(tree.layer_sizes())
    print(name, n, "tree ready", row.get("tree_build_s"), current_rss_mib(), flush=True)
    graph = store.graph(n)
    if graph is not None:
        row.update({k: v for k, v in store.meta().items() if k.startswith("hnsw_")})
    else:
        reset_peak_rss()
        t0 = time.perf_counter()
        graph = LeafGraph.build(e, threads=os.cpu_count() or 1)
        row["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        row["hnsw_build_peak_rss_mib"] = round(peak_rss_mib())
        row["hnsw_build_threads"] = os.cpu_count()
        store.keep_graph(graph)
        store.note(**{k: v for k, v in row.items() if k.startswith("hnsw_")})
    row["hnsw_library"] = "usearch (f16, exact rescoring)"
    if store.resumed:
        row["resumed"] = list(store.resumed)
    print(name, n, "usearch graph ready", row["hnsw_build_s"], flush=True)
    row["hnsw_update_s"] = graph_upkeep(graph, q)
    ranker = GraphRanker(graph, e, np.arange(n))
    searcher = TreeSearcher(tree, vectors)
    searches: dict[str, Any] = {"exact": lambda v: top_k(e @ v, K)}
    for b in beams:
        searches[f"tree {b}"] = lambda v, b=b: searcher.search(v, k=K, beam=b).leaves
    for ef in efs:
        searches[f"hnsw {ef}"] = lambda v, ef=ef: ranker.rank(v, K, ef)[0]
    if with_hnswlib:
        plain, seconds = hnswlib_search(e)
        row["hnswlib_build_s"] = round(seconds, 1)
        for ef in efs:
            searches[f"hnswlib {ef}"] = lambda v, ef=ef: plain(v, ef)
    with single_thread_blas():
        row["blas_threads_while_timed"] = blas_threads()
        got = timed(searches, q, truth, order=order)
    row["order"] = order
    row["exact"] = got["exact"]
    row["tree"] = {str(b): got[f"tree {b}"] for b in beams}
    row["hnsw"] = {str(ef): got[f"hnsw {ef}"] for ef in efs}
    if with_hnswlib:
        row["hnswlib"] = {str(ef): got[f"hnswlib {ef}"] for ef in efs}
    row["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(row), flush=True)
    return row


def merge_row(rows: dict[tuple[str, int], dict[str, Any]], row: dict[str, Any]) -> None:
    """Put ``row`` in place of an earlier run's row of the same set and size, keeping that
    earlier row under ``earlier`` (a rerun without ``--hnswlib`` must not erase its columns)."""
    key = (row["set"], row["n"])
    before = rows.get(key)
    if before is not None:
        history = before.pop("earlier", [])
        row["earlier"] = [*history, before]
    rows[key] = row


def two_wiki(with_hnswlib: bool) -> dict[str, Any]:
    from _common import MINILM_CACHE, dataset
    from bench_retrieval_variants import load_index, question_vectors

    index = load_index("2wikimultihopqa", {})  # built (and its passages embedded) if missing
    n = index.data.n_leaves
    e = np.asarray(index.data.node_vectors[:n], dtype=np.float32)
    _, questions = dataset("2wikimultihopqa")
    q = question_vectors([x["question"] for x in questions], MINILM_CACHE)
    return compare(
        "2wiki leaf vectors (MiniLM)",
        e,
        q,
        index.data.tree,
        np.asarray(index.data.node_vectors),
        with_hnswlib=with_hnswlib,
    )


def end_to_end() -> dict[str, Any]:
    """Recall@2/5 on 2Wiki and HotpotQA-dev200 of the default (past 6,000 leaves: the index's
    HNSW graph + BM25 when it has one), HNSW + BM25 (ef = the default's beam, 160), the tree
    profile (tree search + BM25) and hybrid (dense flat + BM25), RRF each, with paired
    bootstrap intervals of HNSW + BM25 and of the tree profile against the default. No
    tuning."""
    from _common import MINILM_CACHE, dataset
    from bench_retrieval_variants import load_index, question_vectors

    from psirag import SearchConfig
    from psirag.config import PROFILES
    from psirag.eval.metrics import paired_bootstrap_ci, passage_key, recall_at_k

    configs = {
        "psi default": PROFILES["default"],
        "hnsw + bm25": PROFILES["default"].with_(lists=("hnsw", "bm25")),
        "psi tree profile": PROFILES["tree"],
        "hybrid": SearchConfig(use_tree=False, use_dense=True),
    }
    out: dict[str, Any] = {}
    for name in ("2wikimultihopqa", "hotpotqa-dev200"):
        corpus, questions = dataset(name)
        index = load_index(name, {})
        texts = [c.text for c in index.data.chunks]
        qs = [x["question"] for x in questions]
        vecs = question_vectors(qs, MINILM_CACHE)
        golds = [
            {
                passage_key(corpus[i].get("title"), corpus[i]["text"])
                for i in x["supporting_passage_ids"]
            }
            for x in questions
        ]
        got: dict[str, dict[str, np.ndarray]] = {}
        for label, config in configs.items():
            runs = [
                [texts[i] for i, _ in index.retriever.ranked(v, q, config=config)]
                for q, v in zip(qs, vecs, strict=True)
            ]
            got[label] = {
                f"recall@{k}": 100
                * np.asarray([recall_at_k(r, g, k) for r, g in zip(runs, golds, strict=True)])
                for k in (2, 5)
            }
        ci = paired_bootstrap_ci(
            got["hnsw + bm25"]["recall@5"], got["psi default"]["recall@5"]
        ).to_dict()
        tree_ci = paired_bootstrap_ci(
            got["psi default"]["recall@5"], got["psi tree profile"]["recall@5"]
        ).to_dict()
        out[name] = {
            "questions": len(qs),
            "leaves": index.data.n_leaves,
            "default_has_graph": index.data.leaf_graph is not None,
            "default_minus_tree_profile_r5": {
                k: round(v, 2) for k, v in tree_ci.items() if isinstance(v, float)
            },
            "recall": {
                lb: {m: round(float(v.mean()), 2) for m, v in r.items()} for lb, r in got.items()
            },
            "hnsw_minus_default_r5": {
                k: round(v, 2) for k, v in ci.items() if isinstance(v, float)
            },
        }
        print(name, json.dumps(out[name]), flush=True)
    return out


def equal_latency(row: dict[str, Any]) -> str:
    """For each beam: the best HNSW recall at no more p50 latency, and the verdict."""
    out = []
    for beam, t in row["tree"].items():
        faster = [h for h in row["hnsw"].values() if h["p50"] <= t["p50"]]
        best = max((h["recall@10"] for h in faster), default=None)
        if best is None:
            verdict = "no HNSW setting that fast"
        elif best > t["recall@10"]:
            verdict = "HNSW wins"
        elif best == t["recall@10"]:
            verdict = "tie"
        else:
            verdict = "tree wins"
        out.append(
            f"beam {beam}: tree {t['recall@10']:.3f} at {t['p50']:.2f} ms; "
            f"HNSW at <= that p50: {best}; {verdict}"
        )
    return "; ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--no-2wiki", action="store_true")
    ap.add_argument("--end-to-end", action="store_true", help="also Recall@2/5 of HNSW + BM25")
    ap.add_argument("--hnswlib", action="store_true", help="also a plain hnswlib graph")
    ap.add_argument("--checkpoint", type=Path, help="keep/resume each size's steps here")
    ap.add_argument("--beams", type=int, nargs="+", default=list(BEAMS))
    ap.add_argument("--efs", type=int, nargs="+", default=list(EFS))
    ap.add_argument("--order", choices=ORDERS, default="staggered", help="see timed()")
    args = ap.parse_args()
    path = RESULTS / "tree_vs_hnsw.json"
    old = json.loads(path.read_text()) if path.exists() else {"rows": []}
    rows = {(r["set"], r["n"]): r for r in old["rows"]}
    if not args.no_2wiki:
        merge_row(rows, two_wiki(args.hnswlib))
    for n in args.sizes:
        folder = (
            args.checkpoint / f"n{n}-c{args.clusters}-q{args.queries}" if args.checkpoint else None
        )
        store = Checkpoint(folder)
        e, q = synthetic_set(n, args.clusters, args.queries, store)
        name = f"synthetic, {args.clusters} clusters"
        row = compare(
            name,
            e,
            q,
            with_hnswlib=args.hnswlib,
            store=store,
            order=args.order,
            beams=tuple(args.beams),
            efs=tuple(args.efs),
        )
        merge_row(rows, row)
        del e
        partial = {"rows": list(rows.values()), "machine": machine_info()}
        write_result("tree_vs_hnsw.json", {**old, **partial})  # a later size may not finish
    for r in rows.values():
        r["at_equal_latency"] = equal_latency(r)
        print(r["set"], r["n"], r["at_equal_latency"])
    result: dict[str, Any] = {"rows": list(rows.values()), "machine": machine_info()}
    if args.end_to_end:
        write_result("tree_vs_hnsw.json", {**old, **result})  # the rows, whatever follows
        result["end_to_end"] = end_to_end()
    elif "end_to_end" in old:
        result["end_to_end"] = old["end_to_end"]
    write_result("tree_vs_hnsw.json", result)


if __name__ == "__main__":
    main()
