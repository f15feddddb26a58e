"""Abstract texts of the tree's inner nodes (SPEC 1.6): LLM-free keyword phrases.

Names load on first use (PEP 562): loading an index reads the names of the phrase table's
arrays (:mod:`psirag.abstracts.phrase_names`) without importing the keyword code and scipy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from psirag.lazy import lazy_exports

if TYPE_CHECKING:
    from psirag.abstracts.keywords import format_abstract, keyword_abstracts

_WHERE = {"format_abstract": "keywords", "keyword_abstracts": "keywords"}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE, globals())

__all__ = ["format_abstract", "keyword_abstracts"]
