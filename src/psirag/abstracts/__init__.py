"""Abstract texts of the tree's inner nodes (SPEC 1.6): LLM-free keyword phrases."""

from psirag.abstracts.keywords import format_abstract, keyword_abstracts

__all__ = ["format_abstract", "keyword_abstracts"]
