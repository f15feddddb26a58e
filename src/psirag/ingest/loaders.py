"""Reading a corpus from disk (or from strings) and cutting it into leaves.

Every failure a user can fix raises :class:`~psirag.errors.InputError` naming the file and what
to do, because a corpus with one bad file among thousands is common and a traceback is no help.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from psirag.errors import InputError
from psirag.ids import nfc
from psirag.ingest.chunking import chunk_spans
from psirag.ingest.documents import (
    HTML_SUFFIXES,
    PDF_SUFFIXES,
    UnreadableDocument,
    html_text,
    pdf_text,
)
from psirag.types import Chunk, Source, first_surrogate

TEXT_SUFFIXES = (".txt", ".md")
RECORD_SUFFIXES = (".json", ".jsonl")
SUFFIXES = TEXT_SUFFIXES + RECORD_SUFFIXES + PDF_SUFFIXES + HTML_SUFFIXES
_SUPPORTED = ", ".join(SUFFIXES)

OnBadFile = Literal["fail", "skip"]
Warn = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Document:
    """One unit of the corpus: a text file, or a ``{title, text}`` record of a JSON corpus.

    For a record, ``text`` is ``title + "\\n" + text``: the passage string the paper's Recall@k
    compares, indexed whole as one leaf unless splitting is asked for.
    """

    id: str
    title: str
    text: str
    is_record: bool
    path: str | None = field(default=None, compare=False)
    """The file it was read from (resolved), None for a text given directly: what
    ``psirag sync`` compares with the files it is given."""
    sha256: str | None = field(default=None, compare=False)
    """The sha256 of that file's bytes (a JSON file's records share it)."""
    page_starts: tuple[int, ...] = field(default=(), compare=False)
    """For a PDF: where each page starts in ``text`` (chunks record their page)."""

    def __post_init__(self) -> None:
        # one form for ids (psirag.ids): a decomposed file name and a composed one are one id
        object.__setattr__(self, "id", nfc(self.id))


def _default_warn(message: str) -> None:
    warnings.warn(message, stacklevel=2)


class _BadFile(Exception):
    """A problem confined to one file: fatal in ``fail`` mode, a warning in ``skip`` mode."""


@dataclass(frozen=True, slots=True)
class _BadLine:
    """A JSONL line that is not JSON: only that line is skipped in ``skip`` mode."""

    message: str


def _surrogate_problem(value: str, field: str) -> str | None:
    """Why a JSON string cannot be indexed, if it holds a lone surrogate (``"\\ud800"``): such
    a string is not Unicode text, and tokenizers reject it."""
    position = first_surrogate(value)
    if position is None:
        return None
    return (
        f"{field!r} holds a lone surrogate (U+{ord(value[position]):04X} at character "
        f"{position}), which is not valid Unicode text; fix the escape sequence"
    )


class _Reader:
    """Loads files one by one, applying the bad-file policy and collecting warnings."""

    def __init__(self, on_bad_file: OnBadFile, warn: Warn) -> None:
        if on_bad_file not in ("fail", "skip"):
            raise InputError(f"on_bad_file must be 'fail' or 'skip', got {on_bad_file!r}")
        self.skip = on_bad_file == "skip"
        self.warn = warn
        self.documents: list[Document] = []
        self.seen_files: set[Path] = set()
        self.seen_ids: dict[str, str] = {}
        self.skipped = 0
        self.origin: tuple[str | None, str | None] = (None, None)

    def bad(self, message: str) -> None:
        """Report a problem that spoils one file or record: raise, or warn and go on."""
        if not self.skip:
            raise InputError(f"{message}, or pass --skip-bad-files to skip it")
        self.skipped += 1
        self.warn(message + "; skipped")

    def add(self, doc: Document, where: str) -> None:
        if doc.id in self.seen_ids:
            self.warn(
                f"{where}: document id {doc.id!r} is also used by {self.seen_ids[doc.id]}; "
                "both are indexed, but results will name them alike"
            )
        else:
            self.seen_ids[doc.id] = where
        self.documents.append(doc)

    def read_file(self, path: Path, doc_id: str) -> None:
        """Load one supported file under the id prefix ``doc_id``."""
        try:
            resolved = _resolve(path)
            if resolved in self.seen_files:
                self.warn(f"{path}: given more than once; read once")
                return
            self.seen_files.add(resolved)
            suffix = path.suffix.lower()
            if suffix in PDF_SUFFIXES or suffix in HTML_SUFFIXES:
                self._rich(path, doc_id, resolved, suffix)
                return
            text, digest = _read_utf8(path)
            self.origin = (str(resolved), digest)
            if suffix in TEXT_SUFFIXES:
                if not text.strip():
                    self.warn(f"{path}: empty file, skipped")
                    return
                doc = Document(doc_id, path.stem, text, False, str(resolved), digest)
                self.add(doc, str(path))
            elif suffix == ".json":
                self._records(path, doc_id, _json_records(path, text))
            else:
                self._records(path, doc_id, _jsonl_records(path, text))
        except _BadFile as exc:
            self.bad(str(exc))

    def _rich(self, path: Path, doc_id: str, resolved: Path, suffix: str) -> None:
        """A PDF (text layer, page starts) or an HTML page (text without markup)."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise _BadFile(f"{path}: cannot be read ({exc.strerror or exc}); check it") from exc
        digest = hashlib.sha256(data).hexdigest()
        try:
            pdf = suffix in PDF_SUFFIXES
            got = pdf_text(data) if pdf else html_text(_decode_html(path, data))
        except UnreadableDocument as exc:
            raise _BadFile(f"{path}: {exc}") from exc
        if not got.text.strip():
            what = "has no text layer (a scan?)" if suffix in PDF_SUFFIXES else "holds no text"
            self.warn(f"{path}: {what}, skipped")
            return
        doc = Document(
            doc_id,
            got.title or path.stem,
            got.text,
            False,
            str(resolved),
            digest,
            got.page_starts,
        )
        self.add(doc, str(path))

    def _records(self, path: Path, doc_id: str, records: Iterable[tuple[str, int, Any]]) -> None:
        """Turn parsed JSON values into record documents; ``where`` says 'record 3' or 'line 4'."""
        empty: list[str] = []
        for where, position, record in records:
            if isinstance(record, _BadLine):
                self.bad(record.message)
                continue
            if not isinstance(record, dict):
                self.bad(
                    f"{path}, {where}: expected an object with 'text' and optional 'title', "
                    f"got {type(record).__name__}; fix the record"
                )
                continue
            body = record.get("text")
            if body is None:
                self.bad(f"{path}, {where}: the record has no 'text' field; add one")
                continue
            title = record.get("title")
            if not isinstance(body, str) or not isinstance(title, (str, type(None))):
                self.bad(f"{path}, {where}: 'text' and 'title' must be strings; fix the record")
                continue
            problem = _surrogate_problem(body, "text") or _surrogate_problem(title or "", "title")
            if problem:
                self.bad(f"{path}, {where}: {problem}")
                continue
            if not body.strip():
                empty.append(where)
                continue
            idx = record.get("idx")
            rid = str(idx) if idx is not None else f"{doc_id}:{position}"
            text = f"{title}\n{body}" if title else body
            doc = Document(rid, title or "", text, True, *self.origin)
            self.add(doc, f"{path}, {where}")
        if empty:
            more = f" and {len(empty) - 5} more" if len(empty) > 5 else ""
            self.warn(
                f"{path}: skipped {len(empty)} record(s) with empty text "
                f"({', '.join(empty[:5])}{more})"
            )


def _resolve(path: Path) -> Path:
    """The file a path names, following links; a link loop is a bad file, not a crash."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError before Python 3.13, OSError since
        raise _BadFile(
            f"{path}: a symbolic link loop (the link points back to itself through other "
            "links); fix or remove the link"
        ) from exc


def _read_utf8(path: Path) -> tuple[str, str]:
    """Read a file as UTF-8 (a BOM is allowed), with universal newlines as text mode gives;
    also the sha256 of its bytes (what ``psirag sync`` compares)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _BadFile(f"{path}: cannot be read ({exc.strerror or exc}); check it") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _BadFile(
            f"{path}: not UTF-8 text (invalid byte at offset {exc.start}); "
            "re-encode it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n"), hashlib.sha256(data).hexdigest()


def _decode_html(path: Path, data: bytes) -> str:
    """HTML bytes as text: UTF-8, else the charset the page declares, else Latin-1."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    m = re.search(rb"charset=[\"']?([A-Za-z0-9_\-]+)", data[:4096])
    if m:
        try:
            return data.decode(m.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError):
            pass
    return data.decode("latin-1")


def _json_records(path: Path, text: str) -> list[tuple[str, int, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadFile(
            f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            "fix the file"
        ) from exc
    if not isinstance(data, list):
        raise _BadFile(
            f"{path}: expected a JSON list of {{title, text}} objects, got "
            f"{type(data).__name__}; reshape the file"
        )
    return [(f"record {i} (counting from 0)", i, rec) for i, rec in enumerate(data)]


def _jsonl_records(path: Path, text: str) -> list[tuple[str, int, Any]]:
    """One value per non-empty line; a malformed line becomes a :class:`_BadLine`, so that
    ``--skip-bad-files`` skips that line alone and names it."""
    records: list[tuple[str, int, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            value = _BadLine(
                f"{path}: malformed JSON on line {number}, column {exc.colno}: {exc.msg}; "
                "fix the line"
            )
        records.append((f"line {number}", len(records), value))
    return records


def _is_hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _walk(folder: Path, note: Callable[[str], None] | None = None) -> tuple[list[Path], list[Path]]:
    """Supported and unsupported files under ``folder``, hidden ones and psirag index folders
    left out (each index folder reported to ``note``), sorted."""
    from psirag.index_folders import looks_like_index, skip_note

    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        if looks_like_index(Path(root)):
            if note is not None:
                note(skip_note(folder, Path(root)))
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(root, name) for name in files if not name.startswith("."))
    found.sort(key=lambda p: p.relative_to(folder).parts)
    usable = [p for p in found if p.suffix.lower() in SUFFIXES]
    other = [p for p in found if p.suffix.lower() not in SUFFIXES]
    return usable, other


def load_documents(
    paths: Sequence[str | Path],
    *,
    on_bad_file: OnBadFile = "fail",
    warn: Warn | None = None,
) -> list[Document]:
    """Read files and folders (walked recursively) of ``.txt``/``.md`` documents and
    ``.json``/``.jsonl`` records, in a deterministic order.

    ``on_bad_file="skip"`` turns problems confined to one file or record (encoding, malformed
    JSON, a record without text) into warnings; missing paths and an empty corpus always fail.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise InputError("no input given: name at least one file or folder of documents")
    reader = _Reader(on_bad_file, warn or _default_warn)
    for given in paths:
        path = Path(given)
        if not path.exists():
            if path.is_symlink():
                raise InputError(
                    f"{path}: a symbolic link to nothing (its target is missing, or the link "
                    "loops back to itself); fix or remove the link"
                )
            raise InputError(f"{path}: no such file or folder; check the path")
        if path.is_dir():
            usable, other = _walk(path, reader.warn)
            if other:
                names = ", ".join(str(p.relative_to(path)) for p in other[:5])
                more = f" and {len(other) - 5} more" if len(other) > 5 else ""
                reader.warn(
                    f"{path}: skipped {len(other)} file(s) with unsupported extensions "
                    f"({names}{more}); psirag reads {_SUPPORTED}"
                )
            if not usable:
                raise InputError(
                    f"{path}: no usable files in this folder; psirag reads {_SUPPORTED} "
                    "(hidden files are skipped)"
                )
            for file in usable:
                reader.read_file(file, file.relative_to(path).as_posix())
        elif path.suffix.lower() in SUFFIXES:
            reader.read_file(path, path.name)
        else:
            raise InputError(
                f"{path}: unsupported file type {path.suffix or '(no extension)'!r}; "
                f"psirag reads {_SUPPORTED}"
            )
    if not reader.documents:
        names = ", ".join(str(p) for p in paths)
        note = f" ({reader.skipped} bad file(s) or record(s) skipped)" if reader.skipped else ""
        raise InputError(f"the corpus is empty: {names} holds no text to index{note}")
    return reader.documents


def documents_from_strings(
    texts: Sequence[str],
    titles: Sequence[str] | None = None,
    ids: Sequence[str] | None = None,
) -> list[Document]:
    """Documents for the Python API: ids default to the positions ``"0"``, ``"1"``, ..."""
    if isinstance(texts, str):
        raise InputError("texts must be a sequence of strings, not one string; wrap it in a list")
    texts = list(texts)
    for name, values in (("titles", titles), ("ids", ids)):
        if values is not None and len(values) != len(texts):
            raise InputError(f"{len(values)} {name} for {len(texts)} texts; give one per text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{i}] is {type(text).__name__}, not a string")
        problem = _surrogate_problem(text, f"texts[{i}]")
        if problem:
            raise InputError(problem)
    doc_ids = [str(i) for i in ids] if ids is not None else [str(i) for i in range(len(texts))]
    if len(set(doc_ids)) != len(doc_ids):
        dup = next(i for i in doc_ids if doc_ids.count(i) > 1)
        raise InputError(f"document id {dup!r} is given more than once; ids must be unique")
    doc_titles = [str(t) for t in titles] if titles is not None else [""] * len(texts)
    return [
        Document(doc_id, title, text, is_record=False)
        for doc_id, title, text in zip(doc_ids, doc_titles, texts, strict=True)
    ]


def chunk_id(document_id: str, text: str) -> str:
    """Content-derived id of a leaf: the same document and text give the same id in every
    build, so adding or removing other documents renumbers nothing."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(document_id.encode("utf-8", "surrogatepass"))
    digest.update(b"\0")
    digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def make_chunks(
    documents: Iterable[Document], *, chunk_tokens: int = 100, split_records: bool = False
) -> list[Chunk]:
    """Cut documents into leaves with provenance and stable, corpus-unique ids.

    Records stay whole (one leaf each, as in the paper) unless ``split_records``; a text that
    repeats within a document gets ``-2``, ``-3``... appended to its id, in order.
    """
    if chunk_tokens < 1:
        raise InputError(f"chunk_tokens must be positive, got {chunk_tokens}")
    chunks: list[Chunk] = []
    seen: dict[str, int] = {}
    for doc in documents:
        if doc.is_record and not split_records:
            spans = [(0, len(doc.text))] if doc.text.strip() else []
        else:
            spans = chunk_spans(doc.text, chunk_tokens)
        for number, (start, end) in enumerate(spans):
            text = doc.text[start:end]
            base = chunk_id(doc.id, text)
            occurrence = seen.get(base, 0) + 1
            seen[base] = occurrence
            cid = base if occurrence == 1 else f"{base}-{occurrence}"
            page = bisect.bisect_right(doc.page_starts, start) if doc.page_starts else None
            chunks.append(Chunk(cid, text, Source(doc.id, doc.title, number, start, end, page)))
    if not chunks:
        raise InputError("the corpus is empty: no document holds any text to index")
    return chunks


__all__ = [
    "SUFFIXES",
    "Document",
    "OnBadFile",
    "chunk_id",
    "documents_from_strings",
    "load_documents",
    "make_chunks",
]
