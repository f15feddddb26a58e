"""The tree stage of an update without whole-index passes (issue 24): the counts of leaves
that entered or left each node, read from per-layer ancestor arrays, equal the leaf sets'
symmetric differences, and the working tree's columns give the same tree as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import HashEmbedder
from support.trees import unit

from psirag import Index, IndexConfig
from psirag.living import _changed_leaves, compact_saved
from psirag.tree import (
    Tree,
    build_forest,
    build_tree,
    check_invariants,
    insert_leaves,
    remove_leaves,
)


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
        want = brute_changed(tree, new_tree, update.node_map, nodes)
        got = _changed_leaves(tree, new_tree, update.node_map, nodes, pre[nodes])
        assert got.tolist() == want
        # and from the moved nodes alone (what an update uses: no pass over every leaf)
        assert update.moved is not None
        local = _changed_leaves(tree, new_tree, update.node_map, nodes, pre[nodes], update.moved)
        assert local.tolist() == want
        checked += int(np.count_nonzero(got))
        tree = new_tree
    assert checked > 0  # some node did change under the updates


def _random_updates(seed: int, steps: int = 10) -> list[tuple[Tree, Any]]:
    """(old tree, update) pairs of a random add/remove sequence: small fan-outs (so nodes
    split, re-home and roots drop), batch and single insertions."""
    rng = np.random.default_rng(seed)
    dim = 6
    max_children = [2, 3, 4, 6][seed % 4]
    vectors = unit(rng.normal(size=(int(rng.integers(20, 90)), dim)))
    tree = build_tree(vectors, max_children=max_children)
    out = []
    for step in range(steps):
        if step % 3 == 2 and tree.n_leaves > 2:
            gone = rng.choice(tree.n_leaves, int(rng.integers(1, tree.n_leaves // 2 + 1)), False)
            update = remove_leaves(tree, gone, vectors, max_children=max_children)
            vectors = np.delete(vectors, gone, axis=0)
        else:
            new = unit(rng.normal(size=(int(rng.integers(1, 25)), dim)))
            rule = ["auto", "single", "batch"][step % 3]
            update = insert_leaves(tree, vectors, new, max_children=max_children, rule=rule)
            vectors = np.concatenate([vectors, new])
        out.append((tree, update))
        tree = update.tree
    return out


@pytest.mark.parametrize("seed", range(12))
def test_an_update_patches_the_children_table_and_names_the_moved_nodes(seed: int) -> None:
    """The new tree's children table, laid out from the old one's by the change, is the one
    a fresh tree of the same arrays makes; ``moved`` is exactly the new nodes and the nodes
    whose parent changed."""
    splits = 0
    for old, update in _random_updates(seed):
        new = update.tree
        fresh = Tree(new.parent.copy(), new.layer.copy())
        for got, want in zip(new.children_table, fresh.children_table, strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        pre = np.full(new.n_nodes, -1)
        kept = np.flatnonzero(update.node_map >= 0)
        pre[update.node_map[kept]] = kept
        was_parent = np.where(pre >= 0, old.parent[np.maximum(pre, 0)], -1)
        mapped = np.where(was_parent >= 0, update.node_map[np.maximum(was_parent, 0)], -1)
        brute = np.flatnonzero((pre < 0) | (mapped != new.parent))
        assert update.moved is not None and update.moved.tolist() == brute.tolist()
        splits += update.counts.get("split", 0)
    assert splits > 0 or seed % 4 == 3  # the small fan-outs split nodes


def test_the_splits_of_the_wide_nodes_alone_equal_the_splits_over_every_node() -> None:
    """:func:`split_wide_nodes` told which nodes are wide (what an update knows) splits
    them, and the parents they overfill, as the loop over every node does."""
    from psirag.tree.rebalance import SubtreeSums, children_lists, split_wide_nodes

    rng = np.random.default_rng(7)
    for trial in range(20):
        vectors = unit(rng.normal(size=(int(rng.integers(30, 160)), 5)))
        tree = build_tree(vectors, max_children=8)
        parent, layer = tree.parent.tolist(), tree.layer.tolist()
        # pile some leaves under one node, and some layer-1 nodes under one layer-2 node
        n = tree.n_leaves
        for u in rng.choice(n, int(rng.integers(5, n // 2)), replace=False).tolist():
            parent[u] = parent[0]
        ones = [u for u in range(n, len(layer)) if layer[u] == 1]
        if tree.depth >= 2:
            for u in ones[: int(rng.integers(1, len(ones) + 1))]:
                parent[u] = parent[ones[0]]
        full_p, full_l = list(parent), list(layer)
        kids = children_lists(full_p)
        split_wide_nodes(full_p, full_l, kids, SubtreeSums(kids, leaf_vectors=vectors), 3)
        wide: dict[int, list[int]] = {}
        for u, k in enumerate(children_lists(parent)):
            if len(k) > 3:
                wide.setdefault(layer[u], []).append(u)
        kids = children_lists(parent)
        sums = SubtreeSums(kids, leaf_vectors=vectors)
        split_wide_nodes(parent, layer, kids, sums, 3, wide=wide)
        assert (parent, layer) == (full_p, full_l), trial


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


@pytest.mark.parametrize("forest", [False, True])
def test_leaf_rows_of_any_nodes_equal_the_membership_rows(forest: bool) -> None:
    """One descent for many nodes (what a removal's re-homing and the dirty nodes' rows read)
    gives each node's leaves in ascending order, leaves and roots included, in a forest too."""
    rng = np.random.default_rng(11)
    vectors = unit(rng.normal(size=(140, 6)))
    if forest:
        tree = build_forest(vectors, rng.integers(0, 5, 140), max_children=3)
        assert tree.roots.size > 1
    else:
        tree = build_tree(vectors, max_children=3)
    nodes = np.concatenate([rng.integers(0, tree.n_nodes, 40), tree.roots, [0]])
    indptr, leaves = tree.leaf_rows(nodes)
    rows = tree.membership_of(nodes)  # made from leaf_rows: the whole matrix was not made
    whole = tree.leaf_membership[nodes]
    assert np.array_equal(indptr, whole.indptr) and np.array_equal(leaves, whole.indices)
    assert np.array_equal(rows.indptr, whole.indptr)
    assert np.array_equal(rows.indices, whole.indices)
    for u in nodes.tolist():
        assert tree.leaves_below(u).tolist() == tree.leaves_under(u).tolist()


NODE_TABLES = ("leaf_vectors", "leaf_parent", "inner_vectors", "inner_abstracts")


def _node_bytes_of_one_add(folder: Path, n_docs: int) -> tuple[int, int, int]:
    """Bytes the save after a one-document add writes for the node tables' rows, and for the
    whole-array tree files (inner order, parents, layers), and the inner nodes after it."""
    emb = HashEmbedder()
    texts = [
        f"{('volcano lava ash', 'river delta silt', 'bread dough oven')[i % 3]} passage {i} "
        f"with Word{i} and Name{i % 7}."
        for i in range(n_docs)
    ]
    Index.build(texts, IndexConfig(max_children=6), texts=True, embedder=emb).save(folder)
    index = Index.load(folder, embedder=emb)
    before = {p.stat().st_ino for p in folder.rglob("*") if p.is_file()}
    index.add(["Lava and ash near the volcano, Word9000 said."], texts=True)
    index.save(folder)
    rows = tree = 0
    for p in folder.rglob("*"):
        if not p.is_file() or p.stat().st_ino in before:
            continue
        if p.parent.name == "seg" and p.name.split(".")[0] in NODE_TABLES:
            rows += p.stat().st_size
        elif p.parent.name == "tree":
            tree += p.stat().st_size
    return rows, tree, index.tree.n_nodes - index.tree.n_leaves


def test_a_one_document_save_writes_node_rows_by_the_change(tmp_path: Path) -> None:
    """Inner nodes keep their saved rows across an add (only new and changed ones are
    appended), and the leaves' rows are appended: the node tables' bytes do not grow with the
    index (a save that rewrote them would write 8x more at 8x the chunks)."""
    small_rows, _, _ = _node_bytes_of_one_add(tmp_path / "small", 150)
    big_rows, big_tree, inner = _node_bytes_of_one_add(tmp_path / "big", 1200)
    assert small_rows > 0
    assert big_rows < 2 * small_rows + 4096, (small_rows, big_rows)
    # the whole-array tree files: three small ints per inner node (order, parent, layer),
    # not one per leaf, nor any vector
    assert big_tree <= 3 * 8 * inner + 3 * 128, (big_tree, inner)


def _nodes_by_id(index: Index) -> dict[int, tuple[frozenset[str], str, bytes]]:
    """Each inner node by its stable id: its leaves' chunk ids, its abstract, its vector."""
    data = index.data
    tree, n = data.tree, data.tree.n_leaves
    ids, _ = data.stable_ids()
    assert np.unique(ids).size == ids.size  # one node per id
    out = {}
    for u in range(n, tree.n_nodes):
        leaves = frozenset(data.chunks[x].id for x in tree.leaves_under(u).tolist())
        out[int(ids[u - n])] = (leaves, data.abstracts[u - n], data.node_vectors[u].tobytes())
    return out


def _check_ids_kept(before: dict[int, Any], after: dict[int, Any], next_before: int) -> int:
    """Every node an update left as it was keeps its id; every other one has a new id."""
    id_of = {node: i for i, node in before.items()}
    kept = 0
    for i, node in after.items():
        if node in id_of:
            assert i == id_of[node], "an unchanged node got another id"
            kept += 1
        else:
            assert i >= next_before, f"a new or changed node reuses id {i}"
    return kept


def test_inner_nodes_keep_their_ids_through_adds_removes_saves_and_loads(tmp_path: Path) -> None:
    """Stable node ids (issue 24): tree ids are positions and move with every appended leaf,
    the stable ids do not; a save appends the new nodes' rows in id order, so a load gives the
    very ids the updated value had."""
    emb = HashEmbedder()
    texts = [
        f"{('volcano lava ash', 'river delta silt', 'bread dough oven')[i % 3]} passage {i} "
        f"with Word{i} and Name{i % 7}."
        for i in range(150)
    ]
    index = Index.build(texts, IndexConfig(max_children=5), texts=True, embedder=emb)
    folder = tmp_path / "ix"
    index.save(folder)
    for loaded in (False, True):
        if loaded:
            index = Index.load(folder, embedder=emb)
        before, next_id = _nodes_by_id(index), index.data.stable_ids()[1]
        n_before = index.tree.n_leaves
        index.add(["Lava and ash near the volcano, Word9000 said."], texts=True)
        after = _nodes_by_id(index)
        kept = _check_ids_kept(before, after, next_id)
        assert 0 < kept < len(after)  # some nodes changed, most did not
        tree_ids_moved = index.tree.n_leaves != n_before  # what the stable ids are for
        assert tree_ids_moved
        before, next_id = after, index.data.stable_ids()[1]
        index.remove([index.documents[4]])
        after = _nodes_by_id(index)
        assert 0 < _check_ids_kept(before, after, next_id) < len(after)
        if loaded:
            index.save(folder)
            assert _nodes_by_id(Index.load(folder, embedder=emb)) == after
            compact_saved(folder)  # rows are renumbered, ids are not
            assert _nodes_by_id(Index.load(folder, embedder=emb)) == after


def test_an_index_saved_without_ids_takes_its_rows_as_ids(tmp_path: Path) -> None:
    """A format-3 index saved before the ids were (the fixture of test_storage_format) loads
    with its saved rows as ids, keeps them through an add and saves them."""
    import shutil

    folder = tmp_path / "v3"
    shutil.copytree(Path(__file__).parent / "data" / "index_format_v3", folder)
    emb = HashEmbedder(16)
    index = Index.load(folder, embedder=emb)
    ids, next_id = index.data.stable_ids()
    assert index.data.inner_rows is not None
    assert np.array_equal(ids, index.data.inner_rows[1]) and next_id > ids.max()
    before = _nodes_by_id(index)
    index.add(["Lava again, Etna said."], texts=True)
    after = _nodes_by_id(index)
    _check_ids_kept(before, after, next_id)  # a tiny tree: its few nodes may all change
    index.save(folder)
    assert _nodes_by_id(Index.load(folder, embedder=emb)) == after
