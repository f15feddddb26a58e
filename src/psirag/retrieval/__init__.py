"""Retrievers: top-down tree search, BM25, dense flat, fusion, the optional cross-encoder
reranker, and the Retriever that composes them over one IndexData. The candidate lists a search
fuses are registered by name in :mod:`psirag.retrieval.lists`."""

from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.dense import DenseFlat
from psirag.retrieval.fusion import rerank_union, rrf_fuse
from psirag.retrieval.ranking import top_k
from psirag.retrieval.retriever import NodeHit, Retriever
from psirag.retrieval.tree_search import TreeHits, TreeSearcher

__all__ = [
    "DenseFlat",
    "NodeHit",
    "Retriever",
    "SparseIndex",
    "TreeHits",
    "TreeSearcher",
    "rerank_union",
    "rrf_fuse",
    "top_k",
]
