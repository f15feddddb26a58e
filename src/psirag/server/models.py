"""The request bodies of the HTTP API (pydantic models: the OpenAPI schema is made from them).

psirag's own bodies refuse unknown fields, so a typo is an error rather than a silent default;
the OpenAI chat body accepts the fields psirag ignores, as OpenAI clients send many.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from psirag.agent.summarize import DEFAULT_QUERY
from psirag.config import ProfileName, SearchConfig
from psirag.server.budget import Budget


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Body):
    query: str = Field(description="the question or keywords")
    k: int = Field(default=SearchConfig.k, ge=1, description="passages to return")
    beam: int | None = Field(default=None, ge=1, description="nodes kept per tree layer")
    candidates: int | None = Field(default=None, ge=1, description="passages per retriever")
    profile: ProfileName = Field(default="default", description="search preset (--profile)")
    docs: list[str] | None = Field(default=None, description="search only these document ids")
    bm25: bool = Field(
        default=True, description="false: the dense list only (tree, or exact on a small index)"
    )
    tree: bool = Field(default=True, description="false: BM25 only")
    lists: list[str] | None = Field(
        default=None,
        description="candidate lists to fuse, by registered name, in fusion order (tree, dense, "
        "bm25, hnsw); default: the profile's, refined by tree and bm25",
    )


class AskRequest(_Body):
    query: str = Field(description="the question")
    max_retrievals: Budget | None = Field(
        default=None,
        description="retrievals after the first one, or 'auto' (from the question's predicted "
        "hops); default: the server's --max-retrievals",
    )
    k: int = Field(default=SearchConfig.k, ge=1, description="passages per retrieval")
    beam: int | None = Field(default=None, ge=1)
    profile: ProfileName = Field(default="default", description="search preset (--profile)")
    docs: list[str] | None = None
    max_tokens: int = Field(default=256, ge=1, le=8192, description="cap on each reply")
    answer_check: bool = True
    names_check: Literal["lookup", "ask", "off"] = "lookup"


class SummarizeRequest(_Body):
    query: str = DEFAULT_QUERY
    docs: list[str] | None = None
    top_k: int = Field(default=20, ge=1, le=500, description="nodes given to the LLM")
    max_tokens: int = Field(default=200, ge=1, le=8192)


class AddDocumentRequest(_Body):
    text: str
    id: str | None = None
    title: str | None = None


class SyncDocument(_Body):
    """A document as ``psirag sync`` read it from a file on the client (the same loaders):
    ``path`` and ``sha256`` are what the next sync compares the files with."""

    id: str = Field(min_length=1)
    text: str
    title: str = ""
    is_record: bool = False
    path: str | None = None
    sha256: str | None = None
    page_starts: list[int] = Field(default_factory=list)


class SyncRequest(_Body):
    """``POST /sync``: remove ``remove`` (document ids) and add ``documents``, as one update."""

    remove: list[str] = Field(default_factory=list)
    documents: list[SyncDocument] = Field(default_factory=list)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The OpenAI fields psirag reads; others (temperature, top_p, ...) are accepted and
    ignored, since the agent samples at temperature 0 as in the paper."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[ChatMessage]
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1, description="cap on each agent reply")
    max_completion_tokens: int | None = Field(
        default=None, ge=1, description="the same, newer name"
    )
    stream_options: dict[str, Any] | None = None
    n: int = Field(default=1, description="answers per question: psirag gives one (n must be 1)")
    max_retrievals: Budget | None = Field(
        default=None,
        description="psirag extension (extra_body): a count or 'auto'; default: the server's",
    )
    k: int = Field(
        default=SearchConfig.k, ge=1, le=100, description="psirag extension (extra_body)"
    )
    docs: list[str] | None = Field(default=None, description="psirag extension (extra_body)")


class OllamaRequest(BaseModel):
    """The Ollama fields psirag reads (``/api/chat``, ``/api/generate``); the others
    (``format``, ``keep_alive``, most ``options``) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    stream: bool = Field(
        default=True, description="NDJSON, one object per piece (Ollama's default)"
    )
    think: bool | str | None = Field(
        default=None, description="false: no 'thinking' pieces (the agent's live output)"
    )
    options: dict[str, Any] | None = Field(
        default=None, description="num_predict caps each agent reply; the rest is ignored"
    )
    max_retrievals: Budget | None = Field(default=None, description="psirag extension")
    k: int = Field(default=SearchConfig.k, ge=1, le=100, description="psirag extension")
    docs: list[str] | None = Field(default=None, description="psirag extension")


class OllamaChatRequest(OllamaRequest):
    messages: list[ChatMessage] = Field(default_factory=list)


class OllamaGenerateRequest(OllamaRequest):
    prompt: str = ""
    system: str | None = None


__all__ = [
    "AddDocumentRequest",
    "AskRequest",
    "ChatMessage",
    "ChatRequest",
    "OllamaChatRequest",
    "OllamaGenerateRequest",
    "SearchRequest",
    "SummarizeRequest",
]
