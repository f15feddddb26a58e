"""``GET /tree`` (a subtree, for the web page's lazy tree view) and ``GET /nodes/{id}``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from psirag.index import Index
from psirag.server import views
from psirag.server.deps import IndexDep, State
from psirag.server.errors import NotFoundError

router = APIRouter()


def _check_node(index: Index, node: int) -> None:
    if not 0 <= node < index.tree.n_nodes:
        raise NotFoundError(f"node {node} does not exist: nodes are 0..{index.tree.n_nodes - 1}")


@router.get("/tree", tags=["index"])
async def tree(
    state: State,
    index: IndexDep,
    node: int | None = Query(None, description="start here (default: the root)"),
    depth: int = Query(2, ge=0, le=6, description="levels below the start node"),
) -> dict[str, Any]:
    """A subtree for the page: top levels first, deeper levels lazily per node."""
    if node is not None:
        _check_node(index, node)
    return await state.blocking(lambda: views.tree_payload(index, node, depth))


@router.get("/nodes/{node_id}", tags=["index"])
async def node(node_id: int, state: State, index: IndexDep) -> dict[str, Any]:
    """One node: abstract (a leaf: its text), layer, path, children, leaf count and the
    leaves most similar to it."""
    _check_node(index, node_id)
    return await state.blocking(lambda: views.node_payload(index, node_id))
