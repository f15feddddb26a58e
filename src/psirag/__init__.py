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

import importlib
from typing import TYPE_CHECKING, Any

from psirag._version import __version__

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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


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
