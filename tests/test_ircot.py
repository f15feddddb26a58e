"""The IRCoT baseline: the loop over HTTP against a scripted server, and ``psirag eval`` with
``NAME+ircot`` end to end.

The scripted OpenAI-compatible server on 127.0.0.1 plays the model through the real
``OpenAIChat`` and ``LLMClient``, so the tests see exactly the requests a server would receive.
Retrieval in the loop tests is a small lexical stand-in that records its queries; the eval test
runs the real ``hybrid`` retriever over a tiny dataset with the hash embedder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import FakeOpenAIServer, HashEmbedder, client_for
from support.agents import CORPUS, Q_OFFICE, QUESTIONS, FakeIndex, ids
from support.agents import DOCS as AGENT_DOCS
from support.datasets import Q_VOLCANO, write_dataset

from psirag.agent import NOT_MENTIONED, merge_evidence
from psirag.agent.ircot import IRCoT, first_sentence, read_sentence, says_answer
from psirag.cli import main
from psirag.errors import InputError
from psirag.eval.harness import questions_path, run_eval
from psirag.eval.methods import check_method
from psirag.eval.settings import EMBEDDER_HOOKS, EvalSettings
from psirag.prompts import AGENT_TURN_STOPS, agent_system_prompt, ircot_system_prompt

# --- the scripted server and the stand-in index ---------------------------------------------------


DOCS = {key: doc for key, doc in AGENT_DOCS.items() if key != "quiz"} | {
    "lisbon": ("Lisbon", "Lisbon is the capital of Portugal, on the Tagus estuary."),
}
"""The agent tests' documents with a Lisbon page and no quiz sheet."""


def stand_in(k: int = 2) -> FakeIndex:
    """The agent tests' lexical stand-in index over this file's DOCS."""
    return FakeIndex(k, DOCS)


QUESTION = "Which city hosts the headquarters of the owner of the Blue Harbour Hotel?"
SENTENCE_1 = "The Blue Harbour Hotel has been owned by the Calder Group since 1987."
SENTENCE_2 = "The Calder Group, a hospitality company, has its head office in Lisbon."


# --- reading a reasoning reply ------------------------------------------------------------------


def test_reading_a_sentence() -> None:
    assert read_sentence(f"{SENTENCE_1} Then I need its office.\nMore text.") == (
        SENTENCE_1,
        f"{SENTENCE_1} Then I need its office.",
    )
    # Labels, list marks and quotes around the line go; a blank first line is skipped.
    assert read_sentence(f'\n  2. **Next sentence:** "{SENTENCE_1}"')[0] == SENTENCE_1
    assert read_sentence(f"Turn 3: {SENTENCE_2}")[0] == SENTENCE_2
    assert read_sentence("<think>the hotel...</think>\nSo the answer is Lisbon.")[0] == (
        "So the answer is Lisbon."
    )
    assert read_sentence("   \n\n") == ("", "")
    # Initials and short abbreviations do not end a sentence; numbers and names do.
    assert first_sentence("J. R. R. Tolkien wrote it. It sold well.") == (
        "J. R. R. Tolkien wrote it."
    )
    assert first_sentence("St. Louis lies on the Mississippi. It is in Missouri.") == (
        "St. Louis lies on the Mississippi."
    )
    assert first_sentence("He died in 1887. So the answer is 1887.") == "He died in 1887."
    assert first_sentence("Its population is 3.5 million") == "Its population is 3.5 million"


def test_what_ends_the_chain() -> None:
    assert says_answer("So the answer is Lisbon.")
    assert says_answer("Hence THE ANSWER  IS: Lisbon")
    assert says_answer("**Answer:** Lisbon")
    assert not says_answer(SENTENCE_1)
    assert not says_answer("The answers in the documents differ.")
    assert not says_answer("The question is answered below.")


# --- the loop -----------------------------------------------------------------------------------


def test_multi_step_the_sentence_is_the_next_query(server: FakeOpenAIServer) -> None:
    index = stand_in()
    assert ids(index.search(QUESTION)) == ["hotel", "portmere"]  # the office is not there yet
    assert ids(index.search(SENTENCE_1)) == ["hotel", "calder"]
    index.queries.clear()
    server.script(
        SENTENCE_1,
        "So the answer is Lisbon.",
        "Thought: The Calder Group owns the hotel; its head office is in Lisbon.\nAnswer: Lisbon",
        "never read",
    )
    llm = client_for(server)
    retrieved: list[str] = []
    result = IRCoT(llm, index.search, max_retrievals=3, stage="test-ircot").run(
        QUESTION, on_retrieval=lambda s: retrieved.append(s.query)
    )

    assert result.answer == "Lisbon"
    assert index.queries == [QUESTION, SENTENCE_1] == retrieved  # the sentence was the query
    assert [s.query for s in result.steps] == [QUESTION, SENTENCE_1]
    assert [s.action for s in result.steps] == ["retrieve", "answer"]
    assert [s.thought for s in result.steps] == [SENTENCE_1, "So the answer is Lisbon."]
    assert [s.remaining for s in result.steps] == [3, 2]
    assert result.chain == [SENTENCE_1, "So the answer is Lisbon."]
    assert result.stop == "answer"
    assert len(server.requests) == 3 and server.pending_replies == ["never read"]

    # Reasoning requests: one sentence (newline stop, small cap, temperature 0), every passage
    # collected so far and the chain so far.
    first = server.requests[0]
    assert (first["max_tokens"], first["stop"], first["temperature"]) == (64, ["\n"], 0.0)
    assert server.system(0) == ircot_system_prompt()
    assert "Reasoning so far: (nothing yet)" in server.last_user(0)
    assert f"Question: {QUESTION}" in server.last_user(0)
    assert "Its head office is in Lisbon" not in server.last_user(0)
    assert f"Reasoning so far: {SENTENCE_1}" in server.last_user(1)
    for text in ("Portmere is a fishing town", "Its head office is in Lisbon", "owned by"):
        assert text in server.last_user(1)
    assert server.last_user(1).count("[") == 3  # hotel, portmere, calder: the repeat is shown once

    # The reader is the agent with no retrievals left, over the collected passages.
    reader = server.requests[2]
    assert reader["messages"][0]["content"] == agent_system_prompt(0)
    reader_turn = server.last_user(2)
    assert "Retrievals left: 0" in reader_turn and "cannot retrieve any more" in reader_turn
    assert "Reasoning so far" not in server.last_user(2)
    assert reader["max_tokens"] == 256 and reader["stop"] == list(AGENT_TURN_STOPS)
    assert result.reader is not None and result.reader.action == "answer"

    stats = result.stats
    assert (stats.llm_calls, stats.retrievals) == (3, 2)
    assert stats.reasoning_calls == 2  # type: ignore[attr-defined]
    assert (stats.well_formed, stats.rescued, stats.unparsed) == (1, 0, 0)
    assert llm.usage["test-ircot"]["calls"] == 3


def test_evidence_merges_the_steps_by_rank_fusion(server: FakeOpenAIServer) -> None:
    index = stand_in()
    server.script(SENTENCE_1, "Answer: Lisbon")
    result = IRCoT(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    steps = [ids(s.passages) for s in result.steps]
    assert steps == [["hotel", "portmere"], ["hotel", "calder"]]
    # hotel: 1/61 + 1/61; portmere and calder tie at 1/62: portmere came at the earlier step.
    assert ids(result.evidence) == ["hotel", "portmere", "calder"]
    assert result.evidence[0].score == pytest.approx(2 / 61)
    assert ids(result.evidence) == ids(merge_evidence([s.passages for s in result.steps]))
    # The reader reads them in that order.
    shown = server.last_user(1)
    order = [shown.index(t) for t in ("owned by", "fishing town", "Its head office")]
    assert order == sorted(order)


def test_stop_on_answer_is(server: FakeOpenAIServer) -> None:
    index = stand_in()
    server.script("Calder owns it, so THE ANSWER IS Lisbon.", "Answer: Lisbon")
    result = IRCoT(client_for(server), index.search, max_retrievals=3).run(QUESTION)
    assert index.queries == [QUESTION]  # no second retrieval
    assert result.stop == "answer" and result.answer == "Lisbon"
    assert [s.action for s in result.steps] == ["answer"]
    assert len(server.requests) == 2


def test_step_cap_holds_whatever_the_model_says(server: FakeOpenAIServer) -> None:
    index = stand_in()
    sentences = [f"The Calder Group owns hotel number {i}." for i in range(6)]
    server.script(sentences[0], sentences[1], "Answer: Lisbon", *sentences[2:])
    result = IRCoT(client_for(server), index.search, max_retrievals=2).run(QUESTION)
    # The first retrieval and two more; no reasoning call after the last one, then the reader.
    assert index.queries == [QUESTION, sentences[0], sentences[1]]
    assert len(server.requests) == 3
    assert server.pending_replies == sentences[2:]
    assert result.answer == "Lisbon" and result.stop == "cap"
    assert [s.action for s in result.steps] == ["retrieve", "retrieve", "answer"]
    assert result.stats.retrievals == 3 and result.stats.reasoning_calls == 2  # type: ignore[attr-defined]


def test_no_extra_retrievals_is_one_answer_call(server: FakeOpenAIServer) -> None:
    index = stand_in()
    server.script("Thought: Calder owns it.\nAnswer: Calder Group")
    result = IRCoT(client_for(server), index.search, max_retrievals=0).run(QUESTION)
    assert index.queries == [QUESTION] and len(server.requests) == 1
    assert result.answer == "Calder Group" and result.chain == []


def test_not_mentioned_on_garbage(server: FakeOpenAIServer) -> None:
    index = stand_in()
    # An empty reasoning reply is retried once without the newline stop; still empty: the chain
    # ends. The reader's reply and its forced-answer follow-up have no usable answer.
    server.script("", "   ", "I am not sure\nwhat to say", "nothing here\nat all")
    result = IRCoT(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert result.answer == NOT_MENTIONED
    assert result.stop == "empty" and result.chain == []
    assert index.queries == [QUESTION]
    assert len(server.requests) == 4
    assert server.requests[0]["stop"] == ["\n"] and "stop" not in server.requests[1]
    assert [s.action for s in result.steps] == ["no_answer"]
    stats = result.stats
    assert stats.empty_sentences == 1 and stats.sentence_retries == 1  # type: ignore[attr-defined]
    assert (stats.well_formed, stats.unparsed, stats.forced_turns) == (0, 2, 1)
    assert stats.llm_calls == 4


def test_result_serialises_like_the_agents(server: FakeOpenAIServer) -> None:
    server.script(SENTENCE_1, "Thought: t\nAnswer: Lisbon")
    result = IRCoT(client_for(server), stand_in().search).run(QUESTION)
    doc = json.loads(json.dumps(result.to_dict()))
    assert {"answer", "steps", "evidence", "question", "stats"} <= set(doc)
    assert doc["chain"] == [SENTENCE_1] and doc["stop"] == "cap"
    assert doc["reader"]["action"] == "answer" and doc["reader"]["thought"] == "t"
    assert [s["query"] for s in doc["steps"]] == [QUESTION, SENTENCE_1]
    assert doc["stats"]["llm_calls"] == 2 and doc["stats"]["reasoning_calls"] == 1


def test_bad_arguments(server: FakeOpenAIServer) -> None:
    with pytest.raises(InputError):
        IRCoT(client_for(server), stand_in().search).run("  ")
    with pytest.raises(ValueError):
        IRCoT(client_for(server), stand_in().search, max_retrievals=-1)
    with pytest.raises(ValueError):
        IRCoT(client_for(server), stand_in().search, evidence_merge="nope")  # type: ignore[arg-type]
    assert server.requests == []


# --- psirag eval ----------------------------------------------------------------------------------

OWNER_SENTENCE = "The Blue Harbour Hotel is owned by the Calder Group, a hospitality company."


def model_reply(body: dict[str, Any]) -> str:
    """A model that reads what it is shown: IRCoT reasoning requests and agent-format turns."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    question = re.search(r"^Question: (.*)$", user, re.MULTILINE).group(1)  # type: ignore[union-attr]
    if "Write the next sentence of the reasoning." in user:
        if question == Q_VOLCANO:
            return "Vesuvius destroyed Pompeii, so the answer is Vesuvius."
        return OWNER_SENTENCE
    if question == Q_VOLCANO:
        return "Thought: It says so.\nAnswer: Vesuvius"
    if "Its head office is in Lisbon" in user:
        return "Thought: Calder owns the hotel; its office is in Lisbon.\nAnswer: Lisbon"
    return "Answer: Not mentioned"


@pytest.fixture
def dataset_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setitem(EMBEDDER_HOOKS, "test:hash", HashEmbedder)
    monkeypatch.delenv("PSIRAG_LLM", raising=False)
    return write_dataset(tmp_path / "tiny", CORPUS, QUESTIONS)


def test_eval_hybrid_ircot_end_to_end(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.responder = model_reply
    out = tmp_path / "qa.json"
    argv = [
        "eval",
        str(dataset_dir),
        "--methods",
        "hybrid+agent,hybrid+ircot",
        "--llm",
        server.spec,
        "--embedder",
        "test:hash",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--output",
        str(out),
        "--bootstrap",
        "0",
        "-q",
    ]
    assert main(argv) == 0
    assert "hybrid+ircot" in capsys.readouterr().out

    results = json.loads(out.read_text())
    agent, ircot = results["methods"]["hybrid+agent"], results["methods"]["hybrid+ircot"]
    assert set(ircot) == set(agent)  # the same summary fields
    assert ircot["em"] == 100.0
    # q0 stops on "answer is" after the first retrieval; q1 searches with the model's sentence.
    assert ircot["retrievals_per_question"] == 1.5
    assert ircot["llm_calls"] == 4 and ircot["replies"] == 2 and ircot["well_formed_pct"] == 100.0

    rows = {(r["method"], r["id"]): r for r in map(json.loads, questions_path(out).open())}
    assert len(rows) == 4
    assert set(rows[("hybrid+ircot", "q1")]) == set(rows[("hybrid+agent", "q1")])
    q1 = rows[("hybrid+ircot", "q1")]
    assert q1["queries"] == [Q_OFFICE, OWNER_SENTENCE]
    assert q1["actions"] == ["retrieve", "answer"]
    assert q1["answer"] == "Lisbon" and q1["em"] == 1.0
    assert q1["agent_stats"]["reasoning_calls"] == 1 and q1["llm_calls"] == 2
    assert q1["answer_ms"] >= 0 and q1["query_ms"] >= 0
    assert {p["title"] for p in q1["retrieved"]} >= {"Calder Group", "Blue Harbour Hotel"}
    assert rows[("hybrid+ircot", "q0")]["queries"] == [Q_VOLCANO]
    sent = len(server.requests)
    reasoning = [r for r in server.requests if r.get("stop") == ["\n"]]
    assert len(reasoning) == 2

    # Same inputs again: every reply from the LLM cache.
    assert main(argv) == 0
    assert len(server.requests) == sent


def test_eval_ircot_counts_its_own_stage(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer
) -> None:
    server.responder = model_reply
    llm = client_for(server)
    settings = EvalSettings(
        methods=("bm25+ircot",), cache_dir=tmp_path / "c", embedder="test:hash", bootstrap=0
    )
    report = run_eval(dataset_dir, settings, llm=llm)
    assert report.methods[0].mode == "ircot" and not report.methods[0].agent
    assert llm.usage["eval-ircot"]["calls"] == 4
    assert set(llm.usage) == {"eval-ircot"}


def test_check_method_modes() -> None:
    assert check_method("psi") == ("psi", "none")
    assert check_method("psi+agent") == ("psi", "agent")
    assert check_method("hybrid+ircot") == ("hybrid", "ircot")
    with pytest.raises(InputError, match="unknown method 'nonsense\\+ircot'"):
        check_method("nonsense+ircot")
    with pytest.raises(InputError, match="unknown method suffix '\\+cot'"):
        check_method("hybrid+cot")


def test_eval_ircot_errors(
    dataset_dir: Path, tmp_path: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", str(dataset_dir), "--embedder", "test:hash", "--cache-dir", str(tmp_path)]
    assert main([*base, "--methods", "hybrid+ircot", "-q"]) == 2
    assert "need an LLM" in capsys.readouterr().err
    assert main([*base, "--methods", "hybrid+cot", "--llm", server.spec, "-q"]) == 2
    assert "unknown method suffix '+cot'" in capsys.readouterr().err
    settings = EvalSettings(methods=("psi+ircot",), cache_dir=tmp_path, embedder="test:hash")
    with pytest.raises(InputError, match="psi\\+ircot need an LLM"):
        run_eval(dataset_dir, settings)
    assert server.requests == []
