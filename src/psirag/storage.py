"""A saved index is a folder of immutable generations behind one atomic pointer.

Layout (format versions 2 and 3; 3 stores the data in shared segments, see
:mod:`psirag.segments`)::

    DIR/
      manifest.json        the pointer: names the current generation and carries a copy of its
                           manifest (plus that manifest's sha256); replaced by one os.replace
      lock                 the writer lock (flock); holds the pid of the writer that has it
      generations/
        000006/            the previous generation, kept for readers still using it
        000007/            manifest.json (every file with its size and sha256) and the data
          .readers         readers hold a shared flock on it while they load

Why: a save writes a whole new generation in a staging folder (``generations/.partial-*``),
fsyncs it, renames it to its number and only then switches the pointer, so a reader sees either
the old generation or the new one, never a mix, and a save killed at any point leaves the last
published generation intact. One writer at a time (an exclusive flock on ``lock``); a second
gets :class:`IndexLockedError`. Unchanged files can be hard-linked from the base generation
(:meth:`IndexWriter.keep`) instead of being rewritten. Old generations and the leftovers of a
killed save are removed by the next writer (:meth:`IndexStore.gc`), never one that a reader is
loading, and only folders that carry this index's marker (:mod:`psirag.ownership`): nothing a
user put beside or inside the index is ever deleted. Folders in format version 1 (everything
flat in ``DIR``) are read as they are; the next save writes the new layout and removes the old
flat files.

No pickle anywhere: arrays are plain .npy (``allow_pickle=False``), text is JSON.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

import numpy as np

from psirag import formats, ownership
from psirag.errors import IndexFormatError, IndexLockedError, IndexTargetError
from psirag.oserrors import of_the_machine, with_path
from psirag.rows import ArrayParts, joined_values, load_npy

FORMAT_NAME = "psirag-index"
FORMAT_VERSION = 5
"""Format 3 keeps the data of a generation in segments shared with other generations
(:mod:`psirag.segments`); the layout of generations is format 2's. Format 4 (issue 24) is
format 3 with files a format-3 reader misreads: BM25 postings in their format 2 (files named
by content, kept between generations), the HNSW graph's delta and tombstones, and the
abstracts' drift as (node, count) pairs. The version tells a psirag that reads only up to 3
to say "upgrade psirag" instead of failing on a file it does not know. A save on top of a
format-3 generation writes format 4 (it migrates on write); format 3 still loads. Format 5
keeps the inner nodes' arrays (``tree/inner_*.npy`` in formats 3 and 4, written whole by each
save) as segment tables that a save patches; formats 3 and 4 still load."""
LEGACY_VERSION = 1
READABLE_VERSIONS = (LEGACY_VERSION, 2, 3, 4, FORMAT_VERSION)
MANIFEST = "manifest.json"
GENERATIONS = "generations"
LOCK = "lock"
READERS = ".readers"
DEFAULT_KEEP = 2
"""Generations kept by garbage collection: the current one and the one before it."""
POINTER_TMP = ".manifest.json.tmp-"

Verify = Literal["none", "size", "full"]
T = TypeVar("T")

_GEN_RE = re.compile(r"^\d{6}$")
_TEMP_RE = re.compile(r"^\.(partial|trash)-")
_POINTER_TMP_RE = re.compile(r"^\.manifest\.json\.tmp-")

_hook: Callable[[str], None] | None = None
"""Test hook called at named points of a save (``file:NAME``, ``staged``, ``renamed``,
``before-pointer``, ``after-pointer``, ``after-gc``), so tests can kill the process there."""


def _checkpoint(point: str) -> None:
    if _hook is not None:
        _hook(point)


# ---------------------------------------------------------------------------- small helpers
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


FSYNC_THREADS = 16
"""Files a commit fsyncs at once. On this machine's disk 71 small files (a one-document add
at 1M chunks) took 0.24-0.54 s one after another and 0.014-0.032 s from 8 threads: fsyncs
in flight together share the file system's journal commits."""


def _fsync_files(paths: list[Path]) -> None:
    """fsync every file of ``paths``, several at once (the first error is raised, after
    the others finished)."""
    if len(paths) <= 2:
        for path in paths:
            _fsync_file(path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(FSYNC_THREADS, len(paths))) as pool:
        short = [p for p in pool.map(_fsync_unless_short, paths) if p is not None]
    for path in short:  # a process near its descriptor limit: one file open at a time
        _fsync_file(path)


def _fsync_unless_short(path: Path) -> Path | None:
    """fsync ``path``; give it back when no descriptor was free to open it (several threads
    hold one each), so that it is done again alone."""
    try:
        _fsync_file(path)
    except OSError as e:
        if e.errno != errno.EMFILE:
            raise
        return path
    return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _encoded(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _with_last_key(raw: bytes, payload: dict[str, Any]) -> bytes | None:
    """What :func:`_encoded` makes of ``payload``, from ``raw``, the encoding of ``payload``
    without its last key (the pointer: the generation's manifest and its checksum), without
    encoding the rest again (a pure-Python pass over a manifest of a few hundred files);
    None when ``raw`` does not end as such an encoding does."""
    if len(payload) < 2 or not raw.endswith(b"\n}\n"):
        return None
    key, value = next(reversed(payload.items()))
    last = json.dumps({key: value}, indent=2, ensure_ascii=False)  # '{\n  "key": value\n}'
    return raw[: -len(b"\n}\n")] + b"," + last[1:].encode("utf-8") + b"\n"


def _write_json(path: Path, payload: dict[str, Any], *, encoded: bytes | None = None) -> bytes:
    """``payload`` as indented JSON, written and synced (``encoded``: its bytes, made
    already)."""
    data = _encoded(payload) if encoded is None else encoded
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return data


def _generation_name(number: int) -> str:
    return f"{number:06d}"


def check_file_name(name: object, where: Path | str) -> str:
    """A manifest file name must be a plain relative path that stays inside the folder."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        raise IndexFormatError(f"{where}: manifest lists a bad file name {name!r}; rebuild it")
    pure = PurePosixPath(name)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in name.split("/")):
        raise IndexFormatError(
            f"{where}: manifest file name {name!r} points outside the index folder; an index "
            "may only name files inside itself (this one is corrupted or crafted)"
        )
    return name


def _resolve(path: Path) -> Path:
    """``path.resolve()``, or its absolute form where links loop (resolve raises then)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def _inside(folder: Path, name: str) -> Path:
    """``folder/name`` after checking that no symlink takes it outside ``folder`` (``name``
    passed :func:`check_file_name`: no ``..``). Where no part of ``name`` is a link, that is
    a few ``lstat`` calls; only a link is resolved (a load checks every file of a generation)."""
    path = folder / name
    part = folder
    for piece in name.split("/"):
        if piece in ("", ".", ".."):
            break
        part = part / piece
        try:
            if stat.S_ISLNK(os.lstat(part).st_mode):
                break
        except OSError:
            break  # missing or unreadable: the full check below says what
    else:
        return path
    root = _resolve(folder)
    try:
        real = path.resolve()
    except (RuntimeError, OSError) as exc:
        raise IndexFormatError(f"{folder}: {name} is a broken or looping link ({exc})") from None
    if real != root and root not in real.parents:
        raise IndexFormatError(
            f"{folder}: {name} is a link to {real}, outside the index folder; refusing to read it"
        )
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        if of_the_machine(exc):
            raise with_path(exc, path) from exc
        raise IndexFormatError(f"cannot read {path} ({exc.strerror or exc})") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexFormatError(f"{path} is corrupted ({exc}); rebuild the index") from exc
    if not isinstance(data, dict):
        raise IndexFormatError(f"{path} does not describe a psirag index; rebuild the index")
    return data


def _looks_like_our_lock(path: Path) -> bool:
    """Our lock file is empty or holds a pid and a newline."""
    try:
        if not path.is_file() or path.stat().st_size > 24:
            return False
        return re.fullmatch(rb"\d*\n?", path.read_bytes()) is not None
    except OSError:
        return False


class _Vanished(IndexFormatError):
    """A file of the generation being read disappeared (it was replaced while we read)."""


# ---------------------------------------------------------------------------- the lock
class WriterLock:
    """The one-writer lock: an exclusive flock on ``DIR/lock``, released on close or exit."""

    def __init__(self, folder: Path, *, wait: float = 0.0) -> None:
        self.path = folder / LOCK
        try:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise IndexTargetError(
                f"cannot open the writer lock {self.path} ({exc.strerror or exc}); "
                "you need write access to the index folder to change it"
            ) from None
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    self.close()
                    raise
                if time.monotonic() >= deadline:
                    pid = self._holder()
                    self.close()
                    who = f"pid {pid}" if pid else "pid unknown"
                    raise IndexLockedError(
                        f"index {folder} is locked by another writer ({who}); wait for it to "
                        "finish and try again (the lock goes away when that process exits)"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def _holder(self) -> int | None:
        try:
            text = self.path.read_text(encoding="utf-8").strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> WriterLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------- the store
_REMOVING: set[str] = set()
"""Trash folders that a background thread of this process is deleting (see
:meth:`IndexStore.gc`); a cleanup leaves them to it."""
_REMOVING_LOCK = threading.Lock()


def _being_removed(path: Path) -> bool:
    with _REMOVING_LOCK:
        return str(path) in _REMOVING


def _remove_in_background(trash: Path) -> None:
    """Delete a renamed-away generation on a daemon thread (its marker last, so that a
    process that exits first leaves it for the next cleanup)."""
    key = str(trash)
    with _REMOVING_LOCK:
        _REMOVING.add(key)

    def run() -> None:
        try:
            ownership.remove_marked(trash)
        except OSError:
            pass  # left for the next writer's cleanup
        finally:
            with _REMOVING_LOCK:
                _REMOVING.discard(key)

    threading.Thread(target=run, name="psirag-gc", daemon=True).start()


class IndexStore:
    """One index folder: its state, its lock, its generations, readers and writers."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @property
    def generations_dir(self) -> Path:
        return self.folder / GENERATIONS

    # -------------------------------------------------------------- what is there
    def state(self) -> str:
        """``missing``, ``file``, ``empty``, ``index`` (format 2), ``legacy`` (format 1),
        ``newer`` (a later format), ``badversion`` (a format_version that is no whole number
        of at least 1), ``pending`` (a first save that never finished) or
        ``foreign`` (anything else: never written over)."""
        p = self.folder
        if not p.exists():
            return "file" if p.is_symlink() else "missing"
        if not p.is_dir():
            return "file"
        entries = set(os.listdir(p))
        if not entries:
            return "empty"
        if MANIFEST in entries:
            try:
                manifest = _read_json(p / MANIFEST)
            except (IndexFormatError, OSError):
                return "foreign"
            if manifest.get("format") != FORMAT_NAME:
                return "foreign"
            version = manifest.get("format_version")
            kind = formats.classify(version, READABLE_VERSIONS)
            if kind != "ok":
                return "newer" if kind == "newer" else "badversion"
            return "legacy" if version == LEGACY_VERSION else "index"
        ours = {LOCK, GENERATIONS}
        if not all(e in ours or _POINTER_TMP_RE.match(e) for e in entries):
            return "foreign"
        if LOCK in entries and not _looks_like_our_lock(p / LOCK):
            return "foreign"  # a file of the user's that happens to be called "lock"
        gens = p / GENERATIONS
        if gens.exists():
            if not gens.is_dir():
                return "foreign"
            if not all(
                _GEN_RE.match(e) or _TEMP_RE.match(e) or e.startswith(ownership.OWNER)
                for e in os.listdir(gens)
            ):
                return "foreign"
        return "pending"

    def current(self) -> int | None:
        """The published generation the pointer names (None: format 1 or no index)."""
        if self.state() != "index":
            return None
        return self._pointer()[0]

    def generations(self) -> list[int]:
        """Every generation folder on disk, oldest first (published or not)."""
        if not self.generations_dir.is_dir():
            return []
        return sorted(int(e) for e in os.listdir(self.generations_dir) if _GEN_RE.match(e))

    def _pointer(self) -> tuple[int, dict[str, Any]]:
        mpath = self.folder / MANIFEST
        pointer = _read_json(mpath)
        number = pointer.get("generation")
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 10**6:
            raise IndexFormatError(f"{mpath} names no valid generation; rebuild the index")
        return number, pointer

    # -------------------------------------------------------------- can we write here
    def check_writable(self) -> None:
        """Refuse, before any work, a target that is a file, a folder that is not a psirag
        index, the current folder or one above it, or a place this process cannot write."""
        state = self.state()
        where = self.folder
        if state == "file":
            raise IndexTargetError(
                f"{where} exists and is not a folder; choose another folder for the index (--out)"
            )
        if state == "foreign":
            why = (
                f"its {MANIFEST} does not describe a psirag index"
                if (where / MANIFEST).exists()
                else "it holds files that are not an index's"
            )
            raise IndexTargetError(
                f"{where} is a folder that is not a psirag index ({why}); refusing to write "
                "over it. Choose an empty or new folder for the index (--out)."
            )
        if state in ("newer", "badversion"):
            version = _read_json(where / MANIFEST).get("format_version")
            raise IndexTargetError(
                f"{where}: {formats.problem(version, READABLE_VERSIONS)}; psirag will not write "
                "over it: choose another folder (--out)"
                + (", or upgrade psirag" if state == "newer" else "")
            )
        if state not in ("index", "legacy"):
            real = _resolve(where)
            cwd = _resolve(Path.cwd())
            if real == cwd or real in cwd.parents:
                raise IndexTargetError(
                    f"{where} is the current folder or one above it; give the index a folder "
                    "of its own, e.g. --out ./my-index"
                )
        probe_at = where
        while not probe_at.exists():
            if probe_at.parent == probe_at:
                break
            probe_at = probe_at.parent
        if not probe_at.is_dir():
            raise IndexTargetError(
                f"cannot create {where}: {probe_at} is a file, not a folder; choose another --out"
            )
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".psirag-write-test-", dir=probe_at))
        except OSError as exc:
            raise IndexTargetError(
                f"cannot write the index to {where}: {probe_at} is not writable "
                f"({exc.strerror or exc}); choose a folder you can write to (--out)"
            ) from None

    def probe_lock(self) -> None:
        """Fail now with :class:`IndexLockedError` if another writer holds the index."""
        if (self.folder / LOCK).is_file():
            WriterLock(self.folder).close()

    def lock(self, *, wait: float = 0.0) -> WriterLock:
        """Take the writer lock (creating the folder); ``wait`` seconds before giving up."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return WriterLock(self.folder, wait=wait)

    # -------------------------------------------------------------- reading
    def open(self, generation: int | None = None, *, verify: Verify | bool = "size") -> IndexReader:
        """A reader of one generation (the current one by default); close it when done."""
        return IndexReader(self.folder, generation=generation, verify=verify)

    def read(
        self,
        fn: Callable[[IndexReader], T],
        *,
        generation: int | None = None,
        verify: Verify | bool = "size",
    ) -> T:
        """``fn(reader)`` on one generation, held against garbage collection while it runs;
        tried once more from the new pointer if a file vanished under it (a format-1 folder
        being replaced)."""
        for attempt in (0, 1):
            try:
                with self.open(generation, verify=verify) as reader:
                    return fn(reader)
            except _Vanished:
                if attempt or generation is not None:
                    raise
        raise AssertionError("unreachable")

    # -------------------------------------------------------------- writing
    def begin(
        self, *, base: int | Literal["current"] | None = "current", wait: float = 0.0
    ) -> IndexWriter:
        """A writer of the next generation (takes the lock; see :class:`IndexWriter`)."""
        return IndexWriter(self, base=base, wait=wait)

    def cleanup(self) -> list[str]:
        """Remove what killed saves of this store left (staging and trash folders, pointer temp
        files, generations never published), and only that: a folder goes only when it carries
        this store's marker, a temp file only when its name carries the store's token
        (:mod:`psirag.ownership`). Nothing beside the index folder is touched. Call with the
        writer lock held."""
        removed: list[str] = []
        current = self.current()
        gens = self.generations_dir
        token = ownership.store_token(gens, create=False) if gens.is_dir() else None
        if gens.is_dir():
            for entry in sorted(os.listdir(gens)):
                path = gens / entry
                if _being_removed(path):
                    continue  # this process's background removal has it
                orphan = _GEN_RE.match(entry) and (current is None or int(entry) > current)
                if not (_TEMP_RE.match(entry) or orphan):
                    continue
                if ownership.made_here(path, token):
                    ownership.remove_marked(path)
                    removed.append(f"{GENERATIONS}/{entry}")
                elif _TEMP_RE.match(entry) and ownership.remove_if_empty(path):
                    removed.append(f"{GENERATIONS}/{entry}")  # killed before it was marked
        for entry in os.listdir(self.folder):
            if ownership.temp_is_ours(entry, POINTER_TMP, token):
                with contextlib.suppress(OSError):
                    os.unlink(self.folder / entry)
                removed.append(entry)
        return removed

    def gc(self, keep: int = DEFAULT_KEEP, *, later: bool = False) -> list[int]:
        """Remove published generations older than the newest ``keep`` (at least the current
        one stays), skipping any a reader is loading. Call with the writer lock held.
        ``later``: each is renamed out of the way now and its files are deleted on a
        background thread (a generation that owns gigabytes takes seconds to delete), which
        a killed process leaves to the next writer's cleanup."""
        current = self.current()
        if current is None:
            return []
        published = [g for g in self.generations() if g <= current]
        token = ownership.store_token(self.generations_dir, create=False)
        survivors = set(published[-max(1, keep) :]) | {current}
        removed: list[int] = []
        for g in published:
            if g in survivors:
                continue
            folder = self.generations_dir / _generation_name(g)
            if not ownership.made_here(folder, token):
                if token is None or not ownership.legacy_generation(folder, g, FORMAT_NAME):
                    continue  # not provably ours: left alone
                ownership.mark(folder, token)  # ours from before markers: marked, then removed
            try:
                fd = os.open(folder / READERS, os.O_RDONLY)
            except FileNotFoundError:
                fd = None
            except OSError:
                continue
            try:
                if fd is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        continue  # a reader is loading it: try again at the next save
                trash = (
                    self.generations_dir / f".trash-{_generation_name(g)}-{uuid.uuid4().hex[:8]}"
                )
                os.rename(folder, trash)
                if later:
                    _remove_in_background(trash)
                else:
                    ownership.remove_marked(trash)
                removed.append(g)
            finally:
                if fd is not None:
                    os.close(fd)
        return removed

    def describe(self) -> dict[str, Any]:
        """Layout facts for ``psirag inspect``: format, current generation, what is on disk."""
        state = self.state()
        info: dict[str, Any] = {"layout": state}
        if state == "index":
            info.update(
                format_version=self._pointer()[1].get("format_version"),
                generation=self.current(),
                generations=self.generations(),
            )
        elif state == "legacy":
            info.update(format_version=LEGACY_VERSION, generation=None, generations=[])
        return info


# ---------------------------------------------------------------------------- reader
class IndexReader:
    """One generation of a saved index (or a format-1 folder), checked and held open.

    ``verify``: ``"size"`` (default: every listed file exists with its recorded size, and the
    generation's manifest matches the hash the pointer stores), ``"full"`` (also the sha256 of
    every file) or ``"none"``. While open, a shared lock keeps garbage collection off the
    generation; memory-mapped arrays stay valid after it is removed (POSIX).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        generation: int | None = None,
        verify: Verify | bool = "size",
    ) -> None:
        self.root = Path(folder)
        self.verify: Verify = ("full" if verify else "size") if isinstance(verify, bool) else verify
        if self.verify not in ("none", "size", "full"):
            raise ValueError(f"verify must be 'none', 'size' or 'full', not {verify!r}")
        self._fd: int | None = None
        self.generation: int | None = None
        self.legacy = False
        store = IndexStore(self.root)
        for attempt in range(3):
            try:
                self._open(store, generation)
                self._check_files()
                break
            except _Vanished:
                self.close()
                if attempt == 2 or generation is not None:
                    raise

    def _open(self, store: IndexStore, generation: int | None) -> None:
        root = self.root
        if not root.is_dir():
            raise IndexFormatError(f"{root}: no such index folder (build one with `psirag index`)")
        mpath = root / MANIFEST
        if not mpath.is_file():
            if store.state() == "pending":
                raise IndexFormatError(
                    f"{root} holds no finished index: its first save was interrupted. "
                    "Build it again with `psirag index PATH --out DIR`."
                )
            raise IndexFormatError(
                f"{root} is not a psirag index: it has no {MANIFEST}. "
                "Build one with `psirag index PATH --out DIR`."
            )
        pointer = _read_json(mpath)
        if pointer.get("format") != FORMAT_NAME:
            raise IndexFormatError(f"{mpath} does not describe a psirag index; rebuild the index")
        version = pointer.get("format_version")
        if formats.classify(version, READABLE_VERSIONS) != "ok":
            raise IndexFormatError(
                f"{root}: {formats.problem(version, READABLE_VERSIONS)}; "
                + formats.advice(version, READABLE_VERSIONS)
            )
        if version == LEGACY_VERSION:
            if generation is not None:
                raise IndexFormatError(f"{root} is in format 1 and has no generations")
            self.legacy = True
            self.folder = root
            self.manifest: dict[str, Any] = pointer
            return
        number = pointer.get("generation")
        if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 10**6:
            raise IndexFormatError(f"{mpath} names no valid generation; rebuild the index")
        if generation is not None:
            if not isinstance(generation, int) or not 0 < generation < 10**6:
                raise IndexFormatError(f"{root}: no generation {generation!r}")
            number = generation
        self.generation = number
        self.folder = root / GENERATIONS / _generation_name(number)
        try:
            self._fd = os.open(self.folder / READERS, os.O_RDONLY)
        except FileNotFoundError:
            if generation is not None and not self.folder.is_dir():
                raise IndexFormatError(
                    f"{root} has no generation {generation} (it has {store.generations()})"
                ) from None
            if not (self.folder / MANIFEST).is_file():
                raise _Vanished(
                    f"{root}: generation {number} was removed while opening it"
                ) from None
            # a copy that dropped the lock file: read it unprotected from collection
        except OSError:
            self._fd = None  # unreadable lock file: read without holding off collection
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
        gpath = self.folder / MANIFEST
        try:
            raw = gpath.read_bytes()
        except FileNotFoundError:
            raise _Vanished(f"{root}: generation {number} was removed while opening it") from None
        # the pointer may have moved on since we read it: what we hold must be what it named
        if generation is None and hashlib.sha256(raw).hexdigest() != pointer.get("manifest_sha256"):
            again = _read_json(mpath)
            if again.get("generation") != number:
                raise _Vanished(f"{root}: the index changed while opening it")
            raise IndexFormatError(
                f"{gpath} does not match the hash in {mpath}; the index is corrupted, rebuild it"
            )
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexFormatError(f"{gpath} is corrupted ({exc}); rebuild the index") from exc
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != FORMAT_NAME
            or manifest.get("generation") != number
        ):
            raise IndexFormatError(f"{gpath} does not describe generation {number}; rebuild it")
        self.manifest = manifest

    def _check_files(self) -> None:
        files = self.manifest.get("files")
        where = self.folder / MANIFEST
        if not isinstance(files, dict) or not files:
            raise IndexFormatError(f"{where} lists no files; the index is incomplete, rebuild it")
        for name, meta in files.items():
            check_file_name(name, where)
            if not isinstance(meta, dict):
                raise IndexFormatError(f"{where}: entry for {name} is not an object; rebuild it")
            p = _inside(self.folder, name)
            if self.verify == "none":
                continue
            try:
                size = p.stat().st_size if p.is_file() else None
            except OSError:
                size = None
            if size is None:
                if self.legacy and IndexStore(self.root).state() != "legacy":
                    raise _Vanished(f"{self.root} was rewritten while opening it")
                raise IndexFormatError(f"{self.folder}: {name} is missing; rebuild the index")
            if size != meta.get("bytes"):
                raise IndexFormatError(
                    f"{self.folder}: {name} has {size} bytes, the manifest says "
                    f"{meta.get('bytes')}; the index is corrupted, rebuild it"
                )
            if self.verify == "full" and sha256_file(p) != meta.get("sha256"):
                raise IndexFormatError(
                    f"{self.folder}: {name} does not match its checksum; the index is corrupted, "
                    "rebuild it"
                )

    # -------------------------------------------------------------- files
    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return dict(self.manifest["files"])

    def path(self, name: str) -> Path:
        """The path of a listed file, or of a folder holding listed files (such as ``bm25``)."""
        check_file_name(name, self.folder / MANIFEST)
        files = self.manifest["files"]
        if name not in files and not any(f.startswith(name + "/") for f in files):
            raise IndexFormatError(
                f"{self.folder}: the manifest does not list {name}; the index is incomplete, "
                "rebuild it"
            )
        return _inside(self.folder, name)

    def load_array(self, name: str, *, mmap: bool = True, private: bool = False) -> np.ndarray:
        path = self.path(name)
        try:
            return load_npy(path, mmap=mmap, private=private)
        except FileNotFoundError as exc:
            raise _Vanished(f"{self.folder}: {name} disappeared while loading ({exc})") from exc
        except (ValueError, OSError) as exc:
            if of_the_machine(exc):
                raise with_path(exc, path) from exc
            raise IndexFormatError(f"{self.folder}: cannot read {name} ({exc}); rebuild") from exc

    def read_jsonl(self, name: str) -> list[Any]:
        """Every row of a listed JSONL file, parsed at once (:func:`psirag.rows.joined_values`);
        a file that does not parse that way into one value per line is read by
        :meth:`iter_jsonl`, whose error names the bad line."""
        try:
            rows = joined_values(self.path(name).read_bytes())
        except OSError:
            rows = None
        return list(self.iter_jsonl(name)) if rows is None else rows  # which says what failed

    def iter_jsonl(self, name: str) -> Iterator[dict[str, Any]]:
        path = self.path(name)
        try:
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, start=1):
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise IndexFormatError(
                            f"{path}: line {number} is not valid JSON; the index is corrupted"
                        ) from exc
                    yield row
        except FileNotFoundError as exc:
            raise _Vanished(f"{self.folder}: {name} disappeared while loading ({exc})") from exc
        except OSError as exc:
            if of_the_machine(exc):
                raise with_path(exc, path) from exc
            raise IndexFormatError(f"cannot read {path} ({exc.strerror or exc})") from exc
        except UnicodeDecodeError as exc:
            raise IndexFormatError(f"{path} is not UTF-8 text; the index is corrupted") from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> IndexReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def read_index(
    folder: str | Path,
    fn: Callable[[IndexReader], T],
    *,
    generation: int | None = None,
    verify: Verify | bool = "size",
) -> T:
    """:meth:`IndexStore.read` for a folder: ``fn`` reads one whole generation."""
    return IndexStore(folder).read(fn, generation=generation, verify=verify)


# ---------------------------------------------------------------------------- writer
WRITE_BLOCK_BYTES = 64 << 20
"""How much of an array :meth:`IndexWriter.save_array` casts and writes at a time."""


def _write_blocks(fh: Any, part: np.ndarray, dtype: np.dtype[Any]) -> None:
    """``part`` as ``dtype`` into ``fh`` (C order), a block of rows at a time: a cast copies
    one block, not the array, and a block of a big build's spilled array leaves this
    process's memory once written (:func:`psirag.heap.page_out_spilled`)."""
    from psirag.heap import page_out_spilled

    row_bytes = max(1, part.itemsize * int(np.prod(part.shape[1:], dtype=np.int64)))
    step = max(1, WRITE_BLOCK_BYTES // row_bytes)
    for lo in range(0, part.shape[0], step):
        block = part[lo : lo + step]
        block.astype(dtype, copy=False).tofile(fh)  # (tofile writes in C order)
        page_out_spilled(block)


class IndexWriter:
    """Writes the next generation of an index and publishes it with one rename.

    ``IndexWriter(DIR)`` checks the target, takes the writer lock and opens a staging folder.
    Write each file once (:meth:`save_array`, :meth:`save_jsonl`, or your own under
    :meth:`path`), or :meth:`keep` it from the base generation (a hard link: no rewrite), then
    :meth:`commit`. :meth:`abort` (or leaving a ``with`` block by an exception) drops the
    staging folder and leaves the published index as it was.
    """

    def __init__(
        self,
        target: str | Path | IndexStore,
        *,
        base: int | Literal["current"] | None = "current",
        wait: float = 0.0,
        keep_generations: int = DEFAULT_KEEP,
        collect_later: bool = False,
    ) -> None:
        self.store = target if isinstance(target, IndexStore) else IndexStore(target)
        self.target = self.store.folder
        self.keep_generations = keep_generations
        self.collect_later = collect_later
        """Whether the commit deletes old generations' files on a background thread (a
        server: not on the request that saves)."""
        self.store.check_writable()
        created = not self.target.exists()
        self._lock: WriterLock | None = self.store.lock(wait=wait)
        self._created = created
        self._done = False
        self._published = False
        self.base: IndexReader | None = None
        self._legacy_files: list[str] = []
        self._kept: dict[str, dict[str, Any]] = {}
        # the base's file names: the manifest's listing, sorted, and each name's place in it
        self._base_index: tuple[dict[str, Any], list[str], dict[str, int]] | None = None
        try:
            self.store.check_writable()  # again, now that we hold the lock
            self.store.cleanup()
            state = self.store.state()
            if state == "legacy":
                legacy = _read_json(self.target / MANIFEST).get("files")
                if isinstance(legacy, dict):
                    self._legacy_files = [n for n in legacy if isinstance(n, str)]
            if base is not None and state in ("index", "legacy"):
                self.base = IndexReader(
                    self.target, generation=None if base == "current" else base, verify="none"
                )
            current = self.store.current() or 0
            self.generation = max([current, *self.store.generations()]) + 1
            self.store.generations_dir.mkdir(exist_ok=True)
            token = ownership.store_token(self.store.generations_dir, create=True)
            if token is None:
                raise IndexTargetError(
                    f"{self.store.generations_dir / ownership.OWNER} is not a psirag store token; "
                    "the index folder was changed by hand: rebuild it into a new folder (--out)"
                )
            self.token: str = token
            self.staging = self.store.generations_dir / (
                f".partial-{_generation_name(self.generation)}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            )
            self.staging.mkdir()
            ownership.mark(self.staging, self.token)
        except BaseException:
            self._release()
            raise

    # -------------------------------------------------------------- files
    def path(self, name: str) -> Path:
        """Where to write ``name`` (a file, or a folder to fill) inside the staging folder."""
        check_file_name(name, self.staging)
        p = self.staging / name
        if p.exists() or p.is_symlink():
            raise ValueError(f"{name} is already in this generation; write each file once")
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def save_array(self, name: str, array: np.ndarray | ArrayParts, *, spare_rows: int = 0) -> None:
        """Write ``array`` as a ``.npy`` file (an :class:`~psirag.rows.ArrayParts`: its parts
        one after another, never joined in memory); ``spare_rows``: the file holds that many
        more rows of zeros after it (a hole in the file where the filesystem has them: no disk
        used), room that a load maps copy-on-write so an update can append rows without
        copying the array (the table that lists the file says how many rows are real)."""
        if isinstance(array, ArrayParts):
            parts: Sequence[np.ndarray] = array.parts()
            dtype = np.dtype(array.dtype)
            shape: tuple[int, ...] = (len(array),)
        else:
            array = np.ascontiguousarray(array)
            parts, dtype, shape = [array], array.dtype, array.shape
        with open(self.path(name), "wb") as fh:
            if len(shape) == 0:
                np.save(fh, parts[0], allow_pickle=False)
            else:
                spare = max(spare_rows, 0)
                header = {
                    "descr": np.lib.format.dtype_to_descr(dtype),
                    "fortran_order": False,
                    "shape": (shape[0] + spare, *shape[1:]),
                }
                np.lib.format.write_array_header_1_0(fh, header)  # (what np.save writes)
                for part in parts:
                    _write_blocks(fh, np.asarray(part), dtype)
                if spare:
                    row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
                    fh.truncate(fh.tell() + spare * row_bytes)
        _checkpoint(f"file:{name}")

    def save_jsonl(self, name: str, rows: Iterable[Any], *, base_lines: int = 0) -> None:
        """Write ``rows`` as JSON lines; ``base_lines``: first copy that many lines of the base
        generation's ``name`` unchanged (bytes copied, not encoded again)."""
        with open(self.path(name), "w", encoding="utf-8") as fh:
            if base_lines:
                fh.flush()
                self._copy_lines(name, base_lines, fh.buffer)
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False))
                fh.write("\n")
        _checkpoint(f"file:{name}")

    def _copy_lines(self, name: str, n_lines: int, out: Any) -> None:
        if self.base is None:
            raise ValueError("this writer has no base generation to copy lines from")
        raw = _inside(self.base.folder, check_file_name(name, self.staging)).read_bytes()
        end = -1
        for _ in range(n_lines):
            end = raw.find(b"\n", end + 1)
            if end < 0:
                raise IndexFormatError(
                    f"{self.base.folder}: {name} has fewer than {n_lines} lines; rebuild the index"
                )
        out.write(memoryview(raw)[: end + 1])
        out.flush()

    def keep(self, name: str) -> list[str]:
        """Carry ``name`` (a file, or every file under a folder such as ``bm25``) over from
        the base generation unchanged: hard-linked where the filesystem allows, else copied.
        Returns the file names kept."""
        if self.base is None:
            raise ValueError("this writer has no base generation to keep files from")
        check_file_name(name, self.staging)
        files = self.base.manifest["files"]
        names = self._base_names(name)
        if not names:
            raise IndexFormatError(f"{self.base.folder}: the base generation has no {name}")
        for f in names:
            src = _inside(self.base.folder, f)
            dst = self.path(f)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)
            self._kept[f] = dict(files[f])
        _checkpoint(f"file:{name}")
        return names

    def _base_names(self, name: str) -> list[str]:
        """The base generation's files that are ``name`` or lie under folder ``name``, in the
        manifest's order: found in its names sorted once (a delta save keeps a few hundred
        files one call at a time, each a scan of every name otherwise)."""
        assert self.base is not None
        files = self.base.manifest["files"]
        index = self._base_index
        if index is None or index[0] is not files:
            ranked = {f: i for i, f in enumerate(files)}
            index = self._base_index = (files, sorted(ranked), ranked)
        _, ordered, ranked = index
        found = [name] if name in ranked else []
        under = name + "/"
        # names under the folder sort together, right after the folder's own prefix
        i = bisect.bisect_left(ordered, under)
        while i < len(ordered) and ordered[i].startswith(under):
            found.append(ordered[i])
            i += 1
        return sorted(found, key=ranked.__getitem__) if len(found) > 1 else found

    def is_kept(self, name: str) -> bool:
        """Whether ``name`` was carried over from the base generation by :meth:`keep`."""
        return name in self._kept

    # -------------------------------------------------------------- publish
    def commit(self, manifest: dict[str, Any]) -> int:
        """Checksum and fsync the new files, write the generation's manifest, rename the
        generation into place and switch the pointer (one os.replace). Returns its number."""
        if self._done:
            raise ValueError("this writer has already committed or aborted")
        try:
            files: dict[str, dict[str, Any]] = {}
            written: list[tuple[str, Path]] = []
            folders: set[Path] = set()
            for p in sorted(self.staging.rglob("*")):
                if p.is_dir():
                    folders.add(p)  # (synced below, once their files are)
                    continue
                rel = p.relative_to(self.staging).as_posix()
                if rel == ownership.MARKER:
                    continue
                files[rel] = {}  # (its place in the listing: the files in path order)
                if rel in self._kept and p.stat().st_size == self._kept[rel].get("bytes"):
                    files[rel] = self._kept[rel]
                    continue
                written.append((rel, p))
            _fsync_files([p for _, p in written])
            for rel, p in written:
                files[rel] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for d in sorted(folders, reverse=True):
                _fsync_dir(d)
            body = {k: v for k, v in manifest.items() if k not in ("files", "manifest_sha256")}
            full = {
                "format": FORMAT_NAME,
                "format_version": FORMAT_VERSION,
                **body,
                "generation": self.generation,
                "files": files,
            }
            full["format"], full["format_version"] = FORMAT_NAME, FORMAT_VERSION
            raw = _write_json(self.staging / MANIFEST, full)
            (self.staging / READERS).touch()
            _fsync_dir(self.staging)
            _checkpoint("staged")
            final = self.store.generations_dir / _generation_name(self.generation)
            os.rename(self.staging, final)
            self.staging = final  # an abort from here on removes it, unless it was published
            _fsync_dir(self.store.generations_dir)
            _checkpoint("renamed")
            pointer = {**full, "manifest_sha256": hashlib.sha256(raw).hexdigest()}
            tmp = self.target / ownership.temp_name(POINTER_TMP, self.token)
            _write_json(tmp, pointer, encoded=_with_last_key(raw, pointer))
            _checkpoint("before-pointer")
            os.replace(tmp, self.target / MANIFEST)
            self._published = True
            _fsync_dir(self.target)
            _checkpoint("after-pointer")
        except BaseException:
            self.abort()
            raise
        self._done = True
        try:
            if self.base is not None:
                self.base.close()
            with contextlib.suppress(OSError):  # the new generation is published already
                self._remove_legacy_files()
                self.store.gc(self.keep_generations, later=self.collect_later)
            _checkpoint("after-gc")
        finally:
            self._release()
        return self.generation

    def _remove_legacy_files(self) -> None:
        """After a format-1 folder's first new generation: its flat files are unreferenced."""
        dirs: set[Path] = set()
        for name in self._legacy_files:
            if name == MANIFEST or name.split("/")[0] in (GENERATIONS, LOCK):
                continue
            try:
                check_file_name(name, self.target)
                path = _inside(self.target, name)
            except IndexFormatError:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
            parent = path.parent
            while parent != self.target and self.target in parent.parents:
                dirs.add(parent)
                parent = parent.parent
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()  # only if empty: nothing a user put there goes
        self._legacy_files = []

    def abort(self) -> None:
        """Drop the staging folder; a folder this writer created for nothing goes too."""
        if self._done:
            return
        self._done = True
        if self.base is not None:
            self.base.close()  # first: its descriptor may be what the removal lacks (EMFILE)
        if not self._published:
            ownership.remove_marked(self.staging)
        if self._created and self.store.state() == "pending":
            gens = self.store.generations_dir
            with contextlib.suppress(OSError):
                if gens.is_dir() and set(os.listdir(gens)) <= {ownership.OWNER}:
                    (gens / ownership.OWNER).unlink(missing_ok=True)  # ours: made by this writer
                    gens.rmdir()
            with contextlib.suppress(OSError):
                if set(os.listdir(self.target)) <= {LOCK}:
                    (self.target / LOCK).unlink(missing_ok=True)
                    self.target.rmdir()
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> IndexWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if not self._done:
            self.abort()


def check_target(out: str | Path, inputs: Sequence[str | Path] = ()) -> None:
    """Everything ``psirag index --out`` must refuse before a build starts: the checks of
    :meth:`IndexStore.check_writable`, an output folder holding one of the inputs or inside
    one, and an index another writer holds right now."""
    from psirag.index_folders import check_out_and_inputs

    check_out_and_inputs(out, inputs)
    store = IndexStore(out)
    store.check_writable()
    store.probe_lock()
