"""The ann and bucketed tree modes (SPEC 4, paper App. E.1): exact when the neighbourhood covers
every pair, valid trees otherwise, joins found by ANN queries only, buckets of bounded size built
as independent jobs, and the choice of ``auto``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.trees import check_invariants, clustered_unit, random_unit, unit

from psirag import Index, IndexConfig
from psirag.cli import build_parser
from psirag.errors import InputError
from psirag.tree import ann, build_tree, machine, similarity_matrix, spanning_edges
from psirag.tree import bucket as bucket_module
from psirag.tree import build as build_module
from psirag.tree.ann import component_joins, spanning_edges_ann
from psirag.tree.bucket import BucketJob, build_bucket, split_buckets
from psirag.tree.rebalance import renumber, split_overfull

needs_hnswlib = pytest.mark.skipif(find_spec("hnswlib") is None, reason="psirag[ann] missing")


def exact_edges(e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return spanning_edges(similarity_matrix(e))


def edge_set(a: np.ndarray, b: np.ndarray) -> set[tuple[int, int]]:
    return set(zip(a.tolist(), b.tolist(), strict=True))


def test_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # import hnswlib now raises ImportError
    e = random_unit(np.random.default_rng(0), 20, 8)
    with pytest.raises(InputError, match=r"pip install 'psirag\[ann\]'"):
        build_tree(e, mode="ann")
    with pytest.raises(InputError, match="hnswlib"):
        spanning_edges_ann(e, 4)


@needs_hnswlib
@pytest.mark.parametrize("seed", range(4))
def test_neighbourhood_of_all_rows_gives_the_exact_edges(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 80))
    e = random_unit(rng, n, 8)
    a, b, s = exact_edges(e)
    for k in (n - 1, n, n + 25):  # k >= n is clamped, never an error
        ka, kb, ks = spanning_edges_ann(e, k)
        assert np.array_equal(ka, a) and np.array_equal(kb, b)
        np.testing.assert_allclose(ks, s, atol=1e-6)


@needs_hnswlib
@pytest.mark.parametrize("max_children", [None, 3, 40])
def test_ann_tree_with_large_k_is_the_exact_tree(max_children: int | None) -> None:
    e = clustered_unit(np.random.default_rng(7), 150, 16, 5)
    exact = build_tree(e, max_children=max_children)
    approx = build_tree(e, max_children=max_children, mode="ann", neighbors=149)
    assert np.array_equal(approx.parent, exact.parent)
    assert np.array_equal(approx.layer, exact.layer)


@needs_hnswlib
def test_small_k_recovers_most_exact_edges_and_keeps_invariants() -> None:
    e = clustered_unit(np.random.default_rng(3), 1500, 24, 12)
    a, b, s = exact_edges(e)
    ka, kb, ks = spanning_edges_ann(e, 8)
    assert ka.size == e.shape[0] - 1
    assert (ka < kb).all()
    shared = len(edge_set(a, b) & edge_set(ka, kb)) / a.size
    assert shared >= 0.95
    assert ks.sum() <= s.sum() + 1e-3  # never above the maximum spanning tree
    assert ks.sum() >= 0.99 * s.sum()
    for max_children in (3, 40):
        check_invariants(build_tree(e, max_children, mode="ann", neighbors=8), 1500, max_children)


@needs_hnswlib
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("mode", ["ann", "bucketed"])
def test_corpora_of_one_and_two_chunks(n: int, mode: str) -> None:
    e = random_unit(np.random.default_rng(0), n, 6)
    tree = build_tree(e, mode=mode, neighbors=5, bucket_size=2)  # type: ignore[arg-type]
    check_invariants(tree, n, 40)
    assert tree.layer_sizes() == ([1] if n == 1 else [2, 1])
    a, _, _ = spanning_edges_ann(e, 3)
    assert a.size == n - 1


def well_separated(rng: np.random.Generator, sizes: Sequence[int], dim: int = 16) -> np.ndarray:
    """Tight clusters far apart: each row's few nearest neighbours stay in its own cluster."""
    centres = unit(rng.normal(size=(len(sizes), dim)))
    rows = [unit(c + 0.05 * rng.normal(size=(m, dim))) for c, m in zip(centres, sizes, strict=True)]
    return np.concatenate(rows)


def brute_best_cross(e: np.ndarray, labels: np.ndarray, comp: int) -> float:
    inside, outside = np.flatnonzero(labels == comp), np.flatnonzero(labels != comp)
    return float((e[inside] @ e[outside].T).max())


@needs_hnswlib
@pytest.mark.parametrize("sample_path", [False, True])
def test_component_joins_propose_near_best_cross_pairs(
    monkeypatch: pytest.MonkeyPatch, sample_path: bool
) -> None:
    """Small components query all rows; large ones (forced here by a lower bound) go through the
    sample index and a refinement. Either way each proposal crosses components and is close to
    the best cross similarity found by brute force."""
    if sample_path:
        monkeypatch.setattr(ann, "FULL_QUERY_ROWS", 8)
    rng = np.random.default_rng(11)
    sizes = [40, 60, 25, 80]
    e = well_separated(rng, sizes)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    a, b, s = component_joins(ann.HnswIndex(e), labels)
    assert a.size == len(sizes)
    assert (labels[a] != labels[b]).all()
    best = {c: brute_best_cross(e, labels, c) for c in range(len(sizes))}
    assert len(set(zip(a.tolist(), b.tolist(), strict=True))) >= 2
    for x, y, sim in zip(a.tolist(), b.tolist(), s.tolist(), strict=True):
        owners = {int(labels[x]), int(labels[y])}
        assert any(sim >= best[c] - (0.05 if sample_path else 1e-5) for c in owners)
    # the joined spanning tree is connected and near the exact maximum
    ka, _, ks = spanning_edges_ann(e, 3)
    xs = exact_edges(e)[2]
    assert ka.size == e.shape[0] - 1
    assert ks.sum() >= 0.995 * xs.sum()


@needs_hnswlib
def test_ann_is_deterministic() -> None:
    e = clustered_unit(np.random.default_rng(5), 800, 16, 6)
    one, two = spanning_edges_ann(e, 6), spanning_edges_ann(e, 6)
    for x, y in zip(one, two, strict=True):
        assert np.array_equal(x, y)


# ---- bucketing ----


def test_split_buckets_bounds_cover_and_separate() -> None:
    rng = np.random.default_rng(2)
    e = well_separated(rng, [120, 90, 200, 60])
    labels = np.repeat(np.arange(4), [120, 90, 200, 60])
    buckets = split_buckets(e, 100)
    assert all(b.size <= 100 for b in buckets)
    allrows = np.concatenate(buckets)
    assert np.array_equal(np.sort(allrows), np.arange(e.shape[0]))
    # k-means keeps well-separated clusters apart: each bucket is one cluster only
    assert all(np.unique(labels[b]).size == 1 for b in buckets)
    assert split_buckets(e, 100)[0].tolist() == buckets[0].tolist()  # deterministic


def test_split_buckets_of_identical_rows_ends() -> None:
    e = unit(np.ones((50, 4)))
    buckets = split_buckets(e, 7)
    assert all(b.size <= 7 for b in buckets)
    assert sum(b.size for b in buckets) == 50


@pytest.mark.parametrize("size", [1, 0, True, 2.5])
def test_bad_bucket_size(size: object) -> None:
    e = random_unit(np.random.default_rng(0), 10, 4)
    with pytest.raises(InputError, match="bucket size"):
        split_buckets(e, size)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_children", [None, 40])
def test_bucket_larger_than_corpus_is_the_exact_tree(max_children: int | None) -> None:
    e = clustered_unit(np.random.default_rng(1), 300, 16, 5)
    bucketed = build_tree(e, max_children, mode="bucketed", bucket_size=10_000)
    exact = build_tree(e, max_children)
    assert np.array_equal(bucketed.parent, exact.parent)
    assert np.array_equal(bucketed.layer, exact.layer)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("max_children", [None, 3, 8])
def test_bucketed_tree_invariants(seed: int, max_children: int | None) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    e = clustered_unit(rng, n, 12, 6)
    tree = build_tree(e, max_children, mode="bucketed", bucket_size=int(rng.integers(2, 60)))
    check_invariants(tree, n, max_children)


def test_bucketed_groups_clusters_and_is_deterministic_across_workers() -> None:
    rng = np.random.default_rng(4)
    sizes = [150, 150, 150, 150]
    e = well_separated(rng, sizes)
    labels = np.repeat(np.arange(4), sizes)
    inline = build_tree(e, 40, mode="bucketed", bucket_size=64, workers=1)
    pooled = build_tree(e, 40, mode="bucketed", bucket_size=64, workers=2)
    assert np.array_equal(inline.parent, pooled.parent)
    assert np.array_equal(inline.layer, pooled.layer)
    check_invariants(inline, e.shape[0], 40)
    # each cluster has its own subtree: the parents of its leaves hold no other cluster's leaves
    for node in np.unique(inline.parent[: e.shape[0]]).tolist():
        assert np.unique(labels[inline.leaves_under(node)]).size == 1


def test_buckets_are_jobs_for_any_runner() -> None:
    """The unit of parallel work is a plain job; a runner (local pool, Ray) only maps it."""
    e = clustered_unit(np.random.default_rng(6), 200, 8, 4)
    seen: list[BucketJob] = []

    def runner(jobs: Sequence[BucketJob]) -> list[tuple[np.ndarray, np.ndarray]]:
        seen.extend(jobs)
        return [build_bucket(job) for job in reversed(jobs)][::-1]

    parent, layer = bucket_module.build_bucketed(e, bucket_size=50, runner=runner)
    assert sum(job.vectors.shape[0] for job in seen) == 200
    assert all(job.vectors.shape[0] <= 50 for job in seen)
    ref_parent, ref_layer = bucket_module.build_bucketed(e, bucket_size=50, workers=1)
    assert np.array_equal(parent, ref_parent) and np.array_equal(layer, ref_layer)


@needs_hnswlib
def test_bucket_jobs_can_use_ann_inside() -> None:
    e = clustered_unit(np.random.default_rng(8), 300, 8, 4)
    parent, layer = bucket_module.build_bucketed(
        e, bucket_size=120, inner_mode="ann", neighbors=6, max_children=None
    )
    tree = renumber(parent, layer, 300)
    check_invariants(tree, 300, None)


# ---- auto, config, CLI ----


def test_auto_chooses_by_size_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    resolve = build_module.resolve_tree_mode
    assert resolve("auto", 1000) == "exact"
    assert resolve("auto", build_module.AUTO_EXACT_MAX + 1) == "bucketed"
    monkeypatch.setattr(machine, "available_memory_bytes", lambda: 4 * 100 * 100)
    assert resolve("auto", 1000) == "knn"  # the matrix does not fit, still small
    for mode in ("exact", "knn", "ann", "bucketed"):
        assert resolve(mode, 10) == mode


def test_config_and_cli_accept_the_new_modes() -> None:
    for mode in build_module.TREE_MODES:
        assert IndexConfig(tree_mode=mode).tree_mode == mode  # type: ignore[arg-type]
        args = build_parser().parse_args(["index", "docs", "--out", "x", "--tree-mode", mode])
        assert args.tree_mode == mode
    with pytest.raises(SystemExit):
        build_parser().parse_args(["index", "docs", "--out", "x", "--tree-mode", "hnsw"])


@pytest.mark.parametrize("size", [1, True, "big"])
def test_config_rejects_bad_bucket_sizes(size: object) -> None:
    with pytest.raises(InputError, match="tree_bucket_size"):
        IndexConfig(tree_bucket_size=size)  # type: ignore[arg-type]


def test_index_records_the_mode_used_and_the_bucket_size(
    tmp_path: Path, topic_texts: list[str]
) -> None:
    config = IndexConfig(tree_mode="bucketed", tree_bucket_size=4, max_children=3)
    index = Index.build(topic_texts, config, embedder=HashEmbedder(), texts=True)
    assert index.stats.tree_mode == "bucketed"
    check_invariants(index.tree, len(topic_texts), 3)
    hits = index.search("volcano lava ash eruption", k=3)
    assert {h.source.document for h in hits} <= {str(i) for i in range(len(TOPICS["volcanoes"]))}
    index.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert manifest["tree_mode_used"] == "bucketed"
    assert manifest["config"]["tree_bucket_size"] == 4
    loaded = Index.load(tmp_path / "ix", embedder=HashEmbedder())
    assert loaded.config == config


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_children", [2, 3, 5])
def test_rebalance_sums_on_demand_as_a_full_table_does(seed: int, max_children: int) -> None:
    """The rebalance computes a node's sum only when a split needs it, yet splits exactly as
    the same loop given every node's sum up front (a float64 table summed bottom-up)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 300))
    e = clustered_unit(rng, n, 8, 5) if seed % 2 else random_unit(rng, n, 8)
    raw = build_tree(e, max_children=None)
    table = np.zeros((raw.n_nodes, e.shape[1]), dtype=np.float64)
    table[:n] = e
    for node in raw.nodes_bottom_up().tolist():
        if raw.parent[node] >= 0:
            table[raw.parent[node]] += table[node]
    parent, layer = split_overfull(raw.parent.tolist(), raw.layer.tolist(), table, max_children)
    reference = renumber(np.asarray(parent), np.asarray(layer, dtype=np.int64), n)
    on_demand = build_module.rebalance(raw, e, max_children)
    assert on_demand.fan_out.max() <= max_children < raw.fan_out.max()
    assert np.array_equal(on_demand.parent, reference.parent)
    assert np.array_equal(on_demand.layer, reference.layer)
