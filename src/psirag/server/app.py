"""The FastAPI application behind ``psirag serve`` (the contract: README, "HTTP API").

Every answer that is not 2xx is ``{"error": {"type", "message"}}``: unknown routes, wrong
methods, invalid bodies, oversized requests, timeouts and unexpected exceptions included (the
traceback goes to the server log, never to the client). Blocking work (embedding, search, the
agent) runs in worker threads under a per-request deadline, so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.to_thread
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from psirag import __version__
from psirag.agent.loop import RetrieveAndAnswer, Step
from psirag.agent.summarize import DEFAULT_QUERY, Summarizer, node_to_dict
from psirag.config import ProfileName, SearchConfig, profile_config
from psirag.errors import (
    EmbedderMismatchError,
    IndexFormatError,
    InputError,
    PsiragError,
)
from psirag.llm.errors import LLMError
from psirag.server import views
from psirag.server.budget import Budget
from psirag.server.jobs import JobRunner
from psirag.server.settings import ServerSettings
from psirag.server.state import BatchingEmbedder, GatedLLM, IndexHolder, LLMNotConfiguredError

log = logging.getLogger("psirag.server")

T = TypeVar("T")

SSE_KEEPALIVE_S = 15.0
"""A comment line is sent this often while the agent works, so proxies keep the stream open."""

DOCS_ASSETS = "/docs/assets"


# ---------------------------------------------------------------------------- errors
class PayloadTooLargeError(PsiragError):
    """A request body, URL or query is over the server's limit (413)."""


class RequestTimeoutError(PsiragError):
    """The request ran past the server's per-request timeout (504)."""


class NotFoundError(PsiragError):
    """A node, document or job id that does not exist (404)."""


class NotImplementedYetError(PsiragError):
    """A feature this index object does not offer (501)."""


def error_body(kind: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, **extra}}


def error_response(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(error_body(kind, message, **extra), status_code=status, headers=headers)


_STATUS_OF: tuple[tuple[type[BaseException], int], ...] = (
    (PayloadTooLargeError, 413),
    (RequestTimeoutError, 504),
    (NotFoundError, 404),
    (NotImplementedYetError, 501),
    (LLMNotConfiguredError, 503),
    (LLMError, 502),
    (IndexFormatError, 500),
    (EmbedderMismatchError, 500),
    (InputError, 400),
    (PsiragError, 400),
)

_HTTP_KINDS = {
    400: "BadRequest",
    401: "Unauthorized",
    404: "NotFound",
    405: "MethodNotAllowed",
    413: "PayloadTooLarge",
    414: "URITooLong",
}


def exception_response(exc: BaseException, *, log_it: bool = True) -> JSONResponse:
    """The JSON error for any exception a route raises (what the user can fix, or a 500)."""
    for kind, status in _STATUS_OF:
        if isinstance(exc, kind):
            return error_response(status, type(exc).__name__, str(exc))
    if log_it:
        log.error("unexpected error", exc_info=(type(exc), exc, exc.__traceback__))
    return error_response(
        500, "InternalError", "the server failed on this request; its log says why"
    )


def _validation_message(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    details = []
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        details.append({"field": where, "message": str(err.get("msg", ""))})
        parts.append(f"{where}: {err.get('msg', '')}")
    return "invalid request: " + "; ".join(parts), details


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.__cause__, PayloadTooLargeError):  # a body too large while read
            return exception_response(exc.__cause__)
        kind = _HTTP_KINDS.get(exc.status_code, "HTTPError")
        message = str(exc.detail) if exc.detail else kind
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}; see /docs or /openapi.json"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, kind, message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, details = _validation_message(exc)
        return error_response(422, "ValidationError", message, details=details)

    @app.exception_handler(PsiragError)
    async def psirag_error(request: Request, exc: PsiragError) -> JSONResponse:
        return exception_response(exc)

    @app.exception_handler(Exception)
    async def anything(request: Request, exc: Exception) -> JSONResponse:
        # Starlette re-raises it after this answer, so the server logs the traceback once.
        return exception_response(exc, log_it=False)


# ---------------------------------------------------------------------------- middleware
async def _send_json(send: Send, status: int, body: dict[str, Any], headers: Any = ()) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


class LimitsMiddleware:
    """413 for a body over ``max_body_bytes`` (by its Content-Length, or counted while it
    streams in), 414 for a URL over ``max_url_bytes``."""

    def __init__(self, app: ASGIApp, max_body: int, max_url: int) -> None:
        self.app = app
        self.max_body = max_body
        self.max_url = max_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        url_bytes = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if url_bytes > self.max_url:
            await _send_json(
                send,
                414,
                error_body("URITooLong", f"the URL is over the limit of {self.max_url} bytes"),
            )
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        too_large = error_body(
            "PayloadTooLarge",
            f"the request body is over the limit of {self.max_body:,} bytes "
            "(psirag serve --max-body-bytes)",
        )
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                size = -1
            if size > self.max_body:
                await _send_json(send, 413, too_large)
                return
        seen = 0
        limit = self.max_body

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLargeError(too_large["error"]["message"])
            return message

        await self.app(scope, counted, send)


class AuthMiddleware:
    """Every request except the exempt paths must carry the key: ``Authorization: Bearer KEY``
    or ``X-API-Key: KEY``, compared in constant time."""

    def __init__(self, app: ASGIApp, key: str, exempt: Callable[[str], bool]) -> None:
        self.app = app
        self.key = key.encode()
        self.exempt = exempt

    def _given(self, scope: Scope) -> bytes | None:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    return token.strip()
            elif name == b"x-api-key":
                return value.strip()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS" and any(
            name == b"access-control-request-method" for name, _ in scope.get("headers") or []
        ):
            await self.app(scope, receive, send)  # a CORS preflight carries no credentials
            return
        given = self._given(scope)
        if given is None or not hmac.compare_digest(given, self.key):
            message = (
                "this server needs an API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'"
                if given is None
                else "the API key is wrong"
            )
            await _send_json(
                send,
                401,
                error_body("Unauthorized", message),
                headers=[(b"www-authenticate", b"Bearer")],
            )
            return
        await self.app(scope, receive, send)


# ---------------------------------------------------------------------------- request bodies
class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Body):
    query: str = Field(description="the question or keywords")
    k: int = Field(default=SearchConfig.k, ge=1, description="passages to return")
    beam: int | None = Field(default=None, ge=1, description="nodes kept per tree layer")
    candidates: int | None = Field(default=None, ge=1, description="passages per retriever")
    profile: ProfileName = Field(default="default", description="search preset (--profile)")
    docs: list[str] | None = Field(default=None, description="search only these document ids")
    bm25: bool = Field(
        default=True, description="false: the dense list only (tree, or exact on a small index)"
    )
    tree: bool = Field(default=True, description="false: BM25 only")


class AskRequest(_Body):
    query: str = Field(description="the question")
    max_retrievals: Budget | None = Field(
        default=None,
        description="retrievals after the first one, or 'auto' (from the question's predicted "
        "hops); default: the server's --max-retrievals",
    )
    k: int = Field(default=SearchConfig.k, ge=1, description="passages per retrieval")
    beam: int | None = Field(default=None, ge=1)
    profile: ProfileName = Field(default="default", description="search preset (--profile)")
    docs: list[str] | None = None
    max_tokens: int = Field(default=256, ge=1, le=8192, description="cap on each reply")
    answer_check: bool = True
    names_check: Literal["lookup", "ask", "off"] = "lookup"


class SummarizeRequest(_Body):
    query: str = DEFAULT_QUERY
    docs: list[str] | None = None
    top_k: int = Field(default=20, ge=1, le=500, description="nodes given to the LLM")
    max_tokens: int = Field(default=200, ge=1, le=8192)


class AddDocumentRequest(_Body):
    text: str
    id: str | None = None
    title: str | None = None


# ---------------------------------------------------------------------------- state
@dataclass
class ServerState:
    """Everything the routes share. ``holder.get()`` is the one way a request takes the index."""

    holder: IndexHolder
    settings: ServerSettings
    llm: GatedLLM | None
    jobs: JobRunner
    started: float = field(default_factory=time.time)
    _hops: Any = field(default=None, repr=False)
    _hop_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def budget(self, question: str, asked: int | str | None) -> int:
        """Retrievals after the first for ``question``: the request's count, or the server's
        default; ``auto`` asks the shipped hop model (loaded on first use, then shared)."""
        wanted = self.settings.max_retrievals if asked is None else asked
        if wanted != "auto":
            return int(wanted)
        with self._hop_lock:
            if self._hops is None:
                from psirag.hops import HopPredictor

                self._hops = HopPredictor(self._hop_embedder())
            predictor = self._hops
        return predictor.max_retrievals(question)

    def _hop_embedder(self) -> Any:
        """The index's query embedder when it is the one the hop model was trained on (one
        MiniLM in memory, not two); None lets the predictor load its own."""
        from psirag.hops import load_hop_model

        embedder = self.holder.get().index.embedder  # a BatchingEmbedder keeps its model's id
        return embedder if getattr(embedder, "id", None) == load_hop_model().embedder else None

    def need_llm(self) -> GatedLLM:
        if self.llm is None:
            raise LLMNotConfiguredError(
                "this server has no LLM: start it with --llm SPEC (or $PSIRAG_LLM) to answer "
                "questions; /search works without one"
            )
        return self.llm

    def check_length(self, text: str, what: str = "query") -> None:
        if len(text) > self.settings.max_query_chars:
            raise PayloadTooLargeError(
                f"the {what} has {len(text):,} characters, over the limit of "
                f"{self.settings.max_query_chars:,} (psirag serve --max-query-chars)"
            )

    def check_query(self, query: str, what: str = "query") -> str:
        self.check_length(query, what)
        if not query.strip():
            raise InputError(f"the {what} is empty; give a question or some keywords")
        return query

    def check_k(self, k: int) -> None:
        if k > self.settings.max_k:
            raise InputError(f"k is {k}, over this server's limit of {self.settings.max_k}")

    async def blocking(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread under the per-request deadline."""
        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
        except TimeoutError as exc:
            raise RequestTimeoutError(
                f"the request took longer than {timeout:g} s (psirag serve --request-timeout)"
            ) from exc


def prepare_index(index: Any) -> Any:
    """Put the embedder behind the batching worker and compute the tree's lazy tables once, so
    the first requests are not the slow ones and threads never race to fill a cache."""
    inner = index.embedder
    if not isinstance(inner, BatchingEmbedder):
        index.embedder = BatchingEmbedder(inner)
    index.embed_query("warm up")
    tree = index.tree
    _ = (tree.leaf_counts, tree.leaf_membership, tree.fan_out, tree.roots)
    return index


def search_config(body: SearchRequest | AskRequest) -> SearchConfig:
    """The search a request asks for: its profile (as ``--profile`` on the CLI), then its
    fields."""
    base = profile_config(body.profile)
    beam = base.beam if body.beam is None else body.beam
    if isinstance(body, SearchRequest):
        if not (body.tree or body.bm25):
            raise InputError("tree and bm25 cannot both be false: nothing would search")
        candidates = base.candidates if body.candidates is None else body.candidates
        return base.with_(
            k=body.k,
            beam=beam,
            candidates=max(candidates, body.k),
            use_tree=base.use_tree and body.tree,
            use_bm25=base.use_bm25 and body.bm25,
        )
    return base.with_(k=body.k, beam=beam, candidates=max(base.candidates, body.k))


def agent_for(state: ServerState, index: Any, body: AskRequest) -> RetrieveAndAnswer:
    llm = state.need_llm()
    config = search_config(body)
    docs = body.docs

    def retrieve(query: str) -> Any:
        return index.search(query, config=config, docs=docs)

    return RetrieveAndAnswer(
        llm,
        retrieve,
        max_retrievals=state.budget(body.query, body.max_retrievals),
        max_tokens=body.max_tokens,
        check_answers=body.answer_check,
        names_check=body.names_check,
    )


def ask_document(result: Any, k: int, max_retrievals: int | None = None) -> dict[str, Any]:
    document = result.to_dict()
    document["citations"] = views.citations(result.evidence[:k])
    if max_retrievals is not None:
        document["max_retrievals"] = max_retrievals
    return document


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def agent_events(
    state: ServerState,
    run: Callable[[Callable[[Step], None]], Any],
    k: int,
    max_retrievals: int | None = None,
) -> AsyncIterator[bytes]:
    """Run the agent in a thread; yield an SSE ``step`` event as each step completes, then the
    ``answer`` (or an ``error``). ``run(on_step)`` runs the episode and returns its result;
    ``max_retrievals``, the episode's budget, goes into the answer."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def on_step(step: Step) -> None:
        loop.call_soon_threadsafe(events.put_nowait, ("step", step.to_dict()))

    async def worker() -> None:
        try:
            result = await state.blocking(lambda: run(on_step))
            await events.put(("answer", ask_document(result, k, max_retrievals)))
        except Exception as exc:  # reported to the client as an event, never raised
            response = exception_response(exc)
            await events.put(("error", json.loads(bytes(response.body))))

    task = asyncio.create_task(worker())
    try:
        while True:
            try:
                kind, data = await asyncio.wait_for(events.get(), SSE_KEEPALIVE_S)
            except TimeoutError:
                yield b": working\n\n"
                continue
            yield _sse(kind, data)
            if kind in ("answer", "error"):
                break
    finally:
        if not task.done():
            task.cancel()


# ---------------------------------------------------------------------------- the app
def _web_static() -> Path | None:
    """The web page's files, when the package ships them (src/psirag/web/static)."""
    folder = Path(__file__).resolve().parent.parent / "web" / "static"
    return folder if (folder / "index.html").is_file() else None


def _swagger_assets() -> Path | None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    folder = Path(str(swagger_ui_path))
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def create_app(
    index_dir: str | Path,
    *,
    settings: ServerSettings | None = None,
    llm: Any = None,
    embedder: Any = None,
    index: Any = None,
    mcp: bool = True,
) -> FastAPI:
    """The application serving the index in ``index_dir``.

    ``llm`` is an :class:`psirag.llm.LLMClient` (None: the endpoints that need one answer 503);
    ``embedder`` replaces the index's own (it must have the same id); ``index`` serves an index
    object already loaded from ``index_dir``.
    """
    from psirag.index import Index

    settings = settings or ServerSettings()
    settings.check()
    folder = Path(index_dir)
    if index is None:
        index = Index.load(folder, embedder=embedder)
    prepare_index(index)
    gated = GatedLLM(llm, settings.llm_concurrency) if llm is not None else None
    state = ServerState(IndexHolder(index, folder), settings, gated, JobRunner())
    web = _web_static()
    swagger = _swagger_assets()

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
            state.jobs.close()
            embedder_ = state.holder.get().index.embedder
            if isinstance(embedder_, BatchingEmbedder):
                embedder_.close()
            if state.llm is not None:
                state.llm.close()

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

    def exempt(path: str) -> bool:
        """/health, the API description and the static files of the docs and the web page."""
        if path in settings.exempt_paths or path in ("/openapi.json", "/docs"):
            return True
        if path.startswith(DOCS_ASSETS + "/"):
            return True
        return web is not None and (path == "/" or path.startswith("/static/"))

    # Added innermost first: CORS outside auth (a 401 still carries CORS headers), auth outside
    # the limits (an unauthenticated client learns nothing about them).
    app.add_middleware(
        LimitsMiddleware, max_body=settings.max_body_bytes, max_url=settings.max_url_bytes
    )
    if settings.api_key is not None:
        app.add_middleware(AuthMiddleware, key=settings.api_key, exempt=exempt)
    if settings.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=[
                "Authorization",
                "X-API-Key",
                "Content-Type",
                "Accept",
                "Mcp-Session-Id",
                "Mcp-Protocol-Version",
            ],
            expose_headers=["Mcp-Session-Id"],
        )

    # -- docs (served from the swagger-ui-bundle package: no CDN needed)
    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        if swagger is None:
            return get_swagger_ui_html(openapi_url="/openapi.json", title="psirag API")
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="psirag API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    if swagger is not None:
        from starlette.staticfiles import StaticFiles

        app.mount(DOCS_ASSETS, StaticFiles(directory=swagger), name="docs-assets")

    if web is not None:
        from fastapi.responses import FileResponse
        from starlette.staticfiles import StaticFiles

        app.mount("/static", StaticFiles(directory=web), name="static")

        @app.get("/", include_in_schema=False)
        async def page() -> FileResponse:
            return FileResponse(web / "index.html")

    # -- read endpoints
    @app.get("/health", tags=["server"])
    async def health() -> dict[str, Any]:
        """Liveness: answers without a key, says nothing about the index."""
        return {"status": "ok", "version": __version__}

    @app.get("/index", tags=["index"])
    async def describe() -> dict[str, Any]:
        """What ``psirag inspect --json`` prints under "index", plus the served generation."""
        from psirag.cli import inspect_summary

        generation = state.holder.get()
        body = inspect_summary(generation.index, folder)
        body["generation"] = generation.number
        body["llm"] = state.llm.id if state.llm is not None else None
        return body

    @app.post("/search", tags=["query"])
    async def search(body: SearchRequest) -> dict[str, Any]:
        """Hybrid tree + BM25 search: ``search --json``'s document, plus each passage's tree
        path (``hits``)."""
        query = state.check_query(body.query)
        state.check_k(body.k)
        config = search_config(body)
        index = state.holder.get().index
        passages = await state.blocking(lambda: index.search(query, config=config, docs=body.docs))
        return views.search_payload(index, query, body.k, passages)

    @app.post("/ask", tags=["query"], response_model=None)
    async def ask(body: AskRequest, request: Request) -> Any:
        """The retrieve-and-answer agent. ``Accept: text/event-stream`` streams a ``step`` event
        per agent step as it happens, then ``answer`` (or ``error``)."""
        query = state.check_query(body.query)
        state.check_k(body.k)
        index = state.holder.get().index
        # In a worker thread: with max_retrievals auto, the first ask loads the hop model.
        agent = await state.blocking(lambda: agent_for(state, index, body))
        if "text/event-stream" in request.headers.get("accept", ""):
            return StreamingResponse(
                agent_events(
                    state,
                    lambda on_step: agent.run(query, on_step=on_step),
                    body.k,
                    agent.max_retrievals,
                ),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        result = await state.blocking(lambda: agent.run(query))
        return ask_document(result, body.k, agent.max_retrievals)

    @app.post("/summarize", tags=["query"])
    async def summarize(body: SummarizeRequest) -> dict[str, Any]:
        """Summarization mode: one tree visit, the top nodes given to the LLM in document
        order."""
        query = state.check_query(body.query)
        llm = state.need_llm()
        index = state.holder.get().index

        def visit(q: str) -> Any:
            return index.visit(q, docs=body.docs, beam=body.top_k, k=body.top_k)

        summarizer = Summarizer(llm, visit, top_k=body.top_k, max_tokens=body.max_tokens)
        result = await state.blocking(lambda: summarizer.run(query))
        return {
            "summary": result.answer,
            "query": result.query,
            "nodes": [node_to_dict(n) for n in result.evidence],
            "clipped_nodes": result.clipped_nodes,
        }

    @app.get("/tree", tags=["index"])
    async def tree(
        node: int | None = Query(None, description="start here (default: the root)"),
        depth: int = Query(2, ge=0, le=6, description="levels below the start node"),
    ) -> dict[str, Any]:
        """A subtree for the page: top levels first, deeper levels lazily per node."""
        index = state.holder.get().index
        if node is not None and not 0 <= node < index.tree.n_nodes:
            raise NotFoundError(
                f"node {node} does not exist: nodes are 0..{index.tree.n_nodes - 1}"
            )
        return await state.blocking(lambda: views.tree_payload(index, node, depth))

    @app.get("/nodes/{node_id}", tags=["index"])
    async def node(node_id: int) -> dict[str, Any]:
        """One node: abstract (a leaf: its text), layer, path, children, leaf count and the
        leaves most similar to it."""
        index = state.holder.get().index
        if not 0 <= node_id < index.tree.n_nodes:
            raise NotFoundError(
                f"node {node_id} does not exist: nodes are 0..{index.tree.n_nodes - 1}"
            )
        return await state.blocking(lambda: views.node_payload(index, node_id))

    @app.get("/documents", tags=["documents"])
    async def documents() -> dict[str, Any]:
        """Every indexed document with its title and chunk count."""
        index = state.holder.get().index
        return views.documents_payload(index)

    # -- write endpoints (need the living index: Index.add / Index.remove)
    @app.post("/documents", tags=["documents"], status_code=202)
    async def add_document(request: Request) -> dict[str, Any]:
        """Add a document (JSON ``{"text", "id"?, "title"?}`` or a multipart ``file``) as a
        background job; ``GET /jobs/{id}`` follows it."""
        index = state.holder.get().index
        if not callable(getattr(index, "add", None)):
            raise NotImplementedYetError(
                "adding documents needs the living index (Index.add), which this psirag "
                "version does not have; rebuild the index with `psirag index` instead"
            )
        text, doc_id, title = await _document_from_request(request)
        from psirag.ingest import documents_from_strings

        doc_id = doc_id or f"doc-{int(time.time() * 1000)}"
        if doc_id in set(index.documents):
            raise InputError(f"document {doc_id!r} is already indexed; DELETE it first")
        document = documents_from_strings([text], titles=[title or doc_id], ids=[doc_id])

        def work(job: Any) -> dict[str, Any]:
            return _apply_write(state, "add", document, job)

        job = state.jobs.submit("add", work)
        return {"job": job.to_dict()}

    @app.delete("/documents/{doc_id}", tags=["documents"], status_code=202)
    async def remove_document(doc_id: str) -> dict[str, Any]:
        """Remove a document as a background job."""
        index = state.holder.get().index
        if not callable(getattr(index, "remove", None)):
            raise NotImplementedYetError(
                "removing documents needs the living index (Index.remove), which this psirag "
                "version does not have; rebuild the index without the document instead"
            )
        if doc_id not in set(index.documents):
            raise NotFoundError(f"document {doc_id!r} is not in this index (see GET /documents)")

        def work(job: Any) -> dict[str, Any]:
            return _apply_write(state, "remove", [doc_id], job)

        job = state.jobs.submit("remove", work)
        return {"job": job.to_dict()}

    @app.get("/jobs/{job_id}", tags=["documents"])
    async def job_status(job_id: str) -> dict[str, Any]:
        """A write job: queued, running, done or failed, with its progress."""
        job = state.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r} (jobs are forgotten when the server stops)")
        return job.to_dict()

    if settings.api_key is not None:
        _declare_bearer_auth(app)

    from psirag.server.openai_api import install_openai_routes

    install_openai_routes(app, state)
    if mcp_server is not None:
        mcp_app = mcp_server.streamable_http_app(
            streamable_http_path="/mcp",
            host=settings.host,
            stateless_http=True,
            json_response=True,
        )
        for route in mcp_app.routes:
            app.router.routes.append(route)
    return app


def _declare_bearer_auth(app: FastAPI) -> None:
    """Say in the OpenAPI schema that requests need the key, so /docs offers "Authorize"."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "apiKey": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"apiKey": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _document_from_request(request: Request) -> tuple[str, str | None, str | None]:
    """The text, id and title of a document sent as JSON or as a multipart file upload."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InputError("the multipart upload has no file field named 'file'")
        raw = await upload.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"the uploaded file {upload.filename!r} is not UTF-8 text (byte {exc.start})"
            ) from exc
        doc_id = form.get("id")
        return text, str(doc_id) if doc_id else upload.filename, None
    try:
        body = AddDocumentRequest.model_validate_json(await request.body())
    except ValueError as exc:
        raise InputError(
            f'send JSON {{"text": "...", "id"?: "..."}} or a multipart file field "file": {exc}'
        ) from exc
    if not body.text.strip():
        raise InputError("the document text is empty")
    return body.text, body.id, body.title


def _apply_write(state: ServerState, kind: str, payload: Any, job: Any) -> dict[str, Any]:
    """One write on the living index, run by the single writer: apply, save, publish.

    The update runs on a new facade over the served data (``IndexData`` is immutable), so the
    index object in service is never changed; requests already running finish on the
    generation they took, and the new one is published only once it is saved.
    """
    from psirag.index import Index

    served = state.holder.get().index
    job.progress(0, 1)
    # Under the writer lock, build on what is on disk, not on what is served: a `psirag add`
    # from the command line since the last server write must not be overwritten.
    updated, done = Index.update_saved(
        state.holder.folder,
        lambda index: index.add(payload) if kind == "add" else index.remove(payload),
        embedder=served.embedder,
    )
    summary = done.summary
    prepare_index(updated)
    generation = state.holder.publish(updated)
    job.progress(1, 1)
    return {
        "generation": generation.number,
        "documents": len(updated.documents),
        "update": summary.to_dict(),
    }


__all__ = ["ServerState", "create_app", "error_body", "exception_response"]
