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

from collections.abc import Sequence
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
        if table.kind == "npy":
            rows[ids] = values
        else:
            for i, v in zip(ids.tolist(), values, strict=True):
                rows[i] = v
    return rows


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


def _write_rows(writer: IndexWriter, path: str, kind: Kind, rows: Rows) -> None:
    if kind == "npy":
        writer.save_array(path, np.asarray(rows))
    else:
        writer.save_jsonl(path, rows)
        _save_line_starts(writer, path, _length(rows))


def line_starts_file(path: str) -> str:
    """The file beside a ``jsonl`` segment or patch holding where each of its lines starts
    (int64, rows + 1 entries, the last its size), so a load maps the rows without reading
    them (:class:`psirag.rows.MappedLines`); a file saved before it has none and a load finds
    the line ends with numpy."""
    return f"{path}.starts.npy"


def _save_line_starts(writer: IndexWriter, path: str, rows: int) -> None:
    """Write :func:`line_starts_file` of the ``jsonl`` file just written (read back from the
    page cache: no second encoding of the rows)."""
    from psirag.rows import line_starts

    data = (writer.staging / path).read_bytes()
    writer.save_array(line_starts_file(path), line_starts(data, rows, str(writer.staging / path)))


def _keep(writer: IndexWriter, reader: IndexReader, name: str) -> None:
    """Keep the base's file ``name`` (and its line starts, where it has them)."""
    writer.keep(name)
    starts = line_starts_file(name)
    if starts in reader.manifest.get("files", {}):
        writer.keep(starts)


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
    ``fresh_rows``: the rows to write then, in another order than ``rows``)."""
    n = _length(rows)
    generation = writer.generation

    def fresh() -> tuple[Table, np.ndarray]:
        if prewritten is not None:
            return Table(kind, ((prewritten[0], n),), start=prewritten[1]), np.arange(n)
        seg = segment_file(name, generation, kind)
        _write_rows(writer, seg, kind, rows if fresh_rows is None else fresh_rows)
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
    changed = np.empty(0, dtype=np.int64)
    if compare and m:
        old = read_logical(reader, table, where)
        if not _compatible(kind, rows, old):
            return fresh()
        changed = _changed(kind, rows, old, kept)
    elif kind == "npy" and n > m:
        first = np.load(reader.path(table.segments[0][0]), mmap_mode="r", allow_pickle=False)
        if not _compatible(kind, np.asarray(rows), first):
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
    n_dead = table.n_dead + int(removed.size)
    if n_dead + table.patched + changed.size > max(COMPACT_MIN_ROWS, COMPACT_FRACTION * n):
        return fresh()

    segments = list(table.segments)
    if n > m:  # appended rows: one segment, merged with the small ones before it
        tail = [_take(rows, m, n)]
        size = n - m
        while len(segments) > 1 and segments[-1][1] <= 2 * size:
            f, k = segments.pop()
            part = _load_npy(reader, f) if kind == "npy" else _load_jsonl(reader, f)
            tail.insert(0, part)
            size += k
        seg = segment_file(name, generation, kind)
        _write_rows(writer, seg, kind, _concat(kind, tail))
        segments.append((seg, size))
    patches = list(table.patches)
    if changed.size:
        ids = [physical[changed]]
        values = [rows[changed] if kind == "npy" else [rows[i] for i in changed.tolist()]]
        size = int(changed.size)
        while patches and patches[-1][2] <= 2 * size:
            rf, vf, k = patches.pop()
            ids.insert(0, np.asarray(_load_npy(reader, rf, mmap=False), dtype=np.int64))
            values.insert(
                0, _load_npy(reader, vf, mmap=False) if kind == "npy" else _load_jsonl(reader, vf)
            )
            size += k
        all_ids = np.concatenate(ids)
        all_values = _concat(kind, values)
        # a later patch wins: keep each row's last value
        last = all_ids.size - 1 - np.unique(all_ids[::-1], return_index=True)[1]
        last.sort()
        rf = segment_file(name, generation, "patch-rows.npy")
        vf = segment_file(name, generation, f"patch.{kind}")
        writer.save_array(rf, all_ids[last])
        _write_rows(
            writer,
            vf,
            kind,
            all_values[last] if kind == "npy" else [all_values[i] for i in last.tolist()],
        )
        patches.append((rf, vf, int(last.size)))
    dead = table.dead
    if removed.size:
        old_dead = _dead_rows(reader, table, where)
        dead = segment_file(name, generation, "dead.npy")
        writer.save_array(dead, np.union1d(old_dead, removed).astype(np.int64))
    new = Table(kind, tuple(segments), tuple(patches), dead, n_dead, table.start)
    if len(segments) + len(patches) > MAX_FILES:
        return fresh()
    for f in new.files():
        if f in table.files() and not (writer.staging / f).exists():  # shared: kept once
            _keep(writer, reader, f)
    return new, physical


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
    "head_rows",
    "is_fresh",
    "key_order",
    "line_starts_file",
    "live_rows",
    "mapped_jsonl",
    "read_logical",
    "read_physical",
    "segment_file",
    "sorted_rows",
    "tables_of",
    "write_table",
]
