"""Top-down tree retrieval (paper Algorithm 2, SPEC 2.1), over one tree, a forest, or any
layered structure whose nodes have children (the RAPTOR-style baseline shares this search)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from psirag.retrieval.ranking import top_k
from psirag.tree.model import Tree, gather_ranges

__all__ = ["LayeredSearch", "TreeHits", "TreeSearcher", "gather_ranges"]

_EMPTY_IDS = np.empty(0, dtype=np.int64)
_EMPTY_SCORES = np.empty(0, dtype=np.float32)


@dataclass(frozen=True)
class TreeHits:
    """Leaves found by a search, best first; the inner nodes it kept per layer; and, when asked
    for, every node it scored."""

    leaves: np.ndarray
    scores: np.ndarray
    kept: np.ndarray = field(default_factory=lambda: _EMPTY_IDS)
    kept_scores: np.ndarray = field(default_factory=lambda: _EMPTY_SCORES)
    visited: np.ndarray = field(default_factory=lambda: _EMPTY_IDS)
    visited_scores: np.ndarray = field(default_factory=lambda: _EMPTY_SCORES)


def _cat(parts: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    return np.concatenate(parts) if parts else empty


class LayeredSearch:
    """Algorithm 2 over nodes grouped by layer (0 = leaves) with a ``children_of`` function.

    ``roots_at[l]`` lists nodes of layer ``l`` that no higher node reaches (roots of shorter
    trees in a forest); they join the candidates when the search reaches their layer.
    """

    def __init__(
        self,
        vectors: np.ndarray,
        layer_nodes: Sequence[np.ndarray],
        children_of: Callable[[np.ndarray], np.ndarray],
        roots_at: Sequence[np.ndarray] | None = None,
    ) -> None:
        self.vectors = vectors
        self.layer_nodes = list(layer_nodes)
        self.depth = len(self.layer_nodes) - 1
        self.children_of = children_of
        self.roots_at = list(roots_at) if roots_at is not None else [_EMPTY_IDS] * (self.depth + 1)

    def _score(self, nodes: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosine of ``nodes`` with the query. ``np.take`` copies the rows as fancy indexing
        does (same values, same layout) but measured ~20% faster on large node matrices
        (benchmarks/bench_tree_gather.py): at scale, gathering the rows is most of a search."""
        return np.take(self.vectors, nodes, axis=0) @ q

    def search(
        self,
        query: np.ndarray,
        *,
        k: int = 10,
        beam: int = 10,
        allowed: np.ndarray | None = None,
        collect_visited: bool = False,
    ) -> TreeHits:
        """Start at the highest layer with more than ``beam`` nodes (everything above it is taken
        whole: Algorithm 2's "|layer| <= k" branch), keep the top ``beam`` nodes by cosine per
        layer, expand to their children, return the top-k leaves. ``allowed`` (a boolean mask
        over nodes) restricts the search to nodes that hold allowed leaves; the start layer is
        then chosen by the allowed nodes alone. ``collect_visited`` also returns every node
        scored, the layers taken whole included (what summarization ranks, SPEC 2.5)."""
        q = np.asarray(query, dtype=np.float32).ravel()

        def layer_size(lv: int) -> int:
            # Restricted to some documents, only their nodes count: a forest's other trees must
            # not push the start above a short tree, whose nodes would then never be reached.
            nodes = self.layer_nodes[lv]
            return int(nodes.size if allowed is None else np.count_nonzero(allowed[nodes]))

        start = next((lv for lv in range(self.depth, -1, -1) if layer_size(lv) > beam), 0)
        cands = self.layer_nodes[start]
        kept: list[np.ndarray] = []
        kept_scores: list[np.ndarray] = []
        visited: list[np.ndarray] = []
        visited_scores: list[np.ndarray] = []
        if collect_visited:
            # Layers above the start are small enough to be taken whole (Algorithm 2's
            # "|layer| <= k" branch): their nodes are selected, so they count as visited.
            for lv in range(self.depth, start, -1):
                above = self.layer_nodes[lv]
                if allowed is not None:
                    above = above[allowed[above]]
                if above.size:
                    visited.append(above)
                    visited_scores.append(self.vectors[above] @ q)
        for lv in range(start, -1, -1):
            if lv < start and self.roots_at[lv].size:
                cands = np.concatenate([cands, self.roots_at[lv]])
            if allowed is not None:
                cands = cands[allowed[cands]]
            if cands.size == 0:
                continue  # a shorter tree's root may still join at a lower layer
            scores = self._score(cands, q)
            if collect_visited:
                visited.append(cands)
                visited_scores.append(scores)
            top = top_k(scores, k if lv == 0 else beam, cands)
            if lv == 0:
                return TreeHits(
                    leaves=cands[top],
                    scores=scores[top],
                    kept=_cat(kept, _EMPTY_IDS),
                    kept_scores=_cat(kept_scores, _EMPTY_SCORES),
                    visited=_cat(visited, _EMPTY_IDS),
                    visited_scores=_cat(visited_scores, _EMPTY_SCORES),
                )
            kept.append(cands[top])
            kept_scores.append(scores[top])
            cands = self.children_of(cands[top])
        return TreeHits(
            leaves=_EMPTY_IDS,
            scores=_EMPTY_SCORES,
            kept=_cat(kept, _EMPTY_IDS),
            kept_scores=_cat(kept_scores, _EMPTY_SCORES),
            visited=_cat(visited, _EMPTY_IDS),
            visited_scores=_cat(visited_scores, _EMPTY_SCORES),
        )


class TreeSearcher(LayeredSearch):
    """Tree search over a :class:`Tree` (or forest). Per-layer node lists are computed once, so
    each query only does small matrix products.

    ``node_vectors`` holds one unit vector per node: leaf embeddings for leaves, routing
    embeddings for abstract nodes.
    """

    def __init__(self, tree: Tree, node_vectors: np.ndarray) -> None:
        if node_vectors.shape[0] != tree.n_nodes:
            raise ValueError("node_vectors needs one row per tree node")
        self.tree = tree
        layer = tree.layer
        depth = tree.depth
        roots = tree.roots
        self.offsets, self.order = tree.children_table
        super().__init__(
            node_vectors,
            [np.flatnonzero(layer == lv) for lv in range(depth + 1)],
            self._children,
            [roots[layer[roots] == lv] for lv in range(depth + 1)],
        )

    def _children(self, nodes: np.ndarray) -> np.ndarray:
        starts, ends = self.offsets[nodes], self.offsets[nodes + 1]
        if nodes.size == 1:
            return self.order[starts[0] : ends[0]]
        return gather_ranges(self.order, starts, ends)
