"""``POST /search``: hybrid tree + BM25 retrieval."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from psirag.server import views
from psirag.server.deps import IndexDep, State
from psirag.server.models import SearchRequest
from psirag.server.querying import search_config

router = APIRouter()


@router.post("/search", tags=["query"])
async def search(body: SearchRequest, state: State, index: IndexDep) -> dict[str, Any]:
    """Hybrid tree + BM25 search: ``search --json``'s document, plus each passage's tree
    path (``hits``)."""
    query = state.check_query(body.query)
    state.check_k(body.k)
    config = search_config(body)
    passages = await state.blocking(lambda: index.search(query, config=config, docs=body.docs))
    return views.search_payload(index, query, body.k, passages)
