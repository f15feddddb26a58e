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
``k`` numbers its jobs F+k, F+k+N, ..., F one past the highest id the folder held at start, so
ids never repeat across restarts or a different N), the index's writer lock keeps the writes one
at a time across workers, and each job is written (atomically) to ``server-jobs/`` beside the
index, one ``job-N.json`` per job, so ``GET /jobs/{id}``, a retry and the document list answer
on whichever worker a request reaches. That folder outlives the server as the jobs file does:
before forking, the parent (:meth:`SharedJobs.prepare`) marks the jobs left queued or running as
interrupted, keeps the newest :data:`KEEP_SAVED` finished ones, sets a bad file aside as
``job-N.json.bad`` with a warning, and moves a one-process jobs file's jobs into the folder;
a worker that dies has its unfinished jobs marked interrupted, and so do all workers' once the
server stops. Served with one process again, the index's folder jobs move back into the jobs
file: either way the earlier jobs stay listed, under the same ids.

``psirag mcp`` (stdio) has no job of its own to persist: its tools only read (search, ask,
inspect_node, list_documents), so it never writes the index. It reads the jobs file and the
jobs folder of a ``psirag serve`` on the same index (``observe``), so ``list_documents`` shows
that server's pending and failed documents, and it never writes either: taking them over would
mark the live server's running job as interrupted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psirag.server.job_records import (
    _JOB_FILE,
    _JOB_ID,
    INTERRUPTED,
    JOBS_DIR,
    JOBS_FILE,
    JOBS_SCHEMA,
    KEEP_FINISHED,
    KEEP_SAVED,
    Job,
    JobKind,
    JobStatus,
    Work,
    _job_files,
    _job_from_saved,
    _newest_finished,
    _read_job_file,
    _read_jobs_file,
    _write_job_file,
    readable_jobs,
)
from psirag.server.shared_jobs import SharedJobs

log = logging.getLogger("psirag.server")


class _Prepare:
    """A preparation queued on the writer thread (:meth:`JobRunner.on_writer`)."""

    def __init__(self, run: Callable[[Callable[[], bool]], None]) -> None:
        self.run = run


class JobRunner:
    """A queue of write jobs and the one thread that runs them in order.

    ``path``: the jobs file (None: jobs live in memory only). ``perform`` runs a job from its
    kind and payload (set by the app; needed for retries and for jobs submitted without work).
    """

    @classmethod
    def for_worker(cls, shared: SharedJobs, k: int) -> JobRunner:
        """Worker ``k``'s runner over the prepared jobs folder (in the worker, after the fork)."""
        return cls(first_id=shared.first_id + k, id_step=shared.workers, shared=shared.folder)

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
        ``shared``: the jobs folder, where each job is also written for the other workers (a
        runner restarted with the same numbers goes on after its own jobs there);
        ``observe``: instead of ``path``, another process's jobs file, read (and the jobs
        folder beside it) on every :meth:`all` and never written (this runner then takes no
        jobs). With ``path``, the jobs an earlier ``--workers N`` server left in the jobs
        folder beside it move into the file."""
        self.observe = observe
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # one writer of the jobs file at a time
        self._queue: queue.Queue[tuple[Job, Work] | _Prepare | None] = queue.Queue()
        self.path = path
        self.perform = perform
        self.shared = shared
        self._step = id_step
        self._shared_done: list[str] = []  # this runner's finished jobs in the shared folder
        self._warned: set[str] = set()
        self._watchers: dict[str, list[Callable[[], None]]] = {}
        """Callbacks to run once a job finishes (:meth:`when_finished`), by job id."""
        self._next = max(self._load() + 1, first_id, self._after_own_shared(first_id))
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
        request_s: float | None = None,
    ) -> Job:
        """Queue a write; ``work`` defaults to :attr:`perform` (which reads the payload).
        ``request_s``: the seconds the request took before it queued the job (its timings'
        ``request``)."""
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
            if request_s is not None:
                job.timings["request"] = round(request_s, 4)
            self._next += self._step
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.finished is not None]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._jobs[old.id]
        self._save(job)
        self._queue.put((job, run))
        return job

    def on_writer(self, prepare: Callable[[Callable[[], bool]], None]) -> None:
        """Run ``prepare(busy)`` on the writer thread before the jobs queued after this call
        (what only that thread can make ready, such as its own heap); ``busy()`` says whether
        a job is waiting meanwhile, so that ``prepare`` can give way. Its errors are logged,
        never raised, and no job waits for it to be queued."""
        self._queue.put(_Prepare(prepare))

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

    def when_finished(self, job_id: str, callback: Callable[[], None]) -> bool:
        """Have ``callback`` called (on the writer thread, once) when this runner's job
        ``job_id`` finishes; False, and no call, when it has finished already or is not this
        runner's (another worker's job: read its file again instead). Take the callback back
        with :meth:`forget`."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.status in ("done", "failed"):
                return False
            self._watchers.setdefault(job_id, []).append(callback)
            return True

    def forget(self, job_id: str, callback: Callable[[], None]) -> None:
        """Take back a callback of :meth:`when_finished` (a waiter that stopped waiting)."""
        with self._lock:
            waiting = self._watchers.get(job_id, [])
            if callback in waiting:
                waiting.remove(callback)
            if not waiting:
                self._watchers.pop(job_id, None)

    def all(self) -> list[Job]:
        """Every remembered job, oldest first (with a shared folder: every worker's)."""
        if self.observe is not None:
            return self._observed()
        with self._lock:
            jobs = list(self._jobs.values())
        if self.shared is not None:
            mine = {j.id for j in jobs}
            for path in _job_files(self.shared):
                if path.stem not in mine and (job := self._read_shared(path)) is not None:
                    jobs.append(job)
            jobs.sort(key=lambda j: j.created)
        return jobs

    def _observed(self) -> list[Job]:
        """The observed jobs file's and jobs folder's jobs as they say them now (queued and
        running ones are the other server's live jobs); none from a missing or unreadable
        file (which is left alone)."""
        assert self.observe is not None
        jobs: dict[str, Job] = {}
        try:
            body = json.loads(self.observe.read_text(encoding="utf-8"))
            entries = body.get("jobs") if body.get("schema") == JOBS_SCHEMA else None
        except (OSError, ValueError, AttributeError):
            entries = None
        for raw in entries if isinstance(entries, list) else []:
            if (job := _job_from_saved(raw, live=True)) is not None:
                jobs[job.id] = job
        folder = self.observe.with_name(JOBS_DIR)
        for path in _job_files(folder):
            if (job := self._read_shared(path)) is not None:
                jobs[job.id] = job
        return sorted(jobs.values(), key=lambda j: j.created)

    def _read_shared(self, path: Path) -> Job | None:
        """A job of the shared folder as it is now; None when there is none, or the file is
        bad (said once; the next ``--workers N`` start sets it aside)."""
        try:
            return _read_job_file(path, live=True)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            if str(path) not in self._warned:
                self._warned.add(str(path))
                log.warning("skipping the job file %s: %s", path, exc)
            return None

    def _after_own_shared(self, first_id: int) -> int:
        """One step past the highest job of this runner's numbers in the shared folder: a
        worker restarted by the parent goes on after the jobs it made before it died."""
        if self.shared is None:
            return first_id
        own = [
            int(m.group(1))
            for path in _job_files(self.shared)
            if (m := _JOB_FILE.match(path.name))
            and int(m.group(1)) >= first_id
            and (int(m.group(1)) - first_id) % self._step == 0
        ]
        return max(own) + self._step if own else first_id

    def _share(self, job: Job) -> None:
        """Write the job for the other workers (atomically: a reader never sees half); past
        :data:`KEEP_SAVED` of this runner's finished jobs, the oldest one's file goes."""
        if self.shared is None:
            return
        try:
            _write_job_file(self.shared, job)
        except (OSError, TypeError, ValueError) as exc:
            log.warning("could not share job %s with the other workers: %s", job.id, exc)
            return
        if job.finished is not None:
            self._shared_done.append(job.id)
            while len(self._shared_done) > KEEP_SAVED:
                old = self._shared_done.pop(0)
                with contextlib.suppress(OSError):
                    (self.shared / f"{old}.json").unlink()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, _Prepare):
                try:
                    item.run(lambda: not self._queue.empty())
                except Exception as exc:  # a preparation only saves time; the jobs do the rest
                    log.debug("preparing the writer failed: %s", exc)
                continue
            job, work = item
            job.started = time.time()
            job.timings["queued"] = round(max(0.0, job.started - job.created), 4)
            t0, cpu0 = time.perf_counter(), time.thread_time()
            job.status = "running"
            self._save(job)
            saving = time.perf_counter() - t0
            status: JobStatus = "done"
            try:
                job.result = work(job)
            except Exception as exc:  # a failed job is reported on its status, never raised
                job.error = f"{type(exc).__name__}: {exc}"
                status = "failed"
                log.warning("job %s (%s) failed: %s", job.id, job.kind, job.error)
                log.debug("%s", traceback.format_exc())
            job.timings["run"] = round(time.perf_counter() - t0, 4)
            job.timings["run_cpu"] = round(time.thread_time() - cpu0, 4)
            job.finished = time.time()
            with self._lock:  # finished before it reads done; the waiters hear it once
                job.status = status
                waiting = self._watchers.pop(job.id, [])
            for callback in waiting:
                try:
                    callback()
                except Exception as exc:  # a waiter's failure is its own
                    log.debug("a waiter of job %s failed: %s", job.id, exc)
            t1 = time.perf_counter()
            self._save(job)
            job.timings["jobs_file"] = round(saving + time.perf_counter() - t1, 4)

    def _save(self, changed: Job | None = None) -> bool:
        """Write the jobs file atomically (a temporary file, then a rename), and the job that
        changed to the shared folder; False when the jobs file could not be written."""
        if changed is not None:
            self._share(changed)
        path = self.path
        if path is None:
            return True
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
                return False
        return True

    def _load(self) -> int:
        """Read the jobs file, and take over the jobs an earlier ``--workers N`` server left in
        the jobs folder beside it (their files go once the jobs file holds them); returns the
        highest job number (0: none)."""
        if self.path is None:
            return 0
        jobs = {job.id: job for job in _read_jobs_file(self.path)}
        folder = self.path.with_name(JOBS_DIR)
        taken: list[Path] = []
        if folder.is_dir() and not folder.is_symlink():
            for path, job in readable_jobs(folder, live=False):
                jobs[job.id] = job  # the folder's copy is the newer one
                taken.append(path)
        ordered = sorted(jobs.values(), key=lambda j: j.number)
        keep = _newest_finished(ordered, KEEP_SAVED)
        self._jobs = {j.id: j for j in ordered if j.finished is None or j.id in keep}
        if jobs and self._save():  # interrupted jobs are failed from now on, also on disk
            for path in taken:
                with contextlib.suppress(OSError):
                    path.unlink()
            if taken:
                log.info("jobs of %s moved into %s", folder, self.path)
        return max((j.number for j in jobs.values()), default=0)


__all__ = [
    "INTERRUPTED",
    "JOBS_DIR",
    "JOBS_FILE",
    "JOBS_SCHEMA",
    "KEEP_SAVED",
    "Job",
    "JobKind",
    "JobRunner",
    "JobStatus",
    "SharedJobs",
]
