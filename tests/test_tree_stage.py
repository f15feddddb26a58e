"""The tree stage of an update without whole-index passes (issue 24): the counts of leaves
that entered or left each node, read from per-layer ancestor arrays, equal the leaf sets'
symmetric differences, and the working tree's columns give the same tree as before."""

from __future__ import annotations

import numpy as np
import pytest
from support.trees import unit

from psirag.living import _changed_leaves
from psirag.tree import Tree, build_tree, check_invariants, insert_leaves, remove_leaves


def brute_changed(old: Tree, new: Tree, node_map: np.ndarray, nodes: np.ndarray) -> list[int]:
    """The symmetric difference of each node's old and new leaf sets, as Python sets."""
    pre = np.full(new.n_nodes, -1)
    kept = np.flatnonzero(node_map >= 0)
    pre[node_map[kept]] = kept
    out = []
    for u in nodes.tolist():
        now = set(new.leaves_under(u).tolist())
        before = {
            int(node_map[x]) if node_map[x] >= 0 else -1 - x
            for x in old.leaves_under(int(pre[u])).tolist()
        }
        out.append(len(now ^ before))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_changed_leaves_equal_the_leaf_sets_difference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dim = 8
    max_children = 4 if seed % 2 else 6
    vectors = unit(rng.normal(size=(120, dim)))
    tree = build_tree(vectors, max_children=max_children)
    checked = 0
    for step in range(8):
        if step % 2:
            gone = rng.choice(tree.n_leaves, size=int(rng.integers(1, 12)), replace=False)
            update = remove_leaves(tree, gone, vectors, max_children=max_children)
            vectors = np.delete(vectors, gone, axis=0)
        else:
            new = unit(rng.normal(size=(int(rng.integers(1, 15)), dim)))
            update = insert_leaves(tree, vectors, new, max_children=max_children)
            vectors = np.concatenate([vectors, new])
        new_tree = update.tree
        check_invariants(new_tree, max_children)
        pre = np.full(new_tree.n_nodes, -1)
        kept = np.flatnonzero(update.node_map >= 0)
        pre[update.node_map[kept]] = kept
        inner = np.arange(new_tree.n_leaves, new_tree.n_nodes)
        nodes = inner[pre[inner] >= 0]
        got = _changed_leaves(tree, new_tree, update.node_map, nodes, pre[nodes])
        assert got.tolist() == brute_changed(tree, new_tree, update.node_map, nodes)
        checked += int(np.count_nonzero(got))
        tree = new_tree
    assert checked > 0  # some node did change under the updates


def test_leaf_ancestors_are_the_parent_chains() -> None:
    rng = np.random.default_rng(3)
    tree = build_tree(unit(rng.normal(size=(50, 6))), max_children=3)
    anc = tree.leaf_ancestors
    assert anc.shape == (tree.depth, tree.n_leaves)
    for leaf in range(tree.n_leaves):
        u, chain = leaf, []
        while tree.parent[u] >= 0:
            u = int(tree.parent[u])
            chain.append(u)
        assert anc[:, leaf].tolist() == chain


@pytest.mark.parametrize("seed", range(4))
def test_membership_of_equals_the_whole_matrix_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vectors = unit(rng.normal(size=(90, 6)))
    tree = build_tree(vectors, max_children=3 + seed)
    update = insert_leaves(tree, vectors, unit(rng.normal(size=(7, 6))), max_children=3 + seed)
    tree = update.tree  # a tree whose whole matrix was never made
    nodes = np.concatenate([rng.integers(0, tree.n_nodes, 12), update.dirty, [tree.root]])
    rows = tree.membership_of(nodes)
    assert "leaf_membership" not in tree.__dict__
    whole = tree.leaf_membership[nodes]
    assert np.array_equal(rows.indptr, whole.indptr)
    assert np.array_equal(rows.indices, whole.indices)
    assert rows.dtype == whole.dtype and rows.shape == whole.shape
    x = rng.normal(size=(tree.n_leaves, 6)).astype(np.float32)
    assert np.array_equal(np.asarray(rows @ x), np.asarray(whole @ x))  # the same sums, bit for bit
