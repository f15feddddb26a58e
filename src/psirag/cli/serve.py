"""``psirag serve DIR`` (HTTP API, OpenAI-compatible chat, MCP at /mcp) and ``psirag mcp DIR``
(MCP over stdio). The options that set :class:`ServerSettings` fields are made from the fields
(:data:`SETTINGS_FLAGS`). The web framework loads when a command runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from psirag.cli.common import answer_llm, eprint, llm_spec, load_query_index
from psirag.cli.options import (
    LLM_ENV,
    Flag,
    add_http_options,
    add_index_argument,
    add_llm_options,
    add_query_embedder_option,
    add_settings_options,
    parse_max_retrievals,
    positive_float,
    positive_int,
    settings_values,
)
from psirag.server.settings import API_KEY_ENV, ServerSettings

log = logging.getLogger("psirag.server")

SETTINGS_FLAGS: dict[str, Flag] = {
    "host": Flag("--host", "address to bind (127.0.0.1)"),
    "port": Flag("--port", "port (8000; 0: any)", type=int),
    "llm_concurrency": Flag(
        "--llm-concurrency",
        "LLM calls in flight at once, over all requests (default {default})",
        type=positive_int,
        metavar="N",
    ),
    "max_asks": Flag(
        "--max-asks",
        "questions answered at once, on threads of their own (searches never wait for them; "
        "default {default})",
        type=positive_int,
        metavar="N",
    ),
    "ask_queue": Flag(
        "--ask-queue",
        "questions that may wait for a place; beyond, 503 with Retry-After (default {default})",
        type=int,
        metavar="N",
    ),
    "api_key": Flag(
        "--api-key",
        f"require this key on every request but /health (default ${API_KEY_ENV})",
        metavar="KEY",
    ),
    "insecure": Flag(
        "--insecure", "allow a non-loopback --host without an API key", action="store_true"
    ),
    "cors_origins": Flag(
        "--cors-origin",
        "allow browser pages from this origin (repeatable; CORS is off by default)",
        action="append",
        metavar="ORIGIN",
        to_field=tuple,
    ),
    "request_timeout": Flag(
        "--request-timeout",
        "seconds a request may run before a 504 (default {default:g})",
        type=positive_float,
        metavar="S",
    ),
    "max_body_bytes": Flag(
        "--max-body-bytes",
        "largest request body (default {default:,}); larger: 413",
        type=positive_int,
        metavar="N",
    ),
    "max_query_chars": Flag(
        "--max-query-chars",
        "longest query or chat message (default {default:,})",
        type=positive_int,
        metavar="N",
    ),
    "workers": Flag(
        "--workers",
        "server processes on the one port (default {default}); each loads the query model, the "
        "index's arrays are shared; writes stay one at a time and every worker serves the "
        "newest generation",
        type=positive_int,
        metavar="N",
    ),
    "read_ahead_share": Flag(
        "--read-ahead-share",
        "after a start, read the index's mapped files into the page cache (so that the first "
        "write does not read them a page at a time) while they fit in this share of the "
        "available memory (default {default:g}; 0: read none)",
        type=float,
        metavar="SHARE",
    ),
    "max_retrievals": Flag(
        "--max-retrievals",
        "retrievals after the first for an ask that names none (default {default}); auto: "
        "from the question's predicted hops (psirag hops)",
        type=parse_max_retrievals,
        metavar="N|auto",
    ),
}
"""The :class:`ServerSettings` fields ``psirag serve`` sets, as options (defaults: the
fields'); :func:`settings_from` reads them back by the same table."""


def _llm_arguments(p: argparse.ArgumentParser) -> None:
    """--llm, --cache, --embedder and the shared --timeout/--retries, plus the server's cap on
    LLM calls in flight."""
    add_llm_options(
        p,
        help=f"LLM for /ask, /summarize and chat: openai:<url>#<model>, llamacpp:<file>, local "
        f"(default ${LLM_ENV}; without one only search and browsing work)",
    )
    add_query_embedder_option(p)
    add_http_options(p)
    add_settings_options(p, ServerSettings, SETTINGS_FLAGS, _LLM_FLAGS)


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``mcp`` to the main CLI."""
    p = subparsers.add_parser(
        "serve",
        help="serve an index over HTTP (API, OpenAI-compatible chat, MCP); psirag[server]",
        description="An HTTP API over an index: /search, /ask (SSE steps), /summarize, /tree, "
        "/nodes/ID, /documents, /v1/chat/completions, MCP at /mcp; docs at /docs. "
        "Needs: pip install 'psirag[server]'.",
    )
    add_index_argument(p)
    add_settings_options(p, ServerSettings, SETTINGS_FLAGS, ["host", "port"])
    _llm_arguments(p)
    add_settings_options(p, ServerSettings, SETTINGS_FLAGS, _SERVE_FLAGS)
    p.add_argument("--no-mcp", action="store_true", help="do not serve MCP at /mcp")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run_serve)

    m = subparsers.add_parser(
        "mcp",
        help="an MCP server over stdio for an index (tools: search, ask, inspect_node, ...)",
        description="Serve an index's tools (search, ask, inspect_node, list_documents) to an "
        "MCP client over stdin/stdout. Needs: pip install 'psirag[server]'.",
    )
    add_index_argument(m)
    _llm_arguments(m)
    m.set_defaults(func=run_mcp)


_LLM_FLAGS = ("llm_concurrency", "max_asks", "ask_queue")
"""The options serve and mcp share: how many LLM calls and questions run at once."""
_SERVE_FLAGS = (
    "api_key",
    "insecure",
    "cors_origins",
    "request_timeout",
    "max_body_bytes",
    "max_query_chars",
    "max_retrievals",
    "workers",
    "read_ahead_share",
)
_ALL_FLAGS = ("host", "port", *_LLM_FLAGS, *_SERVE_FLAGS)


def _llm_client(args: argparse.Namespace) -> Any:
    """The LLM client the arguments name, or None when no LLM is given."""
    spec = llm_spec(args)
    if not spec:
        return None
    return answer_llm(args, spec, max_concurrency=args.llm_concurrency)


def _load_index(args: argparse.Namespace, embedder: Any) -> Any:
    return load_query_index(args, embedder)


def settings_from(args: argparse.Namespace) -> ServerSettings:
    """The settings the parsed options give (``$PSIRAG_API_KEY`` when ``--api-key`` is not)."""
    values = settings_values(args, SETTINGS_FLAGS, _ALL_FLAGS)
    if values["api_key"] is None:
        values["api_key"] = os.environ.get(API_KEY_ENV)
    settings = ServerSettings(**values)
    settings.check()
    return settings


def run_serve(args: argparse.Namespace, *, embedder: Any = None) -> int:
    """Check the settings (refusing an exposed address without a key) before loading anything,
    then load the index and serve until interrupted. ``embedder`` replaces the index's own."""
    settings = settings_from(args)
    from psirag.server import require_server_extra

    require_server_extra("fastapi", "uvicorn", "mcp")
    import uvicorn

    from psirag.server.app import create_app
    from psirag.server.blas import limit_blas_threads

    logging.getLogger("psirag").setLevel(args.log_level.upper())
    if settings.workers > 1:
        return _serve_workers(args, settings, embedder)
    limit_blas_threads()
    index = _load_index(args, embedder)
    llm = _llm_client(args)
    app = create_app(args.index, settings=settings, llm=llm, index=index, mcp=not args.no_mcp)
    _announce(args, settings, settings.port, llm.id if llm is not None else "none")
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
    )
    return 0


def _announce(args: argparse.Namespace, settings: ServerSettings, port: int, llm: str) -> None:
    where = f"http://{settings.host}:{port}"
    auth = "an API key" if settings.api_key else "no API key (loopback only)"
    workers = f", {settings.workers} workers" if settings.workers > 1 else ""
    print(
        f"psirag serve: {args.index} at {where} (docs {where}/docs), {auth}, LLM {llm}{workers}",
        file=sys.stderr,
        flush=True,
    )


def _serve_workers(args: argparse.Namespace, settings: ServerSettings, embedder: Any) -> int:
    """``--workers N``: load the index once here (a bad folder fails before anything starts),
    bind the port, then fork the workers (:mod:`psirag.server.workers`). Each worker loads its
    own query model and LLM client after the fork (a model's threads do not survive one)."""
    import secrets
    from pathlib import Path

    from psirag.cli.common import http_policy_from
    from psirag.embed.endpoints import confirm_index_embedder
    from psirag.index import Index
    from psirag.server.app import create_app
    from psirag.server.blas import limit_blas_threads
    from psirag.server.jobs import JobRunner, SharedJobs
    from psirag.server.workers import bind_port, serve_workers

    if not hasattr(os, "fork"):
        from psirag.errors import InputError

        raise InputError("--workers N needs a system with fork (Linux, macOS); leave it out here")
    index = Index.load(args.index, embedder=embedder)
    n = settings.workers
    boot = secrets.token_hex(4)  # one ETag token for all workers: their numbers agree
    # before the fork: the last server's unfinished jobs become interrupted, ids go on after its
    shared = SharedJobs.prepare(Path(args.index), n)

    def make_app(k: int) -> Any:
        limit_blas_threads()  # in the worker, after the fork
        if embedder is None:
            confirm_index_embedder(index, args.embedder, http_policy_from(args))
        jobs = JobRunner.for_worker(shared, k)
        llm = _llm_client(args)
        return create_app(
            args.index,
            settings=settings,
            llm=llm,
            index=index,
            mcp=not args.no_mcp,
            jobs=jobs,
            boot=boot,
        )

    sock = bind_port(settings.host, settings.port)
    _announce(args, settings, int(sock.getsockname()[1]), llm_spec(args) or "none")
    return serve_workers(n, make_app, sock, shared, log_level=args.log_level)


def run_mcp(args: argparse.Namespace, *, embedder: Any = None) -> int:
    """MCP over stdio: stdout carries only the protocol, everything else goes to stderr.

    ``initialize`` is answered at once: the index and its model load in a thread, and the first
    tool call waits for them (an assistant host starting the server on demand is not kept
    waiting). What refuses an index (an unreadable manifest, an endpoint nobody confirmed) is
    still checked before serving, from the manifest alone."""
    from psirag.server import require_server_extra

    require_server_extra("fastapi", "mcp")
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from psirag.server.blas import limit_blas_threads
    from psirag.server.jobs import JOBS_FILE, JobRunner
    from psirag.server.mcp_tools import build_mcp_server
    from psirag.server.state import GatedLLM, IndexHolder, ServerState, prepare_index

    settings = ServerSettings(
        llm_concurrency=args.llm_concurrency, max_asks=args.max_asks, ask_queue=args.ask_queue
    )
    preloaded = None if _manifest_allows(args, embedder) else _load_index(args, embedder)
    llm = _llm_client(args)
    gated = GatedLLM(llm, settings.llm_concurrency) if llm is not None else None
    # the tools only read, so this process makes no jobs: it shows those of a `psirag serve`
    # on the same index, from its jobs file and jobs folder (read only; see psirag.server.jobs)
    jobs = JobRunner(observe=Path(args.index) / JOBS_FILE)

    def load() -> ServerState:
        index = prepare_index(preloaded or _load_index(args, embedder))
        return ServerState(IndexHolder(index, Path(args.index)), settings, gated, jobs)

    limit_blas_threads()  # from the main thread: OpenBLAS may ignore a change made in another
    loader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="psirag-mcp-load")
    state = loader.submit(load)
    state.add_done_callback(_report_load_error)
    loader.shutdown(wait=False)
    server = build_mcp_server(state)
    try:
        server.run()  # stdio
    finally:
        jobs.close()
        if gated is not None:
            gated.close()
    return 0


def _manifest_allows(args: argparse.Namespace, embedder: Any) -> bool:
    """Whether the index may load after serving has begun: its manifest reads, and the
    embedder it names may be called (a local model, a confirmed endpoint, or one the user
    chose). False: load it before serving, so that its errors refuse the command as before."""
    import json
    from pathlib import Path

    from psirag.trust import require_confirmed

    try:
        manifest = json.loads((Path(args.index) / "manifest.json").read_text(encoding="utf-8"))
        spec = manifest["config"]["embedder"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(spec, str):
        return False
    if embedder is None and not args.embedder:
        require_confirmed(spec, kind="embedder")  # refuses here, before serving
    return True


def _report_load_error(done: Any) -> None:
    """Say on stderr why the index did not load (each tool call says it too)."""
    exc = done.exception()
    if exc is not None:
        eprint(f"psirag: error: the index did not load: {exc}")


__all__ = ["register", "run_mcp", "run_serve", "settings_from"]
