"""The tree builder against a plain transcription of SPEC 1.3-1.5, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from support.trees import check_invariants, clustered_unit, random_unit, unit

from psirag.errors import InputError, ResourceError
from psirag.tree import Tree, build_tree, machine, rebalance, similarity_matrix, spanning_edges


def reference_walk(embeddings: np.ndarray) -> tuple[list[frozenset[int]], int]:
    """SPEC 1.3-1.4 read literally: sort every pair, walk them, count effective unions.

    Returns the leaf set of every abstract node and the number of effective unions.
    """
    s = similarity_matrix(embeddings)
    n = s.shape[0]
    iu, ju = np.triu_indices(n, 1)
    order = np.lexsort((ju, iu, -s[iu, ju]))
    parent: dict[int, int] = {}
    height: dict[int, int] = dict.fromkeys(range(n), 0)
    next_id = n

    def root(x: int) -> int:
        while x in parent:
            x = parent[x]
        return x

    def ancestor(x: int, levels: int) -> int:
        for _ in range(levels):
            x = parent[x]
        return x

    unions = 0
    for k in order:
        if unions == n - 1:
            break
        u, v = int(iu[k]), int(ju[k])
        ru, rv = root(u), root(v)
        if ru == rv:
            continue
        hu, hv = height[ru], height[rv]
        if hu == hv:
            parent[ru] = parent[rv] = next_id
            height[next_id] = hu + 1
            next_id += 1
        elif hu > hv:
            parent[rv] = ancestor(u, hv + 1)
        else:
            parent[ru] = ancestor(v, hu + 1)
        unions += 1

    leaves: dict[int, set[int]] = {}
    for leaf in range(n):
        x = leaf
        while x in parent:
            x = parent[x]
            leaves.setdefault(x, set()).add(leaf)
    return sorted((frozenset(s) for s in leaves.values()), key=sorted), unions


def leaf_sets(tree: Tree) -> list[frozenset[int]]:
    return sorted(
        (frozenset(tree.leaves_under(u).tolist()) for u in range(tree.n_leaves, tree.n_nodes)),
        key=sorted,
    )


def with_ties(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Low-precision vectors and duplicated rows: many exactly equal similarities."""
    x = rng.integers(-1, 2, size=(n, dim)).astype(np.float32)
    x[x.sum(axis=1) == 0, 0] = 1
    x[np.abs(x).sum(axis=1) == 0, 0] = 1
    dup = rng.integers(0, n, size=n // 4)
    x[rng.integers(0, n, size=n // 4)] = x[dup]
    return unit(x)


@pytest.mark.parametrize("seed", range(54))
def test_equals_full_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 160))
    kind = seed % 3
    if kind == 0:
        e = random_unit(rng, n, 8)
    elif kind == 1:
        e = clustered_unit(rng, n, 16, 4)
    else:
        e = with_ties(rng, n, 6)
    expected, unions = reference_walk(e)
    assert unions == n - 1
    tree = build_tree(e, max_children=None)
    assert leaf_sets(tree) == expected
    check_invariants(tree, n, None)


@pytest.mark.parametrize("kind", ["random", "clustered", "ties"])
def test_equals_full_walk_n1000(kind: str) -> None:
    rng = np.random.default_rng(1000)
    e = {
        "random": lambda: random_unit(rng, 1000, 32),
        "clustered": lambda: clustered_unit(rng, 1000, 32, 12),
        "ties": lambda: with_ties(rng, 1000, 5),
    }[kind]()
    expected, unions = reference_walk(e)
    assert unions == 999
    assert leaf_sets(build_tree(e, max_children=None)) == expected


def test_spanning_edges_are_a_spanning_tree_in_walk_order() -> None:
    rng = np.random.default_rng(7)
    e = with_ties(rng, 300, 4)
    s = similarity_matrix(e)
    a, b, sim = spanning_edges(s)
    assert a.size == 299 and (a < b).all()
    keys = list(zip((-sim).tolist(), a.tolist(), b.tolist(), strict=True))
    assert keys == sorted(keys)
    assert np.array_equal(sim, s[a, b])
    # connected: union-find over the edges reaches one component
    comp = list(range(300))

    def find(x: int) -> int:
        while comp[x] != x:
            x = comp[x]
        return x

    for i, j in zip(a.tolist(), b.tolist(), strict=True):
        comp[find(i)] = find(j)
    assert len({find(i) for i in range(300)}) == 1


def test_similarity_matrix_is_exactly_symmetric() -> None:
    e = random_unit(np.random.default_rng(3), 2500, 48)
    s = similarity_matrix(e)
    assert s.dtype == np.float32
    assert np.array_equal(s, s.T)
    np.testing.assert_allclose(s, e @ e.T, atol=1e-6)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("max_children", [2, 3, 5, 40])
def test_rebalanced_invariants(seed: int, max_children: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    e = clustered_unit(rng, n, 12, 5) if seed % 2 else random_unit(rng, n, 12)
    tree = build_tree(e, max_children=max_children)
    check_invariants(tree, n, max_children)
    # rebalancing only splits: each new node at layer L lies inside one original layer-L node
    original = build_tree(e, max_children=None)
    for layer in range(1, original.depth + 1):
        anc = np.arange(n)
        for _ in range(layer):
            anc = original.parent[anc]
        for u in np.flatnonzero(tree.layer == layer):
            assert np.unique(anc[tree.leaves_under(int(u))]).size == 1


def flat_tree(n: int) -> Tree:
    """``n`` leaves all under one root."""
    return Tree(
        parent=np.array([n] * n + [-1], dtype=np.int64),
        layer=np.array([0] * n + [1], dtype=np.int32),
    )


def test_rebalancing_groups_by_similarity_not_id() -> None:
    """A node over interleaved, well-separated clusters splits into >= 90% pure groups."""
    rng = np.random.default_rng(11)
    n_clusters, per = 3, 40
    centers = unit(rng.normal(size=(n_clusters, 64)))
    labels = np.tile(np.arange(n_clusters), per)  # interleaved in id order: 0,1,2,0,1,2,...
    e = unit(centers[labels] * 4 + rng.normal(size=(labels.size, 64)) * 0.3)
    n = labels.size
    tree = rebalance(flat_tree(n), e, max_children=40)
    check_invariants(tree, n, 40)
    groups = [tree.leaves_under(u) for u in range(n, tree.n_nodes) if tree.layer[u] == 1]
    assert len(groups) == 3
    for g in groups:
        purity = np.bincount(labels[g]).max() / g.size
        assert purity >= 0.9


def test_split_root_gets_new_root() -> None:
    n = 100
    e = random_unit(np.random.default_rng(5), n, 8)
    tree = rebalance(flat_tree(n), e, max_children=10)
    check_invariants(tree, n, 10)
    assert tree.depth == 2
    assert sorted(tree.fan_out[tree.layer == 1].tolist()) == [10] * 10


def test_deep_root_split_recurses() -> None:
    n = 500
    e = random_unit(np.random.default_rng(6), n, 8)
    tree = rebalance(flat_tree(n), e, max_children=4)
    check_invariants(tree, n, 4)


def test_small_inputs() -> None:
    one = build_tree(unit(np.ones((1, 4))))
    assert one.n_nodes == 1 and one.root == 0 and one.depth == 0
    two = build_tree(random_unit(np.random.default_rng(0), 2, 4))
    assert two.layer.tolist() == [0, 0, 1] and two.parent.tolist() == [2, 2, -1]
    same = build_tree(unit(np.ones((50, 4))), max_children=40)
    check_invariants(same, 50, 40)


def test_deterministic() -> None:
    e = with_ties(np.random.default_rng(9), 400, 5)
    t1, t2 = build_tree(e), build_tree(e.copy())
    assert np.array_equal(t1.parent, t2.parent) and np.array_equal(t1.layer, t2.layer)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((0, 4), dtype=np.float32), "empty"),
        (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
        (np.array([[0.0, 0.0], [0.0, 1.0]]), "zero"),
        (np.ones(4), "2-d"),
    ],
)
def test_bad_embeddings(bad: np.ndarray, message: str) -> None:
    with pytest.raises(InputError, match=message):
        build_tree(bad)


def test_refuses_when_matrix_exceeds_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "available_memory_bytes", lambda: 4 * 100 * 100)
    with pytest.raises(ResourceError, match="similarity matrix"):
        build_tree(random_unit(np.random.default_rng(0), 100, 4))


def test_search_restricted_to_a_short_tree_of_a_forest_reaches_its_leaves() -> None:
    from psirag.retrieval.tree_search import TreeSearcher
    from psirag.tree import build_forest

    rng = np.random.default_rng(3)
    deep = rng.normal(size=(60, 8))
    short = rng.normal(size=(3, 8))
    e = np.vstack([deep, short]).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    groups = np.array([0] * 60 + [1] * 3)
    tree = build_forest(e, groups, max_children=3)
    short_leaves = np.arange(60, 63)
    assert tree.depth > tree.layer[tree.roots].min()  # one tree is shorter than the other
    vectors = np.vstack([e, np.zeros((tree.n_nodes - 63, 8), dtype=np.float32)])
    for node in range(63, tree.n_nodes):
        under = tree.leaves_under(node)
        mean = e[under].mean(axis=0)
        vectors[node] = mean / np.linalg.norm(mean)
    allowed = np.zeros(tree.n_nodes, dtype=bool)
    allowed[short_leaves] = True
    for node in range(63, tree.n_nodes):
        allowed[node] = bool(np.isin(tree.leaves_under(node), short_leaves).any())
    searcher = TreeSearcher(tree, vectors)
    hits = searcher.search(short[0], k=2, beam=2, allowed=allowed)
    # the unrestricted forest's upper layers have more than 2 nodes, so the search used to start
    # above the short tree's root and find nothing
    assert hits.leaves.size == 2 and set(hits.leaves.tolist()) <= set(short_leaves.tolist())
