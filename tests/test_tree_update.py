"""Tree updates (SPEC 4): random add/remove sequences keep every invariant of ``build_tree``,
the id map and dirty set say exactly what changed, and the edge cases fail clearly."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from support.trees import check_invariants as independent_check
from support.trees import routing_vectors, unit

from psirag.errors import IndexFormatError, InputError
from psirag.tree import (
    RebuildRule,
    Tree,
    TreeUpdate,
    build_forest,
    build_tree,
    check_invariants,
    insert_leaves,
    remove_leaves,
    tree_drift,
)
from psirag.tree.update import RehomeHint, cosine_scores


def clustered(rng: np.random.Generator, centers: np.ndarray, n: int, noise: float) -> np.ndarray:
    labels = rng.integers(0, centers.shape[0], n)
    return unit(centers[labels] + noise * rng.normal(size=(n, centers.shape[1])))


def leaf_set(tree: Tree, node: int) -> frozenset[int]:
    return frozenset(tree.leaves_under(node).tolist())


def check_update(
    old: Tree, update: TreeUpdate, removed: np.ndarray, added: int, max_children: int | None
) -> None:
    """Both invariant checkers, then what the id map and the dirty set promise."""
    new = update.tree
    n_kept = old.n_leaves - removed.size
    check_invariants(new, max_children)
    independent_check(new, n_kept + added, max_children)
    # old leaves keep their relative order as ids 0 .. n_kept-1, new leaves follow
    keep = np.setdiff1d(np.arange(old.n_leaves), removed)
    assert np.array_equal(update.node_map[keep], np.arange(n_kept))
    assert (update.node_map[removed] == -1).all()
    assert np.array_equal(update.new_leaves, np.arange(n_kept, n_kept + added))
    # the map is one-to-one and keeps layers
    mapped = update.node_map[update.node_map >= 0]
    assert np.unique(mapped).size == mapped.size
    kept_old = np.flatnonzero(update.node_map >= 0)
    assert np.array_equal(old.layer[kept_old], new.layer[update.node_map[kept_old]])
    # a node outside the dirty set has the very same subtree (leaf set and children) as before
    pre = np.full(new.n_nodes, -1)
    pre[mapped] = kept_old
    dirty = set(update.dirty.tolist())
    assert all(new.layer[u] > 0 for u in dirty)
    for u in range(new.n_leaves, new.n_nodes):
        if u in dirty:
            continue
        o = int(pre[u])
        assert o >= 0, f"new node {u} is not marked dirty"
        assert frozenset(pre[new.leaves_under(u)].tolist()) == leaf_set(old, o)
        assert sorted(pre[new.children(u)].tolist()) == sorted(old.children(o).tolist())
    # dirty is closed upwards: an ancestor of a changed node changed
    for u in dirty:
        p = int(new.parent[u])
        assert p < 0 or p in dirty
    # and holds nothing else: a dirty node is new, has other children, or a dirty child
    for u in dirty:
        o = int(pre[u])
        kids = new.children(u)
        assert (
            o < 0
            or sorted(pre[kids].tolist()) != sorted(old.children(o).tolist())
            or any(int(k) in dirty for k in kids.tolist())
        ), f"node {u} is marked dirty but did not change"


@pytest.mark.parametrize("seed", range(200))
def test_random_update_sequences_keep_invariants(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dim = int(rng.integers(6, 17))
    centers = rng.normal(size=(int(rng.integers(2, 7)), dim)) * 3
    noise = float(rng.choice([0.3, 1.0, 2.0]))
    caps: list[int | None] = [2, 3, 4, 6, 40, None]
    max_children = caps[int(rng.integers(0, len(caps)))]
    vectors = clustered(rng, centers, int(rng.integers(1, 60)), noise)
    tree = build_tree(vectors, max_children=max_children)
    for _ in range(int(rng.integers(1, 21))):
        step = rng.choice(["single", "batch", "remove"])
        n = tree.n_leaves
        if step == "remove" and n > 1:
            removed = np.sort(rng.choice(n, int(rng.integers(1, n)), replace=False))
            update = remove_leaves(tree, removed, vectors, max_children=max_children)
            check_update(tree, update, removed, 0, max_children)
            vectors = np.delete(vectors, removed, axis=0)
        else:
            m = 1 if step == "single" else int(rng.integers(2, 30))
            pool = centers if rng.random() < 0.7 else rng.normal(size=(2, dim)) * 3
            new = clustered(rng, pool, m, noise)
            rule = str(rng.choice(["auto", "single", "batch"]))
            # odd seeds find insertion points by descent over leaf-mean routing vectors
            nodes = routing_vectors(tree, vectors) if seed % 2 else None
            update = insert_leaves(
                tree,
                vectors,
                new,
                max_children=max_children,
                rule=rule,
                node_vectors=nodes,
                scan_below=0,
            )
            check_update(tree, update, np.empty(0, dtype=np.int64), m, max_children)
            vectors = np.vstack([vectors, new])
        tree = update.tree


def test_check_invariants_catches_broken_trees() -> None:
    good = build_tree(unit(np.random.default_rng(0).normal(size=(30, 5))), max_children=4)
    check_invariants(good, 4)
    with pytest.raises(IndexFormatError, match="max_children=3"):
        check_invariants(good, 3)
    n = good.n_leaves
    # a leaf hung two layers up: leaves at unequal depths
    top = int(good.root)
    parent = good.parent.copy()
    parent[0] = top
    with pytest.raises(IndexFormatError, match="one layer above"):
        check_invariants(Tree(parent=parent, layer=good.layer.copy()), None)
    # a second root
    parent = good.parent.copy()
    parent[int(np.flatnonzero(good.layer == good.depth - 1)[0])] = -1
    with pytest.raises(IndexFormatError, match="2 roots"):
        check_invariants(Tree(parent=parent, layer=good.layer.copy()), None)
    check_invariants(Tree(parent=parent, layer=good.layer.copy()), None, forest=True)
    # an abstract node with no child
    empty = Tree(parent=np.append(good.parent, top), layer=np.append(good.layer, good.depth - 1))
    order = np.argsort(empty.layer, kind="stable")  # keep ids ordered by layer
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    p = empty.parent[order]
    empty = Tree(parent=np.where(p >= 0, new_id[np.maximum(p, 0)], -1), layer=empty.layer[order])
    with pytest.raises(IndexFormatError, match="without children"):
        check_invariants(empty, None)
    # leaves not first
    with pytest.raises(IndexFormatError, match=r"0 \.\. n_leaves-1"):
        check_invariants(Tree(parent=good.parent[::-1].copy(), layer=good.layer[::-1].copy()))
    assert n == 30


def test_single_chunk_goes_under_its_most_similar_leafs_parent() -> None:
    rng = np.random.default_rng(1)
    e = unit(rng.normal(size=(120, 16)))
    tree = build_tree(e, max_children=40)
    target = 17
    new = unit(e[target : target + 1] + 0.01 * rng.normal(size=(1, 16)))
    update = insert_leaves(tree, e, new, max_children=40)
    leaf = int(update.new_leaves[0])
    old_parent = int(tree.parent[target])
    if tree.fan_out[old_parent] < 40:
        assert update.tree.parent[leaf] == update.node_map[old_parent]
        ancestors = []
        x = int(update.tree.parent[leaf])
        while x >= 0:
            ancestors.append(x)
            x = int(update.tree.parent[x])
        assert sorted(ancestors) == update.dirty.tolist()  # only the path to the root changed
    assert update.counts == {"single": 1}


def test_batch_as_tall_as_the_main_tree_gets_a_new_root() -> None:
    e = unit(np.array([[1.0, 0.1, 0.0], [1.0, -0.1, 0.0]]))
    tree = build_tree(e)
    new = unit(np.array([[0.0, 0.1, 1.0], [0.0, -0.1, 1.0]]))
    update = insert_leaves(tree, e, new, rule="batch")
    t = update.tree
    assert t.depth == 2 and t.layer_sizes() == [4, 2, 1]
    assert sorted(leaf_set(t, int(c)) for c in t.children(t.root)) == sorted(
        [frozenset({0, 1}), frozenset({2, 3})]
    )
    assert update.counts == {"batch": 2, "subtrees": 1}


def test_auto_rule_builds_a_subtree_for_a_new_topic_and_single_inserts_the_rest() -> None:
    rng = np.random.default_rng(2)
    old_centers = rng.normal(size=(4, 32)) * 3
    e = clustered(rng, old_centers, 200, 0.5)
    tree = build_tree(e, max_children=10)
    near = unit(e[:5] + 0.05 * rng.normal(size=(5, 32)))  # next to indexed leaves
    topic = unit(rng.normal(size=(1, 32)) * 3 + 0.3 * rng.normal(size=(12, 32)))  # a new topic
    update = insert_leaves(tree, e, np.vstack([near, topic]), max_children=10)
    assert update.counts["single"] == 5
    assert update.counts["batch"] == 12 and update.counts["subtrees"] == 1
    # the new topic sits in subtrees of its own: its lowest abstract nodes hold only new leaves
    t = update.tree
    topic_leaves = update.new_leaves[5:]
    for leaf in topic_leaves.tolist():
        assert set(t.leaves_under(int(t.parent[leaf])).tolist()) <= set(topic_leaves.tolist())
    check_update(tree, update, np.empty(0, dtype=np.int64), 17, 10)
    single = insert_leaves(tree, e, np.vstack([near, topic]), max_children=10, rule="single")
    assert single.counts["single"] == 17


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("rule", ["auto", "single", "batch"])
@pytest.mark.parametrize("m", [1, 2, 7])
def test_insert_into_tiny_trees(n: int, rule: str, m: int) -> None:
    rng = np.random.default_rng(n * 10 + m)
    e = unit(rng.normal(size=(n, 4)))
    tree = build_tree(e, max_children=2)
    new = unit(rng.normal(size=(m, 4)))
    update = insert_leaves(tree, e, new, max_children=2, rule=rule)  # type: ignore[arg-type]
    check_update(tree, update, np.empty(0, dtype=np.int64), m, 2)


@pytest.mark.parametrize("max_children", [2, 3, 40])
def test_remove_all_but_one_or_two(max_children: int) -> None:
    rng = np.random.default_rng(max_children)
    e = unit(rng.normal(size=(50, 6)))
    tree = build_tree(e, max_children=max_children)
    one = remove_leaves(tree, np.arange(1, 50), e, max_children=max_children)
    assert one.tree.parent.tolist() == [-1] and one.tree.layer.tolist() == [0]
    assert one.dirty.size == 0 and one.node_map[0] == 0
    two = remove_leaves(tree, np.arange(2, 50), e, max_children=max_children)
    check_update(tree, two, np.arange(2, 50), 0, max_children)
    assert two.tree.layer_sizes() == [2, 1]
    # and the survivors can grow again
    grown = insert_leaves(two.tree, e[:2], e[10:20], max_children=max_children)
    check_update(two.tree, grown, np.empty(0, dtype=np.int64), 10, max_children)


def test_remove_bad_ids_fail_clearly_and_change_nothing() -> None:
    e = unit(np.random.default_rng(3).normal(size=(10, 4)))
    tree = build_tree(e)
    before = tree.parent.copy()
    with pytest.raises(InputError, match="empty tree"):
        remove_leaves(tree, np.arange(10), e)
    with pytest.raises(InputError, match=r"unknown leaf ids \[10\]"):
        remove_leaves(tree, [3, 10], e)
    with pytest.raises(InputError, match="unknown leaf ids"):
        remove_leaves(tree, [-1], e)
    with pytest.raises(InputError, match="more than once"):
        remove_leaves(tree, [2, 2], e)
    with pytest.raises(InputError, match="integers"):
        remove_leaves(tree, np.array([1.5]), e)
    with pytest.raises(InputError, match="9 rows"):
        remove_leaves(tree, [1], e[:9])
    assert np.array_equal(tree.parent, before)
    nothing = remove_leaves(tree, [], e)
    assert np.array_equal(nothing.tree.parent, tree.parent) and nothing.dirty.size == 0


def test_insert_bad_input_fails_clearly() -> None:
    rng = np.random.default_rng(4)
    e = unit(rng.normal(size=(10, 4)))
    tree = build_tree(e)
    with pytest.raises(InputError, match="3 dimensions"):
        insert_leaves(tree, e, unit(rng.normal(size=(2, 3))))
    with pytest.raises(InputError, match="NaN"):
        insert_leaves(tree, e, np.array([[np.nan, 1, 0, 0]]))
    with pytest.raises(InputError, match="insert rule"):
        insert_leaves(tree, e, e[:1], rule="often")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="max_children"):
        insert_leaves(tree, e, e[:1], max_children=1)
    forest = build_forest(e, np.array([0] * 5 + [1] * 5))
    with pytest.raises(InputError, match="forest of 2 trees"):
        insert_leaves(forest, e, e[:1])


def test_remove_from_a_forest_keeps_each_tree_valid() -> None:
    rng = np.random.default_rng(5)
    e = unit(rng.normal(size=(60, 6)))
    groups = np.repeat(np.arange(3), 20)
    forest = build_forest(e, groups, max_children=3)
    gone = np.concatenate([np.arange(0, 20), np.arange(20, 40, 2)])  # tree 0 entirely
    update = remove_leaves(forest, gone, e, max_children=3)
    t = update.tree
    check_invariants(t, 3, forest=True)
    assert t.roots.size == 2 and t.n_leaves == 30
    # no leaf changed trees: the survivors of a tree share one root
    top = np.arange(t.n_leaves)
    while (t.parent[top] >= 0).any():
        top = np.where(t.parent[top] >= 0, t.parent[top], top)
    left = np.setdiff1d(np.arange(60), gone)
    for g in (1, 2):
        assert np.unique(top[groups[left] == g]).size == 1


def test_drift_is_zero_against_itself_and_grows_with_scrambling() -> None:
    rng = np.random.default_rng(6)
    e = clustered(rng, rng.normal(size=(5, 16)) * 3, 300, 0.7)
    fresh = build_tree(e, max_children=10)
    same = tree_drift(fresh, fresh, e)
    assert same["kept_pairs_layer1"] == 1.0 and same["placement_ratio"] == 1.0
    scrambled = Tree(
        parent=np.concatenate([rng.permutation(fresh.parent[:300]), fresh.parent[300:]]),
        layer=fresh.layer.copy(),
    )
    far = tree_drift(scrambled, fresh, e)
    assert far["kept_pairs_layer1"] < 0.5 and far["placement_ratio"] < 0.99


def test_rebuild_rule() -> None:
    rule = RebuildRule(max_churn=0.2)
    assert not rule.due(1000, 100, 50) and rule.due(1000, 150, 50)
    with pytest.raises(InputError, match="max_churn"):
        RebuildRule(max_churn=0)


def test_dirty_with_siblings_adds_the_abstract_siblings_of_dirty_nodes() -> None:
    rng = np.random.default_rng(7)
    e = unit(rng.normal(size=(200, 8)))
    tree = build_tree(e, max_children=6)
    update = insert_leaves(tree, e, unit(e[:1] + 0.01), max_children=6)
    t, wide = update.tree, set(update.dirty_with_siblings.tolist())
    assert set(update.dirty.tolist()) < wide
    for u in update.dirty.tolist():
        p = int(t.parent[u])
        if p >= 0:
            assert set(t.children(p).tolist()) <= wide
    assert all(t.layer[u] > 0 for u in wide)


def test_batch_groups_small_graph_matches_scipy_components() -> None:
    """The union-find that joins a few new chunks' groups (no scipy import) gives the
    components scipy gives, on random graphs with isolated nodes and long chains."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from psirag.tree.update import _components

    rng = np.random.default_rng(5)
    for m, links in [(1, 0), (7, 0), (30, 12), (60, 200), (200, 150)]:
        rows = rng.integers(0, m, links)
        cols = rng.integers(0, m, links)
        ours = _components(m, rows, cols)
        graph = coo_matrix((np.ones(links), (rows, cols)), shape=(m, m))
        _, theirs = connected_components(graph, directed=False)
        # the same partition: equal labels exactly where scipy's are equal
        assert np.array_equal(ours[:, None] == ours[None, :], theirs[:, None] == theirs[None, :])
    chain = np.arange(99)
    assert np.unique(_components(100, chain[::-1], chain[::-1] + 1)).size == 1


def test_children_table_is_each_parents_children_in_node_order() -> None:
    rng = np.random.default_rng(9)
    n_leaves, n_inner = 500, 40
    parent = np.concatenate(
        [rng.integers(n_leaves, n_leaves + n_inner, n_leaves), np.full(n_inner, -1)]
    )
    parent[n_leaves : n_leaves + n_inner - 1] = n_leaves + n_inner - 1
    tree = Tree(
        parent=parent, layer=np.r_[np.zeros(n_leaves), np.ones(n_inner - 1), 2].astype(np.int32)
    )
    for node in range(tree.n_nodes):
        assert tree.children(node).tolist() == np.flatnonzero(parent == node).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_leaf_counts_are_the_leaves_below_each_node(seed: int) -> None:
    from support.trees import random_tree

    tree = random_tree(40 + 17 * seed, 3)
    below = np.zeros(tree.n_nodes, dtype=np.int64)
    for leaf in range(tree.n_leaves):  # walk each leaf up to its root
        u = leaf
        while u >= 0:
            below[u] += 1
            u = int(tree.parent[u])
    assert np.array_equal(tree.leaf_counts, below)


@pytest.mark.parametrize("seed", range(3))
def test_an_updates_leaf_sums_are_scipys_product_to_the_bit(seed: int) -> None:
    """The routing means of an update's few nodes, summed without scipy, are the floats of
    ``membership_of(nodes) @ leaf_vectors`` (what a full recompute's product gives), also
    for leaves with -0.0 components; past the bound the sum is scipy's product itself."""
    from support.trees import random_tree

    from psirag import pipeline

    tree = random_tree(300 + 50 * seed, seed, max_children=4)
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(tree.n_leaves, 8)).astype(np.float32)
    vectors[::7, 2] = -0.0
    nodes = np.arange(tree.n_leaves, tree.n_nodes)
    expected = np.asarray(tree.membership_of(nodes) @ vectors)
    got = pipeline._leaf_sums(tree, nodes, vectors)
    assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
    ptr, leaves = tree.membership_rows(nodes)
    assert np.array_equal(ptr, tree.membership_of(nodes).indptr)
    assert np.array_equal(leaves, tree.membership_of(nodes).indices)


def test_leaf_sums_past_the_bound_are_scipys_product(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.trees import random_tree

    from psirag import pipeline

    tree = random_tree(120, 3)
    vectors = np.random.default_rng(3).normal(size=(tree.n_leaves, 8)).astype(np.float32)
    nodes = np.arange(tree.n_leaves, tree.n_nodes)
    monkeypatch.setattr(pipeline, "_SUMMED_IN_NUMPY", 10)
    got = pipeline._leaf_sums(tree, nodes, vectors)
    assert got.tobytes() == np.asarray(tree.membership_of(nodes) @ vectors).tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_a_removals_sum_reads_are_scipys_product_to_the_bit(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_Sums.read`` of a few nodes adds their leaves itself, without importing scipy (a
    removal's first re-home paid the import), to the floats of the sparse product it made
    before (leaves with -0.0 components too); past the bound it is that product."""
    from support.trees import random_tree

    from psirag.tree import update as upd

    tree = random_tree(300 + 50 * seed, seed, max_children=4)
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(tree.n_leaves, 8)).astype(np.float32)
    vectors[::7, 2] = -0.0
    vectors[::5] = -0.0
    nodes = [int(u) for u in rng.permutation(np.arange(tree.n_leaves, tree.n_nodes))[:9]]
    monkeypatch.setattr(upd, "SUMS_IN_NUMPY", 0)
    expected = upd._Sums(tree, vectors).read(nodes)
    assert len(nodes) <= upd.SUMS_NODES_IN_NUMPY
    monkeypatch.undo()
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "scipy.sparse", None)  # an import of it raises
        got = upd._Sums(tree, vectors).read(nodes)
    assert got.dtype == expected.dtype == np.float64
    assert got.tobytes() == expected.tobytes()
    ptr, leaves = tree.leaf_rows(nodes)
    assert (
        got.tobytes()
        == np.asarray(tree.membership_of(nodes) @ vectors.astype(np.float64)).tobytes()
    )
    assert leaves.size > 0 and ptr.size == len(nodes) + 1


# ------------------------------------------------------------------ re-home target


def _rot(angle: float, dim: int = 3) -> np.ndarray:
    v = np.zeros(dim)
    v[0], v[1] = np.cos(angle), np.sin(angle)
    return v


def _four_pairs(b: list[np.ndarray], c: list[np.ndarray], d: list[np.ndarray]) -> Tree:
    """Leaves 0-1 under A (9), 2-3 under B (10), 4-5 under C (11), 6-8 under D (12); A and
    B under P (13), C and D under Q (14), both under the root (15). ``b``, ``c`` and ``d``
    are only checked for their sizes (the leaves' vectors are the caller's)."""
    assert len(b) == 2 and len(c) == 2 and len(d) == 3
    parent = [9, 9, 10, 10, 11, 11, 12, 12, 12, 13, 13, 14, 14, 15, 15, -1]
    layer = [0] * 9 + [1] * 4 + [2, 2, 3]
    return Tree(np.array(parent, dtype=np.int64), np.array(layer, dtype=np.int32))


def _rehome_target(vectors: np.ndarray, b: list, c: list, d: list, removed: list[int]) -> int:
    """Remove ``removed`` (leaf 1 among them: A keeps leaf 0 alone) and return the old id of
    the layer-1 node leaf 0 was re-homed under (P, left with that node, then re-homes it
    under Q, and the root, left with Q, goes)."""
    tree = _four_pairs(b, c, d)
    update = remove_leaves(tree, removed, vectors, max_children=None)
    assert update.counts.get("rehomed") == 2  # A's leaf 0, then P's one child left (under Q)
    new = update.tree
    got = int(new.parent[update.node_map[0]])
    (old,) = np.flatnonzero(update.node_map == got)
    return int(old)


@pytest.mark.parametrize("eps", [3e-7, 1e-7, 1e-8, 1e-9, -1e-9, -1e-8, -1e-7, -3e-7])
def test_the_rehome_target_is_the_exact_best_in_a_near_tie(eps: float) -> None:
    """B's and C's leaf means are at cosines about 0.9 and 0.9 + eps from leaf 0: the re-home
    goes to the one the float64 leaf sums of the (float32) leaves score higher, even where
    float32 (the stored routing vectors' precision) cannot tell them apart."""
    tb, tc = np.arccos(0.9), np.arccos(0.9 + eps)
    b = [_rot(tb + 0.3), _rot(tb - 0.3)]
    c = [_rot(tc + 0.5), _rot(tc - 0.5)]
    d = [_rot(2.0), _rot(2.2), _rot(2.4)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *c, *d]).astype(np.float32)
    # the reference: float64 sums of the leaves as stored (float32), over their norms
    sums = vectors.astype(np.float64)[[2, 4]] + vectors.astype(np.float64)[[3, 5]]
    score = sums @ vectors[0].astype(np.float64) / np.linalg.norm(sums, axis=1)
    gap = float(score[1] - score[0])
    assert 1e-14 < abs(gap) < 1e-6  # a near tie, still ordered in float64
    if abs(eps) >= 1e-7:  # above the leaves' own float32 rounding: the order eps says
        assert (gap > 0) == (eps > 0)
    assert _rehome_target(vectors, b, c, d, [1]) == (11 if gap > 0 else 10)


def test_the_rehome_target_of_an_exact_tie_is_the_lowest_id() -> None:
    """B and C hold the same vectors: the same score, and the first candidate (B) wins."""
    b = [_rot(0.4), _rot(0.2)]
    d = [_rot(2.0), _rot(2.2), _rot(2.4)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *b, *d])
    assert _rehome_target(vectors, b, list(b), d, [1]) == 10


def test_the_rehome_target_reads_the_candidates_sums_after_the_removal() -> None:
    """D loses a leaf in the same removal: scored by its leaves before the removal (what its
    stored routing vector still says) it would lose (first case) or win (second case); the
    re-home scores what D holds after it."""
    b = [_rot(np.arccos(0.9) + 0.3), _rot(np.arccos(0.9) - 0.3)]
    c = [_rot(1.2), _rot(1.4)]
    # D = {0.02, -0.02, 2.8}: cosine 0.95 with its three leaves, 1.0 without leaf 8
    d = [_rot(0.02), _rot(-0.02), _rot(2.8)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *c, *d])
    assert _rehome_target(vectors, b, c, d, [1]) == 12  # D at 0.95 beats B at 0.9
    # D = {0.3, -0.3, 2.9}: cosine 0.97 with all three (it would win), -0.27 without leaf 6
    d = [_rot(0.3), _rot(-0.3), _rot(2.9)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *c, *d])
    assert _rehome_target(vectors, b, c, d, [1]) == 12
    assert _rehome_target(vectors, b, c, d, [1, 6]) == 10


# ------------------------------------------------------------------ re-home prefilter


def _hint(tree: Tree, vectors: np.ndarray, stale: list[int] | None = None) -> RehomeHint:
    """The hint an index gives: its stored leaf-mean vectors and sum norms (the pipeline's),
    no norms (NaN) where a leaf is longer than the bound allows, as an index keeps none."""
    from psirag.config import IndexConfig
    from psirag.pipeline import long_leaves, routing_rows

    k = tree.n_nodes - tree.n_leaves
    rows, norms = routing_rows(tree, vectors, [""] * k, IndexConfig(), None)
    assert norms is not None
    if long_leaves(vectors):
        norms = np.full(k, np.nan, dtype=np.float32)
    return RehomeHint(rows[tree.n_leaves :], norms, np.asarray(stale or [], dtype=np.int64))


def _same_update(a: TreeUpdate, b: TreeUpdate) -> None:
    assert np.array_equal(a.tree.parent, b.tree.parent)
    assert np.array_equal(a.tree.layer, b.tree.layer)
    assert np.array_equal(a.node_map, b.node_map)
    assert np.array_equal(a.dirty, b.dirty)
    assert a.counts == b.counts


@pytest.mark.parametrize("seed", range(60))
def test_the_prefiltered_rehome_picks_the_exact_target(seed: int) -> None:
    """On random trees (clusters, repeated leaves for exact ties, now and then leaves longer
    than unit, which get no norm), a removal with the stored vectors' hint makes the very tree
    the exact path makes, and over all seeds it scores fewer candidates exactly."""
    rng = np.random.default_rng(1000 + seed)
    dim = int(rng.integers(3, 33))
    centers = rng.normal(size=(int(rng.integers(2, 6)), dim)) * 3
    noise = float(rng.choice([0.05, 0.3, 1.0]))
    vectors = clustered(rng, centers, int(rng.integers(40, 400)), noise)
    if seed % 3 == 0:  # repeated leaves: candidates with exactly equal scores
        vectors[1::4] = vectors[0::4][: vectors[1::4].shape[0]]
    if seed % 10 == 7:
        vectors[: vectors.shape[0] // 3] *= 2.0
    max_children = [2, 3, 4, 6, 12][seed % 5]
    tree = build_tree(vectors, max_children=max_children)
    n = tree.n_leaves
    few = seed % 2 == 0  # a few leaves (most candidates clean), or many (most changed)
    size = int(rng.integers(1, 4 if few else max(2, n // 5)))
    removed = np.sort(rng.choice(n, size, replace=False))
    exact = remove_leaves(tree, removed, vectors, max_children=max_children)
    hinted = remove_leaves(
        tree, removed, vectors, max_children=max_children, hint=_hint(tree, vectors)
    )
    _same_update(exact, hinted)
    assert len(exact.rehome_scored) == exact.counts.get("rehomed", 0)
    assert len(hinted.rehome_scored) == len(exact.rehome_scored)
    assert all(h <= e for h, e in zip(hinted.rehome_scored, exact.rehome_scored, strict=True))
    _SCORED.append((sum(exact.rehome_scored), sum(hinted.rehome_scored)))


_SCORED: list[tuple[int, int]] = []


def test_the_prefilter_ruled_out_candidates_on_the_random_trees() -> None:
    """(Runs after the random trees above.) The hint is used: re-homes happened and it
    scored fewer candidates exactly than the full path."""
    if len(_SCORED) < 60:
        pytest.skip("runs after test_the_prefiltered_rehome_picks_the_exact_target")
    full = sum(e for e, _ in _SCORED)
    short = sum(h for _, h in _SCORED)
    assert full > 200
    assert short < full / 2


@pytest.mark.parametrize("eps", [3e-7, 1e-7, 1e-8, 1e-9, -1e-9, -1e-8, -1e-7, -3e-7])
def test_the_prefiltered_rehome_keeps_near_ties(eps: float) -> None:
    """The near ties above, with the hint: both near-tied candidates are within the margin
    and the exact float64 best wins."""
    tb, tc = np.arccos(0.9), np.arccos(0.9 + eps)
    b = [_rot(tb + 0.3), _rot(tb - 0.3)]
    c = [_rot(tc + 0.5), _rot(tc - 0.5)]
    d = [_rot(2.0), _rot(2.2), _rot(2.4)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *c, *d]).astype(np.float32)
    tree = _four_pairs(b, c, d)
    exact = remove_leaves(tree, [1], vectors, max_children=None)
    hinted = remove_leaves(tree, [1], vectors, max_children=None, hint=_hint(tree, vectors))
    _same_update(exact, hinted)
    assert hinted.rehome_scored[0] == 2  # B and C; D is far below them
    # an exact tie too: the lowest id
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *b, *d]).astype(np.float32)
    hinted = remove_leaves(tree, [1], vectors, max_children=None, hint=_hint(tree, vectors))
    _same_update(remove_leaves(tree, [1], vectors, max_children=None), hinted)
    assert int(hinted.tree.parent[hinted.node_map[0]]) == hinted.node_map[10]


def test_a_stale_or_missing_norm_is_scored_exactly() -> None:
    """A stored vector made for other leaves (a waiting abstract's) can make the true best
    look poor: marked stale, or without a norm, the candidate is scored exactly and wins;
    trusted, the prefilter would rule it out (which is why stale vectors must be marked)."""
    b = [_rot(np.arccos(0.9) + 0.3), _rot(np.arccos(0.9) - 0.3)]
    c = [_rot(0.1), _rot(-0.1)]  # C is the best (cosine 0.995)
    d = [_rot(2.0), _rot(2.2), _rot(2.4)]
    vectors = np.stack([_rot(0.0), _rot(1.0), *b, *c, *d]).astype(np.float32)
    tree = _four_pairs(b, c, d)
    exact = remove_leaves(tree, [1], vectors, max_children=None)
    assert int(exact.tree.parent[exact.node_map[0]]) == exact.node_map[11]
    good = _hint(tree, vectors)
    wrong = np.array(good.vectors)
    wrong[11 - 9] = _rot(2.5).astype(np.float32)  # C's vector as if it held other leaves
    trusted = RehomeHint(wrong, good.norms)
    misled = remove_leaves(tree, [1], vectors, max_children=None, hint=trusted)
    assert int(misled.tree.parent[misled.node_map[0]]) != misled.node_map[11]
    for hint in (
        RehomeHint(wrong, good.norms, np.array([11])),
        RehomeHint(wrong, np.where(np.arange(7) == 2, np.float32(np.nan), good.norms)),
    ):
        got = remove_leaves(tree, [1], vectors, max_children=None, hint=hint)
        _same_update(exact, got)


def test_a_hint_of_another_shape_fails_clearly() -> None:
    vectors = unit(np.random.default_rng(3).normal(size=(9, 3)))
    tree = _four_pairs([0, 0], [0, 0], [0, 0, 0])
    good = _hint(tree, vectors)
    with pytest.raises(InputError, match="re-home hint"):
        remove_leaves(tree, [1], vectors, hint=RehomeHint(good.vectors[:2], good.norms[:2]))


def test_cosine_scores_of_a_subset_have_the_same_bits() -> None:
    """The exact score's rows do not depend on which other rows are scored (the prefilter
    scores a subset; a matrix-vector product can round a row by its position)."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        m, d = int(rng.integers(2, 300)), int(rng.integers(3, 385))
        rows = rng.normal(size=(m, d)) * rng.uniform(0.1, 50)
        c = rng.normal(size=d)
        full = cosine_scores(rows, c)
        pick = np.sort(rng.choice(m, int(rng.integers(1, m + 1)), replace=False))
        assert full[pick].tobytes() == cosine_scores(rows[pick], c).tobytes()


@pytest.mark.parametrize("seed", range(10))
def test_the_prefiltered_rehome_stays_in_its_tree_of_a_forest(seed: int) -> None:
    """A forest (a tree per document): the prefilter scores the candidates of the re-homed
    node's own tree, and the result is the exact path's."""
    rng = np.random.default_rng(50 + seed)
    e = clustered(rng, rng.normal(size=(3, 8)) * 3, 150, 0.5)
    groups = np.repeat(np.arange(3), 50)
    forest = build_forest(e, groups, max_children=3)
    gone = np.sort(rng.choice(150, int(rng.integers(1, 6)), replace=False))
    exact = remove_leaves(forest, gone, e, max_children=3)
    hinted = remove_leaves(forest, gone, e, max_children=3, hint=_hint(forest, e))
    _same_update(exact, hinted)
    check_invariants(hinted.tree, 3, forest=True)
