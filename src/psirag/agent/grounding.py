"""Cheap tests of whether an agent's answer rests on the documents it was shown.

A small model often answers from memory, or names the bridge entity of a two-hop question
("the director of X is Y") and then answers from a document about something else. Both are
visible without another model: the answer is written in no document, or the reasoning names a
person or work that no retrieved document is about. The loop uses these tests to decide when to
ask the model once more whether it needs a retrieval (SPEC 2.4's loop, prompts v6 and v7).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from psirag.agent.chat import passage_body
from psirag.prompts import EXAMPLE_NAMES, NOT_MENTIONED
from psirag.types import Passage

_NON_WORD = re.compile(r"[\W_]+")
_YES_NO = frozenset({"yes", "no"})

# Lowercase words that may sit inside a name ("Ermengarde of Tours", "Ludwig van Beethoven").
_NAME_JOINERS = frozenset(
    "of de da del della di do dos du la le les von van der den ten ter bin ibn al y".split()  # noqa: SIM905
)
# Capitalised words that start sentences or point at the documents rather than name anything.
_NOT_NAMES = frozenset(
    """a an the and but or so then thus therefore however since because according in on at by
    for from to with as both none neither either each all this that these those there here it
    its he she they his her their him them i we you my our your thought answer retrieve
    retrieval document documents doc question yes no not mentioned also if when where who what
    which while after before""".split()  # noqa: SIM905
)
_TOKEN = re.compile(r"[^\s\"“”‘’«»()\[\]{}<>]+|[\"“”«»()\[\]{}<>]")
_POSSESSIVE = re.compile(r"['’]s\W*$")
_INITIAL = re.compile(r"^[A-Z]\.$")
_TITLE_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")


def plain_words(text: str) -> str:
    """Lowercase words separated by single spaces, padded, so that ``in`` matches whole words."""
    return f" {_NON_WORD.sub(' ', text.lower()).strip()} "


def written_in(text: str, question: str, passages: Sequence[Passage]) -> bool:
    """Whether ``text`` is written somewhere the model read it: in the question or in a passage
    (title included), as whole words, ignoring case and punctuation."""
    words = plain_words(text)
    if words in plain_words(question):
        return True
    return any(words in plain_words(passage_body(p)) for p in passages)


def answer_in_documents(answer: str, question: str, passages: Sequence[Passage]) -> bool:
    """Whether ``answer`` is written somewhere the model read it (:func:`written_in`: the two
    candidates of a comparison are in the question). Yes/no answers and empty answers count as
    found: there is nothing to look up."""
    words = plain_words(answer).strip()
    if not words or words in _YES_NO:
        return True
    return written_in(answer, question, passages)


def example_name(
    query: str,
    question: str,
    passages: Sequence[Passage],
    names: Sequence[str] = EXAMPLE_NAMES,
) -> str | None:
    """A name from the prompt's worked example that ``query`` asks about while neither the
    question nor any passage shown mentions it (:func:`written_in`): the model copied the
    example, and searching it cannot help this question. None when the query is the episode's."""
    asked = plain_words(query)
    return next(
        (
            name
            for name in names
            if plain_words(name) in asked and not written_in(name, question, passages)
        ),
        None,
    )


def is_not_mentioned(answer: str) -> bool:
    """Whether an answer is the agent's give-up answer (case, punctuation and quotes aside)."""
    return " ".join(answer.strip(" \t\n.\"'*`").lower().split()) == NOT_MENTIONED.lower()


def _is_capitalised(word: str) -> bool:
    return word[:1].isupper() and word.strip(".,;:!?'’").lower() not in _NOT_NAMES


def names_in(text: str) -> list[str]:
    """Multi-word proper names in ``text``, in order of first appearance, without repeats.

    A name is a run of at least two capitalised words, possibly joined by lowercase particles
    ("of", "van", ...) and initials ("Albert S. Rogell"); punctuation other than an initial's
    full stop ends it. Sentence openers and words about the documents ("The", "Document") do not
    start or count towards a name. Deliberately simple: a missed name costs nothing, a spurious
    one costs one extra model turn."""
    found: dict[str, None] = {}
    run: list[str] = []
    capitals = 0

    def close() -> None:
        nonlocal run, capitals
        while run and not _is_capitalised(run[-1]):
            run.pop()  # a trailing joiner ("Tours of") is not part of the name
        if capitals >= 2 and run:
            found.setdefault(" ".join(run), None)
        run, capitals = [], 0

    for token in _TOKEN.findall(text):
        word = _POSSESSIVE.sub("", token)
        word = word.rstrip(",;:!?'’")
        ends_phrase = word != token
        if word.endswith(".") and not _INITIAL.match(word):
            word, ends_phrase = word.rstrip("."), True
        if word and _is_capitalised(word):
            run.append(word)
            capitals += 1
        elif run and word in _NAME_JOINERS:
            run.append(word)
        else:
            close()
            continue
        if ends_phrase:
            close()
    close()
    return list(found)


def _title_core(title: str) -> str:
    """A passage title without its qualifier: ``Billy Elliot (film)`` -> ``Billy Elliot``."""
    return plain_words(_TITLE_QUALIFIER.sub("", title))


def names_without_documents(
    thought: str, question: str, passages: Sequence[Passage], limit: int = 3
) -> list[str]:
    """Names the model's reasoning uses that neither the question holds nor any passage is
    about (by its title). With documents named after their subjects (an encyclopedia, notes
    titled by person) such a name is a fact the model took from a side remark or from memory:
    the one its answer most likely depends on. At most ``limit`` names, in the reasoning's order.

    Titles only say what a document is about when they name subjects; file names do not. So
    nothing is returned unless some passage's title appears in the question or the reasoning
    (the question's own subject, found by the first retrieval, usually is)."""
    asked = plain_words(question)
    titles = [t for t in (_title_core(p.source.title) for p in passages) if t.strip()]
    reasoning = plain_words(thought)
    if not any(title in asked or title in reasoning for title in titles):
        return []
    missing: list[str] = []
    for name in names_in(thought):
        words = plain_words(name)
        if words in asked:
            continue
        if any(words in title or title in words for title in titles):
            continue
        missing.append(name)
        if len(missing) == limit:
            break
    return missing


__all__ = [
    "answer_in_documents",
    "example_name",
    "is_not_mentioned",
    "names_in",
    "names_without_documents",
    "plain_words",
    "written_in",
]
