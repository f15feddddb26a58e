"""``GET/POST /documents``, ``DELETE /documents/{id}``, ``GET /sources``, ``POST /sync``,
``GET /jobs/{id}`` and ``POST /jobs/{id}/retry``: the documents of the index (paged, sorted,
filtered, each with its status) and the background jobs that add or remove them (on the living
index)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError

from psirag.errors import InputError
from psirag.server import catalog
from psirag.server.deps import CurrentGeneration, IndexDep, State, tag_response
from psirag.server.errors import (
    NOT_JSON,
    NotFoundError,
    NotImplementedYetError,
    UnprocessableError,
    field_errors,
    is_json_error,
)
from psirag.server.models import AddDocumentRequest, SyncRequest
from psirag.server.uploads import UPLOAD_TYPES, UploadedFile, document_to_json, read_uploads

router = APIRouter(tags=["documents"])


@router.get("/documents", response_model=None)
async def documents(
    request: Request,
    response: Response,
    state: State,
    generation: CurrentGeneration,
    offset: int = Query(0, ge=0, description="first document of the page"),
    limit: int = Query(catalog.DEFAULT_LIMIT, ge=1, le=catalog.MAX_LIMIT),
    sort: str = Query("order", description="order (corpus order), id, title, chunks or status"),
    order: str = Query("asc", description="asc or desc"),
    q: str | None = Query(None, description="keep documents whose id or title holds this"),
    status: str | None = Query(None, description="indexed, pending or failed"),
) -> dict[str, Any] | Response:
    """A page of documents with title, chunk count and status (indexed; pending while a job
    adds or removes it; failed, with the job's reason and whether it can be retried)."""
    jobs = state.jobs.all()
    seen = ",".join(f"{j.id}:{j.status}" for j in jobs)  # the statuses change apart from the index
    etag = f'{generation.etag[:-1]}-j{zlib.crc32(seen.encode()):08x}"'
    if (unchanged := tag_response(request, response, generation, etag)) is not None:
        return unchanged
    rows = await state.blocking(lambda: catalog.document_rows(generation.index, jobs))
    body = catalog.page_of(
        rows, offset=offset, limit=limit, sort=sort, order=order, query=q, status=status
    )
    body["generation"] = generation.number
    body["upload_types"] = list(UPLOAD_TYPES)
    return body


@router.post("/documents", status_code=202)
async def add_document(request: Request, state: State, index: IndexDep) -> dict[str, Any]:
    """Add documents as one background job: JSON ``{"text", "id"?, "title"?}``, or multipart
    ``file`` fields (any of the types ``psirag add`` reads; ``id``/``title`` name a single
    document). ``GET /jobs/{id}`` follows the job; unreadable files are listed in
    ``rejected`` with the reason."""
    if not callable(getattr(index, "add", None)):
        raise NotImplementedYetError(
            "adding documents needs the living index (Index.add), which this psirag "
            "version does not have; rebuild the index with `psirag index` instead"
        )
    t0 = time.perf_counter()
    documents, rejected = await _documents_from_request(request, state)
    # one pass over the document keys, not a list of every document (issue 24)
    taken = await state.blocking(
        lambda: index.data.document_index.present([d.id for d in documents])
    )
    clash = [d.id for d in documents if d.id in taken]
    if clash:
        more = f" and {len(clash) - 3} more" if len(clash) > 3 else ""
        raise InputError(
            f"document {', '.join(repr(c) for c in clash[:3])}{more} is already indexed; "
            "DELETE it first, or send it under another id"
        )
    job = state.jobs.submit(
        "add",
        documents=[{"id": d.id, "title": d.title} for d in documents],
        payload=[document_to_json(d) for d in documents],
        request_s=time.perf_counter() - t0,
    )
    return {"job": job.to_dict(), "rejected": rejected}


@router.delete("/documents/{doc_id:path}", status_code=202)
async def remove_document(doc_id: str, state: State, index: IndexDep) -> dict[str, Any]:
    """Remove a document as a background job. The id may hold ``/`` (a file in a folder, or an
    upload named ``../../etc/passwd``): send it percent-encoded or as it is."""
    if not callable(getattr(index, "remove", None)):
        raise NotImplementedYetError(
            "removing documents needs the living index (Index.remove), which this psirag "
            "version does not have; rebuild the index without the document instead"
        )
    t0 = time.perf_counter()
    found, _ = await state.blocking(
        lambda: index.data.document_index.match([doc_id])  # compared in NFC (psirag.ids)
    )
    if not found:
        raise NotFoundError(f"document {doc_id!r} is not in this index (see GET /documents)")
    doc_id = found[0]
    job = state.jobs.submit(
        "remove",
        documents=[{"id": doc_id, "title": ""}],
        payload=[doc_id],
        request_s=time.perf_counter() - t0,
    )
    return {"job": job.to_dict()}


@router.get("/sources")
async def sources(generation: CurrentGeneration) -> dict[str, Any]:
    """Where each document read from a file came from (``{"path", "sha256"}`` by document id):
    what ``psirag sync --server`` compares the files with; with the document count and the
    drift report (what a sync that changes nothing prints)."""
    index = generation.index
    return {
        "generation": generation.number,
        "saved_generation": generation.saved,
        "documents": index.data.document_index.count,
        "sources": dict(index.data.sources),
        "drift": index.drift(),
    }


@router.post("/sync", status_code=202)
async def sync(request: Request, state: State, index: IndexDep) -> dict[str, Any]:
    """Remove the documents ``remove`` and add ``documents`` as one background job (one new
    generation): what ``psirag sync --server`` sends. Documents come as the client's loaders
    read them, with the ``path`` and ``sha256`` of their file."""
    if not callable(getattr(index, "update", None)):
        raise NotImplementedYetError(
            "syncing needs the living index (Index.update), which this psirag version does not "
            "have; rebuild the index with `psirag index` instead"
        )
    t0 = time.perf_counter()
    try:
        body = SyncRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if is_json_error(errors):
            raise InputError(
                f'{NOT_JSON}: send JSON {{"remove": [ids], "documents": [{{"id", "text", ...}}]}}'
            ) from None
        raise InputError(field_errors(errors)[0]) from None
    directory = index.data.document_index
    remove, missing = await state.blocking(lambda: directory.match(body.remove))
    if missing:
        raise NotFoundError(
            f"document(s) {', '.join(repr(m) for m in missing[:3])} not in this index (see "
            "GET /sources); nothing was changed"
        )
    if not (remove or body.documents):
        raise InputError("nothing to sync: give documents to remove or to add")
    new_ids = [d.id for d in body.documents]
    taken = await state.blocking(lambda: directory.present(new_ids)) - set(remove)
    clash = [d.id for d in body.documents if d.id in taken]
    if clash:
        raise InputError(
            f"document {clash[0]!r} is already indexed and not removed by this sync; remove it "
            "in the same request, or send it under another id"
        )
    added_ids = {d.id for d in body.documents}
    listed = [{"id": d.id, "title": d.title} for d in body.documents]
    listed += [{"id": d, "title": "", "action": "remove"} for d in remove if d not in added_ids]
    job = state.jobs.submit(
        "sync",
        documents=listed,
        payload={"remove": remove, "documents": [d.model_dump() for d in body.documents]},
        request_s=time.perf_counter() - t0,
    )
    return {"job": job.to_dict()}


MAX_JOB_WAIT_S = 60.0
"""The longest ``GET /jobs/{id}?wait=S`` holds a request open."""
SHARED_JOB_POLL_S = 0.05
"""How often a wait re-reads another worker's job file (``psirag serve --workers N``)."""


@router.get("/jobs/{job_id}")
async def job_status(
    job_id: str,
    state: State,
    wait: float | None = Query(
        None,
        description=f"seconds (0 to {MAX_JOB_WAIT_S:g}) to hold the answer until the job is "
        "done or failed: it returns as soon as the job finishes, else after this long, with "
        "the job as it is then",
    ),
) -> dict[str, Any]:
    """A write job: queued, running, done or failed, with its progress and phase timings.
    ``?wait=S`` long-polls: the answer comes when the job finishes, or after ``S`` seconds."""
    if wait is not None and not 0.0 <= wait <= MAX_JOB_WAIT_S:  # NaN fails too
        raise UnprocessableError(
            f"wait must be a number of seconds from 0 to {MAX_JOB_WAIT_S:g}, got {wait:g}; "
            "poll again to wait longer"
        )
    job = state.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id!r} (the server keeps the last jobs only)")
    if wait and job.status not in ("done", "failed"):
        job = await _finished_or_late(state, job_id, wait) or job
    return job.to_dict()


async def _finished_or_late(state: State, job_id: str, wait: float) -> Any:
    """The job once it finishes, or as it is after ``wait`` seconds (no thread is held:
    the writer wakes this request; another worker's job is read again every
    :data:`SHARED_JOB_POLL_S`)."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()

    def settle() -> None:  # on the event loop
        if not finished.done():
            finished.set_result(None)

    def wake() -> None:  # on the writer thread
        loop.call_soon_threadsafe(settle)

    deadline = loop.time() + wait
    if state.jobs.when_finished(job_id, wake):
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished, timeout=wait)
        finally:
            state.jobs.forget(job_id, wake)
        return state.jobs.get(job_id)
    job = state.jobs.get(job_id)  # finished already, or another worker's
    while job is not None and job.status not in ("done", "failed"):
        left = deadline - loop.time()
        if left <= 0:
            break
        await asyncio.sleep(min(SHARED_JOB_POLL_S, left))
        job = state.jobs.get(job_id)
    return job


@router.post("/jobs/{job_id}/retry", status_code=202)
async def retry_job(job_id: str, state: State) -> dict[str, Any]:
    """Run a failed (or interrupted) job again, as a new job."""
    job = state.jobs.get(job_id)
    if job is None:
        raise NotFoundError(f"no job {job_id!r} (the server keeps the last jobs only)")
    again = state.jobs.retry(job_id)
    if again is None:
        raise InputError(f"job {job_id!r} is {job.status}; only a failed job can be retried")
    return {"job": again.to_dict()}


async def _documents_from_request(request: Request, state: State) -> tuple[list[Any], list[Any]]:
    """The documents of a JSON body or of multipart file uploads, and the files refused."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        uploads = [f for f in form.getlist("file") if not isinstance(f, str)]
        if not uploads:
            raise InputError("the multipart upload has no file field named 'file'")
        files = [UploadedFile(f.filename or "upload", await f.read()) for f in uploads]
        doc_id, title = form.get("id"), form.get("title")
        result = await state.blocking(
            lambda: read_uploads(
                files,
                doc_id=str(doc_id) if doc_id else None,
                title=str(title) if title else None,
            )
        )
        if not result.documents:
            reasons = "; ".join(f"{r['file']}: {r['error']}" for r in result.rejected)
            raise InputError(f"no document could be read from the upload ({reasons})")
        return result.documents, result.rejected
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
    from psirag.ingest import documents_from_strings

    doc_id = body.id or f"doc-{int(time.time() * 1000)}"
    return documents_from_strings([body.text], titles=[body.title or doc_id], ids=[doc_id]), []
