"""What the machine offers a build: free memory (does the exact matrix fit?) and cores."""

from __future__ import annotations

import os


def available_memory_bytes() -> int:
    """Memory the OS says is available now (MemAvailable), falling back to physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def default_workers() -> int:
    """Local worker processes or threads: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


__all__ = ["available_memory_bytes", "default_workers"]
