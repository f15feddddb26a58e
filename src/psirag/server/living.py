"""The server's writes on the living index: one add or removal, run by the single writer
thread (:class:`psirag.server.jobs.JobRunner`), saved, then published to new requests."""

from __future__ import annotations

from typing import Any, Literal

from psirag.server.jobs import Job
from psirag.server.state import ServerState, prepare_index

WRITER_LOCK_WAIT_S = 120.0
"""How long a write job waits for the index's writer lock (another worker's write, or a
``psirag add`` from the command line) before it fails."""


def apply_write(
    state: ServerState, kind: Literal["add", "remove"], payload: Any, job: Job
) -> dict[str, Any]:
    """One write on the living index, run by the single writer: apply, save, publish.

    The update runs on a new facade over the served data (``IndexData`` is immutable), so the
    index object in service is never changed; requests already running finish on the
    generation they took, and the new one is published only once it is saved.
    """
    from psirag.index import Index

    served = state.holder.get().index
    job.progress(0, 1)
    # Under the writer lock, build on what is on disk, not on what is served: a `psirag add`
    # from the command line, or another worker's write, since the last one here must not be
    # overwritten. Waits for the lock: with --workers N the other workers write too.
    with state.holder.writing():
        updated, done = Index.update_saved(
            state.holder.folder,
            lambda index: index.add(payload) if kind == "add" else index.remove(payload),
            embedder=served.embedder,
            wait=WRITER_LOCK_WAIT_S,
        )
        summary = done.summary
        prepare_index(updated)
        saved = done.generation if done.generation is not None else state.holder.get().saved
        generation = state.holder.publish(updated, saved=saved)
    job.progress(1, 1)
    return {
        "generation": generation.number,
        "saved_generation": generation.saved,
        "documents": len(updated.documents),
        "update": summary.to_dict(),
    }


def run_job(state: ServerState, job: Job) -> dict[str, Any]:
    """A job from its kind and JSON payload (a new one, a retry, or one the jobs file kept)."""
    from psirag.server.uploads import document_from_json

    if job.kind == "add":
        documents = [document_from_json(raw) for raw in job.payload or []]
        return apply_write(state, "add", documents, job)
    return apply_write(state, "remove", [str(doc_id) for doc_id in job.payload or []], job)


__all__ = ["apply_write", "run_job"]
