"""The living tree: insert and remove leaves without a rebuild (SPEC 4, paper App. G).

Pure functions over arrays, like the builder: a :class:`Tree` and leaf vectors in, a new
:class:`Tree` plus what changed out (:class:`TreeUpdate`). No I/O, no models.

Insertion (App. G). A new chunk is a tree of height 0, a batch of new chunks a tree built by
:func:`build_tree`; either is collapsed into the main tree by Algorithm 1's rule applied to its
most similar (new, old) leaf pair: a lower tree's root goes under the old leaf's ancestor one
layer above that root, a tree as tall as the main one gets a new root over both, a taller one
takes the main root under its own leaf's ancestor. For a single chunk this is "under the parent
of its most similar leaf". App. G warns that many isolated insertions under one parent amplify
its bias, so the default rule (``"auto"``) sends a new chunk down the batch path exactly when
it is closer to another new chunk than to anything indexed: new chunks joined by such pairs are
built into their own subtree (the pairs a fresh build's walk would merge before touching the old
tree); the rest are inserted one by one. ``"single"`` and ``"batch"`` force one path.

Deletion (beyond the paper). Leaves go; inner nodes left empty are pruned; a node left with one
child hands that child to the most similar node of its layer in the same tree (one with room
first) and goes too; a root left with one child is dropped, so the tree gets shorter but stays
equi-depth.

Afterwards every node above ``max_children`` is split by the builder's own rebalancing
(:func:`psirag.tree.rebalance.split_overfull`), and ids are renumbered the builder's way: leaves
first (old leaves in their order, then the new ones), abstract nodes by layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from psirag.errors import IndexFormatError, InputError
from psirag.tree.build import TreeMode, build_tree
from psirag.tree.dasgupta import dasgupta_terms
from psirag.tree.model import Tree, gather_ranges
from psirag.tree.rebalance import renumber_order, reorder, split_overfull

__all__ = [
    "INSERT_RULES",
    "InsertRule",
    "RebuildRule",
    "TreeUpdate",
    "check_invariants",
    "descend",
    "insert_leaves",
    "remove_leaves",
    "tree_drift",
    "tree_shape",
]

InsertRule = Literal["auto", "single", "batch"]
"""How new chunks enter the tree: see the module docstring."""
INSERT_RULES: tuple[str, ...] = ("auto", "single", "batch")

_BLOCK = 2048

INSERT_BEAM = 40
"""Nodes kept per layer when a new chunk's insertion point is found by descent (retrieval's
default beam: on 2Wiki it finds the scan's leaf or one as similar for most chunks)."""
SCAN_BELOW = 2048
"""Below this many leaves the insertion point is found by comparing with every leaf: the exact
answer costs less than the descent's per-layer steps."""


@dataclass(frozen=True)
class TreeUpdate:
    """The result of an update.

    ``node_map[old]`` is the new id of old node ``old`` (-1 where it was removed), so every
    per-node array of the old tree (abstracts, routing vectors) can be carried over. ``dirty``
    lists, sorted, the new tree's abstract nodes whose subtree changed (a new node, a changed
    leaf set or a changed set of children, and every ancestor of such a node): their abstracts
    and routing vectors must be recomputed, every other node's are still valid.
    ``new_leaves`` are the new ids of the added leaves, in input order (always the last ids).
    ``counts`` says how the change was made (chunks by path, subtrees grafted, nodes re-homed).
    """

    tree: Tree
    node_map: np.ndarray
    dirty: np.ndarray
    new_leaves: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def dirty_with_siblings(self) -> np.ndarray:
        """``dirty`` plus the abstract siblings of dirty nodes: what keyword abstracts, which are
        scored against their siblings (SPEC 1.6), need to refresh."""
        t = self.tree
        parents = t.parent[self.dirty]
        sibs = t.children_of(np.unique(parents[parents >= 0]))
        sibs = sibs[t.layer[sibs] > 0]
        return np.union1d(self.dirty, sibs).astype(np.int64)


# ------------------------------------------------------------------ invariants


def check_invariants(tree: Tree, max_children: int | None = None, *, forest: bool = False) -> None:
    """Raise :class:`IndexFormatError` naming the first broken invariant of the tree.

    Checked: leaves are nodes ``0 .. n_leaves-1`` and abstract ids read bottom-up; every parent
    id exists and sits exactly one layer above its child (so each leaf reaches one root and all
    leaves of a tree are at the same depth, the root's layer); every abstract node has a child
    and at most ``max_children`` of them (the root included); one root (``forest=True``: one
    per tree, any number of trees).
    """
    parent = np.asarray(tree.parent)
    layer = np.asarray(tree.layer)
    n_nodes = parent.size

    def fail(what: str, nodes: np.ndarray) -> None:
        shown = np.asarray(nodes).ravel()[:5].tolist()
        raise IndexFormatError(f"broken tree: {what} (nodes {shown})")

    if n_nodes == 0:
        raise IndexFormatError("broken tree: it has no nodes")
    if (layer < 0).any():
        fail("negative layer numbers", np.flatnonzero(layer < 0))
    n = int(np.count_nonzero(layer == 0))
    if n == 0 or (layer[:n] != 0).any():
        fail("leaves (layer 0) must be the nodes 0 .. n_leaves-1", np.flatnonzero(layer[:n] != 0))
    if (np.diff(layer[n:].astype(np.int64)) < 0).any():
        fail(
            "abstract node ids must be ordered by layer", n + np.flatnonzero(np.diff(layer[n:]) < 0)
        )
    bad = (parent < -1) | (parent >= n_nodes)
    if bad.any():
        fail("parent ids out of range", np.flatnonzero(bad))
    has = np.flatnonzero(parent >= 0)
    step = layer[parent[has]].astype(np.int64) - layer[has].astype(np.int64)
    if (step != 1).any():
        fail(
            "a parent must sit exactly one layer above its child (leaves at unequal depths)",
            has[step != 1],
        )
    fan = np.bincount(parent[has], minlength=n_nodes)
    empty = n + np.flatnonzero(fan[n:] == 0)
    if empty.size:
        fail("abstract nodes without children", empty)
    if max_children is not None and fan.max(initial=0) > max_children:
        fail(
            f"nodes with more than max_children={max_children} children",
            np.flatnonzero(fan > max_children),
        )
    roots = np.flatnonzero(parent < 0)
    if not forest and roots.size != 1:
        fail(f"{roots.size} roots where one tree has one", roots)


# ------------------------------------------------------------------ the working tree


class _Kids:
    """Children lists by working id, made from the old tree's children table on first use: an
    update touches a few nodes, and thousands of small lists up front cost more than the
    update (allocation and the garbage collector's passes over a large index)."""

    def __init__(self, tree: Tree) -> None:
        self._n = tree.n_nodes
        # the tree's own cached table, which the descent reads too: sorted once per tree
        self._ptr, self._order = tree._children_csr
        self._lists: dict[int, list[int]] = {}

    def __getitem__(self, u: int) -> list[int]:
        got = self._lists.get(u)
        if got is None:
            got = self._order[self._ptr[u] : self._ptr[u + 1]].tolist() if u < self._n else []
            self._lists[u] = got
        return got

    def __setitem__(self, u: int, kids: list[int]) -> None:
        self._lists[u] = kids


class _Column:
    """One per-node column of the working tree: the old tree's array, the entries an update
    changed, then the added nodes. An update touches a few nodes, and a Python list of every
    node (what this replaced) cost more than the update at 200k leaves."""

    def __init__(self, base: np.ndarray) -> None:
        self._base = base
        self._n = int(base.shape[0])
        self._changed: dict[int, Any] = {}
        self._added: list[Any] = []

    def __len__(self) -> int:
        return self._n + len(self._added)

    def __getitem__(self, u: int) -> Any:
        if u >= self._n:
            return self._added[u - self._n]
        got = self._changed.get(u)
        return self._base[u].item() if got is None else got

    def __setitem__(self, u: int, value: Any) -> None:
        if u >= self._n:
            self._added[u - self._n] = value
        else:
            self._changed[u] = value

    def append(self, value: Any) -> None:
        self._added.append(value)

    def array(self, dtype: Any) -> np.ndarray:
        """Every entry, as one new array."""
        out = np.empty(len(self), dtype=dtype)
        out[: self._n] = self._base
        if self._changed:
            at = np.fromiter(self._changed, dtype=np.int64, count=len(self._changed))
            out[at] = np.asarray(list(self._changed.values()), dtype=dtype)
        if self._added:
            out[self._n :] = np.asarray(self._added, dtype=dtype)
        return out


class _Work:
    """A mutable copy of a tree (columns over its arrays) that updates edit, then turn back into
    a :class:`Tree`.

    Working ids: the old tree's ids, then added nodes in creation order. ``row[u]`` is a leaf's
    row in the combined vectors: the old leaves' rows first, then the new chunks'. The two
    arrays are kept apart: stacking them would copy every leaf vector for each update.
    """

    def __init__(self, tree: Tree, vectors: np.ndarray, new: np.ndarray | None = None) -> None:
        self.old = tree
        self.vectors = vectors  # (old leaves, dim)
        self.new = new if new is not None else vectors[:0]  # (new chunks, dim)
        n, n_nodes = tree.n_leaves, tree.n_nodes
        self.parent = _Column(tree.parent)
        self.layer = _Column(tree.layer)
        self.alive = _Column(np.ones(n_nodes, dtype=bool))
        self.row = _Column(np.concatenate([np.arange(n), np.full(n_nodes - n, -1)]))
        self.kids = _Kids(tree)
        self.new_rows: list[int] = []  # working ids of added leaves, in input order
        self.counts: dict[str, int] = {}

    def add(self, layer: int, row: int = -1) -> int:
        self.parent.append(-1)
        self.layer.append(layer)
        self.alive.append(True)
        self.row.append(row)
        self.kids[len(self.parent) - 1] = []
        return len(self.parent) - 1

    def set_parent(self, u: int, p: int) -> None:
        old = self.parent[u]
        if old >= 0:
            self.kids[old].remove(u)
        self.parent[u] = p
        if p >= 0:
            self.kids[p].append(u)

    def kill(self, u: int) -> None:
        self.set_parent(u, -1)
        self.alive[u] = False

    def ancestor(self, u: int, layer: int) -> int:
        while self.layer[u] < layer:
            if self.parent[u] < 0:
                raise AssertionError(f"no ancestor of node {u} at layer {layer}")
            u = self.parent[u]
        return u

    def top(self, u: int) -> int:
        while self.parent[u] >= 0:
            u = self.parent[u]
        return u

    def bump(self, key: str, by: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + by

    def vector(self, row: int) -> np.ndarray:
        """Row ``row`` of the combined vectors (old leaves, then new chunks)."""
        n = self.vectors.shape[0]
        return self.vectors[row] if row < n else self.new[row - n]

    # -------------------------------------------------------------- insertion

    def graft(self, sub: Tree, rows: Sequence[int], sub_leaf: int, partner: int) -> None:
        """Collapse ``sub`` (leaves = new chunks ``rows``) into the tree by Algorithm 1's rule,
        ``sub_leaf`` (a sub-tree leaf id) and ``partner`` (a working leaf) being the pair."""
        ids = [
            self.add(int(sub.layer[u]), rows[u] if u < len(rows) else -1)
            for u in range(sub.n_nodes)
        ]
        for u in range(sub.n_nodes):
            if sub.parent[u] >= 0:
                self.set_parent(ids[u], ids[int(sub.parent[u])])
        self.new_rows.extend(ids[: len(rows)])
        sub_root, main_root = ids[sub.root], self.top(partner)
        hb, hm = int(sub.layer[sub.root]), self.layer[main_root]
        if hb < hm:
            self.set_parent(sub_root, self.ancestor(partner, hb + 1))
        elif hb == hm:
            root = self.add(hm + 1)
            self.set_parent(sub_root, root)
            self.set_parent(main_root, root)
        else:
            self.set_parent(main_root, self.ancestor(ids[sub_leaf], hm + 1))

    # -------------------------------------------------------------- deletion

    def prune(self, removed: np.ndarray, max_children: int | None) -> None:
        """Remove leaves, prune emptied nodes, re-home only-children, drop one-child roots."""
        leaf_vecs = self.vectors[: self.old.n_leaves].astype(np.float64)
        sums = np.asarray(self.old.leaf_membership @ leaf_vecs)
        # each node's root, by array steps (a Python walk per node cost seconds at 200k)
        parent = self.parent.array(np.int64)
        tree_of = np.arange(parent.size)
        while True:
            up = parent[tree_of]
            moves = up >= 0
            if not moves.any():
                break
            tree_of[moves] = up[moves]
        layer_arr = self.layer.array(np.int64)
        by_layer: dict[int, set[int]] = {}  # alive nodes per layer, made when a layer is read

        def layer_set(lv: int) -> set[int]:
            got = by_layer.get(lv)
            if got is None:
                got = {v for v in np.flatnonzero(layer_arr == lv).tolist() if self.alive[v]}
                by_layer[lv] = got
            return got

        def shift(u: int, delta: np.ndarray) -> None:
            while u >= 0:
                sums[u] += delta
                u = self.parent[u]

        def drop(u: int) -> int:
            p = self.parent[u]
            self.kill(u)
            if self.layer[u] in by_layer:
                by_layer[self.layer[u]].discard(u)
            return p

        touched: set[int] = set()
        for leaf in removed.tolist():
            shift(self.parent[leaf], -sums[leaf])
            p = drop(leaf)
            if p >= 0:
                touched.add(p)
        self.bump("removed", int(removed.size))
        for lv in range(1, self.old.depth + 1):
            here = sorted(u for u in touched if self.layer[u] == lv and self.alive[u])
            for u in here:
                if not self.kids[u]:
                    p = drop(u)
                    self.bump("pruned")
                    if p >= 0:
                        touched.add(p)
            for u in here:
                if not self.alive[u] or len(self.kids[u]) != 1 or self.parent[u] < 0:
                    continue
                cands = np.asarray(
                    sorted(v for v in layer_set(lv) if v != u and tree_of[v] == tree_of[u]),
                    dtype=np.int64,
                )
                if cands.size == 0:
                    continue  # u is alone in its layer: the root collapse below removes it
                if max_children is not None:
                    room = np.asarray([len(self.kids[v]) < max_children for v in cands.tolist()])
                    if room.any():
                        cands = cands[room]
                c = self.kids[u][0]
                cand_sums = sums[cands]
                score = cand_sums @ sums[c] / (np.linalg.norm(cand_sums, axis=1) + 1e-12)
                target = int(cands[int(np.argmax(score))])
                shift(u, -sums[c])
                self.set_parent(c, target)
                shift(target, sums[c])
                p = drop(u)
                self.bump("rehomed")
                if p >= 0:
                    touched.add(p)
        for r in np.unique(tree_of[self.alive.array(bool)]).tolist():
            while self.alive[r] and self.layer[r] > 0 and len(self.kids[r]) == 1:
                c = self.kids[r][0]
                self.kill(r)
                self.bump("roots_dropped")
                r = c

    # -------------------------------------------------------------- back to a Tree

    def finish(self, max_children: int | None) -> TreeUpdate:
        parent = self.parent.array(np.int64)
        layer = self.layer.array(np.int64)
        alive = self.alive.array(bool)
        ids = np.arange(parent.size)
        n_old = self.old.n_leaves
        old_leaves = np.flatnonzero(alive[:n_old])
        leaves = np.concatenate([old_leaves, np.asarray(self.new_rows, dtype=np.int64)])
        inner = ids[alive & (layer > 0)]
        inner = inner[np.argsort(layer[inner], kind="stable")]
        order = np.concatenate([leaves, inner])
        compact_id = np.full(parent.size, -1, dtype=np.int64)
        compact_id[order] = np.arange(order.size)
        p = parent[order]
        compact = Tree(
            parent=np.where(p >= 0, compact_id[np.maximum(p, 0)], -1).astype(np.int64),
            layer=layer[order].astype(np.int32),
        )
        rows = self.row.array(np.int64)[leaves]
        final, final_id = compact, np.arange(compact.n_nodes)
        if max_children is not None and compact.fan_out.max(initial=0) > max_children:
            # sums read lazily: a split reads its node's children, not every leaf of the tree
            split_p, split_l = split_overfull(
                compact.parent.tolist(),
                compact.layer.tolist(),
                lambda leaf: self.vector(int(rows[leaf])),
                max_children,
                n_leaves=compact.n_leaves,
                dim=self.vectors.shape[1],
            )
            split_layer = np.asarray(split_l, dtype=np.int64)
            order2 = renumber_order(split_layer, compact.n_leaves)
            final = reorder(np.asarray(split_p, dtype=np.int64), split_layer, order2)
            inv = np.empty_like(order2)
            inv[order2] = np.arange(order2.size)
            final_id = inv[: compact.n_nodes]
            self.bump("split", final.n_nodes - compact.n_nodes)
        old_n = self.old.n_nodes
        node_map = np.full(old_n, -1, dtype=np.int64)
        kept = compact_id[:old_n] >= 0
        node_map[kept] = final_id[compact_id[:old_n][kept]]
        new_leaves = final_id[compact_id[np.asarray(self.new_rows, dtype=np.int64)]]
        dirty = _dirty(self.old, final, node_map)
        return TreeUpdate(
            tree=final,
            node_map=node_map,
            dirty=dirty,
            new_leaves=np.asarray(new_leaves, dtype=np.int64),
            counts=dict(self.counts),
        )


def _dirty(old: Tree, new: Tree, node_map: np.ndarray) -> np.ndarray:
    """New abstract nodes whose subtree differs from their old node's (or that are new).

    Bottom-up, one layer at a time: a node is clean when it has an old node, as many children
    as that old node, and every child is clean with that old node as its old parent (the map is
    one-to-one, so the children are then the very same)."""
    pre = np.full(new.n_nodes, -1, dtype=np.int64)
    kept = node_map >= 0
    pre[node_map[kept]] = np.flatnonzero(kept)
    clean = np.zeros(new.n_nodes, dtype=bool)
    clean[: new.n_leaves] = pre[: new.n_leaves] >= 0
    has_parent = np.flatnonzero(new.parent >= 0)
    p_new = new.parent[has_parent]
    old_parent_of = np.where(pre[has_parent] >= 0, old.parent[np.maximum(pre[has_parent], 0)], -2)
    same_parent = (pre[p_new] >= 0) & (old_parent_of == pre[p_new])
    old_fan = old.fan_out
    for lv in range(1, new.depth + 1):
        ok = clean[has_parent] & same_parent
        bad = np.bincount(p_new[~ok], minlength=new.n_nodes)
        nodes = np.flatnonzero(new.layer == lv)
        o = pre[nodes]
        clean[nodes] = (
            (o >= 0) & (bad[nodes] == 0) & (new.fan_out[nodes] == old_fan[np.maximum(o, 0)])
        )
    return np.flatnonzero(~clean[new.n_leaves :]) + new.n_leaves


# ------------------------------------------------------------------ public API


def _vectors(name: str, x: np.ndarray, rows: int | None, dim: int | None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise InputError(f"{name} must be a 2-d array (n, dim), got shape {a.shape}")
    if rows is not None and a.shape[0] != rows:
        raise InputError(f"{name} has {a.shape[0]} rows, the tree has {rows} leaves")
    if dim is not None and a.shape[1] != dim:
        raise InputError(f"{name} has {a.shape[1]} dimensions, the tree's leaf vectors {dim}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    bad = ~np.isfinite(a).all(axis=1) | (np.abs(a).sum(axis=1) == 0)
    if bad.any():
        raise InputError(
            f"{name} has NaN, infinite or all-zero rows {np.flatnonzero(bad)[:5].tolist()}"
        )
    return a


def _check_max_children(max_children: int | None) -> None:
    if max_children is not None and (isinstance(max_children, bool) or max_children < 2):
        raise InputError(f"max_children must be at least 2 (or None), got {max_children!r}")


def _best_rows(queries: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query row, the most similar base row and its similarity (blockwise)."""
    idx = np.empty(queries.shape[0], dtype=np.int64)
    best = np.empty(queries.shape[0], dtype=np.float32)
    for lo in range(0, queries.shape[0], _BLOCK):
        s = queries[lo : lo + _BLOCK] @ base.T
        idx[lo : lo + _BLOCK] = np.argmax(s, axis=1)
        best[lo : lo + _BLOCK] = s[np.arange(s.shape[0]), idx[lo : lo + _BLOCK]]
    return idx, best


def _trusted(name: str, x: np.ndarray, rows: int, dim: int | None) -> np.ndarray:
    """Shape and dtype checks only, for arrays the index already checked when it stored them:
    a pass over every row would cost what the descent saves."""
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[0] != rows or (dim is not None and a.shape[1] != dim):
        want = f"({rows}, {dim if dim is not None else 'dim'})"
        raise InputError(f"{name} must have shape {want}, got {a.shape}")
    return a if a.dtype == np.float32 else a.astype(np.float32)


def _stale_vectors(
    tree: Tree, node_vectors: np.ndarray, stale: np.ndarray | None
) -> dict[int, np.ndarray]:
    """Vectors for inner nodes whose rows are not current (new nodes of an update not yet
    refreshed): the normalised sum of their children's vectors, computed bottom-up."""
    if stale is None or np.asarray(stale).size == 0:
        return {}
    nodes = np.asarray(stale, dtype=np.int64).ravel()
    nodes = nodes[(nodes >= tree.n_leaves) & (nodes < tree.n_nodes)]
    got: dict[int, np.ndarray] = {}
    for u in nodes[np.argsort(tree.layer[nodes], kind="stable")].tolist():
        kids = tree.children(u).tolist()
        total = np.sum([got[k] if k in got else node_vectors[k] for k in kids], axis=0)
        got[u] = (total / (np.linalg.norm(total) + 1e-12)).astype(np.float32)
    return got


def descend(
    tree: Tree,
    node_vectors: np.ndarray,
    queries: np.ndarray,
    *,
    beam: int = INSERT_BEAM,
    stale: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For each query row, the most similar leaf a beam descent finds, and its similarity.

    From the root down, each layer keeps the ``beam`` nodes most similar to the query among the
    children of the nodes kept one layer up (the search of paper Algorithm 2 that retrieval
    runs), and the best leaf under the last kept layer is the answer. A query reads about
    depth x beam x max_children rows instead of every leaf. ``node_vectors`` has one unit row
    per node (leaves: their vectors; inner nodes: routing vectors). ``stale`` lists inner nodes
    whose rows are out of date (see :func:`_stale_vectors`). One tree only.
    """
    if beam < 1:
        raise InputError(f"beam must be at least 1, got {beam!r}")
    offsets, order = tree._children_csr
    patched = _stale_vectors(tree, node_vectors, stale)
    patched_ids = np.fromiter(patched, dtype=np.int64, count=len(patched))
    m = queries.shape[0]
    idx = np.empty(m, dtype=np.int64)
    best = np.empty(m, dtype=np.float32)
    root = np.asarray([tree.root], dtype=np.int64)
    for j in range(m):
        q = queries[j]
        cands = root
        while True:
            kids = gather_ranges(order, offsets[cands], offsets[cands + 1])
            if kids.size == 0:  # a lone leaf is the whole tree
                idx[j], best[j] = int(cands[0]), float(np.take(node_vectors, cands, axis=0)[0] @ q)
                break
            rows = np.take(node_vectors, kids, axis=0)
            if patched:
                for pos in np.flatnonzero(np.isin(kids, patched_ids)).tolist():
                    rows[pos] = patched[int(kids[pos])]
            scores = rows @ q
            if kids[0] < tree.n_leaves:  # equi-depth: one child a leaf, all leaves
                k = int(np.argmax(scores))
                idx[j], best[j] = int(kids[k]), float(scores[k])
                break
            if kids.size > beam:
                top = np.argpartition(-scores, beam - 1)[:beam]
                cands = kids[np.sort(top)]
            else:
                cands = kids
    return idx, best


def _given_points(
    nearest: tuple[np.ndarray, np.ndarray], old: np.ndarray, new: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Insertion points given by the caller, checked; rows without one are scanned."""
    idx = np.asarray(nearest[0], dtype=np.int64).copy()
    best = np.asarray(nearest[1], dtype=np.float32).copy()
    m = new.shape[0]
    if idx.shape != (m,) or best.shape != (m,):
        raise InputError(f"nearest must give one leaf and one score per new row ({m})")
    if idx.size and int(idx.max()) >= old.shape[0]:
        raise InputError(f"nearest names leaf {int(idx.max())} of a tree of {old.shape[0]}")
    missing = np.flatnonzero(idx < 0)
    if missing.size:
        idx[missing], best[missing] = _best_rows(new[missing], old)
    return idx, best


def batch_groups(new: np.ndarray, best_old: np.ndarray) -> list[np.ndarray]:
    """The ``"auto"`` rule's groups: new chunks linked by a pair more similar than either's best
    indexed leaf, as connected components (singletons take the single path)."""
    m = new.shape[0]
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for lo in range(0, m, _BLOCK):
        s = new[lo : lo + _BLOCK] @ new.T
        hi = lo + s.shape[0]
        s[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf
        ok = (s > best_old[lo:hi, None]) & (s > best_old[None, :])
        r, c = np.nonzero(ok)
        rows.append(r + lo)
        cols.append(c)
    r_all, c_all = np.concatenate(rows), np.concatenate(cols)
    # here, not at module level: csgraph pulls in scipy.linalg, which no search needs
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(r_all.size), (r_all, c_all)), shape=(m, m))
    n_comp, label = connected_components(graph, directed=False)
    groups = [np.flatnonzero(label == k) for k in range(n_comp)]
    return sorted(groups, key=lambda g: int(g[0]))


def insert_leaves(
    tree: Tree,
    leaf_vectors: np.ndarray,
    new_vectors: np.ndarray,
    *,
    max_children: int | None = 40,
    rule: InsertRule = "auto",
    mode: TreeMode = "exact",
    neighbors: int = 32,
    node_vectors: np.ndarray | None = None,
    beam: int = INSERT_BEAM,
    stale: np.ndarray | None = None,
    scan_below: int | None = None,
    nearest: tuple[np.ndarray, np.ndarray] | None = None,
) -> TreeUpdate:
    """Add one leaf per row of ``new_vectors`` (unit rows, like the builder's) to one tree.

    ``leaf_vectors`` are the tree's current leaf vectors, row ``i`` for leaf ``i``. The new
    leaves get ids ``n_leaves ..`` in input order. ``rule`` picks the path (module docstring);
    ``mode`` and ``neighbors`` are passed to :func:`build_tree` for batch subtrees.

    Each new chunk's most similar indexed leaf (its insertion point) is found by comparing it
    with every leaf, or, given ``node_vectors`` (one row per node: the index's leaf and routing
    vectors) and a tree of at least ``scan_below`` leaves (default :data:`SCAN_BELOW`), by
    :func:`descend` with ``beam`` (``stale``: inner nodes whose rows are out of date). The
    descent trusts the stored vectors (their shapes are checked, not every value): a pass over
    them is what it saves. ``nearest``: the insertion points found elsewhere (per new row, the
    most similar leaf and its cosine; the index's HNSW graph finds them), in place of both
    (a row without one, leaf -1, is scanned).
    """
    if rule not in INSERT_RULES:
        raise InputError(f"insert rule must be one of {', '.join(INSERT_RULES)}, got {rule!r}")
    _check_max_children(max_children)
    if tree.roots.size != 1:
        raise InputError(
            f"insert_leaves adds to one tree; this is a forest of {tree.roots.size} trees "
            "(a tree-per-document index): build the new document's own tree instead"
        )
    floor = SCAN_BELOW if scan_below is None else scan_below
    by_descent = node_vectors is not None and tree.n_leaves >= floor and nearest is None
    if by_descent or nearest is not None:
        old = _trusted("leaf_vectors", leaf_vectors, tree.n_leaves, None)
    else:
        old = _vectors("leaf_vectors", leaf_vectors, tree.n_leaves, None)
    new = _vectors("new_vectors", new_vectors, None, old.shape[1])
    n, m = old.shape[0], new.shape[0]
    work = _Work(tree, old, new)
    if m == 0:
        return work.finish(max_children)
    if nearest is not None:
        best_idx, best_old = _given_points(nearest, old, new)
        work.bump("by_graph", m)
    elif by_descent:
        assert node_vectors is not None
        nodes = _trusted("node_vectors", node_vectors, tree.n_nodes, old.shape[1])
        best_idx, best_old = descend(tree, nodes, new, beam=beam, stale=stale)
        work.bump("descended", m)
    else:
        best_idx, best_old = _best_rows(new, old)
    if rule == "single" or m == 1:
        groups = [np.array([j]) for j in range(m)]
    elif rule == "batch":
        groups = [np.arange(m)]
    else:
        groups = batch_groups(new, best_old)
    placed: list[int] = []  # chunk numbers already in the tree (single path sees them)
    where: dict[int, int] = {}  # chunk number -> working leaf id
    singles = [int(g[0]) for g in groups if g.size == 1]
    for g in groups:
        if g.size == 1:
            continue
        sub = build_tree(new[g], max_children=max_children, mode=mode, neighbors=neighbors)
        i = int(np.argmax(best_old[g]))
        work.graft(sub, [n + int(j) for j in g], i, int(best_idx[g[i]]))
        for k, j in enumerate(g.tolist()):
            where[j] = work.new_rows[-g.size + k]
        placed.extend(g.tolist())
        work.bump("batch", int(g.size))
        work.bump("subtrees")
    lone = Tree(parent=np.array([-1], dtype=np.int64), layer=np.array([0], dtype=np.int32))
    for j in singles:
        partner = int(best_idx[j])
        if placed:
            s = new[placed] @ new[j]
            k = int(np.argmax(s))
            if s[k] > best_old[j]:
                partner = where[placed[k]]
        work.graft(lone, [n + j], 0, partner)
        where[j] = work.new_rows[-1]
        placed.append(j)
        work.bump("single")
    # graft appends in path order; new leaf ids must follow input order
    work.new_rows = [where[j] for j in range(m)]
    return work.finish(max_children)


def remove_leaves(
    tree: Tree,
    leaf_ids: Iterable[int] | np.ndarray,
    leaf_vectors: np.ndarray,
    *,
    max_children: int | None = 40,
) -> TreeUpdate:
    """Remove the given leaves from a tree or a forest (a tree that loses every leaf goes).

    The remaining leaves keep their relative order as ids ``0 .. n_left-1``. At least one leaf
    must remain: clearing an index is a rebuild, not an update.
    """
    _check_max_children(max_children)
    vecs = _vectors("leaf_vectors", leaf_vectors, tree.n_leaves, None)
    ids = np.asarray(list(leaf_ids) if not isinstance(leaf_ids, np.ndarray) else leaf_ids)
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"leaf ids must be integers, got {ids.dtype} values")
    ids = ids.astype(np.int64).ravel()
    n = tree.n_leaves
    unknown = ids[(ids < 0) | (ids >= n)]
    if unknown.size:
        raise InputError(
            f"unknown leaf ids {unknown[:5].tolist()}: the tree's leaves are 0 .. {n - 1}"
        )
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InputError(f"leaf ids given more than once: {uniq[counts > 1][:5].tolist()}")
    if uniq.size >= n:
        raise InputError(
            f"removing all {n} leaves would leave an empty tree; keep at least one leaf "
            "(to empty an index, build a new one)"
        )
    work = _Work(tree, vecs)
    if uniq.size:
        work.prune(uniq, max_children)
    return work.finish(max_children)


# ------------------------------------------------------------------ drift


def tree_shape(tree: Tree) -> dict[str, Any]:
    """Layer sizes and fan-out statistics of the abstract nodes (cheap: no vectors)."""
    fan = tree.fan_out[tree.n_leaves :]
    return {
        "depth": tree.depth,
        "layers": tree.layer_sizes(),
        "fan_out_mean": round(float(fan.mean()), 3) if fan.size else 0.0,
        "fan_out_p95": float(np.percentile(fan, 95)) if fan.size else 0.0,
        "fan_out_max": int(fan.max()) if fan.size else 0,
        "single_child_share": round(float(np.mean(fan == 1)), 4) if fan.size else 0.0,
    }


def _pair_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the leaf pairs grouped together by labels ``b`` that ``a`` also groups."""
    _, cb = np.unique(b, return_counts=True)
    pairs_b = float((cb * (cb - 1) // 2).sum())
    if pairs_b == 0:
        return 1.0
    _, cab = np.unique(np.stack([a, b]), axis=1, return_counts=True)
    return float((cab * (cab - 1) // 2).sum()) / pairs_b


def _ancestors_at(tree: Tree, layer: int) -> np.ndarray:
    anc = np.arange(tree.n_leaves)
    for _ in range(min(layer, tree.depth)):
        anc = np.where(tree.parent[anc] >= 0, tree.parent[anc], anc)
    return anc


def tree_drift(tree: Tree, fresh: Tree, leaf_vectors: np.ndarray) -> dict[str, Any]:
    """How far an updated tree is from a fresh build over the same leaves (same leaf ids).

    ``kept_pairs_layer{1,2}``: the share of leaf pairs the fresh tree puts under one layer-1
    (layer-2) node that the updated tree also keeps under one; shape statistics of both; and
    ``placement_ratio``, the updated tree's Dasgupta cost over its random-placement expectation
    (:attr:`psirag.tree.dasgupta.DasguptaTerms.vs_random`, above 1 = dissimilar pairs split high)
    divided by the fresh tree's: 1 is as good as fresh, below 1 worse.
    """
    if tree.n_leaves != fresh.n_leaves:
        raise InputError(f"the trees have {tree.n_leaves} and {fresh.n_leaves} leaves")
    out: dict[str, Any] = {}
    for lv in (1, 2):
        out[f"kept_pairs_layer{lv}"] = round(
            _pair_agreement(_ancestors_at(tree, lv), _ancestors_at(fresh, lv)), 4
        )
    mine, theirs = dasgupta_terms(tree, leaf_vectors), dasgupta_terms(fresh, leaf_vectors)
    ratio = mine.vs_random / theirs.vs_random if theirs.vs_random > 0 else float("nan")
    out["placement_ratio"] = round(float(ratio), 5)
    out["updated"] = tree_shape(tree)
    out["fresh"] = tree_shape(fresh)
    return out


@dataclass(frozen=True)
class RebuildRule:
    """When an updated tree is due for a full rebuild (README "Updating an index").

    ``max_churn`` bounds the leaves added plus removed since the last full build, as a share of
    the leaves that build had. Half by default: on 2Wiki, trees grown by up to two thirds kept
    psi's Recall@5 within 0.35 points of a fresh build (the tree alone within 1), while their
    layer-1 nodes grew wider with every batch (BENCHMARKS.md, "Updating the tree").
    """

    max_churn: float = 0.5

    def __post_init__(self) -> None:
        if not self.max_churn > 0:
            raise InputError(f"max_churn must be positive, got {self.max_churn!r}")

    def churn(self, built_leaves: int, added: int, removed: int) -> float:
        return (added + removed) / max(built_leaves, 1)

    def due(self, built_leaves: int, added: int, removed: int) -> bool:
        """Whether the changes since a build of ``built_leaves`` leaves call for a rebuild."""
        return self.churn(built_leaves, added, removed) >= self.max_churn
