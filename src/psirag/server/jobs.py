"""Background writes: one worker thread runs document additions and removals one at a time.

A single writer means two writes never race on the index folder; readers are never blocked,
because a write builds a new index object and publishes it only when it is saved
(:class:`psirag.server.state.IndexHolder`).

Jobs outlive the server: each change is written (atomically) to a small JSON file beside the
index, holding what a retry needs (the documents of an add, the ids of a removal). On start a
job the last server left queued or running is shown as failed ("interrupted") with a retry;
nothing in the file is ever run by itself. The file is data: it is parsed as JSON, checked
field by field, and a bad file is set aside with a warning.

With ``psirag serve --workers N`` each worker has its own runner: the ids are disjoint (worker
``k`` numbers its jobs k+1, k+1+N, ...), the index's writer lock keeps the writes one at a time
across workers, and each job is written to a folder the workers share (one file per job), so
``GET /jobs/{id}``, a retry and the document list answer on whichever worker a request reaches.
The workers keep no jobs file: their jobs are forgotten when the server stops.

``psirag mcp`` (stdio) has no job of its own to persist: its tools only read (search, ask,
inspect_node, list_documents), so it never writes the index. It reads the jobs file of a
``psirag serve`` on the same index (``observe``), so ``list_documents`` shows that server's
pending and failed documents, and it never writes the file: taking it over would mark the
live server's running job as interrupted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger("psirag.server")

JobKind = Literal["add", "remove", "sync"]
"""``sync``: documents removed and others added in one update (``psirag sync --server``)."""
JobStatus = Literal["queued", "running", "done", "failed"]
KEEP_FINISHED = 1000
"""Finished jobs remembered for ``GET /jobs/{id}``; older ones are forgotten first."""
KEEP_SAVED = 200
"""Finished jobs kept in the jobs file (a failed one keeps its payload for a retry)."""
JOBS_FILE = "server-jobs.json"
JOBS_SCHEMA = "psirag.jobs/1"
INTERRUPTED = "interrupted: the server stopped before this job finished; retry it"
_JOB_ID = re.compile(r"^job-(\d+)$")


@dataclass
class Job:
    id: str
    kind: JobKind
    status: JobStatus = "queued"
    done: int = 0
    total: int = 0
    error: str | None = None
    result: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None
    documents: list[dict[str, str]] = field(default_factory=list)
    """``{"id", "title"}`` of each document the job adds or removes (the document list shows
    them as pending or failed); a sync job's removals also hold ``"action": "remove"``."""
    payload: Any = field(default=None, repr=False)
    """What the write needs, as JSON data: the documents of an add, the ids of a removal."""
    retry_of: str | None = None

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)

    @property
    def retryable(self) -> bool:
        return self.status == "failed" and self.payload is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "progress": {"done": self.done, "total": self.total},
            "error": self.error,
            "result": self.result,
            "created": self.created,
            "finished": self.finished,
            "documents": self.documents,
            "retryable": self.retryable,
            "retry_of": self.retry_of,
        }

    def saved(self) -> dict[str, Any]:
        """The job as the jobs file keeps it (the payload only while it may be retried)."""
        keep = self.status != "done"
        return {**self.to_dict(), "payload": self.payload if keep else None}


Work = Callable[[Job], dict[str, Any]]


def _job_from_saved(raw: Any, *, live: bool = False) -> Job | None:
    """A job read back from the jobs file, or None when the entry is not one; ``live``: one
    another worker is running now (not interrupted)."""
    if not isinstance(raw, dict):
        return None
    job_id, kind, status = raw.get("id"), raw.get("kind"), raw.get("status")
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        return None
    if kind not in ("add", "remove", "sync") or status not in (
        "queued",
        "running",
        "done",
        "failed",
    ):
        return None
    documents = [
        {
            "id": str(d.get("id", "")),
            "title": str(d.get("title") or ""),
            **({"action": "remove"} if d.get("action") == "remove" else {}),
        }
        for d in raw.get("documents") or []
        if isinstance(d, dict)
    ]
    progress: dict[str, Any] = raw.get("progress") or {}
    if not isinstance(progress, dict):
        progress = {}
    job = Job(
        id=job_id,
        kind=kind,
        status=status,
        done=int(progress.get("done") or 0),
        total=int(progress.get("total") or 0),
        error=str(raw["error"]) if raw.get("error") else None,
        result=raw.get("result") if isinstance(raw.get("result"), dict) else None,
        created=float(raw.get("created") or 0.0),
        finished=float(raw["finished"]) if raw.get("finished") else None,
        documents=documents,
        payload=raw.get("payload"),
        retry_of=str(raw["retry_of"]) if raw.get("retry_of") else None,
    )
    if not live and job.status in ("queued", "running"):  # the last server stopped meanwhile
        job.status, job.error, job.finished = "failed", INTERRUPTED, job.finished or time.time()
    return job


class JobRunner:
    """A queue of write jobs and the one thread that runs them in order.

    ``path``: the jobs file (None: jobs live in memory only). ``perform`` runs a job from its
    kind and payload (set by the app; needed for retries and for jobs submitted without work).
    """

    def __init__(
        self,
        path: Path | None = None,
        perform: Work | None = None,
        *,
        first_id: int = 1,
        id_step: int = 1,
        shared: Path | None = None,
        observe: Path | None = None,
    ) -> None:
        """``first_id``/``id_step``: the job numbers this runner gives (disjoint per worker);
        ``shared``: a folder where each job is also written, for the other workers;
        ``observe``: instead of ``path``, another process's jobs file, read on every
        :meth:`all` and never written (this runner then takes no jobs)."""
        self.observe = observe
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one writer of the jobs file at a time
        self._queue: queue.Queue[tuple[Job, Work] | None] = queue.Queue()
        self.path = path
        self.perform = perform
        self.shared = shared
        self._step = id_step
        self._next = max(self._load() + 1, first_id)
        if self._jobs:
            self._save()  # interrupted jobs are failed from now on, also on disk
        self._thread = threading.Thread(target=self._run, name="psirag-writer", daemon=True)
        self._thread.start()

    def submit(
        self,
        kind: JobKind,
        work: Work | None = None,
        *,
        documents: list[dict[str, str]] | None = None,
        payload: Any = None,
        retry_of: str | None = None,
    ) -> Job:
        """Queue a write; ``work`` defaults to :attr:`perform` (which reads the payload)."""
        run = work or self.perform
        if self.observe is not None:
            raise RuntimeError("an observing runner takes no jobs (it only reads another's file)")
        if run is None:
            raise RuntimeError("a job needs work, or a runner with perform set")
        with self._lock:
            job = Job(
                id=f"job-{self._next}",
                kind=kind,
                documents=list(documents or []),
                payload=payload,
                retry_of=retry_of,
            )
            self._next += self._step
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.finished is not None]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        self._save(job)
        self._queue.put((job, run))
        return job

    def retry(self, job_id: str) -> Job | None:
        """A new job doing what the failed job ``job_id`` should have done; None if it cannot."""
        old = self.get(job_id)
        if old is None or not old.retryable:
            return None
        return self.submit(old.kind, documents=old.documents, payload=old.payload, retry_of=old.id)

    def get(self, job_id: str) -> Job | None:
        """This runner's job, else (with a shared folder) one another worker wrote there."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is not None or self.shared is None or not _JOB_ID.match(job_id):
            return job
        return self._read_shared(self.shared / f"{job_id}.json")

    def all(self) -> list[Job]:
        """Every remembered job, oldest first (with a shared folder: every worker's)."""
        if self.observe is not None:
            return self._observed()
        with self._lock:
            jobs = list(self._jobs.values())
        if self.shared is not None:
            mine = {j.id for j in jobs}
            with contextlib.suppress(OSError):
                for path in self.shared.glob("job-*.json"):
                    if path.stem not in mine and (job := self._read_shared(path)) is not None:
                        jobs.append(job)
            jobs.sort(key=lambda j: j.created)
        return jobs

    def _observed(self) -> list[Job]:
        """The observed jobs file's jobs as it says them now (queued and running ones are the
        other server's live jobs); [] when it is missing or unreadable (it is left alone)."""
        assert self.observe is not None
        try:
            body = json.loads(self.observe.read_text(encoding="utf-8"))
            entries = body.get("jobs") if body.get("schema") == JOBS_SCHEMA else None
        except (OSError, ValueError, AttributeError):
            return []
        if not isinstance(entries, list):
            return []
        jobs = [job for raw in entries if (job := _job_from_saved(raw, live=True)) is not None]
        return sorted(jobs, key=lambda j: j.created)

    @staticmethod
    def _read_shared(path: Path) -> Job | None:
        try:
            return _job_from_saved(json.loads(path.read_text(encoding="utf-8")), live=True)
        except (OSError, ValueError):
            return None

    def _share(self, job: Job) -> None:
        """Write the job for the other workers (atomically: a reader never sees half)."""
        if self.shared is None:
            return
        target = self.shared / f"{job.id}.json"
        temp = target.with_name(f".{job.id}.{os.getpid()}.tmp")
        try:
            temp.write_text(json.dumps(job.saved(), ensure_ascii=False), encoding="utf-8")
            os.replace(temp, target)
        except (OSError, TypeError, ValueError) as exc:
            log.warning("could not share job %s with the other workers: %s", job.id, exc)
            with contextlib.suppress(OSError):
                temp.unlink()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job, work = item
            job.status = "running"
            self._save(job)
            try:
                job.result = work(job)
                job.status = "done"
            except Exception as exc:  # a failed job is reported on its status, never raised
                job.error = f"{type(exc).__name__}: {exc}"
                job.status = "failed"
                log.warning("job %s (%s) failed: %s", job.id, job.kind, job.error)
                log.debug("%s", traceback.format_exc())
            job.finished = time.time()
            self._save(job)

    def _save(self, changed: Job | None = None) -> None:
        """Write the jobs file atomically (a temporary file, then a rename), and the job that
        changed to the shared folder."""
        if changed is not None:
            self._share(changed)
        path = self.path
        if path is None:
            return
        with self._save_lock:
            with self._lock:
                jobs = list(self._jobs.values())
            live = [j for j in jobs if j.finished is None]
            finished = [j for j in jobs if j.finished is not None][-KEEP_SAVED:]
            body = {"schema": JOBS_SCHEMA, "jobs": [j.saved() for j in finished + live]}
            temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                temp.write_text(json.dumps(body, ensure_ascii=False), encoding="utf-8")
                os.replace(temp, path)
            except OSError as exc:
                log.warning("cannot save the jobs file %s: %s", path, exc)
                with contextlib.suppress(OSError):
                    temp.unlink()

    def _load(self) -> int:
        """Read the jobs file; returns the highest job number in it (0: none)."""
        if self.path is None or not self.path.exists():
            return 0
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
            entries = body["jobs"] if isinstance(body, dict) else None
            if body.get("schema") != JOBS_SCHEMA or not isinstance(entries, list):
                raise ValueError(f"not a {JOBS_SCHEMA} file")
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            aside = self.path.with_name(self.path.name + ".bad")
            log.warning(
                "the jobs file %s is unreadable (%s); set aside as %s", self.path, exc, aside
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return 0
        highest = 0
        for raw in entries:
            job = _job_from_saved(raw)
            if job is None:
                continue
            self._jobs[job.id] = job
            m = _JOB_ID.match(job.id)
            highest = max(highest, int(m.group(1)) if m else 0)
        return highest


__all__ = ["INTERRUPTED", "JOBS_FILE", "JOBS_SCHEMA", "Job", "JobKind", "JobRunner", "JobStatus"]
