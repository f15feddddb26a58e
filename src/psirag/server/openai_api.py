"""psirag as an OpenAI-compatible "model": ``POST /v1/chat/completions`` and ``GET /v1/models``.

A chat front end that speaks the OpenAI API (Open WebUI, LibreChat, the ``openai`` client) sends a
conversation; the retrieve-and-answer agent answers its last user message, with the earlier turns
given as context, and the reply ends with numbered sources (also returned as ``citations``). The
client's own system prompt is not passed on: the agent has its own (the paper's) prompt.

This module turns a conversation into the agent's question and its answer into the reply; the
routes are in :mod:`psirag.server.routes.openai`, the request body in :mod:`psirag.server.models`.
"""

from __future__ import annotations

import re
from typing import Any

from psirag.errors import InputError
from psirag.server import views
from psirag.server.models import ChatMessage, ChatRequest

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


__all__ = [
    "ChatMessage",
    "ChatRequest",
    "cited_numbers",
    "message_text",
    "question_from",
    "reply_text",
]
