"""Tables of rows kept as immutable segment files that generations share (index format 3).

Why: a one-document update changes a handful of rows, so a save should write those rows, not
the whole index again. A table (the leaf vectors, the chunk texts, the inner nodes' abstracts,
a phrase-table array ...) is a list of *physical* rows: its segment files concatenated. On top
of them, *patches* (physical row ids and new values; a later patch wins) and *tombstones*
(physical rows that are gone). The *logical* rows are the physical ones, patched, without the
tombstones. Each file is written once, by the generation that made it (its number is in the
name), and a later generation that still uses it hard-links it (:meth:`IndexWriter.keep`), so
garbage collection of old generations needs no reference counting: a file lives while any
generation folder links it.

A save (:func:`write_table`) compares the new rows with the base generation's and writes an
appended segment for new rows, a patch for changed rows and tombstones for removed rows. Small
appended segments merge into the segment before while that one is at most twice their size
(and patches likewise), so a table holds O(log n) files. When the patched and removed rows
exceed :data:`COMPACT_FRACTION` of the table, or ``compact=True`` (``psirag compact``), the
table is written again as one segment.

Rows are numpy rows (``npy`` tables: 1-d or 2-d arrays) or JSON values (``jsonl`` tables: one
JSON value per line). No pickle anywhere."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from psirag.errors import IndexFormatError

if TYPE_CHECKING:
    from psirag.rows import MappedLines
    from psirag.storage import IndexReader, IndexWriter

Kind = Literal["npy", "jsonl"]
Rows = Any
"""An ``np.ndarray`` (``npy`` tables) or a list of JSON values (``jsonl`` tables)."""

SEGMENTS_DIR = "seg"
COMPACT_FRACTION = 0.25
"""A table is written again as one segment when its patched and removed rows exceed this share
of its rows (and :data:`COMPACT_MIN_ROWS`)."""
COMPACT_MIN_ROWS = 256
REUSE_FRACTION = 0.5
"""A table keeps the base's segments only while at least this share of its rows are base rows
unchanged (else it is written as one new segment)."""
MAX_FILES = 48
"""A table with more segment and patch files than this is written again as one segment."""
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Table:
    """One table's files in one generation (what the manifest's ``tables`` entry says)."""

    kind: Kind
    segments: tuple[tuple[str, int], ...]
    """(file, physical rows) in order."""
    patches: tuple[tuple[str, str, int], ...] = ()
    """(row-ids file, values file, rows), applied in order."""
    dead: str | None = None
    """A sorted int64 array of removed physical rows (None: none)."""
    n_dead: int = 0
    start: int = 0
    """The first row of the first segment inside its file (a fresh save writes the leaf and
    inner vectors as one file, ``node_vectors`` in memory order, that a load can map as is)."""

    @property
    def physical(self) -> int:
        return sum(n for _, n in self.segments)

    @property
    def rows(self) -> int:
        """Logical rows."""
        return self.physical - self.n_dead

    @property
    def patched(self) -> int:
        return sum(n for _, _, n in self.patches)

    def files(self) -> list[str]:
        out = [f for f, _ in self.segments]
        for rows_file, values_file, _ in self.patches:
            out += [rows_file, values_file]
        if self.dead is not None:
            out.append(self.dead)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "segments": [[f, n] for f, n in self.segments],
            "patches": [[r, v, n] for r, v, n in self.patches],
            "dead": self.dead,
            "n_dead": self.n_dead,
            "start": self.start,
        }

    @classmethod
    def from_json(cls, raw: Any, where: str) -> Table:
        """The table a manifest describes; anything malformed is an :class:`IndexFormatError`
        naming ``where`` (the manifest and the table)."""

        def bad(what: str) -> IndexFormatError:
            return IndexFormatError(f"{where}: {what}; the index is corrupted, rebuild it")

        def count(x: Any) -> int:
            if not isinstance(x, int) or isinstance(x, bool) or x < 0:
                raise bad(f"a row count {x!r} is not a whole number")
            return x

        def name(x: Any) -> str:
            if not isinstance(x, str) or not x:
                raise bad(f"a file name {x!r} is not a name")
            return x

        if not isinstance(raw, dict):
            raise bad("the table entry is not an object")
        kind = raw.get("kind")
        if kind not in ("npy", "jsonl"):
            raise bad(f"kind {kind!r} is not npy or jsonl")
        try:
            segments = tuple((name(f), count(n)) for f, n in raw.get("segments", []))
            patches = tuple(
                (name(r), name(v), count(n)) for r, v, n in raw.get("patches", []) or []
            )
        except (TypeError, ValueError) as exc:
            raise bad(f"its segments or patches are not lists of entries ({exc})") from exc
        if not segments:
            raise bad("it lists no segment")
        dead = raw.get("dead")
        table = cls(
            kind,
            segments,
            patches,
            None if dead is None else name(dead),
            count(raw.get("n_dead", 0)),
            count(raw.get("start", 0)),
        )
        if table.n_dead > table.physical or (dead is None) != (table.n_dead == 0):
            raise bad(f"{table.n_dead} removed rows do not fit {table.physical} rows")
        return table


# ---------------------------------------------------------------------------- reading
def _load_npy(reader: IndexReader, name: str, *, mmap: bool = True) -> np.ndarray:
    return reader.load_array(name, mmap=mmap)


def _load_jsonl(reader: IndexReader, name: str) -> list[Any]:
    return reader.read_jsonl(name)


def _dead_rows(reader: IndexReader, table: Table, where: str) -> np.ndarray:
    if table.dead is None:
        return np.empty(0, dtype=np.int64)
    dead = np.asarray(_load_npy(reader, table.dead, mmap=False), dtype=np.int64)
    if (
        dead.ndim != 1
        or dead.size != table.n_dead
        or (dead.size and (dead[0] < 0 or dead[-1] >= table.physical))
        or (dead.size > 1 and not bool(np.all(np.diff(dead) > 0)))
    ):
        raise IndexFormatError(
            f"{where}: {table.dead} is not a sorted list of {table.n_dead} rows below "
            f"{table.physical}; the index is corrupted, rebuild it"
        )
    return dead


def segment_parts(reader: IndexReader, table: Table, where: str) -> list[np.ndarray]:
    """An ``npy`` table's segments as memory maps of their rows, in order (patches and
    removed rows not applied), each checked against the manifest."""
    parts = [_load_npy(reader, f) for f, _ in table.segments]
    for i, ((f, n), part) in enumerate(zip(table.segments, parts, strict=True)):
        start = table.start if i == 0 else 0
        if (
            part.ndim == 0
            or part.shape[0] < start + n
            or (i > 0 and part.shape[0] != n)
            or part.shape[1:] != parts[0].shape[1:]
        ):
            raise IndexFormatError(
                f"{where}: {f} holds {part.shape} rows, the manifest says {n}; the index is "
                "corrupted, rebuild it"
            )
    parts[0] = parts[0][table.start : table.start + table.segments[0][1]]
    return parts


def read_physical(reader: IndexReader, table: Table, where: str) -> Rows:
    """Every physical row, patched (removed rows included): a memory map when the table is one
    unpatched ``npy`` segment, else a new array or list."""
    rows: Any
    if table.kind == "npy":
        parts = segment_parts(reader, table, where)
        if len(parts) == 1 and not table.patches:
            return parts[0]
        rows = np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])
    else:
        rows = []
        for f, n in table.segments:
            texts = _load_jsonl(reader, f)
            if len(texts) != n:
                raise IndexFormatError(
                    f"{where}: {f} holds {len(texts)} rows, the manifest says {n}; the index is "
                    "corrupted, rebuild it"
                )
            rows.extend(texts)
    for ids, values in _patches(reader, table, where):
        if table.kind == "npy":
            rows[ids] = values
        else:
            for i, v in zip(ids.tolist(), values, strict=True):
                rows[i] = v
    return rows


def growable_rows(reader: IndexReader, table: Table, where: str) -> tuple[np.ndarray, int] | None:
    """The rows of an ``npy`` table with no removed rows, as ``(buffer, n)``: ``buffer[:n]``
    are the rows, writable, and the buffer has room after them. The first segment is mapped
    copy-on-write (the file is never changed; the pages an update writes become the
    process's own), so when its file was saved with spare rows (see
    :meth:`~psirag.storage.IndexWriter.save_array`) the later segments and the patches are
    written into the map in O(their rows), and an update appends in place: no pass over the
    table. Without room the rows are copied into a new buffer with a quarter to spare. None
    for a table with removed rows or one that starts inside a shared file (read those with
    :func:`read_logical`)."""
    if table.kind != "npy" or table.n_dead or table.start:
        return None
    parts = segment_parts(reader, table, where)  # every segment checked against the manifest
    n = table.physical
    n_first = table.segments[0][1]
    full = reader.load_array(table.segments[0][0], private=True)
    if full.shape[0] >= n and full.flags.writeable:
        buf = np.asarray(full)
    else:
        buf = np.empty((n + n // 4 + 1024, *parts[0].shape[1:]), dtype=parts[0].dtype)
        buf[:n_first] = parts[0]
    at = n_first
    for part in parts[1:]:
        buf[at : at + part.shape[0]] = part
        at += part.shape[0]
    for ids, values in _patches(reader, table, where):
        buf[ids] = values
    return buf, n


def _patches(reader: IndexReader, table: Table, where: str) -> Iterator[tuple[np.ndarray, Any]]:
    """Each patch of ``table`` as (physical rows, values), checked against the table."""
    for rows_file, values_file, n in table.patches:
        ids = np.asarray(_load_npy(reader, rows_file, mmap=False), dtype=np.int64)
        values = (
            _load_npy(reader, values_file, mmap=False)
            if table.kind == "npy"
            else _load_jsonl(reader, values_file)
        )
        if (
            ids.ndim != 1
            or ids.size != n
            or len(values) != n
            or (n and (int(ids.min()) < 0 or int(ids.max()) >= table.physical))
        ):
            raise IndexFormatError(
                f"{where}: the patch {rows_file} does not fit the table's {table.physical} rows; "
                "the index is corrupted, rebuild it"
            )
        yield ids, values


def live_rows(reader: IndexReader, table: Table, where: str) -> np.ndarray:
    """The physical row of each logical row."""
    dead = _dead_rows(reader, table, where)
    keep = np.ones(table.physical, dtype=bool)
    keep[dead] = False
    return np.flatnonzero(keep)


def read_logical(reader: IndexReader, table: Table, where: str) -> Rows:
    """The logical rows (removed ones dropped)."""
    rows = read_physical(reader, table, where)
    if table.n_dead == 0:
        return rows
    live = live_rows(reader, table, where)
    if table.kind == "npy":
        return rows[live]
    return [rows[i] for i in live.tolist()]


# ---------------------------------------------------------------------------- writing
def segment_file(name: str, generation: int, what: str) -> str:
    """The name of a file of table ``name`` that generation ``generation`` writes."""
    return f"{SEGMENTS_DIR}/{name.replace('/', '.')}.{generation:06d}.{what}"


def _write_rows(
    writer: IndexWriter, path: str, kind: Kind, rows: Rows, *, spare: bool = False
) -> None:
    if kind == "npy":
        from psirag.rows import ArrayParts

        # parts (a phrase table's per-leaf entries) are written one after another, not joined
        array = rows if isinstance(rows, ArrayParts) else np.asarray(rows)
        one_d = isinstance(array, ArrayParts) or array.ndim > 0
        extra = spare_rows(_length(array)) if spare and one_d else 0
        writer.save_array(path, array, spare_rows=extra)
    else:
        writer.save_jsonl(path, rows)
        _save_line_starts(writer, path, _length(rows))


def spare_rows(n: int) -> int:
    """Rows of room a table that grows in place is written with (:func:`growable_rows`): an
    eighth of its rows, at least a few thousand. Held as a hole in the file, so it costs no
    disk until a copy of the index fills it in."""
    return n // 8 + 4096


def line_starts_file(path: str) -> str:
    """The file beside a ``jsonl`` segment or patch holding where each of its lines starts
    (int64, rows + 1 entries, the last its size), so a load maps the rows without reading
    them (:class:`psirag.rows.MappedLines`); a file saved before it has none and a load finds
    the line ends with numpy."""
    return f"{path}.starts.npy"


def _save_line_starts(writer: IndexWriter, path: str, rows: int) -> None:
    """Write :func:`line_starts_file` of the ``jsonl`` file just written (read back from the
    page cache: no second encoding of the rows)."""
    from psirag.rows import file_line_starts

    where = writer.staging / path
    writer.save_array(line_starts_file(path), file_line_starts(where, rows, str(where)))


def _keep(writer: IndexWriter, reader: IndexReader, name: str) -> None:
    """Keep the base's file ``name`` (and its line starts, where it has them)."""
    writer.keep(name)
    starts = line_starts_file(name)
    if starts in reader.manifest.get("files", {}):
        writer.keep(starts)


def keep_table(writer: IndexWriter, reader: IndexReader, table: Table) -> Table:
    """The base's ``table`` kept as it is in the generation ``writer`` writes (its files kept
    once, not copied): what a save lists for a table it leaves unchanged."""
    for f in table.files():
        if not (writer.staging / f).exists():
            _keep(writer, reader, f)
    return table


def segment_generation(name: str, file: str) -> int | None:
    """The generation that wrote ``file``, a segment of table ``name`` (see
    :func:`segment_file`); None for a file not named that way."""
    prefix = f"{SEGMENTS_DIR}/{name.replace('/', '.')}."
    if not file.startswith(prefix):
        return None
    digits = file[len(prefix) :].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def _length(rows: Rows) -> int:
    return int(rows.shape[0]) if isinstance(rows, np.ndarray) else len(rows)


def _take(rows: Rows, start: int, stop: int) -> Rows:
    return rows[start:stop]


def _concat(kind: Kind, parts: Sequence[Rows]) -> Rows:
    if kind == "npy":
        return np.concatenate([np.asarray(p) for p in parts])
    out: list[Any] = []
    for p in parts:
        out.extend(p)
    return out


def _changed(kind: Kind, new: Rows, old: Rows, src: np.ndarray) -> np.ndarray:
    """The rows ``i`` of ``new`` (its first ``src.size``) that differ from ``old[src[i]]``,
    compared bit for bit (numpy) or as JSON values."""
    if kind == "jsonl":
        return np.asarray(
            [i for i, j in enumerate(src.tolist()) if new[i] != old[j]], dtype=np.int64
        )
    m = src.size
    identity = m == 0 or (int(src[0]) == 0 and int(src[-1]) == m - 1)  # src is increasing
    bits = np.dtype(f"u{new.dtype.itemsize}") if new.dtype.itemsize in (1, 2, 4, 8) else None
    out: list[np.ndarray] = []
    for lo in range(0, m, _BLOCK):
        hi = min(m, lo + _BLOCK)
        a = np.ascontiguousarray(new[lo:hi])
        b = np.ascontiguousarray(old[lo:hi] if identity else old[src[lo:hi]])
        if bits is not None:  # bit for bit, in the arrays' own word size
            diff = a.view(bits) != b.view(bits)
        else:
            diff = a.view(np.uint8).reshape(hi - lo, -1) != b.view(np.uint8).reshape(hi - lo, -1)
        if diff.ndim > 1:
            diff = diff.reshape(hi - lo, -1).any(axis=1)
        out.append(lo + np.flatnonzero(diff))
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _compatible(kind: Kind, new: Rows, old: Rows) -> bool:
    if kind == "jsonl":
        return True
    return bool(new.dtype == old.dtype and new.shape[1:] == old.shape[1:])


def write_table(
    writer: IndexWriter,
    name: str,
    kind: Kind,
    rows: Rows,
    *,
    base: tuple[Table, IndexReader] | None = None,
    src: np.ndarray | None = None,
    compare: bool = True,
    compact: bool = False,
    prewritten: tuple[str, int] | None = None,
    fresh_rows: Rows | None = None,
    spare: bool = False,
) -> tuple[Table, np.ndarray]:
    """Save ``rows`` as table ``name`` of ``writer``'s generation; returns the table and the
    physical row of each row (stable across generations until the table is compacted).

    ``base``: the base generation's table and a reader of it. ``src[i]``: the base's logical
    row that row ``i`` continues (-1: a new row). The rows that continue base rows must come
    first and in the base's order (new rows after them); base rows that no row continues are
    removed. ``None``: row ``i`` continues base row ``i`` where both exist. ``compare=False``:
    trust that continued rows are unchanged (the chunks, whose identity says so). Without a
    usable base (or with ``compact``), the table is written as one new segment
    (``prewritten``: rows ``start ..`` of a file this generation wrote already hold it;
    ``fresh_rows``: the rows to write then, in another order than ``rows``; ``spare``: a new
    segment of an ``npy`` table is written with room to grow, see :func:`growable_rows`)."""
    n = _length(rows)
    generation = writer.generation

    def fresh() -> tuple[Table, np.ndarray]:
        if prewritten is not None:
            return Table(kind, ((prewritten[0], n),), start=prewritten[1]), np.arange(n)
        seg = segment_file(name, generation, kind)
        _write_rows(writer, seg, kind, rows if fresh_rows is None else fresh_rows, spare=spare)
        return Table(kind, ((seg, n),)), np.arange(n, dtype=np.int64)

    if base is None or compact or prewritten is not None or base[0].kind != kind:
        return fresh()
    table, reader = base
    where = f"{reader.folder} table {name}"
    old_n = table.rows
    # row i continues row i (rows appended or cut at the end): known in order, not checked
    identity = src is None
    if src is None:
        m = min(n, old_n)
        kept = np.arange(m)
    else:
        src = np.asarray(src, dtype=np.int64)
        m = int(np.count_nonzero(src >= 0))
        kept = src[:m]
        if (
            src.size != n
            or (m < n and bool(np.any(src[m:] >= 0)))
            or (m and (int(kept[0]) < 0 or int(kept[-1]) >= old_n))
            or (m > 1 and not bool(np.all(np.diff(kept) > 0)))
        ):
            return fresh()  # rows reordered: no cheaper form than a new segment
        # strictly increasing from 0 to m - 1: row i continues row i (nothing removed, rows
        # appended), which needs no map of the base's live rows
        identity = m == 0 or (int(kept[0]) == 0 and int(kept[-1]) == m - 1)
    changed = np.empty(0, dtype=np.int64)
    if compare and m:
        old = read_logical(reader, table, where)
        if not _compatible(kind, rows, old):
            return fresh()
        changed = _changed(kind, rows, old, kept)
    elif kind == "npy" and n > m:
        first = np.load(reader.path(table.segments[0][0]), mmap_mode="r", allow_pickle=False)
        probe = rows if hasattr(rows, "dtype") else np.asarray(rows)  # (not copied)
        if not _compatible(kind, probe, first):
            return fresh()
    if m - changed.size < REUSE_FRACTION * n:
        return fresh()  # little of the base is left: a new segment is smaller and simpler
    if identity and table.n_dead == 0:  # physical rows are logical rows: no map to read
        removed = np.arange(m, old_n, dtype=np.int64)
        physical = np.concatenate(
            [np.arange(m, dtype=np.int64), table.physical + np.arange(n - m, dtype=np.int64)]
        )
    else:
        live = live_rows(reader, table, where)
        gone = np.ones(old_n, dtype=bool)
        gone[kept] = False
        removed = live[gone]
        physical = np.empty(n, dtype=np.int64)
        physical[:m] = live[kept]
        physical[m:] = table.physical + np.arange(n - m)
    written = _write_delta(
        writer,
        reader,
        name,
        table,
        append=_take(rows, m, n) if n > m else None,
        patch_ids=physical[changed],
        patch_values=(rows[changed] if kind == "npy" else [rows[i] for i in changed.tolist()]),
        dead=removed,
        n_rows=n,
    )
    if written is None:
        return fresh()
    return written, physical


def physical_of(logical: np.ndarray, dead: np.ndarray) -> np.ndarray:
    """The physical row of each logical row, given the table's sorted removed rows: O(k log d)
    for k rows, where :func:`live_rows` maps every row. (``dead[j] - j`` live rows come before
    the j-th removed row, so that many removed rows lie before logical row ``i`` as there are
    ``j`` with ``dead[j] - j <= i``.)"""
    logical = np.asarray(logical, dtype=np.int64)
    if dead.size == 0:
        return logical
    before = np.asarray(dead, dtype=np.int64) - np.arange(dead.size, dtype=np.int64)
    return logical + np.searchsorted(before, logical, side="right")


def logical_of(physical: np.ndarray, dead: np.ndarray) -> np.ndarray:
    """The logical row of each live physical row (the inverse of :func:`physical_of`)."""
    physical = np.asarray(physical, dtype=np.int64)
    return physical - np.searchsorted(np.asarray(dead, dtype=np.int64), physical)


def values_at(reader: IndexReader, table: Table, physical: np.ndarray, where: str) -> np.ndarray:
    """The values of an ``npy`` table's physical rows ``physical`` (patched), read from its
    mapped segments and its patches only: O(k log k + patched rows), not a read of the table."""
    physical = np.asarray(physical, dtype=np.int64)
    parts = segment_parts(reader, table, where)
    ends = np.cumsum([p.shape[0] for p in parts])
    which = np.searchsorted(ends, physical, side="right")
    out = np.empty((physical.size, *parts[0].shape[1:]), dtype=parts[0].dtype)
    for i in np.unique(which).tolist():
        at = np.flatnonzero(which == i)
        start = int(ends[i - 1]) if i else 0
        out[at] = parts[i][physical[at] - start]
    for rows_file, values_file, n in table.patches:  # in order: a later patch wins
        ids = np.asarray(_load_npy(reader, rows_file, mmap=False), dtype=np.int64)
        values = _load_npy(reader, values_file)
        if ids.ndim != 1 or ids.size != n or len(values) != n:
            raise IndexFormatError(
                f"{where}: the patch {rows_file} does not fit the manifest; the index is "
                "corrupted, rebuild it"
            )
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids[order], physical), max(n - 1, 0))
        hit = ids[order][at] == physical if n else np.zeros(physical.size, dtype=bool)
        out[hit] = values[order[at[hit]]]
    return out


def dead_rows(reader: IndexReader, table: Table, where: str) -> np.ndarray:
    """The table's removed physical rows, sorted (checked against the manifest)."""
    return _dead_rows(reader, table, where)


def write_delta(
    writer: IndexWriter,
    reader: IndexReader,
    name: str,
    table: Table,
    *,
    append: Rows | None = None,
    patch_ids: np.ndarray | None = None,
    patch_values: Rows | None = None,
    dead: np.ndarray | None = None,
) -> Table | None:
    """Save table ``name`` as the base generation's ``table`` changed by what the caller knows
    changed, without reading or comparing the base's rows: rows ``append`` added at the end,
    physical rows ``patch_ids`` set to ``patch_values``, live physical rows ``dead`` removed
    (each array distinct). O(change) (plus the small segments and patches it merges). None,
    with nothing written, when the table should be written again as one segment instead
    (:data:`COMPACT_FRACTION`, :data:`REUSE_FRACTION`, :data:`MAX_FILES`): then save it the
    ordinary way."""
    dead = np.unique(np.asarray([] if dead is None else dead, dtype=np.int64))
    ids = np.empty(0, dtype=np.int64) if patch_ids is None else np.asarray(patch_ids, np.int64)
    if np.unique(ids).size != ids.size:
        raise ValueError(f"table {name}: a row is patched twice")
    n_append = 0 if append is None else _length(append)
    n_rows = table.rows - int(dead.size) + n_append
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= table.physical):
        raise ValueError(f"table {name}: a patched row is not one of its rows")
    if dead.size and (int(dead.min()) < 0 or int(dead.max()) >= table.physical):
        raise ValueError(f"table {name}: a removed row is not one of its rows")
    if patch_values is not None and _length(patch_values) != ids.size:
        raise ValueError(f"table {name}: {ids.size} patched rows, {_length(patch_values)} values")
    if table.kind == "npy":
        first = np.load(reader.path(table.segments[0][0]), mmap_mode="r", allow_pickle=False)
        for part in (append, patch_values):
            if part is not None and _length(part) and not _compatible("npy", part, first):
                raise ValueError(f"table {name}: new rows differ from the saved ones in type")
    return _write_delta(
        writer,
        reader,
        name,
        table,
        append=append if n_append else None,
        patch_ids=ids,
        patch_values=patch_values if ids.size else None,
        dead=dead,
        n_rows=n_rows,
    )


Layout = tuple[
    list[tuple[str, int]],
    list[tuple[str, int]],
    list[tuple[str, str, int]],
    list[tuple[str, str, int]],
]


def _delta_layout(
    table: Table, n_append: int, n_patch: int, n_dead: int, n_rows: int
) -> Layout | None:
    """The files ``table`` has after a delta (segments with a placeholder for the appended
    one, the small segments it absorbs, patches likewise), or None when the table should be
    written again as one segment instead."""
    m = table.rows - n_dead  # base rows kept
    if m - n_patch < REUSE_FRACTION * n_rows:
        return None  # little of the base is left: a new segment is smaller and simpler
    if table.n_dead + n_dead + table.patched + n_patch > max(
        COMPACT_MIN_ROWS, COMPACT_FRACTION * n_rows
    ):
        return None
    segments = list(table.segments)
    merged_segments: list[tuple[str, int]] = []
    if n_append:
        size = n_append
        while len(segments) > 1 and segments[-1][1] <= 2 * size:
            merged_segments.insert(0, segments.pop())
            size += merged_segments[0][1]
        segments.append(("", size))  # its place: named when written
    patches = list(table.patches)
    merged_patches: list[tuple[str, str, int]] = []
    if n_patch:
        size = n_patch
        while patches and patches[-1][2] <= 2 * size:
            merged_patches.insert(0, patches.pop())
            size += merged_patches[0][2]
        patches.append(("", "", 0))  # its place: named and counted when written
    if len(segments) + len(patches) > MAX_FILES:
        return None
    return segments, merged_segments, patches, merged_patches


def delta_fits(table: Table, *, n_append: int = 0, n_patch: int = 0, n_dead: int = 0) -> bool:
    """Whether :func:`write_delta` would write ``table`` as a delta of this size (rather than
    return None): for columns that must all take theirs or all be saved whole."""
    n_rows = table.rows - n_dead + n_append
    return _delta_layout(table, n_append, n_patch, n_dead, n_rows) is not None


def _write_delta(
    writer: IndexWriter,
    reader: IndexReader,
    name: str,
    table: Table,
    *,
    append: Rows | None,
    patch_ids: np.ndarray,
    patch_values: Rows | None,
    dead: np.ndarray,
    n_rows: int,
) -> Table | None:
    """The files of table ``name`` after ``table`` gains ``append`` (merged with the small
    segments before it), the patch ``patch_ids`` = ``patch_values`` (merged with the small
    patches before it) and the tombstones ``dead``; None (nothing written) when the table
    should be one new segment instead. ``n_rows``: its logical rows after."""
    kind = table.kind
    where = f"{reader.folder} table {name}"
    changed = int(patch_ids.size)
    n_append = 0 if append is None else _length(append)
    layout = _delta_layout(table, n_append, changed, int(dead.size), n_rows)
    if layout is None:
        return None
    segments, merged_segments, patches, merged_patches = layout
    if append is not None:
        segments.append((segment_file(name, writer.generation, kind), segments.pop()[1]))
    old_dead = _dead_rows(reader, table, where) if dead.size and table.n_dead else None
    all_dead = dead if old_dead is None else np.union1d(old_dead, dead)
    n_dead = table.n_dead + int(dead.size)
    if all_dead.size != n_dead and dead.size:
        raise ValueError(f"table {name}: a removed row was removed before")

    if append is not None:
        tail = [
            _load_npy(reader, f) if kind == "npy" else _load_jsonl(reader, f)
            for f, _ in merged_segments
        ]
        _write_rows(writer, segments[-1][0], kind, _concat(kind, [*tail, append]))
    if changed:
        assert patch_values is not None
        ids = [
            np.asarray(_load_npy(reader, rf, mmap=False), dtype=np.int64)
            for rf, _, _ in merged_patches
        ]
        values: list[Rows] = [
            _load_npy(reader, vf, mmap=False) if kind == "npy" else _load_jsonl(reader, vf)
            for _, vf, _ in merged_patches
        ]
        all_ids = np.concatenate([*ids, patch_ids])
        all_values = _concat(kind, [*values, patch_values])
        # a later patch wins: keep each row's last value
        last = all_ids.size - 1 - np.unique(all_ids[::-1], return_index=True)[1]
        last.sort()
        rf = segment_file(name, writer.generation, "patch-rows.npy")
        vf = segment_file(name, writer.generation, f"patch.{kind}")
        writer.save_array(rf, all_ids[last])
        _write_rows(
            writer,
            vf,
            kind,
            all_values[last] if kind == "npy" else [all_values[i] for i in last.tolist()],
        )
        patches[-1] = (rf, vf, int(last.size))
    dead_file = table.dead
    if dead.size:
        dead_file = segment_file(name, writer.generation, "dead.npy")
        writer.save_array(dead_file, all_dead.astype(np.int64))
    new = Table(kind, tuple(segments), tuple(patches), dead_file, n_dead, table.start)
    for f in new.files():
        if f in table.files() and not (writer.staging / f).exists():  # shared: kept once
            _keep(writer, reader, f)
    return new


def is_fresh(table: Table, name: str, generation: int) -> bool:
    """Whether ``table`` is one segment that generation ``generation`` wrote itself."""
    return len(table.segments) == 1 and table.segments[0][0] == segment_file(
        name, generation, table.kind
    )


def sorted_rows(
    old_keys: np.ndarray | None, new_keys: np.ndarray, old_head: int = 0
) -> tuple[np.ndarray, np.ndarray] | None:
    """For a table kept in order of a unique key (new rows anywhere in that order): which new
    rows to store in which order, and their ``src`` for :func:`write_table`, so rows whose key
    the base holds stay where they are stored and new keys are appended. ``old_keys``: the
    base's keys in stored order, the first ``old_head`` of them sorted. None: keys not
    unique (store it as a plain table)."""
    if new_keys.size > 1 and not bool(np.all(np.diff(new_keys) > 0)):
        return None
    if old_keys is None:
        return np.arange(new_keys.size), np.full(new_keys.size, -1, dtype=np.int64)
    order = key_order(old_keys, old_head)
    by_key = np.arange(old_keys.size) if order is None else order
    ordered = old_keys if order is None else old_keys[order]
    if ordered.size > 1 and not bool(np.all(np.diff(ordered) > 0)):
        return None
    at = np.minimum(np.searchsorted(ordered, new_keys), max(ordered.size - 1, 0))
    matched = ordered[at] == new_keys if ordered.size else np.zeros(new_keys.size, dtype=bool)
    stored = by_key[at[matched]]  # the base's stored row of each matched new row
    new_of_stored = np.empty(old_keys.size, dtype=np.int64)
    new_of_stored[stored] = np.flatnonzero(matched)
    kept = stored if stored.size < 2 or bool(np.all(np.diff(stored) > 0)) else np.sort(stored)
    rows = np.concatenate([new_of_stored[kept], np.flatnonzero(~matched)])
    src = np.concatenate([kept, np.full(int(np.count_nonzero(~matched)), -1)])
    return rows.astype(np.int64), src.astype(np.int64)


def key_order(keys: np.ndarray, head: int) -> np.ndarray | None:
    """The order that sorts stored rows by their unique ``keys``, given that the first
    ``head`` are sorted already (the base segment): the rest sorted and merged in, O(n + d log
    d). None: they are in order."""
    if keys.size < 2 or bool(np.all(np.diff(keys) >= 0)):
        return None  # in order already (also what a plain table of equal keys holds)
    h = keys[:head]
    if head > 1 and not bool(np.all(np.diff(h) > 0)):
        return np.argsort(keys, kind="stable")
    if head == keys.size:
        return None
    tail = head + np.argsort(keys[head:], kind="stable")
    return np.insert(np.arange(head), np.searchsorted(h, keys[tail]), tail)


def head_rows(reader: IndexReader, table: Table, where: str) -> int:
    """Logical rows that come from the first segment."""
    if table.n_dead == 0:
        return table.segments[0][1]
    dead = _dead_rows(reader, table, where)
    return table.segments[0][1] - int(np.count_nonzero(dead < table.segments[0][1]))


def mapped_jsonl(reader: IndexReader, table: Table, where: str) -> MappedLines:
    """The physical rows of a ``jsonl`` table, memory-mapped and decoded only when read
    (:class:`psirag.rows.MappedLines`): its segments and patches with their line starts
    (found with numpy for files saved without :func:`line_starts_file`)."""
    from psirag.rows import MappedLines

    if table.kind != "jsonl":
        raise IndexFormatError(f"{where}: a table of {table.kind} rows, not JSON lines; rebuild")
    listed = reader.manifest.get("files", {})

    def starts(name: str) -> np.ndarray | None:
        saved = line_starts_file(name)
        return _load_npy(reader, saved) if saved in listed else None

    segments = [(reader.path(f), n, starts(f), f"{where} ({f})") for f, n in table.segments]
    patches = [
        (
            np.asarray(_load_npy(reader, rows_file, mmap=False), dtype=np.int64),
            reader.path(values_file),
            starts(values_file),
            f"{where} ({values_file})",
        )
        for rows_file, values_file, _ in table.patches
    ]
    for (ids, _, _, label), (_, _, n) in zip(patches, table.patches, strict=True):
        if ids.ndim != 1 or ids.size != n:
            raise IndexFormatError(f"{label}: {ids.size} patched rows, the manifest says {n}")
    return MappedLines(segments, patches)


def tables_of(manifest: dict[str, Any], where: str) -> dict[str, Table]:
    """The ``tables`` of a format-3 manifest (empty for older formats)."""
    raw = manifest.get("tables")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise IndexFormatError(f"{where}: the manifest's tables are not an object; rebuild it")
    return {k: Table.from_json(v, f"{where} table {k}") for k, v in raw.items()}


__all__ = [
    "COMPACT_FRACTION",
    "SEGMENTS_DIR",
    "Table",
    "dead_rows",
    "delta_fits",
    "head_rows",
    "is_fresh",
    "keep_table",
    "key_order",
    "line_starts_file",
    "live_rows",
    "logical_of",
    "mapped_jsonl",
    "physical_of",
    "read_logical",
    "read_physical",
    "segment_file",
    "segment_generation",
    "sorted_rows",
    "tables_of",
    "values_at",
    "write_delta",
    "write_table",
]
