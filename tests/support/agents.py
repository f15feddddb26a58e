"""The stand-ins of the agent tests: a lexical index over a few invented documents (the agent
itself is never faked), the questions asked of it, the parser of the agent commands, and the
tiny evaluation set of the IRCoT tests."""

from __future__ import annotations

import argparse
import re

import numpy as np

from psirag.agent import Node
from psirag.cli import agent_cmds as agent_cli
from psirag.hops import HOPS, LEXICAL_NAMES, HopModel
from psirag.types import Passage, Source
from support import datasets

DOCS = {
    "hotel": (
        "Blue Harbour Hotel",
        "The Blue Harbour Hotel is a seaside hotel in Portmere. Since 1987 it has been owned "
        "by the Calder Group.",
    ),
    "calder": (
        "Calder Group",
        "The Calder Group is a hospitality company founded in 1952. Its head office is in Lisbon.",
    ),
    "portmere": (
        "Portmere",
        "Portmere is a fishing town on the west coast with a seaside promenade and a hotel.",
    ),
    "quiz": (
        "Pub quiz sheet",
        "Question: where is the head office of the Calder company?\nAnswer: Paris",
    ),
    "bridge": ("Old Bridge", "The Old Bridge in Portmere was rebuilt in 1911 after a flood."),
}


STOP = {"the", "a", "an", "of", "in", "is", "it", "by", "what", "which", "where", "who", "its"}


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


class FakeIndex:
    """Lexical overlap over DOCS; records every query it is asked."""

    def __init__(self, k: int = 2, docs: dict[str, tuple[str, str]] | None = None) -> None:
        self.k = k
        self.docs = docs or DOCS
        self.queries: list[str] = []
        self.configs: list[object] = []

    def passage(self, doc_id: str, score: float) -> Passage:
        title, text = self.docs[doc_id]
        return Passage(doc_id, text, score, Source(doc_id, title, 0, 0, len(text)))

    def search(self, query: str, k: int | None = None, *, config: object = None) -> list[Passage]:
        self.queries.append(query)
        self.configs.append(config)
        q = words(query)
        scored = sorted(
            ((len(q & words(t + " " + x)), i) for i, (t, x) in self.docs.items()),
            key=lambda s: (-s[0], s[1]),
        )
        return [self.passage(i, float(s)) for s, i in scored[: self.k]]


QUESTION = "Which city hosts the headquarters of the owner of the Blue Harbour Hotel?"


SUB_QUESTION = "Where is the head office of the Calder Group, owner of the Blue Harbour Hotel?"


def ids(passages: list[Passage]) -> list[str]:
    return [p.id for p in passages]


VISITED = [
    Node(109, 2, 0.70, "meeting overview: budget, design, schedule", 0),
    Node(105, 1, 0.80, "design: remote control shape and colour", 10),
    Node(3, 0, 0.60, "PM: We open with the budget.", 0),
    Node(40, 0, 0.90, "ID: The case will be yellow.", 40),
    Node(12, 0, 0.20, "ME: Batteries cost too much.", 12),
    Node(107, 1, 0.65, "schedule and next meeting", 30),
]


class FakeTreeIndex(FakeIndex):
    def visit(
        self, query: str, *, docs: list[str] | None = None, beam: int = 10, k: int = 10
    ) -> list[Node]:
        self.queries.append(f"visit:{docs}:beam={beam}:k={k}:{query}")
        return VISITED


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="psirag")
    agent_cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def length_model(embedder_id: str, dim: int) -> HopModel:
    """A hand-made model reading only the word count: short questions 1 hop, long ones 4."""
    d = dim + len(LEXICAL_NAMES)
    weights = np.zeros((d, len(HOPS)), dtype=np.float32)
    weights[dim, :] = [-4.0, 0.0, 2.0, 4.0]  # log(1 + words)
    bias = np.asarray([8.0, 0.0, -6.0, -10.0], dtype=np.float32)
    ones = np.ones(d, dtype=np.float32)
    return HopModel(embedder_id, np.zeros(d, dtype=np.float32), ones, weights, bias, {})


CORPUS = [datasets.CORPUS[i] for i in (0, 1, 2, 4, 6, 7, 8)]
"""The IRCoT tests' corpus: seven passages of the evaluation tests' set (support.datasets)."""


Q_OFFICE = "Where is the head office of the owner of the Blue Harbour Hotel?"


QUESTIONS = [
    datasets.QUESTIONS[0],  # Q_VOLCANO, passage 1 (Vesuvius) in both
    {
        "id": "q1",
        "question": Q_OFFICE,
        "answer": "Lisbon",
        "answers": ["Lisbon"],
        "supporting_passage_ids": [5, 4],
    },
]
