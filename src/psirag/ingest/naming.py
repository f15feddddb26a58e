"""One naming rule for files, whichever command reads them: a document is named by the path it
was found under, never by where a symbolic link points.

``psirag index docs`` names ``docs/sub/a.txt`` ``sub/a.txt`` (a file given directly: its own name)
and a symlink ``docs/note.txt -> ../elsewhere/target.txt`` ``note.txt``. ``psirag sync`` used to
pass resolved paths to the loader, so the same file came out as ``target.txt`` (and a file in a
sub-folder lost its folder). Sync now loads its files with the ids :func:`document_id` gives,
the ones ``index`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psirag.ingest.loaders import Document


def document_id(given: Path, found: Path) -> str:
    """The id prefix of ``found``, reached from the path the user gave: its path relative to a
    given folder, or the given file's own name (a link's name, not its target's)."""
    if found == given or not given.is_dir():
        return given.name
    return found.relative_to(given).as_posix()


def load_named(
    files: Sequence[tuple[Path, str]],
    *,
    on_bad_file: str = "fail",
    warn: Callable[[str], None] | None = None,
) -> list[Document]:
    """Documents of ``files`` (path as found, id prefix), read as ``load_documents`` reads them."""
    from psirag.ingest.loaders import _default_warn, _Reader

    reader = _Reader("skip" if on_bad_file == "skip" else "fail", warn or _default_warn)
    for path, doc_id in files:
        reader.read_file(path, doc_id)
    return reader.documents


__all__ = ["document_id", "load_named"]
