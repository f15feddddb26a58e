"""psirag deletes only what it can prove it made.

Each index folder owns a random token, kept in a sidecar file of the store
(``generations/.owner``, written once, atomically, under the writer lock). Every folder a writer
makes (a staging folder, which becomes a generation when it is published) carries a marker file
holding that token, and every pointer temp file carries the token in its name. Cleanup and
garbage collection remove a folder only when its marker matches the token, and a temp file only
when its name does, so a user's look-alike folder (``generations/.partial-mine``, ``.idx.old-2024``
beside the index) is never touched. The one exception is an empty folder with a staging name
(a save killed between making the folder and marking it): removing it loses nothing.

Generations written before markers existed are recognised by their own manifest (format
``psirag-index`` and the generation number of their folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path

OWNER = ".owner"
"""The store's sidecar in ``generations/``: the index folder's token."""
MARKER = ".psirag-made"
"""The marker file in each folder a writer makes (never listed in a manifest)."""
MARKER_TMP = f"{MARKER}.tmp-"
"""The name a marker is written under before it is renamed into place."""


def store_token(generations: Path, *, create: bool) -> str | None:
    """The token of the store whose ``generations/`` folder this is; made (once) when
    ``create`` and there is none. None when there is none and ``create`` is false, or the
    sidecar is not one of ours."""
    path = generations / OWNER
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        token = ""
    except (OSError, UnicodeDecodeError):
        return None
    if token:
        return token if _well_formed(token) else None
    if not create:
        return None
    token = secrets.token_hex(16)
    tmp = generations / f"{OWNER}.tmp-{secrets.token_hex(4)}"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(token + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return token


def _well_formed(token: str) -> bool:
    return len(token) == 32 and all(c in "0123456789abcdef" for c in token)


def mark(folder: Path, token: str) -> None:
    """Record that this writer made ``folder``. The marker appears whole or not at all (written
    under a temp name, then renamed): a save killed while marking leaves a folder holding only
    that temp file, which :func:`remove_if_empty` may remove."""
    tmp = folder / f"{MARKER_TMP}{secrets.token_hex(4)}"
    tmp.write_text(token + "\n", encoding="ascii")
    os.replace(tmp, folder / MARKER)


def made_here(folder: Path, token: str | None) -> bool:
    """True when ``folder`` carries the marker of the store whose token is ``token``."""
    if not token or folder.is_symlink() or not folder.is_dir():
        return False
    try:
        return (folder / MARKER).read_text(encoding="ascii").strip() == token
    except (OSError, UnicodeDecodeError):
        return False


def legacy_generation(folder: Path, number: int, format_name: str) -> bool:
    """A published generation written before markers existed: no marker, and its manifest
    says it is generation ``number`` of a psirag index."""
    if folder.is_symlink() or not folder.is_dir() or (folder / MARKER).exists():
        return False
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(manifest, dict)
        and manifest.get("format") == format_name
        and manifest.get("generation") == number
    )


def remove_marked(folder: Path) -> None:
    """Remove a folder this store made, its marker last: a removal killed half-way leaves a
    folder that still proves it is ours, so the next cleanup finishes the job."""
    import shutil

    try:
        entries = os.listdir(folder)
    except FileNotFoundError:  # another process's removal (a server worker's) got there first
        return
    for entry in entries:
        if entry == MARKER:
            continue
        path = folder / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            if path.exists():  # rmtree holds a descriptor per level; short of them, go slower
                _remove_tree_one_fd_at_a_time(path)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    with contextlib.suppress(OSError):
        (folder / MARKER).unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()


def _remove_tree_one_fd_at_a_time(folder: Path) -> None:
    """Remove a tree bottom-up with os.walk, which reads each folder whole before going on and
    so needs one open descriptor at a time (a process at its open-file limit can still clean
    up after a failed save); what cannot be removed is left for the next cleanup."""
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(root, name))
        for name in dirs:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                os.unlink(path) if os.path.islink(path) else os.rmdir(path)
    with contextlib.suppress(OSError):
        folder.rmdir()


def remove_if_empty(folder: Path) -> bool:
    """Remove ``folder`` only if it holds nothing but an unfinished marker of a save killed
    while marking it (nothing of anyone's is lost)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        entries = os.listdir(folder)
    except OSError:
        return False
    if any(not e.startswith(MARKER_TMP) for e in entries):
        return False
    for entry in entries:
        with contextlib.suppress(OSError):
            (folder / entry).unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()
        return True
    return False


def temp_name(prefix: str, token: str) -> str:
    """A temp file name that carries the store's token (``prefix`` + token + random)."""
    return f"{prefix}{token}-{secrets.token_hex(4)}"


def temp_is_ours(name: str, prefix: str, token: str | None) -> bool:
    return bool(token) and name.startswith(f"{prefix}{token}-")


__all__ = [
    "MARKER",
    "OWNER",
    "legacy_generation",
    "made_here",
    "mark",
    "remove_if_empty",
    "remove_marked",
    "store_token",
    "temp_is_ours",
    "temp_name",
]
