"""Files uploaded to ``POST /documents``, read by the same loaders as ``psirag add``
(:func:`psirag.ingest.load_documents`): PDF with page numbers, HTML, ``.txt``/``.md``, and
``.json``/``.jsonl`` records. Each file is read on its own, so one bad file is named with its
reason and the others still go in.

Also the documents of a job as JSON data (what the jobs file keeps for a retry).
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psirag.errors import InputError
from psirag.ingest import Document, load_documents
from psirag.ingest.loaders import SUFFIXES

UPLOAD_TYPES = SUFFIXES
"""The file types an upload may have: exactly what ``psirag add`` reads."""
_UNSAFE = re.compile(r"[^\w.\- ]+", re.UNICODE)


@dataclass(frozen=True)
class UploadedFile:
    name: str
    data: bytes


@dataclass
class UploadResult:
    documents: list[Document]
    rejected: list[dict[str, str]]
    """``{"file", "error"}`` for each file that could not be read."""


def _safe_name(name: str) -> str:
    """The file's own name without folders or odd characters (it names a temporary file)."""
    base = Path(name.replace("\\", "/")).name
    cleaned = _UNSAFE.sub("_", base).strip(" .")
    return cleaned or "upload"


def _one_file(upload: UploadedFile, folder: Path) -> list[Document]:
    """The documents in one uploaded file; InputError naming the file if it is unusable."""
    name = _safe_name(upload.name)
    suffix = Path(name).suffix.lower()
    if suffix not in UPLOAD_TYPES:
        raise InputError(
            f"unsupported file type {suffix or '(no extension)'!r}; "
            f"uploads take {', '.join(UPLOAD_TYPES)}"
        )
    if not upload.data.strip():
        raise InputError("the file is empty")
    path = folder / name
    path.write_bytes(upload.data)
    warnings: list[str] = []
    try:
        docs = load_documents([path], warn=warnings.append)
    except InputError as exc:
        raise InputError(_without_folder(str(exc), folder, name)) from exc
    finally:
        path.unlink(missing_ok=True)
    return [dataclasses.replace(d, path=None) for d in docs]


def _without_folder(message: str, folder: Path, name: str) -> str:
    """A loader's message about the temporary copy, told about the uploaded name."""
    message = message.replace(str(folder / name), name).replace(str(folder), "")
    return message.replace(", or pass --skip-bad-files to skip it", "")


def read_uploads(
    files: list[UploadedFile], *, doc_id: str | None = None, title: str | None = None
) -> UploadResult:
    """Each file through the loaders; ``doc_id``/``title`` rename a one-document upload."""
    documents: list[Document] = []
    rejected: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="psirag-upload-") as tmp:
        for upload in files:
            try:
                documents.extend(_one_file(upload, Path(tmp)))
            except InputError as exc:
                rejected.append({"file": upload.name, "error": str(exc)})
    if (doc_id or title) and documents:
        if len(files) != 1 or len(documents) != 1 or documents[0].is_record:
            raise InputError(
                "'id' and 'title' name one document: send one file that holds one document "
                "(a JSON or JSONL file's records keep their own ids and titles)"
            )
        doc = documents[0]
        documents = [dataclasses.replace(doc, id=doc_id or doc.id, title=title or doc.title)]
    return UploadResult(documents, rejected)


def document_to_json(doc: Document) -> dict[str, Any]:
    """A document as JSON data (the jobs file keeps those of a pending or failed add)."""
    return {
        "id": doc.id,
        "title": doc.title,
        "text": doc.text,
        "is_record": doc.is_record,
        "sha256": doc.sha256,
        "page_starts": list(doc.page_starts),
        **({"path": doc.path} if doc.path is not None else {}),
    }


def document_from_json(raw: Any) -> Document:
    """A document back from JSON data; InputError if it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise InputError("a saved job's document is not an object with a 'text' string")
    starts = raw.get("page_starts") or []
    if not isinstance(starts, list) or not all(isinstance(s, int) for s in starts):
        raise InputError("a saved job's document has page starts that are not integers")
    sha = raw.get("sha256")
    path = raw.get("path")
    if path is not None and not isinstance(path, str):
        raise InputError("a saved job's document has a 'path' that is not a string")
    return Document(
        id=str(raw.get("id") or ""),
        title=str(raw.get("title") or ""),
        text=raw["text"],
        is_record=bool(raw.get("is_record")),
        sha256=sha if isinstance(sha, str) else None,
        page_starts=tuple(starts),
        path=path,
    )


__all__ = [
    "UPLOAD_TYPES",
    "UploadResult",
    "UploadedFile",
    "document_from_json",
    "document_to_json",
    "read_uploads",
]
