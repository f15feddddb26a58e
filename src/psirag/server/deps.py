"""What a route asks FastAPI for (``Depends``): the server's state and the index generation the
request works on, typed with the real classes.

A request takes the index once: FastAPI computes a dependency once per request, so every
parameter typed :data:`IndexDep` in one request (and its sub-dependencies) is the same object,
even if a write publishes a new generation meanwhile. The providers are ``async`` so they run
on the event loop (they only read attributes), not in a worker thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Response

from psirag.index import Index
from psirag.server.state import Generation, ServerState


async def server_state(request: Request) -> ServerState:
    """The state :func:`psirag.server.app.create_app` put on the application."""
    state: ServerState = request.app.state.psirag
    return state


State = Annotated[ServerState, Depends(server_state)]


async def current_generation(state: State) -> Generation:
    """The published generation when the request arrived; when another process (a worker of
    ``--workers N``, a ``psirag add``) has published a newer one on disk, that one, loaded in
    a worker thread first."""
    holder = state.holder
    if holder.stale():
        import anyio.to_thread

        return await anyio.to_thread.run_sync(holder.refresh)
    return holder.get()


CurrentGeneration = Annotated[Generation, Depends(current_generation)]


async def current_index(generation: CurrentGeneration) -> Index:
    """The index of that generation."""
    return generation.index


IndexDep = Annotated[Index, Depends(current_index)]


def tag_response(
    request: Request, response: Response, generation: Generation, etag: str | None = None
) -> Response | None:
    """Name the generation a response is read from (``ETag`` and ``X-Psirag-Generation``), and
    the 304 to send instead when the client already holds that generation (If-None-Match).
    ``etag``: a tag that also covers what else the answer depends on."""
    etag = etag or generation.etag
    headers = {"ETag": etag, "X-Psirag-Generation": str(generation.number)}
    response.headers.update(headers)
    wanted = request.headers.get("if-none-match")
    if wanted and request.method in ("GET", "HEAD"):
        tags = {t.strip().removeprefix("W/") for t in wanted.split(",")}
        if etag in tags or "*" in tags:
            return Response(status_code=304, headers=headers)
    return None


__all__ = [
    "CurrentGeneration",
    "IndexDep",
    "State",
    "current_generation",
    "current_index",
    "server_state",
    "tag_response",
]
