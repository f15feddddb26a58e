"""Score the paper authors' published per-question outputs with our metrics.

``psi-rag-outputs/<dataset>_<run>.json`` holds ``answers[i]`` and ``retrieved_docs[i]`` (the final
top-5 passage strings) aligned by position with ``<dataset>/questions.json``. Reproducing the
paper's Table 2 numbers from them is the check that our metrics are the paper's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from psirag.errors import InputError
from psirag.eval.data import load_dataset
from psirag.eval.metrics import exact_match, exact_match_max, f1, f1_max, recall_at_k


def score_published_outputs(outputs_path: str | Path, dataset_dir: str | Path) -> dict[str, Any]:
    """Recall@2/5, EM/F1 (against ``answer``) and the alias maxima, as percentages."""
    outputs = json.loads(Path(outputs_path).read_text(encoding="utf-8"))
    answers = outputs.get("answers")
    retrieved = outputs.get("retrieved_docs")
    dataset = load_dataset(dataset_dir)
    n = len(dataset.questions)
    if not isinstance(answers, list) or not isinstance(retrieved, list):
        raise InputError(f"{outputs_path}: expected 'answers' and 'retrieved_docs' lists")
    if len(answers) != n or len(retrieved) != n:
        raise InputError(
            f"{outputs_path}: {len(answers)} answers and {len(retrieved)} retrieval lists for "
            f"{n} questions; they must align by position"
        )
    totals = dict.fromkeys(("recall@2", "recall@5", "em", "f1", "em_alias", "f1_alias"), 0.0)
    for q, pred, docs in zip(dataset.questions, answers, retrieved, strict=True):
        pred = str(pred)
        totals["recall@2"] += recall_at_k(docs, q.gold_passages, 2)
        totals["recall@5"] += recall_at_k(docs, q.gold_passages, 5)
        gold = q.answer if q.answer is not None else q.answers[0]
        totals["em"] += exact_match(pred, gold)
        totals["f1"] += f1(pred, gold)
        totals["em_alias"] += exact_match_max(pred, q.answers)
        totals["f1_alias"] += f1_max(pred, q.answers)
    return {"n_questions": n, **{k: 100 * v / n for k, v in totals.items()}}


__all__ = ["score_published_outputs"]
