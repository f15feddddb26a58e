"""Synthetic hop-labelled questions for training the query-hop discriminator (never for scoring).

Built offline from the entities in 2Wiki's evidence triples and templates written for this
project: single-fact questions in many phrasings (so that "1 hop" is not learnt as PopQA's few
templates), and chains of 2-4 relations phrased as nested noun phrases, relative clauses and
possessives, the way MuSiQue composes its questions. A chain's hop count is its number of
relations; whether the facts are true does not matter for the label.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

# Single-fact frames by the type of the entity they ask about.
FRAMES: dict[str, tuple[str, ...]] = {
    "film": (
        "Who directed {x}?",
        "Who is the director of {x}?",
        "When was {x} released?",
        "What year did {x} come out?",
        "Who composed the music for {x}?",
        "Which country produced {x}?",
        "Who starred in {x}?",
        "What genre is {x}?",
        "Who wrote the screenplay of {x}?",
        "How long is the film {x}?",
    ),
    "person": (
        "When was {x} born?",
        "Where was {x} born?",
        "In which city was {x} born?",
        "What is the date of birth of {x}?",
        "When did {x} die?",
        "Where did {x} die?",
        "Who is the father of {x}?",
        "Who was {x}'s mother?",
        "Who is {x} married to?",
        "What nationality is {x}?",
        "What is {x}'s occupation?",
        "What is {x} known for?",
        "Where did {x} study?",
        "Which university did {x} attend?",
        "Where is {x} buried?",
        "What was the cause of death of {x}?",
        "Which award did {x} receive?",
        "Who did {x} work for?",
        "What position did {x} play?",
        "What religion does {x} follow?",
        "How old was {x} when they died?",
        "What language did {x} speak?",
    ),
    "place": (
        "What country is {x} in?",
        "What is the population of {x}?",
        "When was {x} founded?",
        "Who founded {x}?",
        "In which region is {x} located?",
        "What river flows through {x}?",
        "What is {x} famous for?",
        "Who is the mayor of {x}?",
    ),
    "country": (
        "What is the capital of {x}?",
        "What currency is used in {x}?",
        "Who is the head of state of {x}?",
        "What is the official language of {x}?",
        "When did {x} become independent?",
        "What continent is {x} on?",
    ),
}

# One relation applied to an entity of the key's type: (phrasings, type of the result).
LINKS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "film": (
        (
            (
                "the director of {x}",
                "the person who directed {x}",
                "{x}'s director",
                "the man who made {x}",
                "the filmmaker behind {x}",
            ),
            "person",
        ),
        (("the composer of {x}", "the person who wrote the score for {x}"), "person"),
        (("the country that produced {x}", "the country of origin of {x}"), "country"),
        (
            ("the star of {x}", "the lead actor in {x}", "the actor who played the lead in {x}"),
            "person",
        ),
    ),
    "person": (
        (("the father of {x}", "{x}'s father", "the man whose child was {x}"), "person"),
        (("the mother of {x}", "{x}'s mother"), "person"),
        (("the spouse of {x}", "the person {x} married", "{x}'s wife", "{x}'s husband"), "person"),
        (
            (
                "the birthplace of {x}",
                "the city where {x} was born",
                "the place of birth of {x}",
                "{x}'s hometown",
            ),
            "place",
        ),
        (("the place where {x} died", "the city in which {x} died"), "place"),
        (("the country of citizenship of {x}", "the country {x} was a citizen of"), "country"),
        (("the university {x} attended", "the school where {x} studied"), "place"),
        (("the employer of {x}", "the company {x} worked for"), "place"),
        (("the team {x} played for", "the club that signed {x}"), "place"),
    ),
    "place": (
        (
            (
                "the country where {x} is located",
                "the country containing {x}",
                "the nation in which {x} lies",
            ),
            "country",
        ),
        (("the founder of {x}", "the person who founded {x}"), "person"),
        (("the mayor of {x}", "the person who governs {x}"), "person"),
    ),
    "country": (
        (("the capital of {x}", "the capital city of {x}", "{x}'s capital"), "place"),
        (("the head of state of {x}", "the leader of {x}", "the president of {x}"), "person"),
        (("the largest city of {x}", "the most populous city in {x}"), "place"),
    ),
}

FILM_RELATIONS = ("director", "publication date", "composer", "country of origin", "producer")
PERSON_RELATIONS = (
    "father",
    "mother",
    "spouse",
    "date of birth",
    "date of death",
    "place of birth",
    "place of death",
    "country of citizenship",
    "educated at",
    "place of burial",
    "employer",
    "award received",
    "child",
    "sibling",
)


def entities_by_type(data: Path) -> dict[str, list[str]]:
    """Films, people, places and countries named in 2Wiki's evidence triples."""
    found: dict[str, set[str]] = {t: set() for t in FRAMES}
    path = data / "2wikimultihopqa" / "questions.json"
    for q in json.loads(path.read_text(encoding="utf-8")):
        for subject, relation, obj in q.get("evidence") or []:
            if relation in FILM_RELATIONS:
                found["film"].add(subject)
            if relation in PERSON_RELATIONS:
                found["person"].add(subject)
            if relation in ("father", "mother", "spouse", "director", "composer", "child"):
                found["person"].add(obj)
            if relation in ("place of birth", "place of death", "place of burial"):
                found["place"].add(obj)
            if relation in ("country of citizenship", "country", "country of origin"):
                found["country"].add(obj)
    return {t: sorted(names) for t, names in found.items()}


def _phrase_chain(rng: np.random.Generator, start_type: str, name: str, links: int) -> str:
    """A noun phrase applying ``links`` relations to ``name``; returns it and its final type."""
    phrase, kind = name, start_type
    for _ in range(links):
        options = LINKS[kind]
        forms, kind = options[int(rng.integers(len(options)))]
        phrase = forms[int(rng.integers(len(forms)))].format(x=phrase)
    return phrase + "\x00" + kind


def synthetic_questions(data: Path, seed: int, per_hop: int = 400) -> list[dict[str, object]]:
    """``per_hop`` questions of each hop count 1-4, source ``synthetic``, deterministic by seed."""
    rng = np.random.default_rng(seed)
    pools = entities_by_type(data)
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    start_types = [t for t in ("film", "person", "place", "country") if pools[t]]
    for hops in (1, 2, 3, 4):
        made = 0
        tries = 0
        while made < per_hop and tries < per_hop * 20:
            tries += 1
            start = start_types[int(rng.integers(len(start_types)))]
            name = pools[start][int(rng.integers(len(pools[start])))]
            phrase, kind = _phrase_chain(rng, start, name, hops - 1).split("\x00")
            frame = FRAMES[kind][int(rng.integers(len(FRAMES[kind])))]
            text = frame.format(x=phrase)
            text = text[0].upper() + text[1:]
            if text in seen:
                continue
            seen.add(text)
            rows.append({"question": text, "hops": hops, "source": "synthetic", "titles": [name]})
            made += 1
    return rows
