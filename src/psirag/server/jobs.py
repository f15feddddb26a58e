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
import math
import os
import queue
import re
import stat
import threading
import time
import traceback
from collections.abc import Callable, Iterable
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
"""Finished jobs kept in the jobs file or folder (a failed one keeps its payload for a retry);
with ``--workers N`` each worker also keeps at most this many of its own while it runs."""
JOBS_FILE = "server-jobs.json"
JOBS_DIR = "server-jobs"
"""The folder beside :data:`JOBS_FILE` where ``psirag serve --workers N`` keeps its jobs, one
``job-N.json`` each (made readable by its owner only: a job holds the documents it adds)."""
JOBS_SCHEMA = "psirag.jobs/1"
INTERRUPTED = "interrupted: the server stopped before this job finished; retry it"
_JOB_ID = re.compile(r"^job-(\d+)$")
_JOB_FILE = re.compile(r"^job-(\d+)\.json$")
_JOB_TEMP = re.compile(r"^\.job-\d+\.\d+\.tmp$")
_JOB_NAME = re.compile(r"^job-(\d+)\.json(?:\.bad)?$")
"""A job file of the jobs folder, or one set aside: its number is never given again."""
_STATUSES = ("queued", "running", "done", "failed")


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

    @property
    def number(self) -> int:
        """The ``N`` of ``job-N``."""
        return _job_number(self.id)

    def interrupt(self) -> None:
        """Failed, because the server that ran it stopped before it finished."""
        self.status, self.error, self.finished = "failed", INTERRUPTED, self.finished or time.time()

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


def _job_number(job_id: str) -> int:
    m = _JOB_ID.match(job_id)
    return int(m.group(1)) if m else 0


def _count(value: Any) -> int:
    """A whole number of a saved job (progress), 0 when it is not one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _time(value: Any) -> float | None:
    """A saved time (seconds since the epoch), None when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _payload(kind: str, value: Any) -> Any:
    """A saved payload when it has its kind's shape (the retry checks each document), else None
    (the job then cannot be retried)."""
    if kind in ("add", "remove"):
        return value if isinstance(value, list) else None
    return value if isinstance(value, dict) else None


def _job_from_saved(raw: Any, *, live: bool = False) -> Job | None:
    """A job read back from the jobs file, or None when the entry is not one; ``live``: one
    another worker is running now (not interrupted). Every field is checked: a field of the
    wrong type is left empty, and an entry without a valid id, kind or status is no job."""
    if not isinstance(raw, dict):
        return None
    job_id, kind, status = raw.get("id"), raw.get("kind"), raw.get("status")
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        return None
    if kind not in ("add", "remove", "sync") or status not in _STATUSES:
        return None
    entries = raw.get("documents")
    documents = [
        {
            "id": d["id"],
            "title": d["title"] if isinstance(d.get("title"), str) else "",
            **({"action": "remove"} if d.get("action") == "remove" else {}),
        }
        for d in (entries if isinstance(entries, list) else [])
        if isinstance(d, dict) and isinstance(d.get("id"), str)
    ]
    progress = raw.get("progress")
    if not isinstance(progress, dict):
        progress = {}
    error, retry_of = raw.get("error"), raw.get("retry_of")
    job = Job(
        id=job_id,
        kind=kind,
        status=status,
        done=_count(progress.get("done")),
        total=_count(progress.get("total")),
        error=error if isinstance(error, str) and error else None,
        result=raw.get("result") if isinstance(raw.get("result"), dict) else None,
        created=_time(raw.get("created")) or 0.0,
        finished=_time(raw.get("finished")) or None,
        documents=documents,
        payload=_payload(kind, raw.get("payload")),
        retry_of=retry_of if isinstance(retry_of, str) and _JOB_ID.match(retry_of) else None,
    )
    if not live and job.status in ("queued", "running"):  # the last server stopped meanwhile
        job.interrupt()
    return job


def _read_job_file(path: Path, *, live: bool) -> Job:
    """The job in one ``job-N.json`` of the jobs folder; ValueError saying what is wrong."""
    if path.is_symlink():
        raise ValueError("a symbolic link, not a job file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON at line {exc.lineno}: {exc.msg}") from None
    job = _job_from_saved(raw, live=live)
    if job is None:
        raise ValueError("not a job (an 'id' job-N, a 'kind' and a 'status' are needed)")
    if f"{job.id}.json" != path.name:
        raise ValueError(f"it holds {job.id}, not the job its name says")
    return job


def _write_job_file(folder: Path, job: Job) -> None:
    """Write one job into the jobs folder atomically (a reader never sees half), readable by
    its owner only; OSError when it cannot."""
    target = folder / f"{job.id}.json"
    temp = folder / f".{job.id}.{os.getpid()}.tmp"
    data = json.dumps(job.saved(), ensure_ascii=False).encode("utf-8")
    try:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _job_files(folder: Path) -> list[Path]:
    """The ``job-N.json`` files of the jobs folder ([] when there is none)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / name for name in names if _JOB_FILE.match(name)]


def _set_aside(path: Path, why: str) -> None:
    aside = path.with_name(path.name + ".bad")
    log.warning("the job file %s is unreadable (%s); set aside as %s", path, why, aside)
    with contextlib.suppress(OSError):
        os.replace(path, aside)


def _newest_finished(jobs: Iterable[Job], keep: int) -> set[str]:
    """The ids of the ``keep`` jobs that finished last."""
    finished = sorted(
        (j for j in jobs if j.finished is not None),
        key=lambda j: (j.finished or 0.0, j.number),
    )
    return {j.id for j in finished[len(finished) - keep :]} if keep > 0 else set()


def open_jobs_folder(folder: Path) -> Path:
    """The jobs folder, made (owner only) when missing. InputError naming it when it is not a
    folder of this user's (a symbolic link, a file, someone else's); OSError when it cannot be
    made (a read-only index folder)."""
    from psirag.errors import InputError

    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise InputError(
            f"{folder} is not a folder (psirag serve --workers N keeps its jobs there); "
            "move it away and start again"
        )
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise InputError(
            f"{folder} belongs to another user (psirag serve --workers N keeps its jobs there); "
            "move it away, or serve the index as its owner"
        )
    return folder


def _read_jobs_file(path: Path) -> list[Job]:
    """The jobs of a one-process jobs file as the next server takes them over (unfinished
    ones interrupted); a bad file is set aside with a warning and gives none."""
    if not path.exists():
        return []
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        entries = body["jobs"] if isinstance(body, dict) else None
        if body.get("schema") != JOBS_SCHEMA or not isinstance(entries, list):
            raise ValueError(f"not a {JOBS_SCHEMA} file")
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        aside = path.with_name(path.name + ".bad")
        log.warning("the jobs file %s is unreadable (%s); set aside as %s", path, exc, aside)
        with contextlib.suppress(OSError):
            os.replace(path, aside)
        return []
    return [job for raw in entries if (job := _job_from_saved(raw)) is not None]


@dataclass(frozen=True)
class SharedJobs:
    """The jobs folder of ``psirag serve --workers N``, prepared by the parent before it forks.

    Worker ``k`` numbers its jobs ``first_id + k``, then every ``workers`` more, so the ids of
    two workers never meet, and none repeats an id the folder held before this server started.
    """

    folder: Path
    first_id: int
    workers: int
    temporary: bool = False
    """A temporary folder, used when the index folder is read-only: its jobs are not kept
    (the server removes it when it stops)."""

    @classmethod
    def prepare(cls, index_folder: str | Path, workers: int) -> SharedJobs:
        """Take over the jobs the last server left beside the index: the folder's and (an
        index served by one process before) the jobs file's, which move into the folder. Jobs
        left queued or running become failed ("interrupted"), only the newest
        :data:`KEEP_SAVED` finished ones stay, a bad job file is set aside (``.bad``) with a
        warning, and a temporary file of a write that was killed is removed."""
        try:
            folder = open_jobs_folder(Path(index_folder) / JOBS_DIR)
        except OSError as exc:  # a read-only index folder can still be served
            import tempfile  # only here: psirag mcp imports this module and starts fast

            temporary = Path(tempfile.mkdtemp(prefix="psirag-serve-jobs-"))
            log.warning(
                "cannot make the jobs folder in %s (%s); the workers' jobs are kept in %s "
                "until the server stops",
                index_folder,
                exc.strerror or exc,
                temporary,
            )
            return cls(temporary, 1, workers, temporary=True)
        highest = 0
        for name in os.listdir(folder):
            if _JOB_TEMP.match(name):
                with contextlib.suppress(OSError):
                    (folder / name).unlink()
            elif m := _JOB_NAME.match(name):
                highest = max(highest, int(m.group(1)))
        jobs: dict[str, Job] = {}
        rewrite: set[str] = set()
        for path in _job_files(folder):
            try:
                job = _read_job_file(path, live=True)
            except (OSError, ValueError) as exc:
                _set_aside(path, str(exc))
                continue
            if job.status in ("queued", "running"):
                job.interrupt()
                rewrite.add(job.id)
            jobs[job.id] = job
        single = Path(index_folder) / JOBS_FILE
        from_file = _read_jobs_file(single)
        highest = max([highest, *(j.number for j in from_file)])
        for job in from_file:
            if job.id not in jobs:  # the folder's copy is the newer one
                jobs[job.id] = job
                rewrite.add(job.id)
        keep = _newest_finished(jobs.values(), KEEP_SAVED)
        for job in list(jobs.values()):
            if job.finished is not None and job.id not in keep:
                del jobs[job.id]
                rewrite.discard(job.id)
                with contextlib.suppress(FileNotFoundError):
                    (folder / f"{job.id}.json").unlink()
        written = True
        for job_id in sorted(rewrite, key=_job_number):
            try:
                _write_job_file(folder, jobs[job_id])
            except OSError as exc:
                written = False
                log.warning("cannot write job %s into %s: %s", job_id, folder, exc)
        if written and single.exists():
            with contextlib.suppress(FileNotFoundError):
                single.unlink()  # its jobs are in the folder now
            log.info("jobs of %s moved into %s", single, folder)
        return cls(folder, highest + 1, workers)

    def runner(self, k: int) -> JobRunner:
        """Worker ``k``'s runner (in the worker, after the fork)."""
        return JobRunner(first_id=self.first_id + k, id_step=self.workers, shared=self.folder)

    def owner(self, job_id: str) -> int | None:
        """The worker that numbers ``job_id`` in this server (None: an earlier server's)."""
        number = _job_number(job_id)
        if number < self.first_id:
            return None
        return (number - self.first_id) % self.workers

    def interrupt(self, worker: int | None = None) -> list[str]:
        """Mark the unfinished jobs of ``worker`` (None: of every worker) failed, interrupted:
        call it once that worker (or every one) has exited. Returns their ids."""
        marked = []
        for path in _job_files(self.folder):
            try:
                job = _read_job_file(path, live=True)
            except (OSError, ValueError):
                continue  # the next start sets it aside
            if job.status not in ("queued", "running"):
                continue
            if worker is not None and self.owner(job.id) != worker:
                continue
            job.interrupt()
            try:
                _write_job_file(self.folder, job)
                marked.append(job.id)
            except OSError as exc:
                log.warning("cannot mark job %s interrupted in %s: %s", job.id, path, exc)
        return marked


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
        self._queue: queue.Queue[tuple[Job, Work] | None] = queue.Queue()
        self.path = path
        self.perform = perform
        self.shared = shared
        self._step = id_step
        self._shared_done: list[str] = []  # this runner's finished jobs in the shared folder
        self._warned: set[str] = set()
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
            for path in _job_files(folder):
                try:
                    job = _read_job_file(path, live=False)
                except (OSError, ValueError) as exc:
                    _set_aside(path, str(exc))
                    continue
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
