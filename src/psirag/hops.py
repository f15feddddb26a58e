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
LEXICAL_NAMES = (
    "log_words",
    "wh_words",
    "of_the",
    "possessive",
    "relative",
    "compare",
    "capitals",
    "commas",
)


def lexical_features(question: str) -> np.ndarray:
    """A few counts that track how many facts a question chains: its length, wh-words,
    "of the" chains, possessives, relative clauses, comparison words, capitalised words."""
    words = _WORD.findall(question)
    lower = [w.lower() for w in words]
    n = max(len(words), 1)
    text = question.lower()
    feats = [
        np.log1p(n),
        sum(w in _WH for w in lower) / 3.0,
        text.count(" of the ") / 2.0,
        (text.count("'s ") + text.count("’s ")) / 2.0,
        sum(w in ("who", "that", "whose", "which") for w in lower[1:]) / 2.0,
        sum(w in _COMPARE for w in lower) / 2.0,
        sum(1 for w in words[1:] if w[:1].isupper()) / 5.0,
        question.count(",") / 2.0,
    ]
    return np.asarray(feats, dtype=np.float32)


def features(vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
    """Model input: unit-length embeddings next to the lexical features of each question."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)
    lex = np.stack([lexical_features(q) for q in questions]) if questions else np.zeros((0, 8))
    return np.hstack([vectors, lex.astype(np.float32)])


@dataclass(frozen=True)
class HopModel:
    """Softmax regression: ``softmax((x - mean) / scale @ weights + bias)`` over :data:`HOPS`."""

    embedder: str
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    meta: dict[str, Any]

    def probabilities(self, vectors: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        x = (features(vectors, questions) - self.mean) / self.scale
        logits = x @ self.weights + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, vectors: np.ndarray, questions: Sequence[str]) -> list[int]:
        if not len(questions):
            return []
        return [HOPS[int(i)] for i in self.probabilities(vectors, questions).argmax(axis=1)]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "embedder": self.embedder,
            "hops": list(HOPS),
            "lexical": list(LEXICAL_NAMES),
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
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{where}: a hop model field is missing or not numeric: {exc}"
            ) from exc
        d = mean.shape[0] if mean.ndim == 1 else -1
        if (
            scale.shape != (d,)
            or weights.shape != (d, len(HOPS))
            or bias.shape != (len(HOPS),)
            or list(data.get("hops", [])) != list(HOPS)
        ):
            raise InputError(f"{where}: hop model arrays have inconsistent shapes")
        return cls(
            str(data.get("embedder", "")), mean, scale, weights, bias, dict(data.get("meta", {}))
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
    "HopModel",
    "HopPredictor",
    "features",
    "lexical_features",
    "load_hop_model",
    "max_retrievals_for",
]
