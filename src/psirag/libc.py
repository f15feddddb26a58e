"""The C library through ctypes, loaded once (Linux only): the calls psirag makes that
Python's standard library does not wrap (``malloc_trim``, ``madvise`` on any address,
``mincore``, ``prctl``). Each user types the functions it calls."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

__all__ = ["libc"]


@cache
def libc() -> Any:
    """The C library (``errno`` kept for :func:`ctypes.get_errno`); None where there is none
    to call (not Linux, or it cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
