"""The writer thread's rehearsal of a one-document add, after a server's start (issue 24: the
first add after a start at 1M chunks).

An update allocates a few hundred MB of short-lived arrays at 1M chunks (the new tree's
columns and children table, the refreshed nodes' phrase counts and per-phrase values). The
first update of a process gets that memory fresh from the kernel, a page fault per page (on
this project's virtual machines about 1-1.5 ms per MB, 0.2-0.35 s for the first add at 1M);
later updates reuse what the C library kept of the memory the earlier ones freed. The
rehearsal makes those allocations once on the writer thread (the C library keeps a heap per
thread), while the server waits for its first write: the tree insertion of a few copies of
indexed leaves and the keyword scoring of a path of nodes, each computed and thrown away.
Nothing is saved, published or changed (the served data is only read), and no setting of the
C library is touched: the writer's heap is left as a first add would leave it.

It gives way to writes: it starts once the warm-up (:func:`psirag.server.embedding.warm_up`)
is done, and stops between steps as soon as a write is queued (that write then pays what is
left, as without it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from psirag.server import embedding

if TYPE_CHECKING:
    from psirag.index_data import IndexData

__all__ = [
    "REHEARSAL_MIN_LEAVES",
    "REHEARSED_LEAVES",
    "REHEARSED_NODE_LEAVES",
    "REHEARSED_TREES",
    "WRITER_POLL_S",
    "rehearse_add",
    "warm_writer",
]

REHEARSAL_MIN_LEAVES = 50_000
"""Indexes with fewer leaves are not rehearsed (their updates allocate a few MB)."""

REHEARSED_LEAVES = 4
"""Leaves inserted by the rehearsal (copies of indexed ones' vectors): a document's chunks."""

REHEARSED_TREES = 2
"""Tree insertions the rehearsal makes, each result kept until the last is made."""

REHEARSED_NODE_LEAVES = 5_000
"""The rehearsal scores the ancestors of a leaf with at most this many leaves: the size of the
nodes an add refreshes at 1M chunks (larger ones wait for their drift, see
:class:`psirag.living.AbstractDriftRule`)."""


def rehearse_add(data: IndexData, busy: Callable[[], bool]) -> dict[str, Any]:
    """Rehearse a one-document add on ``data`` (read only; everything made is dropped),
    stopping between steps when ``busy()`` (a write is waiting). Returns what was done:
    ``tree_s`` and ``abstracts_s`` (None: not done), ``nodes`` scored, ``stopped``."""
    if data.tree.n_leaves < REHEARSAL_MIN_LEAVES:
        return {"tree_s": None, "abstracts_s": None, "nodes": 0, "stopped": False}
    from psirag.living import rehearse_update  # the update path, loaded where it runs

    return rehearse_update(
        data,
        busy,
        leaves=REHEARSED_LEAVES,
        trees=REHEARSED_TREES,
        node_leaves=REHEARSED_NODE_LEAVES,
    )


WRITER_POLL_S = 0.01
"""How often :func:`warm_writer` looks for the end of the warm-up, and for a queued write."""


def warm_writer(data: IndexData, busy: Callable[[], bool]) -> None:
    """On the writer thread (:meth:`psirag.server.jobs.JobRunner.on_writer`), once the
    warm-up of ``data`` is done: rehearse a one-document add (:func:`rehearse_add`), unless a
    write comes first. ``GET /index`` reports it as ``warm_up.writer``."""
    while (finished := embedding.warm_up_finished(data)) is False:
        if busy():
            return
        time.sleep(WRITER_POLL_S)
    if finished is None or busy():  # another index is served now, or a write came
        return
    t0 = time.perf_counter()
    done = rehearse_add(data, busy)
    if done["tree_s"] is not None or done["abstracts_s"] is not None:
        embedding.record_writer_warm_up(
            data, {**done, "seconds": round(time.perf_counter() - t0, 3)}
        )
