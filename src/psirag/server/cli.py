"""``psirag serve DIR`` (HTTP API, OpenAI-compatible chat, MCP at /mcp) and ``psirag mcp DIR``
(MCP over stdio). Only argparse here: the web framework loads when a command runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from psirag.hops import parse_max_retrievals
from psirag.server.settings import API_KEY_ENV, ServerSettings

LLM_ENV = "PSIRAG_LLM"
log = logging.getLogger("psirag.server")


def _positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def _llm_arguments(p: argparse.ArgumentParser) -> None:
    """--llm, --cache, --embedder and the shared --timeout/--retries, plus the server's cap on
    LLM calls in flight."""
    from psirag.embed.endpoints import add_index_embedder_option
    from psirag.http import add_http_options

    p.add_argument(
        "--llm",
        metavar="SPEC",
        help=f"LLM for /ask, /summarize and chat: openai:<url>#<model>, llamacpp:<file>, local "
        f"(default ${LLM_ENV}; without one only search and browsing work)",
    )
    p.add_argument("--cache", metavar="PATH", help="SQLite file caching LLM replies (off)")
    add_index_embedder_option(p)
    add_http_options(p)
    p.add_argument(
        "--llm-concurrency",
        type=_positive_int,
        default=ServerSettings.llm_concurrency,
        metavar="N",
        help="LLM calls in flight at once, over all requests "
        f"(default {ServerSettings.llm_concurrency})",
    )
    p.add_argument(
        "--max-asks",
        type=_positive_int,
        default=ServerSettings.max_asks,
        metavar="N",
        help="questions answered at once, on threads of their own (searches never wait for "
        f"them; default {ServerSettings.max_asks})",
    )
    p.add_argument(
        "--ask-queue",
        type=int,
        default=ServerSettings.ask_queue,
        metavar="N",
        help="questions that may wait for a place; beyond, 503 with Retry-After "
        f"(default {ServerSettings.ask_queue})",
    )


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``mcp`` to the main CLI."""
    p = subparsers.add_parser(
        "serve",
        help="serve an index over HTTP (API, OpenAI-compatible chat, MCP); psirag[server]",
        description="An HTTP API over an index: /search, /ask (SSE steps), /summarize, /tree, "
        "/nodes/ID, /documents, /v1/chat/completions, MCP at /mcp; docs at /docs. "
        "Needs: pip install 'psirag[server]'.",
    )
    p.add_argument("index", metavar="DIR", help="index folder (from psirag index)")
    p.add_argument("--host", default=ServerSettings.host, help="address to bind (127.0.0.1)")
    p.add_argument("--port", type=int, default=ServerSettings.port, help="port (8000; 0: any)")
    _llm_arguments(p)
    p.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"require this key on every request but /health (default ${API_KEY_ENV})",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without an API key",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from this origin (repeatable; CORS is off by default)",
    )
    p.add_argument(
        "--request-timeout",
        type=_positive_float,
        default=ServerSettings.request_timeout,
        metavar="S",
        help=f"seconds a request may run before a 504 (default {ServerSettings.request_timeout:g})",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=ServerSettings.max_body_bytes,
        metavar="N",
        help=f"largest request body (default {ServerSettings.max_body_bytes:,}); larger: 413",
    )
    p.add_argument(
        "--max-query-chars",
        type=_positive_int,
        default=ServerSettings.max_query_chars,
        metavar="N",
        help=f"longest query or chat message (default {ServerSettings.max_query_chars:,})",
    )
    p.add_argument(
        "--max-retrievals",
        type=parse_max_retrievals,
        default=ServerSettings.max_retrievals,
        metavar="N|auto",
        help="retrievals after the first for an ask that names none (default "
        f"{ServerSettings.max_retrievals}); auto: from the question's predicted hops (psirag hops)",
    )
    p.add_argument("--no-mcp", action="store_true", help="do not serve MCP at /mcp")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=run_serve)

    m = subparsers.add_parser(
        "mcp",
        help="an MCP server over stdio for an index (tools: search, ask, inspect_node, ...)",
        description="Serve an index's tools (search, ask, inspect_node, list_documents) to an "
        "MCP client over stdin/stdout. Needs: pip install 'psirag[server]'.",
    )
    m.add_argument("index", metavar="DIR", help="index folder (from psirag index)")
    _llm_arguments(m)
    m.set_defaults(func=run_mcp)


def _llm_client(args: argparse.Namespace) -> Any:
    """The LLM client the arguments name, or None when no LLM is given."""
    spec = args.llm or os.environ.get(LLM_ENV)
    if not spec:
        return None
    from psirag.http import http_policy_from
    from psirag.llm import LLMClient, load_chat_model

    return LLMClient(
        load_chat_model(spec, http=http_policy_from(args)),
        cache_path=args.cache,
        max_concurrency=args.llm_concurrency,
    )


def _load_index(args: argparse.Namespace, embedder: Any) -> Any:
    """The index, with the query embedder the user confirmed (``--embedder``) unless one is
    given here."""
    from psirag.embed.endpoints import confirm_index_embedder
    from psirag.http import http_policy_from
    from psirag.index import Index

    index = Index.load(args.index, embedder=embedder)
    if embedder is None:
        confirm_index_embedder(index, args.embedder, http_policy_from(args))
    return index


def settings_from(args: argparse.Namespace) -> ServerSettings:
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    settings = ServerSettings(
        host=args.host,
        port=args.port,
        api_key=key,
        insecure=args.insecure,
        cors_origins=tuple(args.cors_origin),
        request_timeout=args.request_timeout,
        max_body_bytes=args.max_body_bytes,
        max_query_chars=args.max_query_chars,
        llm_concurrency=args.llm_concurrency,
        max_asks=args.max_asks,
        ask_queue=args.ask_queue,
        max_retrievals=args.max_retrievals,
    )
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

    logging.getLogger("psirag").setLevel(args.log_level.upper())
    index = _load_index(args, embedder)
    llm = _llm_client(args)
    app = create_app(args.index, settings=settings, llm=llm, index=index, mcp=not args.no_mcp)
    where = f"http://{settings.host}:{settings.port}"
    auth = "an API key" if settings.api_key else "no API key (loopback only)"
    print(
        f"psirag serve: {args.index} at {where} (docs {where}/docs), {auth}, "
        f"LLM {llm.id if llm is not None else 'none'}",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
    )
    return 0


def run_mcp(args: argparse.Namespace, *, embedder: Any = None) -> int:
    """MCP over stdio: stdout carries only the protocol, everything else goes to stderr."""
    from psirag.server import require_server_extra

    require_server_extra("fastapi", "mcp")
    from psirag.server.app import ServerState, prepare_index
    from psirag.server.jobs import JobRunner
    from psirag.server.mcp_tools import build_mcp_server
    from psirag.server.state import GatedLLM, IndexHolder

    settings = ServerSettings(
        llm_concurrency=args.llm_concurrency, max_asks=args.max_asks, ask_queue=args.ask_queue
    )
    index = prepare_index(_load_index(args, embedder))
    llm = _llm_client(args)
    gated = GatedLLM(llm, settings.llm_concurrency) if llm is not None else None
    from pathlib import Path

    state = ServerState(IndexHolder(index, Path(args.index)), settings, gated, JobRunner())
    server = build_mcp_server(state)
    try:
        server.run()  # stdio
    finally:
        state.jobs.close()
        if gated is not None:
            gated.close()
    return 0


__all__ = ["register", "run_mcp", "run_serve", "settings_from"]
