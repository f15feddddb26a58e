"""Exact words for an index's ``format_version``: a whole number from 1 up, nothing else.

Why: version 0 used to be called "newer", the string ``"2"`` got "this psirag reads formats 1, 2"
and JSON ``true`` was read as format 1 (``True == 1`` in Python), after which ``index --out``
wrote over the folder. A version that is not a whole number of at least 1 is no format psirag
ever wrote: the folder is refused, for reading and for writing.
"""

from __future__ import annotations

import json
from typing import Literal

Kind = Literal["ok", "newer", "invalid"]


def classify(version: object, readable: tuple[int, ...]) -> Kind:
    """``ok`` (a version in ``readable``), ``newer`` (a whole number above them) or
    ``invalid`` (not a whole number, a boolean, or below 1; or a gap between readable ones)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return "invalid"
    if version in readable:
        return "ok"
    return "newer" if version > max(readable) else "invalid"


def problem(version: object, readable: tuple[int, ...]) -> str:
    """What is wrong with ``version``, in words (for a version :func:`classify` refuses)."""
    shown = json.dumps(version)
    names = list(map(str, readable))
    formats = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    if classify(version, readable) == "newer":
        return f"it is in index format {version}, newer than this psirag reads (formats {formats})"
    if isinstance(version, bool) or not isinstance(version, int):
        return f"its manifest.json gives format_version {shown}, which is not a whole number"
    return f"its manifest.json gives format_version {shown}; psirag index formats are {formats}"


def advice(version: object, readable: tuple[int, ...]) -> str:
    """What to do about it."""
    if classify(version, readable) == "newer":
        return "upgrade psirag, or rebuild the index with this version"
    return "the manifest is corrupted or was not written by psirag: rebuild the index"


__all__ = ["advice", "classify", "problem"]
