"""The R&A agent and summarization mode, end to end over HTTP.

A scripted OpenAI-compatible server on 127.0.0.1 plays the model: it answers each request with the
next reply of a per-test script and records every request, so the tests see exactly what a real
server would receive. The agent talks to it through the real ``OpenAIChat`` and ``LLMClient``.
Retrieval is a small in-memory lexical retriever over a handful of passages, standing in for the
index (another layer, tested on its own).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import NO_RETRY, FakeOpenAIServer, client_for
from support.agents import (
    QUESTION,
    SUB_QUESTION,
    VISITED,
    FakeIndex,
    FakeTreeIndex,
    ids,
    parse,
)

from psirag.agent import (
    NOT_MENTIONED,
    AgentResult,
    Node,
    RetrieveAndAnswer,
    Summarizer,
    answer_in_documents,
    lookup_query,
    merge_evidence,
    names_in,
    names_without_documents,
    select_nodes,
)
from psirag.cli import agent_cmds as agent_cli
from psirag.config import PROFILES
from psirag.llm import LLMClient, OpenAIChat
from psirag.llm.base import estimate_tokens
from psirag.types import Passage, Source

# --- the scripted server -------------------------------------------------------------------------


# --- the stand-in index --------------------------------------------------------------------------


# --- the loop ------------------------------------------------------------------------------------


def test_multi_hop_retrieve_then_answer(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    assert ids(index.search(QUESTION)) == ["hotel", "portmere"]  # the owner's office: not yet
    index.queries.clear()
    server.script(
        "Thought: The hotel is owned by the Calder Group; its head office is not given.\n"
        f"Retrieve: {SUB_QUESTION}",
        "Thought: The Calder Group has its head office in Lisbon.\nAnswer: Lisbon",
    )
    llm = client_for(server)
    seen: list[str] = []
    result = RetrieveAndAnswer(llm, index.search, max_retrievals=1).run(
        QUESTION, on_step=lambda s: seen.append(s.action)
    )

    assert result.answer == "Lisbon"
    assert index.queries == [QUESTION, SUB_QUESTION]  # the sub-question reached the retriever
    assert [s.action for s in result.steps] == ["retrieve", "answer"] == seen
    assert [s.query for s in result.steps] == [QUESTION, SUB_QUESTION]
    assert ids(result.steps[1].passages) == ["hotel", "calder"]
    assert result.steps[0].thought.startswith("The hotel is owned")
    assert all(s.well_formed for s in result.steps)
    assert len(server.requests) == 2

    # The second request carries the whole conversation: both sets of documents, the first reply.
    second = server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"].endswith(f"Retrieve: {SUB_QUESTION}")
    assert "Portmere is a fishing town" in second[1]["content"]
    assert "Its head office is in Lisbon" in second[3]["content"]
    # Sampling settings of the paper (C.2): temperature 0, repeat penalty 1.3; reply cap 256.
    body = server.requests[0]
    assert (body["temperature"], body["repeat_penalty"], body["max_tokens"]) == (0.0, 1.3, 256)
    # Generation ends where the model would start writing the example's next turn itself.
    assert body["stop"] == ["\n[user]", "\n[assistant]", "\n[system]", "\n(End of example"]
    assert llm.usage["agent"]["calls"] == 2
    assert result.stats.retrievals == 2 and result.stats.llm_calls == 2


def test_remaining_retrievals_are_announced_each_turn(server: FakeOpenAIServer) -> None:
    server.script("Retrieve: q one", "Retrieve: q two", "Retrieve: q three", "Answer: Lisbon")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, max_retrievals=3).run(
        QUESTION
    )
    assert result.answer == "Lisbon"
    left = [re.search(r"Retrievals left: (\d+)", server.last_user(i)) for i in range(4)]
    assert [int(m.group(1)) for m in left if m] == [3, 2, 1, 0]
    forced = ["cannot retrieve any more" in server.last_user(i) for i in range(4)]
    assert forced == [False, False, False, True]
    assert "3 times" in server.requests[0]["messages"][0]["content"]
    assert [s.remaining for s in result.steps] == [3, 2, 1, 0]


def test_forced_answer_when_it_keeps_asking_to_retrieve(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    server.script(
        f"Thought: need the owner.\nRetrieve: {SUB_QUESTION}",
        "Thought: still unsure.\nRetrieve: Calder Group headquarters city",
        "Thought: From the documents, Lisbon.\nAnswer: Lisbon",
    )
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)

    assert result.answer == "Lisbon"
    assert [s.action for s in result.steps] == ["retrieve", "forced_answer"]
    assert index.queries == [QUESTION, SUB_QUESTION]  # the third query was never run
    assert len(server.requests) == 3
    final = server.requests[2]["messages"]
    assert [m["role"] for m in final][-2:] == ["assistant", "user"]
    assert "cannot retrieve any more" in final[-1]["content"]
    assert "Retrievals left: 0" in final[-1]["content"]
    assert result.steps[1].forced_raw.endswith("Answer: Lisbon")
    assert result.stats.forced_turns == 1


def test_hard_cap_holds_whatever_the_model_says(server: FakeOpenAIServer) -> None:
    server.script(*[f"Thought: more.\nRetrieve: query {i}" for i in range(10)])
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=2).run(QUESTION)

    assert result.answer == NOT_MENTIONED
    assert len(index.queries) == 3  # the first retrieval plus max_retrievals
    assert len(server.requests) == 4  # one reply per retrieval plus one forced-answer turn
    assert [s.action for s in result.steps] == ["retrieve", "retrieve", "no_answer"]
    assert len(server.pending_replies) == 6


def test_zero_retrievals_forces_the_first_turn(server: FakeOpenAIServer) -> None:
    server.script("Thought: the hotel's owner is Calder.\nAnswer: Calder Group")
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=0).run(QUESTION)
    assert result.answer == "Calder Group"
    assert "cannot retrieve any more" in server.last_user(0)
    assert index.queries == [QUESTION]


def test_not_mentioned_when_the_model_never_answers(server: FakeOpenAIServer) -> None:
    server.script(
        "Thought: The documents talk about hotels.\nThey do not say much more.",
        "I still cannot tell from these documents.\nThere is no clear answer.",
    )
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    assert result.answer == NOT_MENTIONED
    assert [s.action for s in result.steps] == ["no_answer"]
    assert result.stats.unparsed == 2 and result.stats.well_formed == 0
    assert len(server.requests) == 2  # no marker: no retrieval, straight to the forced turn


def test_malformed_replies_are_rescued_and_counted_apart(server: FakeOpenAIServer) -> None:
    # Inline marker (rescued), then a decorated retrieve line (well-formed), then a bare line
    # after the forced-answer turn.
    server.script(
        f"I should look further, so Retrieve: {SUB_QUESTION}",
        "**Thought:** the documents do not settle it",
        "Lisbon",
    )
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert index.queries == [QUESTION, SUB_QUESTION]
    assert result.answer == "Lisbon"
    assert [s.action for s in result.steps] == ["retrieve", "forced_answer"]
    assert result.steps[0].rescued and not result.steps[0].well_formed
    assert result.steps[1].thought == "the documents do not settle it"
    stats = result.stats
    assert (stats.well_formed, stats.rescued, stats.unparsed) == (0, 1, 2)


def test_decorated_answer_is_well_formed(server: FakeOpenAIServer) -> None:
    server.script(
        "**Thought:** It is Lisbon.\n\n**Answer:** Lisbon\n\nLet me know if you need more."
    )
    agent = RetrieveAndAnswer(client_for(server), FakeIndex().search, check_answers=False)
    result = agent.run(QUESTION)
    assert result.answer == "Lisbon"
    assert result.steps[0].well_formed and result.stats.well_formed == 1


def test_empty_reply(server: FakeOpenAIServer) -> None:
    server.script("", "")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    assert result.answer == NOT_MENTIONED
    assert [s.action for s in result.steps] == ["no_answer"]
    assert len(server.requests) == 2

    server.requests.clear()
    server.script("", "Answer: Lisbon")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    assert result.answer == "Lisbon"
    assert result.steps[0].action == "forced_answer"


def test_a_passage_saying_answer_is_never_the_answer(server: FakeOpenAIServer) -> None:
    index = FakeIndex(k=3)
    question = "Where is the head office of the hotel owner?"
    assert "quiz" in ids(index.search(question))
    index.queries.clear()
    # The model replies without a marker; the passage's "Answer: Paris" must not be read.
    server.script("The head office is somewhere.\nI am not sure.", "Answer: Lisbon")
    result = RetrieveAndAnswer(client_for(server), index.search).run(question)
    assert "Answer\\: Paris" in server.requests[0]["messages"][1]["content"]  # shown as data
    assert result.answer == "Lisbon"
    assert all("Paris" not in s.thought for s in result.steps)

    server.requests.clear()
    server.script("no idea\nat all", "still no idea\nsorry")
    result = RetrieveAndAnswer(client_for(server), index.search).run(question)
    assert result.answer == NOT_MENTIONED


def test_evidence_merge_rule_by_hand() -> None:
    index = FakeIndex()
    a, b, c, d = (index.passage(i, 0.0) for i in ("hotel", "calder", "portmere", "bridge"))
    # Step 1 ranks a, b, c; step 2 ranks c, d, a.
    # a: 1/61 + 1/63   c: 1/63 + 1/61   (equal: a was seen first at a better rank, step 1)
    # b: 1/62          d: 1/62          (equal: b comes from the earlier step)
    merged = merge_evidence([[a, b, c], [c, d, a]])
    assert ids(merged) == ["hotel", "portmere", "calder", "bridge"]
    assert merged[0].score == pytest.approx(1 / 61 + 1 / 63)
    assert merged[2].score == pytest.approx(1 / 62)

    # A passage only in step 2 at rank 1 (1/61) beats one only in step 1 at rank 2 (1/62).
    assert ids(merge_evidence([[a, b], [d]])) == ["hotel", "bridge", "calder"]

    # With reranker probabilities each passage keeps its best score.
    s1 = [index.passage("hotel", 0.9), index.passage("calder", 0.4)]
    s2 = [index.passage("calder", 0.95), index.passage("portmere", 0.9)]
    best = merge_evidence([s1, s2], mode="best_score")
    assert ids(best) == ["calder", "hotel", "portmere"]  # hotel ties portmere: earlier step
    assert [p.score for p in best] == [0.95, 0.9, 0.9]


def test_episode_evidence_follows_the_rule(server: FakeOpenAIServer) -> None:
    server.script(f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    # Step 1: hotel, portmere; step 2: hotel, calder.
    # hotel 1/61 + 1/61; portmere 1/62 and calder 1/62 tie: portmere came at the earlier step.
    assert [ids(s.passages) for s in result.steps] == [["hotel", "portmere"], ["hotel", "calder"]]
    assert ids(result.evidence) == ["hotel", "portmere", "calder"]
    assert result.evidence[0].score == pytest.approx(2 / 61)


def test_to_dict_schema(server: FakeOpenAIServer) -> None:
    server.script(f"Thought: t1\nRetrieve: {SUB_QUESTION}", "Thought: t2\nAnswer: Lisbon")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    doc = json.loads(json.dumps(result.to_dict()))
    required = {"answer", "steps", "evidence"}
    assert required <= set(doc)
    assert set(doc) - required == {"question", "stats", "valid_answer", "citations"}
    step_required = {"thought", "action", "query", "passages"}
    for step in doc["steps"]:
        assert step_required <= set(step)
        assert set(step) - step_required == {
            "remaining",
            "well_formed",
            "rescued",
            "raw",
            "forced_raw",
            "follow_up",
            "follow_up_names",
            "follow_up_raw",
            "repeated",
            "repeat_raw",
        }
        for p in step["passages"]:
            assert set(p) == {"id", "text", "score", "source", "also"}
    assert [p["id"] for p in doc["evidence"]] == ids(result.evidence)
    assert doc["answer"] == "Lisbon"
    assert [(s["thought"], s["action"], s["query"]) for s in doc["steps"]] == [
        ("t1", "retrieve", QUESTION),
        ("t2", "answer", SUB_QUESTION),
    ]
    assert doc["steps"][0]["passages"] == [p.to_dict() for p in result.steps[0].passages]


def test_long_passages_are_clipped_to_fit_the_context(server: FakeOpenAIServer) -> None:
    filler = " ".join(f"word{i}" for i in range(1500))
    docs = {f"d{i}": (f"Doc {i}", f"Lisbon head office {filler}") for i in range(4)}
    index = FakeIndex(k=4, docs=docs)
    server.script("Answer: Lisbon")
    result = RetrieveAndAnswer(client_for(server, context_tokens=4096), index.search).run(
        "Where is the head office?"
    )
    assert result.answer == "Lisbon"
    assert result.stats.clipped_passages == 4
    sent = server.requests[0]["messages"]
    assert sum(estimate_tokens(m["content"]) for m in sent) + 256 <= 4096
    assert "Doc 3" in sent[1]["content"]  # every passage is still shown, only shorter


def test_cached_episode_sends_nothing_again(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.script(f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon")
    cache = tmp_path / "llm.sqlite"
    with LLMClient(OpenAIChat(server.base_url, "scripted", http=NO_RETRY), cache) as llm:
        first = RetrieveAndAnswer(llm, FakeIndex().search).run(QUESTION)
    with LLMClient(OpenAIChat(server.base_url, "scripted", http=NO_RETRY), cache) as llm:
        second = RetrieveAndAnswer(llm, FakeIndex().search).run(QUESTION)
        assert llm.usage["agent"]["cached"] == 2
    assert len(server.requests) == 2
    assert second.to_dict() == first.to_dict()


def test_empty_question_is_refused(server: FakeOpenAIServer) -> None:
    from psirag.errors import InputError

    with pytest.raises(InputError):
        RetrieveAndAnswer(client_for(server), FakeIndex().search).run("   ")


# --- summarization -------------------------------------------------------------------------------


def test_select_nodes_top_k_in_document_order() -> None:
    chosen = select_nodes(VISITED, 4)
    assert [n.node for n in chosen] == [109, 105, 107, 40]  # top 4 by cosine, in document order
    chosen = select_nodes(VISITED, 5)
    assert [n.node for n in chosen] == [109, 3, 105, 107, 40]  # the abstract before its leaf


def test_summarize_over_http(server: FakeOpenAIServer) -> None:
    queries: list[str] = []

    def visit(query: str) -> list[Node]:
        queries.append(query)
        return VISITED

    server.script("Summary: The team set the budget, chose a yellow case and planned the next.")
    llm = client_for(server)
    result = Summarizer(llm, visit, top_k=4).run("Summarize the whole meeting.")

    assert queries == ["Summarize the whole meeting."]
    assert result.answer == "The team set the budget, chose a yellow case and planned the next."
    assert [n.node for n in result.evidence] == [109, 105, 107, 40]
    body = server.requests[0]
    assert (body["max_tokens"], body["temperature"], body["repeat_penalty"]) == (200, 0.0, 1.3)
    user = body["messages"][-1]["content"]
    order = [
        user.index(t) for t in ("meeting overview", "remote control", "next meeting", "yellow")
    ]
    assert order == sorted(order)
    assert "[1] (abstract, layer 2) meeting overview" in user
    assert "[4] (passage) ID: The case will be yellow." in user
    assert "Summarize the whole meeting." in user
    assert "150 words" in body["messages"][0]["content"]  # 200 tokens ~ 150 words
    assert llm.usage["summarize"]["calls"] == 1
    doc = json.loads(json.dumps(result.to_dict()))
    assert {"answer", "evidence"} <= set(doc)
    assert set(doc["evidence"][0]) == {"node", "layer", "score", "text", "order", "document"}


# --- command line --------------------------------------------------------------------------------


def test_cli_ask_json_and_streamed_steps(
    server: FakeOpenAIServer,
    fake_index: FakeTreeIndex,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    server.script(f"Thought: need the owner's office.\nRetrieve: {SUB_QUESTION}", "Answer: Lisbon")
    cache = tmp_path / "c.sqlite"
    args = parse(
        ["ask", "idx", QUESTION, "--llm", server.spec, "--json", "--trace", "--cache", str(cache)]
    )
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["answer"] == "Lisbon"
    assert [s["action"] for s in doc["steps"]] == ["retrieve", "answer"]
    assert doc["llm_usage"]["agent"]["calls"] == 2
    assert cache.exists()
    err = capsys.readouterr().err
    assert f"[1] search: {QUESTION}" in err
    assert f"[2] search: {SUB_QUESTION}" in err
    assert "thought: need the owner's office." in err
    assert "Blue Harbour Hotel" in err  # --trace lists passages
    assert err.index("[2] search") > err.index("thought: need")  # streamed in order
    assert fake_index.configs == [PROFILES["default"]] * 2  # no --profile: the default's


def test_cli_ask_profile_paper_reaches_every_search(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex
) -> None:
    server.script(f"Retrieve: {SUB_QUESTION}", "Answer: Lisbon")
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "--profile", "paper", "-q"])
    assert args.func(args, stdout=io.StringIO()) == 0
    assert fake_index.configs == [PROFILES["paper"]] * 2


def test_cli_ask_plain_answer_and_max_retrievals(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("Retrieve: a", "Retrieve: b", "Retrieve: c", "Answer: Lisbon")
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "--max-retrievals", "2"])
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    assert out.getvalue() == "Lisbon\n"
    assert fake_index.queries == [QUESTION, "a", "b"]
    assert "→ answer (forced)" in capsys.readouterr().err


@pytest.mark.parametrize(("flags", "requests"), [([], 2), (["--no-answer-check"], 1)])
def test_cli_ask_answer_check(
    server: FakeOpenAIServer, fake_index: FakeTreeIndex, flags: list[str], requests: int
) -> None:
    server.script("Answer: Lisbon", "Answer: Lisbon")  # not in the first documents
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "-q", *flags])
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    assert out.getvalue() == "Lisbon\n"
    assert len(server.requests) == requests


def test_cli_needs_an_llm(fake_index: FakeTreeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    from psirag.errors import InputError

    monkeypatch.delenv(agent_cli.LLM_ENV, raising=False)
    args = parse(["ask", "idx", QUESTION])
    with pytest.raises(InputError, match="--llm"):
        args.func(args, stdout=io.StringIO())


def test_cli_summarize(server: FakeOpenAIServer, fake_index: FakeTreeIndex) -> None:
    server.script("A short meeting summary.")
    args = parse(["summarize", "idx", "--doc", "m1", "--llm", server.spec, "--json"])
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["answer"] == "A short meeting summary."
    assert doc["doc"] == "m1"
    assert len(doc["evidence"]) == 6
    # Algorithm 2's k and beam are the summary's top-k (20 by default), as in `psirag eval`.
    assert fake_index.queries == [
        "visit:['m1']:beam=20:k=20:Summarize the contents of this document."
    ]


def test_passages_are_shown_with_their_title_once(server: FakeOpenAIServer) -> None:
    index = FakeIndex()
    with_title_line = Passage(
        "t", "Calder Group\nIts office is in Lisbon.", 1.0, index.passage("calder", 1.0).source
    )
    server.script("Answer: Lisbon")
    RetrieveAndAnswer(
        client_for(server), lambda q: [index.passage("portmere", 1.0), with_title_line]
    ).run(QUESTION)
    shown = server.requests[0]["messages"][1]["content"]
    assert "[1] Portmere\nPortmere is a fishing town" in shown  # title added even if echoed
    assert "[2] Calder Group\nIts office is in Lisbon." in shown  # not repeated


def test_index_node_hits_are_visited_nodes() -> None:
    from psirag.agent import VisitedNode
    from psirag.index import NodeHit

    hits = [NodeHit(7, 1, 0.5, "abstract", 3, None), NodeHit(2, 0, 0.9, "leaf", 2, "d")]
    assert all(isinstance(h, VisitedNode) for h in hits)
    assert [h.node for h in select_nodes(hits, 2)] == [2, 7]


def test_summarize_refuses_an_empty_visit(server: FakeOpenAIServer) -> None:
    from psirag.errors import InputError

    with pytest.raises(InputError, match="no nodes"):
        Summarizer(client_for(server), lambda q: []).run()
    assert server.requests == []


def follow_up_then_retrieve(
    server: FakeOpenAIServer, first_reply: str, **options: Any
) -> AgentResult:
    """An episode whose first reply draws a follow-up turn, answered with the sub-question;
    the second retrieval finds the office and the model answers Lisbon."""
    server.script(
        first_reply,
        f"Thought: No document names the office.\nRetrieve: {SUB_QUESTION}",
        "Thought: The Calder Group has its head office in Lisbon.\nAnswer: Lisbon",
    )
    index = FakeIndex()
    agent = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1, **options)
    result = agent.run(QUESTION)
    assert result.answer == "Lisbon"
    assert index.queries == [QUESTION, SUB_QUESTION]
    assert [s.action for s in result.steps] == ["retrieve", "answer"]
    assert result.steps[1].follow_up is None
    assert len(server.requests) == 3  # no retrieval left at the second step: no second check
    return result


def test_premature_not_mentioned_is_nudged_into_a_retrieval(server: FakeOpenAIServer) -> None:
    result = follow_up_then_retrieve(
        server, "Thought: The documents do not say who owns the hotel.\nAnswer: Not mentioned."
    )
    assert result.stats.nudged_turns == 1 and result.stats.llm_calls == 3
    nudge = server.requests[1]["messages"]
    assert [m["role"] for m in nudge][-2:] == ["assistant", "user"]
    assert "1 retrieval left" in nudge[-1]["content"]
    assert "Retrieve: <sub-question>" in nudge[-1]["content"]


def test_not_mentioned_stands_when_the_nudge_gives_up_too(server: FakeOpenAIServer) -> None:
    server.script(
        "Thought: Nothing about it.\nAnswer: not mentioned",
        "Thought: Still nothing to search for.\nAnswer: Not mentioned",
    )
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert result.answer.lower() == "not mentioned"
    assert index.queries == [QUESTION] and len(server.requests) == 2
    assert result.stats.nudged_turns == 1
    assert result.steps[0].follow_up == "nudge"


def test_no_nudge_without_retrievals_left(server: FakeOpenAIServer) -> None:
    server.script("Thought: Not in the documents.\nAnswer: Not mentioned")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, max_retrievals=0).run(
        QUESTION
    )
    assert result.answer == "Not mentioned"
    assert len(server.requests) == 1 and result.stats.nudged_turns == 0


# --- the check of answers found in no document ------------------------------------------------


def test_answer_in_documents_reads_whole_words_without_case_or_punctuation() -> None:
    index = FakeIndex()
    passages = [index.passage("calder", 1.0), index.passage("portmere", 1.0)]
    assert answer_in_documents("lisbon.", QUESTION, passages)
    assert answer_in_documents("The Calder Group", QUESTION, passages)  # a title counts
    assert answer_in_documents("Blue Harbour Hotel", QUESTION, [])  # named in the question
    assert answer_in_documents("Yes", QUESTION, []) and answer_in_documents(" ", QUESTION, [])
    assert not answer_in_documents("Lis", QUESTION, passages)  # part of a word is not enough
    assert not answer_in_documents("Porto", QUESTION, passages)


def test_answer_from_memory_is_checked_and_looked_up(server: FakeOpenAIServer) -> None:
    result = follow_up_then_retrieve(
        server, "Thought: The owner is based in Lisbon, I believe.\nAnswer: Lisbon"
    )
    assert ids(result.evidence)[:3] == ["hotel", "portmere", "calder"]
    assert result.stats.checked_turns == 1 and result.stats.llm_calls == 3
    assert result.steps[0].follow_up == "answer_check" and not result.steps[0].follow_up_names
    check = server.last_user(1)
    assert '"Lisbon" is not written' in check and "1 retrieval left" in check


def test_checked_answer_can_be_confirmed(server: FakeOpenAIServer) -> None:
    server.script(
        "Thought: I recall it.\nAnswer: Lisbon",
        "Thought: I am sure of it.\nAnswer: Lisbon, Portugal",
    )
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)
    assert result.answer == "Lisbon, Portugal"
    assert index.queries == [QUESTION]
    assert result.stats.checked_turns == 1 and len(server.requests) == 2


def test_first_answer_stands_when_the_check_gives_up(server: FakeOpenAIServer) -> None:
    server.script("Thought: I recall it.\nAnswer: Lisbon", "Answer: Not mentioned")
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, max_retrievals=1).run(
        QUESTION
    )
    assert result.answer == "Lisbon" and result.stats.checked_turns == 1


@pytest.mark.parametrize(
    ("reply", "options"),
    [
        ("Thought: The hotel is in Portmere.\nAnswer: Portmere", {"max_retrievals": 1}),
        ("Thought: I recall it.\nAnswer: Lisbon", {"max_retrievals": 0}),
        ("Thought: I recall it.\nAnswer: Lisbon", {"max_retrievals": 1, "check_answers": False}),
    ],
    ids=["found-in-a-document", "no-retrieval-left", "check-off"],
)
def test_no_check(server: FakeOpenAIServer, reply: str, options: dict[str, Any]) -> None:
    server.script(reply)
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, **options).run(QUESTION)
    assert len(server.requests) == 1 and result.stats.checked_turns == 0
    assert result.answer == reply.rsplit("Answer: ", 1)[1]


# --- the check of names that no document is about ------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "The director is Albert S. Rogell. He was born in Oklahoma City.",
            ["Albert S. Rogell", "Oklahoma City"],
        ),
        ("Lothair II's mother was Ermengarde of Tours.", ["Lothair II", "Ermengarde of Tours"]),
        (
            '"Tower Bridge" says Horace Jones designed it; Horace Jones died in 1887.',
            ["Tower Bridge", "Horace Jones"],
        ),
        ("According to Document [2], None of them mentions it.", []),
        ("The Calder Group of Lisbon and The Old Bridge", ["Calder Group of Lisbon", "Old Bridge"]),
        ("Its owner is Calder of the", []),  # a lone capital with trailing joiners
        ("Ludwig van Beethoven, Gia Coppola’s father", ["Ludwig van Beethoven", "Gia Coppola"]),
    ],
)
def test_names_in(text: str, names: list[str]) -> None:
    assert names_in(text) == names


def test_names_without_documents_skips_the_question_and_titled_documents() -> None:
    index = FakeIndex()
    seen = [index.passage("hotel", 1.0), index.passage("calder", 1.0)]
    thought = (
        "The Blue Harbour Hotel belongs to the Calder Group, founded by Maria Calder; "
        "Old Bridge and Portmere Town Hall are nearby, as is Harbour Road."
    )
    # "Blue Harbour Hotel" is in the question and has a document, "Calder Group" a document.
    assert names_without_documents(thought, QUESTION, seen) == [
        "Maria Calder",
        "Old Bridge",
        "Portmere Town Hall",
    ]
    assert names_without_documents(thought, QUESTION, seen, limit=1) == ["Maria Calder"]
    # A title's qualifier is not part of the name it is about.
    film = Passage("f", "x", 1.0, Source("f", "Maria Calder (director)", 0, 0, 1))
    assert "Maria Calder" not in names_without_documents(thought, QUESTION, [*seen, film])


def test_names_check_needs_titles_that_name_subjects() -> None:
    """Documents titled by file name say nothing about who they are about: no names then."""
    thought = "Maria Calder founded the Calder Group."
    files = [
        Passage(f"f{i}", "x", 1.0, Source(f"f{i}", name, 0, 0, 1))
        for i, name in enumerate(["notes-2024.txt", "minutes 07.md"])
    ]
    assert names_without_documents(thought, QUESTION, files) == []
    assert names_without_documents(thought, QUESTION, []) == []
    # One title the question names is enough to read the others as subjects too.
    hotel = FakeIndex().passage("hotel", 1.0)
    assert names_without_documents(thought, QUESTION, [*files, hotel]) == [
        "Maria Calder",
        "Calder Group",
    ]


NAMES_REPLY = (
    "Thought: The hotel is owned by the Calder Group, so the answer must be Portmere.\n"
    "Answer: Portmere"
)


def test_answer_leaning_on_an_unseen_name_is_checked_and_looked_up(
    server: FakeOpenAIServer,
) -> None:
    result = follow_up_then_retrieve(server, NAMES_REPLY, names_check="ask")
    assert result.stats.names_checks == 1 and result.stats.checked_turns == 0
    first = result.steps[0]
    assert (first.follow_up, first.follow_up_names) == ("names_check", ["Calder Group"])
    assert first.follow_up_raw is not None and first.follow_up_raw.startswith("Thought: No doc")
    check = server.last_user(1)
    assert '"Calder Group"' in check and "none of the documents is about it" in check
    assert "1 retrieval left" in check


def test_names_check_can_be_answered_by_repeating_the_answer(server: FakeOpenAIServer) -> None:
    server.script(NAMES_REPLY, "Thought: The documents say so.\nAnswer: Portmere")
    index = FakeIndex()
    agent = RetrieveAndAnswer(client_for(server), index.search, names_check="ask")
    result = agent.run(QUESTION)
    assert result.answer == "Portmere" and index.queries == [QUESTION]
    assert result.stats.names_checks == 1 and len(server.requests) == 2


@pytest.mark.parametrize(
    ("reply", "options"),
    [
        ("Thought: The Blue Harbour Hotel is in Portmere.\nAnswer: Portmere", {}),
        (NAMES_REPLY, {"names_check": "off"}),
        (NAMES_REPLY, {"max_retrievals": 0}),
    ],
    ids=["names-have-documents", "check-off", "no-retrieval-left"],
)
def test_no_names_check(server: FakeOpenAIServer, reply: str, options: dict[str, Any]) -> None:
    server.script(reply)
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search, **options).run(QUESTION)
    assert len(server.requests) == 1 and result.stats.names_checks == 0
    assert result.answer == "Portmere"


def test_names_are_looked_up_and_the_model_answers_again(server: FakeOpenAIServer) -> None:
    server.script(NAMES_REPLY, "Thought: The Calder Group is based in Lisbon.\nAnswer: Lisbon")
    index = FakeIndex()
    result = RetrieveAndAnswer(client_for(server), index.search, max_retrievals=1).run(QUESTION)

    assert result.answer == "Lisbon"
    assert index.queries == [QUESTION, "Calder Group"] == [s.query for s in result.steps]
    assert [s.action for s in result.steps] == ["retrieve", "answer"]
    first = result.steps[0]
    assert (first.follow_up, first.follow_up_names) == ("names_lookup", ["Calder Group"])
    assert first.follow_up_raw is None  # the agent looked up; the model was not asked
    assert result.stats.names_checks == 1 and result.stats.llm_calls == 2
    assert "calder" in ids(result.evidence)
    # The second turn says why these documents came, then demands the answer.
    turn = server.last_user(1)
    assert turn.startswith('Your reasoning mentions "Calder Group"')
    assert "Its head office is in Lisbon" in turn and "You cannot retrieve any more" in turn
    # The lookup used the one retrieval left: no further check or retrieval.
    assert len(server.requests) == 2


def test_names_lookup_query_and_mode_checked() -> None:
    assert lookup_query(["Ada Byron", "Charles Babbage"]) == "Ada Byron; Charles Babbage"
    with pytest.raises(ValueError, match="names_check must be one of"):
        RetrieveAndAnswer(object(), FakeIndex().search, names_check="maybe")  # type: ignore[arg-type]


def test_one_follow_up_per_step(server: FakeOpenAIServer) -> None:
    # Not in any document and leaning on an unseen name: only the answer check is sent.
    server.script(
        "Thought: The Calder Group is based in Lisbon.\nAnswer: Lisbon",
        "Thought: I am sure.\nAnswer: Lisbon",
    )
    result = RetrieveAndAnswer(client_for(server), FakeIndex().search).run(QUESTION)
    assert result.answer == "Lisbon" and len(server.requests) == 2
    assert (result.stats.checked_turns, result.stats.names_checks) == (1, 0)


@pytest.mark.parametrize(
    ("flags", "requests", "why"),
    [
        ([], 2, None),
        (["--names-check", "ask"], 2, "no document is about: Calder Group"),
        (["--names-check", "off"], 1, None),
    ],
)
def test_cli_ask_names_check(
    server: FakeOpenAIServer,
    fake_index: FakeTreeIndex,
    flags: list[str],
    requests: int,
    why: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server.script(NAMES_REPLY, NAMES_REPLY)
    args = parse(["ask", "idx", QUESTION, "--llm", server.spec, "--trace", *flags])
    out = io.StringIO()
    assert args.func(args, stdout=out) == 0
    assert out.getvalue() == "Portmere\n"
    assert len(server.requests) == requests
    streamed = capsys.readouterr().err
    if why is None:
        assert "asked again" not in streamed
    else:
        assert f"(asked again: {why})" in streamed
    looked_up = "→ look up Calder Group (no document was about it yet)" in streamed
    assert looked_up == (not flags)
    assert ("[2] search: Calder Group" in streamed) == looked_up
    # Only a turn that asked the model has a reply of its own to show.
    assert ("reply to the follow-up turn:" in streamed) == (
        "--names-check" in flags and requests == 2
    )
