"""What one evaluation run is asked to do, and how its embedder is found.

Kept apart from the harness so that method factories (built-in or plugins) can read the settings
without importing the run loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from psirag.agent.loop import NAMES_CHECKS, NamesCheck
from psirag.config import DEFAULT_EMBEDDER, IndexConfig, SearchConfig
from psirag.embed import Embedder, load_embedder
from psirag.errors import InputError
from psirag.eval.data import EvalDataset, subcorpus
from psirag.http import HttpPolicy

RETRIEVAL_METHODS = ("psi", "psi-tree", "bm25", "dense", "hybrid")
"""Default methods without an LLM: single retrieval, scored by Recall@k."""
LLM_METHODS = ("psi", "hybrid", "psi+agent", "hybrid+agent")
"""Default methods with an LLM: one answer call over one retrieval, and the R&A agent."""
SUMMARY_METHODS = ("psi+summarize", "dense+summarize")
"""Default methods with an LLM on a summarization set (questions without an ``answer``, scored
by ROUGE-L against reference summaries): the paper's summarization mode over the abstract tree,
and the same summarizer over plain dense retrieval."""
AGENT_SUFFIX = "+agent"
IRCOT_SUFFIX = "+ircot"
SUMMARIZE_SUFFIX = "+summarize"
MethodMode = Literal["none", "agent", "ircot", "summarize"]
"""How an LLM run answers with a retriever: one retrieval and one answer (``NAME``), the R&A
agent (``NAME+agent``), the IRCoT baseline (``NAME+ircot``) or summarization mode
(``NAME+summarize``: one retrieval inside the question's document, SPEC 2.5)."""
MODE_SUFFIXES: dict[str, MethodMode] = {
    AGENT_SUFFIX: "agent",
    IRCOT_SUFFIX: "ircot",
    SUMMARIZE_SUFFIX: "summarize",
}
"""Method-name suffix -> mode; a name without one is the retriever alone (mode ``none``)."""

EMBEDDER_HOOKS: dict[str, Callable[[], Embedder]] = {}
"""Embedder specs resolved before :func:`psirag.embed.load_embedder` (tests register a fast
deterministic embedder here; not a user-facing option)."""


def default_cache_dir() -> Path:
    """Where built indexes and the LLM response cache live between runs."""
    return Path("~/.cache/psirag/eval").expanduser()


def resolve_embedder(
    spec: str, batch_size: int | None = None, http: HttpPolicy | None = None
) -> Embedder:
    """The embedder a spec names: a registered hook first, else the normal loader."""
    hook = EMBEDDER_HOOKS.get(spec.strip())
    if hook is not None:
        return hook()
    return load_embedder(spec, batch_size=batch_size, http=http)


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
    max_retrievals: int | str = 1
    """Agent retrievals after the first one (paper, 2Wiki/HotpotQA: 1); ``"auto"``: per question,
    from the hop discriminator (``psirag.hops.max_retrievals_for``)."""
    answer_check: bool = True
    """``+agent``: ask again about an answer found in no document while a retrieval is left
    (``RetrieveAndAnswer.check_answers``); False is the paper's loop."""
    names_check: NamesCheck = "lookup"
    """``+agent``: an answer whose reasoning names people or works no retrieved document is
    about, while a retrieval is left, is looked up (``lookup``), asked about (``ask``) or taken
    as it is (``off``); ``RetrieveAndAnswer.names_check``."""
    max_tokens: int = 256
    """Cap on each LLM reply (``+summarize`` has its own, ``summary_max_tokens``)."""
    summary_top_k: int = 20
    """``+summarize``: nodes given to the model, also Algorithm 2's k and beam of the visit
    (paper C.2: 20 for QMSum, 15 for WCEP)."""
    summary_max_tokens: int = 200
    """``+summarize``: cap on the summary (paper C.2: 200 for QMSum, 150 for WCEP)."""
    workers: int = 1
    """Questions answered in parallel by LLM methods (latencies then include waiting)."""
    embedding_cache: Path | None = None
    """An ``.npz`` of vectors keyed by sha1 of each text (the benchmarks' cache), read, extended."""
    rebuild: bool = False
    """Rebuild indexes even when the cache holds them."""
    bootstrap: int = 10000
    """Resamples of the paired bootstrap against the first method (0: none)."""
    subcorpus: int | None = None
    """Index a corpus of N passages only: the evaluated questions' gold passages, then the other
    passages in corpus order (:func:`psirag.eval.data.subcorpus`); None: the whole corpus."""
    retrieval_only: bool = False
    """Score by Recall@k without answering, even with an LLM (which then only writes LLM
    abstracts): an abstract ablation need not pay for an answer per question and method."""
    http: HttpPolicy = field(default_factory=HttpPolicy)
    """Deadline and retries of every LLM and embedding server call (``--timeout``,
    ``--retries``)."""

    def __post_init__(self) -> None:
        for name in (
            "k",
            "candidates",
            "beam",
            "max_tokens",
            "workers",
            "summary_top_k",
            "summary_max_tokens",
        ):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")
        if isinstance(self.max_retrievals, str):
            if self.max_retrievals != "auto":
                raise InputError(
                    f"max_retrievals must be a count or 'auto', got {self.max_retrievals!r}"
                )
        elif self.max_retrievals < 0:
            raise InputError(f"max_retrievals must be 0 or more, got {self.max_retrievals}")
        if self.limit is not None and self.limit < 1:
            raise InputError(f"limit must be positive, got {self.limit}")
        if self.names_check not in NAMES_CHECKS:
            raise InputError(
                f"names_check must be one of {', '.join(NAMES_CHECKS)}, got {self.names_check!r}"
            )
        if self.bootstrap < 0:
            raise InputError(f"bootstrap must be 0 or more, got {self.bootstrap}")
        if self.subcorpus is not None and self.subcorpus < 1:
            raise InputError(f"subcorpus must be positive, got {self.subcorpus}")
        abstracts = (self.index_config or IndexConfig()).abstracts
        if abstracts.startswith("llm-") and not self.llm:
            raise InputError(
                f"abstracts {abstracts} are written by the run's LLM: pass --llm SPEC "
                "(the same model and response cache then answer the questions)"
            )

    @property
    def method_names(self) -> tuple[str, ...]:
        if self.methods:
            return self.methods
        return LLM_METHODS if self.llm else RETRIEVAL_METHODS

    def resolved_index_config(self) -> IndexConfig:
        """The index config with the run's embedder, and the run's LLM for LLM abstracts (None
        otherwise, so that changing ``--llm`` does not rebuild an index it cannot change)."""
        base = self.index_config or IndexConfig()
        llm = self.llm if base.abstracts.startswith("llm-") else None
        return IndexConfig.from_dict({**base.to_dict(), "embedder": self.embedder, "llm": llm})

    def select(self, data: EvalDataset) -> EvalDataset:
        """The evaluated part of a dataset: the first ``limit`` questions, over the
        ``subcorpus`` when one is asked for. Idempotent, so applying it twice is harmless."""
        data = replace(data, questions=data.questions[: self.limit])
        if self.subcorpus is not None:
            data = subcorpus(data, self.subcorpus)
        return data

    def ablations(self) -> dict[str, object]:
        """The ablation settings a results.json reports at the top of its ``settings``."""
        config = self.resolved_index_config()
        return {
            "abstracts": config.abstracts,
            "routing": config.routing,
            "max_children": config.max_children,
            "tree_mode": config.tree_mode,
            "tree_neighbors": config.tree_neighbors,
            "subcorpus": self.subcorpus,
            "split_records": config.split_records,
            "tree_per_document": config.tree_per_document,
        }

    def search_config(self, **changes: object) -> SearchConfig:
        config = SearchConfig(k=self.k, candidates=self.candidates, beam=self.beam)
        return config.with_(**changes)


__all__ = [
    "AGENT_SUFFIX",
    "EMBEDDER_HOOKS",
    "IRCOT_SUFFIX",
    "LLM_METHODS",
    "MODE_SUFFIXES",
    "RETRIEVAL_METHODS",
    "SUMMARIZE_SUFFIX",
    "SUMMARY_METHODS",
    "EvalSettings",
    "MethodMode",
    "default_cache_dir",
    "resolve_embedder",
]
