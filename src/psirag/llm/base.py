"""The one small protocol every LLM backend implements, and the shapes it returns."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

Message = dict[str, str]
"""An OpenAI-style chat message: {"role": "system"|"user"|"assistant", "content": "..."}."""


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings. Part of the response-cache key."""

    max_tokens: int = 256
    """Hard cap on generated tokens."""
    temperature: float = 0.0
    repeat_penalty: float = 1.0
    """llama.cpp-style repetition penalty (1.0 = off); see OpenAIChat for servers that reject it."""
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChatResult:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    finish_reason: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


@runtime_checkable
class ChatModel(Protocol):
    """A chat LLM. ``id`` names the model (and endpoint) for caches and manifests, never a key.

    The one protocol every backend and :class:`psirag.llm.LLMClient` implement. Callers that
    label calls by stage go through the client (``psirag.llm.as_client``), never by inspecting
    the model.
    """

    @property
    def id(self) -> str: ...

    @property
    def context_tokens(self) -> int: ...

    def chat(self, messages: list[Message], params: GenerationParams) -> ChatResult: ...


TokenSink = Callable[[str], None]
"""Receives the pieces of a reply as the model writes them (their concatenation is the text)."""


@runtime_checkable
class TokenStreamer(Protocol):
    """A model that can pass its reply on piece by piece while it writes it (OpenAI-compatible
    servers, llama.cpp). Optional: :func:`chat_streaming` falls back to one ``chat`` call."""

    def chat_stream(
        self, messages: list[Message], params: GenerationParams, on_token: TokenSink
    ) -> ChatResult: ...


def chat_streaming(
    model: ChatModel, messages: list[Message], params: GenerationParams, on_token: TokenSink
) -> ChatResult:
    """One call whose reply goes to ``on_token`` as it is written, where the model streams;
    else one ``chat`` call and the whole reply in one piece. The result is the same either way
    (the whole reply, for the caller to parse)."""
    stream = getattr(model, "chat_stream", None)
    if callable(stream):
        result: ChatResult = stream(messages, params, on_token)
        return result
    result = model.chat(messages, params)
    if result.text:
        on_token(result.text)
    return result


@runtime_checkable
class TokenCounter(Protocol):
    """A model that counts tokens with its own tokenizer (local backends; HTTP ones estimate)."""

    def count_tokens(self, text: str) -> int: ...


def estimate_tokens(text: str) -> int:
    """A deliberately high token estimate (one token per 3 UTF-8 bytes) for models whose tokenizer
    is out of reach: over-counting only cuts inputs a little early, under-counting overflows."""
    return math.ceil(len(text.encode("utf-8")) / 3)


def token_counter(model: object) -> Callable[[str], int]:
    """The model's own ``count_tokens`` when it has one, else :func:`estimate_tokens`."""
    counter = getattr(model, "count_tokens", None)
    return counter if callable(counter) else estimate_tokens
