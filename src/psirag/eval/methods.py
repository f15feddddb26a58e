"""The evaluated methods: a registry of name -> factory, the built-in baselines, the index cache.

A method is a retriever, ``search(query, query_vector) -> list[Passage]`` (its final top-k, best
first), made by a factory from an :class:`EvalContext`. The context hands out indexes built once
per (corpus content, index config, embedder) and kept under the cache folder, so a second run
with the same inputs loads them instead of building. The harness turns every retriever into
three evaluated methods: retrieval only (no ``--llm``), one LLM answer over one retrieval (with
``--llm``), and the R&A agent (``NAME+agent``). A retriever that can also list the nodes one
retrieval visits inside given documents (``Retrieval.visit``) is evaluated in the paper's
summarization mode too (``NAME+summarize``, SPEC 2.5).

Built-ins, all over one psirag index (the same leaves, embeddings and BM25 for every method):

- ``psi``: tree search + BM25, RRF (the default SearchConfig), or reranked with ``--reranker``;
- ``psi-tree``: tree search alone;
- ``bm25``: BM25 alone;
- ``dense``: exact flat cosine over the leaf embeddings;
- ``hybrid``: BM25 + dense, RRF (dense list first), or reranked with ``--reranker``.

For ``+summarize``, ``psi`` and ``psi-tree`` visit the tree (abstracts and leaves, as
``Index.visit``; no BM25, SPEC 2.5), the others give their own ranking of the document's leaves.

Adding a method (a RAPTOR-style tree in ``psirag/eval/raptor.py``, say)::

    from psirag.eval.methods import Retrieval, register_method

    def make_raptor(ctx):
        tree, info = ctx.artifact(
            "raptor", {"layers": 3}, build=..., save=lambda t, path: ..., load=lambda path: ...
        )
        return Retrieval(lambda q, vec: tree.search_vector(vec, q, ctx.settings.k), info)

    register_method("raptor", make_raptor, "RAPTOR-style clustered summary tree")

Modules named in :data:`PLUGINS` are imported by the harness when present, so ``--methods
raptor`` (and ``raptor+agent`` with ``--llm``) then work without touching this file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from psirag._version import __version__
from psirag.agent.summarize import VisitedNode
from psirag.config import PROFILES, IndexConfig
from psirag.embed import Embedder
from psirag.errors import InputError, PsiragError
from psirag.eval.clients import llm_client
from psirag.eval.data import EvalDataset
from psirag.eval.settings import MODE_SUFFIXES, EvalSettings, MethodMode
from psirag.index import Index
from psirag.retrieval.fusion import Reranker
from psirag.retrieval.retriever import Retriever
from psirag.storage import FORMAT_VERSION
from psirag.types import Passage

if TYPE_CHECKING:
    from psirag.llm.client import LLMClient

log = logging.getLogger("psirag")

T = TypeVar("T")
SearchFn = Callable[[str, np.ndarray], list[Passage]]
VisitFn = Callable[[str, np.ndarray, Sequence[str] | None], list[VisitedNode]]
"""``visit(query, query_vector, docs)``: the nodes one retrieval inside ``docs`` (None: the
whole corpus) visits, any order, each with its score; what summarization mode reads."""
Say = Callable[[str], None]

PLUGINS = ("psirag.eval.raptor",)
"""Modules that register more methods on import; missing ones are skipped."""

PSI_KIND = "psirag"
SIDE_FILE = "eval-cache.json"
ALL_STAGES = ("chunking", "embedding", "tree", "abstracts", "routing", "bm25")


# --- the index cache ------------------------------------------------------------------------------


@dataclass
class IndexInfo:
    """Where an index came from and what building it cost."""

    kind: str
    key: str
    path: str
    built: bool
    """Built by this run; False when loaded from the cache."""
    build_seconds: float
    """Wall time of the build (the original build when loaded from the cache)."""
    stage_seconds: dict[str, float] = field(default_factory=dict)
    embedding_cached: bool = False
    """Embeddings came (partly) from an embedding cache, so 'embedding' seconds understate."""

    def seconds_for(self, stages: Sequence[str] | None) -> float:
        """Build cost of the given stages (all of it for None or when stages are unknown)."""
        if stages is None or not self.stage_seconds:
            return self.build_seconds
        return sum(self.stage_seconds.get(s, 0.0) for s in stages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "path": self.path,
            "built": self.built,
            "build_seconds": round(self.build_seconds, 3),
            "stage_seconds": {k: round(v, 3) for k, v in self.stage_seconds.items()},
            "embedding_cached": self.embedding_cached,
        }


class IndexCache:
    """Indexes in ``root/indexes/<kind>-<key>``, keyed by a hash of everything they depend on.

    An entry is complete when its ``eval-cache.json`` exists (written last); an entry that fails
    to load is rebuilt. ``builds`` lists the kinds built through this object (tests count them).
    """

    def __init__(self, root: str | Path, *, rebuild: bool = False) -> None:
        self.root = Path(root).expanduser()
        self.rebuild = rebuild
        self.builds: list[str] = []

    @staticmethod
    def key(kind: str, parts: dict[str, Any]) -> str:
        blob = json.dumps({"kind": kind, **parts}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def entry(self, kind: str, key: str) -> Path:
        return self.root / "indexes" / f"{kind}-{key[:24]}"

    def get_or_build(
        self,
        kind: str,
        parts: dict[str, Any],
        *,
        build: Callable[[], T],
        save: Callable[[T, Path], object],
        load: Callable[[Path], T],
        stages: Callable[[T], dict[str, float]] | None = None,
        say: Say | None = None,
        embedding_cached: bool = False,
    ) -> tuple[T, IndexInfo]:
        say = say or (lambda message: None)
        key = self.key(kind, parts)
        entry = self.entry(kind, key)
        side = entry / SIDE_FILE
        if side.is_file() and not self.rebuild:
            try:
                meta = json.loads(side.read_text(encoding="utf-8"))
                obj = load(entry / "index")
            except (PsiragError, OSError, ValueError, KeyError) as exc:
                say(f"cached {kind} index at {entry} is unreadable ({exc}); rebuilding")
            else:
                say(f"reusing the {kind} index in {entry}")
                return obj, IndexInfo(
                    kind=kind,
                    key=key,
                    path=str(entry),
                    built=False,
                    build_seconds=float(meta.get("build_seconds", 0.0)),
                    stage_seconds={k: float(v) for k, v in meta.get("stage_seconds", {}).items()},
                    embedding_cached=bool(meta.get("embedding_cached", False)),
                )
        say(f"building the {kind} index (cached in {entry})")
        start = time.perf_counter()
        obj = build()
        seconds = time.perf_counter() - start
        self.builds.append(kind)
        if entry.exists():
            shutil.rmtree(entry)
        entry.mkdir(parents=True)
        save(obj, entry / "index")
        info = IndexInfo(
            kind=kind,
            key=key,
            path=str(entry),
            built=True,
            build_seconds=seconds,
            stage_seconds=dict(stages(obj)) if stages else {},
            embedding_cached=embedding_cached,
        )
        meta = {**info.to_dict(), "parts": parts, "psirag_version": __version__}
        meta.pop("built")
        tmp = side.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, side)
        return obj, info


# --- what factories see ---------------------------------------------------------------------------


@dataclass
class EvalContext:
    """The dataset, the settings, the embedder and the index cache of one run."""

    dataset: EvalDataset
    settings: EvalSettings
    embedder: Embedder
    cache: IndexCache
    say: Say = field(default=lambda message: None)
    progress: bool = False
    embedding_cached: bool = False
    llm: LLMClient | None = None
    """The run's LLM client (answers and LLM abstracts share it and its cache); None: none."""
    _psi: tuple[Index, IndexInfo] | None = None
    _reranker: Reranker | None = None

    @cached_property
    def corpus_hash(self) -> str:
        return self.dataset.content_hash()

    def artifact(
        self,
        kind: str,
        config: dict[str, Any],
        *,
        build: Callable[[], T],
        save: Callable[[T, Path], object],
        load: Callable[[Path], T],
        stages: Callable[[T], dict[str, float]] | None = None,
    ) -> tuple[T, IndexInfo]:
        """An index of any kind over this corpus, built once per (corpus, config, embedder)."""
        parts = {
            "corpus": self.corpus_hash,
            "config": config,
            "embedder": self.embedder.id,
            "index_format": FORMAT_VERSION,
        }
        return self.cache.get_or_build(
            kind,
            parts,
            build=build,
            save=save,
            load=load,
            stages=stages,
            say=self.say,
            embedding_cached=self.embedding_cached,
        )

    @contextmanager
    def abstract_llm(self, config: IndexConfig) -> Iterator[LLMClient | None]:
        """The LLM that writes LLM abstracts (None for LLM-free ones): the run's ``--llm``,
        through the harness's client and response cache, so a killed build resumes and the
        abstract calls and the answers share one cache file."""
        if not config.abstracts.startswith("llm-"):
            yield None
            return
        if self.llm is not None:
            yield self.llm
            return
        client, owned = llm_client(self.settings, None)
        if client is None:
            raise InputError(f"abstracts {config.abstracts} need an LLM: pass --llm SPEC")
        try:
            yield client
        finally:
            if owned:
                client.close()

    def psi_index(self) -> tuple[Index, IndexInfo]:
        """The psirag index (tree, leaf embeddings, BM25) every built-in method searches."""
        if self._psi is None:
            config = self.settings.resolved_index_config()

            def build() -> Index:
                with self.abstract_llm(config) as llm:
                    return Index.build(
                        self.dataset.documents,
                        config,
                        embedder=self.embedder,
                        progress=self.progress,
                        report=self.say,
                        llm=llm,
                    )

            def save(index: Index, path: Path) -> None:
                index.save(path)

            self._psi = self.artifact(
                PSI_KIND,
                abstract_key(config),
                build=build,
                save=save,
                load=lambda path: Index.load(path, embedder=self.embedder),
                stages=lambda index: index.stats.seconds,
            )
        return self._psi

    def reranker(self) -> Reranker:
        """The ``--reranker`` cross-encoder, loaded once (psi and hybrid share it)."""
        if self._reranker is None:
            from psirag.retrieval.rerank import CrossEncoderReranker

            self._reranker = CrossEncoderReranker(str(self.settings.reranker))
        return self._reranker

    def retriever(self, **changes: Any) -> tuple[Retriever, IndexInfo]:
        """A retriever over the psi index with the run's search settings and ``changes``; with
        ``fusion='rerank'``, it ranks by the run's shared reranker."""
        index, info = self.psi_index()
        config = self.settings.search_config(**changes)
        reranker = self.reranker() if config.fusion == "rerank" else None
        return index.retriever.with_config(config, reranker=reranker), info


@dataclass
class Retrieval:
    """A ready retriever, the index it searches, and the build stages it needs."""

    search: SearchFn
    index: IndexInfo
    stages: Sequence[str] | None = None
    """Build stages this method uses (for its index_seconds); None: the whole build."""
    visit: VisitFn | None = None
    """The nodes given to summarization mode (``NAME+summarize``); None: the method has none."""

    @property
    def index_seconds(self) -> float:
        return self.index.seconds_for(self.stages)


Factory = Callable[[EvalContext], Retrieval]


_KEY_DEFAULTS: dict[str, Any] = {
    "tree_mode": "auto",
    "tree_neighbors": 32,
    "tree_bucket_size": 4096,
}
"""IndexConfig fields left out of a cache key while they hold these values (see below). Fixed
literals, not the dataclass defaults: should a default change, its keys must change too."""


def abstract_key(config: IndexConfig) -> dict[str, Any]:
    """An index config as a cache key part; with LLM abstracts, a fingerprint of the abstract
    prompts joins it (the LLM spec is in the config): new abstract prompts mean new abstracts,
    while a prompt version bump for other prompts (the agent's) must not rebuild the index."""
    key = config.to_dict()
    # Fields added to IndexConfig later leave the keys of older cached indexes valid at their
    # defaults: "auto" builds the exact tree whenever its matrix fits, which is the tree those
    # indexes hold (a corpus too big for it never had a cached exact index), and the neighbour
    # count only matters in the knn mode.
    for name, default in _KEY_DEFAULTS.items():
        if key.get(name) == default:
            del key[name]
    if key.get("batch_size") is None:
        # the backend's own batch (None) came after caches keyed by the old default, 16; the
        # batch does not change the vectors beyond float noise, so those caches stay valid
        key["batch_size"] = 16
    if config.abstracts.startswith("llm-"):
        from psirag.prompts import abstract_prompts_fingerprint

        key["abstract_prompts"] = abstract_prompts_fingerprint()
    return key


@dataclass(frozen=True)
class MethodSpec:
    name: str
    factory: Factory
    description: str = ""


METHODS: dict[str, MethodSpec] = {}
"""Retriever name -> how to make it. ``NAME+agent`` needs no entry of its own."""


def register_method(name: str, factory: Factory, description: str = "") -> None:
    """Make ``name`` available to ``psirag eval --methods`` (replacing an earlier entry)."""
    if not name or "+" in name or "," in name:
        raise ValueError(f"method names need no '+' or ',': {name!r}")
    METHODS[name] = MethodSpec(name, factory, description)


# --- built-in retrievers --------------------------------------------------------------------------


def leaf_visit(retriever: Retriever, top_k: int) -> VisitFn:
    """Summarization mode for a retriever without abstracts: its own top ``top_k`` of the
    documents' leaves, one plain retrieval (RRF, never the reranker, which reranks for QA)."""
    config = retriever.config.with_(k=top_k, candidates=top_k, fusion="rrf", reranker=None)
    ranker = retriever.with_config(config)

    def visit(query: str, vector: np.ndarray, docs: Sequence[str] | None) -> list[VisitedNode]:
        pairs = ranker.ranked(vector, query, docs=docs)
        return [ranker.node_hit(int(i), float(s)) for i, s in pairs]

    return visit


def tree_visit(retriever: Retriever, top_k: int) -> VisitFn:
    """Every node Algorithm 2 scores inside the documents (``Index.visit``), with k and beam set
    to the summary's top-k: the paper's "top-20 for QMSum" is Algorithm 2's k (C.2)."""

    def visit(query: str, vector: np.ndarray, docs: Sequence[str] | None) -> list[VisitedNode]:
        return list(retriever.visit_vector(vector, docs=docs, beam=top_k, k=top_k))

    return visit


def _retrieval(
    retriever: Retriever, info: IndexInfo, stages: list[str], visit: VisitFn
) -> Retrieval:
    def search(query: str, vector: np.ndarray) -> list[Passage]:
        return retriever.search_vector(vector, query)

    return Retrieval(search, info, stages, visit)


def _psi_factory(use_tree: bool, use_bm25: bool, *, paper: bool = False) -> Factory:
    def make(ctx: EvalContext) -> Retrieval:
        s = ctx.settings
        changes: dict[str, Any] = {"use_tree": use_tree, "use_bm25": use_bm25}
        if use_tree and not use_bm25:  # the tree search itself, never its exact stand-in
            changes.update(exact_dense_leaves=0)
        if paper:  # the paper profile whatever --profile says (--beam still applies)
            base = PROFILES["paper"]
            changes.update(
                beam=base.beam if s.beam is None else s.beam,
                use_dense=base.use_dense,
                merge_duplicates=base.merge_duplicates,
                exact_dense_leaves=base.exact_dense_leaves,
            )
        if use_tree and use_bm25 and s.reranker:
            changes.update(fusion="rerank", reranker=s.reranker)
        retriever, info = ctx.retriever(**changes)
        stages = ["chunking"]
        if use_tree:
            stages += ["embedding", "tree", "abstracts", "routing"]
        if use_bm25:
            stages.append("bm25")
        # Summarization is one tree retrieval without the sparse index (SPEC 2.5): psi and
        # psi-tree visit the same nodes there.
        top_k = s.summary_top_k
        visit = tree_visit(retriever, top_k) if use_tree else leaf_visit(retriever, top_k)
        return _retrieval(retriever, info, stages, visit)

    return make


def _dense(ctx: EvalContext) -> Retrieval:
    # one list, cut to k: as deep as k even when k exceeds the fused methods' candidates
    s = ctx.settings
    retriever, info = ctx.retriever(
        use_tree=False, use_bm25=False, use_dense=True, candidates=max(s.k, s.candidates)
    )
    visit = leaf_visit(retriever, s.summary_top_k)
    return _retrieval(retriever, info, ["chunking", "embedding"], visit)


def _hybrid(ctx: EvalContext) -> Retrieval:
    s = ctx.settings
    changes: dict[str, Any] = {"use_tree": False, "use_bm25": True, "use_dense": True}
    if s.reranker:
        changes.update(fusion="rerank", reranker=s.reranker)
    retriever, info = ctx.retriever(**changes)
    visit = leaf_visit(retriever, s.summary_top_k)
    return _retrieval(retriever, info, ["chunking", "embedding", "bm25"], visit)


register_method("psi", _psi_factory(True, True), "tree search + BM25, RRF (Ψ-RAG retrieval)")
register_method(
    "psi-paper", _psi_factory(True, True, paper=True), "psi with the paper profile (beam 40)"
)
register_method("psi-tree", _psi_factory(True, False), "tree search alone")
register_method("bm25", _psi_factory(False, True), "BM25 alone")
register_method("dense", _dense, "exact flat cosine over the leaf embeddings")
register_method("hybrid", _hybrid, "BM25 + dense, RRF")


PLUGIN_ERRORS: dict[str, str] = {}
"""Plugins that failed to import, and why (shown when one of their methods is asked for)."""


def load_plugins() -> None:
    """Import the optional modules that register more methods.

    A plugin that cannot be imported (a missing optional dependency, a bug) must not take the
    built-in methods down with it: the failure is logged and remembered instead.
    """
    import importlib

    for module in PLUGINS:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                PLUGIN_ERRORS[module] = f"{type(exc).__name__}: {exc}"
                log.warning("psirag eval: plugin %s not loaded (%s)", module, exc)
        except Exception as exc:
            PLUGIN_ERRORS[module] = f"{type(exc).__name__}: {exc}"
            log.warning("psirag eval: plugin %s not loaded (%s)", module, exc)


def check_method(name: str) -> tuple[str, MethodMode]:
    """Split ``NAME+agent`` / ``NAME+ircot`` / ``NAME+summarize`` into the retriever and the mode
    (``none`` without a suffix); unknown retrievers and suffixes fail clearly."""
    base = name
    mode: MethodMode = "none"
    for suffix, suffix_mode in MODE_SUFFIXES.items():
        if name.endswith(suffix):
            base, mode = name[: -len(suffix)], suffix_mode
            break
    forms = " or ".join(f"NAME{suffix}" for suffix in MODE_SUFFIXES)
    if mode == "none" and "+" in name:  # retriever names never hold a '+' (register_method)
        suffix = name[name.index("+") :]
        raise InputError(f"unknown method suffix {suffix!r} in {name!r}; use {forms}")
    if base not in METHODS:
        known = ", ".join(sorted(METHODS))
        broken = "".join(f"; plugin {m} failed to load: {e}" for m, e in PLUGIN_ERRORS.items())
        raise InputError(
            f"unknown method {name!r}; known retrievers: {known} (each also as {forms})" + broken
        )
    return base, mode


__all__ = [
    "METHODS",
    "PLUGINS",
    "PLUGIN_ERRORS",
    "EvalContext",
    "Factory",
    "IndexCache",
    "IndexInfo",
    "MethodSpec",
    "Retrieval",
    "SearchFn",
    "VisitFn",
    "abstract_key",
    "check_method",
    "leaf_visit",
    "load_plugins",
    "register_method",
    "tree_visit",
]
