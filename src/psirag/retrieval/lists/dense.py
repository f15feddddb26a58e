"""``dense``: exact flat cosine over the leaf embeddings."""

from __future__ import annotations

from psirag.retrieval.dense import DenseFlat, Ranked
from psirag.retrieval.lists import ListContext, ListRequest, register_list


class DenseList(DenseFlat):
    def __init__(self, context: ListContext) -> None:
        data = context.data
        super().__init__(data.vector_rows()[: data.n_leaves], data.sparse.first_copy)

    def rank(self, request: ListRequest) -> Ranked:
        return self.ranked(request.vector, request.k, request.leaves)


register_list("dense", DenseList, "exact flat cosine over every leaf embedding")
