"""``tree``: Algorithm 2's top-down beam search, or what ranks leaves better in its place: an
exact scan where that costs no more, and past that size the index's HNSW graph when it has one
(BENCHMARKS.md, "Tree against HNSW as a nearest-leaf index": at equal latency the graph's recall
is higher at every beam). ``exact_dense_leaves=0`` (the ``tree`` and ``paper`` profiles) keeps
the tree search at every size."""

from __future__ import annotations

import numpy as np

from psirag.retrieval.dense import Ranked
from psirag.retrieval.lists import CandidateList, ListContext, ListRequest, register_list
from psirag.retrieval.tree_search import TreeSearcher


def exact_in_tree_place(n_leaves: int, leaves: np.ndarray | None, exact_dense_leaves: int) -> bool:
    """Whether the tree's list is ranked by a flat scan: when no more leaves are searched
    (``leaves``: the allowed mask, None for all) than ``exact_dense_leaves``."""
    searched = n_leaves if leaves is None else int(np.count_nonzero(leaves))
    return searched <= exact_dense_leaves


class TreeList:
    def __init__(self, context: ListContext) -> None:
        self.context = context
        data = context.data
        self.n_leaves = data.n_leaves
        self.has_graph = data.leaf_graph is not None
        self.searcher = TreeSearcher(data.tree, data.vector_rows())

    @property
    def stand_in(self) -> CandidateList:
        """The exact list that ranks in the tree's place on small indexes (SearchConfig
        ``exact_dense_leaves``)."""
        return self.context.candidate_list("dense")

    def rank(self, request: ListRequest) -> Ranked:
        limit = request.config.exact_dense_leaves
        if exact_in_tree_place(self.n_leaves, request.leaves, limit):
            return self.stand_in.rank(request)
        if self.has_graph and limit > 0 and request.leaves is None:
            return self.context.candidate_list("hnsw").rank(request)
        hits = self.searcher.search(
            request.vector, k=request.k, beam=request.config.beam, allowed=request.nodes
        )
        return hits.leaves, hits.scores


register_list(
    "tree",
    TreeList,
    "top-down beam search over the tree (exact scan when small, the HNSW graph when large)",
)
