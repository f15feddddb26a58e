"""Document ids: one Unicode form (NFC), and lists of them that stay short in messages.

Why NFC: the same name typed on two systems can arrive composed (``é``, U+00E9) or decomposed
(``e`` + U+0301; macOS file names); BM25 tokens and document ids compared them as different
strings. Ids are stored in NFC and looked up by their NFC form (an index written before keeps
its ids and is still found). Why short: an error about 20,000 unknown ids used to list them
all (a 189 KB body); it lists the first :data:`SHOWN` and says how many more.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence

SHOWN = 10
"""Ids quoted in a message before "and N more"."""


def nfc(text: str) -> str:
    """``text`` in Unicode normal form C (returned as is when it already is)."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def match(given: Iterable[str], known: Sequence[str]) -> tuple[list[str], list[str]]:
    """The stored ids ``given`` names (compared in NFC, order kept, repeats dropped) and the
    given ids no stored id matches."""
    by_form = {nfc(k): k for k in known}
    found: list[str] = []
    missing: list[str] = []
    for raw in given:
        stored = by_form.get(nfc(str(raw)))
        if stored is None:
            missing.append(str(raw))
        elif stored not in found:
            found.append(stored)
    return found, missing


def some(ids: Sequence[str], shown: int = SHOWN) -> str:
    """``ids`` for a message: the first ``shown`` quoted, then "and N more"."""
    head = ", ".join(repr(i) for i in ids[:shown])
    rest = len(ids) - shown
    return f"{head} and {rest:,} more" if rest > 0 else head


__all__ = ["SHOWN", "match", "nfc", "some"]
