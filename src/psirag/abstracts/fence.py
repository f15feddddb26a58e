"""Binary search over a large sorted key array that reads only the pages it needs, all of
them asked for at once (issue 24: the first add sent right after a cold start at 1M chunks).

``np.searchsorted`` over a memory-mapped array of tens of millions of keys makes ~26 probes per
key, each a page of the file: a batch of ~1,000 keys touches ~30,000 distinct pages, one page
fault after the other, each of which reads the device's read-ahead window around it when the
file is not in the page cache (1-1.4 s at 1M chunks). A *fence* (every :data:`FENCE_STEP`-th key
of the sorted array, ~1 MB at 1M chunks, read whole) says which block of the array each key
falls in before the array is read: the blocks a batch needs are asked for with one
``madvise(MADV_WILLNEED)`` per block run (the kernel reads them in parallel), then gathered and
searched in memory. Warm, the advice costs a system call per block run.

The fence is saved data: each block read is checked against it (its first key and the next
block's must be the fence's keys), so a fence that does not belong to the array is an
:class:`~psirag.errors.IndexFormatError` naming it, never a wrong position.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from psirag.errors import IndexFormatError
from psirag.libc import madvise
from psirag.page_cache import mapped_page_resident

__all__ = ["FENCE_STEP", "fence_of", "fenced_search", "fetch", "will_need", "will_need_rows"]

FENCE_STEP = 512
"""Keys between two fence keys: 512 int64 keys are one 4 KiB page (two where the block straddles
a page boundary)."""

MAX_BLOCK_SHARE = 8
"""A batch whose blocks would cover more than 1/this of the array is searched the ordinary way
(a build's batches: nearly every page is read anyway, and the gathered blocks would copy it)."""

PAGE = mmap.PAGESIZE

PROBE_RUNS = 8
"""Page runs :func:`will_need` checks (``mincore``) before asking: all resident, it asks for
none (a warm add makes no advice calls)."""

_WILLNEED: int = getattr(mmap, "MADV_WILLNEED", 3)


def fence_of(sorted_keys: Any, step: int | None = None) -> np.ndarray:
    """Every ``step``-th (:data:`FENCE_STEP`) key of ``sorted_keys`` (its first key first), as
    int64."""
    every = FENCE_STEP if step is None else step
    return np.ascontiguousarray(np.asarray(sorted_keys[::every], dtype=np.int64))


def _is_mapped(array: Any) -> bool:
    seen = 0
    while isinstance(array, np.ndarray) and seen < 32:
        array, seen = array.base, seen + 1
    return isinstance(array, mmap.mmap)


def will_need(array: Any, starts: np.ndarray, stops: np.ndarray) -> int:
    """Ask the kernel to read the pages of the rows ``[starts[i], stops[i])`` of ``array`` (1-D,
    contiguous) now, in parallel (``madvise(MADV_WILLNEED)`` per run of adjacent pages); a
    no-op for an array in memory or where ``madvise`` cannot be called. The calls made."""
    advise = madvise()
    a = array
    if advise is None or not isinstance(a, np.ndarray) or a.ndim != 1 or starts.size == 0:
        return 0
    if not a.flags.c_contiguous or not _is_mapped(a):
        return 0
    base = int(a.ctypes.data)
    size = a.itemsize
    lo = (base + np.asarray(starts, dtype=np.int64) * size) // PAGE
    hi = (base + np.maximum(np.asarray(stops, dtype=np.int64), starts + 1) * size - 1) // PAGE + 1
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    # runs of overlapping or adjacent page ranges become one call
    reach = np.maximum.accumulate(hi)
    new_run = np.ones(lo.size, dtype=bool)
    new_run[1:] = lo[1:] > reach[:-1]
    firsts = np.flatnonzero(new_run)
    run_lo = lo[firsts]
    run_hi = np.append(reach[firsts[1:] - 1], reach[-1])
    # warm (a few spread runs' pages all resident, one mincore call each), nothing is asked:
    # a mincore over the whole span walks every page of it (milliseconds for 100 MB)
    probe = np.unique(np.linspace(0, run_lo.size - 1, min(run_lo.size, PROBE_RUNS)).astype(int))
    warm = True
    for p in run_lo[probe].tolist():
        if not mapped_page_resident(p * PAGE):
            warm = False
            break
    if warm:
        return 0
    calls = 0
    for p, q in zip(run_lo.tolist(), run_hi.tolist(), strict=True):
        advise(p * PAGE, (q - p) * PAGE, _WILLNEED)
        calls += 1
    return calls


def will_need_rows(entries: Any, starts: np.ndarray, stops: np.ndarray) -> None:
    """:func:`will_need` of the rows ``[starts[i], stops[i])`` of ``entries``: an array, or
    pieces read as one (``pieces``, and ``starts``: where each begins), each piece asked for
    the rows it holds."""
    starts = np.asarray(starts, dtype=np.int64)
    stops = np.asarray(stops, dtype=np.int64)
    if starts.size == 0:
        return
    if isinstance(entries, np.ndarray):
        will_need(entries, starts, stops)
        return
    pieces, at = getattr(entries, "pieces", None), getattr(entries, "starts", None)
    if pieces is None or at is None:
        return
    for piece, lo in zip(pieces, np.asarray(at)[:-1].tolist(), strict=False):
        hi = lo + int(piece.shape[0])
        inside = (stops > lo) & (starts < hi)
        if bool(inside.any()):
            will_need(
                piece,
                np.maximum(starts[inside], lo) - lo,
                np.minimum(stops[inside], hi) - lo,
            )


def fetch(array: Any, at: np.ndarray) -> np.ndarray:
    """``array[at]``, the pages of a memory-mapped ``array`` that holds them asked for at once
    first (see :func:`will_need`)."""
    at = np.asarray(at, dtype=np.int64)
    if at.size:
        will_need(array, at, at + 1)
    return np.asarray(array)[at]


def fenced_search(sorted_keys: Any, fence: np.ndarray, keys: np.ndarray, what: str) -> np.ndarray:
    """``np.searchsorted(sorted_keys, keys)`` (left side) for a sorted ``sorted_keys`` whose
    :func:`fence_of` is ``fence``, reading only the blocks of it the keys fall in, asked for at
    once. ``what`` names the arrays in the error a fence that is not ``sorted_keys``'s gives."""
    keys = np.asarray(keys, dtype=np.int64)
    n = int(sorted_keys.shape[0])
    step = FENCE_STEP
    if fence.shape != ((n + step - 1) // step,):
        raise IndexFormatError(f"the saved {what} fence has {fence.shape[0]} keys for {n} rows")
    out = np.zeros(keys.size, dtype=np.int64)
    if n == 0 or keys.size == 0:
        return out
    j = np.searchsorted(fence, keys)  # fence[j - 1] < key <= fence[j]
    has = np.flatnonzero(j > 0)
    b = j[has] - 1  # the block each key is in (keys with j == 0 are at 0)
    blocks = np.unique(b)
    if blocks.size * step * MAX_BLOCK_SHARE > n:
        return np.asarray(np.searchsorted(sorted_keys, keys), dtype=np.int64)
    first = blocks * step
    last = np.minimum(first + step, n - 1)  # the next block's first key (or the last key)
    will_need(sorted_keys, first, last + 1)
    sorted_keys = np.asarray(sorted_keys)  # (a memory map's own indexing is slower)
    if bool(np.any(j == 0)) and int(sorted_keys[0]) != int(fence[0]):  # such keys are at 0
        raise IndexFormatError(f"the saved {what} fence does not match its keys")
    # each block read is the fence's: its first key, and the next block's first key
    nxt = blocks + 1
    inside = nxt < fence.size
    if not (
        np.array_equal(np.asarray(sorted_keys[first], dtype=np.int64), fence[blocks])
        and np.array_equal(
            np.asarray(sorted_keys[nxt[inside] * step], dtype=np.int64), fence[nxt[inside]]
        )
    ):
        raise IndexFormatError(f"the saved {what} fence does not match its keys")
    # a binary search in every key's block at once: sorted_keys[lo] < key <= sorted_keys[hi]
    # (hi: the next block's first key, or n past the last)
    k = keys[has]
    lo = b * step
    hi = np.minimum(lo + step, n)
    while True:
        open_ = hi - lo > 1
        if not bool(open_.any()):
            break
        mid = (lo + hi) // 2
        below = np.zeros(k.size, dtype=bool)
        at = np.flatnonzero(open_)
        below[at] = np.asarray(sorted_keys[mid[at]], dtype=np.int64) < k[at]
        lo = np.where(open_ & below, mid, lo)
        hi = np.where(open_ & ~below, mid, hi)
    out[has] = hi
    return out
