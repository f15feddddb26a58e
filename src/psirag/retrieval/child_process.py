"""What a build's child processes (:mod:`~psirag.retrieval.graph_process`,
:mod:`~psirag.retrieval.bm25_process`) share: a temporary folder that the parent and the child
exchange files through, the child started as ``python -m <module> <folder>`` with this psirag
first on its import path, its failure written to ``error.txt`` and raised in the parent, and
the folder removed however it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

ERROR_FILE = "error.txt"


class ChildJob:
    """A folder made now; :meth:`start` runs ``python -m module folder`` on it."""

    def __init__(self, module: str, prefix: str) -> None:
        self.module = module
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.proc: subprocess.Popen[bytes] | None = None

    def start_after(self, write: Callable[[Path], None]) -> None:
        """``write(folder)`` (the child's input), then the child; the folder is removed when
        either fails."""
        try:
            write(self.folder)
            self.start()
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, str(self.folder)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
        )

    def done(self) -> bool:
        """Whether the child has finished (either way)."""
        return self.proc is not None and self.proc.poll() is not None

    def wait(self, what: str) -> None:
        """Wait for the child; a RuntimeError naming ``what`` with the child's error if it
        failed."""
        assert self.proc is not None
        code = self.proc.wait()
        if code != 0:
            error = self.folder / ERROR_FILE
            detail = error.read_text()[-2000:] if error.exists() else f"exit status {code}"
            raise RuntimeError(f"{what} failed: {detail}")

    def close(self) -> None:
        """Stop the child if it still runs, and remove the folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _child_env() -> dict[str, str]:
    """The environment with this psirag's folder first on the child's import path (the child
    must import the same sources as the parent, which may have them from a path of its own)."""
    import psirag

    env = dict(os.environ)
    here = str(Path(psirag.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    return env


def child_main(work: Callable[[Path], None], argv: list[str]) -> int:
    """A child's entry point: ``work(folder)``, its error written to the folder's
    ``error.txt`` (exit status 1)."""
    folder = Path(argv[0])
    try:
        work(folder)
    except BaseException:
        (folder / ERROR_FILE).write_text(traceback.format_exc())
        return 1
    return 0
