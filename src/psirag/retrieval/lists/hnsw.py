"""``hnsw``: approximate cosine over the leaf vectors through an HNSW graph (usearch,
``psirag[hnsw]``; :mod:`psirag.retrieval.leaf_graph`).

An index built or updated with usearch installed carries its graph (saved in the generation,
opened memory-mapped): the list searches it and writes nothing. An index without one (built
without usearch, or too small to get one) gets a graph built in memory on first use, never
saved: a search does not write into an index folder. The search breadth ``ef`` is
``SearchConfig.beam`` (at least ``candidates``), as the beam is the tree's. The graph's
candidates are rescored exactly from the float32 leaf vectors. A document filter ranks the
allowed leaves exactly (the ``dense`` list).
"""

from __future__ import annotations

import logging

import numpy as np

from psirag.retrieval.dense import Ranked
from psirag.retrieval.leaf_graph import LeafGraph
from psirag.retrieval.lists import ListContext, ListRequest, register_list
from psirag.retrieval.ranking import first_copies

log = logging.getLogger("psirag")


class GraphRanker:
    """Top-k leaves by cosine from a leaf graph, one leaf per distinct text (its first copy),
    best first (ties by leaf id), with exact scores."""

    def __init__(self, graph: LeafGraph, leaf_vectors: np.ndarray, text_of: np.ndarray) -> None:
        self.graph = graph
        self.vectors = leaf_vectors
        self.text_of = np.asarray(text_of, dtype=np.int64)
        self.copies = int(self.text_of.size - np.count_nonzero(first_copies(self.text_of)))
        """Leaves whose text an earlier leaf already has: a search asks for that many more
        (at most k more) so that k distinct texts remain."""

    def rank(self, vector: np.ndarray, k: int, ef: int) -> Ranked:
        query = np.asarray(vector, dtype=np.float32).ravel()
        leaves = self.graph.search(query, k + min(k, self.copies), ef)
        leaves = self.text_of[leaves] if self.copies else leaves
        leaves = np.unique(leaves)
        scores = np.asarray(self.vectors[leaves], dtype=np.float32) @ query
        order = np.lexsort((leaves, -scores))[:k]
        return leaves[order].astype(np.int64), scores[order].astype(np.float32)


class HnswList:
    def __init__(self, context: ListContext) -> None:
        self.context = context
        data = context.data
        vectors = data.vector_rows()[: data.n_leaves]
        graph = data.leaf_graph
        if graph is None or graph.n_leaves != data.n_leaves:
            log.info("psirag: building an HNSW graph of %d leaves in memory", data.n_leaves)
            graph = LeafGraph.build(vectors)
        self.ranker = GraphRanker(graph, vectors, data.sparse.first_copy)

    def rank(self, request: ListRequest) -> Ranked:
        if request.leaves is not None:  # inside some documents: exact, as the dense list
            return self.context.candidate_list("dense").rank(request)
        return self.ranker.rank(request.vector, request.k, request.config.beam)


register_list("hnsw", HnswList, "approximate cosine, an HNSW graph over the leaves (psirag[hnsw])")
