"""Insertion points found by descending the tree (issue 24 item 5): a beam descent over the
routing vectors instead of a comparison with every leaf. It must find the scan's answer when the
beam covers everything, nearly always find it (or a leaf as similar) with the default beam, and
still work when some inner rows are out of date."""

from __future__ import annotations

import numpy as np
import pytest
from support.trees import check_invariants as independent_check
from support.trees import clustered_unit, routing_vectors, unit

from psirag.errors import InputError
from psirag.tree import build_tree, check_invariants, insert_leaves
from psirag.tree.update import INSERT_BEAM, descend


def scan(queries: np.ndarray, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sims = queries @ leaves.T
    best = np.argmax(sims, axis=1)
    return best, sims[np.arange(sims.shape[0]), best]


def near(rng: np.random.Generator, base: np.ndarray, m: int, noise: float) -> np.ndarray:
    rows = rng.integers(0, base.shape[0], m)
    return unit(base[rows] + noise * rng.normal(size=(m, base.shape[1])))


@pytest.mark.parametrize("seed", range(6))
def test_a_beam_wider_than_every_layer_finds_the_scans_leaf(seed: int) -> None:
    rng = np.random.default_rng(seed)
    leaves = clustered_unit(rng, int(rng.integers(50, 400)), 12, 6)
    tree = build_tree(leaves, max_children=int(rng.choice([3, 8, 40])))
    nodes = routing_vectors(tree, leaves)
    queries = near(rng, leaves, 30, 0.3)
    got, got_sim = descend(tree, nodes, queries, beam=tree.n_nodes)
    want, want_sim = scan(queries, leaves)
    np.testing.assert_allclose(got_sim, want_sim, rtol=1e-5)
    assert (got == want).mean() > 0.95  # ties aside, the very same leaf


def test_the_default_beam_finds_the_nearest_leaf_for_nearly_every_chunk() -> None:
    rng = np.random.default_rng(3)
    leaves = clustered_unit(rng, 6000, 32, 60)
    tree = build_tree(leaves, max_children=40)
    assert tree.depth >= 3  # so the beam prunes something
    nodes = routing_vectors(tree, leaves)
    queries = near(rng, leaves, 300, 0.4)
    got, got_sim = descend(tree, nodes, queries, beam=INSERT_BEAM)
    want, want_sim = scan(queries, leaves)
    assert (got_sim <= want_sim + 1e-5).all()
    np.testing.assert_allclose(got_sim, (queries * leaves[got]).sum(axis=1), rtol=1e-5)
    assert (got == want).mean() >= 0.9
    assert (want_sim - got_sim).mean() < 0.01
    # a narrow beam misses more: the beam is what buys the accuracy
    narrow, _ = descend(tree, nodes, queries, beam=1)
    assert (narrow == want).mean() < (got == want).mean()


def test_stale_inner_rows_are_rebuilt_from_their_children() -> None:
    rng = np.random.default_rng(4)
    leaves = clustered_unit(rng, 800, 16, 10)
    tree = build_tree(leaves, max_children=6)
    nodes = routing_vectors(tree, leaves)
    queries = near(rng, leaves, 40, 0.3)
    exact, _ = descend(tree, nodes, queries, beam=4)
    # an update's new nodes have no routing vector yet: zero rows, listed as stale
    inner = np.arange(tree.n_leaves, tree.n_nodes)
    stale = rng.choice(inner, inner.size // 3, replace=False)
    broken = nodes.copy()
    broken[stale] = 0.0
    with_stale, _ = descend(tree, broken, queries, beam=4, stale=stale)
    blind, _ = descend(tree, broken, queries, beam=4)
    assert (with_stale == exact).mean() >= 0.9
    assert (with_stale == exact).mean() > (blind == exact).mean()


def test_insertion_by_descent_places_a_chunk_under_its_nearest_leafs_parent() -> None:
    rng = np.random.default_rng(5)
    leaves = clustered_unit(rng, 3000, 16, 30)
    tree = build_tree(leaves, max_children=40)
    nodes = routing_vectors(tree, leaves)
    target = 1234
    new = unit(leaves[target : target + 1] + 0.001 * rng.normal(size=(1, 16)))
    update = insert_leaves(tree, leaves, new, node_vectors=nodes, scan_below=0)
    assert update.counts == {"descended": 1, "single": 1}
    check_invariants(update.tree, 40)
    independent_check(update.tree, tree.n_leaves + 1, 40)
    leaf = int(update.new_leaves[0])
    parent = int(tree.parent[target])
    if tree.fan_out[parent] < 40:  # else the parent was split and the leaf went to one half
        assert update.tree.parent[leaf] == update.node_map[parent]


def test_small_trees_and_no_node_vectors_keep_the_scan() -> None:
    rng = np.random.default_rng(6)
    leaves = clustered_unit(rng, 200, 8, 4)
    tree = build_tree(leaves, max_children=10)
    new = near(rng, leaves, 3, 0.2)
    nodes = routing_vectors(tree, leaves)
    assert "descended" not in insert_leaves(tree, leaves, new, node_vectors=nodes).counts
    assert "descended" not in insert_leaves(tree, leaves, new, scan_below=0).counts


def test_descent_input_errors_are_clear() -> None:
    rng = np.random.default_rng(7)
    leaves = clustered_unit(rng, 50, 8, 3)
    tree = build_tree(leaves, max_children=10)
    nodes = routing_vectors(tree, leaves)
    new = near(rng, leaves, 2, 0.2)
    with pytest.raises(InputError, match="node_vectors must have shape"):
        insert_leaves(tree, leaves, new, node_vectors=nodes[:-1], scan_below=0)
    with pytest.raises(InputError, match="beam must be at least 1"):
        insert_leaves(tree, leaves, new, node_vectors=nodes, scan_below=0, beam=0)
