"""The server's writes on the living index: one add, removal or sync, run by the single writer
thread (:class:`psirag.server.jobs.JobRunner`), saved, then published to new requests."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psirag.server import read_ahead
from psirag.server.jobs import Job, JobKind
from psirag.server.state import ServerState, prepare_index

if TYPE_CHECKING:
    from psirag.index import Index
    from psirag.living import UpdateSummary

log = logging.getLogger("psirag.server")
WRITER_LOCK_WAIT_S = 120.0
"""How long a write job waits for the index's writer lock (another worker's write, or a
``psirag add`` from the command line) before it fails."""


def _change(kind: JobKind, payload: Any) -> Callable[[Index], UpdateSummary]:
    """What a job does to the index: add documents, remove ids, or (sync) remove ids and add
    documents in one update, as a local ``psirag sync`` does."""
    if kind == "add":
        return lambda index: index.add(payload)
    if kind == "remove":
        return lambda index: index.remove(payload)
    remove, documents = payload
    return lambda index: index.update(remove, documents or None)


def apply_write(state: ServerState, kind: JobKind, payload: Any, job: Job) -> dict[str, Any]:
    """One write on the living index, run by the single writer: apply, save, publish.

    The served index is changed in memory (see :func:`psirag.living.update_saved`'s ``base``)
    and the index is read from disk only when another process wrote it meanwhile.
    The update runs on a new facade over the served data (``IndexData`` is immutable), so the
    index object in service is never changed; requests already running finish on the
    generation they took, and the new one is published only once it is saved.
    """
    from psirag.index import Index

    served = state.holder.get().index
    job.progress(0, 1)
    # Under the writer lock: the served index is the base when it is still the generation on
    # disk (no reload); when another process (`psirag add` from the command line, another
    # worker of --workers N) published since, that generation is loaded instead, so its change
    # is never overwritten. Waits for the lock: with --workers N the other workers write too.
    change = _change(kind, payload)
    spans: dict[str, float] = {}

    def timed(index: Index) -> UpdateSummary:
        spans["change"] = time.perf_counter()
        try:
            return change(index)
        finally:
            spans["changed"] = time.perf_counter()

    timings = job.timings
    # the warm-up's reads ahead wait while this write reads (its rows first on the disk)
    with state.holder.writing(), read_ahead.writing():
        t0 = time.perf_counter()
        updated, done = Index.update_saved(
            state.holder.folder,
            timed,
            embedder=served.embedder,
            base=served,
            wait=WRITER_LOCK_WAIT_S,
            collect_later=True,  # a retired generation's files: not on this request
        )
        t1 = time.perf_counter()
        began, ended = spans.get("change", t0), spans.get("changed", t0)
        timings["lock"] = round(began - t0, 4)
        timings["update"] = round(ended - began, 4)
        timings["save"] = round(done.save_seconds, 4)
        timings["unlock"] = round(max(0.0, t1 - ended - done.save_seconds), 4)
        if done.loaded:
            state.holder.count_load()
            log.info("index: another process wrote %s; loaded it from disk", state.holder.folder)
        summary = done.summary
        if done.generation is not None:
            summary.seconds["save"] = done.save_seconds  # as `psirag add` reports it
        prepare_index(updated)
        t2 = time.perf_counter()
        timings["prepare"] = round(t2 - t1, 4)
        saved = done.generation if done.generation is not None else state.holder.get().saved
        generation = state.holder.publish(updated, saved=saved)
        timings["publish"] = round(time.perf_counter() - t2, 4)
    job.progress(1, 1)
    return {
        "generation": generation.number,
        "documents": updated.data.document_index.count,
        "update": summary.to_dict(),
        "saved_generation": done.generation,
        "loaded_from_disk": done.loaded,
        "drift": updated.drift(),
    }


def run_job(state: ServerState, job: Job) -> dict[str, Any]:
    """A job from its kind and JSON payload (a new one, a retry, or one the jobs file kept)."""
    from psirag.server.uploads import document_from_json

    if job.kind == "add":
        documents = [document_from_json(raw) for raw in job.payload or []]
        return apply_write(state, "add", documents, job)
    if job.kind == "sync":
        raw = job.payload if isinstance(job.payload, dict) else {}
        remove = [str(doc_id) for doc_id in raw.get("remove") or []]
        documents = [document_from_json(d) for d in raw.get("documents") or []]
        return apply_write(state, "sync", (remove, documents), job)
    return apply_write(state, "remove", [str(doc_id) for doc_id in job.payload or []], job)


__all__ = ["apply_write", "run_job"]
