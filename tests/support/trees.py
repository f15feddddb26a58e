"""Tree helpers shared by the tree tests: unit-norm test vectors and the structural invariants
every built or updated tree must keep."""

from __future__ import annotations

import numpy as np

from psirag.tree import Tree, build_tree


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def routing_vectors(tree: Tree, leaf_vectors: np.ndarray) -> np.ndarray:
    """One unit row per node: leaves their vectors, inner nodes their leaves' normalised mean
    (the index's default routing)."""
    mean = np.asarray(tree.leaf_membership[tree.n_leaves :] @ leaf_vectors, dtype=np.float64)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True) + 1e-12
    return np.vstack([leaf_vectors, mean]).astype(np.float32)


def check_invariants(tree: Tree, n: int, max_children: int | None) -> None:
    assert tree.n_leaves == n
    assert np.array_equal(tree.layer[:n], np.zeros(n))
    assert (tree.layer[n:] > 0).all()
    assert tree.roots.size == 1, "exactly one root"
    root = tree.root
    # every leaf has exactly one parent and the path to the root has the same length
    depths = np.zeros(n, dtype=int)
    for leaf in range(n):
        x, d = leaf, 0
        while tree.parent[x] >= 0:
            assert tree.layer[tree.parent[x]] == tree.layer[x] + 1, "layers step by one"
            x = int(tree.parent[x])
            d += 1
        assert x == root
        depths[leaf] = d
    assert (depths == depths[0]).all(), "equi-depth"
    assert tree.leaf_counts[root] == n
    # every abstract node has at least one child and the leaf sets nest
    assert (tree.fan_out[n:] >= 1).all()
    if max_children is not None:
        assert tree.fan_out.max() <= max_children
    membership = tree.leaf_membership
    assert np.array_equal(np.asarray(membership.sum(axis=1)).ravel(), tree.leaf_counts)


def random_unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    return unit(rng.normal(size=(n, dim)))


def clustered_unit(rng: np.random.Generator, n: int, dim: int, clusters: int) -> np.ndarray:
    centers = rng.normal(size=(clusters, dim)) * 3
    labels = rng.integers(0, clusters, n)
    return unit(centers[labels] + rng.normal(size=(n, dim)))


def random_tree(n: int, seed: int, max_children: int = 3) -> Tree:
    """A tree over ``n`` random unit vectors (8-d, seeded): the shape keyword tests score on."""
    vecs = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    return build_tree(unit(vecs), max_children=max_children)
