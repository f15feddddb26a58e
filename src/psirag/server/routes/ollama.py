"""An Ollama-compatible API on the same server: ``GET /api/version``, ``GET /api/tags``,
``POST /api/chat`` and ``POST /api/generate`` (NDJSON streams, Ollama's default, or one JSON
object with ``"stream": false``), for chat front ends and tools that speak Ollama's API.

The models are the ones ``/v1/models`` lists (``psirag`` and the index's name; ``:latest`` is
accepted); any other name is 404. As on the OpenAI route, the agent answers the last user
message; its live output streams as ``thinking`` (unless ``"think": false``), and the answer
as ``content`` (``response`` for generate) while the model writes it, then the rest of the
reply; an answer the agent did not accept is followed by a line with ``psirag_revised: true``
and the revision mark, then the whole reply, as on the OpenAI route
(:mod:`psirag.server.answer_stream`). The final object adds psirag's ``citations`` and
``evidence``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from psirag import __version__
from psirag.agent.loop import AgentResult
from psirag.index import Index
from psirag.server.answer_stream import REVISED, AnswerTap
from psirag.server.deps import IndexDep, State
from psirag.server.models import AskRequest, ChatMessage, OllamaChatRequest, OllamaGenerateRequest
from psirag.server.openai_api import (
    MAX_REPLY_TOKENS,
    ThinkingText,
    chat_question,
    chat_stream,
    check_model,
    reply_of,
    reply_pieces,
    served_models,
)
from psirag.server.querying import agent_for, error_document
from psirag.server.state import ServerState

router = APIRouter(tags=["ollama"])

NDJSON = "application/x-ndjson"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@router.get("/api/version")
async def version() -> dict[str, str]:
    """The server's version (psirag's)."""
    return {"version": __version__}


@router.get("/api/tags")
async def tags(state: State) -> dict[str, Any]:
    """The served models, as Ollama lists its local models."""
    modified = datetime.fromtimestamp(state.started, UTC).isoformat().replace("+00:00", "Z")
    models = []
    for name in served_models(state):
        tagged = f"{name}:latest"
        models.append(
            {
                "name": tagged,
                "model": tagged,
                "modified_at": modified,
                "size": 0,
                "digest": hashlib.sha256(f"psirag:{name}".encode()).hexdigest(),
                "details": {
                    "format": "psirag",
                    "family": "psirag",
                    "families": ["psirag"],
                    "parameter_size": "",
                    "quantization_level": "",
                },
            }
        )
    return {"models": models}


Framer = Callable[[str, str, bool], dict[str, Any]]
"""``(content, thinking, done)`` -> one Ollama response object (chat or generate shape)."""


async def _answer(
    state: ServerState,
    index: Index,
    body: OllamaChatRequest | OllamaGenerateRequest,
    messages: list[ChatMessage],
    frame: Framer,
) -> Any:
    """Run the agent on the conversation and answer in Ollama's shape, streamed or not."""
    question = chat_question(state, messages)
    wanted = (body.options or {}).get("num_predict")
    max_tokens = int(wanted) if isinstance(wanted, int) and wanted > 0 else 256
    ask = AskRequest(
        query=question,
        max_retrievals=body.max_retrievals,
        k=body.k,
        docs=body.docs,
        max_tokens=min(max_tokens, MAX_REPLY_TOKENS),
    )
    agent = await state.blocking(lambda: agent_for(state, index, ask))
    started = time.perf_counter_ns()

    def last(result: AgentResult, text: str) -> dict[str, Any]:
        _, payload = reply_of(result, body.k)
        took = time.perf_counter_ns() - started
        return {
            **frame(text, "", True),
            "done_reason": "stop",
            "total_duration": took,
            "load_duration": 0,
            "prompt_eval_count": int(result.stats.prompt_tokens),
            "prompt_eval_duration": 0,
            "eval_count": int(result.stats.completion_tokens),
            "eval_duration": took,
            **payload,
        }

    if not body.stream:
        result = await state.llm_work(lambda: agent.run(question))
        return last(result, reply_of(result, body.k)[0])

    def line(data: dict[str, Any]) -> bytes:
        return (json.dumps(data, ensure_ascii=False) + "\n").encode()

    think = body.think is not False

    admission, stream = chat_stream(state, agent, question)

    async def lines() -> AsyncIterator[bytes]:
        thinking, tap = ThinkingText(), AnswerTap(agent.max_answer_chars)
        async for kind, data in stream:
            if kind == "keepalive":
                yield line(frame("", "", False))
            elif kind == "token":
                answer = tap.feed(*data)
                if think or answer:
                    yield line(frame(answer, thinking.piece(*data) if think else "", False))
            elif kind == "error":  # the stream has started: the error is its last line
                yield line({"error": error_document(data)["error"]["message"]})
                return
            elif kind == "result":
                rest, revised = tap.finish(reply_of(data, body.k)[0])
                if revised:
                    yield line({**frame(REVISED, "", False), "psirag_revised": True})
                for piece in reply_pieces(rest):
                    yield line(frame(piece, "", False))
                yield line(last(data, ""))

    return StreamingResponse(
        lines(),
        media_type=NDJSON,
        headers={"Cache-Control": "no-cache"},
        background=BackgroundTask(admission.close),  # also when the stream never started
    )


@router.post("/api/chat", response_model=None)
async def chat(body: OllamaChatRequest, state: State, index: IndexDep) -> Any:
    """Ollama's chat: the agent answers the last user message (earlier turns as context)."""
    model = check_model(state, body.model)

    def frame(content: str, thinking: str, done: bool) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        return {"model": model, "created_at": _now(), "message": message, "done": done}

    return await _answer(state, index, body, body.messages, frame)


@router.post("/api/generate", response_model=None)
async def generate(body: OllamaGenerateRequest, state: State, index: IndexDep) -> Any:
    """Ollama's generate: the agent answers ``prompt``. An empty prompt only "loads" the
    model, as in Ollama (``done_reason: load``)."""
    model = check_model(state, body.model)

    def frame(content: str, thinking: str, done: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"model": model, "created_at": _now(), "response": content}
        if thinking:
            out["thinking"] = thinking
        out["done"] = done
        return out

    if not body.prompt.strip():
        return {**frame("", "", True), "done_reason": "load"}
    messages = [ChatMessage(role="user", content=body.prompt)]
    return await _answer(state, index, body, messages, frame)
