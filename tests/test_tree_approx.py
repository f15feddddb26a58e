"""The approximate (kNN) tree mode of SPEC 4: exact when k covers every pair, a valid tree and a
near-maximal spanning tree otherwise, in block-bounded memory, wired through config, index and
CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.trees import check_invariants, clustered_unit, random_unit, unit

from psirag import Index, IndexConfig
from psirag.cli import build_parser
from psirag.errors import InputError, ResourceError
from psirag.eval.methods import abstract_key
from psirag.tree import approx, build_tree, machine, similarity_matrix, spanning_edges
from psirag.tree import build as build_module
from psirag.tree.approx import best_cross_pairs, knn_candidates, spanning_edges_knn


def exact_ties(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit rows with four entries of +-0.5 in 8 dimensions, many duplicated: every dot product
    is exact in float32 whatever the summation order, so tied pairs are tied in both builds."""
    x = np.zeros((n, 8), dtype=np.float32)
    for row in x:
        cols = rng.choice(8, size=4, replace=False)
        row[cols] = rng.choice([-0.5, 0.5], size=4)
    x[rng.integers(0, n, size=n // 3)] = x[rng.integers(0, n, size=n // 3)]
    return x


def exact_edges(e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return spanning_edges(similarity_matrix(e))


@pytest.mark.parametrize("seed", range(6))
def test_full_neighbourhood_gives_the_exact_edges_in_walk_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 70))
    e = random_unit(rng, n, 8) if seed % 2 else exact_ties(rng, n)
    a, b, s = exact_edges(e)
    ka, kb, ks = spanning_edges_knn(e, n - 1)
    assert np.array_equal(ka, a) and np.array_equal(kb, b)
    np.testing.assert_allclose(ks, s, atol=1e-6)
    ka, kb, _ = spanning_edges_knn(e, n + 10)  # more neighbours than rows: the same
    assert np.array_equal(ka, a) and np.array_equal(kb, b)


@pytest.mark.parametrize("seed", range(4))
def test_one_neighbour_and_join_passes_are_boruvka_and_exact(seed: int) -> None:
    """k = 1: every nearest-neighbour pair is a spanning-tree edge and the joins, over many
    passes with rescans of stale rows only, are Borůvka's algorithm: the exact edges again."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 90))
    e = exact_ties(rng, n) if seed % 2 else random_unit(rng, n, 8)
    a, b, _ = exact_edges(e)
    ka, kb, _ = spanning_edges_knn(e, 1, block_rows=7)
    assert np.array_equal(ka, a) and np.array_equal(kb, b)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("max_children", [None, 3])
def test_knn_tree_with_full_neighbourhood_is_the_exact_tree(
    seed: int, max_children: int | None
) -> None:
    rng = np.random.default_rng(seed)
    n = 60
    e = exact_ties(rng, n) if seed == 2 else clustered_unit(rng, n, 12, 4)
    exact = build_tree(e, max_children=max_children)
    knn = build_tree(e, max_children=max_children, mode="knn", neighbors=n - 1)
    assert np.array_equal(knn.parent, exact.parent)
    assert np.array_equal(knn.layer, exact.layer)


def test_disconnected_neighbour_graph_is_joined_by_the_best_cross_pair() -> None:
    rng = np.random.default_rng(4)
    centre = unit(rng.normal(size=(1, 16)))[0]
    left = unit(centre * 6 + rng.normal(size=(12, 16)))
    right = unit(-centre * 6 + rng.normal(size=(9, 16)))
    e = np.vstack([left, right])
    n, side = e.shape[0], np.r_[np.zeros(12, bool), np.ones(9, bool)]
    ca, cb, _ = knn_candidates(e, 2)
    assert not (side[ca] != side[cb]).any(), "the 2-NN graph has no cross pair"

    a, b, s = spanning_edges_knn(e, 2)
    assert a.size == n - 1 and (a < b).all()
    assert np.array_equal(np.lexsort((b, a, -s)), np.arange(n - 1)), "walk order"
    cross = np.flatnonzero(side[a] != side[b])
    assert cross.size == 1
    sims = e[:12] @ e[12:].T
    i, j = np.unravel_index(np.argmax(sims), sims.shape)
    assert (a[cross[0]], b[cross[0]]) == (i, 12 + j)

    tree = build_tree(e, max_children=None, mode="knn", neighbors=2)
    check_invariants(tree, n, None)


def test_one_pass_joins_each_component_by_its_best_pair() -> None:
    e = random_unit(np.random.default_rng(9), 30, 6)
    labels = np.arange(30) % 3
    a, b, s = best_cross_pairs(e, labels, block_rows=4)
    sim = similarity_matrix(e)
    for comp in range(3):
        inside, outside = labels == comp, labels != comp
        best = sim[np.ix_(inside, outside)].max()
        mine = [(x, y, v) for x, y, v in zip(a, b, s, strict=True) if inside[x] or inside[y]]
        assert any(abs(v - best) < 1e-6 for _, _, v in mine)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("k", [1, 2, 5])
def test_small_k_gives_a_valid_near_maximal_tree(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 120))
    e = clustered_unit(rng, n, 16, 6)
    a, b, s = spanning_edges_knn(e, k)
    assert a.size == n - 1 and (a < b).all()
    assert len({*a.tolist(), *b.tolist()}) == n
    _, _, exact_s = exact_edges(e)
    total, best = float(s.sum(dtype=np.float64)), float(exact_s.sum(dtype=np.float64))
    assert total <= best + 1e-4  # nothing beats the maximum spanning tree
    assert total >= best - 0.02 * abs(best)  # and on clustered data the kNN tree comes close
    tree = build_tree(e, max_children=3 + 2 * seed, mode="knn", neighbors=k)
    check_invariants(tree, n, 3 + 2 * seed)


def test_candidates_hold_each_rows_nearest_neighbours() -> None:
    e = random_unit(np.random.default_rng(1), 50, 8)
    a, b, s = knn_candidates(e, 3)
    assert (a < b).all() and np.unique(a * 50 + b).size == a.size
    sim = similarity_matrix(e)
    np.testing.assert_allclose(s, sim[a, b], atol=1e-6)
    np.fill_diagonal(sim, -np.inf)
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    for row in range(50):
        for col in np.argsort(-sim[row])[:3].tolist():
            assert (min(row, col), max(row, col)) in pairs


def test_blocks_bound_memory_without_changing_results(monkeypatch: pytest.MonkeyPatch) -> None:
    e = clustered_unit(np.random.default_rng(2), 120, 16, 5)
    big = knn_candidates(e, 4)
    big_edges = spanning_edges_knn(e, 2)
    monkeypatch.setattr(approx, "BLOCK_BYTES", 1)  # one row per block: a 1 x n slab
    assert approx._block_rows(120, None) == 1
    small = knn_candidates(e, 4)
    small_edges = spanning_edges_knn(e, 2)
    for x, y in zip((*big, *big_edges), (*small, *small_edges), strict=True):
        assert np.array_equal(x, y)
    monkeypatch.undo()
    n = 1_000_000  # the default budget: rows x n x 12 bytes within 256 MiB, never n x n
    assert approx._block_rows(n, None) * n * 12 <= approx.BLOCK_BYTES


def test_pair_similarities_gather_rows_within_the_block_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """n·k candidate pairs must not copy n·k·d floats at once (gigabytes at 100k chunks)."""
    import tracemalloc

    rng = np.random.default_rng(3)
    e = random_unit(rng, 2_000, 64)
    a, b = rng.integers(0, 2_000, 200_000), rng.integers(0, 2_000, 200_000)
    expected = np.einsum("ij,ij->i", e[a[:1000]], e[b[:1000]])
    monkeypatch.setattr(approx, "BLOCK_BYTES", 2**20)
    tracemalloc.start()
    try:
        s = approx.pair_similarity(e, a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(s[:1000], expected)
    # the result (0.8 MB) plus one budget of gathered rows; all at once would be 102 MB
    assert peak < s.nbytes + 2 * 2**20


def test_ties_at_the_kth_neighbour_go_to_the_smallest_column() -> None:
    e = unit(np.array([[1, 0], [1, 0], [1, 0], [1, 0], [0, 1]], dtype=np.float32))
    a, b, _ = knn_candidates(e, 1)
    # rows 0-3 tie: each keeps its smallest other column; row 4 ties with 0-3 and keeps 0
    assert set(zip(a.tolist(), b.tolist(), strict=True)) == {(0, 1), (0, 2), (0, 3), (0, 4)}


def test_modes_and_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    e = random_unit(np.random.default_rng(0), 100, 4)
    with pytest.raises(InputError, match="one of auto, exact, knn, ann, bucketed"):
        build_tree(e, mode="fast")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="tree neighbours must be a positive integer"):
        build_tree(e, mode="knn", neighbors=0)
    with pytest.raises(InputError, match="exact mode"):
        build_tree(e, mode="knn", similarity=similarity_matrix(e))
    with pytest.raises(ValueError, match="at least 1"):
        spanning_edges_knn(e, 0)
    monkeypatch.setattr(machine, "available_memory_bytes", lambda: 4 * 100 * 100)
    with pytest.raises(ResourceError, match="--tree-mode knn"):
        build_tree(e)
    auto = build_tree(e, mode="auto", neighbors=5)  # the matrix does not fit: knn
    knn = build_tree(e, mode="knn", neighbors=5)
    assert np.array_equal(auto.parent, knn.parent)
    assert build_module.resolve_tree_mode("auto", 100) == "knn"
    assert build_module.resolve_tree_mode("auto", 70) == "exact"
    assert build_tree(e[:1], mode="knn").n_nodes == 1
    groups = np.arange(100) % 4
    forest = build_module.build_forest(e, groups, max_children=3, mode="knn", neighbors=3)
    assert forest.roots.size == 4


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tree_mode": "hnsw"}, "tree_mode must be one of auto, exact, knn, ann, bucketed"),
        ({"tree_neighbors": 0}, "tree_neighbors must be a positive integer"),
        ({"tree_neighbors": 2.5}, "tree_neighbors must be a positive integer"),
    ],
)
def test_config_rejects_bad_tree_settings(changes: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        IndexConfig(**changes)


def test_config_keeps_a_numpy_neighbour_count_as_a_plain_int() -> None:
    config = IndexConfig(tree_neighbors=np.int64(8))
    assert type(config.tree_neighbors) is int and config.tree_neighbors == 8
    assert json.loads(json.dumps(config.to_dict()))["tree_neighbors"] == 8


def test_cache_keys_of_default_configs_stay_as_before() -> None:
    before = [
        "embedder",
        "chunk_tokens",
        "split_records",
        "tree_per_document",
        "max_children",
        "abstracts",
        "llm",
        "context_tokens",
        "max_keywords",
        "routing",
        "routing_blend",
        "batch_size",
        "bm25_k1",
        "bm25_b",
    ]
    config = IndexConfig()
    key = abstract_key(config)
    later = ("tree_mode", "tree_neighbors", "tree_bucket_size")
    old = {k: v for k, v in config.to_dict().items() if k not in later}
    old["batch_size"] = 16  # the default before "the backend's own" (None): keys stay as before
    assert config.batch_size is None
    assert key == old and list(key) == before
    assert abstract_key(IndexConfig(batch_size=8))["batch_size"] == 8
    assert abstract_key(IndexConfig(tree_mode="knn"))["tree_mode"] == "knn"
    assert abstract_key(IndexConfig(tree_neighbors=8))["tree_neighbors"] == 8
    assert abstract_key(IndexConfig(tree_bucket_size=64))["tree_bucket_size"] == 64
    assert abstract_key(IndexConfig(tree_mode="exact")) != key


def test_index_in_knn_mode_end_to_end(tmp_path: Path, topic_texts: list[str]) -> None:
    config = IndexConfig(tree_mode="knn", tree_neighbors=2, max_children=3)
    index = Index.build(topic_texts, config, embedder=HashEmbedder(), texts=True)
    check_invariants(index.tree, len(topic_texts), 3)
    hits = index.search("volcano lava ash eruption", k=3)
    volcano_docs = {str(i) for i in range(len(TOPICS["volcanoes"]))}
    assert {h.source.document for h in hits} <= volcano_docs
    assert index.stats.tree_mode == "knn"
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["tree_mode_used"] == "knn"
    assert manifest["config"]["tree_mode"] == "knn"
    assert manifest["config"]["tree_neighbors"] == 2
    loaded = Index.load(tmp_path / "idx", embedder=HashEmbedder())
    assert loaded.stats.tree_mode == "knn" and loaded.config == config
    default = Index.build(topic_texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert default.stats.tree_mode == "exact"  # auto, and the matrix fits
    forest = Index.build(
        topic_texts,
        IndexConfig(tree_per_document=True, tree_mode="knn"),
        embedder=HashEmbedder(),
        texts=True,
    )
    assert forest.stats.tree_mode == "knn"


def test_cli_flags_reach_the_index_config() -> None:
    from psirag.cli.eval_cmd import _index_config

    parser = build_parser()
    args = parser.parse_args(["index", "x", "--out", "y"])
    assert (args.tree_mode, args.tree_neighbors) == ("auto", 32)
    args = parser.parse_args(
        ["index", "x", "--out", "y", "--tree-mode", "knn", "--tree-neighbors", "8"]
    )
    assert (args.tree_mode, args.tree_neighbors) == ("knn", 8)
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "x", "--out", "y", "--tree-neighbors", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "x", "--out", "y", "--tree-mode", "hnsw"])
    assert _index_config(parser.parse_args(["eval", "d"])) is None
    config = _index_config(parser.parse_args(["eval", "d", "--tree-mode", "knn"]))
    assert config is not None and config.tree_mode == "knn" and config.tree_neighbors == 32
