"""One BLAS thread in a query-serving process (``psirag serve``, each of its workers, and
``psirag mcp``).

A search's matrix products are small (one query against a few thousand node vectors), and a
server already runs requests side by side in threads. OpenBLAS's own threads add nothing to
that: they spin waiting for work and contend with the query model's threads. Measured on the
2Wiki index (BENCHMARKS.md, issue 23): the search after the vector took 4.2-4.9 CPU ms with
OpenBLAS's default two threads against 1.2-1.4 with one, and under 32 concurrent clients
86% of a warm server's CPU was OpenBLAS waiting (``exec_blas_async``), not computing.

Library callers of ``Index.search`` keep their process's setting: only the serving commands
change it, for their own process."""

from __future__ import annotations

import logging

log = logging.getLogger("psirag.server")


def limit_blas_threads() -> bool:
    """Limit every BLAS library loaded in this process to one thread. Call it from the main
    thread: numpy's OpenBLAS ignored the change made from another thread once the main thread
    had set a count. False (and a warning) when threadpoolctl, which the ``psirag[server]``
    extra installs, is missing."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        log.warning(
            "threadpoolctl is not installed, so BLAS keeps its own threads and each search "
            "costs about 3x the CPU under load; pip install 'psirag[server]' (or threadpoolctl)"
        )
        return False
    threadpool_limits(limits=1, user_api="blas")  # applied now, for the whole process
    return True


__all__ = ["limit_blas_threads"]
