"""What a route asks FastAPI for (``Depends``): the server's state and the index generation the
request works on, typed with the real classes.

A request takes the index once: FastAPI computes a dependency once per request, so every
parameter typed :data:`IndexDep` in one request (and its sub-dependencies) is the same object,
even if a write publishes a new generation meanwhile. The providers are ``async`` so they run
on the event loop (they only read attributes), not in a worker thread.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

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


__all__ = [
    "CurrentGeneration",
    "IndexDep",
    "State",
    "current_generation",
    "current_index",
    "server_state",
]
