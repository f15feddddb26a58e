"""Tree search's vectorised child gathering against the per-node slicing it replaced: the same
leaves, scores, kept and visited nodes, bit for bit, on trees, forests and document masks."""

from __future__ import annotations

import numpy as np
import pytest

from psirag.retrieval.tree_search import TreeHits, TreeSearcher, gather_ranges
from psirag.tree import build_forest, build_tree
from psirag.tree.model import Tree


def test_gather_ranges_equals_concatenated_slices() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 1000, 200)
    for _ in range(50):
        starts = rng.integers(0, 200, rng.integers(1, 12))
        ends = np.minimum(starts + rng.integers(0, 9, starts.size), 200)  # empty ranges too
        want = np.concatenate([values[s:e] for s, e in zip(starts, ends, strict=True)])
        got = gather_ranges(values, starts, ends)
        assert got.dtype == values.dtype
        np.testing.assert_array_equal(got, want)
    assert gather_ranges(values, np.array([5, 9]), np.array([5, 9])).size == 0


def reference_search(
    tree: Tree,
    vectors: np.ndarray,
    q: np.ndarray,
    k: int,
    beam: int,
    allowed: np.ndarray | None,
) -> TreeHits:
    """The search as written before: per-node child slices and plain fancy indexing."""
    layer, roots = tree.layer, tree.roots
    layers = [np.flatnonzero(layer == lv) for lv in range(tree.depth + 1)]
    roots_at = [roots[layer[roots] == lv] for lv in range(tree.depth + 1)]

    def size(lv: int) -> int:
        nodes = layers[lv]
        return int(nodes.size if allowed is None else np.count_nonzero(allowed[nodes]))

    start = next((lv for lv in range(tree.depth, -1, -1) if size(lv) > beam), 0)
    cands, kept, visited, visited_scores = layers[start], [], [], []
    for lv in range(start, -1, -1):
        if lv < start and roots_at[lv].size:
            cands = np.concatenate([cands, roots_at[lv]])
        if allowed is not None:
            cands = cands[allowed[cands]]
        if cands.size == 0:
            continue
        scores = vectors[cands] @ q
        visited.append(cands)
        visited_scores.append(scores)
        order = np.lexsort((cands, -scores))[: k if lv == 0 else beam]
        if lv == 0:
            return TreeHits(
                cands[order],
                scores[order],
                np.concatenate(kept) if kept else np.empty(0, np.int64),
                visited=np.concatenate(visited),
                visited_scores=np.concatenate(visited_scores),
            )
        kept.append(cands[order])
        cands = np.concatenate([tree.children(int(u)) for u in cands[order]])
    raise AssertionError("no leaf reached")


@pytest.mark.parametrize("kind", ["tree", "forest", "masked"])
def test_search_equals_the_per_node_version(kind: str) -> None:
    rng = np.random.default_rng(1)
    e = rng.normal(size=(600, 24)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    groups = rng.integers(0, 5, e.shape[0])
    if kind == "tree":
        tree = build_tree(e, max_children=6)
    else:
        tree = build_forest(e, groups, max_children=6)
    means = np.asarray(tree.leaf_membership[tree.n_leaves :] @ e)
    vectors = np.concatenate([e, means / np.linalg.norm(means, axis=1, keepdims=True)])
    vectors = vectors.astype(np.float32)
    searcher = TreeSearcher(tree, vectors)
    allowed = None
    if kind == "masked":  # two documents' nodes only, as a docs filter makes it
        leaf_ok = np.isin(groups, [1, 3])
        allowed = np.asarray(tree.leaf_membership @ leaf_ok.astype(np.int64) > 0).ravel()
        assert not allowed.all()
    for q in e[rng.choice(e.shape[0], 25, replace=False)]:
        for beam in (2, 7, 30):
            got = searcher.search(q, k=10, beam=beam, allowed=allowed, collect_visited=True)
            want = reference_search(tree, vectors, q, 10, beam, allowed)
            np.testing.assert_array_equal(got.leaves, want.leaves)
            np.testing.assert_array_equal(got.scores, want.scores)
            np.testing.assert_array_equal(got.kept, want.kept)
            # the reference leaves out the layers taken whole; compare what follows them
            tail = got.visited[-want.visited.size :]
            np.testing.assert_array_equal(tail, want.visited)
            np.testing.assert_array_equal(
                got.visited_scores[-want.visited.size :], want.visited_scores
            )
