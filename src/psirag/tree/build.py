"""Abstract-tree construction (paper Algorithm 1; SPEC 1.3-1.5).

The paper walks all n(n-1)/2 chunk pairs in descending similarity and merges trees as it goes.
Only the pairs that join two different trees ("effective" pairs) change anything, and those are
exactly the edges Kruskal's algorithm keeps: the maximum spanning tree under the strict order
``(-S[i, j], i, j)``. A strict order makes that tree unique, so Prim's algorithm on the dense
matrix finds the same edges in O(n^2) time and O(n) extra memory. Replaying Algorithm 1 on those
n - 1 edges, in walk order, gives the same tree as the full walk without sorting n^2/2 pairs.

Corpora whose matrix does not fit use ``mode="knn"`` (SPEC 4, :mod:`psirag.tree.approx`): the
same replay on an approximate spanning tree from nearest-neighbour pairs, in O(n·k) memory;
``mode="ann"`` (:mod:`psirag.tree.ann`) finds those pairs through an HNSW graph instead, with no
O(n²) step; ``mode="bucketed"`` (:mod:`psirag.tree.bucket`) builds one tree per k-means bucket
and merges them on top (paper App. E.1).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Literal, get_args

import numpy as np

from psirag.errors import InputError, ResourceError
from psirag.tree.approx import spanning_edges_knn
from psirag.tree.bucket import DEFAULT_BUCKET_SIZE, BucketRunner, build_bucketed, rebalance_lean
from psirag.tree.model import Tree

TreeMode = Literal["auto", "exact", "knn", "ann", "bucketed"]
"""How the spanning edges are found: the exact n x n walk, k nearest neighbours found exactly
(knn) or through an HNSW graph (ann, the ``psirag[ann]`` extra), one tree per k-means bucket
merged on top (bucketed), or chosen by size and free memory (auto, :func:`resolve_tree_mode`)."""
TREE_MODES: tuple[str, ...] = get_args(TreeMode)
ResolvedTreeMode = Literal["exact", "knn", "ann", "bucketed"]

AUTO_EXACT_MAX = 30_000
"""Auto uses the exact walk up to this many chunks when its matrix fits: a 3.4 GiB matrix and
O(n²) time at 30k (the exact build took 10.6 CPU s at 25k, bench_knn.py), while the bucketed
build took 12 CPU s for 100k leaves (164 s wall, 3.0 GiB for 1M) and kept 2Wiki's Recall@5
within +0.2..+0.4 points of the exact tree for every bucket bound from 512 to 4,096
(BENCHMARKS.md "Scale")."""


_SYMMETRISE_BLOCK = 1024


def available_memory_bytes() -> int:
    """Memory the OS says is available now (MemAvailable), falling back to physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def exact_fits(n: int) -> bool:
    """Whether the exact build's n x n float32 matrix fits in half the free memory."""
    return 4 * n * n <= available_memory_bytes() // 2


def check_exact_memory(n: int) -> None:
    """Refuse an exact build whose n x n float32 matrix would take over half the free memory."""
    if not exact_fits(n):
        need = 4 * n * n
        limit = available_memory_bytes() // 2
        raise ResourceError(
            f"an exact tree over {n:,} chunks needs a {n:,} x {n:,} similarity matrix "
            f"({need / 2**30:.1f} GiB), more than half of the available memory "
            f"({2 * limit / 2**30:.1f} GiB). Use --tree-mode knn (or auto) for the approximate "
            "tree from nearest neighbours, in O(n·k) memory; or index fewer chunks, use "
            "--tree-per-document, or use a machine with more memory."
        )


def check_tree_mode(
    mode: str, neighbors: int, *, names: tuple[str, str] = ("tree mode", "tree neighbours")
) -> None:
    """Reject an unknown tree mode or a neighbour count below one, naming the allowed values.

    ``names`` are the two settings as the caller's user knows them (``IndexConfig`` passes its
    field names), so one check serves the config and the pure builder alike.
    """
    mode_name, neighbors_name = names
    if mode not in TREE_MODES:
        raise InputError(f"{mode_name} must be one of {_MODES_TEXT}, got {mode!r}")
    if isinstance(neighbors, bool) or not isinstance(neighbors, (int, np.integer)) or neighbors < 1:
        raise InputError(f"{neighbors_name} must be a positive integer, got {neighbors!r}")


_MODES_TEXT = ", ".join(TREE_MODES)


def resolve_tree_mode(mode: str, n: int) -> ResolvedTreeMode:
    """The mode a build over ``n`` leaves runs in.

    ``auto``: exact up to :data:`AUTO_EXACT_MAX` chunks when the n x n matrix fits in half the
    free memory; knn up to that size when it does not (the closest approximation: the exact
    tree from 16 neighbours on 2Wiki); bucketed beyond (linear time, O(n·d) memory, no optional
    dependency; ann needs hnswlib and builds its graph on one thread, several times slower;
    measured in BENCHMARKS.md "Scale").
    """
    if mode not in TREE_MODES:
        raise InputError(f"tree mode must be one of {_MODES_TEXT}, got {mode!r}")
    if mode == "auto":
        if n <= AUTO_EXACT_MAX:
            return "exact" if exact_fits(n) else "knn"
        return "bucketed"
    return mode  # type: ignore[return-value]


def validate_embeddings(embeddings: np.ndarray) -> np.ndarray:
    """Return a C-contiguous float32 (n, d) view; reject shapes and values a tree cannot use."""
    e = np.asarray(embeddings)
    if e.ndim != 2:
        raise InputError(f"embeddings must be a 2-d array (n, dim), got shape {e.shape}")
    if e.shape[0] == 0:
        raise InputError("cannot build a tree over zero chunks: the corpus is empty")
    e = np.ascontiguousarray(e, dtype=np.float32)
    bad = ~np.isfinite(e).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise InputError(f"embeddings contain NaN or infinite values (rows {rows})")
    norms = np.linalg.norm(e, axis=1)
    if (norms == 0).any():
        rows = np.flatnonzero(norms == 0)[:5].tolist()
        raise InputError(f"embeddings contain all-zero vectors (rows {rows})")
    return e


def similarity_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Float32 ``E @ E.T`` made exactly symmetric (the upper triangle is authoritative).

    BLAS may round ``S[i, j]`` and ``S[j, i]`` differently; SPEC 1.3 orders pairs by ``S[i, j]``
    with ``i < j``, so the lower triangle is overwritten with the upper one, block by block.
    """
    e = np.ascontiguousarray(embeddings, dtype=np.float32)
    s = e @ e.T
    n = s.shape[0]
    for lo in range(0, n, _SYMMETRISE_BLOCK):
        hi = min(lo + _SYMMETRISE_BLOCK, n)
        s[hi:, lo:hi] = s[lo:hi, hi:].T
        block = s[lo:hi, lo:hi]
        block[...] = np.triu(block) + np.triu(block, 1).T
    return s


Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while the spanning edges are found (for progress bars)."""


def spanning_edges(
    similarity: np.ndarray, progress: Progress | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The effective pairs of the descending walk, in walk order.

    Returns ``(i, j, s)`` with ``i < j``: the maximum spanning tree of ``similarity`` under the
    strict order ``(-S[i, j], i, j)``, sorted by that order. Prim's algorithm; ties in similarity
    are resolved by the pair key so the result equals Kruskal's on the full sorted list.
    """
    s = similarity
    n = s.shape[0]
    if n < 2:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty.copy(), np.empty(0, dtype=np.float32)
    neg_inf = np.float32(-np.inf)
    best = np.full(n, neg_inf, dtype=np.float32)  # best similarity to the grown tree
    best_from = np.full(n, -1, dtype=np.int64)  # tree vertex giving that similarity
    free = np.ones(n, dtype=bool)
    better = np.empty(n, dtype=bool)
    equal = np.empty(n, dtype=bool)
    edge_a = np.empty(n - 1, dtype=np.int64)
    edge_b = np.empty(n - 1, dtype=np.int64)
    edge_s = np.empty(n - 1, dtype=np.float32)

    u = 0
    free[u] = False
    report_every = max(1, (n - 1) // 100)
    for step in range(n - 1):
        if progress is not None and step % report_every == 0:
            progress(step, n - 1)
        row = s[u]
        np.equal(row, best, out=equal)
        equal &= free
        if equal.any():
            # Same similarity as the current best edge: keep the smaller pair key.
            tied = np.flatnonzero(equal)
            cur = best_from[tied]
            new_key = np.minimum(tied, u) * n + np.maximum(tied, u)
            old_key = np.minimum(tied, cur) * n + np.maximum(tied, cur)
            best_from[tied[new_key < old_key]] = u
        np.greater(row, best, out=better)
        better &= free
        np.copyto(best, row, where=better)
        np.copyto(best_from, u, where=better)

        v = int(np.argmax(best))
        top = best[v]
        if np.count_nonzero(best == top) > 1:
            cands = np.flatnonzero(best == top)
            src = best_from[cands]
            keys = np.minimum(cands, src) * n + np.maximum(cands, src)
            v = int(cands[np.argmin(keys)])
        a = int(best_from[v])
        edge_a[step], edge_b[step], edge_s[step] = min(a, v), max(a, v), top
        free[v] = False
        best[v] = neg_inf
        u = v
    if progress is not None:
        progress(n - 1, n - 1)
    order = np.lexsort((edge_b, edge_a, -edge_s))
    return edge_a[order], edge_b[order], edge_s[order]


def merge_walk(n: int, edge_a: np.ndarray, edge_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1 on the effective pairs: merge equal heights, collapse the lower tree otherwise.

    Returns ``(parent, layer)`` over ``n`` leaves plus the abstract nodes in creation order.
    """
    parent: list[int] = [-1] * n
    height: list[int] = [0] * n
    uf = list(range(n))  # union-find over leaves
    comp_root = list(range(n))  # tree node at the top of each component

    def find(x: int) -> int:
        root = x
        while uf[root] != root:
            root = uf[root]
        while uf[x] != root:
            uf[x], x = root, uf[x]
        return root

    def ancestor(leaf: int, levels: int) -> int:
        node = leaf
        for _ in range(levels):
            node = parent[node]
        return node

    for a, b in zip(edge_a.tolist(), edge_b.tolist(), strict=True):
        ca, cb = find(a), find(b)
        if ca == cb:  # cannot happen for spanning-tree edges; kept for safety
            continue
        ra, rb = comp_root[ca], comp_root[cb]
        ha, hb = height[ra], height[rb]
        if ha == hb:
            new = len(parent)
            parent.append(-1)
            height.append(ha + 1)
            parent[ra] = new
            parent[rb] = new
            top = new
        elif ha > hb:
            parent[rb] = ancestor(a, hb + 1)
            top = ra
        else:
            parent[ra] = ancestor(b, ha + 1)
            top = rb
        uf[cb] = ca
        comp_root[ca] = top
    return np.asarray(parent, dtype=np.int64), np.asarray(height, dtype=np.int64)


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


def subtree_sums(tree: Tree, embeddings: np.ndarray) -> np.ndarray:
    """Float64 sum of the leaf embeddings below every node (row ``u`` for node ``u``)."""
    n = tree.n_leaves
    sums = np.zeros((tree.n_nodes, embeddings.shape[1]), dtype=np.float64)
    sums[:n] = embeddings
    for node in tree.nodes_bottom_up().tolist():
        p = tree.parent[node]
        if p >= 0:
            sums[p] += sums[node]
    return sums


def rebalance(tree: Tree, embeddings: np.ndarray, max_children: int) -> Tree:
    """Split every node with more than ``max_children`` children, bottom-up, root included.

    A node with c children becomes ceil(c / max_children) siblings of near-equal size, grouped by
    similarity (balanced spherical k-means over the children's mean-leaf embeddings), never by
    id order. A split root gets a new root above it, so every leaf stays at
    the same depth.
    """
    if max_children < 2:
        raise ValueError("max_children must be at least 2")
    parent, layer = split_overfull(
        tree.parent.tolist(), tree.layer.tolist(), subtree_sums(tree, embeddings), max_children
    )
    parent_a = np.asarray(parent, dtype=np.int64)
    return _renumber(parent_a, np.asarray(layer, dtype=np.int64), tree.n_leaves)


def split_overfull(
    parent: list[int], layer: list[int], sums: np.ndarray, max_children: int
) -> tuple[list[int], list[int]]:
    """The splitting of :func:`rebalance` on plain lists, so tree updates can reuse it.

    ``sums[u]`` is the sum of the leaf embeddings below node ``u``. The lists are changed in
    place: existing nodes keep their ids, new siblings and roots are appended. Returns them.
    """
    rows: dict[int, np.ndarray] = dict(enumerate(sums))
    children: list[list[int]] = [[] for _ in parent]
    for node in range(len(parent)):
        if parent[node] >= 0:
            children[parent[node]].append(node)
    split_wide_nodes(parent, layer, children, rows, rows.__getitem__, max_children)
    return parent, layer


def split_wide_nodes(
    parent: list[int],
    layer: list[int],
    children: list[list[int]],
    sums: dict[int, np.ndarray],
    total: Callable[[int], np.ndarray],
    max_children: int,
) -> None:
    """The rebalancing loop that both the dense and the lean rebalancer run, in place.

    Level by level from the bottom, a node with more than ``max_children`` children becomes
    near-equal siblings grouped by :func:`_balanced_groups`; a split root gets a new root.
    ``total(u)`` is the sum of the leaf embeddings below ``u``; the loop writes the sums of the
    nodes it changes or creates into ``sums``, which ``total`` must read first.
    """
    by_level: dict[int, list[int]] = {}
    for node, lay in enumerate(layer):
        by_level.setdefault(lay, []).append(node)
    level = 1
    while by_level.get(level):
        for node in list(by_level[level]):
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
                sums[holder] = total(node).copy()
                parent[node] = holder
            kid_arr = np.asarray(kids)
            children[node] = kid_arr[groups[0]].tolist()
            sums[node] = np.sum([total(k) for k in children[node]], axis=0)
            for group in groups[1:]:
                sib = len(parent)
                parent.append(holder)
                layer.append(level)
                members = kid_arr[group].tolist()
                children.append(members)
                children[holder].append(sib)
                for k in members:
                    parent[k] = sib
                sums[sib] = np.sum([total(k) for k in members], axis=0)
        level += 1


def renumber_order(layer: np.ndarray, n_leaves: int) -> np.ndarray:
    """Current ids in their new order: leaves first as they are, then abstract nodes by
    (layer, current id), so ids read bottom-up and roots come last."""
    return np.concatenate(
        [np.arange(n_leaves), n_leaves + np.argsort(layer[n_leaves:], kind="stable")]
    )


def _renumber(parent: np.ndarray, layer: np.ndarray, n_leaves: int) -> Tree:
    """Order abstract nodes by (layer, creation order) so ids read bottom-up, roots last."""
    return reorder(parent, layer, renumber_order(layer, n_leaves))


def reorder(parent: np.ndarray, layer: np.ndarray, order: np.ndarray) -> Tree:
    """The tree whose node ``k`` is current node ``order[k]`` (``order`` keeps every node)."""
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    old_parent = parent[order]
    new_parent = np.where(old_parent >= 0, new_id[np.maximum(old_parent, 0)], -1)
    return Tree(parent=new_parent.astype(np.int64), layer=layer[order].astype(np.int32))


def build_tree(
    embeddings: np.ndarray,
    max_children: int | None = 40,
    *,
    similarity: np.ndarray | None = None,
    progress: Progress | None = None,
    mode: TreeMode = "exact",
    neighbors: int = 32,
    bucket_size: int = DEFAULT_BUCKET_SIZE,
    workers: int | None = None,
    bucket_runner: BucketRunner | None = None,
) -> Tree:
    """Build the abstract tree over unit-normalised chunk embeddings (one leaf per row).

    ``mode="exact"`` equals the full descending-order walk of SPEC 1.3-1.4 (n - 1 effective
    unions, one root); it holds one n x n float32 matrix and refuses with
    :class:`ResourceError` when that would not fit in memory. ``mode="knn"`` walks only each
    leaf's ``neighbors`` most similar leaves plus the best joins between the resulting
    components (SPEC 4, :mod:`psirag.tree.approx`): O(n·k) memory, the exact tree when
    ``neighbors >= n - 1``. ``mode="ann"`` takes the same path with neighbours from an HNSW
    graph (:mod:`psirag.tree.ann`); ``mode="bucketed"`` builds one tree per k-means bucket of at
    most ``bucket_size`` leaves on ``workers`` processes and merges them
    (:mod:`psirag.tree.bucket`; ``bucket_runner``, e.g. a Ray one, builds the buckets instead
    of local processes). ``mode="auto"`` picks one by size and memory
    (:func:`resolve_tree_mode`).
    Either way the tree is then rebalanced per SPEC 1.5 unless ``max_children`` is None.
    ``similarity`` may pass a precomputed symmetric ``E @ E.T`` for the exact walk (it is read,
    not modified). ``progress(done, total)`` is called while the spanning edges are found.
    """
    check_tree_mode(mode, neighbors)
    e = validate_embeddings(embeddings)
    n = e.shape[0]
    if similarity is not None and mode not in ("exact", "auto"):
        raise InputError(f"a precomputed similarity matrix is for the exact mode, not {mode}")
    if n == 1:
        return Tree(parent=np.array([-1], dtype=np.int64), layer=np.array([0], dtype=np.int32))
    resolved = "exact" if similarity is not None else resolve_tree_mode(mode, n)
    if resolved == "bucketed":
        parent, layer = build_bucketed(
            e,
            bucket_size=bucket_size,
            neighbors=neighbors,
            max_children=max_children,
            workers=workers,
            runner=bucket_runner,
        )
        tree = _renumber(parent, layer, n)
        if max_children is None:
            return tree
        return rebalance_lean(tree.parent, tree.layer.astype(np.int64), e, max_children)
    if resolved == "ann":
        from psirag.tree.ann import spanning_edges_ann

        edge_a, edge_b, _ = spanning_edges_ann(e, neighbors, progress, threads=workers or 0)
    elif resolved == "knn":
        edge_a, edge_b, _ = spanning_edges_knn(e, neighbors, progress)
    else:
        if similarity is None:
            if mode == "exact":  # auto has just checked that the matrix fits
                check_exact_memory(n)
            similarity = similarity_matrix(e)
        edge_a, edge_b, _ = spanning_edges(similarity, progress)
        del similarity
    parent, layer = merge_walk(n, edge_a, edge_b)
    tree = _renumber(parent, layer, n)
    if max_children is not None and resolved == "ann":  # the same splits without a (nodes x d)
        tree = rebalance_lean(tree.parent, tree.layer.astype(np.int64), e, max_children)
    elif max_children is not None:
        tree = rebalance(tree, e, max_children)
    return tree


def build_forest(
    embeddings: np.ndarray,
    groups: np.ndarray,
    max_children: int | None = 40,
    *,
    progress: Progress | None = None,
    mode: TreeMode = "exact",
    neighbors: int = 32,
    bucket_size: int = DEFAULT_BUCKET_SIZE,
    bucket_runner: BucketRunner | None = None,
) -> Tree:
    """One tree per group of leaves (the single-document setting), as one forest.

    ``groups[i]`` names the group of leaf ``i``. Leaves keep their ids; each group's abstract
    nodes are built by :func:`build_tree` on that group alone, so trees never mix groups.
    ``mode`` and ``neighbors`` apply per group (``auto`` decides for each group's size).
    """
    check_tree_mode(mode, neighbors)
    e = validate_embeddings(embeddings)
    n = e.shape[0]
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError("groups needs one entry per embedding row")
    parent_parts: list[np.ndarray] = [np.full(n, -1, dtype=np.int64)]
    layer_parts: list[np.ndarray] = [np.zeros(n, dtype=np.int64)]
    next_id = n
    values = np.unique(groups)
    for done, value in enumerate(values):
        if progress is not None:
            progress(done, values.size)
        members = np.flatnonzero(groups == value)
        sub = build_tree(
            e[members],
            max_children=max_children,
            mode=mode,
            neighbors=neighbors,
            bucket_size=bucket_size,
            bucket_runner=bucket_runner,
        )
        m = members.size
        # sub ids: 0..m-1 are its leaves (global ids `members`), m.. its abstract nodes
        to_global = np.concatenate([members, next_id + np.arange(sub.n_nodes - m)])
        sub_parent = np.where(sub.parent >= 0, to_global[np.maximum(sub.parent, 0)], -1)
        parent_parts[0][members] = sub_parent[:m]
        parent_parts.append(sub_parent[m:])
        layer_parts.append(sub.layer[m:].astype(np.int64))
        next_id += sub.n_nodes - m
    if progress is not None:
        progress(values.size, values.size)
    return _renumber(np.concatenate(parent_parts), np.concatenate(layer_parts), n)
