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

Afterwards every node above ``max_children`` is split by the builder's own rebalancing loop
(:func:`psirag.tree.rebalance.split_wide_nodes`, visiting only the wide nodes), and ids are
renumbered the builder's way: leaves first (old leaves in their order, then the new ones),
abstract nodes by layer. The work is proportional to the change, plus array copies over the
nodes (the renumbering, the new tree's children table laid out from the old one's): no sort
and no Python step per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

import numpy as np

from psirag.errors import IndexFormatError, InputError
from psirag.tree.build import TreeMode, build_tree
from psirag.tree.dasgupta import dasgupta_terms
from psirag.tree.model import Tree, gather_ranges
from psirag.tree.rebalance import SubtreeSums, split_wide_nodes
from psirag.vector_rows import RowStack

__all__ = [
    "INSERT_RULES",
    "InsertRule",
    "RebuildRule",
    "RehomeHint",
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
    ``moved`` lists, sorted, the new tree's nodes that are new or whose parent changed (None:
    not known): only leaves under them can have entered or left a node, which lets an update
    count those leaves without a pass over every leaf.
    """

    tree: Tree
    node_map: np.ndarray
    dirty: np.ndarray
    new_leaves: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    counts: dict[str, int] = field(default_factory=dict)
    moved: np.ndarray | None = None
    rehome_scored: tuple[int, ...] = ()
    """Per re-home of a removal, how many candidates were scored exactly (their leaves read)."""

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
        self._ptr, self._order = tree.children_table
        self._lists: dict[int, list[int]] = {}

    def __getitem__(self, u: int) -> list[int]:
        got = self._lists.get(u)
        if got is None:
            got = self._order[self._ptr[u] : self._ptr[u + 1]].tolist() if u < self._n else []
            self._lists[u] = got
        return got

    def __setitem__(self, u: int, kids: list[int]) -> None:
        self._lists[u] = kids

    def count(self, u: int) -> int:
        """How many children ``u`` has, without making its list."""
        got = self._lists.get(u)
        if got is not None:
            return len(got)
        return int(self._ptr[u + 1] - self._ptr[u]) if u < self._n else 0

    def counts(self, nodes: np.ndarray) -> np.ndarray:
        """:meth:`count` of several old nodes, as one array (a pass over the lists made, not a
        Python step per node: a re-home asks for every node of a layer)."""
        out = self._ptr[nodes + 1] - self._ptr[nodes]
        if self._lists:
            made = np.fromiter(self._lists, dtype=np.int64, count=len(self._lists))
            for k in np.flatnonzero(np.isin(nodes, made)).tolist():
                out[k] = len(self._lists[int(nodes[k])])
        return out

    @property
    def lists(self) -> dict[int, list[int]]:
        """The lists made so far: every node whose children an update may have changed."""
        return self._lists


SUMS_IN_NUMPY = 1 << 16
"""Leaves (all nodes read at once together) up to which :class:`_Sums` adds them up itself,
without scipy: a removal's few re-home reads then import no scipy (0.3-0.8 s, paid by the
first removal of a process); a larger read (every candidate of a layer) is scipy's product."""

SUMS_NODES_IN_NUMPY = 64
"""Nodes read at once up to which :class:`_Sums` adds them up itself (a step per node: the
exact path's read of a whole layer of small nodes is faster as scipy's one product)."""


def _summed_in_order(vectors: np.ndarray, indptr: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """Per CSR row, the float64 sum of ``vectors`` at its leaves, added one after another in
    the row's order from +0 (an accumulate): the floats scipy's sparse product of ones gives."""
    out = np.zeros((indptr.size - 1, vectors.shape[1]), dtype=np.float64)
    for i in range(indptr.size - 1):
        rows = leaves[indptr[i] : indptr[i + 1]]
        if rows.size:
            out[i] = np.cumsum(np.asarray(vectors[rows], dtype=np.float64), axis=0)[-1]
    out += 0.0  # scipy's sum starts at +0: never -0.0
    return out


class _Sums:
    """The float64 sum of the leaf vectors under each node of ``tree``, made when first read.

    A removal adds to the sums of every ancestor of what it removes, and reads only those of
    the nodes it re-homes and their candidates: the additions to a node not yet read are kept
    and applied, in order, when it is, so each sum is the same float64 value as in a table of
    every node's sum (the leaf membership matrix times the leaf vectors) changed in place.
    """

    def __init__(self, tree: Tree, vectors: np.ndarray) -> None:
        self._tree = tree
        self._vectors = vectors  # (leaves, dim), the tree's leaf order
        self._got: dict[int, np.ndarray] = {}
        self._pending: dict[int, list[np.ndarray]] = {}

    def changed(self, nodes: np.ndarray) -> np.ndarray:
        """Per node of ``nodes``, whether its sum is read or has additions: it may differ from
        its leaves' sum in the old tree, and a read costs nothing (or is needed anyway)."""
        seen = [*self._got, *self._pending]
        return np.isin(nodes, np.asarray(seen, dtype=np.int64))

    def add(self, u: int, delta: np.ndarray) -> None:
        got = self._got.get(u)
        if got is None:
            self._pending.setdefault(u, []).append(delta)
        else:
            got += delta

    def read(self, nodes: list[int]) -> np.ndarray:
        """The current sums of ``nodes``, one row each (a copy)."""
        missing = [u for u in dict.fromkeys(nodes) if u not in self._got]
        if missing:
            indptr, leaves = self._tree.leaf_rows(missing)
            if leaves.size <= SUMS_IN_NUMPY and len(missing) <= SUMS_NODES_IN_NUMPY:
                base = _summed_in_order(self._vectors, indptr, leaves)
            else:
                import scipy.sparse as sp  # as the membership matrix does

                cols = np.unique(leaves)
                local = np.searchsorted(cols, leaves)
                rows = sp.csr_matrix(
                    (np.ones(local.size, dtype=np.float32), local, indptr),
                    shape=(len(missing), cols.size),
                )
                # the membership rows' product: each sum adds its leaves in id order
                base = np.asarray(rows @ self._vectors[cols].astype(np.float64))
            for k, u in enumerate(missing):
                value = base[k].copy()
                for delta in self._pending.pop(u, []):
                    value += delta
                self._got[u] = value
        return np.stack([self._got[u] for u in nodes])


_U32 = 2.0**-24
_U64 = 2.0**-53
LEAF_NORM_MAX = 1.001
"""The largest leaf-vector norm a stored sum norm may count on: every embedding is a unit row
(SPEC 1.2; the pipeline normalises them), and an index keeps sum norms only while none of its
leaves is longer (:func:`psirag.pipeline.long_leaves`, checked where leaves enter). A hint
given for longer leaves is wrong, not merely loose."""


def _gamma(m: np.ndarray, u: float) -> np.ndarray:
    """Higham's ``gamma(m) = m u / (1 - m u)`` (inf where ``m u >= 1``)."""
    mu = np.asarray(m, dtype=np.float64) * u
    with np.errstate(divide="ignore"):
        return np.where(mu < 1, mu / np.maximum(1 - mu, 0), np.inf)


def cosine_scores(cand_sums: np.ndarray, sum_c: np.ndarray) -> np.ndarray:
    """A re-home's score of each candidate: the child's sum ``sum_c`` times the candidate's
    normalised sum, ``s_v . s_c / (||s_v|| + 1e-12)``, in float64. Each row is reduced on its
    own (numpy's per-row sums, not a matrix-vector product, which rounds a row by its position
    in the block), so a candidate's score has the same bits in any subset of candidates."""
    rows = np.asarray(cand_sums, dtype=np.float64)
    dots = (rows * sum_c).sum(axis=1)
    norms = np.sqrt((rows * rows).sum(axis=1))
    return np.asarray(dots / (norms + 1e-12))


@dataclass(frozen=True)
class RehomeHint:
    """What lets a removal's re-home read the leaves of only the candidates that can win.

    ``vectors``: per inner node (row ``node - n_leaves`` of the tree given to
    :func:`remove_leaves`), its stored routing vector, the float32 normalised float32 sum of its
    leaves (``routing="leaf_mean"``); ``norms``: per inner node the float32 norm ``||s32||`` of
    a float32 sum of the same leaves (:func:`psirag.pipeline.routing_rows`; NaN: none), for
    leaves no longer than :data:`LEAF_NORM_MAX`; ``stale``: inner nodes whose vector and norm
    were made for another set of leaves (a waiting abstract's, see
    :class:`psirag.living.AbstractDriftRule`). Nodes in ``stale`` or without a norm are scored
    exactly, as every candidate is without a hint.

    **The bound.** Let a clean candidate ``v`` (not stale, with a norm, and no sum changed by
    this removal yet) have ``k`` leaves ``x_i`` with ``||x_i|| <= L`` (:data:`LEAF_NORM_MAX`),
    ``s`` their exact sum, ``s32`` the float32 sum (any order) the vector ``r`` was made from,
    ``s32'`` the one (maybe the same) whose float32 norm ``n32`` is stored, ``s^`` the float64
    sum the exact path reads; ``d`` the dimension, ``u = 2^-24``, ``u' = 2^-53`` and
    ``g(m, u) = m u / (1 - m u)``. Recursive summation in any order gives ``||s32 - s||,
    ||s32' - s|| <= g(k - 1, u) k L`` and ``||s^ - s|| <= g(k - 1, u') k L``, so each float32 sum
    is within ``E = (g(k-1, u) + g(k-1, u')) k L`` of ``s^``. The float32 norm is within
    ``eta = g(d + 3, u)`` of ``||s32'||`` relatively, so ``N = n32 / (1 + eta) <= ||s32'||`` and
    ``||s^|| >= N - E``; the float32 (or float64 then float32) division leaves ``||r - s32 /
    ||s32|| || <= (2u + eta) / (1 - eta) = alpha``. As ``||a/|a| - b/|b| || <= 2 ||a - b|| / |b|``
    and the score's denominator ``||s^|| + 1e-12`` shifts the unit vector by at most
    ``1e-12 / ||s^||``, the exact score's direction ``s^ / (||s^|| + 1e-12)`` is within
    ``rho = alpha + (2 E + 1e-12) / (N - E)`` of ``r`` (infinite where ``N <= E``: scored
    exactly). So the exact score ``g_v`` and the stored
    vector's ``h_v = r . s^_c`` differ by at most ``rho ||s^_c||`` in real arithmetic; the float64
    rounding of both (``d``-term dot products, a norm, a division) adds at most ``tau ||s^_c||``
    with ``tau = 4 g(d + 3, u')``, which is doubled (and the norm of ``s^_c`` inflated by 1e-6)
    to cover the comparisons' own rounding. With ``m_v = (rho_v + 2 tau) ||s^_c|| (1 + 1e-6)``
    and ``B = max_v (h_v - m_v)`` over the clean candidates, a clean candidate with
    ``h_v + m_v < B`` has ``g_v < B <= g_w`` for the ``w`` attaining ``B`` (kept, as is every
    candidate scored exactly), so it can be neither the best nor tied with it: the first best
    of the kept candidates, scored by :func:`cosine_scores` whose rows do not depend on which
    others are scored, is the first best of all.
    """

    vectors: np.ndarray
    norms: np.ndarray
    stale: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def margins(self, tree: Tree, cands: np.ndarray, c_norm: float) -> np.ndarray:
        """Per candidate, ``m_v`` of the bound above (inf: score it exactly)."""
        n = tree.n_leaves
        dim = int(self.vectors.shape[1])
        k = np.asarray(tree.leaf_counts[cands], dtype=np.float64)
        n32 = np.asarray(self.norms[cands - n], dtype=np.float64)
        eta = float(_gamma(np.asarray(dim + 3), _U32))
        low = n32 / (1 + eta)
        err = (_gamma(k - 1, _U32) + _gamma(k - 1, _U64)) * k * LEAF_NORM_MAX
        alpha = (2 * _U32 + eta) / (1 - eta)
        ok = np.isfinite(n32) & (low > err)
        with np.errstate(divide="ignore", invalid="ignore"):
            rho = np.where(ok, alpha + (2 * err + 1e-12) / (low - err), np.inf)
        tau = 4 * float(_gamma(np.asarray(dim + 3), _U64))
        margin = (rho + 2 * tau) * c_norm * (1 + 1e-6)
        if self.stale.size:
            margin[np.isin(cands, self.stale)] = np.inf
        return np.asarray(margin)


def rehome_shortlist(
    tree: Tree,
    cands: np.ndarray,
    sum_c: np.ndarray,
    hint: RehomeHint,
    changed: np.ndarray,
) -> np.ndarray:
    """The candidates (a mask over ``cands``) whose exact score can be the best: every one the
    bound of :class:`RehomeHint` cannot rule out, and every one in ``changed`` (their sums are
    not their stored vectors')."""
    c_norm = float(np.sqrt((sum_c * sum_c).sum()))
    margin = hint.margins(tree, cands, c_norm)
    margin[changed] = np.inf
    clean = np.isfinite(margin)
    keep = ~clean
    if not clean.any():
        return keep
    at = np.flatnonzero(clean)
    h = np.empty(at.size, dtype=np.float64)
    for lo in range(0, at.size, _BLOCK * 16):  # float64 dot products (any order: the bound's)
        part = cands[at[lo : lo + _BLOCK * 16]] - tree.n_leaves
        h[lo : lo + part.size] = np.asarray(np.take(hint.vectors, part, axis=0), np.float64) @ sum_c
    best = float(np.max(h - margin[at]))
    keep[at] = h + margin[at] >= best
    return keep


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

    @property
    def changed(self) -> dict[int, Any]:
        """The old entries an update changed, by id."""
        return self._changed

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
        n_nodes = tree.n_nodes
        self.parent = _Column(tree.parent)
        self.layer = _Column(tree.layer)
        self.alive = _Column(np.ones(n_nodes, dtype=bool))
        self.rows_added: list[int] = []  # row of each added node (-1: not a leaf)
        self.kids = _Kids(tree)
        self.new_rows: list[int] = []  # working ids of added leaves, in input order
        self.counts: dict[str, int] = {}
        self.scored: list[int] = []  # per re-home, the candidates scored exactly

    def add(self, layer: int, row: int = -1) -> int:
        self.parent.append(-1)
        self.layer.append(layer)
        self.alive.append(True)
        self.rows_added.append(row)
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

    def row(self, u: int) -> int:
        """Working node ``u``'s row in the combined vectors (-1: not a leaf)."""
        old = self.old
        if u >= old.n_nodes:
            return self.rows_added[u - old.n_nodes]
        return u if u < old.n_leaves else -1

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

    def prune(
        self, removed: np.ndarray, max_children: int | None, hint: RehomeHint | None = None
    ) -> None:
        """Remove leaves, prune emptied nodes, re-home only-children, drop one-child roots.
        ``hint``: the stored vectors and norms that rule out most of a re-home's candidates
        (:class:`RehomeHint`); without it every candidate's leaves are read."""
        old = self.old
        sums = _Sums(old, self.vectors)
        one_tree = old.roots.size == 1
        tree_of: dict[int, np.ndarray] = {}  # per layer read: its nodes' roots (a forest)

        def layer_nodes(lv: int) -> np.ndarray:
            inner = old.layer[old.n_leaves :]  # abstract ids read bottom-up: one range a layer
            lo, hi = np.searchsorted(inner, [lv, lv + 1], side="left")
            return np.arange(old.n_leaves + lo, old.n_leaves + hi, dtype=np.int64)

        def same_tree(lv: int, u: int) -> np.ndarray:
            """The nodes of layer ``lv`` in ``u``'s tree, as a mask over :func:`layer_nodes`."""
            roots = tree_of.get(lv)
            if roots is None:  # each node's root, by array steps over the old parents
                roots = layer_nodes(lv)
                for _ in range(old.depth - lv):
                    up = old.parent[roots]
                    roots = np.where(up >= 0, up, roots)
                tree_of[lv] = roots
            return roots == roots[u - int(layer_nodes(lv)[0])]

        def shift(u: int, delta: np.ndarray) -> None:
            delta = np.array(delta, dtype=np.float64)  # its own copy: rows change later
            while u >= 0:
                sums.add(u, delta)
                u = self.parent[u]

        def drop(u: int) -> int:
            p = self.parent[u]
            self.kill(u)
            return p

        touched: set[int] = set()
        for leaf in removed.tolist():
            shift(self.parent[leaf], -sums.read([leaf])[0])
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
                # the alive nodes of the layer (of u's tree) but u, in id order
                nodes = layer_nodes(lv)
                keep = nodes != u
                if not one_tree:
                    keep &= same_tree(lv, u)
                dead = [v for v, ok in self.alive.changed.items() if not ok]
                if dead:
                    keep &= ~np.isin(nodes, np.asarray(dead, dtype=np.int64))
                cands = nodes[keep]
                if cands.size == 0:
                    continue  # u is alone in its layer: the root collapse below removes it
                if max_children is not None:
                    room = self.kids.counts(cands) < max_children
                    if room.any():
                        cands = cands[room]
                c = self.kids[u][0]
                sum_c = sums.read([c])[0]
                if hint is not None:  # only the candidates the stored vectors cannot rule out
                    cands = cands[rehome_shortlist(old, cands, sum_c, hint, sums.changed(cands))]
                self.scored.append(int(cands.size))
                score = cosine_scores(sums.read(cands.tolist()), sum_c)
                target = int(cands[int(np.argmax(score))])
                shift(u, -sum_c)
                self.set_parent(c, target)
                shift(target, sums.read([c])[0])
                p = drop(u)
                self.bump("rehomed")
                if p >= 0:
                    touched.add(p)
        for r in [r for r in old.roots.tolist() if self.alive[r]]:  # the trees still there
            while self.alive[r] and self.layer[r] > 0 and len(self.kids[r]) == 1:
                c = self.kids[r][0]
                self.kill(r)
                self.parent[c] = -1  # the new root (a split below must see one)
                self.bump("roots_dropped")
                r = c

    # -------------------------------------------------------------- splits

    def split(self, max_children: int) -> None:
        """Split every node left with more than ``max_children`` children by the builder's
        rebalancing (:func:`split_wide_nodes`), here on the working ids. Only nodes whose
        children an update changed can be wide (and any the old tree had), so the loop visits
        those instead of every node, in the order it would visit them in the new tree."""
        wide: dict[int, list[int]] = {}
        for u, kids in self.kids.lists.items():
            if len(kids) > max_children and self.alive[u]:
                wide.setdefault(self.layer[u], []).append(u)
        for u in np.flatnonzero(self.old.fan_out > max_children).tolist():
            if u not in self.kids.lists and self.alive[u]:
                wide.setdefault(self.layer[u], []).append(u)
        if not wide:
            return
        # children in the new tree's id order (working order, new leaves by input position):
        # the order the splits group them and add their sums in
        n_old = self.old.n_leaves
        position = {u: n_old + k for k, u in enumerate(self.new_rows)}
        for kids in self.kids.lists.values():
            kids.sort(key=lambda u: position.get(u, u))
        before = len(self.parent)
        children = cast("list[list[int]]", _KidsView(self))
        split_wide_nodes(
            cast("list[int]", self.parent),
            cast("list[int]", self.layer),
            children,
            _WorkSums(self, children),
            max_children,
            wide=wide,
        )
        for _ in range(before, len(self.parent)):
            self.alive.append(True)
            self.rows_added.append(-1)
        self.bump("split", len(self.parent) - before)

    # -------------------------------------------------------------- back to a Tree

    def finish(self, max_children: int | None) -> TreeUpdate:
        """The new tree, renumbered the builder's way (leaves first: old ones in their order,
        then the new ones in input order; abstract nodes by layer, old before added), with its
        children table made from the old one's by the change (what every search and the next
        update read), and the id map and dirty set.

        Array passes over the nodes (the renumbering itself), no sort and no Python loop over
        them: the work per node is a copy."""
        if max_children is not None:
            self.split(max_children)
        old = self.old
        n_old, old_nodes = old.n_leaves, old.n_nodes
        parent = self.parent.array(np.int64)
        layer = self.layer.array(np.int32)  # the new tree's dtype: its layer is a gather of it
        alive = self.alive.array(bool)
        n_work = parent.size
        new_rows = np.asarray(self.new_rows, dtype=np.int64)
        killed = np.fromiter((u for u, ok in self.alive.changed.items() if not ok), dtype=np.int64)
        # ids: old leaves in order, new leaves in input order, then by layer old and added
        new_id = np.arange(n_work, dtype=np.int64)  # (the old leaves' ids where none died)
        new_id[n_old:] = -1
        dead_leaves = killed[killed < n_old]
        n_kept = n_old - dead_leaves.size
        if dead_leaves.size:
            new_id[:n_old] = -1
            kept_leaves = np.flatnonzero(alive[:n_old])
            new_id[kept_leaves] = np.arange(n_kept)
        n_leaves = n_kept + new_rows.size
        new_id[new_rows] = n_kept + np.arange(new_rows.size)
        added = np.arange(old_nodes, n_work, dtype=np.int64)
        added_inner = added[(layer[added] > 0) & alive[added]]
        added_layer = layer[added_inner]
        top = max(old.depth, int(added_layer.max(initial=0)))
        old_inner_layer = old.layer[n_old:]  # ascending: abstract ids read bottom-up
        dead_inner = killed[killed >= n_old]
        old_count = np.bincount(old_inner_layer, minlength=top + 1)[: top + 1].astype(np.int64)
        if dead_inner.size:
            old_count -= np.bincount(layer[dead_inner], minlength=top + 1)[: top + 1]
        add_count = np.bincount(added_layer, minlength=top + 1)[: top + 1].astype(np.int64)
        # first new id of each layer's abstract nodes, and of its added ones
        first = n_leaves + np.concatenate([[0], np.cumsum(old_count + add_count)[:-1]])
        first[0] = n_leaves
        added_below = first - n_leaves - np.concatenate([[0], np.cumsum(old_count)[:-1]])
        inner_alive = alive[n_old:old_nodes]
        rank = np.arange(old_nodes - n_old, dtype=np.int64)
        if dead_inner.size:
            rank = np.cumsum(inner_alive) - 1
        ids_inner = n_leaves + rank + added_below[old_inner_layer]
        new_id[n_old:old_nodes] = np.where(inner_alive, ids_inner, -1)
        if added_inner.size:
            by_layer = np.argsort(added_layer, kind="stable")
            ranks = np.empty(added_inner.size, dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(add_count)[:-1]])
            ranks[by_layer] = np.arange(added_inner.size) - starts[added_layer[by_layer]]
            new_id[added_inner] = first[added_layer] + old_count[added_layer] + ranks
        n_final = n_leaves + int(old_count[1:].sum() + add_count[1:].sum())
        order = np.empty(n_final, dtype=np.int64)  # new id -> working id
        if n_final == n_work:  # every working node kept (an add): ids are a permutation
            order[new_id] = np.arange(n_work, dtype=np.int64)
        else:
            present = np.flatnonzero(new_id >= 0)
            order[new_id[present]] = present
            del present
        p = parent[order]
        root = p < 0
        np.maximum(p, 0, out=p)
        new_parent = new_id[p]
        new_parent[root] = -1
        del p, root
        final = Tree(parent=new_parent, layer=layer[order])
        final.__dict__["n_leaves"] = n_leaves
        # what changed: nodes that are new or whose parent changed, lists that changed
        lists = {u: kids for u, kids in self.kids.lists.items() if alive[u]}
        old_offsets, old_order = old.children_table
        changed = [
            u
            for u, kids in lists.items()
            if u >= old_nodes
            or len(kids) != old_offsets[u + 1] - old_offsets[u]
            or sorted(kids) != old_order[old_offsets[u] : old_offsets[u + 1]].tolist()
        ]
        final.__dict__["children_table"] = _patched_children(
            old, final, new_id, alive, killed, {u: lists[u] for u in changed}
        )
        moved = [new_id[u] for u in added.tolist() if alive[u]]
        for u in self.parent.changed:
            if u < old_nodes and alive[u]:
                was = old.parent[u]
                if new_parent[new_id[u]] != (new_id[was] if was >= 0 else -1):
                    moved.append(new_id[u])
        node_map = new_id[:old_nodes].copy()
        dirty = _closed_upwards(final, [int(new_id[u]) for u in changed])
        return TreeUpdate(
            tree=final,
            node_map=node_map,
            dirty=dirty,
            new_leaves=new_id[new_rows],
            counts=dict(self.counts),
            moved=np.unique(np.asarray(moved, dtype=np.int64)),
        )


class _KidsView:
    """A working tree's children lists as the list of lists :func:`split_wide_nodes` edits
    (a node it appends gets the last working id)."""

    def __init__(self, work: _Work) -> None:
        self._work = work

    def __getitem__(self, u: int) -> list[int]:
        return self._work.kids[u]

    def __setitem__(self, u: int, kids: list[int]) -> None:
        self._work.kids[u] = kids

    def append(self, kids: list[int]) -> None:
        self._work.kids[len(self._work.parent) - 1] = kids


class _WorkSums(SubtreeSums):
    """:class:`SubtreeSums` over a working tree, whose leaves are not the first ids (the new
    ones were added last): a node is a leaf by its layer, its vector by its row."""

    def __init__(self, work: _Work, children: list[list[int]]) -> None:
        super().__init__(children, leaf_vector=work.vector, dim=int(work.vectors.shape[1]))
        self._work = work

    def _first(self, node: int) -> np.ndarray:
        if self._work.layer[node] == 0:
            return self._work.vector(self._work.row(node)).astype(np.float64)
        return super()._first(node)


def _patched_children(
    old: Tree,
    new: Tree,
    new_id: np.ndarray,
    alive: np.ndarray,
    killed: np.ndarray,
    lists: dict[int, list[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The new tree's children table (what :attr:`Tree.children_table` computes: per node, its
    children ascending) from the old one's: a node whose children did not change has the same
    children under new ids, which keep their order, so its block is copied; only the nodes in
    ``lists`` (working id -> children, every new node and every changed one) are laid out.
    Array copies instead of the sort of every node by its parent."""
    old_offsets, old_order = old.children_table
    old_nodes = old.n_nodes
    fan = np.zeros(new.n_nodes, dtype=np.int64)
    old_ids = new_id[:old_nodes]
    if killed.size:
        kept = old_ids >= 0
        fan[old_ids[kept]] = np.diff(old_offsets)[kept]
    else:  # an add: every old node is kept
        fan[old_ids] = np.diff(old_offsets)
    redone = np.fromiter(lists, dtype=np.int64, count=len(lists))
    fan[new_id[redone]] = [len(k) for k in lists.values()]
    offsets = np.zeros(new.n_nodes + 1, dtype=np.int64)
    np.cumsum(fan, out=offsets[1:])
    del fan
    order = np.empty(int(offsets[-1]), dtype=np.int64)
    # the old blocks copied: every one but the redone nodes' and the killed nodes', in the old
    # order, which their nodes' new ids keep; they fill the places the laid-out blocks leave
    dropped = sorted({*redone[redone < old_nodes].tolist(), *killed.tolist()})
    runs: list[tuple[int, int]] = []
    start = 0
    for u in dropped:  # (a node's block starts where the one of the node before it ends)
        lo, hi = int(old_offsets[u]), int(old_offsets[u + 1])
        if lo > start:
            runs.append((start, lo))
        start = max(start, hi)
    if start < old_order.size:
        runs.append((start, int(old_order.size)))
    runs.reverse()  # taken from the end
    at = 0

    def copy_old(upto: int) -> None:
        nonlocal at
        while at < upto:
            if not runs:
                raise ValueError("the children table's copied blocks do not fill it")
            lo, hi = runs.pop()
            take = min(hi - lo, upto - at)
            order[at : at + take] = new_id[old_order[lo : lo + take]]
            at += take
            if lo + take < hi:
                runs.append((lo + take, hi))

    for w, kids in sorted((int(new_id[u]), kids) for u, kids in lists.items()):
        copy_old(int(offsets[w]))
        order[offsets[w] : offsets[w + 1]] = np.sort(new_id[np.asarray(kids, dtype=np.int64)])
        at = int(offsets[w + 1])
    copy_old(order.size)
    if runs:
        raise ValueError("the children table's copied blocks do not fit it")
    return offsets, order


def _closed_upwards(tree: Tree, nodes: list[int]) -> np.ndarray:
    """``nodes`` and all their ancestors, sorted: the abstract nodes whose subtree changed,
    when ``nodes`` are those that are new or whose children changed."""
    out: set[int] = set()
    for u in nodes:
        while u >= 0 and u not in out:
            out.add(u)
            u = int(tree.parent[u])
    got = np.asarray(sorted(out), dtype=np.int64)
    return got[tree.layer[got] > 0] if got.size else got


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
    a pass over every row would cost what the descent saves. A
    :class:`~psirag.vector_rows.RowStack` (an updated index's rows, kept apart) stays one: it is
    read by rows, never joined."""
    if isinstance(x, RowStack) and x.dtype == np.float32:
        if x.shape[0] != rows or (dim is not None and x.shape[1] != dim):
            want = f"({rows}, {dim if dim is not None else 'dim'})"
            raise InputError(f"{name} must have shape {want}, got {x.shape}")
        return cast(np.ndarray, x)
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
    offsets, order = tree.children_table
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
    if r_all.size <= _SMALL_GRAPH:  # a few links (one document): no scipy import
        label = _components(m, r_all, c_all)
    else:
        # here, not at module level: csgraph pulls in scipy.linalg, which no search needs
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        graph = coo_matrix((np.ones(r_all.size), (r_all, c_all)), shape=(m, m))
        label = connected_components(graph, directed=False)[1]
    groups = [np.flatnonzero(label == k) for k in np.unique(label).tolist()]
    return sorted(groups, key=lambda g: int(g[0]))


_SMALL_GRAPH = 4096
"""Links up to which :func:`batch_groups` joins the groups itself (union-find in Python)."""


def _components(m: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A connected-component label per node of the undirected graph on ``m`` nodes with the
    links ``rows[i] - cols[i]`` (labels are any distinct ints per component)."""
    root = list(range(m))

    def find(u: int) -> int:
        while root[u] != u:
            root[u] = root[root[u]]
            u = root[u]
        return u

    for a, b in zip(rows.tolist(), cols.tolist(), strict=True):
        ra, rb = find(a), find(b)
        if ra != rb:
            root[max(ra, rb)] = min(ra, rb)
    return np.array([find(u) for u in range(m)], dtype=np.int64)


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
    check_vectors: bool = True,
    hint: RehomeHint | None = None,
) -> TreeUpdate:
    """Remove the given leaves from a tree or a forest (a tree that loses every leaf goes).

    The remaining leaves keep their relative order as ids ``0 .. n_left-1``. At least one leaf
    must remain: clearing an index is a rebuild, not an update. ``check_vectors=False``: the
    vectors are the index's own, checked when stored (their shape is checked, not every
    value: the removal reads a few of them, and a pass over all would cost more). ``hint``:
    the inner nodes' stored vectors and sum norms (:class:`RehomeHint`), so that a re-home
    reads the leaves of the candidates that can win only; the target is the same.
    """
    _check_max_children(max_children)
    if check_vectors:
        vecs = _vectors("leaf_vectors", leaf_vectors, tree.n_leaves, None)
    else:
        vecs = _trusted("leaf_vectors", leaf_vectors, tree.n_leaves, None)
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
    if hint is not None:
        k = tree.n_nodes - n
        shape = getattr(hint.vectors, "shape", ())
        if tuple(shape[:1]) != (k,) or np.shape(hint.norms) != (k,):
            raise InputError(
                f"a re-home hint of vectors {tuple(shape)} and norms {np.shape(hint.norms)} for "
                f"a tree of {k} inner nodes"
            )
    work = _Work(tree, vecs)
    if uniq.size:
        work.prune(uniq, max_children, hint)
    done = work.finish(max_children)
    return replace(done, rehome_scored=tuple(work.scored)) if work.scored else done


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
