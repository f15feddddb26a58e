"""Issue 16: no wasted retrievals, verified citations, chat mode (the agent is real; the model is
the scripted loopback server of test_agent)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import FakeOpenAIServer, HashEmbedder, client_for
from support.agents import (
    CORPUS,
    Q_OFFICE,
    QUESTION,
    QUESTIONS,
    SUB_QUESTION,
    FakeIndex,
    FakeTreeIndex,
    ids,
    length_model,
    parse,
)
from support.datasets import write_dataset

from psirag.agent import RetrieveAndAnswer
from psirag.agent.citations import Labels, split_citations
from psirag.agent.conversation import read_rewrite
from psirag.agent.grounding import example_name
from psirag.agent.ircot import IRCoT
from psirag.agent.repeats import REPEAT_OVERLAP, repeats
from psirag.cli import main
from psirag.eval.harness import questions_path
from psirag.eval.metrics import citation_precision
from psirag.eval.settings import EMBEDDER_HOOKS
from psirag.types import Passage, Source

# --- repeated sub-questions ----------------------------------------------------------------------


def test_repeats_normalised_text_and_overlap() -> None:
    earlier = [QUESTION, SUB_QUESTION]
    assert repeats(QUESTION.upper().replace("?", " ?!"), earlier) == QUESTION
    # The same content words in another order, with other function words: a repeat.
    reordered = "head office Calder Group, the owner of Blue Harbour Hotel: where?"
    assert repeats(reordered, earlier) == SUB_QUESTION
    # A new fact (founding year) about the same company is a new search.
    assert repeats("When was the Calder Group founded?", earlier) is None
    assert 0 < REPEAT_OVERLAP < 1


def test_a_repeated_sub_question_does_not_retrieve_twice(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(
        f"Thought: search again.\nRetrieve: {QUESTION.lower()}",  # the user's question again
        f"Thought: ask for the owner's office.\nRetrieve: {SUB_QUESTION}",
        "Thought: Calder is in Lisbon.\nAnswer: Lisbon",
    )
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert index.queries == [QUESTION, SUB_QUESTION]  # the repeat spent no retrieval
    assert result.answer == "Lisbon"
    assert result.stats.repeated_queries == 1
    assert result.stats.retrievals == 2
    assert result.steps[0].repeated == [QUESTION.lower()]
    assert "You already searched for" in server.last_user(1)
    assert [s.action for s in result.steps] == ["retrieve", "answer"]


def test_a_second_repeat_forces_the_answer(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(
        f"Retrieve: {SUB_QUESTION}",
        f"Retrieve: {SUB_QUESTION.lower()}",  # step 2: a repeat
        "Retrieve: head office of Calder Group, owner of the Blue Harbour Hotel",  # again
        "Answer: Lisbon",  # the forced-answer turn
    )
    result = RetrieveAndAnswer(
        client_for(server), index.search, max_retrievals=3, check_answers=False
    ).run(QUESTION)
    assert index.queries == [QUESTION, SUB_QUESTION]
    assert result.stats.repeated_queries == 2
    assert result.steps[-1].action == "forced_answer"
    assert result.answer == "Lisbon"
    assert len(server.requests) == 4 and result.stats.llm_calls == 4
    assert "You cannot retrieve any more" in server.last_user(3)


def test_a_sub_question_copied_from_the_example_is_not_searched(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(
        "Thought: I need a death date.\nRetrieve: When did Horace Jones (the architect) die?",
        f"Thought: ask for the owner's office.\nRetrieve: {SUB_QUESTION}",
        "Thought: Calder is in Lisbon.\nAnswer: Lisbon",
    )
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert index.queries == [QUESTION, SUB_QUESTION]  # the copied query spent no retrieval
    assert result.stats.example_queries == 1 and result.stats.repeated_queries == 0
    assert result.steps[0].repeated == ["When did Horace Jones (the architect) die?"]
    assert '"Horace Jones" comes from the example' in server.last_user(1)
    assert result.answer == "Lisbon"


def test_an_example_name_the_episode_mentions_is_searched(server: FakeOpenAIServer) -> None:
    # A corpus about London bridges: the question names Tower Bridge, so the query is its own.
    question = "Who designed Tower Bridge?"
    assert example_name("Who was Horace Jones?", question, []) == "Horace Jones"
    assert example_name("When was Tower Bridge built?", question, []) is None
    about = Source("h", "Horace Jones", 0, 0, 26)
    shown = [Passage("p1", "Horace Jones\nAn architect.", 0.5, about)]
    assert example_name("Who was Horace Jones?", question, shown) is None
    index = FakeIndex()
    server.script("Retrieve: When was Tower Bridge opened?", "Answer: 1894")
    result = RetrieveAndAnswer(
        client_for(server), index.search, max_retrievals=1, check_answers=False
    ).run(question)
    assert index.queries == [question, "When was Tower Bridge opened?"]
    assert result.stats.example_queries == 0


def test_ircot_does_not_search_a_repeated_sentence(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(QUESTION, "Answer: Lisbon")  # the reasoning sentence is the question itself
    result = IRCoT(client_for(server), index.search, max_retrievals=2).run(QUESTION)
    assert index.queries == [QUESTION]
    assert result.stop == "repeat"
    assert result.stats.repeated_queries == 1
    assert result.answer == "Lisbon"


# --- citations -----------------------------------------------------------------------------------


def test_split_citations() -> None:
    assert split_citations("1887 [2][4]") == ("1887", [2, 4])
    assert split_citations("1887 (see [2], [4]).") == ("1887", [2, 4])
    assert split_citations("Paris [Document 3]") == ("Paris", [3])
    assert split_citations("Rock and Roll [2]") == ("Rock and Roll", [2])
    assert split_citations("the [1] album") == ("the [1] album", [])
    assert split_citations("1887") == ("1887", [])


def test_labels_stay_with_their_passage_and_unknown_ones_are_dropped() -> None:
    index = FakeIndex()
    labels = Labels()
    first = index.search(QUESTION)
    second = index.search(SUB_QUESTION)
    assert labels.assign(first) == [1, 2]
    assert ids(second) == ["hotel", "calder"]
    assert labels.assign(second) == [1, 3]  # the hotel, shown again, keeps label 1
    citations, dropped = labels.resolve([3, 1, 3, 9])
    assert [(c.label, c.passage.id) for c in citations] == [(3, "calder"), (1, "hotel")]
    assert dropped == 1


def test_agent_answer_cites_verified_passages(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(
        f"Retrieve: {SUB_QUESTION}",
        "Thought: [1] says Calder owns it; [3] puts Calder in Lisbon.\nAnswer: Lisbon [3][1][7]",
    )
    result = RetrieveAndAnswer(client_for(server), index.search).run(QUESTION)
    assert ids(result.steps[0].passages) == ["hotel", "portmere"]
    assert ids(result.steps[1].passages) == ["hotel", "calder"]
    second_turn = server.last_user(1)
    assert "[1] Blue Harbour Hotel" in second_turn and "[3] Calder Group" in second_turn
    assert "[2] Blue" not in second_turn  # the hotel keeps label 1 at the second step
    assert result.answer == "Lisbon"
    assert [(c.label, c.passage.id) for c in result.citations] == [(3, "calder"), (1, "hotel")]
    assert result.stats.cited == 2 and result.stats.dropped_citations == 1
    doc = result.to_dict()["citations"]
    assert doc[0] == {
        "label": 3,
        "passage_id": "calder",
        "document": "calder",
        "title": "Calder Group",
        "chunk": 0,
        "span": [0, len(index.docs["calder"][1])],
    }
    assert "labels of the documents that support it" in server.requests[0]["messages"][0]["content"]


def test_not_mentioned_cites_nothing(server: FakeOpenAIServer) -> None:
    server.script("Answer: Not mentioned [1]")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, max_retrievals=0).run(
        QUESTION
    )
    assert result.citations == [] and result.stats.cited == 0


def test_cli_ask_prints_citations_and_json_has_them(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex
) -> None:
    server.script(f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon [3]")
    out = io.StringIO()
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "-q"])
    assert args.func(args, stdout=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "Lisbon"
    assert lines[1] == "Sources:"
    assert lines[2].startswith("  [3] calder (Calder Group), chunk 0, chars 0-")
    assert "id calder" in lines[2]

    server.script(f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon [3][8]")
    out = io.StringIO()
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "-q", "--json"])
    assert args.func(args, stdout=out) == 0
    doc = json.loads(out.getvalue())
    assert [c["passage_id"] for c in doc["citations"]] == ["calder"]
    assert doc["stats"]["dropped_citations"] == 1


def test_citation_precision() -> None:
    assert citation_precision(["a", "b"], ["a", "c"]) == 0.5
    assert citation_precision(["a", "a"], ["a"]) == 1.0
    assert citation_precision(["b"], ["a"]) == 0.0
    assert citation_precision([], ["a"]) is None


# --- chat ----------------------------------------------------------------------------------------


def test_read_rewrite() -> None:
    assert read_rewrite("Question: Where is the Calder Group based?", "Where is it?") == (
        "Where is the Calder Group based?"
    )
    assert read_rewrite('**Question:** "When was X born?"', "When?") == "When was X born?"
    assert read_rewrite("", "Where is it?") is None
    assert read_rewrite("word " * 200, "Where?") is None


def test_cli_chat_resolves_a_follow_up_before_retrieval(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = "Which company owns the Blue Harbour Hotel?"
    standalone = "Where is the head office of the Calder Group?"
    server.script(
        "Thought: the hotel document says so.\nAnswer: the Calder Group [1]",
        f"Question: {standalone}",  # the rewrite of the follow-up
        "Thought: the Calder document.\nAnswer: Lisbon [1]",
    )
    stdin = io.StringIO(f"{first}\n\nWhere is its head office?\nexit\nnever read\n")
    out = io.StringIO()
    args = parse(["chat", "idx", "--llm", server.spec, "-q", "--json", "--max-retrievals", "0"])
    assert args.func(args, stdout=out, stdin=stdin) == 0
    turns = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [t["answer"] for t in turns] == ["the Calder Group", "Lisbon"]
    assert fake_index.queries == [first, standalone]  # retrieval saw the standalone question
    assert turns[1]["rewritten"] and turns[1]["asked"] == "Where is its head office?"
    assert [c["passage_id"] for c in turns[1]["citations"]] == ["calder"]
    rewrite_request = server.requests[1]["messages"]
    assert "Where is its head office?" in rewrite_request[-1]["content"]
    assert first in rewrite_request[-1]["content"]  # the earlier turn is shown
    assert "the Calder Group" in rewrite_request[-1]["content"]
    assert len(server.requests) == 3  # 'exit' ended the chat


def test_cli_chat_plain_output(server: FakeOpenAIServer, fake_index: FakeTreeIndex) -> None:
    server.script("Answer: the Calder Group [1]")
    out = io.StringIO()
    args = parse(["chat", "idx", "--llm", server.spec, "-q", "--max-retrievals", "0"])
    assert args.func(args, stdout=out, stdin=io.StringIO("Who owns the Blue Harbour Hotel?\n")) == 0
    assert out.getvalue().splitlines()[:2] == ["the Calder Group", "Sources:"]


# --- psirag eval: repeats, citation precision, auto budget -------------------------------------

SUB_OFFICE = "Where is the head office of the Calder Group?"


def eval_model(body: dict[str, Any]) -> str:
    """Repeats the question once, then asks for the owner's office; cites gold and non-gold."""
    user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    every = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
    labels = {t: int(n) for n, t in re.findall(r"^\[(\d+)\] (.+)$", every, re.M)}
    if "Question: Which volcano" in every:
        cited = f"[{labels['Vesuvius']}][{labels['Mount Etna']}]"
        return f"Thought: It says so.\nAnswer: Vesuvius {cited}"
    users = [m for m in body["messages"] if m["role"] == "user"]
    if len(users) == 1:
        return f"Thought: I need more.\nRetrieve: {Q_OFFICE}"  # the question again: a repeat
    if user.startswith("You already searched for"):
        return f"Thought: ask about the owner.\nRetrieve: {SUB_OFFICE}"
    if "Its head office is in Lisbon" in user:
        cited = f"[{labels['Calder Group']}][99]"
        return f"Thought: Calder owns the hotel; its office is in Lisbon.\nAnswer: Lisbon {cited}"
    return "Answer: Not mentioned"


@pytest.mark.fake_llm(responder=eval_model)
def test_eval_counts_repeats_citations_and_auto_budget(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server: FakeOpenAIServer,
) -> None:
    import psirag.hops as hops

    monkeypatch.setitem(EMBEDDER_HOOKS, "test:hash", HashEmbedder)
    monkeypatch.delenv("PSIRAG_LLM", raising=False)
    embedder = HashEmbedder()
    monkeypatch.setattr(hops, "load_hop_model", lambda: length_model(embedder.id, embedder.dim))
    folder = write_dataset(tmp_path / "tiny", CORPUS, QUESTIONS)
    out = tmp_path / "qa.json"
    argv = ["eval", str(folder), "--methods", "hybrid+agent", "--llm", server.spec]
    argv += ["--embedder", "test:hash", "--cache-dir", str(tmp_path / "cache")]
    argv += ["--output", str(out), "--bootstrap", "0", "-q", "--max-retrievals", "auto"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "repeats" in table and "cite P" in table
    summary = json.loads(out.read_text())["methods"]["hybrid+agent"]
    assert summary["repeated_queries"] == 1
    assert summary["cited"] == 3 and summary["dropped_citations"] == 1
    # q0 cites Vesuvius (gold) and Etna (not): 0.5; q1 cites the Calder Group (gold): 1.0.
    assert summary["citation_precision"] == 75.0 and summary["answers_citing"] == 2
    rows = {r["id"]: r for r in map(json.loads, questions_path(out).open())}
    assert rows["q0"]["predicted_hops"] == 1 and rows["q0"]["max_retrievals"] == 1
    assert rows["q1"]["predicted_hops"] == 4 and rows["q1"]["max_retrievals"] == 3
    assert rows["q1"]["queries"] == [Q_OFFICE, SUB_OFFICE]  # the repeat spent no retrieval
    assert rows["q1"]["citation_precision"] == 1.0


def test_cli_ask_shows_a_refused_repeat(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(f"Retrieve: {QUESTION}", f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon")
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec])
    assert args.func(args, stdout=io.StringIO()) == 0
    assert fake_index.queries == [QUESTION, SUB_QUESTION]
    assert "(not searched again: Which city hosts" in capsys.readouterr().err
