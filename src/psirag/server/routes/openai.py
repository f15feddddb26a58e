"""The OpenAI-compatible routes: ``GET /v1/models`` and ``POST /v1/chat/completions`` (plain or
streamed). The conversation handling lives in :mod:`psirag.server.openai_api`."""

from __future__ import annotations

import asyncio
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
from psirag.server import views
from psirag.server.deps import IndexDep, State
from psirag.server.errors import exception_response
from psirag.server.models import AskRequest, ChatRequest
from psirag.server.openai_api import (
    KEEPALIVE_S,
    MAX_REPLY_TOKENS,
    message_text,
    question_from,
    reply_text,
)
from psirag.server.querying import agent_for

router = APIRouter(tags=["openai"])


@router.get("/v1/models")
async def models(state: State) -> dict[str, Any]:
    """The one model this server offers: the index, answered by the agent."""
    return {
        "object": "list",
        "data": [
            {
                "id": state.settings.model_name,
                "object": "model",
                "created": int(state.started),
                "owned_by": "psirag",
            }
        ],
    }


@router.post("/v1/chat/completions", response_model=None)
async def chat(body: ChatRequest, request: Request, state: State, index: IndexDep) -> Any:
    """OpenAI chat completions; ``stream: true`` answers with ``chat.completion.chunk``
    events and ``data: [DONE]``."""
    if body.n != 1:
        raise InputError(
            f"n is {body.n}: psirag gives one answer per question, so n must be 1 (omit it)"
        )
    for m in body.messages:
        state.check_length(message_text(m), f"{m.role} message")
    question = question_from(body.messages)
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
    model = body.model or state.settings.model_name

    def finish(result: AgentResult) -> tuple[str, list[dict[str, Any]], dict[str, int]]:
        cites = views.citations(result.evidence[: body.k])
        usage = {
            "prompt_tokens": int(result.stats.prompt_tokens),
            "completion_tokens": int(result.stats.completion_tokens),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return reply_text(result.answer, cites), cites, usage

    if not body.stream:
        result = await state.llm_work(lambda: agent.run(question), request)
        text, cites, usage = finish(result)
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
            "usage": usage,
            "citations": cites,
        }

    include_usage = bool((body.stream_options or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        payload = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    admission = state.asks.admit()  # a full ask pool answers 503 before the stream starts

    async def events() -> AsyncIterator[bytes]:
        timeout = state.settings.request_timeout
        task = asyncio.create_task(admission.run(lambda: agent.run(question), timeout=timeout))
        try:
            yield chunk({"role": "assistant", "content": ""})
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_S)
                if not done:
                    yield b": working\n\n"
            result = task.result()
        except Exception as exc:  # the stream has started: the error goes in a chunk
            error = json.loads(bytes(exception_response(exc).body))
            yield f"data: {json.dumps(error)}\n\n".encode()
            yield b"data: [DONE]\n\n"
            return
        finally:  # the client may be gone: no LLM call of this ask starts again
            admission.close()
            if not task.done():
                task.cancel()
        text, cites, usage = finish(result)
        head, _, sources = text.partition("\n\n")
        yield chunk({"content": head})
        if sources:
            yield chunk({"content": "\n\n" + sources})
        yield chunk({}, "stop", citations=cites)
        if include_usage:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(payload)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(admission.close),  # also when the stream never started
    )
