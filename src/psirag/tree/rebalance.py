"""Rebalancing (SPEC 1.5), written once: every node with more than ``max_children`` children is
split into near-equal siblings grouped by similarity, bottom-up, and ids are renumbered.

One loop (:func:`split_wide_nodes`) serves the builders (:func:`rebalance`,
:func:`rebalance_arrays`) and the tree updates (:func:`split_overfull`). A node's leaf-vector sum
(what the grouping compares) is the float64 sum of its children's, added in id order as the
tree stood before any split (:class:`SubtreeSums`); the builders compute a sum only when a split
needs it, so no (nodes x d) table is held (3 GiB at a million leaves).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

import numpy as np

from psirag.tree.model import Tree


def _capacity_assign(sims: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Give each row its most similar group that still has room; surest rows choose first."""
    c, g = sims.shape
    room = np.asarray(sizes, dtype=np.int64).copy()
    ranked = np.argsort(-sims, axis=1, kind="stable")
    if g > 1:
        top2 = np.take_along_axis(sims, ranked[:, :2], axis=1)
        margin = top2[:, 0] - top2[:, 1]
    else:
        margin = np.zeros(c)
    assign = np.empty(c, dtype=np.int64)
    for row in np.argsort(-margin, kind="stable").tolist():
        for group in ranked[row].tolist():
            if room[group] > 0:
                room[group] -= 1
                assign[row] = group
                break
    return assign


def _balanced_groups(
    vectors: np.ndarray, sizes: list[int], iterations: int = 20
) -> list[np.ndarray]:
    """Partition unit rows into groups of exactly ``sizes`` by similarity.

    Balanced spherical k-means: seeds by farthest-point traversal (one per well-separated
    cluster), then alternate capacity-constrained assignment and centroid updates. Deterministic.
    """
    c, g = vectors.shape[0], len(sizes)
    if g == 1:
        return [np.arange(c)]
    centre = vectors.mean(axis=0)
    seeds = [int(np.argmin(vectors @ centre))]
    closest = vectors @ vectors[seeds[0]]
    for _ in range(g - 1):
        seeds.append(int(np.argmin(closest)))
        closest = np.maximum(closest, vectors @ vectors[seeds[-1]])
    centroids = vectors[seeds]
    assign = _capacity_assign(vectors @ centroids.T, sizes)
    for _ in range(iterations):
        sums = np.zeros((g, vectors.shape[1]))
        np.add.at(sums, assign, vectors)
        centroids = sums / (np.linalg.norm(sums, axis=1, keepdims=True) + 1e-12)
        new = _capacity_assign(vectors @ centroids.T, sizes)
        if np.array_equal(new, assign):
            break
        assign = new
    return [np.flatnonzero(assign == k) for k in range(g)]


class SubtreeSums:
    """Float64 sum of the leaf vectors below each node, the way the splits read it.

    Before a node's children change, :meth:`keep_children` records them: a sum not yet
    computed is then still the sum over the children the node had before any split, added in
    id order (leaves: their vectors), and a node the loop splits or creates gets its new sum
    through :meth:`set`. ``table``, when given, holds every node's sum up front (tree updates
    compute theirs); otherwise sums are computed from ``leaf_vectors`` on first use.
    """

    def __init__(
        self,
        children: list[list[int]],
        *,
        leaf_vectors: np.ndarray | None = None,
        table: np.ndarray | None = None,
        leaf_vector: Callable[[int], np.ndarray] | None = None,
        n_leaves: int = 0,
        dim: int = 0,
    ) -> None:
        if table is None and leaf_vectors is None and leaf_vector is None:
            raise ValueError("give leaf_vectors, a leaf_vector function or a table of sums")
        self._children = children
        self._table = table
        self._leaves = leaf_vectors if table is None and leaf_vectors is not None else None
        # ``leaf_vector(i)``: leaf i's vector without one (n_leaves x d) array (tree updates,
        # whose leaves live in two arrays, old and new)
        self._leaf_of = leaf_vector
        self._n = n_leaves if self._leaves is None else self._leaves.shape[0]
        self._dim = dim if self._leaves is None else self._leaves.shape[1]
        self._before: dict[int, list[int]] = {}
        self._original: dict[int, np.ndarray] = {}
        self._changed: dict[int, np.ndarray] = {}

    def __call__(self, node: int) -> np.ndarray:
        got = self._changed.get(node)
        return self._first(node) if got is None else got

    def set(self, node: int, value: np.ndarray) -> None:
        self._changed[node] = value

    def keep_children(self, node: int) -> None:
        if node not in self._before:
            self._before[node] = list(self._children[node])

    def _first(self, node: int) -> np.ndarray:
        if self._table is not None:
            return self._table[node]
        if node < self._n:
            if self._leaves is None:
                assert self._leaf_of is not None
                return self._leaf_of(node).astype(np.float64)
            return self._leaves[node].astype(np.float64)
        got = self._original.get(node)
        if got is None:
            got = np.zeros(self._dim, dtype=np.float64)
            for kid in self._before.get(node, self._children[node]):
                got += self._first(kid)
            self._original[node] = got
        return got


def children_lists(parent: list[int]) -> list[list[int]]:
    """Each node's children in id order."""
    children: list[list[int]] = [[] for _ in parent]
    for node, p in enumerate(parent):
        if p >= 0:
            children[p].append(node)
    return children


def rebalance(tree: Tree, embeddings: np.ndarray, max_children: int) -> Tree:
    """Split every node with more than ``max_children`` children, bottom-up, root included.

    A node with c children becomes ceil(c / max_children) siblings of near-equal size, grouped by
    similarity (balanced spherical k-means over the children's mean-leaf embeddings), never by
    id order. A split root gets a new root above it, so every leaf stays at
    the same depth.
    """
    return rebalance_arrays(tree.parent, tree.layer.astype(np.int64), embeddings, max_children)


def rebalance_arrays(
    parent: np.ndarray, layer: np.ndarray, embeddings: np.ndarray, max_children: int
) -> Tree:
    """:func:`rebalance` on ``(parent, layer)`` arrays (leaves first), renumbered as a Tree."""
    if max_children < 2:
        raise ValueError("max_children must be at least 2")
    n = int((layer == 0).sum())
    parent_l, layer_l = parent.tolist(), layer.tolist()
    children = children_lists(parent_l)
    sums = SubtreeSums(children, leaf_vectors=embeddings[:n])
    split_wide_nodes(parent_l, layer_l, children, sums, max_children)
    return renumber(np.asarray(parent_l, dtype=np.int64), np.asarray(layer_l, dtype=np.int64), n)


def split_overfull(
    parent: list[int],
    layer: list[int],
    sums: np.ndarray | Callable[[int], np.ndarray],
    max_children: int,
    *,
    n_leaves: int = 0,
    dim: int = 0,
) -> tuple[list[int], list[int]]:
    """The splitting of :func:`rebalance` on plain lists, so tree updates can reuse it.

    ``sums[u]`` is the sum of the leaf embeddings below node ``u``; or ``sums`` is a function
    giving leaf ``i``'s vector (leaves ``0 .. n_leaves-1``, ``dim`` dimensions), and a node's
    sum is computed when a split first reads it (an update that splits one node then reads a
    few dozen leaves, not all of them).
    The lists are changed in place: existing nodes keep their ids, new siblings and roots are
    appended. Returns them.
    """
    children = children_lists(parent)
    if callable(sums):
        total = SubtreeSums(children, leaf_vector=sums, n_leaves=n_leaves, dim=dim)
    else:
        total = SubtreeSums(children, table=sums)
    split_wide_nodes(parent, layer, children, total, max_children)
    return parent, layer


def split_wide_nodes(
    parent: list[int],
    layer: list[int],
    children: list[list[int]],
    total: SubtreeSums,
    max_children: int,
    *,
    wide: dict[int, list[int]] | None = None,
) -> None:
    """The rebalancing loop, in place on the lists.

    Level by level from the bottom, a node with more than ``max_children`` children becomes
    near-equal siblings grouped by :func:`_balanced_groups`; a split root gets a new root.
    ``total(u)`` is the sum of the leaf embeddings below ``u``; the loop records the sums of
    the nodes it changes or creates there. ``wide``: per level, every node that has more than
    ``max_children`` children (a tree update knows them; the loop then visits only those, and
    the parents that a split gives new children, in the same order as over every node).
    """
    by_level: dict[int, list[int]] = {}
    if wide is None:
        for node, lay in enumerate(layer):
            by_level.setdefault(lay, []).append(node)
    else:
        by_level = {lv: sorted(nodes) for lv, nodes in wide.items() if nodes}
    level = 1
    while level <= max(by_level, default=0):
        for node in list(by_level.get(level, [])):
            kids = children[node]
            if len(kids) <= max_children:
                continue
            groups_n = math.ceil(len(kids) / max_children)
            base, extra = divmod(len(kids), groups_n)
            sizes = [base + (1 if g < extra else 0) for g in range(groups_n)]
            vecs = np.stack([total(k) for k in kids])
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True) + 1e-12
            groups = _balanced_groups(vecs, sizes)
            holder = parent[node]
            if holder < 0:  # split root: a new root keeps the tree single-rooted
                holder = len(parent)
                parent.append(-1)
                layer.append(level + 1)
                children.append([node])
                by_level.setdefault(level + 1, []).append(holder)
                total.set(holder, total(node).copy())
                parent[node] = holder
            elif wide is not None:  # the parent gains children: visit it on its level
                above = by_level.setdefault(level + 1, [])
                at = bisect.bisect_left(above, holder)
                if at == len(above) or above[at] != holder:
                    above.insert(at, holder)
            total.keep_children(holder)
            total.keep_children(node)
            kid_arr = np.asarray(kids)
            children[node] = kid_arr[groups[0]].tolist()
            total.set(node, np.sum([total(k) for k in children[node]], axis=0))
            for group in groups[1:]:
                sib = len(parent)
                parent.append(holder)
                layer.append(level)
                members = kid_arr[group].tolist()
                children.append(members)
                children[holder].append(sib)
                for k in members:
                    parent[k] = sib
                total.set(sib, np.sum([total(k) for k in members], axis=0))
        level += 1


def renumber_order(layer: np.ndarray, n_leaves: int) -> np.ndarray:
    """Current ids in their new order: leaves first as they are, then abstract nodes by
    (layer, current id), so ids read bottom-up and roots come last."""
    return np.concatenate(
        [np.arange(n_leaves), n_leaves + np.argsort(layer[n_leaves:], kind="stable")]
    )


def renumber(parent: np.ndarray, layer: np.ndarray, n_leaves: int) -> Tree:
    """Order abstract nodes by (layer, creation order) so ids read bottom-up, roots last."""
    return reorder(parent, layer, renumber_order(layer, n_leaves))


def reorder(parent: np.ndarray, layer: np.ndarray, order: np.ndarray) -> Tree:
    """The tree whose node ``k`` is current node ``order[k]`` (``order`` keeps every node)."""
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    old_parent = parent[order]
    new_parent = np.where(old_parent >= 0, new_id[np.maximum(old_parent, 0)], -1)
    return Tree(parent=new_parent.astype(np.int64), layer=layer[order].astype(np.int32))


__all__ = [
    "SubtreeSums",
    "rebalance",
    "rebalance_arrays",
    "renumber",
    "renumber_order",
    "reorder",
    "split_overfull",
    "split_wide_nodes",
]
