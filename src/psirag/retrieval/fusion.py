"""Fusing candidate lists: reciprocal rank fusion with SPEC 2.3's deterministic tie-break, or a
reranker scoring their union."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np


class Reranker(Protocol):
    """Scores (query, text) pairs jointly; :class:`psirag.retrieval.rerank.CrossEncoderReranker`
    is one."""

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


def rrf_fuse(
    ranked_lists: Sequence[Sequence[int]], *, k: int, rrf_k: int = 60
) -> list[tuple[int, float]]:
    """Fuse ranked id lists: score ``sum 1 / (rrf_k + rank)``, rank from 1.

    Ties are broken by the better single rank, then by the rank in the first list (the tree
    list), then by id. Returns the top ``k`` ``(id, score)`` pairs.
    """
    score: dict[int, float] = {}
    best_rank: dict[int, int] = {}
    first_rank: dict[int, int] = {}
    for list_no, ids in enumerate(ranked_lists):
        for rank, item in enumerate(ids, start=1):
            item = int(item)
            score[item] = score.get(item, 0.0) + 1.0 / (rrf_k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
            if list_no == 0:
                first_rank[item] = rank
    big = np.iinfo(np.int64).max
    order = sorted(score, key=lambda i: (-score[i], best_rank[i], first_rank.get(i, big), i))
    return [(i, score[i]) for i in order[:k]]


def rerank_union(
    query: str,
    ranked_lists: Sequence[Sequence[int]],
    text_of: Callable[[int], str],
    reranker: Reranker,
    *,
    k: int,
) -> list[tuple[int, float]]:
    """The top ``k`` of the lists' union (first appearance order) by the reranker's score, ties
    by id: what ``fusion='rerank'`` returns in place of RRF."""
    union = list(dict.fromkeys(int(i) for ids in ranked_lists for i in ids))
    if not union:
        return []
    scores = reranker.score(query, [text_of(i) for i in union])
    order = sorted(range(len(union)), key=lambda j: (-float(scores[j]), union[j]))
    return [(union[j], float(scores[j])) for j in order[:k]]


__all__ = ["Reranker", "rerank_union", "rrf_fuse"]
