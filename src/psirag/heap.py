"""Giving freed memory back to the operating system between the steps of a big build, and
asking it for huge pages where a build's memory is read at random.

A build makes and frees many large numpy temporaries. glibc's malloc raises its mmap threshold
each time such a block is freed, so later temporaries come from the heap, and the heap keeps
their pages once they are freed: the resident size of a 1M-chunk build grew by GiBs of memory
that no array held. ``malloc_trim`` hands those free pages back. Elsewhere (macOS, musl,
Windows) this does nothing.

An HNSW graph's insertion reads its nodes at random over hundreds of MiB, so with 4 KiB pages
most reads also miss the TLB. Where transparent huge pages are on only for memory that asks
(``madvise``, a common default), :func:`ask_for_huge_pages` asks for the anonymous memory a
native library has mapped (numpy asks for its own large arrays).
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import tempfile
import weakref
from collections.abc import Callable
from functools import cache

import numpy as np

from psirag.libc import libc, madvise

__all__ = ["ask_for_huge_pages", "give_back_freed_memory", "mapped_copy", "page_out_spilled"]


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    lib = libc()
    if lib is None:
        return None
    try:
        trim = lib.malloc_trim
    except AttributeError:  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the operating system (glibc); a no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


MADV_HUGEPAGE = 14
"""Linux's ``madvise`` advice for transparent huge pages."""
HUGE_PAGE_MIN_BYTES = 2 << 20
"""Regions smaller than one huge page cannot hold one."""


def _anonymous_regions(maps: str, min_bytes: int) -> list[tuple[int, int]]:
    """The writable private anonymous regions (and the heap) of ``/proc/<pid>/maps`` text
    that are at least ``min_bytes`` long, as (start, end) addresses."""
    out = []
    for line in maps.splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[1].startswith("rw") or parts[1][3] != "p":
            continue
        if len(parts) > 5 and parts[5] != "[heap]":  # a file, the stack, vdso...
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if hi - lo >= min_bytes:
            out.append((lo, hi))
    return out


def ask_for_huge_pages(min_bytes: int = HUGE_PAGE_MIN_BYTES) -> int:
    """Ask for transparent huge pages on this process's anonymous memory (regions of at least
    ``min_bytes``); the bytes asked for. Pages already there are merged by the kernel in the
    background, new ones come huge. Asking again is harmless, so a long native loop asks
    after each step for the regions it has mapped since. 0 where the system cannot
    (not Linux, no transparent huge pages: nothing changes)."""
    advise = madvise()
    if advise is None:
        return 0
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return 0
    asked = 0
    for lo, hi in _anonymous_regions(maps, min_bytes):
        if advise(lo, hi - lo, MADV_HUGEPAGE) == 0:
            asked += hi - lo
    return asked


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
    start = int(mapped.ctypes.data)
    _SPILLED[start] = int(mapped.nbytes)
    weakref.finalize(mapped, _SPILLED.pop, start, None)
    return mapped


_SPILLED: dict[int, int] = {}
"""The start address and length of each live map :func:`mapped_copy` made."""

MADV_PAGEOUT = 21
"""Linux's ``madvise`` advice to reclaim pages now (5.4 and later; an error elsewhere)."""


def page_out_spilled(a: np.ndarray) -> bool:
    """Ask the kernel to take ``a``'s pages out of this process's memory now, when ``a`` lies
    in a map :func:`mapped_copy` made (``MADV_PAGEOUT``): what a save calls on the spilled
    arrays it has just written, so that reading them all for a big build's save does not hold
    them all in memory (about 3 GiB of a 1M-chunk build's, counted in its resident size while
    mapped). The values are unchanged: a later read pages them in again from the unlinked
    file, and a page this process wrote stays. Whether it was asked (False: not spilled, or
    the system cannot)."""
    if not _SPILLED or a.size == 0 or not a.flags.c_contiguous:
        return False
    lo = int(a.ctypes.data)
    hi = lo + int(a.nbytes)
    if not any(start <= lo and hi <= start + n for start, n in list(_SPILLED.items())):
        return False
    advise = madvise()
    if advise is None:
        return False
    # (a page shared with a neighbour in the same map is paged in again when read)
    first = lo - lo % mmap.PAGESIZE
    return advise(first, hi - first, MADV_PAGEOUT) == 0


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
