"""Algorithm 1's merge rule (SPEC 1.4), written once, and the union-find every builder uses.

The exact walk (:func:`merge_walk`) and the bucket merge (:mod:`psirag.tree.bucket`) both join
trees along spanning edges in walk order: two trees of equal height get a new common parent; a
lower tree's root goes under the taller tree's node one layer above that root, on the path up
from one of the taller tree's leaves. They differ only in what a component starts as (a leaf,
or a bucket's tree) and in which leaf that path starts from (:func:`merge_components`). The
approximate spanning trees (:mod:`psirag.tree.approx`) use the same :class:`UnionFind`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


class UnionFind:
    """Disjoint sets over ``0..n-1``: path halving and union by size."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n
        self.sets = n

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def link(self, rx: int, ry: int) -> int:
        """Join two different roots; returns the root of the joined set."""
        if self.size[rx] < self.size[ry]:
            rx, ry = ry, rx
        self.parent[ry] = rx
        self.size[rx] += self.size[ry]
        self.sets -= 1
        return rx

    def union(self, x: int, y: int) -> bool:
        """Join the sets of ``x`` and ``y``; False when they were one set already."""
        rx, ry = self.find(x), self.find(y)
        if rx == ry:
            return False
        self.link(rx, ry)
        return True

    def labels(self) -> np.ndarray:
        """The root of every element's set, as an int64 array."""
        return np.fromiter((self.find(x) for x in range(len(self.parent))), np.int64)


AnchorLeaf = Callable[[int, int], int]
"""``anchor(taller, lower)``: the leaf of component ``taller`` whose path up receives the lower
tree of component ``lower``."""


def merge_components(
    parent: list[int],
    layer: list[int],
    roots: Sequence[int],
    edge_a: np.ndarray,
    edge_b: np.ndarray,
    anchor: AnchorLeaf | None = None,
) -> None:
    """Join the trees rooted at ``roots`` along the edges, in the edges' order, in place.

    Edge ``(a, b)`` names components (indexes into ``roots``). Equal heights: a new node one layer
    above both roots is appended. Otherwise the lower tree's root goes under the ancestor of
    ``anchor(taller, lower)`` one layer above that root (default: the leaf ``taller`` itself,
    for components that start as single leaves). ``parent`` and ``layer`` hold every node.
    """
    sets = UnionFind(len(roots))
    find, link = sets.find, sets.link
    top_of = list(roots)  # the root of each set's tree, by the set's union-find root
    for a, b in zip(edge_a.tolist(), edge_b.tolist(), strict=True):
        ca, cb = find(a), find(b)
        if ca == cb:  # cannot happen for spanning-tree edges; kept for safety
            continue
        ra, rb = top_of[ca], top_of[cb]
        ha, hb = layer[ra], layer[rb]
        if ha == hb:
            top = len(parent)
            parent.append(-1)
            layer.append(ha + 1)
            parent[ra] = parent[rb] = top
        elif ha > hb:
            parent[rb] = _ancestor(parent, a if anchor is None else anchor(a, b), hb + 1)
            top = ra
        else:
            parent[ra] = _ancestor(parent, b if anchor is None else anchor(b, a), ha + 1)
            top = rb
        top_of[link(ca, cb)] = top


def _ancestor(parent: list[int], node: int, levels: int) -> int:
    for _ in range(levels):
        node = parent[node]
    return node


def merge_walk(n: int, edge_a: np.ndarray, edge_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 on the effective pairs: merge equal heights, collapse the lower tree otherwise.

    Returns ``(parent, layer)`` over ``n`` leaves plus the abstract nodes in creation order.
    """
    parent: list[int] = [-1] * n
    layer: list[int] = [0] * n
    merge_components(parent, layer, range(n), edge_a, edge_b)
    return np.asarray(parent, dtype=np.int64), np.asarray(layer, dtype=np.int64)


__all__ = ["AnchorLeaf", "UnionFind", "merge_components", "merge_walk"]
