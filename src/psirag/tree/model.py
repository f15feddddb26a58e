"""The tree as two arrays, plus the derived views every layer needs (children, leaf sets)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp


@dataclass(frozen=True, eq=False)
class Tree:
    """An abstract tree (or a forest of them) over ``n_leaves`` leaves.

    Nodes ``0 .. n_leaves-1`` are the leaves, in input order; abstract nodes follow, ordered by
    layer (so a root is always among the last nodes). ``parent[i] == -1`` marks a root.
    ``layer[i]`` is 0 for leaves and ``height`` for an abstract node; every leaf of a tree sits at
    the same depth, so a node's layer is also the depth of the leaves below it.
    """

    parent: np.ndarray
    layer: np.ndarray

    def __post_init__(self) -> None:
        if self.parent.shape != self.layer.shape or self.parent.ndim != 1:
            raise ValueError("parent and layer must be 1-d arrays of the same length")

    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0])

    @cached_property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self.layer == 0))

    @cached_property
    def roots(self) -> np.ndarray:
        return np.flatnonzero(self.parent < 0)

    @property
    def root(self) -> int:
        """The single root; raises for a forest."""
        roots = self.roots
        if roots.size != 1:
            raise ValueError(f"this is a forest of {roots.size} trees; use .roots")
        return int(roots[0])

    @property
    def depth(self) -> int:
        """Number of layers above the leaves (a lone leaf has depth 0)."""
        return int(self.layer.max()) if self.n_nodes else 0

    @cached_property
    def children_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Every node's children as one table, ``(offsets, order)``: node ``u``'s are
        ``order[offsets[u]:offsets[u + 1]]``, in id order. Made once per tree (a sort of every
        node), so a reader that walks many nodes reads it instead of asking node by node; an
        update hands the new tree its table patched (:mod:`psirag.tree.update`)."""
        has_parent = np.flatnonzero(self.parent >= 0)
        n = self.n_nodes
        if n < 2**31:  # (parent, node) as one distinct key: a plain sort, several times faster
            key = self.parent[has_parent].astype(np.int64) * n + has_parent
            order = np.sort(key) % n
        else:
            order = has_parent[np.argsort(self.parent[has_parent], kind="stable")]
        counts = np.bincount(self.parent[has_parent], minlength=self.n_nodes)
        offsets = np.zeros(self.n_nodes + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets, order.astype(np.int64)

    def children(self, node: int) -> np.ndarray:
        offsets, order = self.children_table
        return order[offsets[node] : offsets[node + 1]]

    def children_of(self, nodes: np.ndarray) -> np.ndarray:
        """All children of several nodes, concatenated (in node order)."""
        offsets, order = self.children_table
        if len(nodes) == 0:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([order[offsets[u] : offsets[u + 1]] for u in nodes])

    @cached_property
    def fan_out(self) -> np.ndarray:
        offsets, _ = self.children_table
        return np.diff(offsets)

    @cached_property
    def leaf_counts(self) -> np.ndarray:
        """Number of leaves below each node (1 for a leaf): summed up one layer at a time (an
        update carries it to the tree it makes, see :func:`carried_leaf_counts`)."""
        n = self.n_leaves
        counts = np.zeros(self.n_nodes, dtype=np.int64)
        counts[:n] = 1
        up = self.parent[:n]  # the leaves (ids 0 .. n-1): one unweighted count
        counts += np.bincount(up[up >= 0], minlength=self.n_nodes)
        inner_layer = self.layer[n:]
        for lv in range(1, self.depth):
            nodes = n + np.flatnonzero(inner_layer == lv)
            nodes = nodes[self.parent[nodes] >= 0]
            counts += np.bincount(
                self.parent[nodes], weights=counts[nodes], minlength=self.n_nodes
            ).astype(np.int64)
        return counts

    @cached_property
    def leaf_ancestors(self) -> np.ndarray:
        """(depth, n_leaves): row ``lv - 1`` holds each leaf's ancestor at layer ``lv`` (-1
        where the leaf's tree is lower). Depth steps of array indexing: what an update reads to
        count the leaves that entered or left a node, instead of the sparse membership."""
        n = self.n_leaves
        out = np.full((self.depth, n), -1, dtype=np.int64)
        current = self.parent[:n].astype(np.int64)
        for lv in range(self.depth):
            out[lv] = current
            up = np.full(n, -1, dtype=np.int64)
            has = current >= 0
            up[has] = self.parent[current[has]]
            current = up
        return out

    def nodes_bottom_up(self) -> np.ndarray:
        """Node ids ordered by layer (leaves first), stable within a layer."""
        return np.argsort(self.layer, kind="stable")

    @cached_property
    def leaf_membership(self) -> sp.csr_matrix:
        """Sparse 0/1 matrix (n_nodes x n_leaves): row u marks the leaves below node u."""
        n = self.n_leaves
        rows = [np.arange(n)]
        cols = [np.arange(n)]
        current = np.arange(n)
        anc = self.parent[:n].copy()
        while True:
            alive = anc >= 0
            if not alive.any():
                break
            rows.append(anc[alive])
            cols.append(current[alive])
            current = current[alive]
            anc = self.parent[anc[alive]]
        data = np.ones(sum(len(r) for r in rows), dtype=np.float32)
        import scipy.sparse as sp  # here: a search that never asks for this needs no scipy

        return sp.csr_matrix(
            (data, (np.concatenate(rows), np.concatenate(cols))), shape=(self.n_nodes, n)
        )

    def membership_of(self, nodes: np.ndarray | Sequence[int]) -> sp.csr_matrix:
        """``leaf_membership[nodes]`` (the same rows, leaves in ascending order), made from the
        children table when the whole matrix was not made: an update reads the rows of the few
        nodes it changed, and the whole matrix costs a pass over every leaf per layer with a
        sort. A node's row costs a pass over its subtree (a single tree's root: all leaves, in
        order, no sort)."""
        if "leaf_membership" in self.__dict__:
            return self.leaf_membership[nodes]
        import scipy.sparse as sp

        indptr, indices = self.membership_rows(nodes)
        data = np.ones(indices.size, dtype=np.float32)
        return sp.csr_matrix((data, indices, indptr), shape=(indptr.size - 1, self.n_leaves))

    def membership_rows(self, nodes: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The rows of :meth:`membership_of` as CSR ``(indptr, indices)`` (what an update of a
        few nodes reads; no scipy import)."""
        if "leaf_membership" in self.__dict__:
            rows = self.leaf_membership[nodes]
            return rows.indptr.astype(np.int64), rows.indices.astype(np.int64)
        targets = np.asarray(nodes, dtype=np.int64).reshape(-1)
        n = self.n_leaves
        one_root = int(self.roots[0]) if self.roots.size == 1 else -1
        below = np.unique(targets[targets != one_root])
        ptr, leaves = self.leaf_rows(below)
        spans = {u: leaves[ptr[k] : ptr[k + 1]] for k, u in enumerate(below.tolist())}
        if one_root >= 0:
            spans[one_root] = np.arange(n, dtype=np.int64)
        parts = [spans[u] for u in targets.tolist()]
        sizes = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
        indptr = np.zeros(targets.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=indptr[1:])
        indices = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        return indptr, indices

    def leaf_rows(self, nodes: np.ndarray | Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Per node, the leaves under it, ascending, as CSR rows ``(indptr, indices)``: one
        descent of the children table for all of them (array steps per layer) and one sort,
        in time of their subtrees' sizes."""
        offsets, order = self.children_table
        here = np.asarray(nodes, dtype=np.int64).reshape(-1)
        count = here.size
        owner = np.arange(count, dtype=np.int64)
        while here.size:
            inner = self.layer[here] > 0
            if not inner.any():
                break
            up = here[inner]
            kids = gather_ranges(order, offsets[up], offsets[up + 1])
            kid_owner = np.repeat(owner[inner], offsets[up + 1] - offsets[up])
            here = np.concatenate([here[~inner], kids])
            owner = np.concatenate([owner[~inner], kid_owner])
        n = max(self.n_leaves, 1)
        grouped = np.argsort(owner, kind="stable")  # runs already: near linear
        owner, here = owner[grouped], here[grouped]
        sizes = np.bincount(owner, minlength=count)
        indptr = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(sizes, out=indptr[1:])
        out = np.empty_like(here)
        big = sizes > n // 8  # a row of many leaves: a mask of all leaves, not a sort
        for k in np.flatnonzero(big).tolist():
            mask = np.zeros(n, dtype=bool)
            mask[here[indptr[k] : indptr[k + 1]]] = True
            out[indptr[k] : indptr[k + 1]] = np.flatnonzero(mask)
        small = ~big[owner]
        out[small] = np.sort(owner[small] * n + here[small]) % n
        return indptr, out

    def leaves_below(self, node: int) -> np.ndarray:
        """The leaves under ``node``, ascending (:meth:`leaf_rows` of one node): a pass over
        the node's subtree (:meth:`leaves_under` makes the membership of every node)."""
        return self.leaf_rows([node])[1]

    def leaves_under(self, node: int) -> np.ndarray:
        """The leaves under ``node``, ascending: read from :attr:`leaf_membership` when it was
        made (a build makes it), else by a pass over the node's subtree (:meth:`leaves_below`):
        a served index does not make the whole matrix for each generation it publishes."""
        m = self.__dict__.get("leaf_membership")
        if m is None:
            return self.leaves_below(node)
        return m.indices[m.indptr[node] : m.indptr[node + 1]].astype(np.int64)

    def ancestors_of(self, leaves: np.ndarray) -> np.ndarray:
        """A mask over the nodes: ``leaves`` and every node above one of them (what
        ``leaf_membership @ mask > 0`` gives), one array step per layer."""
        marked = np.zeros(self.n_nodes, dtype=bool)
        here = np.unique(np.asarray(leaves, dtype=np.int64))
        while here.size:
            marked[here] = True
            up = self.parent[here]
            up = up[up >= 0]
            here = np.unique(up[~marked[up]])
        return marked

    def layer_sizes(self) -> list[int]:
        """Number of nodes in each layer, leaves first."""
        return np.bincount(self.layer).tolist() if self.n_nodes else []


def carried_leaf_counts(
    old: Tree, new: Tree, node_map: np.ndarray, dirty: np.ndarray
) -> np.ndarray | None:
    """``new.leaf_counts`` from ``old``'s when those were made (else None): a node kept
    (``node_map``: old id -> new id, -1 for a node gone) and not ``dirty`` (the nodes whose
    leaves changed, closed upwards) keeps its count, a dirty one sums its children's, lower
    layers first. In time of the change, not of the tree."""
    before = old.__dict__.get("leaf_counts")
    if before is None:
        return None
    counts = np.zeros(new.n_nodes, dtype=np.int64)
    counts[: new.n_leaves] = 1
    kept = np.flatnonzero(node_map >= new.n_leaves)
    counts[node_map[kept]] = before[kept]
    dirty = np.asarray(dirty, dtype=np.int64)
    offsets, order = new.children_table
    for u in dirty[np.argsort(new.layer[dirty], kind="stable")].tolist():
        counts[u] = int(counts[order[offsets[u] : offsets[u + 1]]].sum())
    return counts


def gather_ranges(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``values[starts[0]:ends[0]]``, ``values[starts[1]:ends[1]]``, ... concatenated, as one
    fancy index: a beam of 160 nodes would otherwise cost 160 Python-level slices per layer
    (retrieval's tree search and the insertion descent gather children this way)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return values[:0]
    first = np.cumsum(lengths) - lengths  # where each range begins in the output
    return values[np.repeat(starts - first, lengths) + np.arange(total)]
