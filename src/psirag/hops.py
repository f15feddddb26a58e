"""The query-hop discriminator (paper App. E.2): predicts from a question how many hops (1-4) it
needs, so that ``--max-retrievals auto`` can set the agent's budget per question.

The shipped model (:class:`HopCascade`) asks three yes/no questions in turn, more than 1 hop?
more than 2? more than 3?, each a logistic regression over the MiniLM question embedding plus
lexical features (:func:`lexical_features`: wh-words, relative clauses, "of" chains, relation
nouns, counts over the question with its names masked, the relations a comparison goes
through). It is trained by
``scripts/train_hops.py``; its weights ship as ``psirag/data/hops-minilm.json`` (plain JSON, no
pickle) and load offline; prediction is a few dot products in numpy. The older softmax format
(:class:`HopModel`) still loads.

Budget mapping (:func:`max_retrievals_for`): a question of ``h`` hops gets ``h - 1`` retrievals
after the first one, at least 1. That is the paper's setting (retrieval attempts = maximum hop
count: 2 for 2Wiki/HotpotQA, 4 for MuSiQue), with one extra attempt kept for 1-hop questions,
which the paper also allows single-hop datasets for query reorganisation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import InputError

HOPS = (1, 2, 3, 4)
WEIGHTS_RESOURCE = "hops-minilm.json"
FORMAT = "psirag-hops/1"
FORMAT_CASCADE = "psirag-hops/2"
AUTO = "auto"

_WORD = re.compile(r"[A-Za-z0-9']+")
# A run of capitalised words (or numbers) not at the start: a rough named-entity count.
ENTITY_PATTERN = re.compile(
    r"(?<![.?!]\s)(?<!^)\b(?:[A-Z0-9][\w'.-]*)(?:\s+(?:of|the|de|del|da|di|la|von|van|and|&)?\s*[A-Z0-9][\w'.-]*)*"
)
_WH = ("who", "whom", "whose", "what", "which", "when", "where", "why", "how")
_COMPARE = (
    "both",
    "same",
    "older",
    "younger",
    "earlier",
    "later",
    "first",
    "longer",
    "shorter",
    "more",
    "less",
    "than",
    "born",
    "died",
    "or",
)
_COMPARATIVE = (
    "both",
    "same",
    "older",
    "younger",
    "earlier",
    "later",
    "first",
    "last",
    "longer",
    "shorter",
    "more",
    "less",
    "than",
    "either",
    "oldest",
    "youngest",
    "larger",
    "bigger",
    "smaller",
    "higher",
    "lower",
    "closer",
    "farther",
)
_RELATIVE = ("who", "that", "whose", "which", "where", "when", "whom")
_PREPOSITIONS = ("of", "in", "by", "for", "from", "at", "with", "on", "to")
_VERBS_OF_CHAINS = ("born", "died", "founded", "directed", "wrote", "created", "located", "married")

LEXICAL_V1 = (
    "log_words",
    "wh_words",
    "of_the",
    "possessive",
    "relative",
    "compare",
    "capitals",
    "commas",
)
#: Lexical features of the v2 models: question structure that does not depend on the topic, so
#: that it carries over to question templates the model never saw.
LEXICAL_V2 = (
    *LEXICAL_V1,
    "of_any",
    "relative_mid",
    "comparative",
    "or_choice",
    "entities",
    "the_count",
    "prepositions",
    "event_verbs",
    "and_count",
    "quoted",
)
#: Lexical features of the v6 and v7 cascades: v2's plus counts over the question with its
#: named things masked (:func:`masked_template`), so that a long title does not read as a long
#: chain.
LEXICAL_MASKED = (
    *LEXICAL_V2,
    "content_words",
    "lower_content",
    "sentences",
    "ed_words",
    "ing_words",
    "masked_words",
    "masked_content",
    "masked_entities",
    "masked_relative",
    "masked_of",
    "relation_nouns",
    "prep_phrases",
)
#: Lexical features of the v8 cascade: v7's plus
#: two counts of chain links (:func:`_chain_links`), which tell a long question that describes
#: one bridge entity at length (2 hops) from a short one that chains three relations.
LEXICAL_V8 = (*LEXICAL_MASKED, "relation_links", "defining_clauses")
#: The features of the v9, v10, v11 (shipped) and v12 cascades:
#: v8's plus ``compared_relations`` (:func:`_compared_relations`).
LEXICAL_NAMES = (*LEXICAL_V8, "compared_relations")
#: Chain-length counts (:func:`_chain_length`), tried as the v12 candidates' extra features: the
#: longest nested "the x of the y of" run, the longest possessive chain ("x's father's
#: birthplace"), relation nouns held by a possessive, relative clauses nested in one clause, and
#: relation nouns in the whole question (plurals too).
LEXICAL_CHAIN = (
    "of_chain",
    "possessive_chain",
    "possessed_relations",
    "clause_nesting",
    "relation_mentions",
)
LEXICAL_V12 = (*LEXICAL_NAMES, *LEXICAL_CHAIN)
#: Relation counts (:func:`_relation_count`), the v13 candidates' extra step-1 features: the
#: relations a question asks through (relation nouns and verbs, not counting a noun that only
#: says what a name is, "the band x", "the port town of x", nor the answer type after a leading
#: "what"/"which") and the typed mentions set aside.
LEXICAL_RELATIONS = ("relations", "typed_mentions")
LEXICAL_V13 = (*LEXICAL_NAMES, *LEXICAL_RELATIONS)
#: Every name a model file may use.
LEXICAL_KNOWN = (*LEXICAL_V12, *LEXICAL_RELATIONS)

# Named things to mask: capitalised runs (and numbers) not at the start, and quoted titles.
MASK_ENTITY_PATTERN = re.compile(
    r"(?<!^)(?:\b[A-Z0-9][\w'.\-]*)(?:\s+(?:of|the|de|del|da|di|la|von|van|and|&)?\s*[A-Z0-9][\w'.\-]*)*"
)
QUOTED_PATTERN = re.compile(r"\"[^\"]*\"")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an the of in on at by for from to with and or but is was were are be been being do "
        "does did has have had who whom whose what which when where why how that this these "
        "those it its as into than then there their they he she his her him them not no s",
    )
)


# Nouns that name a relation between two things (a person's spouse, a film's director, a city's
# country): each one in a question is usually one hop. Written for this project, generic.
RELATION_NOUNS = frozenset(
    re.findall(
        r"\w+",
        "performer birthplace spouse wife husband father mother son daughter child children "
        "sibling brother sister director author writer composer creator founder owner operator "
        "manufacturer publisher producer developer designer architect team league club country "
        "state city capital county continent region province district headquarters employer "
        "member leader president king queen ruler governor mayor chancellor minister party label "
        "network company organization university school college band singer actor actress player "
        "coach record album song film movie book novel show series character home hometown "
        "nationality language currency origin location place site river mountain ocean sea lake "
        "island",
    )
)
_PREP_PHRASE = re.compile(r"\b(?:in|of|from|by|for|with|at|on)\s+(?:the|a|an)\b")
# In the masked question: "the director of", "the home team that", "the country where", "the
# league x": a relation noun (at most two words after "the") tied by a phrase or clause to
# something else; one link of a chain each.
_RELATION_LINK = re.compile(
    r"\bthe (?:\w+ ){0,2}?(?:"
    + "|".join(sorted(RELATION_NOUNS))
    + r")\b(?= (?:of|that|which|who|where|whose|in which|x's|x)\b)"
)
# "the city where", "a band that": a noun defined by a relative clause, whatever the noun.
_DEFINING_CLAUSE = re.compile(r"\b(?:the|a|an) \w+ (?:that|which|who|where|whose)\b")


def masked_template(question: str) -> str:
    """The question, lower-cased, with named things masked as ``x``: ``"in what city was x
    born"``. Also the template key of the training script's grouped split."""
    text = QUOTED_PATTERN.sub("X", question.strip())
    text = MASK_ENTITY_PATTERN.sub("X", text)
    text = re.sub(r"\d+", "0", text.lower())
    return " ".join(re.findall(r"[a-z0']+|x", text))


def _merged_words(question: str) -> list[str]:
    """The masked question's words, with runs of masks ("x x") merged into one."""
    words: list[str] = []
    for word in masked_template(question).split():
        if not (word == "x" and words and words[-1] == "x"):
            words.append(word)
    return words


def _answer_type(words: Sequence[str], leads: tuple[str, ...]) -> set[int]:
    """Positions of the answer type: the content word right after a leading question word
    ("which city", "what year"), which names what is asked, not a relation."""
    return {
        i + 1
        for i, word in enumerate(words[:3])
        if word in leads and i + 1 < len(words) and words[i + 1] not in _STOP
    }


def _masked_counts(question: str) -> dict[str, float]:
    """Counts over the masked words, adjacent masks merged: how long the question is once its
    names are set aside, and how many relation words it has (content words other than the
    answer type right after a leading "what"/"which")."""
    words = _merged_words(question)
    answer_type = _answer_type(words, ("what", "which"))
    content = [
        w for i, w in enumerate(words) if w not in _STOP and w != "x" and i not in answer_type
    ]
    return {
        "masked_words": len(words) / 10.0,
        "masked_content": len(content) / 5.0,
        "masked_entities": float(words.count("x")),
        "masked_relative": float(sum(w in _RELATIVE for w in words[1:])),
        "masked_of": float(words.count("of")),
        "relation_nouns": float(sum(w in RELATION_NOUNS for w in words)),
    }


def _chain_links(question: str) -> dict[str, float]:
    """Links of a relation chain in the masked question: relation nouns tied onwards ("the
    spouse of", "the team that") and nouns defined by a relative clause ("the city where").
    Descriptions of one entity ("a Danish club that won three cups") add at most one."""
    template = masked_template(question)
    return {
        "relation_links": float(len(_RELATION_LINK.findall(template))),
        "defining_clauses": float(len(_DEFINING_CLAUSE.findall(template))),
    }


# A choice between named things ("x or x") or a shared property ("both", "the same"): the
# question compares two answers found separately.
_COMPARISON = re.compile(r"\bx or x\b|\bboth\b|\bthe same\b|\beither\b")


def _compared_relations(question: str) -> dict[str, float]:
    """In a comparison, the relation nouns that lead from each compared thing to the compared
    property ("which film has the director who died first, x or x": 1; "who was born first, x or
    x": 0). Not counted: the answer type ("which film"), the property itself ("the same
    country") and a noun naming what a name is ("both films x"). Each noun counted is one hop
    more per compared thing."""
    words = masked_template(question).split()
    if not _COMPARISON.search(" ".join(words)):
        return {"compared_relations": 0.0}
    nouns = 0
    for i, word in enumerate(words):
        if not (word in RELATION_NOUNS or word.rstrip("s") in RELATION_NOUNS):
            continue
        before = words[i - 1] if i else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        if before in ("what", "which", "same") or after == "x":
            continue
        nouns += 1
    return {"compared_relations": float(nouns)}


# "the director of the", "the capital city of": one link of a nested "of" chain in the masked
# question (a noun phrase of at most three words, then "of").
_OF_LINK = r"(?:the|a|an) (?:[a-z']+ ){1,3}?of "
_OF_CHAIN = re.compile(r"(?:" + _OF_LINK + r")+")
_POSSESSIVE = re.compile(r"['\u2019]s\b")
_CLAUSE_BREAK = re.compile(r"[,;:()]|\band\b|\bor\b|\bbut\b")


def _relation_word(word: str) -> bool:
    return word in RELATION_NOUNS or (word.endswith("s") and word[:-1] in RELATION_NOUNS)


def _chain_length(question: str) -> dict[str, float]:
    """How long the longest relation chain is, read four ways: the longest run of nested "the x
    of" links (masked question), the longest run of possessives with at most two words between
    them ("x's father's birthplace": 2), relation nouns right after a possessive ("Godiva's
    birthplace"), the most relative pronouns inside one clause (commas and "and" end a clause,
    so "the city where the man who ..." nests 2, "x, who ..., and who ..." 1 each), and every
    relation noun, plurals included, in the unmasked words."""
    template = masked_template(question)
    of_chain = max((m.group(0).count(" of ") for m in _OF_CHAIN.finditer(template)), default=0)
    lower = question.lower()
    tokens = re.findall(r"[a-z0-9\u2019']+", lower)
    possessive_chain = run = gap = 0
    possessed = 0
    for i, token in enumerate(tokens):
        if _POSSESSIVE.search(token):
            run = run + 1 if gap <= 2 and run else 1
            gap = 0
            possessive_chain = max(possessive_chain, run)
            if i + 1 < len(tokens) and _relation_word(_POSSESSIVE.sub("", tokens[i + 1])):
                possessed += 1
        else:
            gap += 1
    nesting = 0
    for clause in _CLAUSE_BREAK.split(template):
        words = clause.split()
        nesting = max(nesting, sum(w in _RELATIVE for w in words[1:]))
    mentions = sum(_relation_word(_POSSESSIVE.sub("", t)) for t in tokens)
    return {
        "of_chain": float(of_chain),
        "possessive_chain": float(possessive_chain),
        "possessed_relations": float(possessed),
        "clause_nesting": float(nesting),
        "relation_mentions": float(mentions) / 2.0,
    }


# Relation nouns of :func:`_relation_count` beyond :data:`RELATION_NOUNS` (generic, written for
# this project), nouns that name what a place is ("the republic of x"), and verb forms that
# carry one relation each.
_MORE_RELATION_NOUNS = frozenset(
    re.findall(
        r"\w+",
        "population elevation height area genre religion faith award prize occupation profession "
        "citizenship birth death burial founding ceo chairman editor teacher advisor successor "
        "predecessor drummer guitarist screenwriter illustrator sequel adaptation anthem flag "
        "symbol stadium venue ground port grandfather grandmother uncle aunt nephew niece cousin "
        "partner coach manager captain instrument sport position label studio publisher "
        "inventor discoverer designer builder maker owner spouse husband wife",
    )
)
_PLACE_TYPES = frozenset(
    re.findall(
        r"\w+",
        "city town village island province republic kingdom duchy state county region empire "
        "principality municipality borough district",
    )
)
_RELATION_VERBS = frozenset(
    re.findall(
        r"\w+",
        "born die died dies wrote write written writes directed direct directs founded "
        "married marry marries studied study studies educated attend attended attends work "
        "worked works play played plays released release publish published composed compose "
        "produced produce sing sings sang sung recorded record designed design built build "
        "invented discovered located based headquartered buried own owns owned manufactured "
        "manufactures make makes made employ employs employed formed coached manage managed "
        "manages named starred star stars won win wins receive received lead led leads "
        "developed develop created create creates founded operate operated operates",
    )
)


def _relation_count(question: str) -> dict[str, float]:
    """How many relations the masked question goes through: relation nouns and verbs, where a
    noun that names what a name is ("the band x", "the novelist x", "the port town of x": a
    typed mention) and the answer type after a leading "what"/"which" ("which city") do not
    count. A single fact asked in any wording has about one; a chain one per link."""
    words = _merged_words(question)
    answer_type = _answer_type(words, ("what", "which", "whose"))
    relations = typed = 0
    previous_noun = False
    for i, word in enumerate(words):
        base = word[:-1] if word.endswith("s") and word[:-1] in RELATION_NOUNS else word
        noun = base in RELATION_NOUNS or base in _MORE_RELATION_NOUNS
        after = words[i + 1] if i + 1 < len(words) else ""
        after2 = words[i + 2] if i + 2 < len(words) else ""
        determined = any(w in ("the", "a", "an") for w in words[max(0, i - 3) : i]) or (
            i > 0 and words[i - 1] in ("their", "his", "her", "its", "x")
        )
        if (
            determined
            and word not in _STOP
            and word not in _RELATION_VERBS
            and word != "x"
            and (after == "x" or (base in _PLACE_TYPES and after == "of" and after2 == "x"))
        ):
            typed += 1
            previous_noun = False
            continue
        if i in answer_type:
            previous_noun = noun
            continue
        if (noun and not previous_noun) or word in _RELATION_VERBS:
            relations += 1
        previous_noun = noun
    return {"relations": float(relations), "typed_mentions": float(typed)}


def _lexical_table(question: str) -> dict[str, float]:
    words = _WORD.findall(question)
    lower = [w.lower() for w in words]
    n = max(len(words), 1)
    text = question.lower()
    mid = lower[1:]
    entities = ENTITY_PATTERN.findall(question)
    return {
        "log_words": float(np.log1p(n)),
        "wh_words": sum(w in _WH for w in lower) / 3.0,
        "of_the": text.count(" of the ") / 2.0,
        "possessive": (text.count("'s ") + text.count("\u2019s ")) / 2.0,
        "relative": sum(w in ("who", "that", "whose", "which") for w in mid) / 2.0,
        "compare": sum(w in _COMPARE for w in lower) / 2.0,
        "capitals": sum(1 for w in words[1:] if w[:1].isupper()) / 5.0,
        "commas": question.count(",") / 2.0,
        "of_any": sum(w == "of" for w in lower) / 2.0,
        "relative_mid": sum(w in _RELATIVE for w in mid) / 2.0,
        "comparative": float(sum(w in _COMPARATIVE for w in lower)),
        "or_choice": float(" or " in text),
        "entities": len(entities) / 2.0,
        "the_count": sum(w == "the" for w in lower) / 3.0,
        "prepositions": sum(w in _PREPOSITIONS for w in lower) / 4.0,
        "event_verbs": float(sum(w in _VERBS_OF_CHAINS for w in lower)),
        "and_count": float(sum(w == "and" for w in lower)),
        "quoted": float(question.count('"') // 2),
        "content_words": sum(w not in _STOP for w in lower) / 5.0,
        "lower_content": sum(
            1
            for i, w in enumerate(words)
            if w.lower() not in _STOP and not (i and w[:1].isupper()) and not w[:1].isdigit()
        )
        / 5.0,
        "sentences": float(len(re.findall(r"[.?!](?:\s|$)", question.strip()))),
        "ed_words": float(sum(1 for w in mid if w.endswith("ed") and len(w) > 4)),
        "ing_words": float(sum(1 for w in mid if w.endswith("ing") and len(w) > 4)),
        "prep_phrases": float(len(_PREP_PHRASE.findall(text))),
        **_masked_counts(question),
        **_chain_links(question),
        **_compared_relations(question),
        **_chain_length(question),
        **_relation_count(question),
    }


def lexical_features(question: str, names: Sequence[str] = LEXICAL_NAMES) -> np.ndarray:
    """Counts that track how many facts a question chains (its length, wh-words, "of" chains,
    possessives, relative clauses, comparison words, named-entity runs), in ``names`` order."""
    table = _lexical_table(question)
    return np.asarray([table[name] for name in names], dtype=np.float32)


def features(
    vectors: np.ndarray, questions: Sequence[str], names: Sequence[str] = LEXICAL_NAMES
) -> np.ndarray:
    """Model input: unit-length embeddings next to the lexical features of each question."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)
    if questions:
        lex = np.stack([lexical_features(q, names) for q in questions])
    else:
        lex = np.zeros((0, len(names)), dtype=np.float32)
    return np.hstack([vectors, lex.astype(np.float32)])


@dataclass(frozen=True)
class HopModel:
    """Softmax regression: ``softmax(((x - mean) / scale @ weights + bias) / temperature)`` over
    :data:`HOPS`. ``lexical`` names the lexical features in ``x`` (older files used
    :data:`LEXICAL_V1`); ``temperature`` calibrates the probabilities (fit on held-out folds) and
    never changes the argmax."""

    embedder: str
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    meta: dict[str, Any]
    lexical: tuple[str, ...] = LEXICAL_NAMES
    temperature: float = 1.0

    def logits(self, vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        """Uncalibrated scores, one column per hop count."""
        x = (features(vectors, questions, self.lexical) - self.mean) / self.scale
        return np.asarray(x @ self.weights + self.bias, dtype=np.float64)

    def probabilities(self, vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        logits = self.logits(vectors, questions) / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, vectors: np.ndarray, questions: Sequence[str]) -> list[int]:
        if not len(questions):
            return []
        return [HOPS[int(i)] for i in self.logits(vectors, questions).argmax(axis=1)]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "embedder": self.embedder,
            "hops": list(HOPS),
            "lexical": list(self.lexical),
            "temperature": self.temperature,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": self.weights.tolist(),
            "bias": self.bias.tolist(),
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> HopModel:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{where}: not a hop model (expected format {FORMAT!r})")
        try:
            mean = np.asarray(data["mean"], dtype=np.float32)
            scale = np.asarray(data["scale"], dtype=np.float32)
            weights = np.asarray(data["weights"], dtype=np.float32)
            bias = np.asarray(data["bias"], dtype=np.float32)
            temperature = float(data.get("temperature", 1.0))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{where}: a hop model field is missing or not numeric: {exc}"
            ) from exc
        lexical = tuple(str(name) for name in data.get("lexical", LEXICAL_V1))
        unknown = sorted(set(lexical) - set(LEXICAL_KNOWN))
        if unknown:
            raise InputError(
                f"{where}: unknown lexical features {unknown}; this psirag knows {LEXICAL_KNOWN}"
            )
        if not np.isfinite(temperature) or temperature <= 0:
            raise InputError(f"{where}: temperature must be a positive number, got {temperature}")
        d = mean.shape[0] if mean.ndim == 1 else -1
        if (
            scale.shape != (d,)
            or weights.shape != (d, len(HOPS))
            or bias.shape != (len(HOPS),)
            or list(data.get("hops", [])) != list(HOPS)
        ):
            raise InputError(f"{where}: hop model arrays have inconsistent shapes")
        return cls(
            str(data.get("embedder", "")),
            mean,
            scale,
            weights,
            bias,
            dict(data.get("meta", {})),
            lexical,
            temperature,
        )

    def save(self, path: str | Path) -> None:
        """Write atomically (temporary file, then rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n", encoding="utf-8")
        tmp.replace(path)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))


@dataclass(frozen=True)
class HopStage:
    """One step of :class:`HopCascade`: a binary logistic regression scoring whether a question
    needs more than ``above`` hops, ``((x - mean) / scale) @ weights + bias``. The step says yes
    when that score exceeds ``threshold`` (chosen on validation questions); ``temperature``
    calibrates its probability and never changes the decision."""

    above: int
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float = 0.0
    temperature: float = 1.0

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(((x - self.mean) / self.scale) @ self.weights + self.bias)

    def to_json(self) -> dict[str, Any]:
        return {
            "above": self.above,
            "threshold": self.threshold,
            "temperature": self.temperature,
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": self.weights.tolist(),
            "bias": self.bias,
        }

    @classmethod
    def from_json(cls, data: Any, where: str, dim: int | None) -> HopStage:
        if not isinstance(data, dict):
            raise InputError(f"{where}: a stage must be an object")
        try:
            stage = cls(
                int(data["above"]),
                np.asarray(data["mean"], dtype=np.float32),
                np.asarray(data["scale"], dtype=np.float32),
                np.asarray(data["weights"], dtype=np.float32),
                float(data["bias"]),
                float(data.get("threshold", 0.0)),
                float(data.get("temperature", 1.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: a stage field is missing or not numeric: {exc}") from exc
        d = stage.mean.shape[0] if stage.mean.ndim == 1 else -1
        if (
            d < 1
            or (dim is not None and d != dim)
            or stage.scale.shape != (d,)
            or stage.weights.shape != (d,)
        ):
            raise InputError(f"{where}: stage arrays have inconsistent shapes")
        values = (stage.bias, stage.threshold, stage.temperature)
        if not all(np.isfinite(values)) or stage.temperature <= 0:
            raise InputError(f"{where}: bias, threshold and temperature must be finite numbers")
        if not (np.isfinite(stage.scale).all() and (stage.scale > 0).all()):
            raise InputError(f"{where}: scale must be positive")
        return stage


@dataclass(frozen=True)
class HopCascade:
    """Three yes/no steps in order: more than 1 hop? more than 2? more than 3? A question stops
    at the first step that says no. Each step is a small logistic regression over the same input
    as :class:`HopModel` (MiniLM embedding and lexical features), with its own decision threshold
    and temperature. Why a cascade: single-fact questions are told apart from chains on every
    source, while 2 against 3-4 hops is learnt mostly from MuSiQue-style chains, which a single
    softmax shared with the other sources' conventions did not learn."""

    embedder: str
    stages: tuple[HopStage, ...]
    meta: dict[str, Any]
    lexical: tuple[str, ...] = LEXICAL_NAMES

    def logits(self, vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        """Raw stage scores, one column per step (more than 1, 2, 3 hops)."""
        x = features(vectors, questions, self.lexical).astype(np.float64)
        return np.stack([stage.score(x) for stage in self.stages], axis=1)

    def probabilities(self, vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        """Calibrated probability of each hop count: the chain rule over the steps' calibrated
        probabilities. The prediction follows the thresholds, not the largest of these."""
        scores = self.logits(vectors, questions)
        deeper = np.stack(
            [_sigmoid(scores[:, k] / s.temperature) for k, s in enumerate(self.stages)], axis=1
        )
        out = np.zeros((len(scores), len(HOPS)))
        reach = np.ones(len(scores))
        for k in range(len(self.stages)):
            out[:, k] = reach * (1.0 - deeper[:, k])
            reach = reach * deeper[:, k]
        out[:, len(self.stages)] = reach
        return out

    def predict(self, vectors: np.ndarray, questions: Sequence[str]) -> list[int]:
        if not len(questions):
            return []
        scores = self.logits(vectors, questions)
        says_yes = scores > np.asarray([s.threshold for s in self.stages])
        # The first "no" ends the walk: hops = 1 + the number of leading yes answers.
        leading = np.cumprod(says_yes, axis=1).sum(axis=1)
        return [HOPS[int(n)] for n in leading]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_CASCADE,
            "embedder": self.embedder,
            "hops": list(HOPS),
            "lexical": list(self.lexical),
            "stages": [stage.to_json() for stage in self.stages],
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> HopCascade:
        if not isinstance(data, dict) or data.get("format") != FORMAT_CASCADE:
            raise InputError(f"{where}: not a hop cascade (expected format {FORMAT_CASCADE!r})")
        lexical = tuple(str(name) for name in data.get("lexical", ()))
        unknown = sorted(set(lexical) - set(LEXICAL_KNOWN))
        if not lexical or unknown:
            raise InputError(
                f"{where}: unknown or missing lexical features {unknown}; "
                f"this psirag knows {LEXICAL_KNOWN}"
            )
        raw = data.get("stages")
        if not isinstance(raw, list) or len(raw) != len(HOPS) - 1:
            raise InputError(f"{where}: 'stages' must list {len(HOPS) - 1} steps")
        if list(data.get("hops", [])) != list(HOPS):
            raise InputError(f"{where}: 'hops' must be {list(HOPS)}")
        stages: list[HopStage] = []
        for k, item in enumerate(raw):
            stage = HopStage.from_json(item, f"{where}: stage {k + 1}", None)
            if stages and stage.mean.shape != stages[0].mean.shape:
                raise InputError(f"{where}: stage {k + 1} has another input size")
            if stage.above != HOPS[k]:
                raise InputError(f"{where}: stage {k + 1} must decide 'above' {HOPS[k]}")
            stages.append(stage)
        return cls(
            str(data.get("embedder", "")), tuple(stages), dict(data.get("meta", {})), lexical
        )

    def save(self, path: str | Path) -> None:
        """Write atomically (temporary file, then rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n", encoding="utf-8")
        tmp.replace(path)


HopClassifier = HopModel | HopCascade


def hop_model_from_json(data: Any, where: str) -> HopClassifier:
    """Read either model format (the cascade, or the older softmax)."""
    if isinstance(data, dict) and data.get("format") == FORMAT_CASCADE:
        return HopCascade.from_json(data, where)
    return HopModel.from_json(data, where)


@lru_cache(maxsize=1)
def load_hop_model() -> HopClassifier:
    """The model shipped with the package."""
    resource = resources.files("psirag") / "data" / WEIGHTS_RESOURCE
    try:
        raw = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(
            f"the hop model psirag/data/{WEIGHTS_RESOURCE} is missing from the install; "
            "reinstall psirag or run scripts/train_hops.py"
        ) from exc
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"psirag/data/{WEIGHTS_RESOURCE} is not valid JSON: {exc}") from exc
    return hop_model_from_json(data, f"psirag/data/{WEIGHTS_RESOURCE}")


class HopPredictor:
    """Predicts hop counts with the shipped model and an embedder (MiniLM by default, the one
    the model was trained on; another embedder is refused)."""

    def __init__(self, embedder: Any | None = None, model: HopClassifier | None = None) -> None:
        self.model = model or load_hop_model()
        if embedder is None:
            from psirag.embed import load_embedder

            embedder = load_embedder("minilm")
        if (
            self.model.embedder
            and getattr(embedder, "id", self.model.embedder) != self.model.embedder
        ):
            raise InputError(
                f"the hop model was trained on {self.model.embedder!r} embeddings, "
                f"not {embedder.id!r}"
            )
        self.embedder = embedder

    def predict(self, questions: Sequence[str]) -> list[int]:
        questions = [q.strip() for q in questions]
        if any(not q for q in questions):
            raise InputError("a question to classify is empty")
        if not questions:
            return []
        vectors = np.asarray(self.embedder.embed(questions), dtype=np.float32)
        return self.model.predict(vectors, questions)

    def max_retrievals(self, question: str) -> int:
        return max_retrievals_for(self.predict([question])[0])


def max_retrievals_for(hops: int) -> int:
    """Retrievals after the first for a question of ``hops`` hops: ``hops - 1``, at least 1."""
    return max(1, int(hops) - 1)


__all__ = [
    "AUTO",
    "FORMAT_CASCADE",
    "HOPS",
    "LEXICAL_MASKED",
    "LEXICAL_NAMES",
    "LEXICAL_V1",
    "LEXICAL_V2",
    "HopCascade",
    "HopClassifier",
    "HopModel",
    "HopPredictor",
    "HopStage",
    "features",
    "hop_model_from_json",
    "lexical_features",
    "load_hop_model",
    "masked_template",
    "max_retrievals_for",
]
