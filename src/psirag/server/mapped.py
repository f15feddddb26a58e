"""Which files under an index folder this process maps or holds open, and how much memory the
system has available: what the server's warm-up reads ahead (:mod:`psirag.server.read_ahead`)
and how much of it it may read. Linux ``/proc``; elsewhere none and unknown."""

from __future__ import annotations

import os
from pathlib import Path

MAPS = Path("/proc/self/maps")
MEMINFO = Path("/proc/meminfo")


def mapped_files(folder: str | Path) -> list[tuple[Path, int, int]]:
    """The files under ``folder`` that this process maps, as (path, device, inode), one entry
    per file, in the order they were mapped, then those it holds open and does not map (a
    saved leaf graph, opened as a view on first use); none where ``/proc/self/maps`` does not
    exist."""
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
    for path in _open_files(root):
        try:
            st = path.stat()
        except OSError:
            continue
        out.setdefault((st.st_dev, st.st_ino), path)
    return [(path, dev, ino) for (dev, ino), path in out.items()]


FDS = Path("/proc/self/fd")


def _open_files(root: str) -> list[Path]:
    """The regular files under ``root`` (ending in a separator) this process holds open."""
    found = []
    try:
        entries = sorted(FDS.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    except OSError:
        return []
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith(root) and not target.endswith(" (deleted)"):
            found.append(Path(target))
    return [p for p in found if p.is_file()]


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where it cannot be read)."""
    try:
        for line in MEMINFO.read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


__all__ = ["available_memory", "mapped_files"]
