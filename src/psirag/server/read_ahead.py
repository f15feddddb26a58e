"""The served index's mapped files read into the page cache by a server's warm-up (issue 24).

Why: a loaded index maps its large arrays (the phrase table's, the node vectors, the leaf
graph's saved view, the BM25 parts); a write reads a few thousand of their rows at random.
When the files are not in the page cache (after a reboot, or when other work evicted them),
each of those rows is a page fault that reads from disk, and the kernel reads up to the
device's read-ahead window around it (8 MB here): the first ``POST /documents`` after a start
at 1M chunks read about 800 MB that way (``p_best``, the node vectors, the leaf graph), 1.5-2.2
s against 0.6-1 s for the next ones. ``madvise``/``posix_fadvise(WILLNEED)`` do not help:
the kernel caps such advice at the same window, so each file got its first 8 MB.

So the warm-up reads each file through once, sequentially, into one small buffer that it
reuses: the pages land in the page cache (shared, evictable), the process's memory does not
grow, and the reads release the GIL; they pause while a write is under way (its own reads come
first). Each file is read once per process (by its inode: the
next generation's warm-up, after a write, finds the same files and skips them). Bounded: the
files are read only while their total stays under ``share`` of the memory the system has
available; the rest are skipped and logged. JSON-lines row tables are left out: a search or
a write reads a few of their lines, by offset.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("psirag.server")

READ_AHEAD_SHARE = 0.5
"""The largest share of the system's available memory the warm-up reads into the page cache
(``psirag serve --read-ahead-share``; 0: read nothing)."""

BUFFER_BYTES = 1 << 20
"""The one buffer each file is read through."""

SKIPPED_SUFFIXES = (".jsonl",)
"""Mapped files not read ahead: row tables read a line at a time, by offset."""

MAPS = Path("/proc/self/maps")
MEMINFO = Path("/proc/meminfo")

_read: set[tuple[int, int]] = set()
"""The (device, inode) of each file read ahead by this process."""
_lock = threading.Lock()
"""One read-ahead at a time (a second, for newer data, then skips what the first read)."""
_writes = threading.Condition()
_writing = [0]
"""Writes under way (:func:`writing`): the reads wait for them to end."""


def mapped_files(folder: str | Path) -> list[tuple[Path, int, int]]:
    """The files under ``folder`` that this process maps, as (path, device, inode), one entry
    per file, in the order they were mapped (none where ``/proc/self/maps`` does not exist)."""
    root = os.path.join(os.path.realpath(folder), "")
    try:
        lines = MAPS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: dict[tuple[int, int], Path] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith(root) or parts[5].endswith(" (deleted)"):
            continue
        major, _, minor = parts[3].partition(":")
        try:
            key = (os.makedev(int(major, 16), int(minor, 16)), int(parts[4]))
        except ValueError:
            continue
        out.setdefault(key, Path(parts[5]))
    return [(path, dev, ino) for (dev, ino), path in out.items()]


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where it cannot be read)."""
    try:
        for line in MEMINFO.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """A write under way: the reads ahead wait between two buffers until it ends, so that its
    own reads (the rows it gathers) do not queue behind theirs on the disk; what it reads
    cold it reads as without a warm-up."""
    with _writes:
        _writing[0] += 1
    try:
        yield
    finally:
        with _writes:
            _writing[0] -= 1
            _writes.notify_all()


def _wait_for_writes(stop: threading.Event | None) -> float:
    """Wait while a write is under way (or until ``stop``); the seconds waited."""
    if not _writing[0]:
        return 0.0
    t0 = time.perf_counter()
    with _writes:
        while _writing[0] and not (stop is not None and stop.is_set()):
            _writes.wait(0.1)
    return time.perf_counter() - t0


def read_ahead(
    folder: str | Path, *, share: float = READ_AHEAD_SHARE, stop: threading.Event | None = None
) -> dict[str, Any]:
    """Read the files of ``folder`` this process maps (see :func:`mapped_files`) and has not
    read before into the page cache, while their total stays under ``share`` of the available
    memory; stop between two buffers once ``stop`` is set. What it did, for ``GET /index``:
    the files read (by their path under ``folder``), bytes, seconds, those skipped and why
    (``budget``: over the bound; ``stopped``) and the seconds it waited for writes (see
    :func:`writing`)."""
    t0 = time.perf_counter()
    root = Path(os.path.realpath(folder))
    done: dict[str, Any] = {"files": [], "bytes": 0, "seconds": 0.0, "skipped": []}
    waited = [0.0]
    with _lock:
        todo = []
        for path, dev, ino in mapped_files(root):
            if (dev, ino) in _read or path.name.endswith(SKIPPED_SUFFIXES):
                continue
            try:
                size = path.stat().st_size
            except OSError:  # removed since it was mapped (a retired generation)
                continue
            todo.append((path, (dev, ino), size))
        memory = available_memory()
        budget = None if memory is None else int(max(0.0, share) * memory)
        total = 0
        for path, key, size in todo:
            name = path.relative_to(root).as_posix()
            if budget is not None and total + size > budget:
                done["skipped"].append(name)
                continue
            if stop is not None and stop.is_set():
                done["stopped"] = True
                break
            read = _read_file(path, stop, waited)
            if read is None:  # stopped within the file, or it could not be read
                if stop is not None and stop.is_set():
                    done["stopped"] = True
                    break
                continue
            total += size
            _read.add(key)
            done["files"].append(name)
            done["bytes"] += read
        if done["skipped"]:
            log.info(
                "warm-up: %d mapped file(s) of %s not read ahead (over %.0f%% of the %s MB "
                "available): %s",
                len(done["skipped"]),
                root,
                100 * share,
                "?" if memory is None else memory // 1_000_000,
                ", ".join(done["skipped"]),
            )
    done["seconds"] = round(time.perf_counter() - t0, 3)
    done["waited_for_writes_s"] = round(waited[0], 3)
    return done


def _read_file(
    path: Path, stop: threading.Event | None, waited: list[float] | None = None
) -> int | None:
    """Read ``path`` through one buffer (the reads release the GIL), pausing while a write is
    under way (the seconds added to ``waited``); its bytes, or None when ``stop`` was set
    before the end or the file could not be read."""
    buffer = bytearray(BUFFER_BYTES)
    view = memoryview(buffer)
    n = 0
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                if _writing[0]:
                    paused = _wait_for_writes(stop)
                    if waited is not None:
                        waited[0] += paused
                if stop is not None and stop.is_set():
                    return None
                got = f.readinto(view)
                if not got:
                    return n
                n += got
    except OSError as exc:
        log.debug("warm-up: could not read %s ahead: %s", path, exc)
        return None


def forget() -> None:
    """Forget which files were read (tests)."""
    with _lock:
        _read.clear()


__all__ = [
    "BUFFER_BYTES",
    "READ_AHEAD_SHARE",
    "available_memory",
    "forget",
    "mapped_files",
    "read_ahead",
    "writing",
]
