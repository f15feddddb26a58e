"""The MCP server: the index's tools for an AI assistant, over stdio (``psirag mcp DIR``) or
streamable HTTP (``/mcp`` on ``psirag serve``). Both share the HTTP API's state and answer with
the same JSON shapes. The request models, the agent and the views are imported by the first tool
call, so that ``initialize`` does not wait for them.

Tools: ``search`` (hybrid retrieval), ``ask`` (the retrieve-and-answer agent; needs an LLM),
``inspect_node`` (a node of the abstract tree, the root by default) and ``list_documents``.
A failure the user can fix comes back as a tool error with psirag's own message.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from psirag import __version__
from psirag.errors import PsiragError
from psirag.server.budget import Budget

if TYPE_CHECKING:
    from psirag.server.state import ServerState

INSTRUCTIONS = (
    "Tools over one psirag (Ψ-RAG) index: a corpus chunked into passages under an abstract "
    "tree. Use search for passages with their sources, ask for an answer written by the "
    "retrieve-and-answer agent with numbered citations, inspect_node to walk the tree from the "
    "root (node ids come from search hits or earlier inspect_node calls), list_documents for "
    "the document ids search and ask can be restricted to."
)


def build_mcp_server(state: ServerState | Future[ServerState]) -> Any:
    """An ``MCPServer`` whose tools run on ``state``; given as a future (``psirag mcp``, which
    answers ``initialize`` while the index and its model load in a thread), each tool call
    waits for it, and a load that failed is that call's error."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server: Any = MCPServer(
        "psirag", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    async def ready() -> ServerState:
        """The state, once loaded."""
        if not isinstance(state, Future):
            return state
        try:
            return await asyncio.wrap_future(state) if not state.done() else state.result()
        except (PsiragError, OSError) as exc:
            raise ToolError(f"the index could not be loaded: {type(exc).__name__}: {exc}") from exc

    async def run(fn: Any, *, llm: bool = False) -> Any:
        """``fn(state)`` in a worker thread; LLM work in the ask pool (admission control)."""
        st = await ready()
        try:
            return await (st.llm_work(lambda: fn(st)) if llm else st.blocking(lambda: fn(st)))
        except PsiragError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    @server.tool()
    async def search(query: str, k: int = 5, docs: list[str] | None = None) -> dict[str, Any]:
        """Hybrid search (abstract tree + BM25, fused by RRF). Returns passages with text,
        score and source (document, title, chunk, character span), and each passage's path
        in the tree."""
        from psirag.server import views
        from psirag.server.models import SearchRequest
        from psirag.server.querying import search_config

        body = SearchRequest(query=query, k=k, docs=docs)

        def go(state: ServerState) -> dict[str, Any]:
            state.check_query(query)
            state.check_k(k)
            index = state.holder.latest().index
            passages = index.search(query, config=search_config(body), docs=docs)
            return views.search_payload(index, query, k, passages)

        return await run(go)

    @server.tool()
    async def ask(
        question: str,
        max_retrievals: Budget | None = None,
        k: int = 5,
        docs: list[str] | None = None,
    ) -> dict[str, Any]:
        """Answer a question with the retrieve-and-answer agent: it retrieves, reads, may
        retrieve again with a sub-question, then answers. Returns the answer, its citations
        (the passages the model cited, verified, with document, page and text), the top-k
        retrieved passages as evidence, the steps it took and the budget used.
        ``max_retrievals``: retrievals after the first, or "auto" (from the question's
        predicted hops); by default the server's setting."""
        from psirag.server import views
        from psirag.server.models import AskRequest
        from psirag.server.querying import agent_for

        body = AskRequest(query=question, max_retrievals=max_retrievals, k=k, docs=docs)

        def go(state: ServerState) -> dict[str, Any]:
            state.check_query(question, "question")
            state.check_k(k)
            index = state.holder.latest().index
            agent = agent_for(state, index, body)
            result = agent.run(question)
            return {
                "answer": result.answer,
                "max_retrievals": agent.max_retrievals,
                **views.answer_payload(result, k),
                "steps": [
                    {"query": s.query, "thought": s.thought, "action": s.action}
                    for s in result.steps
                ],
            }

        return await run(go, llm=True)

    @server.tool()
    async def inspect_node(node: int | None = None) -> dict[str, Any]:
        """One node of the abstract tree (default: the root): its abstract (a leaf: its
        text), layer, path from the root, children with labels, and sample leaves."""
        from psirag.server import views

        def go(state: ServerState) -> dict[str, Any]:
            index = state.holder.latest().index
            target = int(index.tree.roots[0]) if node is None else node
            return views.node_payload(index, target)

        return await run(go)

    @server.tool()
    async def list_documents(
        offset: int = 0, limit: int = 50, query: str | None = None
    ) -> dict[str, Any]:
        """A page of the documents (id, title, chunks, status), in corpus order: ``total``
        says how many match, ``offset + limit`` is the next page. ``query`` keeps those whose
        id or title holds it."""
        from psirag.server import catalog

        def go(state: ServerState) -> dict[str, Any]:
            generation = state.holder.latest()
            rows = catalog.document_rows(generation.index, state.jobs.all())
            body = catalog.page_of(rows, offset=offset, limit=min(limit, 200), query=query)
            body["generation"] = generation.number
            return body

        return await run(go)

    _refuse_unknown_arguments(server)
    return server


def _refuse_unknown_arguments(server: Any) -> None:
    """Make every tool refuse arguments it does not take, as the HTTP API refuses unknown
    fields (the MCP library ignores them by default, so a misspelt ``max_retrieval`` would
    silently be dropped). The schema says so too (``additionalProperties: false``)."""
    for tool in server._tool_manager.list_tools():
        model = tool.fn_metadata.arg_model
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        tool.parameters = model.model_json_schema(by_alias=True)


__all__ = ["INSTRUCTIONS", "build_mcp_server"]
