"""The jobs folder that ``psirag serve --workers N`` shares between its workers, prepared by the
parent before it forks (see :mod:`psirag.server.jobs` for the whole story)."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from psirag.server.job_records import (
    _JOB_NAME,
    _JOB_TEMP,
    JOBS_DIR,
    JOBS_FILE,
    KEEP_SAVED,
    Job,
    _job_files,
    _job_number,
    _newest_finished,
    _read_job_file,
    _read_jobs_file,
    _write_job_file,
    open_jobs_folder,
    readable_jobs,
)

log = logging.getLogger("psirag.server")


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
        for _, job in readable_jobs(folder, live=True):
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
