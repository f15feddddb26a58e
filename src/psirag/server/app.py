"""The FastAPI application behind ``psirag serve`` (the contract: README, "HTTP API").

:func:`create_app` only assembles: the state (:mod:`.state`), the error handlers (:mod:`.errors`),
the middleware (:mod:`.middleware`), the pages (:mod:`.routes.pages`), the routers
(:data:`.routes.ROUTERS`, which take the state through :mod:`.deps`) and MCP (:mod:`.routes.mcp`).

Every answer that is not 2xx is ``{"error": {"type", "message"}}``: unknown routes, wrong
methods, invalid bodies, oversized requests, timeouts and unexpected exceptions included (the
traceback goes to the server log, never to the client). Blocking work (embedding, search, the
agent) runs in worker threads under a per-request deadline, so the event loop stays free.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from psirag import __version__
from psirag.server.embedding import configure_warm_up, stop_warm_ups
from psirag.server.errors import error_body, exception_response, install_error_handlers
from psirag.server.jobs import JOBS_FILE, JobRunner
from psirag.server.living import run_job
from psirag.server.middleware import install_middleware, install_worker_header
from psirag.server.rehearsal import warm_writer
from psirag.server.routes import ROUTERS
from psirag.server.routes.mcp import mount_mcp
from psirag.server.routes.pages import install_pages, swagger_assets, web_static
from psirag.server.settings import ServerSettings
from psirag.server.state import (
    BatchingEmbedder,
    GatedLLM,
    IndexHolder,
    ServerState,
    prepare_index,
)

if TYPE_CHECKING:
    from psirag.embed import Embedder
    from psirag.index import Index
    from psirag.llm.client import LLMClient

log = logging.getLogger("psirag.server")


def create_app(
    index_dir: str | Path,
    *,
    settings: ServerSettings | None = None,
    llm: LLMClient | None = None,
    embedder: Embedder | None = None,
    index: Index | None = None,
    mcp: bool = True,
    jobs: JobRunner | None = None,
    boot: str | None = None,
) -> FastAPI:
    """The application serving the index in ``index_dir``.

    ``llm`` is an :class:`psirag.llm.LLMClient` (None: the endpoints that need one answer 503);
    ``embedder`` replaces the index's own (it must have the same id); ``index`` serves an index
    object already loaded from ``index_dir``; ``jobs`` the write-job runner (one worker's of
    ``psirag serve --workers N``; default: one that keeps its jobs in a file beside the index);
    ``boot``: the server's token in ETags (the workers share one; default: a new one).
    """
    from psirag.index import Index

    settings = settings or ServerSettings()
    settings.check()
    folder = Path(index_dir)
    if index is None:
        index = Index.load(folder, embedder=embedder)
    configure_warm_up(read_ahead_share=settings.read_ahead_share)
    prepare_index(index)
    gated = GatedLLM(llm, settings.llm_concurrency) if llm is not None else None
    if jobs is None:
        jobs = JobRunner(folder / JOBS_FILE if folder.is_dir() else None)
    state = ServerState(IndexHolder(index, folder, boot=boot), settings, gated, jobs)
    jobs.perform = lambda job: run_job(state, job)
    if jobs.observe is None:  # the writer's heap, made ready for the first write
        served = index.data
        jobs.on_writer(lambda busy: warm_writer(served, busy))
    web = web_static()

    mcp_server = None
    if mcp:
        from psirag.server.mcp_tools import build_mcp_server

        mcp_server = build_mcp_server(state)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if mcp_server is not None:
                async with mcp_server.session_manager.run():
                    yield
            else:
                yield
        finally:
            close_state(state)

    app = FastAPI(
        title="psirag",
        version=__version__,
        description="Search, ask and browse a Ψ-RAG index (hierarchical abstract tree).",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.psirag = state
    install_error_handlers(app)
    install_middleware(app, settings, web_page=web is not None)
    if settings.workers > 1:
        install_worker_header(app)
    install_pages(app, web, swagger_assets())
    for router in ROUTERS:
        app.include_router(router)
    if mcp_server is not None:
        mount_mcp(app, mcp_server, settings)
    match_every_route(app)
    return app


def match_every_route(app: FastAPI) -> None:
    """Match a path no route serves against every route, once, before the first request: a
    router's routes are prepared (their parameters and models) the first time a request is
    matched against it, which made the first ``POST /documents`` after a start wait 40-60 ms
    on it (what the first add pays). Matching only reads the routes; nothing is called."""
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/.psirag-no-route",
        "raw_path": b"/.psirag-no-route",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "app": app,
    }
    for route in app.router.routes:
        try:
            route.matches(dict(scope))
        except Exception as exc:  # a route that cannot match this: the request prepares it
            log.debug("matching route %s ahead failed: %s", route, exc)


def close_state(state: ServerState) -> None:
    """Stop the warm-up's reads, the writer, the embedding worker and the LLM client when the
    server stops."""
    stop_warm_ups()
    state.jobs.close()
    embedder_ = state.holder.get().index.embedder
    if isinstance(embedder_, BatchingEmbedder):
        embedder_.close()
    if state.llm is not None:
        state.llm.close()


__all__ = ["ServerState", "create_app", "error_body", "exception_response", "prepare_index"]
