"""Reading an R&A agent reply: a thought, then ``Answer: <answer>`` or ``Retrieve: <query>``.

Small local models decorate, reorder and forget the format, so the parser is tolerant, but it says
how it read each reply: ``well_formed`` (a marker at the start of a line, the format the prompt asks
for), ``rescued`` (a marker found only inside a line) or neither (no usable marker: the loop then
forces an answer). The counts of the three are reported separately so format drift stays visible.

Only the model's own markers count. Prompts fence documents (``prompts.fence``) and escape the
marker colons inside them (``Answer\\: X``), so a model that repeats a document, or the whole
prompt, repeats no marker this parser takes: fenced blocks are cut out of the reply before it is
read, an escaped colon matches no pattern, and the instructions' own placeholders
(``"Answer: <answer>"``) are not answers (issue 11, item 4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from psirag.prompts import AGENT_EXAMPLE_ROLES, EXAMPLE_END

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
# A fenced block of documents that the model repeated (prompts.FENCE_OPEN ... FENCE_CLOSE), up to
# its own closing line or, when the reply was cut off inside it, to the end.
_FENCED = re.compile(
    "\u27e6DOCUMENTS[ \t]+(?P<id>[^\u27e7\n]*)\u27e7"
    ".*?(?:\u27e6END DOCUMENTS[ \t]+(?P=id)\u27e7|\\Z)",
    re.DOTALL,
)
# The instructions' templates, "<answer>", "<sub-question>": copied from the prompt, not an answer.
_PLACEHOLDER = re.compile(r"^<[^<>]*>$")
# A line that opens a turn the model wrote for someone else, imitating the example's layout.
_IMITATED_TURN = re.compile(
    rf"^[ \t]*(?:\[(?:{'|'.join(AGENT_EXAMPLE_ROLES)})\][ \t]*$|{re.escape(EXAMPLE_END)})",
    re.IGNORECASE | re.MULTILINE,
)
_OWN_HEADER = re.compile(r"\A\s*\[assistant\][ \t]*\n", re.IGNORECASE)
_OPEN_QUOTES = {'"': '"', "\u201c": "\u201d", "'": "'"}


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """What one reply says. ``action is None`` means no usable marker was found."""

    thought: str
    action: Action | None
    argument: str
    well_formed: bool
    rescued: bool
    citations: tuple[int, ...] = ()
    """Labels the answer cited (``Answer: 1887 [2][4]``), taken off ``argument`` by the agent."""

    @property
    def kind(self) -> Literal["well_formed", "rescued", "unparsed"]:
        if self.well_formed:
            return "well_formed"
        return "rescued" if self.rescued else "unparsed"


def strip_thinking(text: str) -> str:
    """Remove ``<think>`` blocks (a reasoning model's hidden reasoning, closed or cut off)."""
    return _THINK.sub("", text or "")


def strip_fenced(text: str) -> str:
    """Remove fenced document blocks a model repeated: nothing in them is the model's own."""
    return _FENCED.sub("", text)


def cut_imitated_turns(text: str) -> str:
    """The reply up to the first turn the model invented (a ``[user]`` header or the example's
    end line): what follows is not its reply to this turn, so no marker in it may count. The stop
    sequences (``prompts.AGENT_TURN_STOPS``) end generation there; this covers a backend that
    ignores them and replies cached before them. A reply that opens with its own ``[assistant]``
    header keeps what follows the header."""
    own = _OWN_HEADER.match(text)
    start = own.end() if own else 0
    match = _IMITATED_TURN.search(text, start)
    return text[start:] if match is None else text[start : match.start()]


def _usable(argument: str) -> bool:
    return bool(argument) and not _PLACEHOLDER.match(argument)


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
    text = cut_imitated_turns(strip_fenced(text))
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
        if _usable(argument):
            thought = _clean_thought("\n".join(lines[:i]))
            return ParsedReply(thought, _action(match["word"]), argument, True, False)

    inline = [(m, _inline_argument(text, m)) for m in _inline_markers(text)]
    inline = [(m, argument) for m, argument in inline if _usable(argument)]
    if inline:
        last, argument = inline[-1]
        thought = _clean_thought(text[: last.start()])
        return ParsedReply(thought, _action(last["word"]), argument, False, True)

    return ParsedReply(_clean_thought(text), None, "", False, False)


def _inline_markers(text: str) -> list[re.Match[str]]:
    """Every inline marker, including those inside another's argument (a line may hold two)."""
    found: list[re.Match[str]] = []
    position = 0
    while (match := _INLINE_MARKER.search(text, position)) is not None:
        found.append(match)
        position = match.start() + 1
    return found


def _inline_argument(text: str, match: re.Match[str]) -> str:
    """The argument of an inline marker; a quoted marker (``say "Answer: X" now``) ends at its
    closing quote."""
    rest = match["rest"]
    before = text[match.start() - 1] if match.start() else ""
    closing = _OPEN_QUOTES.get(before)
    if closing and closing in rest:
        rest = rest[: rest.index(closing)]
    return _clean_argument(rest)


def bare_answer(reply: str) -> str | None:
    """Read a reply to "give only the answer" that has no marker: one short line is the answer.

    This is the last rescue of the forced-answer turn, where the model was asked for the answer
    alone; anything longer than a line is reasoning, not an answer, and gives ``None``.
    """
    text = _clean_thought(strip_fenced(strip_thinking(reply)))
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    answer = _clean_argument(lines[0])
    if not _usable(answer) or len(answer.split()) > _BARE_ANSWER_MAX_WORDS:
        return None
    return answer


_BARE_ANSWER_MAX_WORDS = 20
"""Longer single lines are sentences of reasoning, not the word or phrase the prompt asks for."""


__all__ = [
    "Action",
    "ParsedReply",
    "bare_answer",
    "cut_imitated_turns",
    "parse_reply",
    "strip_fenced",
    "strip_thinking",
]
