"""psirag as an OpenAI-compatible "model": ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat front end that speaks the OpenAI API (Open WebUI, LibreChat, the ``openai`` client) sends a
conversation; the retrieve-and-answer agent answers its last user message, with the earlier turns
given as context. The reply marks the answer with ``[n]`` for each passage the model cited (and
psirag verified) and ends with those sources, numbered alike (also returned as ``citations``;
the top-k retrieved passages come as ``evidence``). The
client's own system prompt is not passed on: the agent has its own (the paper's) prompt.

This module turns a conversation into the agent's question and its answer into the reply; the
routes are in :mod:`psirag.server.routes.openai`, the request body in :mod:`psirag.server.models`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from psirag.errors import InputError
from psirag.server import views
from psirag.server.errors import NotFoundError
from psirag.server.models import ChatMessage, ChatRequest
from psirag.server.querying import agent_stream

if TYPE_CHECKING:
    from psirag.agent.loop import AgentResult, RetrieveAndAnswer
    from psirag.server.admission import Admission
    from psirag.server.state import ServerState

CONTEXT_TURNS = 4
"""Earlier turns passed to the agent with the last user message."""
CONTEXT_CHARS = 300
"""Characters kept of each earlier turn."""
KEEPALIVE_S = 15.0
MAX_REPLY_TOKENS = 4096
"""A client's max_tokens above this is lowered to it (each agent reply is short)."""


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


def reply_text(answer: str, cites: list[dict[str, Any]]) -> str:
    """The chat reply: the answer with a ``[n]`` marker per citation the model gave (and psirag
    verified), then the numbered sources those markers point at. No citation: no markers and
    no sources list (the retrieved passages are still in the ``evidence`` field)."""
    head = views.marked_answer(answer, cites)
    sources = views.sources_text(cites)
    return f"{head}\n\n{sources}" if sources else head


def served_models(state: ServerState) -> list[str]:
    """The model names this server answers to: ``--model-name`` (``psirag``) and the index
    folder's name, the same agent over the same index either way."""
    names = [state.settings.model_name, state.holder.folder.name]
    return list(dict.fromkeys(n for n in names if n))


def check_model(state: ServerState, name: str | None) -> str:
    """The model name a chat asked for, if this server serves it (an Ollama-style ``:latest``
    tag is accepted); a missing name means the first. Otherwise a 404 that lists the names."""
    served = served_models(state)
    if not name:
        return served[0]
    base = name[: -len(":latest")] if name.endswith(":latest") else name
    if base not in served:
        raise NotFoundError(
            f"model {name!r} is not served here; this server's models are "
            + ", ".join(repr(n) for n in served)
            + " (GET /v1/models or /api/tags)"
        )
    return name


def chat_question(state: ServerState, messages: list[ChatMessage]) -> str:
    """The agent's question for a conversation, every message checked against the length
    limit."""
    for m in messages:
        state.check_length(message_text(m), f"{m.role} message")
    return question_from(messages)


def chat_stream(
    state: ServerState, agent: RetrieveAndAnswer, question: str
) -> tuple[Admission, AsyncIterator[tuple[str, Any]]]:
    """A streamed chat's agent episode (for the OpenAI and Ollama routes): its place in the ask
    pool, taken now so that a full pool answers 503 before the response starts (close it when
    the response ends), and the episode's events (:func:`psirag.server.querying.agent_stream`)."""
    admission = state.asks.admit()
    run = agent.run
    events = agent_stream(
        state,
        lambda on_step, on_token: run(question, on_step=on_step, on_token=on_token),
        KEEPALIVE_S,
        admission,
    )
    return admission, events


def reply_of(result: AgentResult, k: int) -> tuple[str, dict[str, Any]]:
    """The chat reply to an episode and the JSON fields it comes with (``citations``,
    ``evidence``)."""
    payload = views.answer_payload(result, k)
    return reply_text(result.answer, payload["citations"]), payload


def reply_pieces(text: str) -> list[str]:
    """A finished reply cut into word-sized pieces for a stream (they join back into it)."""
    return re.findall(r"^\s+|\S+\s*", text)


class ThinkingText:
    """The model's live output during an episode, as text for a chat stream's thinking
    channel: a blank line between model calls."""

    def __init__(self) -> None:
        self.call: int | None = None

    def piece(self, call: int, text: str) -> str:
        first = self.call is None
        changed = self.call != call
        self.call = call
        return text if first or not changed else "\n\n" + text


__all__ = [
    "ChatMessage",
    "ChatRequest",
    "ThinkingText",
    "chat_question",
    "check_model",
    "message_text",
    "question_from",
    "reply_of",
    "reply_pieces",
    "reply_text",
    "served_models",
]
