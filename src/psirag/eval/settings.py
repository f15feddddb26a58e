"""What one evaluation run is asked to do, and how its embedder is found.

Kept apart from the harness so that method factories (built-in or plugins) can read the settings
without importing the run loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from psirag.config import DEFAULT_EMBEDDER, IndexConfig, SearchConfig
from psirag.embed import Embedder, load_embedder
from psirag.errors import InputError

RETRIEVAL_METHODS = ("psi", "psi-tree", "bm25", "dense", "hybrid")
"""Default methods without an LLM: single retrieval, scored by Recall@k."""
LLM_METHODS = ("psi", "hybrid", "psi+agent", "hybrid+agent")
"""Default methods with an LLM: one answer call over one retrieval, and the R&A agent."""
AGENT_SUFFIX = "+agent"

EMBEDDER_HOOKS: dict[str, Callable[[], Embedder]] = {}
"""Embedder specs resolved before :func:`psirag.embed.load_embedder` (tests register a fast
deterministic embedder here; not a user-facing option)."""


def default_cache_dir() -> Path:
    """Where built indexes and the LLM response cache live between runs."""
    return Path("~/.cache/psirag/eval").expanduser()


def resolve_embedder(spec: str, batch_size: int | None = None) -> Embedder:
    """The embedder a spec names: a registered hook first, else the normal loader."""
    hook = EMBEDDER_HOOKS.get(spec.strip())
    if hook is not None:
        return hook()
    return load_embedder(spec, batch_size=batch_size)


@dataclass(frozen=True)
class EvalSettings:
    """One run: which methods, on how many questions, with which models and caches."""

    methods: tuple[str, ...] = ()
    """Method names; empty: :data:`RETRIEVAL_METHODS`, or :data:`LLM_METHODS` with an LLM."""
    limit: int | None = None
    """Evaluate the first N questions only (the corpus is always indexed whole)."""
    llm: str | None = None
    """LLM spec (``openai:<url>#<model>``, ``local``, ...); None: retrieval-only."""
    cache_dir: Path = field(default_factory=default_cache_dir)
    embedder: str = DEFAULT_EMBEDDER
    index_config: IndexConfig | None = None
    """Index settings (its ``embedder`` field is replaced by ``embedder``); None: defaults."""
    k: int = SearchConfig.k
    """Final passages per retrieval (paper: 5)."""
    candidates: int = SearchConfig.candidates
    """Passages each retriever brings to fusion (paper: 10)."""
    beam: int = SearchConfig.beam
    reranker: str | None = None
    """Local cross-encoder folder: ``psi`` and ``hybrid`` rerank the union instead of RRF."""
    max_retrievals: int = 1
    """Agent retrievals after the first one (paper, 2Wiki/HotpotQA: 1)."""
    max_tokens: int = 256
    """Cap on each LLM reply."""
    workers: int = 1
    """Questions answered in parallel by LLM methods (latencies then include waiting)."""
    embedding_cache: Path | None = None
    """An ``.npz`` of vectors keyed by sha1 of each text (the benchmarks' cache), read, extended."""
    rebuild: bool = False
    """Rebuild indexes even when the cache holds them."""
    bootstrap: int = 10000
    """Resamples of the paired bootstrap against the first method (0: none)."""

    def __post_init__(self) -> None:
        for name in ("k", "candidates", "beam", "max_tokens", "workers"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_retrievals < 0:
            raise InputError(f"max_retrievals must be 0 or more, got {self.max_retrievals}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be positive, got {self.limit}")
        if self.bootstrap < 0:
            raise InputError(f"bootstrap must be 0 or more, got {self.bootstrap}")

    @property
    def method_names(self) -> tuple[str, ...]:
        if self.methods:
            return self.methods
        return LLM_METHODS if self.llm else RETRIEVAL_METHODS

    def resolved_index_config(self) -> IndexConfig:
        base = self.index_config or IndexConfig()
        return IndexConfig.from_dict({**base.to_dict(), "embedder": self.embedder})

    def search_config(self, **changes: object) -> SearchConfig:
        config = SearchConfig(k=self.k, candidates=self.candidates, beam=self.beam)
        return config.with_(**changes)


__all__ = [
    "AGENT_SUFFIX",
    "EMBEDDER_HOOKS",
    "LLM_METHODS",
    "RETRIEVAL_METHODS",
    "EvalSettings",
    "default_cache_dir",
    "resolve_embedder",
]
