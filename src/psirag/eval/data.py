"""Benchmark folders in the ``../shared/data`` format: ``corpus.json`` + ``questions.json``.

The corpus is read exactly as ``psirag index corpus.json`` reads it (one record = one leaf whose
text is ``title\\ntext``), so an evaluated index is the index a user would build. Gold passages
are resolved from ``supporting_passage_ids`` (or, in document-level sets such as QMSum, from
``doc_id``; positions in ``corpus.json``) to their passage strings, the identity Recall@k
compares. Some releases store list fields as strings (``"[4, 6]"``,
``"['Rush']"``); those are parsed back into lists.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psirag.errors import InputError
from psirag.eval.metrics import passage_key
from psirag.ingest import Document, load_documents

DATA_ENV = "PSIRAG_DATA"


def default_data_dir() -> Path:
    """``$PSIRAG_DATA``, else ``shared/data`` beside the repository (the CI layout)."""
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def as_list(value: Any) -> list[Any]:
    """A list field that may arrive as a list, a JSON/Python literal string, a scalar or None."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("["):
            for parse in (json.loads, ast.literal_eval):
                try:
                    parsed = parse(stripped)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(parsed, list):
                    return parsed
        return [value]
    return [value]


@dataclass(frozen=True)
class EvalQuestion:
    """One question with everything the metrics need."""

    id: str
    question: str
    answer: str | None
    """The gold answer the paper scores EM/F1 against (None for summarization sets)."""
    answers: list[str]
    """The answer and its aliases (or the reference summaries when ``answer`` is None)."""
    gold_passages: list[str]
    """Gold passage strings (``title\\ntext``), the identity Recall@k compares."""
    gold_ids: list[str]
    """Positions of the gold passages in ``corpus.json``."""


@dataclass
class EvalDataset:
    """A corpus as index documents, plus the questions."""

    name: str
    folder: Path
    documents: list[Document]
    questions: list[EvalQuestion]
    passage_of: dict[str, str] = field(default_factory=dict)
    """Document id -> its passage string, to map retrieved chunks back to records."""

    def content_hash(self) -> str:
        """sha256 of the documents as indexed: ids, titles and texts (not the file's layout)."""
        h = hashlib.sha256()
        for doc in self.documents:
            for part in (doc.id, doc.title, doc.text, "r" if doc.is_record else "f"):
                h.update(part.encode("utf-8", "surrogatepass"))
                h.update(b"\0")
        return h.hexdigest()

    def record_of(self, document: str, text: str) -> str:
        """The passage string a retrieved chunk belongs to (its own text when unknown)."""
        return self.passage_of.get(document, text)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(
            f"{path} not found; a dataset folder holds corpus.json and questions.json"
        ) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from exc


def load_dataset(folder: str | Path, limit: int | None = None) -> EvalDataset:
    """Read a dataset folder; ``limit`` keeps the first N questions (the corpus stays whole)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"dataset folder {folder} does not exist")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be positive, got {limit}")
    corpus_path = folder / "corpus.json"
    records = _read_json(corpus_path)
    if not isinstance(records, list):
        raise InputError(f"{corpus_path}: expected a list of {{title, text}} records")
    raw_questions = _read_json(folder / "questions.json")
    if not isinstance(raw_questions, list):
        raise InputError(f"{folder / 'questions.json'}: expected a list of questions")

    documents = load_documents([corpus_path], warn=lambda message: None)
    passage_of = {d.id: d.text for d in documents}
    by_position = [
        passage_key(r.get("title"), r.get("text", "")) if isinstance(r, dict) else ""
        for r in records
    ]

    questions: list[EvalQuestion] = []
    for number, q in enumerate(raw_questions[:limit]):
        if not isinstance(q, dict) or not isinstance(q.get("question"), str):
            raise InputError(f"questions.json, question {number}: no 'question' text")
        gold_field = q.get("supporting_passage_ids")
        if gold_field is None:
            # Document-level sets (QMSum) name the one document a question is about by doc_id.
            gold_field = q.get("doc_id")
        gold_ids = [str(i) for i in as_list(gold_field)]
        gold: list[str] = []
        for i in gold_ids:
            try:
                gold.append(by_position[int(i)])
            except (ValueError, IndexError) as exc:
                raise InputError(
                    f"questions.json, question {number}: supporting passage {i!r} is not a "
                    f"position in corpus.json ({len(records)} records)"
                ) from exc
        answer = q.get("answer")
        answers = [str(a) for a in as_list(q.get("answers"))]
        aliases = [str(a) for a in as_list(q.get("answer_aliases"))]
        if answer is not None:
            answer = str(answer)
            answers = list(dict.fromkeys([answer, *answers, *aliases]))
        questions.append(
            EvalQuestion(
                id=str(q.get("id", number)),
                question=q["question"],
                answer=answer,
                answers=answers,
                gold_passages=list(dict.fromkeys(gold)),
                gold_ids=gold_ids,
            )
        )
    return EvalDataset(folder.name, folder, documents, questions, passage_of)


def subcorpus(data: EvalDataset, size: int) -> EvalDataset:
    """A corpus of ``size`` passages: the gold passages of ``data``'s questions, then the other
    passages (distractors) in corpus order until ``size`` is reached; the questions whose gold
    passages are all kept (so every question of ``data``).

    Why: LLM-abstract ablations pay one LLM call per abstract node, so they run on a few hundred
    passages instead of the full corpus, while every evaluated question stays answerable. The
    result is a pure function of its inputs and applying it twice changes nothing.
    """
    if size < 1:
        raise InputError(f"--subcorpus must be positive, got {size}")
    gold = {g for q in data.questions for g in q.gold_passages}
    is_gold = [data.record_of(d.id, d.text) in gold for d in data.documents]
    n_gold = sum(is_gold)
    if n_gold > size:
        raise InputError(
            f"--subcorpus {size} is smaller than the {n_gold} gold passages of the "
            f"{len(data.questions)} evaluated questions; raise it or lower --limit"
        )
    room = size - n_gold
    documents = []
    for doc, golden in zip(data.documents, is_gold, strict=True):
        if golden or room > 0:
            documents.append(doc)
            room -= 0 if golden else 1
    kept = {data.record_of(d.id, d.text) for d in documents}
    questions = [q for q in data.questions if all(g in kept for g in q.gold_passages)]
    ids = {d.id for d in documents}
    passage_of = {k: v for k, v in data.passage_of.items() if k in ids}
    return replace(data, documents=documents, questions=questions, passage_of=passage_of)


__all__ = [
    "DATA_ENV",
    "EvalDataset",
    "EvalQuestion",
    "as_list",
    "default_data_dir",
    "load_dataset",
    "subcorpus",
]
