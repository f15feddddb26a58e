"""Vectors of an index's nodes as several arrays read as one, so that an update costs what it
changes (issue 24, "a living index at scale").

Why: node ``u < n`` is leaf ``u`` and inner nodes come after the leaves, so appending leaves moves
every inner node's row. One ``(n_nodes, dim)`` array had to be allocated and filled again by
every update: 0.3-0.45 s and 512 MB at a million leaves, for an add of a few rows. A
:class:`RowStack` keeps the parts apart (the loaded leaves' memory map, the appended leaves, the
inner nodes' rows) and answers what the readers ask of a node-vector array: a row, a slice of
rows, rows by index (``stack[idx]``, ``np.take(stack, idx, axis=0)``), its shape and dtype. It
gives the very same floats as the joined array would. ``np.asarray(stack)`` joins the parts (a
full copy): what no search and no update does.

Appended leaves go to a buffer with spare rows (:func:`appended`): the value that holds the
buffer's last written row appends in place; any other (an older value updated again) copies
its rows to a new buffer, so that a row a value can read is never written again."""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

_MIN_SPARE = 4096
"""Rows of the smallest appended-leaves buffer."""

_LOCK = threading.Lock()
_USED: dict[int, int] = {}
"""Per live buffer (by ``id``), how many of its rows a value holds (the next append writes
there)."""


class RowStack:
    """The rows of ``parts`` (2-d arrays of one width and dtype) one after the other, read as
    one array without joining them."""

    ndim = 2

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts:
            raise ValueError("a row stack needs at least one part")
        width, dtype = parts[0].shape[1:], parts[0].dtype
        for p in parts:
            if p.ndim != 2 or p.shape[1:] != width or p.dtype != dtype:
                raise ValueError(
                    f"row stack parts differ: {[(q.shape, str(q.dtype)) for q in parts]}"
                )
        self.parts: tuple[np.ndarray, ...] = tuple(parts)
        self._starts = np.cumsum([0] + [int(p.shape[0]) for p in parts], dtype=np.int64)
        self.shape: tuple[int, int] = (int(self._starts[-1]), int(width[0]))
        self.dtype = dtype

    @classmethod
    def of(cls, *parts: np.ndarray | RowStack) -> Any:
        """The rows of ``parts`` as one: the array itself when one part holds them all, else a
        :class:`RowStack` (nested stacks flattened, empty parts left out)."""
        flat = [q for p in parts for q in (p.parts if isinstance(p, RowStack) else (p,))]
        full = [p for p in flat if p.shape[0]]
        if len(full) <= 1:
            return full[0] if full else flat[0]
        return cls(full)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"RowStack({self.shape}, {self.dtype}, parts={[p.shape[0] for p in self.parts]})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.concatenate(self.parts)
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def writeable(self) -> bool:
        return all(isinstance(p, np.ndarray) and p.flags.writeable for p in self.parts)

    def read_only(self) -> RowStack:
        """The same rows, each part a read-only view (a :class:`RowOverlay` is one)."""
        views: list[Any] = []
        for p in self.parts:
            if isinstance(p, np.ndarray):
                p = p.view()
                p.flags.writeable = False
            views.append(p)
        return RowStack(views)

    def copy_rows(self, start: int, out: np.ndarray) -> None:
        """Write rows ``start .. start + len(out)`` into ``out``, part by part (no joined
        temporary)."""
        stop = start + int(out.shape[0])
        if not 0 <= start <= stop <= self.shape[0]:
            raise IndexError(f"rows {start}..{stop} of {self.shape[0]}")
        for k, p in enumerate(self.parts):
            s, e = int(self._starts[k]), int(self._starts[k + 1])
            lo, hi = max(start, s), min(stop, e)
            if lo < hi:
                out[lo - start : hi - start] = p[lo - s : hi - s]

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        n = self.shape[0]
        flat = np.asarray(idx).ravel()
        if flat.dtype == bool:  # each part's own piece of the mask
            if flat.size != n:
                raise IndexError(f"a mask of {flat.size} for {n} rows")
            spans = list(itertools.pairwise(self._starts.tolist()))
            counts = [int(np.count_nonzero(flat[s:e])) for s, e in spans]
            out = np.empty((sum(counts), self.shape[1]), dtype=self.dtype)
            at = 0
            for p, (s, e), c in zip(self.parts, spans, counts, strict=True):
                if isinstance(p, np.ndarray):
                    np.compress(flat[s:e], p, axis=0, out=out[at : at + c])
                else:  # a RowOverlay: its rows by index
                    out[at : at + c] = p[np.flatnonzero(flat[s:e])]
                at += c
            return out
        flat = flat.astype(np.int64, copy=False)
        if flat.size and (int(flat.min()) < -n or int(flat.max()) >= n):
            raise IndexError(f"row index out of range for {n} rows")
        flat = np.where(flat < 0, flat + n, flat)
        out = np.empty((flat.size, self.shape[1]), dtype=self.dtype)
        if flat.size > 1 and bool(np.all(flat[1:] >= flat[:-1])):  # sorted: a range per part
            cuts = np.searchsorted(flat, self._starts).tolist()
            for k, p in enumerate(self.parts):
                a, b = cuts[k], cuts[k + 1]
                if a < b:
                    out[a:b] = p[flat[a:b] - self._starts[k]]
        else:
            part = np.searchsorted(self._starts, flat, side="right") - 1
            for k, p in enumerate(self.parts):
                sel = np.flatnonzero(part == k)
                if sel.size:
                    out[sel] = p[flat[sel] - self._starts[k]]
        return out.reshape(*np.shape(idx), self.shape[1])

    def take(self, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
        if axis != 0 or out is not None or mode != "raise":
            joined: Any = np.asarray(self)
            return joined.take(indices, axis=axis, out=out, mode=mode)
        return self._rows(np.asarray(indices))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if len(key) == 1:
                return self[key[0]]
            head = self[key[0]]
            rest = key[1:]
            return head[rest] if np.ndim(head) == 1 else np.asarray(head)[(slice(None), *rest)]
        if isinstance(key, (int, np.integer)):
            i = int(key)
            n = self.shape[0]
            if not -n <= i < n:
                raise IndexError(f"row {i} of {n}")
            i = i + n if i < 0 else i
            k = int(np.searchsorted(self._starts, i, side="right")) - 1
            return self.parts[k][i - int(self._starts[k])]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self._rows(np.arange(start, stop, step))
            pieces = []
            for k, p in enumerate(self.parts):
                s, e = int(self._starts[k]), int(self._starts[k + 1])
                lo, hi = max(start, s), min(stop, e)
                if lo < hi:
                    pieces.append(p[lo - s : hi - s])
            return RowStack.of(*pieces) if pieces else self.parts[0][:0]
        return self._rows(np.asarray(key))


class RowOverlay:
    """Rows of ``base`` picked by ``index`` (``base[index[i]]``), where ``index[i] < 0`` row
    ``-1 - index[i]`` of ``own`` instead: an update's inner nodes' vectors (issue 24). The
    kept nodes' rows stay where they were loaded (``base``, never written); the new and changed
    nodes' rows are appended to ``own`` (:func:`appended`: a buffer with spare rows), so an
    update copies the rows it changes and an ``int64`` per row, not every vector. Read like a
    2-d array (a row, a slice, rows by index, ``np.take``, ``np.asarray`` joins), and a part
    of a :class:`RowStack`."""

    ndim = 2

    def __init__(self, base: Any, index: np.ndarray, own: Any) -> None:
        if isinstance(base, RowOverlay):
            raise ValueError("a row overlay's base is not an overlay")
        if base.ndim != 2 or own.ndim != 2 or own.shape[1:] != base.shape[1:]:
            raise ValueError(f"row overlay of rows {base.shape} and own rows {own.shape}")
        if own.dtype != base.dtype:
            raise ValueError(f"row overlay of {base.dtype} rows and {own.dtype} own rows")
        self.base, self.own = base, own
        self.index = np.asarray(index, dtype=np.int64)
        if self.index.ndim != 1:
            raise ValueError("a row overlay's index is one row number per row")
        self.index.flags.writeable = False
        self.shape: tuple[int, int] = (int(self.index.size), int(base.shape[1]))
        self.dtype = base.dtype

    @classmethod
    def over(cls, rows: Any) -> RowOverlay:
        """``rows`` (an array, a :class:`RowStack` or an overlay) as an overlay."""
        if isinstance(rows, RowOverlay):
            return rows
        own = np.empty((0, rows.shape[1]), dtype=rows.dtype)
        return cls(rows, np.arange(rows.shape[0], dtype=np.int64), own)

    def moved(self, index: np.ndarray, new_rows: np.ndarray) -> RowOverlay:
        """The rows ``index`` names in this overlay's own numbering (``index[i]``: this row
        ``index[i]``, or ``-1 - k``: row ``k`` of ``new_rows``), as a new overlay over the same
        base: ``new_rows`` appended to the own rows (this overlay's rows unchanged)."""
        index = np.asarray(index, dtype=np.int64)
        n = self.shape[0]
        new_rows = np.asarray(new_rows, dtype=self.dtype).reshape(-1, self.shape[1])
        if index.size and (int(index.max()) >= n or int(index.min()) < -new_rows.shape[0]):
            raise IndexError(f"overlay rows out of range for {n} rows and {new_rows.shape[0]} new")
        start = int(self.own.shape[0])
        own = appended(self.own, new_rows)
        old = index >= 0
        mapped = np.empty(index.size, dtype=np.int64)
        mapped[old] = self.index[index[old]]
        mapped[~old] = -1 - (start + (-1 - index[~old]))
        return RowOverlay(self.base, mapped, own)

    def with_rows(self, rows: np.ndarray, values: np.ndarray) -> RowOverlay:
        """These rows with ``values`` at ``rows`` (a new overlay; this one unchanged)."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        index = np.arange(self.shape[0], dtype=np.int64)
        index[rows] = -1 - np.arange(rows.size, dtype=np.int64)
        return self.moved(index, values)

    @property
    def own_rows(self) -> int:
        """Rows of ``own`` (the changed rows so far, some no longer named)."""
        return int(self.own.shape[0])

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"RowOverlay({self.shape}, {self.dtype}, own={self.own_rows})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._picked(self.index)
        return out if dtype is None else out.astype(dtype, copy=False)

    def _picked(self, m: np.ndarray) -> np.ndarray:
        out = np.empty((m.size, self.shape[1]), dtype=self.dtype)
        mine = m < 0
        if bool(mine.any()):
            b = ~mine
            out[b] = np.take(self.base, m[b], axis=0)
            out[mine] = np.take(self.own, -1 - m[mine], axis=0)
        elif m.size:
            out[:] = np.take(self.base, m, axis=0)
        return out

    def _rows(self, idx: np.ndarray) -> np.ndarray:
        m = self.index[idx]  # an index (or mask) out of range fails here
        return self._picked(np.ravel(m)).reshape(*np.shape(m), self.shape[1])

    def take(self, indices: Any, axis: Any = None, out: Any = None, mode: str = "raise") -> Any:
        if axis != 0 or out is not None or mode != "raise":
            joined: Any = np.asarray(self)
            return joined.take(indices, axis=axis, out=out, mode=mode)
        return self._rows(np.asarray(indices))

    def compress(self, condition: Any, axis: Any = None, out: Any = None) -> Any:
        if axis != 0:  # across columns or flattened: on the joined rows
            return np.asarray(self).compress(condition, axis=axis, out=out)
        got = self._rows(np.flatnonzero(np.asarray(condition)))
        if out is None:
            return got
        out[...] = got
        return out

    def copy_rows(self, start: int, out: np.ndarray) -> None:
        """Write rows ``start .. start + len(out)`` into ``out``."""
        stop = start + int(out.shape[0])
        if not 0 <= start <= stop <= self.shape[0]:
            raise IndexError(f"rows {start}..{stop} of {self.shape[0]}")
        out[:] = self._picked(self.index[start:stop])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if len(key) == 1:
                return self[key[0]]
            head = self[key[0]]
            rest = key[1:]
            return head[rest] if np.ndim(head) == 1 else np.asarray(head)[(slice(None), *rest)]
        if isinstance(key, (int, np.integer)):
            m = int(self.index[int(key)])
            return self.base[m] if m >= 0 else self.own[-1 - m]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self._rows(np.arange(start, stop, step))
            return RowOverlay(self.base, self.index[start:stop], self.own)  # a view
        return self._rows(np.asarray(key))


MAX_REMOVAL_PARTS = 128
"""Parts a :class:`RowStack` that removals split may grow to (:func:`without_rows`)."""


def without_rows(rows: np.ndarray | RowStack, gone: np.ndarray) -> np.ndarray | RowStack:
    """``rows`` without the rows ``gone`` (ascending, distinct): the kept runs as views (a
    :class:`RowStack`), so that a removal copies no kept row (a million leaves of MiniLM are
    1.5 GB). Each removed run splits a part in two; past :data:`MAX_REMOVAL_PARTS` parts
    (or the parts ``rows`` had, when more) the two adjacent parts with the fewest rows
    together are joined for each part a removal added, a copy of at most about
    ``2 * rows / MAX_REMOVAL_PARTS`` rows each."""
    gone = np.asarray(gone, dtype=np.int64)
    n = int(rows.shape[0])
    if gone.size == 0:
        return rows
    if int(gone[0]) < 0 or int(gone[-1]) >= n or bool(np.any(np.diff(gone) <= 0)):
        raise IndexError(f"rows to remove must be ascending and distinct, below {n}")
    starts = np.concatenate(([0], gone + 1)).tolist()
    ends = np.concatenate((gone, [n])).tolist()
    pieces = [rows[a:b] for a, b in zip(starts, ends, strict=True) if b > a]
    if not pieces:
        return rows[:0]
    kept = RowStack.of(*pieces)
    if not isinstance(kept, RowStack):
        return cast(np.ndarray, kept)
    before = len(rows.parts) if isinstance(rows, RowStack) else 1
    cap = max(MAX_REMOVAL_PARTS, before)
    parts = list(kept.parts)
    while len(parts) > cap:
        sizes = np.array([p.shape[0] for p in parts], dtype=np.int64)
        k = int(np.argmin(sizes[:-1] + sizes[1:]))
        parts[k : k + 2] = [np.concatenate([np.asarray(parts[k]), np.asarray(parts[k + 1])])]
    return RowStack.of(*parts)


def appended(rows: np.ndarray | RowStack, new: np.ndarray) -> np.ndarray | RowStack:
    """``rows`` then ``new`` (same width), without copying ``rows``: the appended rows go to a
    buffer with spare rows, written in place when ``rows`` ends with all that buffer's written
    rows (no other value can read the rows written now), else to a new buffer (twice the rows
    it starts with) that ``rows``' own part of the old one is copied to."""
    new = np.asarray(new)
    if new.shape[0] == 0:
        return rows
    parts = rows.parts if isinstance(rows, RowStack) else (rows,)
    last = parts[-1]
    buffer = last.base
    m, k = int(last.shape[0]), int(new.shape[0])
    with _LOCK:
        owned = (
            isinstance(buffer, np.ndarray)
            and id(buffer) in _USED
            and last.ctypes.data == buffer.ctypes.data
        )
        if owned:
            assert isinstance(buffer, np.ndarray)
            if _USED[id(buffer)] == m and buffer.shape[0] >= m + k:
                buffer[m : m + k] = new
                _USED[id(buffer)] = m + k
                return RowStack.of(*parts[:-1], buffer[: m + k])
        keep, prefix = (last, parts[:-1]) if owned else (last[:0], parts)
        c = int(keep.shape[0])
        grown = np.empty((max(2 * (c + k), _MIN_SPARE), last.shape[1]), dtype=last.dtype)
        grown[:c] = keep
        grown[c : c + k] = new
        _USED[id(grown)] = c + k
        weakref.finalize(grown, _USED.pop, id(grown), None)
        return RowStack.of(*prefix, grown[: c + k])


__all__ = ["MAX_REMOVAL_PARTS", "RowOverlay", "RowStack", "appended", "without_rows"]
