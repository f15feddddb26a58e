"""A write job as the server keeps it on disk: the record, its fields checked one by one,
and the jobs file and jobs folder it lives in (:mod:`psirag.server.jobs` runs the jobs). What is
read back is data: parsed as JSON, checked field by field, never run; a bad file is set aside."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
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
    started: float | None = None
    """When the writer began running it (seconds since the epoch; None: not yet)."""
    timings: dict[str, float] = field(default_factory=dict)
    """Where the job's time went, in seconds, by phase: ``request`` (reading and checking the
    request before it was queued), ``queued``, ``lock`` (the writer lock, and a load when
    another process wrote meanwhile), ``update`` (the change itself; its stages are in the
    result's ``update.seconds``), ``save``, ``unlock`` (publishing the pointer and what
    follows the save), ``prepare`` (the new generation's embedder and warm-up start),
    ``publish``, ``jobs_file`` (writing this record), ``run`` (running to done) and
    ``run_cpu`` (CPU seconds of the writer thread over ``run``)."""

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
            "started": self.started,
            "timings": dict(self.timings),
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


def _timings(value: Any) -> dict[str, float]:
    """A saved job's phase timings: the entries that are a name and a finite number >= 0."""
    if not isinstance(value, dict):
        return {}
    return {k: t for k, v in value.items() if isinstance(k, str) and (t := _time(v)) is not None}


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
        started=_time(raw.get("started")),
        timings=_timings(raw.get("timings")),
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


def readable_jobs(folder: Path, *, live: bool) -> Iterator[tuple[Path, Job]]:
    """Each job file of the jobs folder with its job; a bad file is set aside (with a warning)
    and skipped."""
    for path in _job_files(folder):
        try:
            job = _read_job_file(path, live=live)
        except (OSError, ValueError) as exc:
            _set_aside(path, str(exc))
            continue
        yield path, job


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
