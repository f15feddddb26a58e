"""Reading an R&A agent reply: a thought, then ``Answer: <answer>`` or ``Retrieve: <query>``.

Small local models decorate, reorder and forget the format, so the parser is tolerant, but it says
how it read each reply: ``well_formed`` (a marker at the start of a line, the format the prompt asks
for), ``rescued`` (a marker found only inside a line) or neither (no usable marker: the loop then
forces an answer). The counts of the three are reported separately so format drift stays visible.

Only the model's own reply is parsed here. Retrieved passages never pass through this module, so a
document that contains ``Answer: X`` cannot become the agent's answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Action = Literal["answer", "retrieve"]

# Markdown and list decoration that may wrap a marker: "**Answer:**", "### Retrieve:", "- Answer:".
_DECOR = r"[\s*_#>`~\-]*"
_WORD = r"(?P<word>(?:final\s+)?answer|retrieve)"
# A marker at the start of a line; the colon may sit inside or outside the emphasis.
_LINE_MARKER = re.compile(rf"^{_DECOR}{_WORD}{_DECOR}:[\s*_`]*(?P<rest>.*)$", re.IGNORECASE)
# A marker anywhere in a line (rescue only): a word boundary before it.
_INLINE_MARKER = re.compile(rf"\b{_WORD}[*_`]*:[*_`]*[ \t]*(?P<rest>[^\n]*)", re.IGNORECASE)
_THOUGHT_PREFIX = re.compile(rf"^{_DECOR}thought{_DECOR}:[*_`]*\s*", re.IGNORECASE)
# Reasoning models wrap hidden reasoning in <think> tags; a cut-off block has no closing tag.
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.IGNORECASE | re.DOTALL)
_EDGE_DECOR = "*_`\"' \t"


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """What one reply says. ``action is None`` means no usable marker was found."""

    thought: str
    action: Action | None
    argument: str
    well_formed: bool
    rescued: bool

    @property
    def kind(self) -> Literal["well_formed", "rescued", "unparsed"]:
        if self.well_formed:
            return "well_formed"
        return "rescued" if self.rescued else "unparsed"


def strip_thinking(text: str) -> str:
    """Remove ``<think>`` blocks (a reasoning model's hidden reasoning, closed or cut off)."""
    return _THINK.sub("", text or "")


def _clean_argument(text: str) -> str:
    """Strip emphasis and quotes around an answer or query, keep its inner punctuation."""
    return text.strip().strip(_EDGE_DECOR).strip()


def _clean_thought(text: str) -> str:
    return _THOUGHT_PREFIX.sub("", text.strip(), count=1).strip()


def _action(word: str) -> Action:
    return "retrieve" if word.lower() == "retrieve" else "answer"


def parse_reply(reply: str) -> ParsedReply:
    """Parse a reply; the last usable marker wins (a model that reconsiders ends with its choice).

    A marker line with nothing after it takes its argument from the next non-empty line, unless
    that line is itself a marker. A marker with no argument at all is not usable.
    """
    text = strip_thinking(reply).replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")

    for i in range(len(lines) - 1, -1, -1):
        match = _LINE_MARKER.match(lines[i])
        if not match:
            continue
        argument = _clean_argument(match["rest"])
        if not argument:
            following = next((line for line in lines[i + 1 :] if line.strip()), "")
            if following and not _LINE_MARKER.match(following):
                argument = _clean_argument(following)
        if argument:
            thought = _clean_thought("\n".join(lines[:i]))
            return ParsedReply(thought, _action(match["word"]), argument, True, False)

    inline = [m for m in _INLINE_MARKER.finditer(text) if _clean_argument(m["rest"])]
    if inline:
        last = inline[-1]
        thought = _clean_thought(text[: last.start()])
        return ParsedReply(
            thought, _action(last["word"]), _clean_argument(last["rest"]), False, True
        )

    return ParsedReply(_clean_thought(text), None, "", False, False)


def bare_answer(reply: str) -> str | None:
    """Read a reply to "give only the answer" that has no marker: one short line is the answer.

    This is the last rescue of the forced-answer turn, where the model was asked for the answer
    alone; anything longer than a line is reasoning, not an answer, and gives ``None``.
    """
    text = _clean_thought(strip_thinking(reply))
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    answer = _clean_argument(lines[0])
    return answer if answer and len(answer.split()) <= _BARE_ANSWER_MAX_WORDS else None


_BARE_ANSWER_MAX_WORDS = 20
"""Longer single lines are sentences of reasoning, not the word or phrase the prompt asks for."""


__all__ = ["Action", "ParsedReply", "bare_answer", "parse_reply", "strip_thinking"]
