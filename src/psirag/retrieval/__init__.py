"""Retrievers: top-down tree search, BM25, fusion, and the optional cross-encoder reranker."""

from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.tree_search import TreeHits, TreeSearcher

__all__ = ["SparseIndex", "TreeHits", "TreeSearcher", "rrf_fuse"]
