"""A tiny question-answering data set on disk (2Wiki layout: corpus.json, questions.json) for the
evaluation tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CORPUS = [
    ("Mount Etna", "Mount Etna is an active volcano on the east coast of Sicily."),
    ("Vesuvius", "Vesuvius is the volcano that destroyed Pompeii with ash in the year 79."),
    ("Arsenal F.C.", "Arsenal is a football club based in north London."),
    ("Liverpool F.C.", "Liverpool won the football league title with a record points total."),
    ("Sourdough", "Sourdough bread uses a starter of wild yeast instead of baker's yeast."),
    ("Croissant", "Croissants are baked from laminated dough with butter layers."),
    (
        "Calder Group",
        "The Calder Group is a hospitality company founded in 1952. Its head office is in Lisbon.",
    ),
    (
        "Blue Harbour Hotel",
        "The Blue Harbour Hotel is a seaside hotel in Portmere. Since 1987 it has been owned by "
        "the Calder Group.",
    ),
    ("Portmere", "Portmere is a fishing town on the west coast with a seaside promenade."),
    ("Lisbon", "Lisbon is the capital and largest city of Portugal."),
]


Q_VOLCANO = "Which volcano destroyed Pompeii?"


Q_OFFICE = "Where is the head office of the company that owns the Blue Harbour Hotel?"


Q_CLUB = "Which football club is based in north London?"


QUESTIONS = [
    {
        "id": "q0",
        "question": Q_VOLCANO,
        "answer": "Vesuvius",
        "answers": ["Vesuvius"],
        "supporting_passage_ids": [1],
    },
    {
        "id": "q1",
        "question": Q_OFFICE,
        "answer": "Lisbon",
        "answers": ["Lisbon"],
        "answer_aliases": ["Lisboa"],
        "supporting_passage_ids": [7, 6],
    },
    {
        "id": "q2",
        "question": Q_CLUB,
        "answer": "Arsenal F.C.",
        "answers": ["Arsenal F.C.", "Arsenal"],
        "supporting_passage_ids": [2],
    },
]


def write_dataset(
    folder: Path,
    corpus: Sequence[tuple[str, str]] = CORPUS,
    questions: Sequence[dict[str, Any]] = QUESTIONS,
) -> Path:
    """``corpus.json`` ((title, text) pairs, numbered in order) and ``questions.json`` in
    ``folder``, made if needed."""
    folder.mkdir(parents=True, exist_ok=True)
    records = [{"idx": i, "title": t, "text": x} for i, (t, x) in enumerate(corpus)]
    (folder / "corpus.json").write_text(json.dumps(records), encoding="utf-8")
    (folder / "questions.json").write_text(json.dumps(list(questions)), encoding="utf-8")
    return folder
