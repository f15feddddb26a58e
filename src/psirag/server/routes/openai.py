"""The OpenAI-compatible routes: ``GET /v1/models`` and ``POST /v1/chat/completions`` (plain or
streamed). The conversation handling lives in :mod:`psirag.server.openai_api`.

A streamed chat sends the model's output as it is written, as ``reasoning_content`` deltas
(the agent's working: its thoughts and sub-questions, which chat front ends show as
"thinking"), and the answer as ``content`` deltas while the model writes it; when the episode
ends, the rest of the reply (the ``[n]`` markers, the sources). When the agent did not accept
the answer that had begun to stream, the chunk that says so has ``psirag_revised: true`` and
the content :data:`psirag.server.answer_stream.REVISED`, then the whole reply follows: the
reply is the ``content`` after the last revision mark, and equals the non-streamed reply
(:mod:`psirag.server.answer_stream`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from psirag.agent.loop import AgentResult
from psirag.errors import InputError
from psirag.server.answer_stream import REVISED, AnswerTap
from psirag.server.deps import IndexDep, State
from psirag.server.models import AskRequest, ChatRequest
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

router = APIRouter(tags=["openai"])


@router.get("/v1/models")
async def models(state: State) -> dict[str, Any]:
    """The models this server offers: ``psirag`` and the index's name, both the index
    answered by the agent."""
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": int(state.started), "owned_by": "psirag"}
            for name in served_models(state)
        ],
    }


def _usage(result: AgentResult) -> dict[str, int]:
    usage = {
        "prompt_tokens": int(result.stats.prompt_tokens),
        "completion_tokens": int(result.stats.completion_tokens),
    }
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


@router.post("/v1/chat/completions", response_model=None)
async def chat(body: ChatRequest, request: Request, state: State, index: IndexDep) -> Any:
    """OpenAI chat completions; ``stream: true`` answers with ``chat.completion.chunk``
    events and ``data: [DONE]``. An unknown ``model`` is 404; ``n`` other than 1 is 400."""
    model = check_model(state, body.model)
    if body.n != 1:
        raise InputError(
            f"n is {body.n}: psirag gives one answer per question, so n must be 1 (omit it)"
        )
    question = chat_question(state, body.messages)
    ask = AskRequest(
        query=question,
        max_retrievals=body.max_retrievals,
        k=body.k,
        docs=body.docs,
        max_tokens=min(body.max_completion_tokens or body.max_tokens or 256, MAX_REPLY_TOKENS),
    )
    agent = await state.blocking(lambda: agent_for(state, index, ask))
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    if not body.stream:
        result = await state.llm_work(lambda: agent.run(question), request)
        text, payload = reply_of(result, body.k)
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": _usage(result),
            **payload,
        }

    include_usage = bool((body.stream_options or {}).get("include_usage"))

    def event(payload: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        return event(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                **extra,
            }
        )

    admission, stream = chat_stream(state, agent, question)

    async def events() -> AsyncIterator[bytes]:
        yield chunk({"role": "assistant", "content": ""})
        thinking, tap = ThinkingText(), AnswerTap(agent.max_answer_chars)
        async for kind, data in stream:
            if kind == "keepalive":
                yield b": working\n\n"
            elif kind == "token":
                yield chunk({"reasoning_content": thinking.piece(*data)})
                if answer := tap.feed(*data):
                    yield chunk({"content": answer})
            elif kind == "error":  # the stream has started: the error goes in an event
                yield event(error_document(data))
                yield b"data: [DONE]\n\n"
                return
            elif kind == "result":
                text, payload = reply_of(data, body.k)
                rest, revised = tap.finish(text)
                if revised:
                    yield chunk({"content": REVISED}, psirag_revised=True)
                for piece in reply_pieces(rest):
                    yield chunk({"content": piece})
                yield chunk({}, "stop", **payload)
                if include_usage:
                    yield event(
                        {
                            "id": completion_id,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": _usage(data),
                        }
                    )
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(admission.close),  # also when the stream never started
    )
