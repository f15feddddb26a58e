"""``psirag eval`` end to end on a tiny dataset written here, with the fast hash embedder.

Retrieval-only methods are checked against independent computations (dense by brute force,
psi against ``Index.search``); LLM methods run against a scripted OpenAI-compatible server on
127.0.0.1 through the real client; a second run with the same inputs must build no index and send
no LLM request.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import FakeOpenAIServer, HashEmbedder
from support.datasets import CORPUS, Q_CLUB, Q_OFFICE, Q_VOLCANO, QUESTIONS, write_dataset

from psirag.cli import main
from psirag.config import PROFILES, IndexConfig
from psirag.eval import methods as eval_methods
from psirag.eval.data import load_dataset
from psirag.eval.harness import questions_path, run_eval
from psirag.eval.metrics import recall_at_k
from psirag.eval.settings import EMBEDDER_HOOKS, EvalSettings
from psirag.index import Index

SUB_QUESTION = "Where is the head office of the Calder Group, the hospitality company?"
SUMMARY_KEYS = {
    "recall@2",
    "recall@5",
    "em",
    "f1",
    "em_alias",
    "f1_alias",
    "rouge_l",
    "index_seconds",
    "query_ms_p50",
    "query_ms_p95",
}


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "tiny")


@pytest.fixture
def hash_spec(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(EMBEDDER_HOOKS, "test:hash", HashEmbedder)
    return "test:hash"


@pytest.fixture
def build_counter(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Index.build calls (every index the harness builds goes through it)."""
    calls: list[int] = []
    original = Index.build.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Index], *args: Any, **kwargs: Any) -> Index:
        calls.append(1)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(Index, "build", classmethod(counting))
    return calls


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def passage(i: int) -> str:
    return f"{CORPUS[i][0]}\n{CORPUS[i][1]}"


# --- retrieval only -------------------------------------------------------------------------------


def test_retrieval_only_eval_from_the_cli(
    dataset_dir: Path, tmp_path: Path, hash_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out" / "results.json"
    argv = ["eval", str(dataset_dir), "--embedder", hash_spec, "--cache-dir", str(tmp_path / "c")]
    assert main([*argv, "--output", str(out), "-q", "--bootstrap", "200"]) == 0
    table = capsys.readouterr().out
    for name in ("psi", "psi-tree", "bm25", "dense", "hybrid", "R@2", "R@5"):
        assert name in table

    results = json.loads(out.read_text())
    assert results["dataset"] == "tiny"
    assert results["n_questions"] == 3
    assert list(results["methods"]) == ["psi", "psi-tree", "bm25", "dense", "hybrid"]
    for summary in results["methods"].values():
        assert set(summary) >= SUMMARY_KEYS
        assert 0 <= summary["recall@2"] <= summary["recall@5"] <= 100
        assert summary["em"] is None and summary["f1"] is None and summary["rouge_l"] is None
        assert summary["query_ms_p50"] <= summary["query_ms_p95"]
        assert summary["index_seconds"] >= 0

    rows = read_jsonl(out.parent / "results.questions.jsonl")
    assert len(rows) == 5 * 3
    assert {(r["method"], r["id"]) for r in rows} == {
        (m, q["id"]) for m in results["methods"] for q in QUESTIONS
    }
    for row in rows:
        assert row["answer"] is None
        assert row["question"] in (Q_VOLCANO, Q_OFFICE, Q_CLUB)
        assert 1 <= len(row["retrieved"]) <= 5
        assert all({"id", "doc", "score"} <= set(p) for p in row["retrieved"])
    # Each summary is the mean of its rows.
    for name, summary in results["methods"].items():
        mine = [r["recall@5"] for r in rows if r["method"] == name]
        assert summary["recall@5"] == pytest.approx(100 * np.mean(mine), abs=1e-3)

    # BM25 finds every gold passage of these questions among 10 passages.
    assert results["methods"]["bm25"]["recall@5"] == 100.0

    # dense: brute-force cosine with the same embedder, top 5, scored by hand.
    embedder = HashEmbedder()
    texts = [passage(i) for i in range(len(CORPUS))]
    leaves = embedder.embed(texts)
    dense_rows = {r["id"]: r for r in rows if r["method"] == "dense"}
    for q in QUESTIONS:
        scores = leaves @ embedder.embed([q["question"]])[0]
        top = sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:5]
        assert [p["doc"] for p in dense_rows[q["id"]]["retrieved"]] == [str(i) for i in top]
        gold = [passage(i) for i in q["supporting_passage_ids"]]
        for k in (2, 5):
            expected = recall_at_k([texts[i] for i in top], gold, k)
            assert dense_rows[q["id"]][f"recall@{k}"] == pytest.approx(expected)

    # psi is exactly Index.search with the default settings over the same corpus.
    data = load_dataset(dataset_dir)
    index = Index.build(data.documents, IndexConfig(embedder=hash_spec), embedder=embedder)
    psi_rows = {r["id"]: r for r in rows if r["method"] == "psi"}
    for q in QUESTIONS:
        expected_ids = [p.id for p in index.search(q["question"])]
        assert [p["id"] for p in psi_rows[q["id"]]["retrieved"]] == expected_ids

    # Paired bootstrap of each method against the first.
    assert set(results["comparisons"]) == {f"{m} - psi" for m in list(results["methods"])[1:]}


def test_profile_chooses_psi_search_and_psi_paper_always_runs_the_paper_one(
    dataset_dir: Path, tmp_path: Path, hash_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = load_dataset(dataset_dir)
    embedder = HashEmbedder()
    index = Index.build(data.documents, IndexConfig(embedder=hash_spec), embedder=embedder)
    base = ["eval", str(dataset_dir), "--embedder", hash_spec, "--cache-dir", str(tmp_path / "c")]
    for profile in ("default", "paper"):
        out = tmp_path / profile / "results.json"
        argv = [*base, "--methods", "psi,psi-paper", "--profile", profile, "--output", str(out)]
        assert main([*argv, "-q", "--bootstrap", "0"]) == 0
        capsys.readouterr()
        results = json.loads(out.read_text())
        assert results["settings"]["profile"] == profile
        assert results["settings"]["beam"] == PROFILES[profile].beam
        rows = read_jsonl(out.parent / "results.questions.jsonl")
        for method, config in (("psi", PROFILES[profile]), ("psi-paper", PROFILES["paper"])):
            got = {
                r["id"]: [p["id"] for p in r["retrieved"]] for r in rows if r["method"] == method
            }
            for q in QUESTIONS:
                assert got[q["id"]] == [p.id for p in index.search(q["question"], config=config)]


def test_second_run_with_the_same_inputs_builds_no_index(
    dataset_dir: Path, tmp_path: Path, build_counter: list[int]
) -> None:
    settings = EvalSettings(cache_dir=tmp_path / "cache", bootstrap=0)
    first = run_eval(dataset_dir, settings, embedder=HashEmbedder())
    assert len(build_counter) == 1
    assert first.index_builds == ["psirag"]
    assert first.to_dict()["indexes"]["psirag"]["built"] is True

    second = run_eval(dataset_dir, settings, embedder=HashEmbedder())
    assert len(build_counter) == 1  # nothing built
    assert second.index_builds == []
    info = second.to_dict()["indexes"]["psirag"]
    assert info["built"] is False
    assert info["build_seconds"] == first.to_dict()["indexes"]["psirag"]["build_seconds"]
    assert all(m["index_reused"] for m in second.to_dict()["methods"].values())
    assert [r["retrieved"] for r in second.rows()] == [r["retrieved"] for r in first.rows()]

    # Whatever the index depends on changes the key: index settings, corpus text, embedder.
    run_eval(
        dataset_dir,
        EvalSettings(
            cache_dir=tmp_path / "cache", bootstrap=0, index_config=IndexConfig(max_children=3)
        ),
        embedder=HashEmbedder(),
    )
    assert len(build_counter) == 2
    changed = [*CORPUS[:-1], ("Lisbon", "Lisbon is the capital of Portugal.")]
    other = write_dataset(tmp_path / "tiny2", changed)
    run_eval(other, settings, embedder=HashEmbedder())
    assert len(build_counter) == 3
    run_eval(dataset_dir, settings, embedder=HashEmbedder(dim=32))
    assert len(build_counter) == 4
    run_eval(dataset_dir, settings, embedder=HashEmbedder())
    assert len(build_counter) == 4  # the first entry is still there


def test_a_broken_cache_entry_is_rebuilt(dataset_dir: Path, tmp_path: Path) -> None:
    settings = EvalSettings(cache_dir=tmp_path / "cache", methods=("bm25",), bootstrap=0)
    first = run_eval(dataset_dir, settings, embedder=HashEmbedder())
    entry = Path(first.to_dict()["indexes"]["psirag"]["path"])
    next((entry / "index").rglob("inner_parent*.npy")).write_bytes(b"garbage")
    again = run_eval(dataset_dir, settings, embedder=HashEmbedder())
    assert again.index_builds == ["psirag"]
    assert [r["retrieved"] for r in again.rows()] == [r["retrieved"] for r in first.rows()]


def test_limit_and_registered_methods(
    dataset_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method registered from outside (the hook a RAPTOR tree uses) runs like a built-in."""

    def first_two(ctx: eval_methods.EvalContext) -> eval_methods.Retrieval:
        index, info = ctx.psi_index()
        return eval_methods.Retrieval(
            lambda query, vector: [index.passage(0, 1.0), index.passage(1, 0.5)], info
        )

    monkeypatch.setitem(
        eval_methods.METHODS, "first-two", eval_methods.MethodSpec("first-two", first_two)
    )
    report = run_eval(
        dataset_dir,
        EvalSettings(cache_dir=tmp_path / "c", methods=("first-two",), limit=2, bootstrap=0),
        embedder=HashEmbedder(),
    )
    summary = report.to_dict()["methods"]["first-two"]
    assert report.n_questions == 2
    # q0's gold (passage 1) is retrieved, q1's two gold passages are not: (1 + 0) / 2
    assert summary["recall@2"] == 50.0 and summary["recall@5"] == 50.0


def test_bad_requests_fail_with_a_clear_message(
    dataset_dir: Path, tmp_path: Path, hash_spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", str(dataset_dir), "--embedder", hash_spec, "--cache-dir", str(tmp_path)]
    assert main([*base, "--methods", "psi,nonsense", "-q"]) == 2
    assert "unknown method 'nonsense'" in capsys.readouterr().err
    assert main([*base, "--methods", "psi+agent", "-q"]) == 2
    assert "need an LLM" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing"), "--embedder", hash_spec, "-q"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_list_fields_stored_as_strings_are_read(tmp_path: Path) -> None:
    folder = write_dataset(tmp_path / "strings")
    questions = [
        {
            "id": "s0",
            "question": Q_CLUB,
            "answer": "Arsenal",
            "answers": "['Arsenal', 'The Gunners']",
            "supporting_passage_ids": "[2, 3]",
        }
    ]
    (folder / "questions.json").write_text(json.dumps(questions), encoding="utf-8")
    q = load_dataset(folder).questions[0]
    assert q.answers == ["Arsenal", "The Gunners"]
    assert q.gold_passages == [passage(2), passage(3)]


# --- with an LLM ----------------------------------------------------------------------------------


def answer_from_the_question(body: dict[str, Any]) -> str:
    """Answers from the question asked, as a model that read the documents would."""
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    turn = users[-1]
    question = re.search(r"^Question: (.*)$", turn, re.MULTILINE).group(1)  # type: ignore[union-attr]
    left = int(re.search(r"^Retrievals left: (\d+)$", turn, re.MULTILINE).group(1))  # type: ignore[union-attr]
    if question == Q_VOLCANO:
        return "Thought: The documents say Vesuvius destroyed Pompeii.\nAnswer: Vesuvius"
    if question == Q_CLUB:
        return "Thought: Arsenal is based in north London.\nAnswer: Arsenal"
    if question == Q_OFFICE:
        if left > 0:
            return (
                "Thought: The Calder Group owns the hotel; where is its office?\n"
                f"Retrieve: {SUB_QUESTION}"
            )
        # One look at the documents (no agent) gives the alias; two give the answer.
        return "Answer: Lisbon" if len(users) > 1 else "Thought: It is Lisboa.\nAnswer: Lisboa"
    return "Answer: Not mentioned"


@pytest.mark.fake_llm(responder=answer_from_the_question, usage=(50, 9))
def test_llm_answers_and_the_agent_over_http(
    dataset_dir: Path,
    tmp_path: Path,
    hash_spec: str,
    server: FakeOpenAIServer,
    build_counter: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "qa.json"
    argv = [
        "eval",
        str(dataset_dir),
        "--methods",
        "psi,psi+agent",
        "--llm",
        server.spec,
        "--embedder",
        hash_spec,
        "--cache-dir",
        str(tmp_path / "cache"),
        "--output",
        str(out),
        "-q",
    ]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "psi+agent" in table and "EM" in table

    results = json.loads(out.read_text())
    assert results["llm"] == server.spec
    psi, agent = results["methods"]["psi"], results["methods"]["psi+agent"]
    # psi, one call each: Vesuvius (EM 1), Lisboa (EM 0, alias 1), Arsenal vs "Arsenal F.C."
    # (EM 0, F1 2/3, alias 1).
    assert psi["em"] == pytest.approx(100 / 3, abs=1e-3)
    assert psi["f1"] == pytest.approx(100 * (1 + 0 + 2 / 3) / 3, abs=1e-3)
    assert psi["em_alias"] == 100.0 and psi["f1_alias"] == 100.0
    # psi+agent retrieves again for the office question and answers Lisbon.
    assert agent["em"] == pytest.approx(200 / 3, abs=1e-3)
    assert agent["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3) / 3, abs=1e-3)
    assert agent["retrievals_per_question"] == pytest.approx(4 / 3, abs=1e-3)
    assert psi["rouge_l"] is None
    # reply-format accounting: every scripted reply carries a proper marker line
    assert (psi["replies"], agent["replies"]) == (3, 4)
    assert psi["well_formed_pct"] == agent["well_formed_pct"] == 100.0
    assert agent["rescued_replies"] == agent["forced_turns"] == agent["empty_answers"] == 0

    rows = {(r["method"], r["id"]): r for r in read_jsonl(questions_path(out))}
    assert len(rows) == 6
    assert rows[("psi", "q1")]["answer"] == "Lisboa"
    assert rows[("psi", "q1")]["em"] == 0.0 and rows[("psi", "q1")]["em_alias"] == 1.0
    assert rows[("psi+agent", "q1")]["answer"] == "Lisbon"
    assert rows[("psi+agent", "q1")]["queries"] == [Q_OFFICE, SUB_QUESTION]
    assert rows[("psi+agent", "q1")]["gold"] == "Lisbon"
    assert rows[("psi", "q2")]["f1"] == pytest.approx(2 / 3)
    for row in rows.values():
        assert row["retrieved"] and all("score" in p for p in row["retrieved"])
    # What the model saw: the retrieved passages, and the question.
    first = server.requests[0]
    assert first["model"] == "m"
    shown = first["messages"][-1]["content"]
    assert "Question: " in shown and "Retrieved documents:" in shown
    assert len(server.requests) == 3 + 4  # psi: 1 call each; agent: 1 + 2 + 1
    assert len(build_counter) == 1

    # Same inputs again: every reply from the LLM cache, the index from the index cache.
    assert main(argv) == 0
    assert len(server.requests) == 7
    assert len(build_counter) == 1
    assert json.loads(out.read_text())["methods"]["psi+agent"]["em"] == agent["em"]
    assert results["settings"]["answer_check"] is True
    # Every scripted answer is in its documents, so the paper's loop asks nothing new either.
    assert main([*argv, "--no-answer-check"]) == 0
    assert json.loads(out.read_text())["settings"]["answer_check"] is False
    assert len(server.requests) == 7
    assert main([*argv, "--names-check", "off"]) == 0
    settings = json.loads(out.read_text())["settings"]
    assert (settings["answer_check"], settings["names_check"]) == (True, "off")
    assert len(server.requests) == 7
