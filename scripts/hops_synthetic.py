"""Synthetic hop-labelled questions for training the query-hop discriminator (never for scoring).

Built offline from the entities in 2Wiki's evidence triples and templates written for this
project: single-fact questions in many phrasings (so that "1 hop" is not learnt as PopQA's few
templates), and chains of 2-4 relations phrased as nested noun phrases, relative clauses and
possessives, the way MuSiQue composes its questions. A chain's hop count is its number of
relations; whether the facts are true does not matter for the label.
"""

from __future__ import annotations

import json
import re
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


# --- Single facts in open wordings (the v13 candidates' extra 1-hop training data) --------------

# Syllables for made-up names (v13): a name is two or three of them, so that thousands of names
# exist and none is a real entity or one of the names above.
_ONSETS = ["Bal", "Cor", "Dra", "Ev", "Fal", "Gor", "Hen", "Ist", "Jas", "Kal", "Lum", "Mor", "Nes"]
_ONSETS += ["Ost", "Pra", "Quel", "Ros", "Sar", "Tol", "Ul", "Vas", "Wel", "Yst", "Zan", "Brek"]
_CODAS = ["a", "en", "ick", "ora", "ett", "ian", "ow", "ud", "ine", "ast", "ell", "um", "is", "ar"]
_CODAS += ["veth", "mond", "dale", "rin", "ska", "wyn", "holm", "dor", "stead", "ith"]

# Kinds of things, each with the type nouns a question may put before a name ("the novelist
# X", "the port town of X"; an entry ending in " of" takes the name after "of").
OPEN_TYPES: dict[str, tuple[str, ...]] = {
    "person": (
        "novelist",
        "painter",
        "singer",
        "physicist",
        "senator",
        "chess player",
        "footballer",
        "poet",
        "sculptor",
        "architect",
        "composer",
        "actor",
        "actress",
        "explorer",
        "merchant",
        "cricketer",
        "inventor",
        "philosopher",
        "general",
        "bishop",
        "engineer",
        "chemist",
        "jazz pianist",
        "cyclist",
        "tennis player",
        "diplomat",
        "economist",
        "playwright",
        "historian",
        "astronomer",
        "boxer",
        "mathematician",
        "photographer",
        "journalist",
    ),
    "work": (
        "novel",
        "film",
        "album",
        "song",
        "single",
        "opera",
        "play",
        "poem",
        "painting",
        "video game",
        "television series",
        "documentary",
        "poetry collection",
        "short story",
        "musical",
        "symphony",
        "board game",
        "podcast",
        "memoir",
        "comic book",
    ),
    "place": (
        "city of",
        "town of",
        "village of",
        "port town of",
        "island of",
        "province of",
        "republic of",
        "kingdom of",
        "duchy of",
        "region of",
        "county of",
        "city",
        "town",
        "island",
        "river",
        "mountain",
        "lake",
        "valley",
        "peninsula",
        "state of",
    ),
    "organisation": (
        "company",
        "band",
        "football club",
        "airline",
        "university",
        "record label",
        "mining firm",
        "newspaper",
        "bank",
        "shipping line",
        "publishing house",
        "hockey club",
        "orchestra",
        "charity",
        "brewery",
        "software company",
        "museum",
        "choir",
        "carmaker",
    ),
}
# Adjectives that may stand before a person's type noun ("the Danish-born chemist X").
_ORIGINS = ["French", "Brazilian", "Norwegian", "Kenyan", "Chilean", "Polish", "Irish", "Thai"]
_ORIGINS += ["Danish-born", "American", "Egyptian", "Scottish", "Austrian", "Peruvian"]

# Relations by kind: noun phrases for "the <relation> of X" ("date of birth" keeps its own "of")
# and whole frames with {x} for the mention. Written for this project.
OPEN_RELATIONS: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = {
    "person": (
        (
            ("birthplace", "place of birth", "home town", "city of birth"),
            ("Where was {x} born?", "{x} was born where?", "Which town did {x} come from?"),
        ),
        (
            ("date of birth", "birth date", "year of birth", "birthday"),
            ("When was {x} born?", "In which year was {x} born?", "What year was {x} born in?"),
        ),
        (
            ("date of death", "place of death", "year of death", "cause of death"),
            ("When did {x} die?", "Where did {x} die?", "How did {x} die?"),
        ),
        (
            ("father", "mother", "wife", "husband", "spouse", "eldest son", "daughter", "brother"),
            ("Who was {x} married to?", "Who fathered {x}?", "Who raised {x}?"),
        ),
        (
            ("nationality", "citizenship", "country of citizenship", "native country"),
            ("Which country is {x} a citizen of?", "What country does {x} come from?"),
        ),
        (
            ("occupation", "profession", "job", "main field of work", "best-known work"),
            ("What did {x} do for a living?", "What was {x} famous for?"),
        ),
        (
            ("employer", "alma mater", "university", "doctoral advisor", "teacher"),
            (
                "Which university did {x} attend?",
                "Who did {x} work for?",
                "Where did {x} study?",
                "Which company employed {x}?",
            ),
        ),
        (
            ("political party", "party affiliation", "religion", "faith"),
            ("Which party did {x} join?", "What faith did {x} follow?"),
        ),
        (
            ("instrument", "sport", "team", "playing position", "weight class", "coach"),
            (
                "What instrument does {x} play?",
                "Which sport does {x} compete in?",
                "Which team did {x} play for?",
                "What position does {x} play?",
            ),
        ),
        (
            ("burial place", "resting place", "native language", "height"),
            ("Where is {x} buried?", "What language did {x} speak?", "How tall is {x}?"),
        ),
        (
            ("award", "highest honour", "first prize", "nickname"),
            ("Which prize did {x} win?", "What award did {x} receive?"),
        ),
    ),
    "work": (
        (
            ("author", "writer", "director", "composer", "creator", "illustrator"),
            (
                "Who wrote {x}?",
                "Who directed {x}?",
                "Who composed {x}?",
                "{x} was written by whom?",
            ),
        ),
        (
            ("performer", "singer", "lead actor", "lead actress", "narrator", "star"),
            ("Who sings {x}?", "Who starred in {x}?", "Who played the lead in {x}?"),
        ),
        (
            ("producer", "publisher", "studio", "record label", "distributor", "developer"),
            ("Who published {x}?", "Which studio made {x}?", "Which label released {x}?"),
        ),
        (
            (
                "release year",
                "publication year",
                "release date",
                "premiere date",
                "year of release",
            ),
            ("When did {x} come out?", "When was {x} first published?", "When was {x} released?"),
        ),
        (
            ("genre", "original language", "country of origin", "setting", "running time"),
            ("What genre is {x}?", "In what language was {x} written?", "Where is {x} set?"),
        ),
    ),
    "place": (
        (
            ("country", "continent", "region", "time zone", "province"),
            ("In which country is {x}?", "Which continent is {x} on?", "{x} lies in what country?"),
        ),
        (
            ("capital", "capital city", "largest city", "seat of government", "main port"),
            ("Which city is the capital of {x}?", "What city serves as the capital of {x}?"),
        ),
        (
            ("population", "area", "elevation", "average rainfall", "highest point"),
            ("How many people live in {x}?", "How high is {x}?", "How big is {x}?"),
        ),
        (
            ("official language", "currency", "national anthem", "head of state", "mayor"),
            ("What language is spoken in {x}?", "What currency does {x} use?", "Who governs {x}?"),
        ),
        (
            ("founding year", "founder", "namesake", "mouth", "source"),
            ("When was {x} founded?", "Who founded {x}?", "{x} is named after whom?"),
        ),
    ),
    "organisation": (
        (
            ("founder", "owner", "chief executive", "chairman", "lead singer", "conductor"),
            ("Who founded {x}?", "Who owns {x}?", "Who runs {x}?", "Who leads {x}?"),
        ),
        (
            ("headquarters", "head office", "home city", "home ground", "home venue"),
            ("Where is {x} based?", "Where does {x} play its home games?", "Where is {x} located?"),
        ),
        (
            ("founding year", "year of founding", "parent company", "stock exchange listing"),
            ("When was {x} founded?", "When was {x} set up?", "Which company owns {x}?"),
        ),
        (
            ("industry", "league", "record label", "genre", "main product", "motto"),
            (
                "What does {x} make?",
                "Which league does {x} play in?",
                "What kind of music does {x} play?",
            ),
        ),
    ),
}

# Ways to ask for "the <relation> of X" (rel: the relation noun phrase, x: the mention).
OPEN_ASKS = (
    "What is the {rel} of {x}?",
    "What's the {rel} of {x}?",
    "What was the {rel} of {x}?",
    "Tell me the {rel} of {x}.",
    "Name the {rel} of {x}.",
    "Give me the {rel} of {x}.",
    "Do you know the {rel} of {x}?",
    "I'd like to know the {rel} of {x}.",
    "Could you tell me the {rel} of {x}?",
    "{rel} of {x}?",
    "What is {x}'s {rel}?",
    "Tell me {x}'s {rel}.",
    "{x}'s {rel}?",
    "Who or what is the {rel} of {x}?",
    "Look up the {rel} of {x}.",
    "Find the {rel} of {x}.",
)


_WORK_NOUNS = ["Letters", "Road", "Garden", "Tide", "Engine", "Lantern"]
_WORK_TAILS = ["Nights", "Rising", "Blue", "Winter", "Hymn"]
_ORGANISATION_TAILS = ["Rovers", "Dynamics", "Records", "Press", "Air", "Works"]


def _open_name(kind: str, rng: np.random.Generator) -> str:
    def pick(items: list[str]) -> str:
        return items[int(rng.integers(len(items)))]

    def part() -> str:
        onset = _ONSETS[int(rng.integers(len(_ONSETS)))]
        coda = _CODAS[int(rng.integers(len(_CODAS)))]
        return onset + coda

    if kind == "person":
        return f"{part()} {part()}" if rng.random() < 0.8 else f"{part()} {part()}-{part()}"
    if kind == "work":
        return (
            f"The {part()} {pick(_WORK_NOUNS)}"
            if rng.random() < 0.5
            else f"{part()} {pick(_WORK_TAILS)}"
        )
    if kind == "place":
        return part() + (" Bay" if rng.random() < 0.2 else "")
    return f"{part()} {pick(_ORGANISATION_TAILS)}"


def _mention(kind: str, name: str, rng: np.random.Generator) -> str:
    """The name alone, or typed: "the novelist X", "the Danish-born chemist X", "the island of
    X"."""
    if rng.random() < 0.35:
        return name
    noun = OPEN_TYPES[kind][int(rng.integers(len(OPEN_TYPES[kind])))]
    if noun.endswith(" of"):
        return f"the {noun} {name}"
    if kind == "person" and rng.random() < 0.25:
        noun = f"{_ORIGINS[int(rng.integers(len(_ORIGINS)))]} {noun}"
    return f"the {noun} {name}"


def open_single_facts(seed: int, n: int = 1200) -> list[dict[str, object]]:
    """``n`` single-fact questions about made-up things in open wordings: a relation asked by a
    verb frame ("Who wrote X?") or as a noun phrase ("Tell me the date of birth of X", "record
    label of X?", "X's home town?"), the thing named bare or with its type ("the port town of
    X"), and a third written the way people type a query: lower case, no question mark. Source
    ``synthetic``, set ``open``; deterministic by seed."""
    rng = np.random.default_rng(seed)
    kinds = list(OPEN_RELATIONS)
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    tries = 0
    while len(rows) < n and tries < n * 20:
        tries += 1
        kind = kinds[len(rows) % len(kinds)]
        nouns, frames = OPEN_RELATIONS[kind][int(rng.integers(len(OPEN_RELATIONS[kind])))]
        name = _open_name(kind, rng)
        mention = _mention(kind, name, rng)
        if rng.random() < 0.35:
            text = frames[int(rng.integers(len(frames)))].format(x=mention)
        else:
            ask = OPEN_ASKS[int(rng.integers(len(OPEN_ASKS)))]
            if "'s" in ask and mention.startswith("the "):
                mention = name  # "the novelist X's birthplace" reads oddly; keep it plain
            text = ask.format(rel=nouns[int(rng.integers(len(nouns)))], x=mention)
        text = text.replace("s's ", "s' ")
        text = text[0].upper() + text[1:]
        style = rng.random()
        if style < 0.3:
            text = text.lower().rstrip("?.")
        elif style < 0.4:
            text = text.rstrip("?.")
        if text in seen:
            continue
        seen.add(text)
        rows.append(
            {"question": text, "hops": 1, "source": "synthetic", "set": "open", "titles": [name]}
        )
    return rows


# Bridges of the open chains (v13 candidates): from one kind of thing to another, as a noun
# phrase ("the author of X") or a relative clause ("the man who directed X").
OPEN_BRIDGES: dict[str, tuple[tuple[str, str], ...]] = {
    "work": (
        ("the author of {x}", "person"),
        ("the director of {x}", "person"),
        ("the composer of {x}", "person"),
        ("the lead actress of {x}", "person"),
        ("the singer who recorded {x}", "person"),
        ("the man who directed {x}", "person"),
        ("the woman who wrote {x}", "person"),
        ("the publisher of {x}", "organisation"),
        ("the studio that made {x}", "organisation"),
        ("the record label of {x}", "organisation"),
        ("the band behind {x}", "organisation"),
        ("the city where {x} is set", "place"),
    ),
    "person": (
        ("the father of {x}", "person"),
        ("the mother of {x}", "person"),
        ("the wife of {x}", "person"),
        ("the husband of {x}", "person"),
        ("the eldest son of {x}", "person"),
        ("the teacher of {x}", "person"),
        ("the person {x} married", "person"),
        ("the employer of {x}", "organisation"),
        ("the club {x} played for", "organisation"),
        ("the university {x} attended", "organisation"),
        ("the company that employed {x}", "organisation"),
        ("the birthplace of {x}", "place"),
        ("the town where {x} was born", "place"),
        ("the place of death of {x}", "place"),
        ("the best-known novel of {x}", "work"),
        ("the debut album of {x}", "work"),
        ("the first film of {x}", "work"),
    ),
    "place": (
        ("the country of {x}", "place"),
        ("the capital of {x}", "place"),
        ("the largest city of {x}", "place"),
        ("the country where {x} lies", "place"),
        ("the mayor of {x}", "person"),
        ("the founder of {x}", "person"),
        ("the oldest university in {x}", "organisation"),
    ),
    "organisation": (
        ("the founder of {x}", "person"),
        ("the chief executive of {x}", "person"),
        ("the lead singer of {x}", "person"),
        ("the man who founded {x}", "person"),
        ("the headquarters of {x}", "place"),
        ("the city where {x} is based", "place"),
        ("the home city of {x}", "place"),
        ("the parent company of {x}", "organisation"),
        ("the first album of {x}", "work"),
    ),
}


# Comparisons of two made-up things of one kind (2 hops: one fact about each), and the
# superlative bridges of places ("the tallest building in X").
OPEN_COMPARISONS: dict[str, tuple[str, ...]] = {
    "person": (
        "Who was born first, {a} or {b}?",
        "Was {a} or {b} born earlier?",
        "Which of {a} and {b} died later?",
        "Are {a} and {b} of the same nationality?",
        "Who is older, {a} or {b}?",
        "Did {a} and {b} play the same sport?",
        "Was {a} born before {b}?",
    ),
    "work": (
        "Which came out first, {a} or {b}?",
        "Which was published earlier, {a} or {b}?",
        "Were {a} and {b} directed by the same person?",
        "Which is longer, {a} or {b}?",
        "Is {a} older than {b}?",
    ),
    "place": (
        "Which is larger, {a} or {b}?",
        "Which has the larger population, {a} or {b}?",
        "Is {a} higher than {b}?",
        "Are {a} and {b} in the same country?",
        "Which lies further north, {a} or {b}?",
        "Which is taller, {a} or {b}?",
    ),
    "organisation": (
        "Which was founded first, {a} or {b}?",
        "Are {a} and {b} based in the same city?",
        "Which is older, {a} or {b}?",
        "Do {a} and {b} play in the same league?",
    ),
}
_SUPERLATIVES = (
    ("the tallest building in {x}", "place"),
    ("the highest mountain in {x}", "place"),
    ("the largest lake in {x}", "place"),
    ("the oldest church in {x}", "place"),
    ("the biggest club in {x}", "organisation"),
)


def _styled(text: str, rng: np.random.Generator) -> str:
    """Capitalised; three in ten lower case without the final mark, one in ten without it."""
    text = text[0].upper() + text[1:]
    style = rng.random()
    if style < 0.3:
        return text.lower().rstrip("?.")
    if style < 0.4:
        return text.rstrip("?.")
    return text


def _possessive(chain: str) -> str:
    return chain + ("'" if chain.endswith("s") else "'s")


def open_chains(seed: int, n: int = 1200) -> list[dict[str, object]]:
    """``n`` questions of 2 and 3 hops in the open wordings of :func:`open_single_facts` (every
    third one 3 hops): the same frames, asks, typed mentions and styles, asked of a chain ("Tell
    me the birthplace of the author of the novel X", "record label of the band behind X?",
    "where was the man who directed the film X born"), so that the open wordings alone do not
    read as one fact. Source ``synthetic``, set ``open_chain``; deterministic by seed."""
    rng = np.random.default_rng(seed + 2)
    kinds = list(OPEN_RELATIONS)
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    tries = 0
    while len(rows) < n and tries < n * 20:
        tries += 1
        kind = kinds[len(rows) % len(kinds)]
        links = 2 if len(rows) % 3 == 2 else 1
        if len(rows) % 5 == 4:
            # Every fifth one a comparison of two things of one kind.
            table = OPEN_COMPARISONS[kind]
            a, b = _open_name(kind, rng), _open_name(kind, rng)
            frame = table[int(rng.integers(len(table)))]
            text = frame.format(a=_mention(kind, a, rng), b=_mention(kind, b, rng))
            rows_text = _styled(text, rng)
            if rows_text not in seen:
                seen.add(rows_text)
                rows.append(
                    {
                        "question": rows_text,
                        "hops": 2,
                        "source": "synthetic",
                        "set": "open_chain",
                        "titles": [a, b],
                    }
                )
            continue
        name = _open_name(kind, rng)
        chain = _mention(kind, name, rng)
        # Most chains from a bare name are possessive where they can be: "X's father's birthplace".
        possessive = rng.random() < 0.6 and chain == name
        for _ in range(links):
            bridges = OPEN_BRIDGES[kind] + (_SUPERLATIVES if kind == "place" else ())
            bridge, kind = bridges[int(rng.integers(len(bridges)))]
            noun = re.fullmatch(r"the (.+) of \{x\}", bridge)
            if possessive and noun:
                chain = f"{_possessive(chain)} {noun.group(1)}"
            else:
                possessive = False
                chain = bridge.format(x=chain)
        nouns, frames = OPEN_RELATIONS[kind][int(rng.integers(len(OPEN_RELATIONS[kind])))]
        if rng.random() < 0.35:
            text = frames[int(rng.integers(len(frames)))].format(x=chain)
        else:
            asks = [a for a in OPEN_ASKS if "'s" not in a]  # "the x of y's z" would be ambiguous
            ask = asks[int(rng.integers(len(asks)))]
            text = ask.format(rel=nouns[int(rng.integers(len(nouns)))], x=chain)
        text = _styled(text, rng)
        if text in seen:
            continue
        seen.add(text)
        rows.append(
            {
                "question": text,
                "hops": links + 1,
                "source": "synthetic",
                "set": "open_chain",
                "titles": [name],
            }
        )
    return rows
