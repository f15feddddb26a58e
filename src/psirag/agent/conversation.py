"""A multi-turn conversation over the agent (``psirag chat``; issue 16, item 6).

Retrieval sees one question at a time, so a follow-up such as "When was he born?" would search
for nobody. Before the agent runs, each question after the first is rewritten by one LLM call
(``prompts.chat_rewrite_prompt``) into a question that stands alone, from the earlier turns'
standalone questions and answers; the agent then answers the rewritten question. A rewrite that
comes back empty, without text, or far longer than the question (a model that answered instead
of rewriting) is not used: the question goes to the agent as it was typed, and that is counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psirag.agent.chat import call_model
from psirag.agent.loop import AgentResult, RetrieveAndAnswer, Step
from psirag.agent.parsing import strip_fenced, strip_thinking
from psirag.errors import InputError
from psirag.llm.base import GenerationParams
from psirag.prompts import chat_rewrite_prompt

HISTORY_TURNS = 6
"""Earlier turns shown to the rewrite (older ones are left out, to keep the request short)."""

REWRITE_TOKENS = 96
_QUESTION = re.compile(
    r"^[\s*_#>`-]*(?:standalone\s+|rewritten\s+)?question[*_`]*\s*:[\s*_`]*(.+)$", re.I
)


@dataclass
class ChatTurn:
    """One exchange: what was typed, the question the agent answered, and its result."""

    asked: str
    question: str
    result: AgentResult
    rewritten: bool
    rewrite_raw: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "question": self.question,
            "rewritten": self.rewritten,
            "rewrite_raw": self.rewrite_raw,
            "answer": self.result.answer,
            "citations": [c.to_dict() for c in self.result.citations],
            "result": self.result.to_dict(),
        }


def read_rewrite(reply: str, follow_up: str) -> str | None:
    """The standalone question in a rewrite reply, or None when the reply gives none usable."""
    text = strip_fenced(strip_thinking(reply)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = None
    for line in lines:
        match = _QUESTION.match(line)
        if match:
            found = match.group(1)
    if found is None and len(lines) == 1:
        found = lines[0]
    if found is None:
        return None
    found = found.strip().strip("\"'\u201c\u201d").strip()
    if not found or len(found) > 3 * len(follow_up) + 200:
        return None
    return found


@dataclass
class Conversation:
    """Turns of one chat. ``make_agent(question)`` builds the agent for a standalone question
    (``--max-retrievals auto`` sizes its budget per question); the rewrite uses ``llm``."""

    llm: Any
    make_agent: Callable[[str], RetrieveAndAnswer]
    stage: str = "chat_rewrite"
    turns: list[ChatTurn] = field(default_factory=list)
    unusable_rewrites: int = 0

    def standalone(self, follow_up: str) -> tuple[str, str | None]:
        """The follow-up as a question that stands alone, and the raw rewrite reply (None for
        the first question, which is not rewritten)."""
        if not self.turns:
            return follow_up, None
        history = [(t.question, t.result.answer) for t in self.turns[-HISTORY_TURNS:]]
        params = GenerationParams(max_tokens=REWRITE_TOKENS, temperature=0.0)
        reply = call_model(self.llm, chat_rewrite_prompt(history, follow_up), params, self.stage)
        rewritten = read_rewrite(reply.text, follow_up)
        if rewritten is None:
            self.unusable_rewrites += 1
            return follow_up, reply.text
        return rewritten, reply.text

    def ask(
        self,
        asked: str,
        on_step: Callable[[Step], None] | None = None,
        on_retrieval: Callable[[Step], None] | None = None,
    ) -> ChatTurn:
        asked = asked.strip()
        if not asked:
            raise InputError("the question is empty")
        question, raw = self.standalone(asked)
        result = self.make_agent(question).run(question, on_step=on_step, on_retrieval=on_retrieval)
        turn = ChatTurn(asked, question, result, rewritten=question != asked, rewrite_raw=raw)
        self.turns.append(turn)
        return turn


__all__ = ["HISTORY_TURNS", "ChatTurn", "Conversation", "read_rewrite"]
