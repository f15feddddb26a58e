"""The evaluation loop: every method over every question, scored by the paper's protocol.

One run loads the dataset, embeds all questions once (the vectors are shared by every method,
and query latency is measured with the vector given), gets each method's index from the cache or
builds it, and answers each question:

- retrieval only (no LLM): the method's top-k, scored by Recall@2/5;
- ``NAME`` with an LLM: one retrieval and one answer call (:class:`RetrieveAndAnswer` with no
  further retrievals: the same prompt, parser and forced-answer turn as the agent);
- ``NAME+agent``: the R&A agent over that retriever (``max_retrievals`` more retrievals),
  Recall@k read from the top-k of its merged evidence list (SPEC 2.4);
- ``NAME+ircot``: the IRCoT baseline over that retriever (:mod:`psirag.agent.ircot`): each
  reasoning sentence is the next query, within the agent's retrieval budget, and the agent's
  answer step reads what it collected; its rows have the agent's shape;
- ``NAME+summarize``: the paper's summarization mode (SPEC 2.5, :mod:`psirag.agent.summarize`):
  one retrieval restricted to the question's own document (that of its gold passages), the top
  ``summary_top_k`` visited nodes (for a tree: abstracts and leaves) in document order, one
  summary capped at ``summary_max_tokens``, scored by ROUGE-L against the reference summaries.
  With an LLM and no ``methods``, a dataset of reference summaries runs
  :data:`SUMMARY_METHODS`.

LLM replies go through :class:`LLMClient` with a SQLite cache in the cache folder, so a rerun pays
only for requests it has not seen.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from psirag.agent import AgentResult, RetrieveAndAnswer
from psirag.agent.ircot import IRCoT
from psirag.agent.loop import is_not_mentioned
from psirag.agent.summarize import Summarizer, VisitedNode
from psirag.embed import Embedder, finalize_vectors
from psirag.errors import InputError
from psirag.eval.clients import llm_client
from psirag.eval.data import EvalDataset, EvalQuestion, load_dataset
from psirag.eval.embedcache import CachingEmbedder
from psirag.eval.methods import (
    METHODS,
    EvalContext,
    IndexCache,
    IndexInfo,
    Retrieval,
    check_method,
    load_plugins,
)
from psirag.eval.metrics import (
    citation_precision,
    exact_match,
    exact_match_max,
    f1,
    f1_max,
    paired_bootstrap_ci,
    recall_at_k,
    rouge_l_max,
)
from psirag.eval.settings import (
    LLM_METHODS,
    RETRIEVAL_METHODS,
    SUMMARY_METHODS,
    EvalSettings,
    MethodMode,
    resolve_embedder,
)
from psirag.hops import max_retrievals_for
from psirag.llm.base import ChatModel
from psirag.llm.client import LLMClient
from psirag.types import Passage

SCHEMA = "psirag.eval/1"
STAGES: dict[MethodMode, str] = {
    "none": "eval-answer",
    "agent": "eval-agent",
    "ircot": "eval-ircot",
    "summarize": "eval-summarize",
}
"""LLM usage label of each mode (``LLMClient.usage`` counts calls per label)."""
SCORES = ("recall@2", "recall@5", "em", "f1", "em_alias", "f1_alias", "rouge_l")
"""Per-question scores (fractions in the JSONL, percentages in the summary)."""
COMPARED = ("recall@5", "f1", "rouge_l")
"""Scores compared with the first method by a paired bootstrap (those every question has)."""

Say = Callable[[str], None]


class QueryVectors:
    """Question vectors computed once per run; sub-questions of the agent embedded on demand."""

    def __init__(self, embedder: Embedder, texts: Sequence[str]) -> None:
        self.embedder = embedder
        self._lock = threading.Lock()
        start = time.perf_counter()
        unique = list(dict.fromkeys(texts))
        vectors: np.ndarray | list[np.ndarray] = (
            finalize_vectors(embedder.embed(unique), unique) if unique else []
        )
        self._store: dict[str, np.ndarray] = dict(zip(unique, vectors, strict=True))
        self.seconds = time.perf_counter() - start
        self.extra = 0
        """Texts embedded after the start (agent sub-questions)."""

    def __call__(self, text: str) -> np.ndarray:
        with self._lock:
            vector = self._store.get(text)
            if vector is None:
                vector = finalize_vectors(self.embedder.embed([text]), [text])[0]
                self._store[text] = vector
                self.extra += 1
            return vector


@dataclass
class MethodResult:
    """One method's per-question rows and their summary."""

    name: str
    retriever: str
    mode: MethodMode
    llm: bool
    index: IndexInfo
    index_seconds: float
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agent(self) -> bool:
        """The R&A agent answered (``NAME+agent``)."""
        return self.mode == "agent"

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for score in SCORES:
            values = [r[score] for r in self.rows if r[score] is not None]
            out[score] = round(100 * float(np.mean(values)), 3) if values else None
        out["index_seconds"] = round(self.index_seconds, 3)
        out["index_reused"] = not self.index.built
        query_ms = [r["query_ms"] for r in self.rows]
        out["query_ms_p50"], out["query_ms_p95"] = _percentiles(query_ms)
        if self.llm:
            answer_ms = [r["answer_ms"] for r in self.rows]
            out["answer_ms_p50"], out["answer_ms_p95"] = _percentiles(answer_ms)
            out["retrievals_per_question"] = round(
                float(np.mean([len(r["queries"]) for r in self.rows])), 3
            )
            out.update(_reply_counts(self.rows))
            precision = [
                r["citation_precision"]
                for r in self.rows
                if r.get("citation_precision") is not None
            ]
            out["citation_precision"] = (
                round(100 * float(np.mean(precision)), 3) if precision else None
            )
            out["answers_citing"] = len(precision)
        return out

    def scores(self, name: str) -> list[float] | None:
        """Per-question values of one score, or None unless every question has one."""
        values = [r[name] for r in self.rows]
        if not values or any(v is None for v in values):
            return None
        return [float(v) for v in values]


_PASSED_COUNTS = (
    "forced_turns",
    "nudged_turns",
    "checked_turns",
    "names_checks",
    "repeated_queries",
    "example_queries",
    "no_answer",
    "overlong_answers",
    "cited",
    "dropped_citations",
    "llm_calls",
)
"""Agent counters summed over the questions and reported under their own names."""


def _reply_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How well the model kept the reply format: well-formed replies over all replies, with the
    replies the fallback parser rescued and the forced-answer turns counted apart."""
    stats = [r.get("agent_stats") or {} for r in rows]
    total = {
        key: sum(s.get(key, 0) for s in stats)
        for key in ("well_formed", "rescued", "unparsed", *_PASSED_COUNTS)
    }
    replies = total["well_formed"] + total["rescued"] + total["unparsed"]
    answers = [str(r.get("answer") or "").strip() for r in rows]
    return {
        "replies": replies,
        "well_formed_pct": round(100 * total["well_formed"] / replies, 2) if replies else None,
        "rescued_replies": total["rescued"],
        "unparsed_replies": total["unparsed"],
        **{key: total[key] for key in _PASSED_COUNTS},
        "not_mentioned": sum(is_not_mentioned(a) for a in answers),
        "empty_answers": sum(not a for a in answers),
    }


@dataclass
class EvalReport:
    """Everything one run measured; ``write`` saves results.json and the per-question JSONL."""

    dataset: str
    n_questions: int
    settings: dict[str, Any]
    embedder: str
    llm: str | None
    query_embedding_seconds: float
    methods: list[MethodResult]
    indexes: dict[str, dict[str, Any]]
    index_builds: list[str]
    bootstrap: int = 0

    def comparisons(self) -> dict[str, dict[str, Any]]:
        """Paired bootstrap 95% CIs of (method - first method), in percentage points."""
        if self.bootstrap <= 0 or len(self.methods) < 2:
            return {}
        reference = self.methods[0]
        out: dict[str, dict[str, Any]] = {}
        for method in self.methods[1:]:
            entry: dict[str, Any] = {}
            for score in COMPARED:
                a, b = method.scores(score), reference.scores(score)
                if a is None or b is None:
                    continue
                ci = paired_bootstrap_ci(100 * np.asarray(a), 100 * np.asarray(b), n=self.bootstrap)
                entry[score] = {
                    k: round(v, 3) if isinstance(v, float) else v for k, v in ci.to_dict().items()
                }
            if entry:
                out[f"{method.name} - {reference.name}"] = entry
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "dataset": self.dataset,
            "n_questions": self.n_questions,
            "methods": {m.name: m.summary() for m in self.methods},
            "comparisons": self.comparisons(),
            "embedder": self.embedder,
            "llm": self.llm,
            "query_embedding_seconds": round(self.query_embedding_seconds, 3),
            "indexes": self.indexes,
            "index_builds": self.index_builds,
            "settings": self.settings,
        }

    def rows(self) -> list[dict[str, Any]]:
        return [row for m in self.methods for row in m.rows]

    def write(self, output: str | Path) -> tuple[Path, Path]:
        """``output`` (results.json) and ``<stem>.questions.jsonl`` beside it."""
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        questions = questions_path(output)
        with questions.open("w", encoding="utf-8") as fh:
            for row in self.rows():
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        return output, questions

    def table(self) -> str:
        return format_table(self.to_dict())


def questions_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(f"{output.stem}.questions.jsonl")


def _percentiles(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    p50, p95 = np.percentile(np.asarray(values, dtype=np.float64), [50, 95])
    return round(float(p50), 3), round(float(p95), 3)


_COUNT_COLUMNS = frozenset({"repeated_queries", "no_answer"})


def format_table(results: dict[str, Any]) -> str:
    """The summary of a results.json as an aligned text table (percentages, '-' for n/a)."""
    columns = [
        ("method", None),
        ("R@2", "recall@2"),
        ("R@5", "recall@5"),
        ("EM", "em"),
        ("F1", "f1"),
        ("EM*", "em_alias"),
        ("F1*", "f1_alias"),
        ("RL", "rouge_l"),
        ("cite P", "citation_precision"),
        ("repeats", "repeated_queries"),
        ("no ans", "no_answer"),
        ("index s", "index_seconds"),
        ("p50 ms", "query_ms_p50"),
        ("p95 ms", "query_ms_p95"),
    ]
    methods = list(results["methods"].items())
    # A column no method fills (EM/F1 without an LLM, ROUGE-L on QA sets) is left out.
    columns = [
        c
        for c in columns
        if c[1] is None or any(summary.get(c[1]) is not None for _, summary in methods)
    ]
    body: list[list[str]] = []
    for name, summary in methods:
        row = [name]
        for _, key in columns[1:]:
            value = summary.get(key)
            if value is None:
                row.append("-")
            elif key == "index_seconds":
                row.append(f"{value:.1f}")
            elif key in _COUNT_COLUMNS:
                row.append(str(int(value)))
            else:
                row.append(f"{value:.2f}")
        body.append(row)
    header = [c[0] for c in columns]
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    title = f"{results['dataset']}: {results['n_questions']} questions"
    rule = "-" * len(line(header))
    notes = "EM*/F1*: best over answer aliases; index s: build seconds of the stages a method uses"
    if any(summary.get("repeated_queries") is not None for _, summary in methods):
        notes += (
            "\ncite P: share of cited passages that are gold (answers citing nothing left out); "
            "repeats: sub-questions refused for repeating an earlier search; no ans: episodes "
            "with no valid answer"
        )
    return "\n".join([title, line(header), rule, *(line(r) for r in body), notes])


def is_summarization(dataset: EvalDataset) -> bool:
    """Every question is scored against reference summaries (no ``answer``: QMSum, WCEP)."""
    return bool(dataset.questions) and all(
        q.answer is None and q.answers for q in dataset.questions
    )


def _score(
    dataset: EvalDataset,
    q: EvalQuestion,
    passages: Sequence[Passage],
    answer: str | None,
    *,
    recall: bool = True,
) -> dict[str, float | None]:
    """The question's scores; ``recall=False`` when retrieval was confined to the gold document
    (summarization mode), where Recall@k would be 100 by construction."""
    keys = list(dict.fromkeys(dataset.record_of(p.source.document, p.text) for p in passages))
    out: dict[str, float | None] = dict.fromkeys(SCORES)
    if recall and q.gold_passages:
        out["recall@2"] = recall_at_k(keys, q.gold_passages, 2)
        out["recall@5"] = recall_at_k(keys, q.gold_passages, 5)
    if answer is not None:
        if q.answer is not None:
            out["em"] = exact_match(answer, q.answer)
            out["f1"] = f1(answer, q.answer)
            out["em_alias"] = exact_match_max(answer, q.answers)
            out["f1_alias"] = f1_max(answer, q.answers)
        elif q.answers:  # reference summaries
            out["rouge_l"] = rouge_l_max(answer, q.answers)
    return out


def single_thread_blas() -> AbstractContextManager[Any]:
    """BLAS limited to one thread while questions run, when threadpoolctl is installed.

    Per-query latency is a single-thread figure: a multi-threaded matrix-vector product on a
    busy machine measured 5x slower than one thread here, which would charge dense retrieval for
    the machine's load rather than for its work.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _passage_row(p: Passage) -> dict[str, Any]:
    return {"id": p.id, "doc": p.source.document, "title": p.source.title, "score": p.score}


def _node_row(node: VisitedNode) -> dict[str, Any]:
    """A node given to the summarizer: abstracts (layer >= 1) have no passage id."""
    return {
        "node": int(node.node),
        "layer": int(node.layer),
        "doc": getattr(node, "document", None),
        "score": float(node.score),
    }


class _Runner:
    """Answers the questions with one method and records a row per question."""

    def __init__(
        self,
        dataset: EvalDataset,
        settings: EvalSettings,
        vectors: QueryVectors,
        llm: LLMClient | None,
    ) -> None:
        self.dataset = dataset
        self.settings = settings
        self.vectors = vectors
        self.llm = llm
        self.hops: dict[str, int] = {}
        """Predicted hop counts by question id, when ``max_retrievals`` is ``auto``."""
        self._docs_of: dict[str, list[str]] = {}
        for doc, text in dataset.passage_of.items():
            self._docs_of.setdefault(text, []).append(doc)

    def question_docs(self, q: EvalQuestion) -> list[str] | None:
        """The documents holding the question's gold passages (QMSum: its meeting), where
        summarization mode retrieves; None (the whole corpus) for a question without gold."""
        docs = [d for text in q.gold_passages for d in self._docs_of.get(text, [])]
        return list(dict.fromkeys(docs)) or None

    def run(
        self, name: str, retrieval: Retrieval, mode: MethodMode, progress: bool
    ) -> list[dict[str, Any]]:
        from tqdm.auto import tqdm

        questions = self.dataset.questions

        def one(q: EvalQuestion) -> dict[str, Any]:
            if self.llm is None:
                return self._retrieve_only(retrieval, q)
            return self._answer(retrieval, q, mode)

        bar = tqdm(total=len(questions), desc=name, unit="q", disable=not progress, leave=False)
        try:
            with single_thread_blas():
                rows = self._rows(one, questions, bar)
        finally:
            bar.close()
        for row in rows:
            row["method"] = name
        return rows

    def _rows(
        self, one: Callable[[EvalQuestion], dict[str, Any]], questions: list[EvalQuestion], bar: Any
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        if self.llm is not None and self.settings.workers > 1:
            with ThreadPoolExecutor(self.settings.workers) as pool:
                for row in pool.map(one, questions):
                    rows.append(row)
                    bar.update(1)
        else:
            for q in questions:
                rows.append(one(q))
                bar.update(1)
        return rows

    def _base_row(self, q: EvalQuestion) -> dict[str, Any]:
        return {
            "method": "",
            "id": q.id,
            "question": q.question,
            "gold": q.answer,
            "gold_answers": q.answers,
            "gold_passage_ids": q.gold_ids,
        }

    def _retrieve_only(self, retrieval: Retrieval, q: EvalQuestion) -> dict[str, Any]:
        vector = self.vectors(q.question)
        start = time.perf_counter()
        passages = retrieval.search(q.question, vector)
        ms = (time.perf_counter() - start) * 1000
        return {
            **self._base_row(q),
            "answer": None,
            "retrieved": [_passage_row(p) for p in passages],
            **_score(self.dataset, q, passages[: self.settings.k], None),
            "query_ms": ms,
            "queries": [q.question],
        }

    def _model(self) -> LLMClient:
        """The run's LLM client; modes that answer are only planned with one (checked early)."""
        if self.llm is None:
            raise InputError("this method answers with an LLM: pass --llm SPEC")
        return self.llm

    def _summarize(self, retrieval: Retrieval, q: EvalQuestion) -> dict[str, Any]:
        """One retrieval inside the question's document, one summary over what it visited."""
        if retrieval.visit is None:  # run_eval checks first; kept for direct callers
            raise InputError("this retriever lists no visited nodes for +summarize")
        s = self.settings
        vector = self.vectors(q.question)
        start = time.perf_counter()
        nodes = list(retrieval.visit(q.question, vector, self.question_docs(q)))
        query_ms = (time.perf_counter() - start) * 1000
        summarizer = Summarizer(
            self._model(),
            lambda query: nodes,
            top_k=s.summary_top_k,
            max_tokens=s.summary_max_tokens,
            stage=STAGES["summarize"],
        )
        answer, clipped, calls = "", 0, 0
        evidence: list[VisitedNode] = []
        start = time.perf_counter()
        if nodes:  # none when nothing in the document matched (BM25 keeps positive scores only)
            result = summarizer.run(q.question)
            answer, evidence = result.answer, result.evidence
            clipped, calls = result.clipped_nodes, 1
        answer_ms = (time.perf_counter() - start) * 1000
        return {
            **self._base_row(q),
            "answer": answer,
            "retrieved": [_node_row(n) for n in evidence],
            **_score(self.dataset, q, [], answer, recall=False),
            "query_ms": query_ms,
            "answer_ms": answer_ms,
            "queries": [q.question],
            "actions": ["summarize"],
            "llm_calls": calls,
            "agent_stats": {
                "llm_calls": calls,
                "visited_nodes": len(nodes),
                "given_nodes": len(evidence),
                "abstract_nodes": sum(1 for n in evidence if n.layer > 0),
                "clipped_nodes": clipped,
            },
            # The fields of the agent's rows, so that every LLM row has one shape.
            "max_retrievals": 0,
            "predicted_hops": None,
            "citations": [],
            "citation_precision": None,
        }

    def _answer(self, retrieval: Retrieval, q: EvalQuestion, mode: MethodMode) -> dict[str, Any]:
        if mode == "summarize":
            return self._summarize(retrieval, q)
        timings: list[float] = []

        def retrieve(query: str) -> list[Passage]:
            vector = self.vectors(query)
            start = time.perf_counter()
            passages = retrieval.search(query, vector)
            timings.append((time.perf_counter() - start) * 1000)
            return passages

        budget = self.budget(q)
        loop: RetrieveAndAnswer | IRCoT
        if mode == "ircot":
            loop = IRCoT(
                self._model(),
                retrieve,
                max_retrievals=budget,
                max_tokens=self.settings.max_tokens,
                stage=STAGES[mode],
            )
        else:
            loop = RetrieveAndAnswer(
                self._model(),
                retrieve,
                max_retrievals=budget if mode == "agent" else 0,
                max_tokens=self.settings.max_tokens,
                check_answers=self.settings.answer_check,
                names_check=self.settings.names_check,
                stage=STAGES[mode],
            )
        start = time.perf_counter()
        result: AgentResult = loop.run(q.question)
        answer_ms = (time.perf_counter() - start) * 1000
        evidence = result.evidence
        return {
            **self._base_row(q),
            "answer": result.answer,
            "retrieved": [_passage_row(p) for p in evidence],
            **_score(self.dataset, q, evidence[: self.settings.k], result.answer),
            "query_ms": timings[0] if timings else 0.0,
            "answer_ms": answer_ms,
            "queries": [s.query for s in result.steps],
            "actions": [s.action for s in result.steps],
            "llm_calls": result.stats.llm_calls,
            "agent_stats": result.stats.to_dict(),
            "max_retrievals": budget if mode in ("agent", "ircot") else 0,
            "predicted_hops": self.hops.get(q.id),
            "citations": [c.to_dict() for c in result.citations],
            "citation_precision": citation_precision(
                [
                    self.dataset.record_of(c.passage.source.document, c.passage.text)
                    for c in result.citations
                ],
                q.gold_passages,
            )
            if q.gold_passages
            else None,
        }

    def budget(self, q: EvalQuestion) -> int:
        """Retrievals after the first for ``q``: the setting, or the hop discriminator's."""
        if self.settings.max_retrievals == "auto":
            return max_retrievals_for(self.hops[q.id])
        return int(self.settings.max_retrievals)


def run_eval(
    dataset: str | Path | EvalDataset,
    settings: EvalSettings | None = None,
    *,
    embedder: Embedder | None = None,
    llm: ChatModel | None = None,
    say: Say | None = None,
    progress: bool = False,
) -> EvalReport:
    """Evaluate ``settings.method_names`` on a dataset folder (or a loaded dataset).

    ``embedder`` and ``llm`` (a ChatModel or LLMClient) override ``settings.embedder`` and
    ``settings.llm``; ``say`` receives progress lines.
    """
    settings = settings or EvalSettings()
    if embedder is not None and embedder.spec != settings.embedder:
        settings = replace(settings, embedder=embedder.spec)  # what the index manifest records
    say = say or (lambda message: None)
    load_plugins()
    has_llm = llm is not None or settings.llm is not None
    if settings.methods:
        _check_plan(settings, has_llm)

    if isinstance(dataset, EvalDataset):
        data = settings.select(dataset)
    else:
        data = settings.select(load_dataset(dataset, settings.limit))
    if settings.subcorpus is not None:
        say(f"sub-corpus: {len(data.documents):,} passages, {len(data.questions)} questions")
    if not data.questions:
        raise InputError(f"{data.folder}: no questions to evaluate")
    if not settings.methods:
        defaults: tuple[str, ...]
        if not has_llm:
            defaults = RETRIEVAL_METHODS
        else:
            defaults = SUMMARY_METHODS if is_summarization(data) else LLM_METHODS
        settings = replace(settings, methods=defaults)
    plan = _check_plan(settings, has_llm)
    if any(mode == "summarize" for _, _, mode in plan):
        _warn_summarize_index(settings, data, say)

    embedder_obj = embedder or resolve_embedder(
        settings.embedder, settings.resolved_index_config().batch_size, settings.http
    )
    embedding_cached = False
    if settings.embedding_cache is not None:
        embedder_obj = CachingEmbedder(embedder_obj, settings.embedding_cache)
        embedding_cached = True
    cache = IndexCache(settings.cache_dir, rebuild=settings.rebuild)
    ctx = EvalContext(
        dataset=data,
        settings=settings,
        embedder=embedder_obj,
        cache=cache,
        say=say,
        progress=progress,
        embedding_cached=embedding_cached,
    )

    say(f"embedding {len(data.questions)} questions")
    vectors = QueryVectors(embedder_obj, [q.question for q in data.questions])

    client, owned = llm_client(settings, llm)
    ctx.llm = client  # LLM abstracts share the answers' client and response cache
    answerer = None if settings.retrieval_only else client
    results: list[MethodResult] = []
    retrievers: dict[str, Retrieval] = {}
    try:
        for name, base, mode in plan:  # every index first: a method that cannot run fails early
            if base not in retrievers:
                retrievers[base] = METHODS[base].factory(ctx)
            if mode == "summarize" and retrievers[base].visit is None:
                raise InputError(
                    f"{name}: the {base} retriever cannot list the nodes one retrieval visits "
                    "in a document (Retrieval.visit), which summarization mode reads; "
                    "+summarize works with psi, psi-tree, dense, bm25 and hybrid"
                )
        runner = _Runner(data, settings, vectors, answerer)
        if settings.max_retrievals == "auto" and answerer is not None:
            runner.hops = _predict_hops(data.questions, vectors, embedder_obj, say)
        for name, base, mode in plan:
            retrieval = retrievers[base]
            say(f"running {name} on {len(data.questions)} questions")
            rows = runner.run(name, retrieval, mode, progress)
            empty = sum(1 for row in rows if mode == "summarize" and not row["retrieved"])
            if empty:
                say(
                    f"warning: {name}: {empty} of {len(rows)} questions retrieved nothing in "
                    "their document; their summaries are empty (ROUGE-L 0)"
                )
            results.append(
                MethodResult(
                    name=name,
                    retriever=base,
                    mode=mode,
                    llm=answerer is not None,
                    index=retrieval.index,
                    index_seconds=retrieval.index_seconds,
                    rows=rows,
                )
            )
    finally:
        if owned and client is not None:
            client.close()

    indexes = {r.index.kind: r.index.to_dict() for r in results}
    return EvalReport(
        dataset=data.name,
        n_questions=len(data.questions),
        settings=_settings_dict(settings),
        embedder=embedder_obj.id,
        llm=_model_id(client),
        query_embedding_seconds=vectors.seconds,
        methods=results,
        indexes=indexes,
        index_builds=list(cache.builds),
        bootstrap=settings.bootstrap,
    )


def _predict_hops(
    questions: Sequence[EvalQuestion], vectors: QueryVectors, embedder: Embedder, say: Say
) -> dict[str, int]:
    """Hop counts of the questions (``--max-retrievals auto``): the run's question vectors when
    the run embeds with the model's embedder, else that embedder loaded for the purpose."""
    from psirag.hops import HopPredictor, load_hop_model

    model = load_hop_model()
    texts = [q.question for q in questions]
    if embedder.id == model.embedder:
        predicted = model.predict(np.stack([vectors(t) for t in texts]), texts)
    else:
        predicted = HopPredictor(model=model).predict(texts)
    counts = {h: predicted.count(h) for h in sorted(set(predicted))}
    say(f"hop discriminator: {counts} (hops: questions)")
    return {q.id: h for q, h in zip(questions, predicted, strict=True)}


def _check_plan(settings: EvalSettings, has_llm: bool) -> list[tuple[str, str, MethodMode]]:
    """(name, retriever, mode) of every asked method; modes that answer need an LLM."""
    names = list(dict.fromkeys(settings.methods))
    plan = [(name, *check_method(name)) for name in names]
    if not has_llm:
        needing = [name for name, _, mode in plan if mode != "none"]
        if needing:
            raise InputError(f"{', '.join(needing)} need an LLM: pass --llm SPEC")
    if settings.retrieval_only:
        answering = [name for name, _, mode in plan if mode != "none"]
        if answering:
            raise InputError(
                f"{', '.join(answering)} answer with the LLM, which --retrieval-only turns off"
            )
    return plan


def _warn_summarize_index(settings: EvalSettings, data: EvalDataset, say: Say) -> None:
    """Summarization mode runs on any index, but the paper's setting is one tree per document
    over ~100-token chunks: say so when the index is built otherwise."""
    config = settings.resolved_index_config()
    unplaced = sum(1 for q in data.questions if not q.gold_passages)
    if unplaced:
        say(
            f"warning: {unplaced} of {len(data.questions)} questions name no supporting passage, "
            "so +summarize reads the whole corpus for them, not their own document"
        )
    if not config.tree_per_document:
        say(
            "warning: +summarize on an index with one tree over the whole corpus: abstracts "
            "visited for one document can condense other documents too; the paper builds one "
            "tree per document (--tree-per-document)"
        )
    if not config.split_records and any(d.is_record for d in data.documents):
        say(
            "warning: +summarize on unsplit records: each corpus record (a whole transcript on "
            "QMSum) is one leaf, so the summary reads a few long leaves, clipped to fit the "
            "context; pass --split for ~100-token chunks"
        )


def _model_id(client: ChatModel | None) -> str | None:
    """The model id of an LLMClient (its wrapped model) or of a bare ChatModel."""
    if client is None:
        return None
    model = getattr(client, "model", None)
    return getattr(model, "id", None) or getattr(client, "id", None)


def _settings_dict(settings: EvalSettings) -> dict[str, Any]:
    return {
        "methods": list(settings.method_names),
        "limit": settings.limit,
        "k": settings.k,
        "candidates": settings.candidates,
        "beam": settings.search_config().beam,
        "profile": settings.profile,
        "reranker": settings.reranker,
        "max_retrievals": settings.max_retrievals,
        "answer_check": settings.answer_check,
        "names_check": settings.names_check,
        "max_tokens": settings.max_tokens,
        "summary_top_k": settings.summary_top_k,
        "summary_max_tokens": settings.summary_max_tokens,
        "index_config": settings.resolved_index_config().to_dict(),
        "cache_dir": str(settings.cache_dir),
        "embedding_cache": str(settings.embedding_cache) if settings.embedding_cache else None,
        "query_blas_threads": 1 if _has_threadpoolctl() else None,
        "retrieval_only": settings.retrieval_only,
        **settings.ablations(),
    }


def _has_threadpoolctl() -> bool:
    import importlib.util

    return importlib.util.find_spec("threadpoolctl") is not None


__all__ = [
    "SCHEMA",
    "EvalReport",
    "MethodResult",
    "QueryVectors",
    "format_table",
    "is_summarization",
    "questions_path",
    "run_eval",
]
