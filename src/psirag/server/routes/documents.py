"""``GET/POST /documents``, ``DELETE /documents/{id}`` and ``GET /jobs/{id}``: the documents
of the index and the background jobs that add or remove them (on the living index)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError

from psirag.errors import InputError
from psirag.ids import match
from psirag.server import views
from psirag.server.deps import IndexDep, State
from psirag.server.errors import (
    NOT_JSON,
    NotFoundError,
    NotImplementedYetError,
    field_errors,
    is_json_error,
)
from psirag.server.jobs import Job
from psirag.server.living import apply_write
from psirag.server.models import AddDocumentRequest

router = APIRouter(tags=["documents"])


@router.get("/documents")
async def documents(index: IndexDep) -> dict[str, Any]:
    """Every indexed document with its title and chunk count."""
    return views.documents_payload(index)


@router.post("/documents", status_code=202)
async def add_document(request: Request, state: State, index: IndexDep) -> dict[str, Any]:
    """Add a document (JSON ``{"text", "id"?, "title"?}`` or a multipart ``file``) as a
    background job; ``GET /jobs/{id}`` follows it."""
    if not callable(getattr(index, "add", None)):
        raise NotImplementedYetError(
            "adding documents needs the living index (Index.add), which this psirag "
            "version does not have; rebuild the index with `psirag index` instead"
        )
    text, doc_id, title = await _document_from_request(request)
    from psirag.ingest import documents_from_strings

    doc_id = doc_id or f"doc-{int(time.time() * 1000)}"
    if doc_id in set(index.documents):
        raise InputError(f"document {doc_id!r} is already indexed; DELETE it first")
    document = documents_from_strings([text], titles=[title or doc_id], ids=[doc_id])

    def work(job: Job) -> dict[str, Any]:
        return apply_write(state, "add", document, job)

    job = state.jobs.submit("add", work)
    return {"job": job.to_dict()}


@router.delete("/documents/{doc_id:path}", status_code=202)
async def remove_document(doc_id: str, state: State, index: IndexDep) -> dict[str, Any]:
    """Remove a document as a background job. The id may hold ``/`` (a file in a folder, or an
    upload named ``../../etc/passwd``): send it percent-encoded or as it is."""
    if not callable(getattr(index, "remove", None)):
        raise NotImplementedYetError(
            "removing documents needs the living index (Index.remove), which this psirag "
            "version does not have; rebuild the index without the document instead"
        )
    found, _ = match([doc_id], index.documents)  # compared in NFC (psirag.ids)
    if not found:
        raise NotFoundError(f"document {doc_id!r} is not in this index (see GET /documents)")
    doc_id = found[0]

    def work(job: Job) -> dict[str, Any]:
        return apply_write(state, "remove", [doc_id], job)

    job = state.jobs.submit("remove", work)
    return {"job": job.to_dict()}


@router.get("/jobs/{job_id}")
async def job_status(job_id: str, state: State) -> dict[str, Any]:
    """A write job: queued, running, done or failed, with its progress."""
    job = state.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id!r} (jobs are forgotten when the server stops)")
    return job.to_dict()


async def _document_from_request(request: Request) -> tuple[str, str | None, str | None]:
    """The text, id and title of a document sent as JSON or as a multipart file upload."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("the multipart upload has no file field named 'file'")
        raw = await upload.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"the uploaded file {upload.filename!r} is not UTF-8 text (byte {exc.start})"
            ) from exc
        doc_id = form.get("id")
        return text, str(doc_id) if doc_id else upload.filename, None
    try:
        body = AddDocumentRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if is_json_error(errors):
            raise InputError(
                f'{NOT_JSON}: send JSON {{"text": "...", "id"?: "..."}} or a multipart file '
                'field "file"'
            ) from None
        raise InputError(field_errors(errors)[0]) from None
    if not body.text.strip():
        raise InputError("the document text is empty")
    return body.text, body.id, body.title
