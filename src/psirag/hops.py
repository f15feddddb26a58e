"""The query-hop discriminator (paper App. E.2): predicts from a question how many hops (1-4) it
needs, so that ``--max-retrievals auto`` can set the agent's budget per question.

The model is a softmax regression over the MiniLM question embedding plus a few lexical features
(:func:`lexical_features`), trained by ``scripts/train_hops.py``. Its weights ship in the package
as ``psirag/data/hops-minilm.json`` (plain JSON, no pickle) and load offline; prediction is a
matrix product in numpy.

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
#: Lexical features of the shipped model (v2): question structure that does not depend on the
#: topic, so that it carries over to question templates the model never saw.
LEXICAL_NAMES = (
    "log_words",
    "wh_words",
    "of_the",
    "possessive",
    "relative",
    "compare",
    "capitals",
    "commas",
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
        unknown = sorted(set(lexical) - set(LEXICAL_NAMES))
        if unknown:
            raise InputError(
                f"{where}: unknown lexical features {unknown}; this psirag knows {LEXICAL_NAMES}"
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


@lru_cache(maxsize=1)
def load_hop_model() -> HopModel:
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
    return HopModel.from_json(data, f"psirag/data/{WEIGHTS_RESOURCE}")


class HopPredictor:
    """Predicts hop counts with the shipped model and an embedder (MiniLM by default, the one
    the model was trained on; another embedder is refused)."""

    def __init__(self, embedder: Any | None = None, model: HopModel | None = None) -> None:
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
    "HOPS",
    "LEXICAL_NAMES",
    "LEXICAL_V1",
    "HopModel",
    "HopPredictor",
    "features",
    "lexical_features",
    "load_hop_model",
    "max_retrievals_for",
]
