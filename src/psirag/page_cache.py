"""Which pages of a file are in the page cache (``mincore(2)``), without reading them.

Why: the server's warm-up (:mod:`psirag.server.read_ahead`) reads the served index's files
into the page cache, and a warm start (the files already cached) should read nothing again.
Linux only, through libc with ctypes; elsewhere :func:`resident_pages` answers None and a
caller reads everything.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

import numpy as np

from psirag.libc import libc as shared_libc

PROT_READ = 1
MAP_SHARED = 1


def _load_libc() -> Any:
    """libc with ``mmap``, ``munmap`` and ``mincore`` typed for ctypes; None where there is none
    (not Linux, or the library cannot be loaded)."""
    libc = shared_libc()
    if libc is None:
        return None
    try:
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int64,
        ]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.restype = ctypes.c_int
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


_libc: list[Any] = []
"""The loaded libc (:func:`_load_libc`), once; None in it: none."""


def _mincore() -> Any:
    if not _libc:
        _libc.append(_load_libc())
    return _libc[0]


def mincore_available() -> bool:
    """Whether :func:`resident_pages` can tell (libc's ``mincore`` is there)."""
    return _mincore() is not None


def mapped_page_resident(address: int) -> bool | None:
    """Whether the page of this process's mapped memory holding ``address`` is resident
    (``mincore``; a file mapping's page is resident when it is in the page cache); None where
    it cannot be told."""
    libc = _mincore()
    if libc is None:
        return None
    page = mmap.PAGESIZE
    got = ctypes.c_ubyte(0)
    if libc.mincore(address - address % page, page, ctypes.byref(got)) != 0:
        return None
    return bool(got.value & 1)


def resident_pages(fd: int, offset: int, length: int) -> np.ndarray | None:
    """Per page of the open file ``fd`` from the page holding ``offset`` to the one holding
    ``offset + length - 1``, whether it is in the page cache (``mincore`` over a read-only
    mapping of that span, unmapped at once; no page is read); None where it cannot be told.
    The kernel answers for the page cache only for files this process owns or may write;
    for others it says "not resident" and the pages are read, as without the check."""
    libc = _mincore()
    if libc is None or length <= 0:
        return None
    page = mmap.PAGESIZE
    start = offset - offset % page
    span = offset + length - start
    address = libc.mmap(None, span, PROT_READ, MAP_SHARED, fd, start)
    if address is None or address == ctypes.c_void_p(-1).value:
        return None
    try:
        pages = np.zeros((span + page - 1) // page, dtype=np.uint8)
        if libc.mincore(address, span, pages.ctypes.data) != 0:
            return None
    finally:
        libc.munmap(address, span)
    return (pages & 1).astype(bool)


def missing_ranges(resident: np.ndarray, start: int, end: int, merge: int) -> list[tuple[int, int]]:
    """The byte ranges of ``[start, end)`` (``start`` page-aligned; ``resident`` per page from
    it) whose pages are not resident, runs closer than ``merge`` bytes joined into one (a few
    cached pages read again cost less than a call each)."""
    page = mmap.PAGESIZE
    missing = np.concatenate(([False], ~resident, [False]))
    edges = np.flatnonzero(missing[1:] != missing[:-1])
    out: list[tuple[int, int]] = []
    for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        lo, hi = start + a * page, min(end, start + b * page)
        if lo >= hi:
            continue
        if out and lo - out[-1][1] < merge:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


__all__ = ["mapped_page_resident", "mincore_available", "missing_ranges", "resident_pages"]
