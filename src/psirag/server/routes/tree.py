"""``GET /tree`` (a subtree, for the web page's lazy tree view), ``GET /nodes/{id}`` and
``GET /generation`` (what the page polls to notice a write by another client).

Each answer names the generation it was read from (field ``generation``, header ``ETag``), and
a GET whose If-None-Match already names that generation gets 304 without the work.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response

from psirag.index import Index
from psirag.server import views
from psirag.server.deps import CurrentGeneration, State, tag_response
from psirag.server.errors import NotFoundError

router = APIRouter()


def _check_node(index: Index, node: int) -> None:
    if not 0 <= node < index.tree.n_nodes:
        raise NotFoundError(f"node {node} does not exist: nodes are 0..{index.tree.n_nodes - 1}")


@router.get("/tree", tags=["index"], response_model=None)
async def tree(
    request: Request,
    response: Response,
    state: State,
    generation: CurrentGeneration,
    node: int | None = Query(None, description="start here (default: the root)"),
    depth: int = Query(2, ge=0, le=6, description="levels below the start node"),
) -> dict[str, Any] | Response:
    """A subtree for the page: top levels first, deeper levels lazily per node."""
    index = generation.index
    if node is not None:
        _check_node(index, node)
    if (unchanged := tag_response(request, response, generation)) is not None:
        return unchanged
    body = await state.blocking(lambda: views.tree_payload(index, node, depth))
    body["generation"] = generation.number
    return body


@router.get("/nodes/{node_id}", tags=["index"], response_model=None)
async def node(
    node_id: int, request: Request, response: Response, state: State, generation: CurrentGeneration
) -> dict[str, Any] | Response:
    """One node: abstract (a leaf: its text), layer, path, children, leaf count and the
    leaves most similar to it."""
    index = generation.index
    _check_node(index, node_id)
    if (unchanged := tag_response(request, response, generation)) is not None:
        return unchanged
    body = await state.blocking(lambda: views.node_payload(index, node_id))
    body["generation"] = generation.number
    return body


@router.get("/generation", tags=["index"], response_model=None)
async def current(
    request: Request, response: Response, generation: CurrentGeneration
) -> dict[str, Any] | Response:
    """The generation being served and its counts: cheap to poll (304 while unchanged)."""
    if (unchanged := tag_response(request, response, generation)) is not None:
        return unchanged
    index = generation.index
    return {
        "generation": generation.number,
        "etag": generation.etag,
        "documents": index.data.document_index.count,
        "chunks": int(index.tree.n_leaves),
        "nodes": int(index.tree.n_nodes),
    }
