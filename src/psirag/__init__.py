"""psirag: Ψ-RAG hierarchical abstract tree indexes for retrieval-augmented generation.

Typical use::

    from psirag import Index
    index = Index.build(["docs/"])          # chunk, embed, tree, abstracts, BM25
    index.save("my-index")
    index = Index.load("my-index")
    for passage in index.search("what does the tree do?", k=5):
        print(passage.score, passage.source.document, passage.text)
"""

from __future__ import annotations

from psirag._version import __version__
from psirag.config import IndexConfig, SearchConfig
from psirag.errors import PsiragError
from psirag.index import Index, NodeHit
from psirag.index_data import IndexData
from psirag.retrieval.retriever import Retriever
from psirag.tree import Tree, build_tree
from psirag.types import Chunk, Passage, Source

__all__ = [
    "Chunk",
    "Index",
    "IndexConfig",
    "IndexData",
    "NodeHit",
    "Passage",
    "PsiragError",
    "Retriever",
    "SearchConfig",
    "Source",
    "Tree",
    "__version__",
    "build_tree",
]
