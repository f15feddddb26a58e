"""psirag: Ψ-RAG hierarchical abstract tree indexes for retrieval-augmented generation.

Typical use::

    from psirag import Index
    index = Index.build(["docs/"])          # chunk, embed, tree, abstracts, BM25
    index.save("my-index")
    index = Index.load("my-index")
    for passage in index.search("what does the tree do?", k=5):
        print(passage.score, passage.source.document, passage.text)

The names below load on first use (PEP 562), so ``import psirag.cli`` or a submodule costs
only what that module needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from psirag._version import __version__
from psirag.lazy import lazy_exports

if TYPE_CHECKING:
    from psirag.config import IndexConfig, SearchConfig
    from psirag.errors import PsiragError
    from psirag.index import Index, NodeHit
    from psirag.index_data import IndexData
    from psirag.retrieval.retriever import Retriever
    from psirag.tree import Tree, build_tree
    from psirag.types import Chunk, Passage, Source

_WHERE = {
    "IndexConfig": "config",
    "SearchConfig": "config",
    "PsiragError": "errors",
    "Index": "index",
    "NodeHit": "index",
    "IndexData": "index_data",
    "Retriever": "retrieval.retriever",
    "Tree": "tree",
    "build_tree": "tree",
    "Chunk": "types",
    "Passage": "types",
    "Source": "types",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())


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
