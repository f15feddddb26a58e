"""From a request body to a search or an agent run: shared by ``/search``, ``/ask``, the
OpenAI chat endpoint and the MCP tools, so all of them search and answer alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from psirag.agent.loop import MAX_ANSWER_CHARS, RetrieveAndAnswer, Step, TokenEvents
from psirag.config import SearchConfig, profile_config
from psirag.errors import InputError
from psirag.server import views
from psirag.server.admission import Admission
from psirag.server.answer_stream import AnswerTap
from psirag.server.errors import exception_response
from psirag.server.models import AskRequest, SearchRequest
from psirag.server.state import ServerState

if TYPE_CHECKING:
    from psirag.agent.loop import AgentResult
    from psirag.index import Index
    from psirag.types import Passage

SSE_KEEPALIVE_S = 15.0
"""A comment line is sent this often while the agent works, so proxies keep the stream open."""


def search_config(body: SearchRequest | AskRequest) -> SearchConfig:
    """The search a request asks for: its profile (as ``--profile`` on the CLI), then its
    fields."""
    base = profile_config(body.profile)
    beam = base.beam if body.beam is None else body.beam
    if isinstance(body, SearchRequest):
        if body.lists:
            from psirag.retrieval.lists import check_lists

            base = base.with_(lists=check_lists(body.lists))
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


def agent_for(state: ServerState, index: Index, body: AskRequest) -> RetrieveAndAnswer:
    llm = state.need_llm()
    config = search_config(body)
    docs = body.docs

    def retrieve(query: str) -> list[Passage]:
        return index.search(query, config=config, docs=docs)

    return RetrieveAndAnswer(
        llm,
        retrieve,
        max_retrievals=state.budget(body.query, body.max_retrievals),
        max_tokens=body.max_tokens,
        check_answers=body.answer_check,
        names_check=body.names_check,
    )


def ask_document(result: AgentResult, k: int, max_retrievals: int | None = None) -> dict[str, Any]:
    """The agent's answer as JSON: its ``citations`` are the ones the model gave and the
    agent verified, ``evidence`` the episode's top ``k`` passages (see
    :func:`psirag.server.views.answer_payload`)."""
    document = result.to_dict()
    document.update(views.answer_payload(result, k))
    if max_retrievals is not None:
        document["max_retrievals"] = max_retrievals
    return document


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


AgentRun = Callable[[Callable[[Step], None], TokenEvents], "AgentResult"]
"""``run(on_step, on_token)``: one agent episode with its callbacks; returns its result."""


async def agent_stream(
    state: ServerState,
    run: AgentRun,
    keepalive: float = SSE_KEEPALIVE_S,
    admission: Admission | None = None,
) -> AsyncIterator[tuple[str, Any]]:
    """Run the agent in the ask pool and yield what happens as it happens:
    ``("token", (call, text))`` while the model writes, ``("step", Step)`` as each step is
    read, ``("keepalive", None)`` after ``keepalive`` quiet seconds, then ``("result",
    AgentResult)`` or ``("error", exception)``, last. ``admission``: the ask's place in the
    pool (take it before the response starts, so a full pool answers 503); when the stream
    ends, the client gone included, it is closed and the agent cancelled."""
    if admission is None:
        admission = state.asks.admit()
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def on_step(step: Step) -> None:
        loop.call_soon_threadsafe(events.put_nowait, ("step", step))

    def on_token(call: int, text: str) -> None:
        loop.call_soon_threadsafe(events.put_nowait, ("token", (call, text)))

    async def worker() -> None:
        try:
            result = await admission.run(
                lambda: run(on_step, on_token), timeout=state.settings.request_timeout
            )
            await events.put(("result", result))
        except Exception as exc:  # handed to the caller as an event, never raised
            await events.put(("error", exc))

    task = asyncio.create_task(worker())
    try:
        while True:
            try:
                kind, data = await asyncio.wait_for(events.get(), keepalive)
            except TimeoutError:
                yield "keepalive", None
                continue
            yield kind, data
            if kind in ("result", "error"):
                break
    finally:
        admission.close()  # the client may be gone: no LLM call of this ask starts again
        if not task.done():
            task.cancel()


def error_document(exc: BaseException) -> dict[str, Any]:
    """The JSON error body of an exception raised after a stream has started."""
    return dict(json.loads(bytes(exception_response(exc).body)))


async def agent_events(
    state: ServerState,
    run: AgentRun,
    k: int,
    max_retrievals: int | None = None,
    admission: Admission | None = None,
    max_answer_chars: int = MAX_ANSWER_CHARS,
) -> AsyncIterator[bytes]:
    """The ``/ask`` event stream: a ``token`` event (``{"call", "text"}``) per piece of each
    model reply as it is written, an ``answer_token`` event (``{"text"}``) per piece of the
    answer as the model writes it, a ``step`` event as each step is read, then the ``answer``
    (or an ``error``); ``max_retrievals``, the episode's budget, goes into the answer.

    The ``answer_token`` texts join into the answer's ``answer`` field. When the answer that
    had begun to stream was not the one the agent accepted, an ``answer_revised`` event comes
    first and the answer is the text after it (:mod:`psirag.server.answer_stream`).
    ``admission``: as for :func:`agent_stream`."""
    tap = AnswerTap(max_answer_chars)
    async for kind, data in agent_stream(state, run, admission=admission):
        if kind == "keepalive":
            yield b": working\n\n"
        elif kind == "token":
            yield _sse("token", {"call": data[0], "text": data[1]})
            if answer := tap.feed(*data):
                yield _sse("answer_token", {"text": answer})
        elif kind == "step":
            yield _sse("step", data.to_dict())
        elif kind == "result":
            rest, revised = tap.finish(data.answer)
            if revised:
                yield _sse("answer_revised", {})
            if rest:
                yield _sse("answer_token", {"text": rest})
            yield _sse("answer", ask_document(data, k, max_retrievals))
        else:
            yield _sse("error", error_document(data))


__all__ = [
    "SSE_KEEPALIVE_S",
    "AgentRun",
    "agent_events",
    "agent_for",
    "agent_stream",
    "ask_document",
    "error_document",
    "search_config",
]
