"""The skew study's measures: Dasgupta's cost (against brute force), mixed nodes, sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from psirag.eval.skew import (
    dasgupta_cost,
    dasgupta_terms,
    flat_dasgupta_cost,
    label_2wiki,
    mixed_node_stats,
    node_depth_order,
    skewed_sample,
)
from psirag.tree import Tree, build_tree


def unit_rows(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, dim))
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)


def brute_force_cost(
    parent: np.ndarray, n_leaves: int, e: np.ndarray, weight: str = "distance"
) -> float:
    """Def. 4.2 read literally: for every pair, find the LCA by walking up, then count the
    leaves under it by testing every leaf's ancestry (O(n^3) overall). Roots share a virtual
    root over all leaves."""
    e = e.astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)

    def ancestors(u: int) -> list[int]:
        out = [u]
        while parent[out[-1]] >= 0:
            out.append(int(parent[out[-1]]))
        return out

    chains = [ancestors(i) for i in range(n_leaves)]
    total = 0.0
    for i, j in itertools.combinations(range(n_leaves), 2):
        above_i = set(chains[i])
        lca = next((u for u in chains[j] if u in above_i), None)
        size = n_leaves if lca is None else sum(lca in chains[x] for x in range(n_leaves))
        cos = float(e[i] @ e[j])
        w = {"distance": 1.0 - cos, "similarity": cos, "pairs": 1.0}[weight]
        total += w * size
    return total


# A hand-made tree over 6 leaves (ids 0-5), minor leaves {4, 5}:
#   layer 1: A=6 {0, 1}   B=7 {2, 3, 4} (mixed)   C=8 {5} (pure minor)
#   layer 2: D=9 {A, B} (mixed)   E=10 {C} (pure minor)
#   layer 3: F=11 {D, E} (mixed root)
HAND = Tree(
    parent=np.array([6, 6, 7, 7, 7, 8, 9, 9, 10, 11, 11, -1]),
    layer=np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3], dtype=np.int32),
)
HAND_MINOR = np.array([False, False, False, False, True, True])


@pytest.mark.parametrize("max_children", [None, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dasgupta_matches_brute_force_on_psi_trees(max_children: int | None, seed: int) -> None:
    e = unit_rows(30, seed=seed)
    tree = build_tree(e, max_children=max_children)
    expected = brute_force_cost(tree.parent, tree.n_leaves, e)
    assert dasgupta_cost(tree, e) == pytest.approx(expected, rel=1e-9)
    terms = dasgupta_terms(tree, e)
    for weight in ("distance", "similarity", "pairs"):
        brute = brute_force_cost(tree.parent, tree.n_leaves, e, weight)
        assert getattr(terms, weight) == pytest.approx(brute, rel=1e-9, abs=1e-9)


def test_dasgupta_matches_brute_force_on_hand_made_tree() -> None:
    e = unit_rows(6, seed=3)
    expected = brute_force_cost(HAND.parent, 6, e)
    assert dasgupta_cost(HAND, e) == pytest.approx(expected, rel=1e-9)
    # unit weights: pairs split at F (5 pairs x 6) + D (6 x 5) + B (3 x 3) + A (1 x 2) = 71
    assert dasgupta_terms(HAND, e).pairs == pytest.approx(71.0)


def test_dasgupta_on_a_forest_uses_a_virtual_root() -> None:
    # two trees {0,1} and {2,3}: the cross pairs have all 4 leaves under their (virtual) LCA
    forest = Tree(parent=np.array([4, 4, 5, 5, -1, -1]), layer=np.array([0, 0, 0, 0, 1, 1]))
    e = unit_rows(4, seed=4)
    assert dasgupta_cost(forest, e) == pytest.approx(brute_force_cost(forest.parent, 4, e))


def test_dasgupta_unnormalised_input_and_known_value() -> None:
    # two orthogonal pairs: d = 1 across pairs, 0 within; cost = 4 cross pairs x 4 leaves
    e = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=np.float32) * 3.0
    tree = Tree(parent=np.array([4, 4, 5, 5, 6, 6, -1]), layer=np.array([0, 0, 0, 0, 1, 1, 2]))
    assert dasgupta_cost(tree, e) == pytest.approx(16.0)
    star = Tree(parent=np.array([4, 4, 4, 4, -1]), layer=np.array([0, 0, 0, 0, 1]))
    assert dasgupta_cost(star, e) == pytest.approx(flat_dasgupta_cost(e))


def test_direction_of_the_distance_form() -> None:
    """Same tree shape, leaves well placed vs scattered: the similarity form (Dasgupta's) is
    lower for the good placement, the distance form (Def. 4.2) is *higher*: distance = P(T) -
    similarity, so for one shape the distance form rewards the bad placement."""
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(2, 16))
    e = np.repeat(centres, 20, axis=0) + 0.1 * rng.normal(size=(40, 16))
    tree = build_tree(e.astype(np.float32), max_children=None)
    scattered = e[rng.permutation(40)]
    good, bad = dasgupta_terms(tree, e), dasgupta_terms(tree, scattered)
    assert good.pairs == bad.pairs
    assert good.similarity < bad.similarity
    assert good.distance > bad.distance
    assert good.distance == pytest.approx(good.pairs - good.similarity)
    assert good.vs_random > 1.0 > bad.vs_random - 0.2
    assert good.mean_distance == pytest.approx(bad.mean_distance)


def test_dasgupta_rejects_wrong_row_count() -> None:
    with pytest.raises(ValueError, match="embeddings"):
        dasgupta_cost(HAND, unit_rows(5))


def test_node_depth_order_puts_children_first() -> None:
    order = node_depth_order(HAND.parent).tolist()
    pos = {u: i for i, u in enumerate(order)}
    for u, p in enumerate(HAND.parent.tolist()):
        if p >= 0:
            assert pos[u] < pos[p]


def test_mixed_nodes_on_hand_made_tree() -> None:
    stats = mixed_node_stats(HAND.leaf_membership, HAND.layer, HAND_MINOR)
    layers = {row["layer"]: row for row in stats["layers"]}
    assert layers[1] == {
        "layer": 1,
        "nodes": 3,
        "with_minor": 2,
        "mixed": 1,
        "pure_minor": 1,
        "minor_under_mixed": 0.5,
        "minor_share_of_minor_nodes": pytest.approx((1 / 3 + 1) / 2),
    }
    assert (layers[2]["mixed"], layers[2]["pure_minor"], layers[2]["minor_under_mixed"]) == (
        1,
        1,
        0.5,
    )
    assert (layers[3]["mixed"], layers[3]["minor_under_mixed"]) == (1, 1.0)
    assert stats["mixed_total"] == 3
    assert stats["minor_under_mixed_layer1"] == 0.5


def test_mixed_nodes_with_overlapping_leaf_sets() -> None:
    # soft sets (RAPTOR): minor leaf 3 sits in a pure node and in a mixed one
    rows = [[0], [1], [2], [3], [0, 1], [2, 3], [3], [0, 1, 2, 3]]
    layer = np.array([0, 0, 0, 0, 1, 1, 1, 2])
    m = sp.lil_matrix((8, 4))
    for u, leaves in enumerate(rows):
        m[u, leaves] = 1
    stats = mixed_node_stats(m.tocsr(), layer, np.array([False, False, False, True]))
    first = stats["layers"][0]
    assert (first["nodes"], first["with_minor"], first["mixed"], first["pure_minor"]) == (
        3,
        2,
        1,
        1,
    )
    assert first["minor_under_mixed"] == 1.0


def test_skewed_sample_counts_and_determinism() -> None:
    labels = ["film"] * 50 + ["music"] * 10 + [None] * 5 + ["football"] * 5
    idx, minor = skewed_sample(labels, "film", "music", n_total=40, minor_share=0.1, seed=1)
    assert idx.size == 40 and minor.sum() == 4
    assert np.all(np.diff(idx) > 0)
    assert all(labels[i] == ("music" if m else "film") for i, m in zip(idx, minor, strict=True))
    again, _ = skewed_sample(labels, "film", "music", n_total=40, minor_share=0.1, seed=1)
    assert np.array_equal(idx, again)
    with pytest.raises(ValueError, match="music"):
        skewed_sample(labels, "film", "music", n_total=40, minor_share=0.5)


def test_label_2wiki_first_sentence() -> None:
    records = [
        {"title": "A", "text": "A House of Sand is a 1962 Brazilian drama film. It is long."},
        {"title": "B", "text": "Sam Wood was an American film director. He made a 1939 film."},
        {"title": "C", "text": "Ou Ya( born 1986) is a Chinese footballer."},
        {"title": "D", "text": "Evolution is a song recorded by Ayumi Hamasaki."},
        {"title": "E", "text": "The Don River is a river located in Queensland, Australia."},
        {"title": "F", "text": "Robert More was an English politician."},
    ]
    assert label_2wiki(records) == [
        "film",
        None,
        "football",
        "music",
        "geography",
        "politics",
    ]


def test_plot_layers_writes_a_picture(tmp_path) -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from psirag.eval.skew import plot_layers

    fig, ax = plt.subplots(figsize=(4, 2))
    plot_layers(ax, HAND, HAND_MINOR, title="hand")
    out = tmp_path / "hand.png"
    fig.savefig(out)
    plt.close(fig)
    assert out.stat().st_size > 1000
