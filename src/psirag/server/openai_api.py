"""psirag as an OpenAI-compatible "model": ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat front end that speaks the OpenAI API (Open WebUI, LibreChat, the ``openai`` client) sends a
conversation; the retrieve-and-answer agent answers its last user message, with the earlier turns
given as context, and the reply ends with numbered sources (also returned as ``citations``). The
client's own system prompt is not passed on: the agent has its own (the paper's) prompt.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from psirag.config import SearchConfig
from psirag.errors import InputError
from psirag.server import views
from psirag.server.budget import Budget

CONTEXT_TURNS = 4
"""Earlier turns passed to the agent with the last user message."""
CONTEXT_CHARS = 300
"""Characters kept of each earlier turn."""
KEEPALIVE_S = 15.0
MAX_REPLY_TOKENS = 4096
"""A client's max_tokens above this is lowered to it (each agent reply is short)."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The OpenAI fields psirag reads; others (temperature, top_p, ...) are accepted and
    ignored, since the agent samples at temperature 0 as in the paper."""

    model_config = ConfigDict(extra="allow")

    model: str = "psirag"
    messages: list[ChatMessage]
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1, description="cap on each agent reply")
    max_completion_tokens: int | None = Field(
        default=None, ge=1, description="the same, newer name"
    )
    stream_options: dict[str, Any] | None = None
    max_retrievals: Budget | None = Field(
        default=None,
        description="psirag extension (extra_body): a count or 'auto'; default: the server's",
    )
    k: int = Field(
        default=SearchConfig.k, ge=1, le=100, description="psirag extension (extra_body)"
    )
    docs: list[str] | None = Field(default=None, description="psirag extension (extra_body)")


def message_text(message: ChatMessage) -> str:
    """The text of a message whose content is a string or a list of ``{"type": "text"}``
    parts."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(
        str(part.get("text", "")) for part in content if part.get("type") in ("text", None)
    )


def question_from(messages: list[ChatMessage]) -> str:
    """The last user message, followed by the earlier turns (short) as context."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        raise InputError("messages has no 'user' message: nothing to answer")
    last = users[-1]
    question = message_text(messages[last]).strip()
    if not question:
        raise InputError("the last user message is empty")
    earlier = [
        m for m in messages[:last] if m.role in ("user", "assistant") and message_text(m).strip()
    ][-CONTEXT_TURNS:]
    if not earlier:
        return question
    lines = []
    for m in earlier:
        text = " ".join(message_text(m).split())
        if len(text) > CONTEXT_CHARS:
            text = text[: CONTEXT_CHARS - 1] + "…"
        lines.append(f"{m.role}: {text}")
    return f"{question}\n\nEarlier in this conversation:\n" + "\n".join(lines)


def _normal(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def cited_numbers(answer: str, cites: list[dict[str, Any]]) -> list[int]:
    """The sources whose text contains the answer; the first source when none does (it is the
    evidence the answer was read from, ranked first)."""
    wanted = _normal(answer)
    if not cites:
        return []
    found = [c["n"] for c in cites if wanted and wanted in _normal(c["text"])]
    return found or [cites[0]["n"]]


def reply_text(answer: str, cites: list[dict[str, Any]]) -> str:
    numbers = cited_numbers(answer, cites)
    marks = "".join(f"[{n}]" for n in numbers)
    head = f"{answer} {marks}".strip()
    sources = views.sources_text(cites)
    return f"{head}\n\n{sources}" if sources else head


def install_openai_routes(app: FastAPI, state: Any) -> None:
    from psirag.server.app import AskRequest, agent_for, exception_response

    settings = state.settings

    @app.get("/v1/models", tags=["openai"])
    async def models() -> dict[str, Any]:
        """The one model this server offers: the index, answered by the agent."""
        return {
            "object": "list",
            "data": [
                {
                    "id": settings.model_name,
                    "object": "model",
                    "created": int(state.started),
                    "owned_by": "psirag",
                }
            ],
        }

    @app.post("/v1/chat/completions", tags=["openai"], response_model=None)
    async def chat(body: ChatRequest) -> Any:
        """OpenAI chat completions; ``stream: true`` answers with ``chat.completion.chunk``
        events and ``data: [DONE]``."""
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
        index = state.holder.get().index
        agent = await state.blocking(lambda: agent_for(state, index, ask))
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        model = body.model or settings.model_name

        def finish(result: Any) -> tuple[str, list[dict[str, Any]], dict[str, int]]:
            cites = views.citations(result.evidence[: body.k])
            usage = {
                "prompt_tokens": int(result.stats.prompt_tokens),
                "completion_tokens": int(result.stats.completion_tokens),
            }
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            return reply_text(result.answer, cites), cites, usage

        if not body.stream:
            result = await state.blocking(lambda: agent.run(question))
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

        async def events() -> AsyncIterator[bytes]:
            yield chunk({"role": "assistant", "content": ""})
            task = asyncio.create_task(state.blocking(lambda: agent.run(question)))
            try:
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
        )


__all__ = ["ChatRequest", "install_openai_routes", "question_from", "reply_text"]
