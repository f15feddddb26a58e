"""``POST /ask`` (the retrieve-and-answer agent, JSON or a server-sent event stream) and
``POST /summarize`` (one tree visit summarised by the LLM)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from psirag.agent.summarize import Summarizer, node_to_dict
from psirag.retrieval.retriever import NodeHit
from psirag.server.deps import IndexDep, State
from psirag.server.models import AskRequest, SummarizeRequest
from psirag.server.querying import agent_events, agent_for, ask_document

router = APIRouter()


@router.post("/ask", tags=["query"], response_model=None)
async def ask(body: AskRequest, request: Request, state: State, index: IndexDep) -> Any:
    """The retrieve-and-answer agent. ``Accept: text/event-stream`` streams ``token`` events
    (``{"call", "text"}``: the model's reply as it is written, where the LLM streams),
    ``answer_token`` events (``{"text"}``: the answer as it is written; an ``answer_revised``
    event restarts it), a ``step`` event per agent step as it is read, then ``answer`` (or
    ``error``)."""
    query = state.check_query(body.query)
    state.check_k(body.k)
    # In a worker thread: with max_retrievals auto, the first ask loads the hop model.
    agent = await state.blocking(lambda: agent_for(state, index, body))
    if "text/event-stream" in request.headers.get("accept", ""):
        admission = state.asks.admit()  # a full ask pool answers 503 before the stream starts
        return StreamingResponse(
            agent_events(
                state,
                lambda on_step, on_token: agent.run(query, on_step=on_step, on_token=on_token),
                body.k,
                agent.max_retrievals,
                admission,
                agent.max_answer_chars,
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            background=BackgroundTask(admission.close),  # also when the stream never started
        )
    result = await state.llm_work(lambda: agent.run(query), request)
    return ask_document(result, body.k, agent.max_retrievals)


@router.post("/summarize", tags=["query"])
async def summarize(
    body: SummarizeRequest, request: Request, state: State, index: IndexDep
) -> dict[str, Any]:
    """Summarization mode: one tree visit, the top nodes given to the LLM in document
    order."""
    query = state.check_query(body.query)
    llm = state.need_llm()

    def visit(q: str) -> list[NodeHit]:
        return index.visit(q, docs=body.docs, beam=body.top_k, k=body.top_k)

    summarizer = Summarizer(llm, visit, top_k=body.top_k, max_tokens=body.max_tokens)
    result = await state.llm_work(lambda: summarizer.run(query), request)
    return {
        "summary": result.answer,
        "query": result.query,
        "nodes": [node_to_dict(n) for n in result.evidence],
        "clipped_nodes": result.clipped_nodes,
    }
