"""A RAPTOR-style cluster tree (Sarthi et al., 2024) on psirag's backbone: the same-backbone
tree baseline of the evaluation and of the skewed-distribution study (paper Section 4).

Written here from the RAPTOR paper's description, not from its code:

- **Layers.** Layer 0 holds the leaves. Each new layer clusters *all* nodes of the layer below,
  so the tree is layered (every leaf at depth 0) but it is a DAG, not a tree: a node may have
  several parents (soft assignment). Building stops when a layer has at most ``top_size`` nodes
  (RAPTOR: reduction dimension + 1), when clustering no longer reduces the node count, or after
  ``max_layers`` layers (RAPTOR's default: 5).
- **Clustering.** UMAP to ``dim`` (10) dimensions with cosine distance, then a Gaussian mixture
  whose number of components (1 .. ``max_clusters``) minimises the BIC. *Global* clustering uses
  ``n_neighbors = sqrt(m - 1)`` over the whole layer; then each global cluster is reduced again
  with ``local_neighbors`` (10) neighbours and clustered *locally*; the local clusters are the
  new nodes. A group of at most ``dim + 1`` nodes is one cluster (too small to reduce).
- **Soft assignment.** A node joins every cluster whose probability exceeds ``threshold`` (0.1),
  and always its most probable one, so no node is dropped. Its weight in a local cluster is
  ``P(global) * P(local | global)``; the heaviest cluster is its *hard* parent.
- **Oversized clusters.** RAPTOR re-clusters a cluster whose text exceeds the summariser's
  context. Here the cap is ``max_children`` (40, psi's fan-out cap, so both trees bound their
  nodes alike): a bigger cluster is re-clustered the same way; if that does not split it, a
  mixture with ``ceil(size / max_children)`` components splits it by hard assignment; after four
  rounds a still-oversized cluster is cut evenly along its principal direction.
- **Same abstracts and routing as psi.** A node's leaf set is the union of its children's leaf
  sets (shared leaves included). It is clustered at the next layer by the normalised mean of
  those leaves' embeddings. Its text is psi's abstract of the kind the index config names
  (:meth:`RaptorTree.write_abstracts`): by default the LLM-free keyword abstract over its leaves,
  contrasted with its hard parent; with ``llm-summary`` / ``llm-keywords``, psi's LLM abstracts
  written bottom-up from all its (soft) children, as RAPTOR summarises a cluster. Its routing
  vector is the leaf mean (psi's default) or, as psi's ``routing`` asks, the embedding of that
  text (RAPTOR's choice) or a blend. Same abstracts and vectors as psi isolate the tree shape.

Retrieval, both of RAPTOR's modes:

- :meth:`RaptorTree.traverse`: top-down beam search (start at the highest layer with more than
  ``beam`` nodes, keep the best ``beam`` per layer, expand to the union of their children,
  return the top-k leaves), the same procedure as psi's tree search.
- :meth:`RaptorTree.collapsed`: flat cosine search over every node, leaves and abstracts alike,
  top-k *nodes*. Abstract hits are kept as nodes (RAPTOR hands them to the reader as context);
  they are not expanded into leaves. For Recall@k only leaf hits count, so a collapsed top-k
  may hold fewer than k leaves: that is the cost of the abstracts taking slots.

umap-learn and scikit-learn are optional (``pip install 'psirag[eval]'``) and imported lazily.
UMAP and the mixtures get ``random_state=seed``, so a build is deterministic for a seed; UMAP
then runs single-threaded. BLAS and OpenMP are also held to one thread while clustering: the
mixtures do thousands of 10 x 10 solves, which a thread pool slows about tenfold (measured on
2 cores). Nothing is downloaded.

As ``psirag eval`` methods, ``raptor`` (traversal) and ``raptor-collapsed`` are built over the
psi index's leaves and leaf embeddings (nothing is embedded twice) with its abstract, routing and
``max_children`` settings, and cached on disk (.npy arrays + JSON, written atomically like a psi
index) keyed by corpus, embedder and all of those settings.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from psirag.errors import IndexFormatError, InputError
from psirag.eval.methods import (
    EvalContext,
    Factory,
    IndexInfo,
    Retrieval,
    abstract_key,
    register_method,
)
from psirag.index import Index
from psirag.pipeline import routing_vectors
from psirag.retrieval.ranking import top_k
from psirag.retrieval.tree_search import LayeredSearch
from psirag.storage import IndexReader, IndexWriter
from psirag.tree.model import Tree
from psirag.types import Passage, Source

if TYPE_CHECKING:
    from psirag.llm.client import LLMClient

__all__ = [
    "EVAL_BUILD",
    "REDUCERS",
    "RaptorHits",
    "RaptorTree",
    "Reducer",
    "require_eval_deps",
    "umap_reducer",
]

_INSTALL_HINT = "pip install 'psirag[eval]'"
RAPTOR_FORMAT = "raptor-tree"
"""The ``kind`` of a saved tree's manifest (the folder layout is psirag's index storage)."""


def require_eval_deps(*, umap: bool = True) -> tuple[Any, Any]:
    """Import umap (unless ``umap=False``) and sklearn.mixture, or say which extra has them."""
    umap_mod: Any = None
    if umap:
        try:
            import umap as umap_mod  # type: ignore[no-redef]
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                f"the RAPTOR baseline needs umap-learn, which is not installed: {_INSTALL_HINT}"
            ) from exc
    try:
        from sklearn import mixture
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the RAPTOR baseline needs scikit-learn, which is not installed: {_INSTALL_HINT}"
        ) from exc
    return umap_mod, mixture


Reducer = Callable[[np.ndarray, int, int, int], np.ndarray]
"""``reducer(x, n_neighbors, n_components, seed) -> z``: the dimensionality reduction step."""


def umap_reducer(umap_module: Any) -> Reducer:
    """RAPTOR's reduction: UMAP with cosine distance, seeded (so single-threaded)."""

    def reduce(x: np.ndarray, n_neighbors: int, n_components: int, seed: int) -> np.ndarray:
        reducer = umap_module.UMAP(
            n_neighbors=n_neighbors,
            n_components=n_components,
            metric="cosine",
            random_state=seed,
            n_jobs=1,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(reducer.fit_transform(x), dtype=np.float64)

    return reduce


@dataclass(frozen=True)
class RaptorHits:
    """Search result: leaf ids and scores best first, plus the abstract or mixed nodes hit.

    ``traverse``: ``nodes`` are the abstract nodes kept at each layer, top-down.
    ``collapsed``: ``nodes`` are the top-k nodes of any layer; ``leaves`` the leaf ones among them.
    """

    leaves: np.ndarray
    scores: np.ndarray
    nodes: np.ndarray
    node_scores: np.ndarray


@dataclass(frozen=True, eq=False)
class _SoftLeafTree(Tree):
    """A Tree whose leaf sets are given explicitly (they may overlap), for keyword abstracts.

    ``keyword_abstracts`` reads ``leaf_membership``, ``leaf_counts`` and ``parent`` (to contrast
    a node with its parent): here the soft leaf sets and the hard parent. A node's soft leaf set
    is inside its hard parent's, as the phrase contrast needs.
    """

    membership: sp.csr_matrix | None = None

    @cached_property
    def leaf_membership(self) -> sp.csr_matrix:
        assert self.membership is not None
        return self.membership

    @cached_property
    def leaf_counts(self) -> np.ndarray:
        assert self.membership is not None
        return np.diff(self.membership.indptr).astype(np.int64)


@dataclass(frozen=True, eq=False)
class _SoftTree(_SoftLeafTree):
    """A :class:`_SoftLeafTree` whose ``children`` are the soft children (for LLM abstracts,
    which write a node from its children's texts)."""

    kids: list[np.ndarray] | None = None

    def children(self, node: int) -> np.ndarray:
        assert self.kids is not None
        return self.kids[node]


@dataclass
class _Clustering:
    """Settings and dependencies of one build, plus counters for its report."""

    reducer: Reducer
    mixture: Any
    dim: int
    threshold: float
    max_clusters: int
    local_neighbors: int
    max_children: int | None
    seed: int
    seconds: dict[str, float] = field(default_factory=lambda: {"reduce": 0.0, "gmm": 0.0})
    reclustered: int = 0
    forced_splits: int = 0

    def reduce(self, x: np.ndarray, n_neighbors: int) -> np.ndarray:
        """Reduce to ``dim`` dimensions (fewer for tiny groups)."""
        t0 = time.perf_counter()
        m = x.shape[0]
        z = self.reducer(x, max(2, min(n_neighbors, m - 1)), min(self.dim, m - 2), self.seed)
        self.seconds["reduce"] += time.perf_counter() - t0
        return z

    def soft_clusters(self, z: np.ndarray) -> np.ndarray:
        """Membership probabilities (m x k) of the BIC-best Gaussian mixture."""
        t0 = time.perf_counter()
        best, best_bic = None, math.inf
        for k in range(1, min(self.max_clusters, z.shape[0]) + 1):
            gmm = self._fit(z, k)
            if gmm is None:
                break  # too many components for the points: larger k fail too
            bic = gmm.bic(z)
            if bic < best_bic:
                best, best_bic = gmm, bic
        self.seconds["gmm"] += time.perf_counter() - t0
        if best is None:
            return np.ones((z.shape[0], 1))
        return best.predict_proba(z)

    def _fit(self, z: np.ndarray, k: int) -> Any:
        gmm = self.mixture.GaussianMixture(n_components=k, random_state=self.seed)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return gmm.fit(z)
        except ValueError:  # ill-defined covariance: more components than the data supports
            return None

    def members(self, probs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Soft clusters as (member positions, member probabilities); empty clusters dropped."""
        keep = probs > self.threshold
        keep[np.arange(probs.shape[0]), np.argmax(probs, axis=1)] = True
        out = []
        for c in range(probs.shape[1]):
            idx = np.flatnonzero(keep[:, c])
            if idx.size:
                out.append((idx, probs[idx, c]))
        return out

    def cluster(self, x: np.ndarray, depth: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
        """Global, then local clustering of the rows of ``x``; caps cluster size by re-clustering.

        Returns (row positions, weights) per cluster; every row is in at least one cluster.
        """
        m = x.shape[0]
        if m <= self.dim + 1:
            return [(np.arange(m), np.ones(m))]
        z = self.reduce(x, int(math.sqrt(m - 1)))
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for g_idx, g_w in self.members(self.soft_clusters(z)):
            if g_idx.size <= self.dim + 1:
                out.append((g_idx, g_w))
                continue
            zl = self.reduce(x[g_idx], self.local_neighbors)
            for l_idx, l_w in self.members(self.soft_clusters(zl)):
                out.append((g_idx[l_idx], g_w[l_idx] * l_w))
        return self._cap(x, out, depth)

    def _cap(
        self, x: np.ndarray, clusters: list[tuple[np.ndarray, np.ndarray]], depth: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Re-cluster every cluster over ``max_children``; the result always respects the cap."""
        cap = self.max_children
        if cap is None:
            return clusters
        out: list[tuple[np.ndarray, np.ndarray]] = []
        for idx, w in clusters:
            if idx.size <= cap:
                out.append((idx, w))
                continue
            k = math.ceil(idx.size / cap)
            if depth >= _MAX_RECLUSTER_DEPTH:
                parts = _even_split(x[idx], k)
            else:
                self.reclustered += 1
                parts = self.cluster(x[idx], depth + 1)  # capped already
                if len(parts) == 1 or any(p.size == idx.size for p, _ in parts):
                    parts = self._cap(x[idx], self._forced_split(x[idx], k), depth + 1)
            for p_idx, p_w in parts:
                out.append((idx[p_idx], w[p_idx] * p_w))
        return out

    def _forced_split(self, x: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Split a group that the BIC keeps whole: a k-component mixture, hard assignment."""
        self.forced_splits += 1
        z = self.reduce(x, self.local_neighbors) if x.shape[0] > self.dim + 1 else x
        gmm = self._fit(z, k)
        if gmm is None:  # pragma: no cover - k is far below the point count
            return _even_split(x, k)
        p = gmm.predict_proba(z)
        labels, probs = np.argmax(p, axis=1), p.max(axis=1)
        return [
            (np.flatnonzero(labels == c), probs[labels == c])
            for c in range(k)
            if np.any(labels == c)
        ]


_MAX_RECLUSTER_DEPTH = 4
"""Re-clustering rounds for an oversized cluster before it is cut evenly."""


def _even_split(x: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Last resort for the size cap: k near-equal runs along the principal direction."""
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    order = np.argsort(centred @ vt[0], kind="stable")
    return [(np.sort(part), np.ones(part.size)) for part in np.array_split(order, k)]


def _cat_ids(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _cat_floats(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.float64) if parts else np.zeros(0, dtype=np.float64)


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms == 0, 1, norms)).astype(np.float32)


class RaptorTree:
    """A built RAPTOR-style tree. Node ids: leaves ``0 .. n_leaves-1``, then layer by layer.

    ``children[u]`` and ``parent_sets[u]`` are the soft edges; ``hard_parent[u]`` is the
    heaviest parent (-1 at the top layer); ``membership`` (n_nodes x n_leaves, 0/1) marks each
    node's soft leaf set; ``vectors`` are unit routing vectors (leaves: their embeddings).
    """

    def __init__(
        self,
        *,
        layer: np.ndarray,
        children: list[np.ndarray],
        weights: list[np.ndarray],
        hard_parent: np.ndarray,
        membership: sp.csr_matrix,
        vectors: np.ndarray,
        abstracts: list[str],
        stats: dict[str, Any],
    ) -> None:
        self.layer = layer
        self.children = children
        self.weights = weights
        self.hard_parent = hard_parent
        self.membership = membership
        self.vectors = vectors
        self.abstracts = abstracts
        self.stats = stats
        self.n_nodes = int(layer.size)
        self.n_leaves = int(np.count_nonzero(layer == 0))
        self.depth = int(layer.max()) if layer.size else 0
        self.layer_nodes = [np.flatnonzero(layer == lv) for lv in range(self.depth + 1)]

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        embeddings: np.ndarray,
        leaf_texts: Sequence[str] | None = None,
        *,
        seed: int = 0,
        dim: int = 10,
        threshold: float = 0.1,
        max_clusters: int = 50,
        local_neighbors: int = 10,
        max_children: int | None = 40,
        top_size: int | None = None,
        max_layers: int | None = 5,
        max_phrases: int = 20,
        reducer: Reducer | None = None,
    ) -> RaptorTree:
        """Cluster layer by layer until at most ``top_size`` (default ``dim + 1``) nodes remain.

        ``leaf_texts`` (one per row) gives the abstract nodes keyword abstracts; without it they
        get empty strings. Embeddings are normalised here (psi's inputs are unit rows already).
        ``reducer`` replaces UMAP (tests use a linear projection to skip UMAP's JIT warm-up).
        """
        umap, mixture = require_eval_deps(umap=reducer is None)
        e = _normalise(np.asarray(embeddings, dtype=np.float32))
        n = e.shape[0]
        if n == 0:
            raise ValueError("cannot build a tree over zero chunks")
        if leaf_texts is not None and len(leaf_texts) != n:
            raise ValueError(f"{len(leaf_texts)} leaf texts for {n} embeddings")
        top = dim + 1 if top_size is None else top_size
        run = _Clustering(
            reducer=reducer if reducer is not None else umap_reducer(umap),
            mixture=mixture,
            dim=dim,
            threshold=threshold,
            max_clusters=max_clusters,
            local_neighbors=local_neighbors,
            max_children=max_children,
            seed=seed,
        )
        from threadpoolctl import threadpool_limits  # a scikit-learn dependency

        t_start = time.perf_counter()
        layer: list[int] = [0] * n
        children: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * n
        weights: list[np.ndarray] = [np.empty(0)] * n
        leaf_sets: list[np.ndarray] = [np.array([i], dtype=np.int64) for i in range(n)]
        vectors: list[np.ndarray] = [e]
        current = np.arange(n, dtype=np.int64)
        level = 0
        while current.size > top and (max_layers is None or level < max_layers):
            with threadpool_limits(limits=1):
                clusters = run.cluster(vectors[-1])
            if len(clusters) >= current.size:
                break  # clustering no longer reduces the layer
            level += 1
            new_ids = []
            new_vecs = []
            for idx, w in clusters:
                node = len(layer)
                kids = current[idx]
                order = np.argsort(kids, kind="stable")
                layer.append(level)
                children.append(kids[order])
                weights.append(np.asarray(w, dtype=np.float64)[order])
                leaves = np.unique(np.concatenate([leaf_sets[k] for k in kids]))
                leaf_sets.append(leaves)
                new_ids.append(node)
                new_vecs.append(e[leaves].sum(axis=0))
            vectors.append(_normalise(np.stack(new_vecs)))
            current = np.asarray(new_ids, dtype=np.int64)
        layer_arr = np.asarray(layer, dtype=np.int32)
        n_nodes = layer_arr.size

        hard_parent = np.full(n_nodes, -1, dtype=np.int64)
        best_w = np.full(n_nodes, -np.inf)
        for u in range(n, n_nodes):  # ties: the lowest parent id (first created) wins
            better = weights[u] > best_w[children[u]]
            hard_parent[children[u][better]] = u
            best_w[children[u][better]] = weights[u][better]

        rows = np.repeat(np.arange(n_nodes), [s.size for s in leaf_sets])
        cols = np.concatenate(leaf_sets)
        membership = sp.csr_matrix(
            (np.ones(cols.size, dtype=np.float32), (rows, cols)), shape=(n_nodes, n)
        )
        membership.sort_indices()
        stats: dict[str, Any] = {
            "seconds": {"clustering": time.perf_counter() - t_start, **run.seconds},
            "reclustered": run.reclustered,
            "forced_splits": run.forced_splits,
        }
        tree = cls(
            layer=layer_arr,
            children=children,
            weights=weights,
            hard_parent=hard_parent,
            membership=membership,
            vectors=np.concatenate(vectors, axis=0),
            abstracts=[""] * (n_nodes - n),
            stats=stats,
        )
        tree.write_abstracts(
            leaf_texts, "keywords" if leaf_texts is not None else "none", max_phrases=max_phrases
        )
        return tree

    # ------------------------------------------------------------------ abstracts and routing
    def soft_tree(self) -> Tree:
        """This DAG as a :class:`Tree` for psi's abstract writers: hard parents, the soft leaf
        sets, and the soft children (a RAPTOR node abstracts every member of its cluster)."""
        return _SoftTree(
            parent=self.hard_parent,
            layer=self.layer,
            membership=self.membership,
            kids=self.children,
        )

    def write_abstracts(
        self,
        leaf_texts: Sequence[str] | None,
        kind: str = "keywords",
        *,
        llm: LLMClient | None = None,
        max_phrases: int = 20,
        context_tokens: int = 4096,
        progress: bool = False,
    ) -> None:
        """Give the abstract nodes psi's abstracts of ``kind`` (an ``IndexConfig.abstracts``
        value): LLM-free keywords, none, or LLM keyword lists / summaries written by ``llm`` (an
        :class:`psirag.llm.LLMClient`) bottom-up from each node's soft children."""
        t0 = time.perf_counter()
        n = self.n_leaves
        abstracts = [""] * (self.n_nodes - n)
        if kind != "none" and self.n_nodes > n:
            if leaf_texts is None or len(leaf_texts) != n:
                raise ValueError(f"abstracts need {n} leaf texts")
            if kind == "keywords":
                from psirag.abstracts.keywords import format_abstract, keyword_abstracts

                phrases = keyword_abstracts(
                    list(leaf_texts), self.soft_tree(), max_phrases=max_phrases
                )
                abstracts = [format_abstract(p) for p in phrases]
            elif kind in ("llm-summary", "llm-keywords"):
                from psirag.abstracts.llm import llm_abstracts

                if llm is None:
                    raise InputError(f"abstracts={kind!r} need an LLM client (llm=)")
                written, llm_stats = llm_abstracts(
                    self.soft_tree(),
                    list(leaf_texts),
                    llm,
                    kind="summary" if kind == "llm-summary" else "keywords",
                    context_tokens=context_tokens,
                    progress=progress,
                    max_keywords=max_phrases,
                )
                abstracts = written[n:]
                self.stats["llm"] = {k: v for k, v in llm_stats.items() if k != "cuts"}
            else:
                raise InputError(f"unknown abstract kind {kind!r}")
        self.abstracts = abstracts
        self.stats["abstracts"] = kind
        self.stats.setdefault("seconds", {})["abstracts"] = time.perf_counter() - t0

    def set_routing(self, vectors: np.ndarray) -> None:
        """Replace the routing vectors (all nodes, leaves first), e.g. with psi's routing by the
        embedding of the abstract text; searches made after this use them."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != self.vectors.shape:
            raise ValueError(f"routing vectors of shape {vectors.shape}, need {self.vectors.shape}")
        self.vectors = vectors
        self.__dict__.pop("_searcher", None)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the tree to ``folder`` atomically, as .npy arrays and JSON (no pickle)."""
        with IndexWriter(Path(folder)) as writer:
            sizes = np.asarray([c.size for c in self.children], dtype=np.int64)
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            writer.save_array("layer.npy", self.layer)
            writer.save_array("children_offsets.npy", offsets)
            writer.save_array("children.npy", _cat_ids(self.children))
            writer.save_array("weights.npy", _cat_floats(self.weights))
            writer.save_array("hard_parent.npy", self.hard_parent)
            writer.save_array("membership_indptr.npy", self.membership.indptr.astype(np.int64))
            writer.save_array("membership_indices.npy", self.membership.indices.astype(np.int64))
            writer.save_array("vectors.npy", self.vectors)
            n = self.n_leaves
            writer.save_jsonl(
                "abstracts.jsonl",
                ({"node": n + i, "text": a} for i, a in enumerate(self.abstracts)),
            )
            writer.commit(
                {
                    "kind": RAPTOR_FORMAT,
                    "counts": {"nodes": self.n_nodes, "leaves": n, "layers": self.layer_sizes()},
                    "stats": self.stats,
                }
            )
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> RaptorTree:
        """Open a tree written by :meth:`save` (its files checked against the manifest)."""
        reader = IndexReader(Path(folder))
        if reader.manifest.get("kind") != RAPTOR_FORMAT:
            raise IndexFormatError(f"{folder} does not hold a RAPTOR tree")

        def array(name: str) -> np.ndarray:
            return np.asarray(reader.load_array(name, mmap=False))

        layer = array("layer.npy")
        offsets = array("children_offsets.npy")
        flat, flat_w = array("children.npy"), array("weights.npy")
        n_nodes = int(layer.size)
        if offsets.size != n_nodes + 1 or offsets[-1] != flat.size or flat_w.size != flat.size:
            raise IndexFormatError(f"{folder}: children arrays do not match; rebuild")
        indptr, indices = array("membership_indptr.npy"), array("membership_indices.npy")
        n_leaves = int(np.count_nonzero(layer == 0))
        membership = sp.csr_matrix(
            (np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(n_nodes, n_leaves)
        )
        abstracts = [""] * (n_nodes - n_leaves)
        for row in reader.iter_jsonl("abstracts.jsonl"):
            abstracts[int(row["node"]) - n_leaves] = str(row["text"])
        return cls(
            layer=layer,
            children=[flat[a:b] for a, b in itertools.pairwise(offsets.tolist())],
            weights=[flat_w[a:b] for a, b in itertools.pairwise(offsets.tolist())],
            hard_parent=array("hard_parent.npy"),
            membership=membership,
            vectors=array("vectors.npy"),
            abstracts=abstracts,
            stats=dict(reader.manifest.get("stats") or {}),
        )

    # ------------------------------------------------------------------ structure
    @cached_property
    def parent_sets(self) -> list[np.ndarray]:
        """Soft parents of every node (a leaf may have several); empty at the top layer."""
        sets: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for u in range(self.n_leaves, self.n_nodes):
            for c in self.children[u].tolist():
                sets[c].append(u)
        return [np.asarray(s, dtype=np.int64) for s in sets]

    def layer_sizes(self) -> list[int]:
        """Number of nodes in each layer, leaves first."""
        return [int(x.size) for x in self.layer_nodes]

    def leaves_under(self, node: int) -> np.ndarray:
        """The soft leaf set of ``node`` (the leaves its abstract describes)."""
        m = self.membership
        return m.indices[m.indptr[node] : m.indptr[node + 1]].astype(np.int64)

    def hard_tree(self) -> Tree:
        """The tree of hard (heaviest) parents, single-rooted: a virtual root joins the top layer
        when it holds several nodes. Defines the LCA of the Dasgupta cost for soft assignment.
        A cluster whose members all have heavier clusters elsewhere keeps no leaves here.
        """
        parent = self.hard_parent.copy()
        layer = self.layer.copy()
        tops = self.layer_nodes[self.depth]
        if tops.size > 1:
            parent[tops] = self.n_nodes
            parent = np.append(parent, -1)
            layer = np.append(layer, self.depth + 1).astype(np.int32)
        return Tree(parent=parent, layer=layer)

    # ------------------------------------------------------------------ retrieval
    def traverse(self, query_vec: np.ndarray, k: int = 10, beam: int = 10) -> RaptorHits:
        """Top-down beam search (the same search as psi's tree); returns the top-k leaves and
        the abstract nodes kept on the way down."""
        hits = self._searcher.search(query_vec, k=k, beam=beam)
        return RaptorHits(
            leaves=hits.leaves, scores=hits.scores, nodes=hits.kept, node_scores=hits.kept_scores
        )

    @cached_property
    def _searcher(self) -> LayeredSearch:
        def children_of(nodes: np.ndarray) -> np.ndarray:
            return np.unique(np.concatenate([self.children[u] for u in nodes.tolist()]))

        return LayeredSearch(self.vectors, self.layer_nodes, children_of)

    def collapsed(self, query_vec: np.ndarray, k: int = 10) -> RaptorHits:
        """Flat search over all nodes; ``nodes`` is the top-k of any layer, ``leaves`` the leaf
        hits among them (in rank order), which is what Recall@k counts."""
        q = np.asarray(query_vec, dtype=np.float32).ravel()
        scores = self.vectors @ q
        ids = np.arange(self.n_nodes)
        top = top_k(scores, k, ids)
        nodes, node_scores = ids[top], scores[top]
        is_leaf = self.layer[nodes] == 0
        return RaptorHits(
            leaves=nodes[is_leaf], scores=node_scores[is_leaf], nodes=nodes, node_scores=node_scores
        )


# ------------------------------------------------------------------ as psirag eval methods
# ``psirag eval --methods raptor,raptor-collapsed`` (and NAME+agent with --llm): the tree is
# built over the psi index's leaves and leaf embeddings (nothing is embedded twice), with the
# psi config's abstracts, routing and fan-out cap, and cached beside the psi index.

REDUCERS: dict[str, Reducer] = {}
"""Reducers the eval methods may use instead of UMAP, by name (tests register a linear
projection to skip UMAP's JIT warm-up); ``EVAL_BUILD['reducer']`` names the one used."""

EVAL_BUILD: dict[str, Any] = {
    "seed": 0,
    "dim": 10,
    "threshold": 0.1,
    "max_clusters": 50,
    "local_neighbors": 10,
    "max_layers": 5,
    "reducer": "umap",
}
"""RAPTOR's published clustering defaults, the build settings of the eval methods (all of them
part of the cache key)."""

RAPTOR_KIND = "raptor"
RAPTOR_STAGES = ("chunking", "embedding", "clustering", "abstracts", "routing")
"""What a raptor method's index_seconds count: psi's chunking and leaf embedding (reused, so
paid once) and the RAPTOR build."""
_NOT_RAPTOR = (
    "embedder",
    "tree_per_document",
    "tree_mode",
    "tree_neighbors",
    "batch_size",
    "bm25_k1",
    "bm25_b",
)
"""Index config fields a RAPTOR tree does not depend on (the embedder is keyed apart)."""


def warm_up(reducer: Reducer, n: int, dim: int, seed: int) -> float:
    """Run the reducer on random points first and return the seconds it took.

    UMAP compiles its numba kernels on first use: about 20 s, and two minutes on a loaded
    2-core machine, against 0.2 s for the same 20-leaf fit once compiled. That one-off cost is
    not the tree's build time, so the eval pays it here, outside the timed stages. UMAP searches
    neighbours exactly below 4,096 points and by NN-descent above, so a corpus that reaches the
    second gets a second, larger warm-up fit.
    """
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for m in (64, 4200) if n > _UMAP_SMALL_DATA else (64,):
        reducer(rng.normal(size=(m, dim)).astype(np.float32), 10, 2, seed)
    return time.perf_counter() - t0


_UMAP_SMALL_DATA = 4096
"""UMAP's exact-neighbour limit (``umap_.py``: fewer points use pairwise distances)."""


def eval_tree(ctx: EvalContext) -> tuple[Index, RaptorTree, IndexInfo]:
    """The psi index and the RAPTOR tree over its leaves, from the eval cache or built."""
    index, psi_info = ctx.psi_index()
    config = ctx.settings.resolved_index_config()
    params = dict(EVAL_BUILD)
    reducer_name = str(params.pop("reducer"))
    key = {k: v for k, v in abstract_key(config).items() if k not in _NOT_RAPTOR}
    key["raptor"] = {**params, "reducer": reducer_name}

    def build() -> RaptorTree:
        reducer = None
        if reducer_name != "umap":
            if reducer_name not in REDUCERS:
                raise InputError(f"unknown RAPTOR reducer {reducer_name!r}")
            reducer = REDUCERS[reducer_name]
        try:
            umap_module, _ = require_eval_deps(umap=reducer is None)
        except ImportError as exc:
            raise InputError(str(exc)) from exc
        data = index.data
        n = data.n_leaves
        leaves = np.asarray(data.node_vectors[:n], dtype=np.float32)
        texts = [c.text for c in data.chunks]
        warmup = 0.0
        if reducer is None:
            ctx.say("warming UMAP up (its one-off JIT compilation is not build time)")
            reducer = umap_reducer(umap_module)
            warmup = warm_up(reducer, n, leaves.shape[1], int(params["seed"]))
        ctx.say(f"clustering {n:,} leaves into a RAPTOR tree")
        tree = RaptorTree.build(
            leaves, None, max_children=config.max_children, reducer=reducer, **params
        )
        tree.stats["seconds"]["warmup"] = warmup
        with ctx.abstract_llm(config) as llm:
            tree.write_abstracts(
                texts,
                config.abstracts,
                llm=llm,
                max_phrases=config.max_keywords,
                context_tokens=config.context_tokens,
                progress=ctx.progress,
            )
        t0 = time.perf_counter()
        if config.routing != "leaf_mean" and tree.n_nodes > n:
            tree.set_routing(
                routing_vectors(
                    tree.soft_tree(),
                    leaves,
                    tree.abstracts,
                    config,
                    ctx.embedder,
                    progress=ctx.progress,
                )
            )
        seconds = tree.stats["seconds"]
        seconds["routing"] = time.perf_counter() - t0
        for stage in ("chunking", "embedding"):
            seconds[stage] = psi_info.stage_seconds.get(stage, 0.0)
        tree.stats["routing"] = config.routing
        return tree

    def stages(tree: RaptorTree) -> dict[str, float]:
        seconds = tree.stats["seconds"]
        return {s: float(seconds.get(s, 0.0)) for s in RAPTOR_STAGES}

    tree, info = ctx.artifact(
        RAPTOR_KIND,
        key,
        build=build,
        save=lambda t, path: t.save(path),
        load=RaptorTree.load,
        stages=stages,
    )
    return index, tree, info


def _node_passage(tree: RaptorTree, node: int, score: float) -> Passage:
    """An abstract node hit of the collapsed search, as RAPTOR hands it to the reader: its
    abstract text. It matches no gold passage, so it takes a Recall@k slot."""
    text = tree.abstracts[node - tree.n_leaves]
    source = Source(document=f"raptor:{node}", title="", chunk=0, start=0, end=len(text))
    return Passage(id=f"raptor-node-{node}", text=text, score=score, source=source)


def _raptor_factory(collapsed: bool) -> Factory:
    def make(ctx: EvalContext) -> Retrieval:
        index, tree, info = eval_tree(ctx)
        s = ctx.settings

        def traverse(query: str, vector: np.ndarray) -> list[Passage]:
            hits = tree.traverse(vector, k=s.k, beam=s.search_config().beam)
            top = zip(hits.leaves.tolist(), hits.scores.tolist(), strict=True)
            return [index.passage(i, score) for i, score in top]

        def flat(query: str, vector: np.ndarray) -> list[Passage]:
            hits = tree.collapsed(vector, k=s.k)
            top = zip(hits.nodes.tolist(), hits.node_scores.tolist(), strict=True)
            return [
                index.passage(u, score) if u < tree.n_leaves else _node_passage(tree, u, score)
                for u, score in top
            ]

        return Retrieval(flat if collapsed else traverse, info, list(RAPTOR_STAGES))

    return make


register_method(
    "raptor",
    _raptor_factory(False),
    "RAPTOR-style cluster tree over psi's leaves and abstracts, top-down traversal",
)
register_method(
    "raptor-collapsed",
    _raptor_factory(True),
    "RAPTOR-style cluster tree, collapsed: flat cosine over leaves and abstract nodes",
)
