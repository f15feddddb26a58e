"""The document list of ``GET /documents`` and MCP ``list_documents``: every indexed document
plus those a write job is adding (pending) or failed to add (failed, with the reason), filtered,
sorted and cut into pages on the server, so a corpus of 100,000 documents is one small answer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from psirag.errors import InputError

if TYPE_CHECKING:
    from psirag.index import Index
    from psirag.server.jobs import Job

SortKey = Literal["order", "id", "title", "chunks", "status"]
SORT_KEYS: tuple[str, ...] = ("order", "id", "title", "chunks", "status")
STATUSES: tuple[str, ...] = ("indexed", "pending", "failed")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

_cache_lock = threading.Lock()
_cache: tuple[Index, list[dict[str, Any]]] | None = None


def indexed_rows(index: Index) -> list[dict[str, Any]]:
    """``{id, title, chunks, order}`` of each indexed document, in corpus order (kept for the
    last index object asked: made once per generation, not per page; one chunk read per
    document, see :func:`psirag.document_keys.document_rows`)."""
    global _cache
    with _cache_lock:
        if _cache is not None and _cache[0] is index:
            return _cache[1]
    from psirag.document_keys import document_rows

    result = [
        {"id": doc, "title": title, "chunks": n, "order": k}
        for k, (doc, title, n) in enumerate(document_rows(index.data))
    ]
    with _cache_lock:
        _cache = (index, result)
    return result


def _job_states(jobs: Iterable[Job]) -> dict[str, tuple[str, Job]]:
    """The latest write job touching each document id: ("adding" | "removing" | "failed", job)."""
    states: dict[str, tuple[str, Job]] = {}
    for job in jobs:
        for doc in job.documents:
            doc_id = doc["id"]
            adds = job.kind == "add" or (job.kind == "sync" and doc.get("action") != "remove")
            if job.status in ("queued", "running"):
                states[doc_id] = ("adding" if adds else "removing", job)
            elif job.status == "failed" and adds:
                states[doc_id] = ("failed", job)
            else:
                states.pop(doc_id, None)
    return states


def document_rows(index: Index, jobs: Iterable[Job]) -> list[dict[str, Any]]:
    """Indexed documents with their status, then the pending and failed ones not yet indexed."""
    states = _job_states(jobs)
    rows = []
    for base in indexed_rows(index):
        row = {**base, "status": "indexed"}
        state = states.get(base["id"])
        if state is not None and state[0] == "removing":
            row.update(status="pending", action="remove", job=state[1].id)
        rows.append(row)
    indexed = {r["id"] for r in rows}
    order = len(rows)
    for doc_id, (what, job) in states.items():
        if doc_id in indexed or what == "removing":
            continue
        title = next((d.get("title", "") for d in job.documents if d["id"] == doc_id), "")
        row = {"id": doc_id, "title": title, "chunks": 0, "order": order, "job": job.id}
        if what == "adding":
            row.update(status="pending", action="add")
        else:
            row.update(status="failed", error=job.error, retryable=job.retryable)
        rows.append(row)
        order += 1
    return rows


def page_of(
    rows: list[dict[str, Any]],
    *,
    offset: int = 0,
    limit: int = DEFAULT_LIMIT,
    sort: str = "order",
    order: str = "asc",
    query: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    """One page of ``rows`` after the filter (``query`` in the id or title, ``status``) and
    the sort; ``counts`` are per status over all rows, ``total`` is what the filter kept."""
    if sort not in SORT_KEYS:
        raise InputError(f"sort must be one of {', '.join(SORT_KEYS)}, got {sort!r}")
    if order not in ("asc", "desc"):
        raise InputError(f"order must be asc or desc, got {order!r}")
    if status is not None and status not in STATUSES:
        raise InputError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if offset < 0 or not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"give offset >= 0 and limit 1..{MAX_LIMIT} (got {offset}, {limit})")
    counts = {s: 0 for s in STATUSES}
    for row in rows:
        counts[row["status"]] += 1
    kept = rows
    if status is not None:
        kept = [r for r in kept if r["status"] == status]
    needle = (query or "").strip().lower()
    if needle:
        kept = [r for r in kept if needle in f"{r['id']}\n{r['title'] or ''}".lower()]
    if sort != "order" or order == "desc":
        key = {
            "order": lambda r: r["order"],
            "id": lambda r: (r["id"].lower(), r["id"]),
            "title": lambda r: ((r["title"] or r["id"]).lower(), r["id"]),
            "chunks": lambda r: (r["chunks"], r["order"]),
            "status": lambda r: (STATUSES.index(r["status"]), r["order"]),
        }[sort]
        kept = sorted(kept, key=key, reverse=order == "desc")
    return {
        "total": len(kept),
        "offset": offset,
        "limit": limit,
        "sort": sort,
        "order": order,
        "counts": counts,
        "documents": kept[offset : offset + limit],
    }


__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "SORT_KEYS", "STATUSES", "document_rows", "page_of"]
