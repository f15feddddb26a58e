"""The HTTP API as one ``APIRouter`` per area. Each module's ``router`` takes what it needs
through :mod:`psirag.server.deps`; :func:`psirag.server.app.create_app` includes them in
:data:`ROUTERS` order (which is also the order of the paths in the OpenAPI schema).

A new endpoint area is one module here with a ``router`` and one line in :data:`ROUTERS`.
"""

from __future__ import annotations

from fastapi import APIRouter

from psirag.server.routes import ask, documents, info, ollama, openai, search, tree

ROUTERS: tuple[APIRouter, ...] = (
    info.router,
    search.router,
    ask.router,
    tree.router,
    documents.router,
    openai.router,
    ollama.router,
)
"""The routers of the JSON API, in the order they are included."""

__all__ = ["ROUTERS"]
