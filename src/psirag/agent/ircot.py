"""An IRCoT-style iterative retrieval baseline (Trivedi et al. 2023), over any retriever.

IRCoT interleaves a chain of thought with retrieval: the first retrieval uses the question; then
the model writes one more sentence of reasoning from everything collected so far, and that
sentence, not a sub-question the model chose to ask, becomes the next query. The chain stops when
a sentence says "answer is", when the model gives no usable sentence, or when the retrieval budget
is spent. A separate reader then answers from the collected passages.

Built to compare with the R&A agent (:mod:`psirag.agent.loop`) at equal cost and on equal terms:

- the budget is the agent's: ``max_retrievals`` retrievals after the first one, and no reasoning
  call after the last retrieval (its sentence could not be used), so with a budget of 1 it makes
  at most the agent's two calls plus the same forced-answer turn;
- the reader *is* the agent with no retrievals left (:class:`RetrieveAndAnswer` with
  ``max_retrievals=0``, fed the collected passages): the same prompt, parser, forced-answer turn
  and ``Not mentioned`` fallback as the agent and as the harness's single-retrieval answers, so a
  score difference comes from which passages were found, not from how the answer was asked for;
- the evidence list is the agent's rank-fusion merge of the per-step lists (SPEC 2.4), so
  Recall@k is read the same way;
- the result is an :class:`AgentResult` (one :class:`Step` per retrieval), so the eval harness
  records the same row for both.

A sentence that repeats an earlier query of the chain (the question included; the agent's test,
``psirag.agent.repeats``) is not searched: it would bring the same passages. The chain stops
there (``stop="repeat"``, counted in ``repeated_queries``) and the reader answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from psirag.agent.chat import (
    REPEAT_PENALTY,
    call_model,
    fit_messages,
    passage_body,
    render_passages,
)
from psirag.agent.loop import (
    AgentResult,
    AgentStats,
    Citation,
    EvidenceMerge,
    RetrieveAndAnswer,
    Retriever,
    Step,
    merge_evidence,
)
from psirag.agent.parsing import strip_fenced, strip_thinking
from psirag.agent.repeats import repeats
from psirag.errors import InputError
from psirag.llm.base import ChatModel, ChatResult, GenerationParams
from psirag.prompts import IRCOT_ANSWER_PHRASE, NOT_MENTIONED, ircot_prompt
from psirag.types import Passage

SENTENCE_TOKENS = 64
"""Cap on one reasoning sentence: a sentence, never a paragraph, whatever the model does."""

StopReason = Literal["answer", "cap", "empty", "repeat"]

_ANSWER_IS = re.compile(r"\b" + r"\s+".join(IRCOT_ANSWER_PHRASE.split()) + r"\b", re.IGNORECASE)
# The agent's marker, from a model that falls back on that format: a stated answer all the same.
_ANSWER_MARKER = re.compile(r"^[\W_]*(?:final\s+)?answer[*_`]*\s*:", re.IGNORECASE)
# What some models put before the sentence: list marks, numbering, a label ("Turn 2:").
_LEAD = re.compile(
    r"^[\s*_#>`\-•]*(?:\d{1,2}[.)]\s+)?[*_`]*"
    r"(?:(?:(?:next\s+)?sentence|reasoning|thought|step|turn)(?:\s*\d{1,2})?[*_`]*\s*:[*_`\s]*)?",
    re.IGNORECASE,
)
_EMPHASIS = "*_` \t"
_QUOTES = ('"', "'", "\u201c\u201d")
# A sentence end: terminal punctuation, closing quotes or brackets, space, then a capital or digit.
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_SHORT_WORD = 3
"""A capitalised word this short before a full stop is taken for an abbreviation (St., Dr., Co.)."""


def first_sentence(line: str) -> str:
    """The first sentence of ``line``; the whole line when no safe sentence end is found.

    A full stop after an initial or a short capitalised word (``J. R. R. Tolkien``, ``St. Louis``,
    ``F.C. Porto``) does not end the sentence: cutting a name in half would ruin the query, while
    keeping one sentence too many only lengthens it.
    """
    for match in _SENTENCE_END.finditer(line):
        if line[match.start()] == ".":
            before = line[: match.start()].split()
            word = before[-1].lstrip("\"'([") if before else ""
            if "." in word or (word[:1].isupper() and len(word) <= _SHORT_WORD):
                continue
        return line[: match.start() + 1].strip()
    return line.strip()


def read_sentence(reply: str) -> tuple[str, str]:
    """``(sentence, line)`` from a reasoning reply: its first non-empty line with any leading
    label or list mark removed, and that line's first sentence (the next query). Hidden
    ``<think>`` reasoning and repeated (fenced) documents are dropped first, so a document's
    line never becomes the query. Both are empty when the reply holds no text."""
    text = strip_fenced(strip_thinking(reply)).replace("\r", "\n")
    line = next((x for x in text.split("\n") if x.strip()), "")
    line = _unquote(_LEAD.sub("", line, count=1).strip().strip(_EMPHASIS))
    return first_sentence(line), line


def _unquote(line: str) -> str:
    """Drop quotes around the whole line (a model quoting its sentence), not inner ones."""
    for quote in _QUOTES:
        opening, closing = quote[0], quote[-1]
        inner = line[1:-1]
        if len(line) > 1 and line[0] == opening and line[-1] == closing and opening not in inner:
            return inner.strip()
    return line


def says_answer(text: str) -> bool:
    """Whether a reasoning line states the answer, which ends the chain: it says "answer is"
    anywhere, or starts with the agent's ``Answer:`` marker."""
    return bool(_ANSWER_IS.search(text) or _ANSWER_MARKER.match(text))


@dataclass
class IRCoTStats(AgentStats):
    """The agent's counts plus the chain's own. ``well_formed``/``rescued``/``unparsed`` count
    the reader's replies only: a reasoning sentence has no format to keep."""

    reasoning_calls: int = 0
    empty_sentences: int = 0
    """Reasoning replies with no text on their first line, even after the retry without stop."""
    sentence_retries: int = 0
    """Reasoning calls repeated without the newline stop because the reply was empty."""


@dataclass
class IRCoTResult(AgentResult):
    """An :class:`AgentResult` (steps: one per retrieval, the thought is the step's reasoning
    sentence) with the chain, why it stopped, and the reader's step."""

    chain: list[str] = field(default_factory=list)
    stop: StopReason = "cap"
    reader: Step | None = None

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["chain"] = list(self.chain)
        out["stop"] = self.stop
        out["reader"] = self.reader.to_dict() if self.reader is not None else None
        return out


class IRCoT:
    """IRCoT retrieval over any chat model and retriever, then the agent's reader.

    ``max_retrievals`` counts the retrievals after the first one (the agent's budget);
    ``max_tokens`` caps the reader's replies, ``sentence_tokens`` each reasoning sentence.
    """

    def __init__(
        self,
        llm: ChatModel,
        retrieve: Retriever,
        *,
        max_retrievals: int = 1,
        max_tokens: int = 256,
        sentence_tokens: int = SENTENCE_TOKENS,
        repeat_penalty: float = REPEAT_PENALTY,
        temperature: float = 0.0,
        evidence_merge: EvidenceMerge = "rank_fusion",
        stage: str = "ircot",
    ) -> None:
        if max_retrievals < 0:
            raise InputError(f"max_retrievals must be 0 or more, got {max_retrievals}")
        if sentence_tokens < 1:
            raise InputError(f"sentence_tokens must be positive, got {sentence_tokens}")
        self.llm = llm
        self.retrieve = retrieve
        self.max_retrievals = max_retrievals
        self.evidence_merge: EvidenceMerge = evidence_merge
        self.stage = stage
        self.params = GenerationParams(
            max_tokens=sentence_tokens,
            temperature=temperature,
            repeat_penalty=repeat_penalty,
            stop=("\n",),
        )
        # Validates max_tokens and evidence_merge the same way the agent does.
        self._reader_args: dict[str, Any] = {
            "max_retrievals": 0,
            "max_tokens": max_tokens,
            "repeat_penalty": repeat_penalty,
            "temperature": temperature,
            "evidence_merge": evidence_merge,
            "stage": stage,
        }
        RetrieveAndAnswer(llm, retrieve, **self._reader_args)

    # -- one reasoning sentence -----------------------------------------------------------------

    def _reason(
        self, question: str, collected: Sequence[Passage], chain: Sequence[str], stats: IRCoTStats
    ) -> tuple[str, str, str]:
        """``(sentence, line, raw reply)`` of the next reasoning step."""
        longest = max((len(passage_body(p)) for p in collected), default=0)
        messages, limit = fit_messages(
            lambda cap: ircot_prompt(question, render_passages(collected, cap), chain),
            longest,
            self.llm,
            self.params.max_tokens,
        )
        if limit is not None:
            clipped = sum(1 for p in collected if len(passage_body(p)) > limit)
            stats.clipped_passages = max(stats.clipped_passages, clipped)
        reply = self._call(messages, self.params, stats)
        sentence, line = read_sentence(reply.text)
        if not line:
            # A model that opens with a blank line meets the newline stop at once: ask again
            # without it and read the first line that has text.
            stats.sentence_retries += 1
            reply = self._call(messages, replace(self.params, stop=()), stats)
            sentence, line = read_sentence(reply.text)
        return sentence, line, reply.text

    def _call(self, messages: list[Any], params: GenerationParams, stats: IRCoTStats) -> ChatResult:
        result = call_model(self.llm, messages, params, self.stage)
        stats.record_call(result)
        stats.reasoning_calls += 1
        return result

    # -- episode --------------------------------------------------------------------------------

    def run(
        self,
        question: str,
        on_step: Callable[[Step], None] | None = None,
        on_retrieval: Callable[[Step], None] | None = None,
    ) -> IRCoTResult:
        """Answer ``question``; the callbacks see each step as the agent's do."""
        question = question.strip()
        if not question:
            raise InputError("the question is empty")
        stats = IRCoTStats()
        steps: list[Step] = []
        collected: dict[str, Passage] = {}
        chain: list[str] = []
        stop: StopReason = "cap"
        query = question

        for step_no in range(self.max_retrievals + 1):
            remaining = self.max_retrievals - step_no
            passages = list(self.retrieve(query))
            stats.retrievals += 1
            for p in passages:
                collected.setdefault(p.id, p)
            step = Step(query=query, passages=passages, remaining=remaining)
            steps.append(step)
            if on_retrieval is not None:
                on_retrieval(step)
            if remaining == 0:
                break  # a sentence written now could not be searched for: go to the reader
            sentence, line, raw = self._reason(question, list(collected.values()), chain, stats)
            step.raw, step.thought, step.well_formed = raw, sentence, bool(sentence)
            if not sentence:
                stats.empty_sentences += 1
                stop = "empty"
                break
            chain.append(sentence)
            if says_answer(line):
                stop = "answer"
                break
            if repeats(sentence, [question, *(s.query for s in steps)]) is not None:
                stats.repeated_queries += 1
                step.repeated.append(sentence)
                stop = "repeat"
                break
            step.action = "retrieve"
            if on_step is not None:
                on_step(step)
            query = sentence

        evidence = merge_evidence([s.passages for s in steps], self.evidence_merge)
        reader, answer, citations = self._read(question, evidence, stats)
        last = steps[-1]
        last.action = reader.action
        if on_step is not None:
            on_step(last)
        return IRCoTResult(
            answer,
            steps,
            evidence,
            question,
            stats,
            citations=citations,
            chain=chain,
            stop=stop,
            reader=reader,
        )

    def _read(
        self, question: str, evidence: list[Passage], stats: IRCoTStats
    ) -> tuple[Step, str, list[Citation]]:
        """The agent with no retrievals left, over the collected passages in evidence order:
        its one step, its answer (``Not mentioned`` included) and the answer's citations."""
        reader = RetrieveAndAnswer(self.llm, lambda _query: evidence, **self._reader_args)
        result = reader.run(question)
        got = result.stats
        stats.llm_calls += got.llm_calls
        stats.well_formed += got.well_formed
        stats.rescued += got.rescued
        stats.unparsed += got.unparsed
        stats.forced_turns += got.forced_turns
        stats.overlong_answers += got.overlong_answers
        stats.no_answer += got.no_answer
        stats.cited += got.cited
        stats.dropped_citations += got.dropped_citations
        stats.clipped_passages = max(stats.clipped_passages, got.clipped_passages)
        stats.prompt_tokens += got.prompt_tokens
        stats.completion_tokens += got.completion_tokens
        return result.steps[0], result.answer.strip() or NOT_MENTIONED, result.citations


__all__ = [
    "SENTENCE_TOKENS",
    "IRCoT",
    "IRCoTResult",
    "IRCoTStats",
    "StopReason",
    "first_sentence",
    "read_sentence",
    "says_answer",
]
