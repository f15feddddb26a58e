"""Top-down tree retrieval (paper Algorithm 2, SPEC 2.1), over one tree or a forest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from psirag.tree.model import Tree


@dataclass(frozen=True)
class TreeHits:
    """Leaves found by a tree search, best first, and every node the search scored."""

    leaves: np.ndarray
    scores: np.ndarray
    visited: np.ndarray
    visited_scores: np.ndarray


class TreeSearcher:
    """Precomputes per-layer node lists once, so each query only does small matrix products.

    ``node_vectors`` holds one unit vector per node: leaf embeddings for leaves, routing
    embeddings for abstract nodes.
    """

    def __init__(self, tree: Tree, node_vectors: np.ndarray) -> None:
        if node_vectors.shape[0] != tree.n_nodes:
            raise ValueError("node_vectors needs one row per tree node")
        self.tree = tree
        self.vectors = node_vectors
        layer = tree.layer
        self.depth = tree.depth
        self.layer_nodes = [np.flatnonzero(layer == lv) for lv in range(self.depth + 1)]
        roots = tree.roots
        self.roots_at = [roots[layer[roots] == lv] for lv in range(self.depth + 1)]
        self.offsets, self.order = tree._children_csr

    def _children(self, nodes: np.ndarray) -> np.ndarray:
        starts, ends = self.offsets[nodes], self.offsets[nodes + 1]
        if nodes.size == 1:
            return self.order[starts[0] : ends[0]]
        return np.concatenate([self.order[s:e] for s, e in zip(starts, ends, strict=True)])

    def search(
        self,
        query: np.ndarray,
        *,
        k: int = 10,
        beam: int = 10,
        allowed: np.ndarray | None = None,
        collect_visited: bool = False,
    ) -> TreeHits:
        """Algorithm 2: start at the highest layer with more than ``beam`` nodes, keep the top
        ``beam`` nodes by cosine per layer, expand to their children, return the top-k leaves.

        In a forest, a shorter tree's root joins the candidates when the search reaches its
        layer (as if a chain of single-child nodes led to it from a common root). ``allowed``
        (a boolean mask over nodes) restricts the search to subtrees that hold allowed leaves.
        """
        q = np.asarray(query, dtype=np.float32).ravel()
        start = 0
        for lv in range(self.depth, -1, -1):
            if self.layer_nodes[lv].size > beam:
                start = lv
                break
        # Everything above the start layer is taken whole (Algorithm 2's "|layer| <= k" branch).
        cands = self.layer_nodes[start]
        visited: list[np.ndarray] = []
        visited_scores: list[np.ndarray] = []
        for lv in range(start, -1, -1):
            if lv < start and self.roots_at[lv].size:
                cands = np.concatenate([cands, self.roots_at[lv]])
            if allowed is not None:
                cands = cands[allowed[cands]]
            if cands.size == 0:
                break
            scores = self.vectors[cands] @ q
            if collect_visited:
                visited.append(cands)
                visited_scores.append(scores)
            width = k if lv == 0 else beam
            if cands.size > width:
                top = np.argpartition(-scores, width - 1)[:width]
            else:
                top = np.arange(cands.size)
            # Best first; ties by node id so results are deterministic.
            top = top[np.lexsort((cands[top], -scores[top]))]
            if lv == 0:
                empty = np.empty(0, dtype=np.int64)
                return TreeHits(
                    leaves=cands[top],
                    scores=scores[top],
                    visited=np.concatenate(visited) if visited else empty,
                    visited_scores=np.concatenate(visited_scores)
                    if visited
                    else np.empty(0, np.float32),
                )
            cands = self._children(cands[top])
        empty = np.empty(0, dtype=np.int64)
        return TreeHits(
            leaves=empty,
            scores=np.empty(0, np.float32),
            visited=np.concatenate(visited) if visited else empty,
            visited_scores=np.concatenate(visited_scores) if visited else np.empty(0, np.float32),
        )
