"""Background writes: one worker thread runs document additions and removals one at a time.

A single writer means two writes never race on the index folder; readers are never blocked,
because a write builds a new index object and publishes it only when it is saved
(:class:`psirag.server.state.IndexHolder`). Jobs are kept in memory (a restart forgets them).

With ``psirag serve --workers N`` each worker has its own runner: the ids are disjoint (worker
``k`` numbers its jobs k+1, k+1+N, ...), the index's writer lock keeps the writes one at a time
across workers, and each job's status is also written to a folder the workers share, so
``GET /jobs/{id}`` answers on whichever worker the request reaches.
"""

from __future__ import annotations

import contextlib
import itertools
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

JobKind = Literal["add", "remove"]
JobStatus = Literal["queued", "running", "done", "failed"]
_JOB_ID = re.compile(r"^job-\d{1,12}$")
KEEP_FINISHED = 1000
"""Finished jobs remembered for ``GET /jobs/{id}``; older ones are forgotten first."""


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

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)

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
        }


Work = Callable[[Job], dict[str, Any]]
_STATUSES = ("queued", "running", "done", "failed")


def _job_from_dict(body: Any) -> Job | None:
    """A job written by another worker, checked field by field (None: not a job)."""
    if not isinstance(body, dict) or body.get("status") not in _STATUSES:
        return None
    progress = body.get("progress") or {}
    try:
        return Job(
            id=str(body["id"]),
            kind="remove" if body.get("kind") == "remove" else "add",
            status=body["status"],
            done=int(progress.get("done", 0)),
            total=int(progress.get("total", 0)),
            error=None if body.get("error") is None else str(body["error"]),
            result=body["result"] if isinstance(body.get("result"), dict) else None,
            created=float(body.get("created") or 0.0),
            finished=None if body.get("finished") is None else float(body["finished"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class JobRunner:
    """A queue of write jobs and the one thread that runs them in order."""

    def __init__(self, *, first_id: int = 1, id_step: int = 1, shared: Path | None = None) -> None:
        """``first_id``/``id_step``: the job numbers this runner gives (disjoint per worker);
        ``shared``: a folder where every job's status is also written, for the other workers."""
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Job, Work] | None] = queue.Queue()
        self._ids = itertools.count(first_id, id_step)
        self.shared = shared
        self._thread = threading.Thread(target=self._run, name="psirag-writer", daemon=True)
        self._thread.start()

    def submit(self, kind: JobKind, work: Work) -> Job:
        job = Job(id=f"job-{next(self._ids)}", kind=kind)
        with self._lock:
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.finished is not None]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        self._share(job)
        self._queue.put((job, work))
        return job

    def get(self, job_id: str) -> Job | None:
        """This runner's job, else (with a shared folder) one another worker wrote there."""
        with self._lock:
            job = self._jobs.get(job_id)
        if job is not None or self.shared is None or not _JOB_ID.match(job_id):
            return job
        try:
            body = json.loads((self.shared / f"{job_id}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return _job_from_dict(body)

    def _share(self, job: Job) -> None:
        """Write the job's status for the other workers (atomically: a reader never sees half)."""
        if self.shared is None:
            return
        target = self.shared / f"{job.id}.json"
        temp = target.with_name(f".{job.id}.{os.getpid()}.tmp")
        try:
            temp.write_text(json.dumps(job.to_dict()), encoding="utf-8")
            os.replace(temp, target)
        except (OSError, TypeError, ValueError) as exc:
            log.warning("could not share the status of job %s: %s", job.id, exc)
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
            self._share(job)
            try:
                job.result = work(job)
                job.status = "done"
            except Exception as exc:  # a failed job is reported on its status, never raised
                job.error = f"{type(exc).__name__}: {exc}"
                job.status = "failed"
                log.warning("job %s (%s) failed: %s", job.id, job.kind, job.error)
                log.debug("%s", traceback.format_exc())
            job.finished = time.time()
            self._share(job)


__all__ = ["Job", "JobKind", "JobRunner", "JobStatus"]
