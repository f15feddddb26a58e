"""``GET /health`` (liveness, no key needed) and ``GET /index`` (what is served)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from psirag import __version__
from psirag.server.deps import CurrentGeneration, State
from psirag.server.embedding import warm_up_status
from psirag.summary import inspect_summary

router = APIRouter()


@router.get("/health", tags=["server"])
async def health() -> dict[str, Any]:
    """Liveness: answers without a key, says nothing about the index."""
    return {"status": "ok", "version": __version__}


@router.get("/index", tags=["index"])
async def describe(state: State, generation: CurrentGeneration) -> dict[str, Any]:
    """What ``psirag inspect --json`` prints under "index", plus the served generation."""
    body = inspect_summary(generation.index, state.holder.folder)
    body["generation"] = generation.number
    body["saved_generation"] = generation.saved
    body["index_loads"] = state.holder.loads
    body["llm"] = state.llm.id if state.llm is not None else None
    body["warm_up"] = warm_up_status()
    return body
