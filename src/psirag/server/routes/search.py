"""``POST /search``: hybrid tree + BM25 retrieval."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from psirag.server import views
from psirag.server.deps import CurrentGeneration, State
from psirag.server.models import SearchRequest
from psirag.server.querying import search_config

router = APIRouter()


@router.post("/search", tags=["query"])
async def search(
    body: SearchRequest, response: Response, state: State, generation: CurrentGeneration
) -> dict[str, Any]:
    """Hybrid tree + BM25 search: ``search --json``'s document, plus each passage's tree
    path (``hits``) and the generation it searched (also the ``ETag``)."""
    query = state.check_query(body.query)
    state.check_k(body.k)
    config = search_config(body)
    index = generation.index
    passages = await state.blocking(lambda: index.search(query, config=config, docs=body.docs))
    response.headers["ETag"] = generation.etag
    response.headers["X-Psirag-Generation"] = str(generation.number)
    payload = views.search_payload(index, query, body.k, passages)
    payload["generation"] = generation.number
    return payload
