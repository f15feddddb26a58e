"""Reading agent replies: the marker rules, decoration, rescue and the no-marker fallback."""

from __future__ import annotations

import pytest

from psirag.agent.parsing import bare_answer, parse_reply


def test_well_formed_answer() -> None:
    r = parse_reply("Thought: The documents say Lisbon.\nAnswer: Lisbon")
    assert (r.thought, r.action, r.argument) == ("The documents say Lisbon.", "answer", "Lisbon")
    assert r.well_formed and not r.rescued and r.kind == "well_formed"


def test_well_formed_retrieve() -> None:
    r = parse_reply("Thought: I need the owner.\nRetrieve: Who owns the Blue Harbour Hotel?")
    assert r.action == "retrieve"
    assert r.argument == "Who owns the Blue Harbour Hotel?"
    assert r.well_formed


def test_a_turn_the_model_wrote_for_the_user_is_not_read() -> None:
    # Qwen2.5-1.5B, copying the example's "[role]" layout, went on past its marker line with a
    # made-up user turn and its own next reply: only the text before the header is its reply.
    reply = (
        "Thought: The father is William the Silent.\n"
        "Retrieve: Where did William the Silent die?\n\n"
        "[user]\nRetrieved documents:\n[4] William the Silent\nHe died in Delft.\n\n"
        "[assistant]\nThought: He died in Delft.\nAnswer: Delft [4]"
    )
    r = parse_reply(reply)
    assert (r.action, r.argument) == ("retrieve", "Where did William the Silent die?")
    assert r.thought == "The father is William the Silent."
    ended = parse_reply("Thought: Both are in Russia.\nAnswer: Yes [1][2]\n\n(End of example.)")
    assert (ended.action, ended.argument) == ("answer", "Yes [1][2]")
    # Without the cut, the invented turn's answer would win: a bracketed word alone is no header.
    assert parse_reply("Thought: [user] asks.\nAnswer: Delft").argument == "Delft"


def test_a_reply_that_opens_with_its_own_header_keeps_its_body() -> None:
    r = parse_reply("[assistant]\nThought: It is Lisbon.\nAnswer: Lisbon\n[user]\nAnswer: Porto")
    assert (r.action, r.argument, r.thought) == ("answer", "Lisbon", "It is Lisbon.")
    assert parse_reply("[assistant]\n[user]\nAnswer: Porto").action is None


def test_last_marker_wins() -> None:
    reply = (
        "Thought: At first I thought\n"
        "Answer: Porto\n"
        "but the second document corrects this.\n"
        "Retrieve: Where is the Calder Group's head office?"
    )
    r = parse_reply(reply)
    assert r.action == "retrieve"
    assert r.argument == "Where is the Calder Group's head office?"
    assert "Answer: Porto" in r.thought


@pytest.mark.parametrize(
    "reply",
    [
        "answer: Lisbon",
        "ANSWER:Lisbon",
        "**Answer:** Lisbon",
        "**Answer**: Lisbon",
        "### Answer: Lisbon",
        "- Answer: *Lisbon*",
        "  Answer: `Lisbon`",
        "Final Answer: Lisbon",
        "Answer: Lisbon\n\nI hope this helps!",
        'Answer: "Lisbon"',
    ],
)
def test_decorated_answers_are_well_formed(reply: str) -> None:
    r = parse_reply(reply)
    assert (r.action, r.argument, r.well_formed) == ("answer", "Lisbon", True)


def test_missing_thought_prefix_and_decorated_thought() -> None:
    r = parse_reply("The hotel belongs to Calder.\nAnswer: Calder Group")
    assert r.thought == "The hotel belongs to Calder."
    r = parse_reply("**Thought:** reasoning here\n**Answer:** Calder Group")
    assert r.thought == "reasoning here"
    assert r.argument == "Calder Group"


def test_marker_with_argument_on_next_line() -> None:
    r = parse_reply("Thought: done.\nAnswer:\n\nLisbon\n")
    assert (r.action, r.argument, r.well_formed) == ("answer", "Lisbon", True)


def test_empty_marker_does_not_take_a_following_marker_as_its_argument() -> None:
    r = parse_reply("Retrieve: owner of the hotel\nAnswer:\n")
    assert (r.action, r.argument) == ("retrieve", "owner of the hotel")


def test_inline_marker_is_rescued_not_well_formed() -> None:
    r = parse_reply("Thought: it is in Lisbon, so Answer: Lisbon")
    assert (r.action, r.argument) == ("answer", "Lisbon")
    assert not r.well_formed and r.rescued and r.kind == "rescued"
    assert r.thought == "it is in Lisbon, so"


def test_no_marker_reports_none() -> None:
    r = parse_reply("Thought: I am not sure what the documents mean.\nLet me think more.")
    assert r.action is None and r.argument == ""
    assert not r.well_formed and not r.rescued and r.kind == "unparsed"
    assert r.thought.startswith("I am not sure")


@pytest.mark.parametrize("reply", ["", "   \n\n", "Answer:", "Retrieve:   "])
def test_empty_replies_and_empty_markers_give_no_action(reply: str) -> None:
    r = parse_reply(reply)
    assert r.action is None and r.kind == "unparsed"


def test_words_that_start_like_markers_are_not_markers() -> None:
    r = parse_reply("Retrieved documents: none\nAnswering: later")
    assert r.action is None


def test_think_blocks_are_ignored() -> None:
    r = parse_reply("<think>Answer: Porto? no.</think>\nThought: ok\nAnswer: Lisbon")
    assert r.argument == "Lisbon"
    assert "Porto" not in r.thought
    assert parse_reply("<think>Answer: Porto, cut off by the token cap").action is None


def test_windows_line_endings() -> None:
    r = parse_reply("Thought: x\r\nRetrieve: who owns it?\r\n")
    assert (r.action, r.argument, r.well_formed) == ("retrieve", "who owns it?", True)


def test_bare_answer_reads_one_short_line_only() -> None:
    assert bare_answer("Lisbon") == "Lisbon"
    assert bare_answer("  **Lisbon**  \n") == "Lisbon"
    assert bare_answer("") is None
    assert bare_answer("Lisbon\nbecause the document says so") is None
    assert bare_answer(" ".join(["word"] * 30)) is None
