"""Giving freed memory back to the operating system between the steps of a big build.

A build makes and frees many large numpy temporaries. glibc's malloc raises its mmap threshold
each time such a block is freed, so later temporaries come from the heap, and the heap keeps
their pages once they are freed: the resident size of a 1M-chunk build grew by GiBs of memory
that no array held. ``malloc_trim`` hands those free pages back. Elsewhere (macOS, musl,
Windows) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable
from functools import cache

__all__ = ["give_back_freed_memory"]


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the operating system (glibc); a no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
