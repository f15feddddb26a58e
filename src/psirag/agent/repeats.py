"""Telling a repeated search from a new one (issue 16, item 3).

A small model often asks again for what it already searched (after a nudge or a check), or for
the user's question itself; the retriever would return the same passages and a retrieval would be
spent for nothing. Two queries are the same search when their normalised texts are equal (case,
punctuation and spacing folded) or when their content words overlap by at least
:data:`REPEAT_OVERLAP` (Jaccard over the word sets, small function words left out). 0.8 holds
rewordings such as "When was X born?" / "What year was X born?" apart only when they add a
word of substance: a query that brings a new name, date or relation is a new search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REPEAT_OVERLAP = 0.8
"""Jaccard overlap of content words at or above which a query repeats an earlier one."""

_WORD = re.compile(r"\w+", re.UNICODE)
_FUNCTION_WORDS_TEXT = (
    "a an the of in on at to for by with from and or is are was were be been did do does "
    "what which who whom whose when where why how that this these those it its as"
)
_FUNCTION_WORDS = frozenset(_FUNCTION_WORDS_TEXT.split())


def normalise_query(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _FUNCTION_WORDS)


def repeats(query: str, earlier: Iterable[str], overlap: float = REPEAT_OVERLAP) -> str | None:
    """The earlier query that ``query`` repeats, or None when it is a new search."""
    norm = normalise_query(query)
    words = content_words(query)
    for old in earlier:
        if normalise_query(old) == norm:
            return old
        other = content_words(old)
        union = words | other
        if union and len(words & other) / len(union) >= overlap:
            return old
    return None


__all__ = ["REPEAT_OVERLAP", "content_words", "normalise_query", "repeats"]
