"""``bm25``: the index's sparse keyword list."""

from __future__ import annotations

from psirag.retrieval.dense import Ranked
from psirag.retrieval.lists import ListContext, ListRequest, register_list


class BM25List:
    def __init__(self, context: ListContext) -> None:
        self.sparse = context.data.sparse

    def rank(self, request: ListRequest) -> Ranked:
        return self.sparse.search(request.query, k=request.k, allowed_leaves=request.leaves)


register_list("bm25", BM25List, "BM25 over the leaf texts")
