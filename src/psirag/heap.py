"""Giving freed memory back to the operating system between the steps of a big build.

A build makes and frees many large numpy temporaries. glibc's malloc raises its mmap threshold
each time such a block is freed, so later temporaries come from the heap, and the heap keeps
their pages once they are freed: the resident size of a 1M-chunk build grew by GiBs of memory
that no array held. ``malloc_trim`` hands those free pages back. Elsewhere (macOS, musl,
Windows) this does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import tempfile
from collections.abc import Callable
from functools import cache

import numpy as np

__all__ = ["give_back_freed_memory", "mapped_copy"]


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


def mapped_copy(a: np.ndarray) -> np.ndarray:
    """``a``'s values in an unlinked temporary file, mapped copy-on-write (writable; written
    pages become this process's own): memory the kernel can page out while it is not read."""
    if a.size == 0:
        return a
    try:
        fd, path = tempfile.mkstemp(prefix="psirag-build-", suffix=".bin")
    except OSError:
        return a  # no temporary folder to write: keep it in memory
    try:
        with os.fdopen(fd, "wb") as f:
            np.ascontiguousarray(a).tofile(f)
        mapped = np.memmap(path, dtype=a.dtype, mode="c", shape=a.shape)
    except OSError:
        _unlink_quietly(path)
        return a  # the temporary folder is full: keep it in memory
    try:
        os.unlink(path)  # the mapping keeps the data until it is let go
    except OSError:  # a system that cannot unlink a mapped file: keep it in memory
        del mapped
        _unlink_quietly(path)
        return a
    return mapped


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
