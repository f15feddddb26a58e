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

Only what is not in the page cache is read: before each window of a file, ``mincore(2)``
(:mod:`psirag.page_cache`) says which of its pages are resident, and only the runs of pages
that are not are read. A warm start (the files already cached) then reads
nothing instead of copying every page once more (5.4 GB at 1M chunks); where ``mincore`` cannot
be called (not Linux, no libc) every byte is read, as before.

The files a one-document add reads most of, at random rows (:data:`ADD_FIRST`), come first, and
the warm-up starts them at once on threads of their own (:func:`read_ahead` with ``add_first``),
beside its other work: an add sent right after a start then finds them read or being read. Those
reads go on while a write runs (they read what it needs); the others pause. They read
:data:`ADD_FIRST_THREADS` files at a time: on this project's virtual disk, three 0.24-0.49 GB
files (``p_key``, ``p_best``, ``p_df`` at 1M chunks) were read in 0.39-0.58 s on three threads
against 0.49-0.99 s one after the other, and a first add sent at once after a cold start took
0.52-0.86 s against 0.72-1.09 s (``benchmarks/bench_server_add.py --cold --first-after 0``,
BENCHMARKS.md). On a spinning disk, streams read side by side cost seeks instead.
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

from psirag.page_cache import mincore_available, missing_ranges, resident_pages
from psirag.server.mapped import available_memory, mapped_files

log = logging.getLogger("psirag.server")

READ_AHEAD_SHARE = 0.5
"""The largest share of the system's available memory the warm-up reads into the page cache
(``psirag serve --read-ahead-share``; 0: read nothing)."""

BUFFER_BYTES = 1 << 20
"""The one buffer each file is read through."""

WINDOW_BYTES = 64 << 20
"""The span of a file whose residency one ``mincore`` call checks, just before it is read (the
pages a concurrent write faulted in meanwhile are then skipped too)."""

SKIPPED_SUFFIXES = (".jsonl",)
"""Mapped files not read ahead: row tables read a line at a time, by offset."""

ADD_FIRST = (
    "node_vectors.",
    "graph.usearch",
    "keywords.p_sorted.",
    "keywords.p_key.",
    "keywords.s_key.",
    "keywords.p_best.",
    "keywords.s_pid.",
    "keywords.p_df.",
    "keywords.s_cnt.",
)
"""Name prefixes of the files a one-document add reads at random rows, the tree stage's first:
at 1M chunks, with the read-ahead off, a cold first add 20 s after the start faulted in 252 MB
of the node vectors (the tree stage's rows), 124 MB of the leaf graph (the insertion's search),
then for the keyword abstracts 348 MB of ``p_sorted`` and 428 MB of ``p_key`` (binary searches
for its phrases), 392 MB of ``s_key``, 388 MB of ``p_best``, 123 MB of ``s_pid``, 99 MB of
``p_df`` and 45 MB of ``s_cnt`` (each fault reads the device's read-ahead window around it),
and nothing else of note. They are read first, on threads of their own, as soon as the
warm-up starts."""

ADD_FIRST_THREADS = 4
"""Files of :data:`ADD_FIRST` read at once (each on its own thread) by the warm-up: a virtual
disk reads several streams faster than one."""

_read: set[tuple[int, int]] = set()
"""The (device, inode) of each file read ahead by this process."""
_lock = threading.Lock()
"""One read-ahead at a time (a second, for newer data, then skips what the first read)."""
_waited_lock = threading.Lock()
"""Guards the seconds that reads on several threads add up (:func:`_read_files`)."""
_writes = threading.Condition()
_writing = [0]
"""Writes under way (:func:`writing`): the reads wait for them to end."""


FENCED_LOOKUPS = (
    "keywords.p_sorted.",
    "keywords.s_key.",
    "keywords.s_pid.",
    "keywords.s_cnt.",
)
"""The :data:`ADD_FIRST` files an add reads only by its phrases' and forms' lookups, whose
pages it asks for itself, all at once, when the index holds the fences of its sorted keys
(``keywords.p_skey.``: see :mod:`psirag.abstracts.fence`): then they are read with the rest,
not first (1.2 GB of sequential reads at 1M chunks that would keep the disk from the add's
own). ``p_key``, ``p_best`` and ``p_df`` stay first: the keyword scoring of the refreshed nodes
reads them at every phrase of its largest nodes (nearly every page, at 1M chunks too)."""

FENCE_PREFIX = "keywords.p_skey."


def add_rank(name: str, fenced: bool = False) -> int:
    """Where a file comes in the read-ahead's order: its :data:`ADD_FIRST` position, or after
    them all (so do the :data:`FENCED_LOOKUPS` of a ``fenced`` index)."""
    base = name.rsplit("/", 1)[-1]
    if fenced and base.startswith(FENCED_LOOKUPS):
        return len(ADD_FIRST)
    for rank, prefix in enumerate(ADD_FIRST):
        if base.startswith(prefix):
            return rank
    return len(ADD_FIRST)


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
    folder: str | Path,
    *,
    share: float = READ_AHEAD_SHARE,
    stop: threading.Event | None = None,
    add_first: bool = False,
    threads: int = 1,
) -> dict[str, Any]:
    """Read the files of ``folder`` this process maps (see :func:`mapped_files`) and has not
    read before into the page cache, the :data:`ADD_FIRST` ones first, while their total stays
    under ``share`` of the available memory; only their pages that are not resident are read
    (see :func:`resident_pages`); stop between two buffers once ``stop`` is set. With
    ``add_first``, only the files a one-document add reads, and their reads go on while a write
    runs (the others pause, see :func:`writing`). ``threads``: files read at once, each on
    its own thread (the order of the result is the same).

    What it did, for ``GET /index``: the files gone through (by their path under ``folder``;
    ``resident``: those of them found wholly in the page cache, nothing read), ``bytes`` read,
    ``resident_bytes`` skipped as already cached, ``residency`` (``mincore``, or ``unknown``
    where it could not be told and every byte was read), seconds, the files skipped and why
    (``budget``: over the bound; ``stopped``) and the seconds it waited for writes (summed over
    its threads)."""
    t0 = time.perf_counter()
    root = Path(os.path.realpath(folder))
    done: dict[str, Any] = {
        "files": [],
        "resident": [],
        "bytes": 0,
        "resident_bytes": 0,
        "residency": "mincore" if mincore_available() else "unknown",
        "seconds": 0.0,
        "skipped": [],
    }
    if add_first:
        done["add_first"] = True
    waited = [0.0]
    with _lock:
        todo = []
        mapped = mapped_files(root)
        fenced = any(path.name.startswith(FENCE_PREFIX) for path, _, _ in mapped)
        for path, dev, ino in mapped:
            if (dev, ino) in _read or path.name.endswith(SKIPPED_SUFFIXES):
                continue
            if add_first and add_rank(path.name, fenced) == len(ADD_FIRST):
                continue
            try:
                size = path.stat().st_size
            except OSError:  # removed since it was mapped (a retired generation)
                continue
            todo.append((path, (dev, ino), size))
        todo.sort(key=lambda item: add_rank(item[0].name, fenced))  # stable: mapping order
        memory = available_memory()
        budget = None if memory is None else int(max(0.0, share) * memory)
        total = 0
        chosen = []
        for path, key, size in todo:
            name = path.relative_to(root).as_posix()
            if budget is not None and total + size > budget:
                done["skipped"].append(name)
                continue
            total += size
            chosen.append((path, key, name))
        results = _read_files([p for p, _, _ in chosen], stop, waited, not add_first, threads)
        for (_, key, name), got in zip(chosen, results, strict=True):
            if got is None:  # stopped within the file or before it, or it could not be read
                if stop is not None and stop.is_set():
                    done["stopped"] = True
                    break
                continue
            read, resident, known = got
            if not known:
                done["residency"] = "unknown"
            _read.add(key)
            done["files"].append(name)
            if read == 0:
                done["resident"].append(name)
            done["bytes"] += read
            done["resident_bytes"] += resident
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


def _read_files(
    paths: list[Path],
    stop: threading.Event | None,
    waited: list[float],
    pause: bool,
    threads: int,
) -> list[tuple[int, int, bool] | None]:
    """:func:`_read_file` of each of ``paths``, in their order, ``threads`` files at a time
    (None for a file not read: ``stop`` was set first, or it could not be read)."""

    def one(path: Path) -> tuple[int, int, bool] | None:
        if stop is not None and stop.is_set():
            return None
        own = [0.0]
        got = _read_file(path, stop, own, pause=pause)
        with _waited_lock:
            waited[0] += own[0]
        return got

    if threads <= 1 or len(paths) <= 1:
        return [one(path) for path in paths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(threads, len(paths)), thread_name_prefix="psirag-read") as pool:
        return list(pool.map(one, paths))


def _read_file(
    path: Path,
    stop: threading.Event | None,
    waited: list[float] | None = None,
    *,
    pause: bool = True,
) -> tuple[int, int, bool] | None:
    """Read the pages of ``path`` that are not in the page cache through one buffer (the reads
    release the GIL), a window at a time (see :data:`WINDOW_BYTES`), pausing while a write is
    under way unless not ``pause`` (the seconds added to ``waited``). (bytes read, bytes
    skipped as resident, whether residency was known for every window), or None when ``stop``
    was set before the end or the file could not be read."""
    buffer = bytearray(BUFFER_BYTES)
    view = memoryview(buffer)
    read = resident = 0
    known = True
    try:
        with open(path, "rb", buffering=0) as f:
            fd = f.fileno()
            size = os.fstat(fd).st_size
            pos = 0
            while pos < size:
                if stop is not None and stop.is_set():
                    return None
                end = min(size, pos + WINDOW_BYTES)
                pages = resident_pages(fd, pos, end - pos)
                if pages is None:
                    known = False
                    ranges = [(pos, end)]
                else:
                    ranges = missing_ranges(pages, pos, end, BUFFER_BYTES)
                wanted = sum(hi - lo for lo, hi in ranges)
                for lo, hi in ranges:
                    offset = lo
                    f.seek(offset)
                    while offset < hi:
                        if pause and _writing[0]:
                            paused = _wait_for_writes(stop)
                            if waited is not None:
                                waited[0] += paused
                        if stop is not None and stop.is_set():
                            return None
                        got = f.readinto(view[: min(BUFFER_BYTES, hi - offset)])
                        if not got:  # shorter than it was: what is left is not there
                            wanted -= hi - offset
                            break
                        offset += got
                        read += got
                resident += (end - pos) - wanted
                pos = end
        return read, resident, known
    except OSError as exc:
        log.debug("warm-up: could not read %s ahead: %s", path, exc)
        return None


def forget() -> None:
    """Forget which files were read (tests)."""
    with _lock:
        _read.clear()


__all__ = [
    "ADD_FIRST",
    "ADD_FIRST_THREADS",
    "BUFFER_BYTES",
    "FENCED_LOOKUPS",
    "FENCE_PREFIX",
    "READ_AHEAD_SHARE",
    "WINDOW_BYTES",
    "add_rank",
    "forget",
    "read_ahead",
    "writing",
]
