"""Fusing candidate lists: reciprocal rank fusion with SPEC 2.3's deterministic tie-break, RRF
with a boost for a decisive keyword hit, a convex combination of normalised scores, or a
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


def decisive_top(scores: Sequence[float], ratio: float) -> bool:
    """Whether a list's top score stands far above the rest: at least ``ratio`` times the
    second (a list of one positive score is decisive)."""
    if len(scores) == 0 or float(scores[0]) <= 0:
        return False
    if len(scores) == 1:
        return True
    return float(scores[0]) >= ratio * max(float(scores[1]), 0.0)


def boosted_rrf(
    ranked_lists: Sequence[Sequence[int]],
    list_scores: Sequence[Sequence[float]],
    boosted: Sequence[bool],
    *,
    k: int,
    rrf_k: int = 60,
    ratio: float = 2.0,
) -> list[tuple[int, float]]:
    """RRF, except that the top item of a ``boosted`` list (BM25) whose top score is decisive
    (:func:`decisive_top`) goes first: an exact keyword hit that the other lists miss is
    no longer outvoted by them. Its score is then the best RRF score plus one ``1/rrf_k``."""
    order = rrf_fuse(ranked_lists, k=sum(len(ids) for ids in ranked_lists), rrf_k=rrf_k)
    lead: list[int] = []
    for ids, scores, on in zip(ranked_lists, list_scores, boosted, strict=True):
        if on and len(ids) and decisive_top(scores, ratio) and int(ids[0]) not in lead:
            lead.append(int(ids[0]))
    if not lead or not order:
        return order[:k]
    top = order[0][1] + 1.0 / rrf_k
    rest = [(i, s) for i, s in order if i not in lead]
    return [(i, top) for i in lead] + rest[: max(k - len(lead), 0)]


def convex_fuse(
    ranked_lists: Sequence[Sequence[int]],
    list_scores: Sequence[Sequence[float]],
    weights: Sequence[float],
    *,
    k: int,
) -> list[tuple[int, float]]:
    """``sum weight * normalised score`` over the lists, each list's scores min-max scaled to
    [0, 1] over its own candidates (an item a list does not hold gets 0 from it); ties by the
    better single rank, then by id."""
    total: dict[int, float] = {}
    best_rank: dict[int, int] = {}
    for ids, scores, weight in zip(ranked_lists, list_scores, weights, strict=True):
        s = np.asarray(scores, dtype=np.float64)
        if s.size == 0:
            continue
        low, high = float(s.min()), float(s.max())
        norm = (s - low) / (high - low) if high > low else np.ones_like(s)
        for rank, (item, value) in enumerate(zip(ids, norm.tolist(), strict=True), start=1):
            item = int(item)
            total[item] = total.get(item, 0.0) + weight * value
            best_rank[item] = min(best_rank.get(item, rank), rank)
    order = sorted(total, key=lambda i: (-total[i], best_rank[i], i))
    return [(i, total[i]) for i in order[:k]]


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


__all__ = [
    "Reranker",
    "boosted_rrf",
    "convex_fuse",
    "decisive_top",
    "rerank_union",
    "rrf_fuse",
]
