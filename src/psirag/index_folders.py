"""An index is never its own input: ``--out`` may not lie inside an input folder or hold one, and
walking an input folder skips any psirag index folder found in it (with a note).

Why: ``psirag index docs --out docs/idx`` used to be accepted; every later ``index``, ``add`` or
``sync`` of ``docs`` then read the index's own files (``params.index.json``, ``chunks.jsonl``) as
documents.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from psirag.errors import IndexTargetError

FORMAT_NAME = "psirag-index"


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a link loop
        return Path(os.path.abspath(path))


def looks_like_index(folder: Path) -> bool:
    """True for a psirag index folder: a ``manifest.json`` of format ``psirag-index``, or the
    generations layout (``generations/`` and ``lock``) of one whose first save is unfinished."""
    manifest = folder / "manifest.json"
    if manifest.is_file():
        try:
            with open(manifest, encoding="utf-8") as fh:
                head = fh.read(4096)
            if FORMAT_NAME not in head:
                return False
            with open(manifest, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, UnicodeDecodeError, ValueError):
            return False
        return isinstance(data, dict) and data.get("format") == FORMAT_NAME
    return (folder / "generations").is_dir() and (folder / "lock").is_file()


def check_out_and_inputs(out: str | Path, inputs: Sequence[str | Path]) -> None:
    """Refuse an ``--out`` that holds an input or lies inside an input folder."""
    real = _real(Path(out))
    for item in inputs:
        src = _real(Path(item))
        if src == real or real in src.parents:
            raise IndexTargetError(
                f"--out {out} contains the input {item}; writing the index there would put it "
                "among the documents. Choose a folder outside the inputs."
            )
        if src in real.parents:
            raise IndexTargetError(
                f"--out {out} is inside the input folder {item}; the index would be read as "
                "documents by every later index, add or sync of that folder. Choose a folder "
                "outside the inputs."
            )


def skip_note(top: Path, index_folder: Path) -> str:
    """The note printed when a walk skips an index folder."""
    where = index_folder.relative_to(top) if index_folder != top else Path(".")
    return (
        f"{top}: skipped {where}, a psirag index folder (an index is never read as documents)"
        if where != Path(".")
        else f"{top}: skipped: it is a psirag index folder (an index is never read as documents)"
    )


__all__ = ["check_out_and_inputs", "looks_like_index", "skip_note"]
