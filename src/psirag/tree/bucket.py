"""Bucketed trees (SPEC 4, paper App. E.1 "Bucketing"): split, build per bucket, merge on top.

Recursive spherical k-means cuts the corpus into buckets of at most ``bucket_size`` chunks. Each
bucket gets its own tree (the exact walk inside it, or knn / ann when a bucket is large), built
independently: a bucket is the unit of parallel work, on local processes here
(:func:`build_bucket_trees`) or on a Ray cluster, through the same :func:`build_bucket` function.
The bucket trees are then merged by Algorithm 1's own rule, one level up: buckets are walked in
descending similarity of their centroids along the buckets' maximum spanning tree; two trees of
equal height get a new common parent, and a lower tree is collapsed under the taller one's node
one layer above its root, on the path of the taller tree's leaf nearest to the lower bucket.
Every leaf therefore stays at the same depth, and a final rebalance (SPEC 1.5) keeps
``max_children``.

Time: the k-means passes are O(n·c·d) per level with c clusters per split; a bucket of size b
costs O(b²) exactly, so n/b buckets cost O(n·b): linear in n for a fixed bound.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from psirag.errors import InputError
from psirag.tree.approx import spanning_edges_knn
from psirag.tree.exact import similarity_matrix, spanning_edges, validate_embeddings
from psirag.tree.machine import default_workers
from psirag.tree.merge import merge_components
from psirag.tree.walk import build_walk_tree

BucketTreeMode = Literal["exact", "knn", "ann"]

DEFAULT_BUCKET_SIZE = 4096
"""Chunks per bucket at most (the authors' code uses 4,096; see BENCHMARKS.md for ours)."""
SPLIT_FANOUT = 16
"""Clusters per k-means split at most; deeper splits handle the rest."""
_KMEANS_SAMPLE = 32_768
"""Rows the centroids are fitted on per split (all rows are then assigned)."""
_KMEANS_ITERATIONS = 12
_POOL_MIN_ROWS = 20_000
"""Below this many rows the buckets are built inline unless workers are asked for."""


@dataclass(frozen=True)
class BucketJob:
    """One bucket's tree to build: everything a worker needs, nothing it must share."""

    vectors: np.ndarray
    mode: BucketTreeMode
    neighbors: int
    max_children: int | None


def _cluster_sums(rows: np.ndarray, assign: np.ndarray, clusters: int) -> np.ndarray:
    """Float64 sum of the rows of each cluster (one sparse product; ``np.add.at`` is slow)."""
    import scipy.sparse as sp

    member = sp.csr_matrix(
        (np.ones(assign.size), (assign, np.arange(assign.size))), shape=(clusters, assign.size)
    )
    return np.asarray(member @ rows.astype(np.float64))


def spherical_kmeans(
    vectors: np.ndarray, clusters: int, *, seed: int = 0, iterations: int = _KMEANS_ITERATIONS
) -> np.ndarray:
    """Cluster labels of unit rows by cosine k-means (k-means++ seeding on a sample).

    Deterministic for a seed. Centroids are fitted on at most :data:`_KMEANS_SAMPLE` rows and
    every row is then assigned to its most similar centroid, so one split is O(n·c·d).
    """
    n = vectors.shape[0]
    rng = np.random.default_rng(seed)
    if n <= _KMEANS_SAMPLE:
        sample = vectors
    else:
        sample = vectors[np.sort(rng.choice(n, _KMEANS_SAMPLE, replace=False))]
    m = sample.shape[0]
    first = int(rng.integers(m))
    centroids = [sample[first]]
    closest = 1.0 - sample @ sample[first]  # cosine distance to the nearest seed
    for _ in range(clusters - 1):
        weights = np.maximum(closest, 0.0).astype(np.float64)
        total = weights.sum()
        pick = int(rng.choice(m, p=weights / total)) if total > 0 else int(rng.integers(m))
        centroids.append(sample[pick])
        closest = np.minimum(closest, 1.0 - sample @ sample[pick])
    c = np.stack(centroids).astype(np.float32)
    assign = np.argmax(sample @ c.T, axis=1)
    for _ in range(iterations):
        sums = _cluster_sums(sample, assign, clusters)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        c = np.where(norms > 0, sums / np.maximum(norms, 1e-12), c).astype(np.float32)
        new = np.argmax(sample @ c.T, axis=1)
        if np.array_equal(new, assign):
            break
        assign = new
    out = np.empty(n, dtype=np.int64)
    for lo in range(0, n, 65_536):
        out[lo : lo + 65_536] = np.argmax(vectors[lo : lo + 65_536] @ c.T, axis=1)
    return out


def split_buckets(vectors: np.ndarray, bucket_size: int, *, seed: int = 0) -> list[np.ndarray]:
    """Row ids of each bucket (sorted, disjoint, covering all rows), every bucket <= bucket_size.

    A part larger than the bound is split by spherical k-means into ``ceil(size / bound)``
    clusters (at most :data:`SPLIT_FANOUT`) and each cluster is split again if still too large.
    A split that fails to separate (duplicates, one cluster takes everything) falls back to
    cutting the part in id order, so the recursion always ends.
    """
    if isinstance(bucket_size, bool) or not isinstance(bucket_size, (int, np.integer)):
        raise InputError(f"bucket size must be an integer, got {bucket_size!r}")
    if bucket_size < 2:
        raise InputError(f"bucket size must be at least 2, got {bucket_size}")
    n = vectors.shape[0]
    done: list[np.ndarray] = []
    todo: list[tuple[np.ndarray, int]] = [(np.arange(n, dtype=np.int64), seed)]
    while todo:
        rows, part_seed = todo.pop()
        if rows.size <= bucket_size:
            done.append(rows)
            continue
        parts = min(SPLIT_FANOUT, math.ceil(rows.size / bucket_size))
        part = vectors if rows.size == n else vectors[rows]  # no copy of the whole corpus
        labels = spherical_kmeans(part, parts, seed=part_seed)
        del part
        pieces = [rows[labels == g] for g in range(parts)]
        pieces = [p for p in pieces if p.size]
        if len(pieces) < 2:  # nothing separated: cut in id order
            pieces = np.array_split(rows, parts)
        for i, piece in enumerate(pieces):
            todo.append((piece, part_seed * 31 + i + 1))
    done.sort(key=lambda r: int(r[0]))
    return done


def build_bucket(job: BucketJob) -> tuple[np.ndarray, np.ndarray]:
    """One bucket's tree as ``(parent, layer)`` in the bucket's local ids (leaves first).

    A plain function of its inputs: what a local process pool or a Ray task runs per bucket.
    """
    tree = build_walk_tree(
        validate_embeddings(job.vectors),
        job.mode,
        neighbors=job.neighbors,
        max_children=job.max_children,
    )
    return tree.parent, tree.layer.astype(np.int64)


def _limit_blas_threads() -> None:
    """One BLAS thread per worker process: the pool, not BLAS, uses the cores."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=1)


BucketRunner = Callable[[Sequence[BucketJob]], list[tuple[np.ndarray, np.ndarray]]]
"""Builds every job's tree, in job order (local processes, Ray, or inline)."""


def build_bucket_trees(
    jobs: Sequence[BucketJob], workers: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every bucket's tree, in job order, on up to ``workers`` local processes (1: inline).

    At most two jobs per worker are in flight, so the vectors sent to the pool stay bounded.
    A pool that breaks (a worker killed) is retried inline for the buckets not yet built.
    """
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise InputError(f"bucket workers must be at least 1, got {workers}")
    workers = min(workers, len(jobs))
    if workers <= 1:
        return [build_bucket(job) for job in jobs]
    # imported here: concurrent.futures.process and multiprocessing cost 20-25 ms of every
    # `psirag add`, whose tree update imports this module but builds no buckets in processes
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    ctx = get_context("spawn")  # fresh interpreters: no inherited threads or locks
    results: list[tuple[np.ndarray, np.ndarray]] = []
    try:
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_limit_blas_threads) as pool:
            pending: deque[Future[tuple[np.ndarray, np.ndarray]]] = deque()
            for job in jobs:
                pending.append(pool.submit(build_bucket, job))
                if len(pending) >= 2 * workers:
                    results.append(pending.popleft().result())
            while pending:
                results.append(pending.popleft().result())
    except BrokenProcessPool as exc:  # a worker died (killed, or no importable __main__)
        warnings.warn(
            f"bucket worker processes failed ({exc}); building the remaining buckets in this "
            "process",
            stacklevel=2,
        )
        results.extend(build_bucket(job) for job in jobs[len(results) :])
    return results


def _bucket_spanning_edges(centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximum spanning tree of the bucket centroids, in walk order (exact while it fits)."""
    if centroids.shape[0] <= 4096:
        a, b, _ = spanning_edges(similarity_matrix(centroids))
    else:
        a, b, _ = spanning_edges_knn(centroids, 32)
    return a, b


def merge_bucket_trees(
    embeddings: np.ndarray,
    buckets: Sequence[np.ndarray],
    trees: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray]:
    """One equi-depth tree over all leaves from per-bucket trees, as global ``(parent, layer)``.

    Leaves keep their global ids; abstract nodes follow in bucket order, then the merge nodes.
    See the module docstring for the merge rule.
    """
    n = embeddings.shape[0]
    parent: list[int] = [-1] * n
    layer: list[int] = [0] * n
    roots: list[int] = []
    next_id = n
    for rows, (sub_parent, sub_layer) in zip(buckets, trees, strict=True):
        m = rows.size
        to_global = np.concatenate([rows, next_id + np.arange(sub_parent.size - m)])
        glob = np.where(sub_parent >= 0, to_global[np.maximum(sub_parent, 0)], -1)
        for leaf, p in zip(rows.tolist(), glob[:m].tolist(), strict=True):
            parent[leaf] = p
        parent.extend(glob[m:].tolist())
        layer.extend(sub_layer[m:].tolist())
        tops = [int(to_global[i]) for i in np.flatnonzero(sub_parent < 0).tolist()]
        if len(tops) != 1:
            raise ValueError("each bucket tree must have exactly one root")
        roots.append(tops[0])
        next_id += sub_parent.size - m
    b = len(buckets)
    if b == 1:
        return np.asarray(parent, dtype=np.int64), np.asarray(layer, dtype=np.int64)

    sums = np.stack([embeddings[rows].sum(axis=0, dtype=np.float64) for rows in buckets])
    centroids = (sums / np.linalg.norm(sums, axis=1, keepdims=True)).astype(np.float32)
    edge_a, edge_b = _bucket_spanning_edges(centroids)

    def nearest_leaf(bucket: int, toward: int) -> int:
        """The leaf of ``bucket`` most similar to bucket ``toward``'s centroid."""
        rows = buckets[bucket]
        return int(rows[int(np.argmax(embeddings[rows] @ centroids[toward]))])

    merge_components(parent, layer, roots, edge_a, edge_b, nearest_leaf)
    return np.asarray(parent, dtype=np.int64), np.asarray(layer, dtype=np.int64)


def bucket_inner_mode(size: int, neighbors: int) -> BucketTreeMode:
    """Exact inside a bucket whose matrix is small; knn beyond (a bucket bound above 16k)."""
    return "exact" if size <= 16_384 else "knn"


class _LazyJobs(Sequence[BucketJob]):
    """The bucket jobs, each bucket's vectors copied only when its job is taken (bounded memory
    while a pool works through them)."""

    def __init__(
        self,
        e: np.ndarray,
        buckets: Sequence[np.ndarray],
        inner_mode: BucketTreeMode | None,
        neighbors: int,
        max_children: int | None,
    ) -> None:
        self._e, self._buckets = e, buckets
        self._inner, self._neighbors, self._max_children = inner_mode, neighbors, max_children

    def __len__(self) -> int:
        return len(self._buckets)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        rows = self._buckets[i]
        return BucketJob(
            vectors=self._e[rows],
            mode=self._inner or bucket_inner_mode(rows.size, self._neighbors),
            neighbors=self._neighbors,
            max_children=self._max_children,
        )


def build_bucketed(
    embeddings: np.ndarray,
    *,
    bucket_size: int = DEFAULT_BUCKET_SIZE,
    neighbors: int = 32,
    max_children: int | None = 40,
    inner_mode: BucketTreeMode | None = None,
    workers: int | None = None,
    runner: BucketRunner | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split into buckets, build each bucket's tree (in parallel), merge: global (parent, layer).

    ``runner`` builds the bucket jobs (default: :func:`build_bucket_trees` on ``workers`` local
    processes); a Ray runner plugs in here. Rebalancing the merged top is the caller's.
    """
    e = np.ascontiguousarray(embeddings, dtype=np.float32)
    buckets = split_buckets(e, bucket_size)
    jobs = _LazyJobs(e, buckets, inner_mode, neighbors, max_children)
    if workers is None and e.shape[0] < _POOL_MIN_ROWS:
        workers = 1  # starting processes costs more than these buckets
    trees = runner(jobs) if runner is not None else build_bucket_trees(jobs, workers)
    return merge_bucket_trees(e, buckets, trees)


__all__ = [
    "DEFAULT_BUCKET_SIZE",
    "BucketJob",
    "BucketRunner",
    "build_bucket",
    "build_bucket_trees",
    "build_bucketed",
    "default_workers",
    "merge_bucket_trees",
    "spherical_kmeans",
    "split_buckets",
]
