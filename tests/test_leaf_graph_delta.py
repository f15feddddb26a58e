"""The leaves' HNSW graph, log-structured (issue 24 item 1, with ``psirag[hnsw]``): an immutable
base shared by hard link between generations, the leaves added since as a delta scanned
exactly, removed base leaves as tombstones, folded into a new base past a limit or by
``psirag compact``; and new chunks' insertion points found through it (issue 24 item 5).

What a search returns equals what a graph of all the live leaves gives up to the base's own
approximation: the delta part is exact, removed leaves never come back, a load of a generation
with a delta searches the same, and a SIGKILL at a random moment leaves the old or the new
generation."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder
from support.processes import fork

import psirag.pipeline
import psirag.retrieval.leaf_graph as leaf_graph_module
import psirag.tree.update
from psirag import Index, IndexConfig, SearchConfig
from psirag.living import UpdateSummary, compact_saved
from psirag.retrieval.leaf_graph import LeafGraph, fold_limit, usearch_available

if not usearch_available():  # loads onnxruntime first (see test_retrieval_hnsw.py)
    pytest.skip("usearch is not installed", allow_module_level=True)

WORDS = [f"w{i}" for i in range(200)]
HNSW_ONLY = SearchConfig(lists=("hnsw",), k=10)


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, 8)) + f" tag{seed}x{i}" for i in range(n)]


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _clustered(n: int, seed: int, dim: int = 24) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, dim))
    return _unit(centres[rng.integers(0, 12, n)] + 0.4 * rng.normal(size=(n, dim)))


@pytest.fixture
def small_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Indexes of more than 50 leaves get a graph (6,000 by default: too slow for a test), and
    the fold waits for 40 changed leaves."""
    monkeypatch.setattr(psirag.pipeline, "GRAPH_MIN_LEAVES", 50)
    monkeypatch.setattr(leaf_graph_module, "FOLD_FRACTION", 1.0)
    monkeypatch.setattr(leaf_graph_module, "FOLD_MAX", 40)


# ---------------------------------------------------------------------------- the graph alone
def test_the_delta_part_of_a_search_is_exact_and_a_wide_search_is_exact_overall() -> None:
    """Base of 500 vectors, 150 added as a delta (no fold): with ``ef`` past the base's size
    the top 10 is (nearly: HNSW promises no exact answer, and its multi-threaded build varies)
    the exact top 10 of all 650; at a narrow ``ef`` the delta leaves it returns are the exact
    best of the delta, in order."""
    vectors = _clustered(650, 1)
    graph = LeafGraph.build(vectors[:500]).updated(None, vectors[500:], fold=False)
    assert (graph.n_base, graph.n_delta, graph.n_leaves) == (500, 150, 650)
    queries = _unit(vectors[::13] + 0.2 * np.random.default_rng(2).normal(size=(50, 24)))
    found = 0
    for q in queries:
        exact = np.lexsort((np.arange(650), -(vectors @ q)))[:10]
        wide = graph.search(q, 10, 1000)
        found += len(set(wide.tolist()) & set(exact.tolist()))
        narrow = graph.search(q, 10, 10)
        got = narrow[narrow >= 500]
        delta_rank = 500 + np.argsort(-(vectors[500:] @ q), kind="stable")
        assert got.tolist() == delta_rank[: got.size].tolist()
    assert found >= 0.98 * 10 * len(queries)  # recall@10 of the wide search


def test_removed_leaves_never_come_back() -> None:
    """Tombstoned base leaves and dropped delta leaves are never returned, even searched for
    with their own vectors, before and after a fold."""
    vectors = _clustered(400, 3)
    graph = LeafGraph.build(vectors[:300]).updated(None, vectors[300:], fold=False)
    keep = np.ones(400, dtype=bool)
    keep[np.random.default_rng(4).choice(400, 60, replace=False)] = False
    gone_keys = set(graph.keys[~keep].tolist())
    after = graph.updated(keep, None, fold=False)
    assert after.n_leaves == 340 and after.dead.size == int((~keep[:300]).sum())
    assert after.base is graph.base  # shared, not copied
    for g in (after, after.folded()):
        for v in vectors[~keep]:
            for ef in (10, 400):
                found = g.keys[g.search(v, 10, ef)]
                assert not gone_keys & set(found.tolist())
        # surviving leaves still find themselves first (nearly all: HNSW promises no exact
        # answer, a node can become hard to reach once its neighbours are removed)
        live = vectors[keep]
        sample = range(0, 340, 9)
        itself = sum(int(g.search(live[leaf], 1, 64)[0]) == leaf for leaf in sample)
        assert itself >= 0.9 * len(sample)


def test_a_fold_gives_a_new_base_with_the_same_leaves() -> None:
    vectors = _clustered(300, 5)
    graph = LeafGraph.build(vectors[:200])
    keep = np.ones(200, dtype=bool)
    keep[:3] = False
    small = graph.updated(keep, vectors[200:205])  # 8 changes <= 5% of 202: kept as they are
    assert not small.fold_due and small.changes == 8 and small.base is graph.base
    keep = np.ones(202, dtype=bool)
    keep[:27] = False
    folded = small.updated(keep, vectors[205:300])  # 125 changes > 5% of 270: folded
    assert folded.changes == 0 and folded.base is not graph.base
    assert folded.base.id != graph.base.id and len(folded.graph) == 270
    assert np.array_equal(folded.keys, np.concatenate([np.arange(30, 200), 200 + np.arange(100)]))
    assert fold_limit(1_000_000) == leaf_graph_module.FOLD_MAX
    assert fold_limit(20_000) == 1000


def test_nearest_is_the_exact_nearest_leaf_with_a_wide_search() -> None:
    """HNSW guarantees no exact answer even with ``ef`` past the graph's size (a node may be
    unreachable once others are removed; the build is multi-threaded, so which one varies), so:
    the cosine given is the exact one of the leaf given, nearly every query gets the exact
    nearest leaf, and a query whose nearest leaf is in the delta always does."""
    vectors = _clustered(500, 6)
    graph = LeafGraph.build(vectors[:420]).updated(None, vectors[420:], fold=False)
    keep = np.ones(500, dtype=bool)
    keep[::17] = False
    graph = graph.updated(keep, None, fold=False)
    live = vectors[keep]
    queries = _unit(vectors[::5] + 0.3 * np.random.default_rng(7).normal(size=(100, 24)))
    idx, best = graph.nearest(queries, live, candidates=10, ef=600)
    scores = queries @ live.T
    np.testing.assert_allclose(best, scores[np.arange(100), idx], atol=1e-5)
    exact = best >= scores.max(axis=1) - 1e-5
    assert exact.mean() >= 0.97
    in_delta = np.argmax(scores, axis=1) >= graph.n_base
    assert in_delta.any() and exact[in_delta].all()


# ---------------------------------------------------------------------------- in an index
def _index(folder: Path, n: int = 400) -> Index:
    Index.build(_texts(n, 1), IndexConfig(), embedder=HashEmbedder(), texts=True).save(folder)
    return Index.load(folder, embedder=HashEmbedder())


def _generation(folder: Path) -> Path:
    manifest = json.loads((folder / "manifest.json").read_text())
    return folder / "generations" / f"{manifest['generation']:06d}"


def _queries(index: Index) -> list[str]:
    return [" ".join(c.text.split()[:4]) for c in index.chunks[::37]] + ["w1 w2 w3", "w7 w99"]


def test_an_add_and_a_remove_link_the_base_and_a_load_searches_the_same(
    tmp_path: Path, small_graph: None
) -> None:
    folder = tmp_path / "ix"
    index = _index(folder)
    first = _generation(folder) / "hnsw" / "graph.usearch"
    index.add(_texts(3, 2), texts=True)
    gone = index.documents[5]
    index.remove([gone])
    graph = index.data.leaf_graph
    assert graph is not None and graph.n_delta == 3 and graph.dead.size == 1
    index.save(folder)
    second = _generation(folder) / "hnsw"
    assert (second / "graph.usearch").stat().st_ino == first.stat().st_ino  # hard link
    assert (second / "keys.npy").stat().st_nlink >= 2
    assert np.load(second / "delta.npy").tolist() == graph.delta_keys.tolist()
    assert np.load(second / "dead.npy").tolist() == graph.dead.tolist()
    entry = json.loads((_generation(folder) / "manifest.json").read_text())["leaf_graph"]
    assert entry == {"base": graph.base.id, "dead": 1, "delta": 3}
    loaded = Index.load(folder, embedder=HashEmbedder(), verify="full")
    again = loaded.data.leaf_graph
    assert again is not None and again.base.id == graph.base.id and again.read_only
    assert np.array_equal(again.keys, graph.keys)
    assert np.array_equal(again.delta_vectors, graph.delta_vectors)
    for query in _queries(index):
        for config in (HNSW_ONLY, SearchConfig(exact_dense_leaves=100)):
            want = index.search(query, config=config)
            assert loaded.search(query, config=config) == want
            assert all(p.source.document != gone for p in want)
    # the new chunks are found (exactly: they are the delta)
    for chunk in loaded.chunks[-3:]:
        assert loaded.search(chunk.text, config=HNSW_ONLY)[0].text == chunk.text


def test_results_match_a_graph_of_all_live_leaves(tmp_path: Path, small_graph: None) -> None:
    folder = tmp_path / "ix"
    index = _index(folder)
    for i in range(3):
        index.add(_texts(4, 10 + i), texts=True)
        index.remove([index.documents[7 * i]])
        index.save(folder)
        index = Index.load(folder, embedder=HashEmbedder())
    graph = index.data.leaf_graph
    assert graph is not None and graph.changes and graph.base.read_only
    vectors = np.asarray(index.data.node_vectors[: index.data.n_leaves], dtype=np.float32)
    fresh = LeafGraph.build(vectors)
    rng = np.random.default_rng(0)
    queries = _unit(
        vectors[rng.choice(len(vectors), 40, replace=False)]
        + 0.3 * rng.normal(size=(40, vectors.shape[1]))
    )
    overlap = [
        len(set(graph.search(q, 10, 64).tolist()) & set(fresh.search(q, 10, 64).tolist())) / 10
        for q in queries
    ]
    assert np.mean(overlap) >= 0.9


def test_the_delta_folds_past_the_limit_and_by_compact(tmp_path: Path, small_graph: None) -> None:
    folder = tmp_path / "ix"
    index = _index(folder)
    base_id = index.data.leaf_graph.base.id  # type: ignore[union-attr]
    added = 0
    while index.data.leaf_graph.base.id == base_id:  # type: ignore[union-attr]
        index.add(_texts(5, 100 + added), texts=True)
        added += 5
        assert added <= 45
    graph = index.data.leaf_graph
    assert graph is not None and graph.changes == 0 and added > 40
    before = (_generation(folder) / "hnsw" / "graph.usearch").stat().st_ino
    index.save(folder)
    hnsw = _generation(folder) / "hnsw"
    assert (hnsw / "graph.usearch").stat().st_ino != before  # a new base, written whole
    assert not (hnsw / "delta.npy").exists() and not (hnsw / "dead.npy").exists()
    # psirag compact folds a delta below the limit
    index.add(_texts(2, 999), texts=True)
    index.save(folder)
    assert (
        json.loads((_generation(folder) / "manifest.json").read_text())["leaf_graph"]["delta"] == 2
    )
    want = [index.search(q, config=HNSW_ONLY) for q in _queries(index)]
    compact_saved(folder)
    entry = json.loads((_generation(folder) / "manifest.json").read_text())["leaf_graph"]
    assert entry["delta"] == 0 and entry["dead"] == 0
    compacted = Index.load(folder, embedder=HashEmbedder(), verify="full")
    got = [compacted.search(q, config=HNSW_ONLY) for q in _queries(index)]
    # the folded graph is another approximation of the same leaves: about the same hits
    overlap = [
        len({p.leaf for p in a} & {p.leaf for p in b}) / 10 for a, b in zip(got, want, strict=True)
    ]
    assert np.mean(overlap) >= 0.9
    for chunk in compacted.chunks[-2:]:
        assert compacted.search(chunk.text, config=HNSW_ONLY)[0].text == chunk.text


def test_insertion_points_come_from_the_graph(
    tmp_path: Path, small_graph: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a graph, an add finds each new chunk's nearest leaf through it (no descent, no
    scan of every leaf); the tree is the one the exact scan's insertion points give."""
    folder = tmp_path / "ix"
    index = _index(folder)
    exact = Index.load(folder, embedder=HashEmbedder())
    new = _texts(6, 55)

    def no_descent(*args: object, **kwargs: object) -> None:
        raise AssertionError("descended although the index has a graph")

    monkeypatch.setattr(psirag.tree.update, "descend", no_descent)
    summary = index.add(new, texts=True)
    assert summary.tree.get("by_graph") == summary.chunks_added == 6
    monkeypatch.setattr(LeafGraph, "nearest", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    monkeypatch.setattr(psirag.living, "usearch_available", lambda: False)
    scanned = exact.add(new, texts=True)  # no graph to use: 400 leaves, below descent's size
    assert "by_graph" not in scanned.tree
    assert np.array_equal(index.tree.parent, exact.tree.parent)


# ---------------------------------------------------------------------------- SIGKILL
def test_sigkill_at_random_moments_leaves_the_old_or_the_new_graph(
    tmp_path: Path, small_graph: None
) -> None:
    """Bounded loop: a child adds a document, removes one or compacts (folding the graph), and
    is killed after a random delay; the index then loads (every checksum) with a graph that is
    the old generation's or the new one's, whole."""
    folder = tmp_path / "ix"
    _index(folder, 200)
    emb = HashEmbedder()
    extra = _texts(40, 77)
    rng = random.Random(27)
    timings: dict[str, float] = {}
    outcomes = {"old": 0, "new": 0}
    for i in range(15):
        op = ("add", "remove", "compact")[i % 3]
        before = Index.load(folder, embedder=emb)
        expected = Index.load(folder, embedder=emb)

        def change(ix: Index, op: str = op, i: int = i) -> UpdateSummary:
            if op == "add":
                return ix.add([extra[i]], texts=True)
            return ix.remove([ix.documents[i % len(ix.documents)]])

        if op != "compact":
            change(expected)

        def child(change: Callable[[Index], UpdateSummary] = change, op: str = op) -> None:
            if op == "compact":
                compact_saved(folder)
            else:
                Index.update_saved(folder, change, embedder=emb)

        t0 = time.monotonic()
        pid = fork(child)
        if op not in timings:
            status = os.waitpid(pid, 0)[1]
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            timings[op] = time.monotonic() - t0
        else:
            time.sleep(rng.uniform(0, 1.2 * timings[op]))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        after = Index.load(folder, embedder=emb, verify="full")
        graph = after.data.leaf_graph
        assert graph is not None and graph.n_leaves == len(after.chunks)
        same = after.chunks == before.chunks
        outcomes["old" if same and op != "compact" else "new"] += 1
        want = before if same else expected
        want_graph = want.data.leaf_graph
        assert want_graph is not None and np.array_equal(graph.keys, want_graph.keys)
        if graph.base.id == want_graph.base.id:  # the same base, tombstones and delta
            assert np.array_equal(graph.dead, want_graph.dead)
            assert np.array_equal(graph.delta_keys, want_graph.delta_keys)
            for query in ("w1 w2 w3", extra[i]):
                got = [p.leaf for p in after.search(query, config=HNSW_ONLY)]
                assert got == [p.leaf for p in want.search(query, config=HNSW_ONLY)]
        else:  # folded (a fold inserts on several threads: another graph of the same leaves)
            assert graph.changes == 0
            vectors = np.asarray(after.data.node_vectors[: graph.n_leaves], dtype=np.float32)
            first = after.sparse.first_copy
            sample = range(
                0, graph.n_leaves, 11
            )  # nearly all find themselves (HNSW is approximate)
            itself = sum(
                first[int(graph.search(vectors[leaf], 1, 64)[0])] == first[leaf] for leaf in sample
            )
            assert itself >= 0.9 * len(sample)
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes
    print(f"\nrandom SIGKILL with a graph delta: 15 rounds, {outcomes}")


def test_given_insertion_points_are_checked_and_missing_ones_scanned() -> None:
    from psirag.errors import InputError
    from psirag.tree import build_tree, insert_leaves

    leaves = _clustered(120, 8)
    tree = build_tree(leaves, max_children=6)
    new = _clustered(3, 9)
    scanned = insert_leaves(tree, leaves, new, max_children=6)
    sims = new @ leaves.T
    points = (np.array([-1, int(np.argmax(sims[1])), -1]), sims.max(axis=1))
    given = insert_leaves(tree, leaves, new, max_children=6, nearest=points)
    assert np.array_equal(given.tree.parent, scanned.tree.parent)
    assert given.counts.get("by_graph") == 3
    with pytest.raises(InputError, match="one leaf and one score"):
        insert_leaves(tree, leaves, new, nearest=(points[0][:2], points[1][:2]))
    with pytest.raises(InputError, match="names leaf 500"):
        insert_leaves(tree, leaves, new, nearest=(np.array([0, 500, 1]), points[1]))


def test_a_loaded_base_opens_on_first_search_even_after_its_generation_is_collected(
    tmp_path: Path, small_graph: None
) -> None:
    """A saved base is opened lazily (a removal never reads it; an add does, for its
    insertion points), and opening it after saves removed the generation it was loaded from
    still works and searches as a graph opened at once."""
    folder = tmp_path / "ix"
    _index(folder)
    eager = Index.load(folder, embedder=HashEmbedder())
    assert eager.data.leaf_graph is not None
    assert eager.data.leaf_graph.base.graph is not None  # opened now
    lazy = Index.load(folder, embedder=HashEmbedder())
    first = _generation(folder)
    base = lazy.data.leaf_graph.base if lazy.data.leaf_graph is not None else None
    assert base is not None and not base.opened and base.ndim == eager.data.leaf_graph.base.ndim
    for k in range(3):  # a removal with its save, three times: the first generation goes
        gone = [lazy.documents[3 * k + 1]]
        lazy.remove(gone)
        eager.remove(gone)
        lazy.save(folder)
    assert not first.exists()
    assert not base.opened
    for query in _queries(eager):
        assert lazy.search(query, config=HNSW_ONLY) == eager.search(query, config=HNSW_ONLY)
    assert base.opened and len(base.graph) == base.keys.size
    lazy.add(_texts(2, 20), texts=True)  # an add reads the graph (insertion points)
    eager.add(_texts(2, 20), texts=True)
    assert lazy.search("w1 w2 w3", config=HNSW_ONLY) == eager.search("w1 w2 w3", config=HNSW_ONLY)
