"""Helpers shared by the tests (not tests themselves): ``from support import HashEmbedder``.

``tests/`` is on the import path through pytest's ``pythonpath`` setting in pyproject.toml.
Fixtures stay in ``tests/conftest.py``; test modules import helpers from here, never from
``conftest`` or from one another (``tests/test_test_layout.py`` checks it). The more
specialised helpers are imported from their module: ``support.trees`` (test vectors, tree
invariants), ``support.retrieval`` (reference searches), ``support.agents`` (the agent tests'
stand-in index and questions), ``support.datasets`` (a tiny eval data set on disk),
``support.corpora.write_format1`` (an index in the old on-disk format), ``support.browser``
(the system Chromium).
"""

from support.corpora import TOPICS, build_index, competing_texts, random_phrase_updates
from support.embedders import HashEmbedder
from support.fake_llm import (
    ANSWER_REPLY,
    EMBED_DIM,
    LLM_SECRET,
    NO_RETRY,
    RETRIEVE_REPLY,
    SUMMARY_REPLY,
    FakeOpenAIServer,
    Reply,
    ScriptedLLM,
    bag_of_words,
    client_for,
    echo_prompt,
    no_more_replies,
)
from support.processes import (
    LAUNCHER,
    ServerProcess,
    ask_stream,
    child_env,
    free_port,
    sse_events,
    stop_process,
)

__all__ = [
    "ANSWER_REPLY",
    "EMBED_DIM",
    "LAUNCHER",
    "LLM_SECRET",
    "NO_RETRY",
    "RETRIEVE_REPLY",
    "SUMMARY_REPLY",
    "TOPICS",
    "FakeOpenAIServer",
    "HashEmbedder",
    "Reply",
    "ScriptedLLM",
    "ServerProcess",
    "ask_stream",
    "bag_of_words",
    "build_index",
    "child_env",
    "client_for",
    "competing_texts",
    "echo_prompt",
    "free_port",
    "no_more_replies",
    "random_phrase_updates",
    "sse_events",
    "stop_process",
]
