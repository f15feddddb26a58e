"""The paper's evaluation protocol (SPEC 3), written out so that every number is reproducible.

- Recall@k compares *passage identity*: the exact string ``title + "\\n" + text``, the unit the
  paper's Recall@k counts. A retrieved list may hold a gold passage once or not at all.
- EM and F1 use SQuAD's answer normalisation (lowercase, strip punctuation, drop the articles
  a/an/the, collapse whitespace) against the question's ``answer`` field; the ``*_max`` forms take
  the best over a list of aliases (the secondary column).
- ROUGE-L is the LCS-based F-measure over lowercased alphanumeric tokens with Porter stemming of
  tokens longer than three characters (the convention of the common ``rouge-score`` package), via
  PyStemmer, which the project already depends on.
- ``paired_bootstrap_ci`` gives a 95% interval for the difference of two methods' mean scores on
  the same questions, resampling questions (not scores) so that the pairing is kept.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import Stemmer

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ROUGE_TOKEN = re.compile(r"[a-z0-9]+")
_PORTER = Stemmer.Stemmer("porter")
_STEM_MIN_LEN = 4
"""Tokens shorter than this are left unstemmed (as rouge-score does: 'was' must not become 'wa')."""


def passage_key(title: str | None, text: str) -> str:
    """The paper's retrieval unit: ``title + "\\n" + text`` (just ``text`` without a title)."""
    return f"{title}\n{text}" if title else text


# --- retrieval ------------------------------------------------------------------------------------


def recall_at_k(retrieved_texts: Sequence[str], gold_texts: Iterable[str], k: int) -> float:
    """Fraction of the distinct gold passages found among the first ``k`` retrieved ones."""
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    gold = set(gold_texts)
    if not gold:
        raise ValueError("recall is undefined without gold passages")
    return len(gold.intersection(retrieved_texts[:k])) / len(gold)


def citation_precision(cited_texts: Sequence[str], gold_texts: Iterable[str]) -> float | None:
    """Share of the distinct cited passages that are gold (issue 16, item 5); None when the
    answer cites nothing (precision is then undefined, and such answers are counted apart)."""
    cited = set(cited_texts)
    if not cited:
        return None
    return len(cited.intersection(gold_texts)) / len(cited)


# --- short answers (SQuAD) ------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(pred: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1(pred: str, gold: str) -> float:
    """Token-level F1 of the normalised answers (bags of tokens, so repeats count).

    Two answers that normalise to nothing agree (1.0, matching their exact match); one empty side
    scores 0.
    """
    p = normalize_answer(pred).split()
    g = normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision = same / len(p)
    recall = same / len(g)
    return 2 * precision * recall / (precision + recall)


def _best(pred: str, golds: Iterable[str], score: Callable[[str, str], float]) -> float:
    values = [score(pred, g) for g in golds]
    if not values:
        raise ValueError("no gold answers to compare with")
    return max(values)


def exact_match_max(pred: str, golds: Iterable[str]) -> float:
    """Best exact match over a list of gold answers (the answer and its aliases)."""
    return _best(pred, golds, exact_match)


def f1_max(pred: str, golds: Iterable[str]) -> float:
    """Best F1 over a list of gold answers (the answer and its aliases)."""
    return _best(pred, golds, f1)


# --- summaries (ROUGE-L) --------------------------------------------------------------------------


def rouge_tokens(text: str) -> list[str]:
    """Lowercased alphanumeric runs, Porter-stemmed when longer than three characters."""
    tokens = _ROUGE_TOKEN.findall(text.lower())
    return [_PORTER.stemWord(t) if len(t) >= _STEM_MIN_LEN else t for t in tokens]


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence, in O(len(a) * len(b)) time, O(len(b)) memory."""
    if len(a) < len(b):
        a, b = b, a
    row = [0] * (len(b) + 1)
    for x in a:
        diagonal = 0
        for j, y in enumerate(b, start=1):
            above = row[j]
            row[j] = diagonal + 1 if x == y else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def rouge_l(pred: str, ref: str) -> float:
    """ROUGE-L F-measure (beta = 1) of a prediction against one reference."""
    p = rouge_tokens(pred)
    r = rouge_tokens(ref)
    if not p or not r:
        return 0.0
    common = lcs_length(p, r)
    if common == 0:
        return 0.0
    precision = common / len(p)
    recall = common / len(r)
    return 2 * precision * recall / (precision + recall)


def rouge_l_max(pred: str, refs: Iterable[str]) -> float:
    """Best ROUGE-L over several references."""
    return _best(pred, refs, rouge_l)


def rouge_n_recall(context: str, ref: str, n: int = 1) -> float:
    """ROUGE-N recall of a reference against a retrieved context: the share of the reference's
    n-grams (counted with multiplicity, clipped by the context's counts) the context holds.

    Measures how much of a reference summary the text handed to a summarizer could supply,
    before any LLM: recall, not F, because the context is meant to be much longer.
    """
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    r = rouge_tokens(ref)
    c = rouge_tokens(context)
    ref_grams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
    if not ref_grams:
        return 0.0
    ctx_grams = Counter(tuple(c[i : i + n]) for i in range(len(c) - n + 1))
    hit = sum(min(count, ctx_grams[g]) for g, count in ref_grams.items())
    return hit / sum(ref_grams.values())


def segment_coverage(positions: Iterable[int], total: int, parts: int = 10) -> float:
    """Share of ``parts`` equal stretches of a ``total``-long sequence (a meeting's chunks in
    order) that hold at least one of ``positions``: how evenly a context spans a document."""
    if total < 1 or parts < 1:
        raise ValueError(f"total and parts must be positive, got {total} and {parts}")
    touched = set()
    for p in positions:
        if not 0 <= p < total:
            raise ValueError(f"position {p} lies outside 0..{total - 1}")
        touched.add(p * parts // total)
    return len(touched) / min(parts, total)


# --- significance ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapCI:
    """Mean of ``a - b`` and its percentile bootstrap interval."""

    diff: float
    low: float
    high: float
    n: int
    """Resamples drawn."""

    @property
    def significant(self) -> bool:
        """The interval excludes 0."""
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, float | int | bool]:
        return {
            "diff": self.diff,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "significant": self.significant,
        }


def paired_bootstrap_ci(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    n: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI:
    """95% percentile interval of ``mean(a) - mean(b)`` over ``n`` resamples of the questions.

    ``a[i]`` and ``b[i]`` are two methods' scores on question ``i``; each resample draws question
    indices with replacement and takes the mean difference over them. Deterministic for a seed.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"need two 1-d arrays of equal length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("no scores to compare")
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    d = x - y
    rng = np.random.default_rng(seed)
    means = np.empty(n, dtype=np.float64)
    # Chunks keep memory at ~8 MB of indices whatever the number of questions.
    step = max(1, 1_000_000 // d.size)
    for start in range(0, n, step):
        stop = min(n, start + step)
        idx = rng.integers(0, d.size, size=(stop - start, d.size))
        means[start:stop] = d[idx].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return BootstrapCI(float(d.mean()), float(low), float(high), n)


__all__ = [
    "BootstrapCI",
    "exact_match",
    "exact_match_max",
    "f1",
    "f1_max",
    "lcs_length",
    "normalize_answer",
    "paired_bootstrap_ci",
    "passage_key",
    "recall_at_k",
    "rouge_l",
    "rouge_l_max",
    "rouge_n_recall",
    "rouge_tokens",
    "segment_coverage",
]
