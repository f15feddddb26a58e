"""LLM abstracts end to end against a real loopback server: bottom-up order, even cuts, cleaning,
and resuming after a crash through the response cache."""

from __future__ import annotations

import re

import numpy as np
import pytest
from support import FakeOpenAIServer, Reply

from psirag.abstracts.llm import (
    KEYWORD_PARAMS,
    SUMMARY_PARAMS,
    clean_keywords,
    clean_summary,
    cut_to_tokens,
    fit_evenly,
    llm_abstracts,
)
from psirag.errors import InputError
from psirag.http import HttpPolicy
from psirag.llm import LLMClient, LLMHTTPError, OpenAIChat
from psirag.tree.model import Tree


def words(text: str) -> int:
    return len(text.split())


def docs_of(body: dict) -> list[str]:
    """The documents of the last user message, as the prompt numbered them."""
    content = body["messages"][-1]["content"]
    opening, body_text = content.split("\n", 2)[1:]  # "Documents:", the fence line, the rest
    assert opening.startswith("\u27e6DOCUMENTS ")
    body_text = body_text.rsplit("\n", 1)[0]  # the closing fence line
    return [re.sub(r"^\[\d+\] ", "", block) for block in body_text.split("\n\n")]


def is_keywords(body: dict) -> bool:
    return "keyword" in body["messages"][0]["content"]


def responder(body: dict) -> str:
    """Summaries/keywords that name the first word of each document, with filler to clean."""
    heads = [d.split()[0] for d in docs_of(body)]
    if is_keywords(body):
        return "Here are the key phrases:\nKeywords: " + ", ".join(
            heads + [h.upper() for h in heads]
        )
    return (
        "Sure! Here is a summary of the documents:\n**Summary:** About " + " and ".join(heads) + "."
    )


def two_layer_tree() -> tuple[Tree, list[str]]:
    """8 leaves; four layer-1 nodes of two leaves; two layer-2 nodes; one root."""
    parent = np.array([8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, -1])
    layer = np.array([0] * 8 + [1] * 4 + [2] * 2 + [3])
    texts = [f"leaf{i}\nText of leaf {i} about topic {i // 2}." for i in range(8)]
    return Tree(parent=parent, layer=layer), texts


@pytest.mark.parametrize("kind", ["summary", "keywords"])
def test_end_to_end_bottom_up(tmp_path, kind):
    tree, texts = two_layer_tree()
    with FakeOpenAIServer(responder=responder) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite")
        abstracts, stats = llm_abstracts(tree, texts, client, kind=kind, count_tokens=words)
        assert srv.calls == 7
        params = SUMMARY_PARAMS if kind == "summary" else KEYWORD_PARAMS
        for request in srv.requests:
            assert request["max_tokens"] == params.max_tokens
            assert request["repeat_penalty"] == params.repeat_penalty
            assert request["temperature"] == 0.0
        # Layer 1 saw leaf texts, layer 2 saw layer-1 abstracts, the root layer-2 abstracts.
        # Requests within a layer run concurrently, so compare each layer as a set.
        sent = [docs_of(r) for r in srv.requests]
        assert sorted(sent[:4]) == [texts[i : i + 2] for i in (0, 2, 4, 6)]
        assert sorted(sent[4:6]) == sorted([abstracts[8:10], abstracts[10:12]])
        assert sent[6] == abstracts[12:14]
    assert abstracts[:8] == [""] * 8
    if kind == "summary":
        assert abstracts[8] == "About leaf0 and leaf1."
    else:
        assert abstracts[8] == "leaf0, leaf1"  # filler and label gone, LEAF0 a duplicate
    assert all(abstracts[8:])
    assert stats["nodes"] == 7 and stats["calls"] == 7 and stats["cached"] == 0
    assert stats["cut_nodes"] == 0 and stats["fallback"] == [] and stats["inherited"] == 0
    assert stats["prompt_tokens"] == 70 and stats["completion_tokens"] == 35
    assert client.usage["abstracts"]["calls"] == 7


def test_resume_after_crash_pays_only_unfinished(tmp_path):
    tree, texts = two_layer_tree()
    healthy = True

    def crashing(body):
        # The server dies when it reaches the third layer-1 node (leaves 4 and 5).
        if not healthy and "leaf4" in body["messages"][-1]["content"]:
            return Reply(status=500, body="server crashed")
        return responder(body)

    with FakeOpenAIServer(responder=crashing) as srv:
        healthy = False
        client = LLMClient(
            OpenAIChat(srv.base_url, "m", http=HttpPolicy(retries=1, backoff=0)),
            tmp_path / "c.sqlite",
            max_concurrency=1,
        )
        with pytest.raises(LLMHTTPError):
            llm_abstracts(tree, texts, client, kind="summary", count_tokens=words)
        first_calls = srv.calls
        finished = len(client.cache)
        assert finished == 2 and first_calls == 4  # two done, one failed twice, one never sent
        client.close()

        healthy = True
        rerun = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite", max_concurrency=4)
        abstracts, stats = llm_abstracts(tree, texts, rerun, kind="summary", count_tokens=words)
        assert srv.calls - first_calls == 7 - finished
        assert stats["cached"] == finished and stats["calls"] == 7 - finished
        # A third run is free.
        before = srv.calls
        again, stats3 = llm_abstracts(tree, texts, rerun, kind="summary", count_tokens=words)
        assert srv.calls == before and again == abstracts and stats3["cached"] == 7


def test_overlong_input_is_cut_evenly_and_recorded(tmp_path):
    parent = np.array([3, 3, 3, -1])
    layer = np.array([0, 0, 0, 1])
    short = "short " + "tiny " * 19
    long_a = "alpha " + " ".join(f"a{i}" for i in range(1999))
    long_b = "beta " + " ".join(f"b{i}" for i in range(2999))
    with FakeOpenAIServer(responder=responder) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), None)
        abstracts, stats = llm_abstracts(
            Tree(parent=parent, layer=layer),
            [short, long_a, long_b],
            client,
            kind="keywords",
            context_tokens=2048,
            count_tokens=words,
        )
        sent = docs_of(srv.requests[0])
    assert stats["cut_nodes"] == 1
    cut = stats["cuts"][0]
    assert cut["node"] == 3 and cut["children"] == 3 and cut["children_cut"] == 2
    assert cut["tokens_before"] == 5020
    room = stats["input_budget_tokens"] - 3 * 3
    assert cut["tokens_after"] <= room
    assert sent[0] == short.strip()  # the short child keeps everything
    assert sent[1].endswith("…") and sent[2].endswith("…")
    assert words(sent[1]) == words(sent[2]) == cut["cap_per_child"]  # equal shares
    assert cut["cap_per_child"] == (room - 20) // 2
    assert abstracts[3] == "short, alpha, beta"


def test_context_too_small_is_an_error(tmp_path):
    tree, texts = two_layer_tree()
    client = LLMClient(OpenAIChat("http://127.0.0.1:9/v1", "m"), None)
    with pytest.raises(InputError, match="context"):
        llm_abstracts(tree, texts, client, kind="summary", context_tokens=300, count_tokens=words)


def test_single_child_inherits_and_empty_reply_falls_back(tmp_path):
    # Root 4 has one child (3), which has the two leaves... plus a leaf-only chain 5 -> leaf 2.
    parent = np.array([3, 3, 5, 4, -1, 6, -1])
    layer = np.array([0, 0, 0, 1, 2, 1, 2])
    texts = ["Alpha title\nAlpha text.", "Beta title\nBeta text.", "Gamma title\nGamma text."]

    def reply(body):
        return "" if "Gamma" in body["messages"][-1]["content"] else responder(body)

    with FakeOpenAIServer(responder=reply) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite")
        abstracts, stats = llm_abstracts(
            Tree(parent=parent, layer=layer), texts, client, kind="keywords", count_tokens=words
        )
        assert srv.calls == 2  # node 3 and node 5; nodes 4 and 6 inherit
    assert abstracts[4] == abstracts[3] == "Alpha, Beta"
    assert stats["inherited"] == 2
    assert stats["fallback"] == [5] and abstracts[5] == "Gamma title" == abstracts[6]
    assert len(client.cache) == 1  # the empty reply was not cached


def test_wrong_leaf_count():
    tree, texts = two_layer_tree()
    client = LLMClient(OpenAIChat("http://127.0.0.1:9/v1", "m"), None)
    with pytest.raises(InputError, match="leaf texts"):
        llm_abstracts(tree, texts[:3], client, kind="summary")
    with pytest.raises(InputError, match="kind"):
        llm_abstracts(tree, texts, client, kind="bullets")  # type: ignore[arg-type]


# --- cleaning and cutting, unit level ---------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Summary: The bridge opened in 2000.", "The bridge opened in 2000."),
        ("Here is a summary of the given documents:\n\nSummary:  A  B.", "A B."),
        ("**Summary:**\nTwo hotels.\nOne company.", "Two hotels. One company."),
        ("Sure Start is a UK programme.", "Sure Start is a UK programme."),
        ("<think>hmm</think>Summary: x.", "x."),
    ],
)
def test_clean_summary(raw, expected):
    assert clean_summary(raw) == expected


def test_clean_summary_drops_unfinished_sentence_when_capped():
    text = "Summary: One full sentence here. Another full one. And a cut-off tail that"
    assert clean_summary(text, truncated=True) == "One full sentence here. Another full one."
    assert clean_summary(text).endswith("tail that")


def test_clean_keywords():
    raw = (
        "Here are the key phrases according to the documents:\n"
        "Information key phrases: historic hotels, Hotel Companies\n"
        'Theme key phrases: hotel companies; 1. Delhi, - Mohan Singh Oberoi., "Hotel Bond"'
    )
    assert clean_keywords(raw) == (
        "historic hotels, Hotel Companies, Delhi, Mohan Singh Oberoi, Hotel Bond"
    )
    many = ", ".join(f"phrase {i}" for i in range(40))
    assert clean_keywords(many, max_keywords=20).count(",") == 19
    assert clean_keywords("a b, c d, e f, g h cut", truncated=True) == "a b, c d, e f"
    assert clean_keywords("a b, c d,", truncated=True) == "a b, c d"
    sentence = "this is a whole sentence that rambles on far too long to be a phrase at all"
    assert clean_keywords(f"good phrase, {sentence}") == "good phrase"


def test_fit_evenly_water_fills():
    texts = ["x " * 5, "y " * 50, "z " * 100]
    out, cut = fit_evenly(texts, 65, words)
    assert cut is not None and cut["cap_per_child"] == 30
    assert words(out[0]) == 5 and words(out[1]) == 30 and words(out[2]) == 30
    same, none = fit_evenly(texts, 155, words)
    assert none is None and same == texts


def test_cut_to_tokens_keeps_whole_words():
    text = "one two three four five six"
    assert cut_to_tokens(text, 4, words) == "one two three …"
    assert cut_to_tokens(text, 10, words) == text
