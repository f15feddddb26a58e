"""Background writes: one worker thread runs document additions and removals one at a time.

A single writer means two writes never race on the index folder; readers are never blocked,
because a write builds a new index object and publishes it only when it is saved
(:class:`psirag.server.state.IndexHolder`). Jobs are kept in memory (a restart forgets them).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("psirag.server")

JobKind = Literal["add", "remove"]
JobStatus = Literal["queued", "running", "done", "failed"]
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


class JobRunner:
    """A queue of write jobs and the one thread that runs them in order."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[Job, Work] | None] = queue.Queue()
        self._ids = itertools.count(1)
        self._thread = threading.Thread(target=self._run, name="psirag-writer", daemon=True)
        self._thread.start()

    def submit(self, kind: JobKind, work: Work) -> Job:
        job = Job(id=f"job-{next(self._ids)}", kind=kind)
        with self._lock:
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.finished is not None]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        self._queue.put((job, work))
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

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
            try:
                job.result = work(job)
                job.status = "done"
            except Exception as exc:  # a failed job is reported on its status, never raised
                job.error = f"{type(exc).__name__}: {exc}"
                job.status = "failed"
                log.warning("job %s (%s) failed: %s", job.id, job.kind, job.error)
                log.debug("%s", traceback.format_exc())
            job.finished = time.time()


__all__ = ["Job", "JobKind", "JobRunner", "JobStatus"]
