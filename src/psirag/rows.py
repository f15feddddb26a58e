"""Rows of a saved JSON-lines table, read on demand from memory-mapped files (issue 24 item 6).

Why: opening an index must not cost time or memory in proportion to its chunks. A search reads
ten passages; parsing a million chunk records to serve them was most of a load. A
:class:`MappedLines` maps a table's files (its segments and patches) and knows where each line
starts; a :class:`LazyRows` is the ``Sequence`` the rest of psirag sees (``IndexData.chunks``,
``IndexData.abstracts``): row ``i`` is decoded the first time it is read and kept, so reading
it again gives the very same object (what :class:`psirag.index_data.SavedOrigin` relies on to
know which rows a save can keep).

The maps stay valid after the generation's files are removed (POSIX), as the memory-mapped
arrays do, so a reader closed after the load reads its rows later all the same."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

import numpy as np

from psirag.errors import IndexFormatError

T = TypeVar("T")

_NEWLINE = 10

MAP_MIN_BYTES = 1 << 20
"""A saved file smaller than this is read into memory instead of mapped. Why: a map holds a
file descriptor as long as it lives (Python's mmap keeps a duplicate of it), so an index of
many small segment files held one per file, and an add on a small index needed about 40 spare
descriptors; small files cost little memory read, and the large ones, few in number (segments
grow geometrically), stay mapped."""


class ArrayParts:
    """A 1-D array held as consecutive parts (a phrase table's per-leaf entries after a big
    build or updates), which :meth:`psirag.storage.IndexWriter.save_array` writes one part
    after another into one ``.npy`` file instead of joining them in memory first. Why: joining
    a table's parts for a save held a copy of them (207 MiB at 200k chunks) for as long as the
    table lived. A subclass sets :attr:`dtype` (the array's: each part is cast to it) and
    gives :meth:`parts`."""

    __slots__ = ()
    dtype: np.dtype[Any]

    def parts(self) -> Sequence[np.ndarray]:
        raise NotImplementedError

    def __len__(self) -> int:
        return sum(int(p.shape[0]) for p in self.parts())


def load_npy(path: Path, *, mmap: bool = True, private: bool = False) -> np.ndarray:
    """A saved array, memory-mapped where ``mmap`` and the file is large (see
    :data:`MAP_MIN_BYTES`), else read (read-only where a map was asked for, as a map is).
    ``private``: writable, mapped copy-on-write (a written page becomes this process's own,
    the file is never changed): what an update changes a few rows of in place."""
    if mmap and path.stat().st_size >= MAP_MIN_BYTES:
        return np.load(path, mmap_mode="c" if private else "r", allow_pickle=False)
    array = np.load(path, allow_pickle=False)
    if mmap and not private:
        array.flags.writeable = False
    return array


def _file_map(array: Any) -> mmap.mmap | None:
    """The memory map a (view of a) memory-mapped array reads, or None."""
    seen = 0
    while isinstance(array, np.ndarray) and seen < 32:
        array, seen = array.base, seen + 1
    return array if isinstance(array, mmap.mmap) else None


@contextlib.contextmanager
def sparse_reads(*arrays: Any) -> Iterator[None]:
    """While inside, a page fault on the memory-mapped files under ``arrays`` reads that page
    alone, not the device's read-ahead window around it (``madvise(MADV_RANDOM)``, normal
    again on leaving; a no-op for arrays in memory or where ``madvise`` is missing).

    Why: on a cold page cache each fault reads up to ``read_ahead_kb`` around itself (8 MB on
    the test machine), so a few hundred rows spread evenly over a 488 MB array (a load's sample
    checks) read nearly all of it. Only for reads of a few spread rows: a whole-array pass
    under it reads one page per fault."""
    random: int | None = getattr(mmap, "MADV_RANDOM", None)
    normal: int = getattr(mmap, "MADV_NORMAL", 0)
    maps: list[mmap.mmap] = []
    if random is not None:
        for array in arrays:
            found = _file_map(array)
            if found is not None and all(found is not m for m in maps):
                with contextlib.suppress(OSError, ValueError):
                    found.madvise(random)
                    maps.append(found)
    try:
        yield
    finally:
        for found in maps:
            with contextlib.suppress(OSError, ValueError):
                found.madvise(normal)


def joined_values(raw: bytes) -> list[Any] | None:
    """The values of a JSON-lines file's bytes by one ``json.loads`` of its lines joined as an
    array: for short rows (word lists, small records) several times faster than a call per
    line. None when the bytes are not UTF-8 or do not parse that way into one value per line
    (the caller reads line by line, naming the bad one). Lines that are not values alone but
    join into one value per line, such as ``[1`` then ``2],3``, read as those values: psirag
    writes one value per line, and such a file says nothing a valid one could not."""
    if not raw:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    body = text[:-1] if text.endswith("\n") else text
    n_lines = body.count("\n") + 1  # one replace, no list of the lines: twice as fast
    try:
        got = json.loads("[" + body.replace("\n", ",") + "]")
    except ValueError:
        return None
    return got if isinstance(got, list) and len(got) == n_lines else None


def csr_positions(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The entry positions of the CSR ``rows`` (row pointers ``ptr``), in row order, without a
    pass over the whole layout: what an update reads of the few rows it removes."""
    rows = np.asarray(rows, dtype=np.int64)
    starts, ends = ptr[rows].astype(np.int64), ptr[rows + 1].astype(np.int64)
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    shift = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + shift


LINE_BLOCK_BYTES = 16 << 20
"""How much of a file :func:`file_line_starts` reads at a time."""


def file_line_starts(path: Path, rows: int, where: str) -> np.ndarray:
    """:func:`line_starts` of the file at ``path``, read a block at a time: what a save
    writes beside a ``jsonl`` segment it just wrote. Why: a 1M-chunk ``chunks.jsonl`` (363 MB)
    read whole, and a byte mask of it, were held together for a moment of a build's save (the
    save's memory rose by 346 MiB there); a block at a time holds :data:`LINE_BLOCK_BYTES`
    and the starts."""
    found: list[np.ndarray] = []
    offset = 0
    with open(path, "rb", buffering=0) as fh:
        block = bytearray(max(1, min(LINE_BLOCK_BYTES, os.fstat(fh.fileno()).st_size)))
        view = np.frombuffer(block, dtype=np.uint8)
        while got := fh.readinto(block):
            found.append(np.flatnonzero(view[:got] == _NEWLINE) + (offset + 1))
            offset += got
    ends = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
    return _starts_of(ends, offset, rows, where)


def _starts_of(ends: np.ndarray, size: int, rows: int, where: str) -> np.ndarray:
    """The line starts of ``size`` bytes whose lines end just before ``ends`` (each newline's
    position plus one), checked against the ``rows`` lines the manifest says."""
    if ends.size != rows or (rows and int(ends[-1]) != size):
        raise IndexFormatError(
            f"{where} holds {ends.size} lines, the manifest says {rows}; the index is corrupted, "
            "rebuild it"
        )
    out = np.empty(rows + 1, dtype=np.int64)
    out[0] = 0
    out[1:] = ends
    return out


def line_starts(data: bytes | mmap.mmap | memoryview, rows: int, where: str) -> np.ndarray:
    """Where each of the ``rows`` lines of ``data`` starts, plus its length (int64, ``rows + 1``),
    found with numpy over the bytes (JSON escapes every newline inside a value, so each
    ``\\n`` ends a row)."""
    buf = np.frombuffer(data, dtype=np.uint8) if len(data) else np.empty(0, dtype=np.uint8)
    return _starts_of(np.flatnonzero(buf == _NEWLINE) + 1, buf.size, rows, where)


def checked_starts(starts: np.ndarray, rows: int, size: int, where: str) -> np.ndarray:
    """``starts`` (a saved line-start array) if it fits a file of ``size`` bytes and ``rows``
    lines, else an :class:`IndexFormatError`."""
    starts = np.asarray(starts)
    if (
        starts.ndim != 1
        or starts.size != rows + 1
        or starts.dtype.kind not in "iu"
        or int(starts[0]) != 0
        or int(starts[-1]) != size
        or (rows and bool(np.any(np.diff(starts) <= 0)))
    ):
        raise IndexFormatError(
            f"{where}: its line starts do not fit its {rows} rows of {size} bytes; the index is "
            "corrupted, rebuild it"
        )
    return np.asarray(starts, dtype=np.int64)


class _File:
    """One JSON-lines file, mapped, with its line starts."""

    _starts: np.ndarray | None

    def __init__(self, path: Path, rows: int, starts: np.ndarray | None, where: str) -> None:
        self.where = where
        self.rows = rows
        size = path.stat().st_size
        if size < MAP_MIN_BYTES:  # read, not mapped: a map would hold a descriptor
            self.data: mmap.mmap | bytes = path.read_bytes()
            size = len(self.data)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                self.data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
        self._starts = None if starts is None else checked_starts(starts, rows, size, where)

    @property
    def starts(self) -> np.ndarray:
        """Where each line starts (plus the size): saved beside the file, or found when a row
        is first read (a file saved without them costs a scan then, not at load)."""
        if self._starts is None:
            self._starts = line_starts(self.data, self.rows, self.where)
        return self._starts

    def value(self, line: int) -> Any:
        lo, hi = int(self.starts[line]), int(self.starts[line + 1]) - 1
        try:
            return json.loads(self.data[lo:hi])
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexFormatError(
                f"{self.where}: line {line + 1} is not valid JSON ({exc}); the index is "
                "corrupted, rebuild it"
            ) from exc


class MappedLines:
    """The physical rows of one JSON-lines table: its segment files end to end, with patches
    (a later patch wins) applied as rows are read. Construction maps the files and reads their
    line starts; no row is decoded."""

    def __init__(
        self,
        segments: Sequence[tuple[Path, int, np.ndarray | None, str]],
        patches: Sequence[tuple[np.ndarray, Path, np.ndarray | None, str]] = (),
    ) -> None:
        """``segments``: (path, rows, line starts or None to find them, name for errors);
        ``patches``: (physical rows, values file, its line starts or None, name), in order."""
        self.files = [_File(p, n, s, w) for p, n, s, w in segments]
        bounds = [0]
        for f in self.files:
            bounds.append(bounds[-1] + f.rows)
        self._bounds = bounds
        self.physical = bounds[-1]
        self._patch_files: list[_File] = []
        self._patched: np.ndarray | None = None
        self._patch_line: np.ndarray | None = None
        if patches:
            owner = np.full(self.physical, -1, dtype=np.int32)
            line = np.zeros(self.physical, dtype=np.int64)
            for k, (ids, path, starts, where) in enumerate(patches):
                ids = np.asarray(ids, dtype=np.int64)
                values = _File(path, int(ids.size), starts, where)
                if ids.ndim != 1 or (
                    ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.physical)
                ):
                    raise IndexFormatError(
                        f"{where}: the patch does not fit the table's {self.physical} rows; the "
                        "index is corrupted, rebuild it"
                    )
                self._patch_files.append(values)
                owner[ids] = k
                line[ids] = np.arange(ids.size)
            self._patched, self._patch_line = owner, line

    def values(self, rows: np.ndarray) -> list[Any]:
        """Physical rows ``rows``, decoded (as :meth:`value` one by one, with less overhead
        per row: what reading every row costs)."""
        rows = np.asarray(rows, dtype=np.int64)
        out: list[Any] = [None] * rows.size
        todo = np.arange(rows.size)
        if self._patched is not None:
            owner = self._patched[rows]
            for j in np.flatnonzero(owner >= 0).tolist():
                out[j] = self.value(int(rows[j]))
            todo = np.flatnonzero(owner < 0)
        which = np.searchsorted(np.asarray(self._bounds), rows[todo], side="right") - 1
        for i, f in enumerate(self.files):
            picked = todo[which == i]
            if not picked.size:
                continue
            lines = rows[picked] - self._bounds[i]
            data, lo, hi = f.data, f.starts[lines].tolist(), (f.starts[lines + 1] - 1).tolist()
            try:
                values = [json.loads(data[a:b]) for a, b in zip(lo, hi, strict=True)]
            except (UnicodeDecodeError, json.JSONDecodeError):
                values = [f.value(line) for line in lines.tolist()]  # names the bad line
            for j, v in zip(picked.tolist(), values, strict=True):
                out[j] = v
        return out

    def every_value(self) -> list[Any]:
        """Every physical row, decoded: each unpatched file at once (:func:`joined_values`),
        by :meth:`values` where that does not give one value per line (naming a bad one)."""
        if self._patched is not None:
            return self.values(np.arange(self.physical))
        out: list[Any] = []
        for i, f in enumerate(self.files):
            got = joined_values(bytes(f.data))
            if got is None or len(got) != f.rows:
                got = self.values(np.arange(self._bounds[i], self._bounds[i + 1]))
            out.extend(got)
        return out

    def value(self, row: int) -> Any:
        """Physical row ``row``, decoded (not kept: :class:`LazyRows` keeps it)."""
        if self._patched is not None and self._patch_line is not None:
            k = int(self._patched[row])
            if k >= 0:
                return self._patch_files[k].value(int(self._patch_line[row]))
        i = bisect_right(self._bounds, row) - 1
        return self.files[i].value(row - self._bounds[i])


class LazyRows(Sequence[T], Generic[T]):
    """A read-only sequence over rows of a :class:`MappedLines`: item ``i`` is physical row
    ``rows[i]`` (``rows`` None: row ``i``) made into a ``T`` by ``convert`` on first read and
    kept, followed by ``tail`` (items already in memory, e.g. an update's new chunks).
    Sequences made from one another (:meth:`take`, ``+``) share the decoded rows."""

    def __init__(
        self,
        source: MappedLines,
        convert: Callable[[Any], T],
        rows: np.ndarray | None = None,
        *,
        tail: Sequence[T] = (),
        _cache: tuple[dict[int, T], threading.Lock] | None = None,
    ) -> None:
        self.source = source
        self.convert = convert
        self.rows = None if rows is None else np.asarray(rows, dtype=np.int64)
        self.tail = tuple(tail)
        self._head = source.physical if rows is None else int(self.rows.size)  # type: ignore[union-attr]
        self._cache: dict[int, T]
        self._cache, self._lock = ({}, threading.Lock()) if _cache is None else _cache

    # ---------------------------------------------------------------- the Sequence
    def __len__(self) -> int:
        return self._head + len(self.tail)

    def physical_row(self, i: int) -> int:
        """The physical row of item ``i`` (-1: a tail item)."""
        if i >= self._head:
            return -1
        return i if self.rows is None else int(self.rows[i])

    def _item(self, i: int) -> T:
        if i >= self._head:
            return self.tail[i - self._head]
        row = i if self.rows is None else int(self.rows[i])
        got = self._cache.get(row)
        if got is None:
            value = self.convert(self.source.value(row))
            with self._lock:  # two threads reading one row must get one object
                got = self._cache.setdefault(row, value)
        return got

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        n = len(self)
        if isinstance(i, slice):
            return tuple(self._item(j) for j in range(*i.indices(n)))
        i = int(i)  # numpy integers too
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} of {n}")
        return self._item(i)

    def __iter__(self) -> Iterator[T]:
        block = 8192
        for lo in range(0, self._head, block):  # decoded a block at a time
            hi = min(self._head, lo + block)
            rows = np.arange(lo, hi) if self.rows is None else self.rows[lo:hi]
            cache = self._cache
            missing = [r for r in rows.tolist() if r not in cache]
            if missing:
                values = self.source.values(np.asarray(missing, dtype=np.int64))
                convert = self.convert
                with self._lock:
                    for r, v in zip(missing, values, strict=True):
                        cache.setdefault(r, convert(v))
            yield from (cache[r] for r in rows.tolist())
        yield from self.tail

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, list, LazyRows, PickedRows)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[T]) -> LazyRows[T]:
        """These rows then ``other`` (kept in memory), sharing the decoded rows; reads no row
        (an update appends its new chunks to the loaded ones this way)."""
        return LazyRows(
            self.source,
            self.convert,
            self.rows,
            tail=self.tail + tuple(other),
            _cache=(self._cache, self._lock),
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))  # maps do not travel: a copy is decoded rows

    def __repr__(self) -> str:
        return f"LazyRows({len(self):,} rows, {len(self._cache):,} read)"

    # ---------------------------------------------------------------- derived sequences
    def _rows(self) -> np.ndarray:
        return np.arange(self._head, dtype=np.int64) if self.rows is None else self.rows

    def take(self, items: np.ndarray) -> LazyRows[T] | tuple[T, ...]:
        """The items at positions ``items`` (in that order), without reading them: rows, then
        tail items when every tail item taken comes after every row taken (a removal keeps
        the order); else a tuple."""
        items = np.asarray(items, dtype=np.int64)
        in_tail = items >= self._head
        cut = int(np.count_nonzero(~in_tail))
        if bool(in_tail[:cut].any()):
            return tuple(self._item(int(i)) for i in items.tolist())
        tail = self.tail
        return LazyRows(
            self.source,
            self.convert,
            self._rows()[items[:cut]],
            tail=tuple(tail[j] for j in (items[cut:] - self._head).tolist()),
            _cache=(self._cache, self._lock),
        )

    def read(self) -> int:
        """How many rows have been decoded so far (by this sequence and its relatives)."""
        return len(self._cache)

    def positions_of(self, items: Sequence[T]) -> np.ndarray:
        """Per item of ``items``, its position in this sequence's head when it is one of these
        rows (the very object read from it, or, for a relative sequence, the same row), else
        -1. Costs O(len(items)) without decoding a row."""
        head = self._rows()
        order = None
        if head.size > 1 and not bool(np.all(np.diff(head) > 0)):
            order = np.argsort(head, kind="stable")
        sorted_rows = head if order is None else head[order]

        def position(physical: np.ndarray) -> np.ndarray:
            at = np.minimum(np.searchsorted(sorted_rows, physical), max(sorted_rows.size - 1, 0))
            hit = (sorted_rows[at] == physical) & (physical >= 0) if sorted_rows.size else at < 0
            pos = at if order is None else order[at]
            return np.where(hit, pos, -1)

        if isinstance(items, LazyRows) and items._cache is self._cache:
            # rows of a sequence over all of the source are their own positions, and so are
            # this sequence's own rows carried on (an update's ``+``: the same array) while
            # they are increasing: no search (at 1M chunks each save's search cost 40 ms)
            theirs = items._rows()
            if self.rows is None:
                own = theirs
            elif theirs is self.rows and order is None and (head.size == 0 or head[0] >= 0):
                own = np.arange(head.size, dtype=np.int64)
            else:
                own = position(theirs)
            return np.concatenate([own, self._by_identity(items.tail)])
        return self._by_identity(items)

    def _by_identity(self, items: Sequence[T]) -> np.ndarray:
        """Per item, its position here if it is an object decoded from one of these rows
        (matched by object identity, vectorised: a save after an add that decoded every row
        looked each one up in a Python dict, about 2 s at 200k rows), or one of its ``tail``
        items (after the rows: a sequence saved with an update's new chunks holds them there,
        and the next save on top must find them, not write them again)."""
        out = np.full(len(items), -1, dtype=np.int64)
        if not len(items) or not (self._cache or self.tail):
            return out
        head = self._rows()
        with self._lock:  # another thread may be reading rows meanwhile
            cached = np.fromiter(self._cache.keys(), np.int64, len(self._cache))
            objects = identities(self._cache.values())
        if self.rows is None:
            ok = cached < head.size
            pos = cached
        else:
            order = np.argsort(head, kind="stable")
            ordered = head[order]
            at = np.minimum(np.searchsorted(ordered, cached), max(head.size - 1, 0))
            ok = ordered[at] == cached if head.size else np.zeros(cached.size, dtype=bool)
            pos = order[at]
        known = np.concatenate([objects[ok], identities(self.tail)])
        where = np.concatenate([pos[ok], head.size + np.arange(len(self.tail), dtype=np.int64)])
        return match_identities(identities(items), known, where)


class PickedRows(Sequence[T], Generic[T]):
    """A read-only sequence whose item ``i`` is ``own[i]`` where given, else ``base[pick[i]]``
    (``pick[i] < 0``: ``fill``): what an update makes of the inner nodes' abstracts, most of
    which stay as they were at new positions, without reading the old ones (a loaded index's
    are :class:`LazyRows`, decoded when read; listing them decoded every one). Made over
    another ``PickedRows``, it picks from that one's base, so updates never stack levels."""

    base: Sequence[T]
    pick: np.ndarray
    own: dict[int, T]
    fill: T

    def __init__(self, base: Sequence[T], pick: np.ndarray, own: dict[int, T], fill: T) -> None:
        pick = np.asarray(pick, dtype=np.int64)
        if isinstance(base, PickedRows):
            own = dict(own)
            under = np.full(pick.size, -1, dtype=np.int64)
            picked = pick >= 0
            under[picked] = base.pick[pick[picked]]
            if base.own:  # items of the base's own: copied, by the positions picking them
                theirs = np.fromiter(base.own.keys(), np.int64, len(base.own))
                for i in np.flatnonzero(picked & np.isin(pick, theirs)).tolist():
                    own.setdefault(i, base.own[int(pick[i])])
            pick, base = under, base.base
        self.base = base
        self.pick = pick
        self.own = own
        self.fill = fill

    def __len__(self) -> int:
        return int(self.pick.size)

    def _item(self, i: int) -> T:
        if i in self.own:
            return self.own[i]
        j = int(self.pick[i])
        return self.fill if j < 0 else self.base[j]

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: int | slice) -> T | tuple[T, ...]:
        n = len(self)
        if isinstance(i, slice):
            return tuple(self._item(j) for j in range(*i.indices(n)))
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"item {i} of {n}")
        return self._item(i)

    def __iter__(self) -> Iterator[T]:
        return (self._item(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (tuple, list, LazyRows, PickedRows)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))

    def __repr__(self) -> str:
        return f"PickedRows({len(self):,} items, {len(self.own):,} own)"


def identities(objects: Iterable[Any]) -> np.ndarray:
    """The ``id`` of each object, as uint64 (CPython: its address)."""
    return np.fromiter(map(id, objects), dtype=np.uint64)


def match_identities(wanted: np.ndarray, known: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per id of ``wanted``, the value of the equal id in ``known`` (-1: none)."""
    out = np.full(wanted.size, -1, dtype=np.int64)
    if not known.size or not wanted.size:
        return out
    order = np.argsort(known, kind="stable")
    ordered = known[order]
    at = np.minimum(np.searchsorted(ordered, wanted), ordered.size - 1)
    hit = ordered[at] == wanted
    out[hit] = np.asarray(values, dtype=np.int64)[order[at[hit]]]
    return out


__all__ = [
    "LazyRows",
    "MappedLines",
    "PickedRows",
    "checked_starts",
    "csr_positions",
    "identities",
    "line_starts",
    "load_npy",
    "match_identities",
]
