"""Operating-system errors as one line: the path, the cause in words, and what to do.

Why: a full disk used to end ``psirag add`` with ``OSError: 121344 requested and 15328 written``
(numpy's short write, with no errno and no path). Disk full, a read-only file system, permission
denied, too many open files and a path too long each get a sentence here; the CLI prints it as
``psirag: error: ...`` with exit status 2. A failed save has already dropped its staging folder,
so the published generation is the one that was there before.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeGuard

from psirag.errors import PsiragError


class SaveError(PsiragError, OSError):
    """Saving an index failed for an operating-system reason; the index is as it was."""


def _is_short_write(exc: OSError) -> bool:
    """numpy's ``tofile`` reports a write cut short (a full disk) without an errno."""
    return exc.errno is None and "requested and" in str(exc) and "written" in str(exc)


def describe(exc: OSError, path: str | Path | None = None) -> str:
    """One line for ``exc``: ``path`` (default: the error's own file name) and what to do."""
    where = str(path) if path is not None else (exc.filename or exc.filename2 or "")
    code = errno.ENOSPC if _is_short_write(exc) else exc.errno
    cause = exc.strerror or (os.strerror(code) if code else str(exc))
    prefix = f"{where}: " if where else ""
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"{prefix}the disk is full ({cause}); free some space on it, or write to a folder "
            "on another disk"
        )
    if code == errno.EROFS:
        return (
            f"{prefix}the file system is read-only; write to a folder on a writable file "
            "system, or remount it read-write"
        )
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"{prefix}permission denied; give your user access to it (chmod/chown), or choose "
            "another folder"
        )
    if code in (errno.EMFILE, errno.ENFILE):
        return (
            f"{prefix}too many open files for this process; raise the limit (e.g. "
            "`ulimit -n 4096`) or close other programs"
        )
    if code == errno.ENAMETOOLONG:
        return (
            f"{prefix}the path is too long for the file system; choose a shorter folder or "
            "file name"
        )
    return f"{prefix}{cause}; check the path and try again"


ENVIRONMENT = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENAMETOOLONG,
    }
)
"""Errors of the machine, not of the data: a reader passes them on as they are, instead of
calling the index corrupted (rebuilding would not help)."""


def of_the_machine(exc: BaseException) -> TypeGuard[OSError]:
    """True for an OSError that :data:`ENVIRONMENT` lists (see :func:`describe`)."""
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT


def with_path(exc: OSError, path: str | Path) -> OSError:
    """``exc`` naming ``path`` when it names no file itself (mmap's EMFILE names none)."""
    if exc.filename is not None:
        return exc
    named = type(exc)(exc.errno, exc.strerror or str(exc), str(path))
    return named


def save_error(exc: OSError, folder: str | Path, *, had_index: bool) -> SaveError:
    """The error of a failed save of the index in ``folder``."""
    kept = (
        f"the index in {folder} is unchanged" if had_index else f"nothing was written to {folder}"
    )
    line = describe(exc, folder)
    detail = exc.filename or ""
    if detail and str(folder) not in (detail,):
        detail = Path(detail).name
        line = line.replace(f"{folder}: ", f"{folder}: writing {detail}: ", 1)
    error = SaveError(f"{line}; {kept}")
    error.errno = errno.ENOSPC if _is_short_write(exc) else exc.errno
    return error


@contextlib.contextmanager
def saving(folder: str | Path, *, had_index: bool) -> Iterator[None]:
    """Turns an OS error raised while saving the index in ``folder`` into its one-line
    :class:`SaveError` (psirag's own errors pass through), for every writer of an index."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, PsiragError):
            raise
        raise save_error(exc, folder, had_index=had_index) from exc


__all__ = [
    "ENVIRONMENT",
    "SaveError",
    "describe",
    "of_the_machine",
    "save_error",
    "saving",
    "with_path",
]
