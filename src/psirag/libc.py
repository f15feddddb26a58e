"""The C library through ctypes, loaded once (Linux only): the calls psirag makes that
Python's standard library does not wrap (``malloc_trim``, ``madvise`` on any address,
``mincore``, ``prctl``). Each user types the functions it calls."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from functools import cache
from typing import Any

__all__ = ["libc", "madvise"]


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


@cache
def madvise() -> Callable[[int, int, int], int] | None:
    """``madvise(addr, length, advice)`` typed, on any address (Python's ``mmap.madvise`` takes
    only its own map's); None where the C library or the call is missing."""
    lib = libc()
    if lib is None:
        return None
    try:
        advise = lib.madvise
    except AttributeError:
        return None
    advise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advise.restype = ctypes.c_int
    return advise
