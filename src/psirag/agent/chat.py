"""Requests to the model: passages as prompt text, a conversation kept inside the context window,
and the call itself (through ``LLMClient`` with a stage label, or any bare ChatModel).

A local server with a 4096-token window (the paper's C.2 setting) either rejects a longer request
or silently drops its beginning, which removes the instructions. So the agent estimates the size of
every request and, when it would not fit, shortens the passage texts it shows (evenly, never the
question or the instructions) and records how many it cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from psirag.llm.base import (
    ChatModel,
    ChatResult,
    GenerationParams,
    Message,
    TokenSink,
    token_counter,
)
from psirag.llm.client import as_client
from psirag.prompts import format_documents
from psirag.types import Passage

REPEAT_PENALTY = 1.3
"""Repetition penalty of every agent call (paper C.2), with temperature 0."""

MESSAGE_OVERHEAD_TOKENS = 8
"""Chat-template tokens around each message (role markers, separators)."""

MIN_PASSAGE_CHARS = 200
"""Passages are never cut below this (a shorter stub holds too little to answer from); when
even this does not fit, the request goes out as it is and the server decides."""

_ELLIPSIS = " …"


def passage_body(passage: Passage) -> str:
    """Title line then text, unless the text's first line already is the title (``title\ntext``
    records)."""
    text = passage.text.strip()
    title = passage.source.title.strip()
    if title and text.split("\n", 1)[0].strip() != title:
        return f"{title}\n{text}"
    return text


def clip(text: str, limit: int | None) -> str:
    """Cut at a word boundary and mark the cut, so the model sees the passage was shortened."""
    if limit is None or len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + _ELLIPSIS


def render_passages(
    passages: Sequence[Passage], limit: int | None = None, labels: Sequence[int] | None = None
) -> str:
    """Passages numbered in rank order (or by ``labels``, the agent's citation labels), each
    clipped to ``limit`` characters."""
    return format_documents([clip(passage_body(p), limit) for p in passages], labels)


def request_tokens(messages: Sequence[Message], count: Callable[[str], int]) -> int:
    """Tokens of a request: the model's own count where it has one, else a high estimate."""
    return sum(count(m.get("content", "")) + MESSAGE_OVERHEAD_TOKENS for m in messages)


def context_tokens_of(llm: ChatModel) -> int | None:
    """The context window of a model or of a client wrapping one; ``None`` when unknown."""
    for candidate in (llm, getattr(llm, "model", None)):
        value = getattr(candidate, "context_tokens", None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def fit_messages(
    build: Callable[[int | None], list[Message]],
    longest: int,
    llm: ChatModel,
    reply_tokens: int,
) -> tuple[list[Message], int | None]:
    """Build the request with the largest passage-length limit that fits the context window.

    ``build(limit)`` renders the whole conversation with every passage clipped to ``limit``
    characters (``None``: no clipping); ``longest`` is the longest passage body. Tokens are
    counted with ``llm``'s tokenizer where it has one. Returns the messages and the limit used
    (``None`` when nothing had to be cut). When even the minimum does not fit, the minimum is
    used and the server has the last word.
    """
    full = build(None)
    context_tokens = context_tokens_of(llm)
    if context_tokens is None:
        return full, None
    count = token_counter(llm)
    budget = context_tokens - reply_tokens
    if request_tokens(full, count) <= budget or longest <= MIN_PASSAGE_CHARS:
        return full, None
    low, high = MIN_PASSAGE_CHARS, longest
    best = build(low)
    while low < high:
        mid = (low + high + 1) // 2
        candidate = build(mid)
        if request_tokens(candidate, count) <= budget:
            low, best = mid, candidate
        else:
            high = mid - 1
    return best, low


def call_model(
    llm: ChatModel,
    messages: list[Message],
    params: GenerationParams,
    stage: str,
    on_token: TokenSink | None = None,
) -> ChatResult:
    """One chat call, through an ``LLMClient`` (a bare ChatModel is wrapped), labelled ``stage``;
    with ``on_token``, the reply is passed on as the model writes it (where it streams)."""
    client = as_client(llm)
    if on_token is None:
        return client.chat(messages, params, stage=stage)
    return client.chat_stream(messages, params, on_token, stage=stage)


__all__ = [
    "REPEAT_PENALTY",
    "call_model",
    "clip",
    "context_tokens_of",
    "fit_messages",
    "passage_body",
    "render_passages",
    "request_tokens",
]
