"""The retrieve-and-answer (R&A) agent: paper Algorithm 3, with the decisions of SPEC 2.4.

One episode: retrieve with the user question; the model reads the passages and replies with a
thought and either ``Answer:`` or ``Retrieve: <sub-question>``; a retrieval runs the sub-question
and its passages are added to the conversation. Every turn says how many retrievals remain; with
none left the turn demands an answer. The loop is bounded by construction (at most
``max_retrievals + 1`` retrievals and ``max_retrievals + 2`` model calls), whatever the model says:
a model that still asks to retrieve, or whose reply has no marker, gets one follow-up turn that asks
for the answer alone, and if that fails too the episode ends with no valid answer (step action
``no_answer``, counted in ``AgentStats.no_answer``; the answer given is ``Not mentioned``).

An answer is bounded: one longer than ``max_answer_chars`` (:data:`MAX_ANSWER_CHARS` by default)
is no answer but a runaway reply, and counts as a reply without a usable marker (issue 11, item 4).
Passages reach the model fenced and neutralised (see ``psirag.prompts.fence``) and the parser
takes no marker from inside a fence, so a document cannot supply the answer.

Three checks keep a small model from ending early while a retrieval is left. After a
``Not mentioned`` it is asked for a sub-question (prompts v4); after an answer that no document
and not the question contains (an answer from memory) it is asked to look the missing fact up or
to confirm the answer (prompts v6). Each costs one model call. After an answer whose reasoning
names people or works that no retrieved document is about (the bridge entity of a two-hop
question, read from a side remark), the agent by default looks those names up itself and has the
model answer again with their documents in view (``names_check="lookup"``, prompts v7; "ask"
asks the model instead, which a 1.5B model mostly declined). A step gets at most one check.

No retrieval is wasted on a repeat (issue 16, item 3): a sub-question that repeats an earlier
search of the episode, the user's question included (``psirag.agent.repeats``: equal normalised
text or content-word overlap of at least ``REPEAT_OVERLAP``), is not retrieved. The model is
asked once for a different sub-question or the answer (prompts v9); if it repeats again (or
gives no usable reply) the episode goes to the forced-answer turn, which spends no retrieval.
Each refused query counts in ``AgentStats.repeated_queries``. A sub-question about a name from
the prompt's example (``Horace Jones``) that neither the question nor any document shown
mentions is refused the same way, with its own follow-up turn, and counts in
``AgentStats.example_queries`` (prompts v10). A names lookup whose query
repeats an earlier search is skipped (the answer stands). So a step makes at most four model
calls (the reply, one check, one repeat follow-up, the forced answer) and the episode at most
``max_retrievals + 1`` retrievals.

Answers cite (issue 16, item 5): every passage shown gets an episode-wide label ``[n]``
(``psirag.agent.citations``), the model ends its answer with the labels that support it, and the
labels are taken off the answer and checked: one that names no passage shown is dropped and
counted (``AgentStats.dropped_citations``); the rest are ``AgentResult.citations``.

Retrieval is a plain callable so the agent does not depend on how the index works.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from psirag.agent.chat import (
    REPEAT_PENALTY,
    call_model,
    fit_messages,
    passage_body,
    render_passages,
)
from psirag.agent.citations import Citation, Labels, split_citations
from psirag.agent.grounding import (
    answer_in_documents,
    example_name,
    is_not_mentioned,
    names_without_documents,
)
from psirag.agent.parsing import ParsedReply, bare_answer, parse_reply
from psirag.agent.repeats import repeats
from psirag.errors import InputError
from psirag.llm.base import ChatModel, ChatResult, GenerationParams, Message
from psirag.prompts import (
    AGENT_TURN_STOPS,
    NOT_MENTIONED,
    THOUGHT_MAX_WORDS,
    agent_check_turn,
    agent_example_echo_turn,
    agent_lookup_note,
    agent_names_check_turn,
    agent_nudge_turn,
    agent_repeat_turn,
    agent_system_prompt,
    agent_user_turn,
)
from psirag.types import Passage

MAX_ANSWER_CHARS = 300
"""Longest answer accepted, in characters. The prompt asks for a name, a date, a number or a short
phrase; a longer "answer" is a model (or a server) that ran away, not an answer to show."""

RRF_K = 60
"""Rank-fusion constant of the evidence merge, the same as the retrieval fusion (SPEC 2.3)."""

StepAction = Literal["answer", "retrieve", "forced_answer", "no_answer"]
FollowUp = Literal["nudge", "answer_check", "names_check", "names_lookup"]
NamesCheck = Literal["lookup", "ask", "off"]
NAMES_CHECKS: tuple[NamesCheck, ...] = ("lookup", "ask", "off")
EvidenceMerge = Literal["rank_fusion", "best_score"]
Retriever = Callable[[str], Sequence[Passage]]
TokenEvents = Callable[[int, str], None]
"""``(call, text)``: a piece of the episode's model call number ``call`` as it is written."""


@dataclass
class Step:
    """One retrieval and the model's reply to it.

    ``query`` is what was retrieved (the user question at the first step); ``action`` is what the
    episode did after the reply: ask for another retrieval, take the answer, take an answer
    extracted by the forced-answer follow-up, or end with no valid answer (``no_answer``: even the
    forced-answer turn gave no usable answer; the episode's answer is then ``Not mentioned``).
    """

    query: str
    passages: list[Passage]
    remaining: int
    """Retrievals the model was told remain at this step (0: it was told to answer)."""
    thought: str = ""
    action: StepAction = "no_answer"
    raw: str = ""
    well_formed: bool = False
    rescued: bool = False
    """The reply had a marker only inside a line (read anyway, counted apart from well-formed)."""
    forced_raw: str | None = None
    """Reply to the forced-answer follow-up turn, when one was sent."""
    follow_up: FollowUp | None = None
    """The follow-up turn sent after this step's reply, if any: ``nudge`` (a premature
    ``Not mentioned``), ``answer_check`` (an answer in no document), ``names_check`` (reasoning
    about names no document is about; the model was asked) or ``names_lookup`` (the same, and
    the agent retrieved the names itself: the next step's query)."""
    follow_up_names: list[str] = field(default_factory=list)
    """The names a ``names_check`` or ``names_lookup`` was about."""
    follow_up_raw: str | None = None
    """Reply to that follow-up turn."""
    repeated: list[str] = field(default_factory=list)
    """Sub-questions the model asked at this step that were refused, not retrieved: repeats of
    an earlier search, or copies of the prompt's example (see the module docstring)."""
    repeat_raw: str | None = None
    """Reply to the follow-up turn sent after the first repeat."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "thought": self.thought,
            "action": self.action,
            "query": self.query,
            "passages": [p.to_dict() for p in self.passages],
            "remaining": self.remaining,
            "well_formed": self.well_formed,
            "rescued": self.rescued,
            "raw": self.raw,
            "forced_raw": self.forced_raw,
            "follow_up": self.follow_up,
            "follow_up_names": list(self.follow_up_names),
            "follow_up_raw": self.follow_up_raw,
            "repeated": list(self.repeated),
            "repeat_raw": self.repeat_raw,
        }


@dataclass
class AgentStats:
    """Counts over one episode. Format drift shows up as rescued/unparsed replies."""

    llm_calls: int = 0
    retrievals: int = 0
    well_formed: int = 0
    rescued: int = 0
    unparsed: int = 0
    forced_turns: int = 0
    nudged_turns: int = 0
    """Follow-up turns after a ``Not mentioned`` given while retrievals remained (SPEC 2.4:
    ``Not mentioned`` is the answer of an agent out of attempts, not one that gave up early)."""
    checked_turns: int = 0
    """Follow-up turns after an answer found in no document, given while retrievals remained."""
    names_checks: int = 0
    """Answers whose reasoning named people or works no retrieved document was about, while
    retrievals remained (looked up, or asked about, by ``names_check``)."""
    clipped_passages: int = 0
    """Passages shown shortened in some request so that it fit the context window."""
    overlong_answers: int = 0
    """Answers refused for being longer than ``max_answer_chars`` (read as no usable marker)."""
    no_answer: int = 0
    """Episodes that ended with no valid answer: the forced-answer turn gave none either."""
    repeated_queries: int = 0
    """Sub-questions refused for repeating an earlier search of the episode (not retrieved)."""
    example_queries: int = 0
    """Sub-questions refused for asking about the prompt example's names, which nothing in the
    episode mentions (not retrieved)."""
    cited: int = 0
    """Verified citations of the final answer."""
    dropped_citations: int = 0
    """Labels the answer cited that named no passage shown in the episode (dropped)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def record_call(self, result: ChatResult) -> None:
        """Count one model call and its tokens (0 where the server reports none)."""
        self.llm_calls += 1
        self.prompt_tokens += int(result.prompt_tokens or 0)
        self.completion_tokens += int(result.completion_tokens or 0)

    def count(self, parsed: ParsedReply) -> None:
        if parsed.well_formed:
            self.well_formed += 1
        elif parsed.rescued:
            self.rescued += 1
        else:
            self.unparsed += 1

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class AgentResult:
    """The answer, every step, and the merged evidence list (Recall@k reads its top-k)."""

    answer: str
    steps: list[Step]
    evidence: list[Passage]
    question: str = ""
    stats: AgentStats = field(default_factory=AgentStats)
    citations: list[Citation] = field(default_factory=list)
    """The passages the answer cites, verified to be ones the model was shown."""

    @property
    def valid_answer(self) -> bool:
        """False when the episode ended with no valid answer (its answer is ``Not mentioned``)."""
        return not self.steps or self.steps[-1].action != "no_answer"

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "valid_answer": self.valid_answer,
            "steps": [s.to_dict() for s in self.steps],
            "evidence": [p.to_dict() for p in self.evidence],
            "question": self.question,
            "stats": self.stats.to_dict(),
            "citations": [c.to_dict() for c in self.citations],
        }


def merge_evidence(
    step_lists: Sequence[Sequence[Passage]],
    mode: EvidenceMerge = "rank_fusion",
    rrf_k: int = RRF_K,
) -> list[Passage]:
    """Merge the steps' final lists into one ranked episode list (SPEC 2.4).

    ``rank_fusion`` (no reranker): score = sum over steps of ``1 / (rrf_k + rank in that step)``,
    rank from 1; raw retrieval scores are not comparable across queries, ranks are.
    ``best_score`` (reranker probabilities, the paper): each passage keeps its best score.
    Ties go to the passage seen at the earlier step, then at the better rank there. The returned
    passages carry the merged score.
    """
    if mode not in ("rank_fusion", "best_score"):
        raise InputError(f"evidence merge must be rank_fusion or best_score, got {mode!r}")
    merged: dict[str, list[Any]] = {}  # id -> [score, first step, rank there, passage]
    for step_no, passages in enumerate(step_lists):
        seen: set[str] = set()
        for rank, passage in enumerate(passages, start=1):
            if passage.id in seen:
                continue
            seen.add(passage.id)
            value = 1.0 / (rrf_k + rank) if mode == "rank_fusion" else float(passage.score)
            entry = merged.get(passage.id)
            if entry is None:
                merged[passage.id] = [value, step_no, rank, passage]
            elif mode == "rank_fusion":
                entry[0] += value
            else:
                entry[0] = max(entry[0], value)
    ordered = sorted(merged.values(), key=lambda e: (-e[0], e[1], e[2]))
    return [replace(entry[3], score=entry[0]) for entry in ordered]


@dataclass
class _Turn:
    """A conversation entry kept unrendered, so it can be re-rendered with shorter passages."""

    role: Literal[
        "user",
        "assistant",
        "force",
        "nudge",
        "answer_check",
        "names_check",
        "repeat",
        "example_echo",
    ]
    """``user`` brings retrieved passages (after a names lookup, ``names`` says whose)."""
    passages: list[Passage] = field(default_factory=list)
    remaining: int = 0
    text: str = ""
    names: list[str] = field(default_factory=list)
    labels: list[int] | None = None
    """Citation labels of ``passages`` (episode-wide)."""


def lookup_query(names: Sequence[str]) -> str:
    """The retrieval of a names lookup: the names alone, which BM25 matches exactly (on the
    first 100 2Wiki questions, as good as the question with the names appended, and better at
    Recall@2)."""
    return "; ".join(names)


class RetrieveAndAnswer:
    """The R&A agent over any chat model and any retriever.

    ``max_retrievals`` counts the retrievals after the first one (SPEC 2.4; 2Wiki and HotpotQA: 1,
    MuSiQue: 3). ``max_tokens`` caps each reply; ``repeat_penalty`` defaults to the paper's 1.3.
    ``check_answers`` sends the follow-up turn for an answer found in no document while
    retrievals remain. ``names_check`` handles an answer whose reasoning names people or works
    that no retrieved document is about: ``lookup`` retrieves them (using a retrieval) and asks
    for the answer again, ``ask`` asks the model whether it needs them, ``off`` takes the answer.
    ``check_answers=False, names_check="off"`` is the paper's loop plus the ``Not mentioned``
    follow-up. Each episode step gets at most one check. ``max_answer_chars`` bounds an answer
    (longer ones are refused, see the module docstring).
    """

    def __init__(
        self,
        llm: ChatModel,
        retrieve: Retriever,
        *,
        max_retrievals: int = 1,
        max_tokens: int = 256,
        thought_words: int = THOUGHT_MAX_WORDS,
        repeat_penalty: float = REPEAT_PENALTY,
        temperature: float = 0.0,
        evidence_merge: EvidenceMerge = "rank_fusion",
        check_answers: bool = True,
        names_check: NamesCheck = "lookup",
        max_answer_chars: int = MAX_ANSWER_CHARS,
        stage: str = "agent",
    ) -> None:
        if max_retrievals < 0:
            raise InputError(f"max_retrievals must be 0 or more, got {max_retrievals}")
        if max_tokens < 1:
            raise InputError(f"max_tokens must be positive, got {max_tokens}")
        if thought_words < 1:
            raise InputError(f"thought_words must be positive, got {thought_words}")
        if max_answer_chars < 1:
            raise InputError(f"max_answer_chars must be positive, got {max_answer_chars}")
        self.max_answer_chars = max_answer_chars
        if evidence_merge not in ("rank_fusion", "best_score"):
            raise InputError(
                f"evidence_merge must be rank_fusion or best_score: {evidence_merge!r}"
            )
        self.llm = llm
        self.retrieve = retrieve
        self.max_retrievals = max_retrievals
        self.thought_words = thought_words
        self.evidence_merge: EvidenceMerge = evidence_merge
        self.check_answers = check_answers
        if names_check not in NAMES_CHECKS:
            raise InputError(f"names_check must be one of {NAMES_CHECKS}, got {names_check!r}")
        self.names_check: NamesCheck = names_check
        self.params = GenerationParams(
            max_tokens=max_tokens,
            temperature=temperature,
            repeat_penalty=repeat_penalty,
            stop=AGENT_TURN_STOPS,
        )
        self.stage = stage
        self._episode = threading.local()  # this thread's episode's token callback

    # -- conversation ---------------------------------------------------------------------------

    def _render(self, question: str, turns: Sequence[_Turn], limit: int | None) -> list[Message]:
        system = agent_system_prompt(self.max_retrievals, thought_words=self.thought_words)
        messages: list[Message] = [{"role": "system", "content": system}]
        for turn in turns:
            if turn.role == "assistant":
                messages.append({"role": "assistant", "content": turn.text})
                continue
            if turn.role == "nudge":
                messages.append({"role": "user", "content": agent_nudge_turn(turn.remaining)})
                continue
            if turn.role == "names_check":
                content = agent_names_check_turn(turn.names, turn.remaining)
                messages.append({"role": "user", "content": content})
                continue
            if turn.role == "repeat":
                content = agent_repeat_turn(turn.text, turn.remaining)
                messages.append({"role": "user", "content": content})
                continue
            if turn.role == "example_echo":
                content = agent_example_echo_turn(turn.text, turn.remaining)
                messages.append({"role": "user", "content": content})
                continue
            if turn.role == "answer_check":
                content = agent_check_turn(turn.text, turn.remaining)
                messages.append({"role": "user", "content": content})
                continue
            # A forced follow-up brings no new documents; it only demands the answer.
            forced = turn.role == "force" or turn.remaining == 0
            content = agent_user_turn(
                question, render_passages(turn.passages, limit, turn.labels), turn.remaining, forced
            )
            if turn.names:
                content = f"{agent_lookup_note(turn.names)}\n\n{content}"
            messages.append({"role": "user", "content": content})
        return messages

    def _call(self, question: str, turns: Sequence[_Turn], stats: AgentStats) -> ChatResult:
        longest = max(
            (len(passage_body(p)) for t in turns for p in t.passages),
            default=0,
        )
        messages, limit = fit_messages(
            lambda cap: self._render(question, turns, cap),
            longest,
            self.llm,
            self.params.max_tokens,
        )
        if limit is not None:
            stats.clipped_passages = max(
                stats.clipped_passages,
                sum(1 for t in turns for p in t.passages if len(passage_body(p)) > limit),
            )
        sink = getattr(self._episode, "on_token", None)
        on_token = None
        if sink is not None:
            call = stats.llm_calls

            def on_token(text: str) -> None:
                sink(call, text)

        result = call_model(self.llm, messages, self.params, self.stage, on_token)
        stats.record_call(result)
        return result

    # -- episode --------------------------------------------------------------------------------

    def run(
        self,
        question: str,
        on_step: Callable[[Step], None] | None = None,
        on_retrieval: Callable[[Step], None] | None = None,
        on_token: TokenEvents | None = None,
    ) -> AgentResult:
        """Answer ``question``.

        ``on_retrieval`` sees each step when its passages arrive (before the model reads them),
        ``on_step`` when the model's reply to it has been read: a slow model is then visibly busy.
        ``on_token(call, text)`` sees each model reply as it is written (``call`` counts the
        episode's model calls from 0); the reply is parsed only once whole, so the result is
        the same with or without it.
        """
        self._episode.on_token = on_token
        try:
            return self._run(question, on_step, on_retrieval)
        finally:
            self._episode.on_token = None

    def _run(
        self,
        question: str,
        on_step: Callable[[Step], None] | None,
        on_retrieval: Callable[[Step], None] | None,
    ) -> AgentResult:
        question = question.strip()
        if not question:
            raise InputError("the question is empty")
        stats = AgentStats()
        steps: list[Step] = []
        turns: list[_Turn] = []
        answer = NOT_MENTIONED
        cited: tuple[int, ...] = ()
        labels = Labels()
        query = question
        looked_up: list[str] = []  # the names this step's query looks up, if it does

        for step_no in range(self.max_retrievals + 1):
            remaining = self.max_retrievals - step_no
            passages = list(self.retrieve(query))
            stats.retrievals += 1
            step = Step(query=query, passages=passages, remaining=remaining)
            steps.append(step)
            turns.append(
                _Turn(
                    "user",
                    passages=passages,
                    remaining=remaining,
                    names=looked_up,
                    labels=labels.assign(passages),
                )
            )
            looked_up = []
            if on_retrieval is not None:
                on_retrieval(step)

            reply = self._call(question, turns, stats)
            parsed = self._parse(reply.text, stats)
            step.raw = reply.text
            step.thought = parsed.thought
            step.well_formed = parsed.well_formed
            step.rescued = parsed.rescued
            turns.append(_Turn("assistant", text=reply.text.strip()))

            if parsed.action == "answer" and remaining > 0:
                followed, looked_up = self._check(question, turns, steps, parsed, stats)
                if followed is not None:
                    parsed = followed
            if parsed.action == "retrieve" and remaining > 0:
                parsed = self._avoid_repeat(question, turns, steps, parsed, stats)
            if parsed.action == "answer":
                step.action = "answer"
                answer, cited = parsed.argument, parsed.citations
            elif parsed.action == "retrieve" and remaining > 0:
                step.action = "retrieve"
                query = parsed.argument
            else:
                # Out of retrievals yet asking for one, or no usable marker: ask for the answer.
                forced = self._force_answer(question, turns, stats)
                step.forced_raw = forced[1]
                if forced[0] is not None:
                    step.action = "forced_answer"
                    answer, cited = forced[0], forced[2]
                else:
                    step.action = "no_answer"
                    stats.no_answer += 1
            if on_step is not None:
                on_step(step)
            if step.action != "retrieve":
                break

        citations: list[Citation] = []
        if not is_not_mentioned(answer):
            citations, dropped = labels.resolve(cited)
            stats.cited += len(citations)
            stats.dropped_citations += dropped
        evidence = merge_evidence([s.passages for s in steps], self.evidence_merge)
        return AgentResult(answer, steps, evidence, question, stats, citations)

    def _avoid_repeat(
        self,
        question: str,
        turns: list[_Turn],
        steps: list[Step],
        parsed: ParsedReply,
        stats: AgentStats,
    ) -> ParsedReply:
        """A sub-question that repeats an earlier search, or copies the example, is not
        retrieved: the model is asked once for another one or the answer; a second refusal (or
        no usable reply) goes to the forced answer (returned as a reply without a marker). See
        the module docstring."""
        searched = [question, *(s.query for s in steps)]
        seen = [p for s in steps for p in s.passages]

        def refused(query: str) -> _Turn | None:
            """The follow-up turn a wasted sub-question gets, counted; None for a new search."""
            if repeats(query, searched) is not None:
                stats.repeated_queries += 1
                steps[-1].repeated.append(query)
                return _Turn("repeat", remaining=steps[-1].remaining, text=query)
            name = example_name(query, question, seen)
            if name is not None:
                stats.example_queries += 1
                steps[-1].repeated.append(query)
                return _Turn("example_echo", remaining=steps[-1].remaining, text=name)
            return None

        turn = refused(parsed.argument)
        if turn is None:
            return parsed
        step = steps[-1]
        turns.append(turn)
        reply = self._call(question, turns, stats)
        turns.append(_Turn("assistant", text=reply.text.strip()))
        step.repeat_raw = reply.text
        again = self._parse(reply.text, stats)
        if again.action == "answer" and again.argument:
            return again
        if again.action == "retrieve" and again.argument and refused(again.argument) is None:
            return again
        return replace(again, action=None, argument="")

    def _check(
        self,
        question: str,
        turns: list[_Turn],
        steps: list[Step],
        parsed: ParsedReply,
        stats: AgentStats,
    ) -> tuple[ParsedReply | None, list[str]]:
        """The one check an answer given while retrievals remain gets (module docstring): the
        reply that replaces the answer, if any, and the names a lookup is about to retrieve."""
        step = steps[-1]
        seen = [p for s in steps for p in s.passages]
        if is_not_mentioned(parsed.argument):
            # Giving up with retrievals left: ask once for a sub-question instead.
            stats.nudged_turns += 1
            nudge = _Turn("nudge", remaining=step.remaining)
            return self._follow_up(question, turns, nudge, stats, step), []
        if self.check_answers and not answer_in_documents(parsed.argument, question, seen):
            # An answer from memory: look it up, or confirm it.
            stats.checked_turns += 1
            check = _Turn("answer_check", remaining=step.remaining, text=parsed.argument)
            return self._follow_up(question, turns, check, stats, step), []
        if self.names_check == "off":
            return None, []
        names = names_without_documents(f"{parsed.thought}\n{parsed.argument}", question, seen)
        if not names:
            return None, []
        # The reasoning leans on someone or something no document is about.
        if self.names_check == "lookup" and repeats(
            lookup_query(names), [question, *(s.query for s in steps)]
        ):
            return None, []  # those names were searched already: the answer stands
        stats.names_checks += 1
        if self.names_check == "ask":
            ask = _Turn("names_check", remaining=step.remaining, names=names)
            return self._follow_up(question, turns, ask, stats, step), []
        step.follow_up, step.follow_up_names = "names_lookup", names
        return replace(parsed, action="retrieve", argument=lookup_query(names)), names

    def _follow_up(
        self, question: str, turns: list[_Turn], turn: _Turn, stats: AgentStats, step: Step
    ) -> ParsedReply | None:
        """One follow-up turn while retrievals remain (a nudge after a premature
        ``Not mentioned``, the check of an answer no document contains, or the question about
        names no document is about), recorded on ``step``. Its reply replaces the first one when
        it is a retrieval or a real answer; otherwise the first reply stands."""
        turns.append(turn)
        reply = self._call(question, turns, stats)
        turns.append(_Turn("assistant", text=reply.text.strip()))
        step.follow_up = cast(FollowUp, turn.role)  # a nudge or a check: the follow-up kinds
        step.follow_up_names = list(turn.names)
        step.follow_up_raw = reply.text
        parsed = self._parse(reply.text, stats)
        if parsed.action == "retrieve" and parsed.argument:
            return parsed
        if parsed.action == "answer" and parsed.argument and not is_not_mentioned(parsed.argument):
            return parsed
        return None

    def _force_answer(
        self, question: str, turns: list[_Turn], stats: AgentStats
    ) -> tuple[str | None, str, tuple[int, ...]]:
        """One follow-up turn asking only for the answer; its reply is never a retrieval."""
        turns.append(_Turn("force"))
        stats.forced_turns += 1
        reply = self._call(question, turns, stats)
        turns.append(_Turn("assistant", text=reply.text.strip()))
        refused = stats.overlong_answers
        parsed = self._parse(reply.text, stats)
        if parsed.action == "answer":
            return parsed.argument, reply.text, parsed.citations
        if parsed.action is None and stats.overlong_answers == refused:
            bare = bare_answer(reply.text)
            labels: list[int] = []
            if bare is not None:
                bare, labels = split_citations(bare)
                bare = bare or None
            if bare is not None and len(bare) > self.max_answer_chars:
                stats.overlong_answers += 1
                bare = None
            return bare, reply.text, tuple(labels)
        return None, reply.text, ()

    def _parse(self, reply: str, stats: AgentStats) -> ParsedReply:
        """Parse and count a reply; the citation labels are taken off an answer, and an answer
        over ``max_answer_chars`` is read as no marker."""
        parsed = parse_reply(reply)
        if parsed.action == "answer":
            text, labels = split_citations(parsed.argument)
            if labels:
                parsed = replace(parsed, argument=text, citations=tuple(labels))
            if labels and (not text or (text.startswith("<") and text.endswith(">"))):
                # Labels alone, or the template "<answer> [n]": no answer.
                parsed = replace(parsed, action=None, argument="", well_formed=False, rescued=False)
        if parsed.action == "answer" and len(parsed.argument) > self.max_answer_chars:
            stats.overlong_answers += 1
            parsed = replace(parsed, action=None, argument="", well_formed=False, rescued=False)
        stats.count(parsed)
        return parsed


__all__ = [
    "MAX_ANSWER_CHARS",
    "NAMES_CHECKS",
    "NOT_MENTIONED",
    "AgentResult",
    "AgentStats",
    "Citation",
    "EvidenceMerge",
    "FollowUp",
    "NamesCheck",
    "RetrieveAndAnswer",
    "Retriever",
    "Step",
    "TokenEvents",
    "answer_in_documents",
    "is_not_mentioned",
    "lookup_query",
    "merge_evidence",
]
