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


# --- Single facts about made-up things (the v12 candidates' extra 1-hop training data) ----------

# Name parts for made-up entities: no real person, place or work is meant, and the grouped split
# drops any of these that shares an entity with a scored question anyway.
_FIRST = [
    "Arlen",
    "Bexa",
    "Corvin",
    "Daska",
    "Elio",
    "Fenna",
    "Garrik",
    "Halvi",
    "Ilsa",
    "Jorund",
    "Kesta",
    "Lorien",
    "Maelis",
    "Nadir",
    "Orsa",
    "Pellin",
    "Quenna",
    "Rasmo",
    "Selka",
    "Tavin",
    "Ulla",
    "Varek",
    "Wynne",
    "Xandra",
    "Yorick",
    "Zelma",
    "Bronte",
    "Cedric",
    "Delphine",
    "Emrys",
    "Faustine",
    "Gideon",
    "Henrike",
    "Isko",
    "Jovana",
    "Kasimir",
    "Leofric",
    "Mirela",
    "Niamh",
    "Osvald",
]
_LAST = [
    "Ambergast",
    "Brelloch",
    "Carvane",
    "Dunmere",
    "Esselwood",
    "Farquist",
    "Galloran",
    "Hestrand",
    "Ivesmark",
    "Jurlow",
    "Kettleby",
    "Lomarsh",
    "Morrigane",
    "Nettlefold",
    "Ostrava",
    "Pendergrave",
    "Quillon",
    "Ravensholt",
    "Strathmore",
    "Thistlewood",
    "Ulverdane",
    "Vantrell",
    "Whitcombe",
    "Yarborough",
    "Zellerin",
    "Achterberg",
    "Blomqvist",
    "Castellan",
    "Drobny",
    "Eisenhart",
]
_STEMS = [
    "Brinmoor",
    "Caldreth",
    "Dorvale",
    "Elsmire",
    "Fennick",
    "Glaswyn",
    "Harrowgate",
    "Istrel",
    "Jorvane",
    "Kestwick",
    "Lundmere",
    "Marrowby",
    "Norhaven",
    "Oskarva",
    "Pellinor",
    "Quarrendon",
    "Rostelle",
    "Sundmark",
    "Tarnwick",
    "Ulmsby",
    "Vesterholm",
    "Wrenfield",
    "Yarrowdale",
    "Zorndorf",
]
_WORK_WORDS = [
    "Silent Harbour",
    "The Glass Orchard",
    "Night of the Ember",
    "Paper Lanterns",
    "The Last Cartographer",
    "Winter in Velmora",
    "Iron Meridian",
    "A Song for Tamsin",
    "The Hollow Crown Road",
    "Lanterns Over Kell",
    "Salt and Thunder",
    "The Cobalt Hour",
    "Orchids at Dawn",
    "The Ninth Ferryman",
    "Echoes of Brannock",
]

# Single-fact frames, by the kind of thing asked about. Several wordings per relation (the
# place-of-birth one in seven), so that no one template stands for "one fact".
WRITTEN_FRAMES: dict[str, tuple[str, ...]] = {
    "person": (
        "In what city was {x} born?",
        "In which city was {x} born?",
        "In what town was {x} born?",
        "What city was {x} born in?",
        "Which city is the birthplace of {x}?",
        "{x} was born in which city?",
        "In what place was {x} born?",
        "What is {x}'s occupation?",
        "What does {x} do for a living?",
        "What was {x}'s profession?",
        "What kind of work did {x} do?",
        "In what year was {x} born?",
        "What is the birth date of {x}?",
        "When did {x} pass away?",
        "In what city did {x} die?",
        "Who was the father of {x}?",
        "Who is {x}'s mother?",
        "Whom did {x} marry?",
        "Who was {x}'s spouse?",
        "What country is {x} a citizen of?",
        "What is the nationality of {x}?",
        "Which school did {x} graduate from?",
        "Where was {x} educated?",
        "What sport does {x} play?",
        "Which team does {x} play for?",
        "What instrument does {x} play?",
        "What genre of music does {x} perform?",
        "Which political party does {x} belong to?",
        "What religion did {x} practise?",
        "What is {x} best known for?",
        "Which prize did {x} win?",
        "How many children did {x} have?",
        "Where is {x} buried?",
        "What language does {x} write in?",
        "What was {x}'s rank in the army?",
    ),
    "work": (
        "Who directed {x}?",
        "Who is the author of {x}?",
        "Who wrote {x}?",
        "Who composed {x}?",
        "Who produced {x}?",
        "Who was the screenwriter for {x}?",
        "What genre is {x}?",
        "What is the genre of {x}?",
        "In what year was {x} published?",
        "When was {x} first performed?",
        "Which studio released {x}?",
        "What language is {x} in?",
        "In which country was {x} made?",
        "Who plays the lead role in {x}?",
        "How many episodes does {x} have?",
        "What award did {x} win?",
    ),
    "place": (
        "In what country is {x}?",
        "Which country is {x} located in?",
        "What is the capital of {x}?",
        "What is the population of {x}?",
        "Which river runs through {x}?",
        "In what year was {x} founded?",
        "Who founded {x}?",
        "What region is {x} part of?",
        "What is the area of {x}?",
        "What is the official language of {x}?",
        "What currency is used in {x}?",
        "Who is the current mayor of {x}?",
        "What is {x} famous for?",
        "What is the climate of {x} like?",
    ),
    "organisation": (
        "Who founded {x}?",
        "When was {x} established?",
        "Where is {x} headquartered?",
        "In which city is {x} based?",
        "Who is the chief executive of {x}?",
        "What industry is {x} in?",
        "What does {x} make?",
        "How many people work at {x}?",
        "Which company owns {x}?",
        "What league does {x} play in?",
    ),
}


_ORGANISATION_WORDS = ["Industries", "Group", "Athletic", "Records", "Institute", "Works"]


def _made_up(kind: str, rng: np.random.Generator) -> str:
    def pick(items: list[str]) -> str:
        return items[int(rng.integers(len(items)))]

    if kind == "person":
        return f"{pick(_FIRST)} {pick(_LAST)}"
    if kind == "work":
        return (
            pick(_WORK_WORDS)
            if rng.random() < 0.5
            else f"{pick(_STEMS)} {pick(['Nights', 'Chronicle', 'Suite', 'Saga', 'Story'])}"
        )
    if kind == "place":
        return pick(_STEMS) + pick(["", " Falls", " Bay", "burg", "ton", " Province"])
    return f"{pick(_LAST)} {pick(_ORGANISATION_WORDS)}"


def written_single_facts(seed: int, n: int = 800) -> list[dict[str, object]]:
    """``n`` single-fact questions about made-up people, works, places and organisations in
    the frames of :data:`WRITTEN_FRAMES` (every frame about equally often), source
    ``synthetic``, set ``written``; deterministic by seed."""
    rng = np.random.default_rng(seed)
    frames = [(kind, frame) for kind, table in WRITTEN_FRAMES.items() for frame in table]
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    tries = 0
    while len(rows) < n and tries < n * 20:
        kind, frame = (
            frames[len(rows) % len(frames)]
            if tries % 2 == 0
            else frames[int(rng.integers(len(frames)))]
        )
        tries += 1
        name = _made_up(kind, rng)
        text = frame.format(x=name)
        text = text[0].upper() + text[1:]
        if text in seen:
            continue
        seen.add(text)
        rows.append(
            {"question": text, "hops": 1, "source": "synthetic", "set": "written", "titles": [name]}
        )
    return rows
