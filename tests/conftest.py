"""Shared fixtures only; the helpers they use live in ``tests/support`` (``from support import
...``). Never imported by a test module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import TOPICS, FakeOpenAIServer, HashEmbedder, ScriptedLLM, no_more_replies
from support.agents import FakeTreeIndex


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def topic_texts() -> list[str]:
    return [t for texts in TOPICS.values() for t in texts]


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, texts in TOPICS.items():
        (folder / f"{name}.txt").write_text(" ".join(texts) + "\n", encoding="utf-8")
    (folder / "notes.md").write_text(
        "# Notes\n\nVolcanoes and football rarely meet. Bread is baked daily.\n", encoding="utf-8"
    )
    return folder


def _fake_llm_options(
    request: pytest.FixtureRequest, responder: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """The options of the closest ``fake_llm`` marker, else just ``responder``."""
    marker = request.node.get_closest_marker("fake_llm")
    if marker is None:
        return {"responder": responder}
    if marker.args:
        raise TypeError("pytest.mark.fake_llm takes keyword arguments only")
    return dict(marker.kwargs)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server of this test. Its options (``responder``, ``usage``,
    ``embed``, ``model``...) come from the closest ``pytest.mark.fake_llm(...)`` marker (on the
    test, its class or the module's ``pytestmark``); with none, it replays only what the test
    scripts and answers 500 after. A module whose ``server`` is something else (a ``psirag
    serve`` process) defines its own."""
    with FakeOpenAIServer(**_fake_llm_options(request, no_more_replies)) as fake:
        yield fake


@pytest.fixture(scope="module")
def llm(request: pytest.FixtureRequest) -> Iterator[FakeOpenAIServer]:
    """One fake OpenAI-compatible server for a whole module: the LLM of the ``psirag serve``
    processes the server and page tests start once. It answers as :class:`ScriptedLLM` (the
    agent's and the summarizer's scripted model) unless the module's ``fake_llm`` marker says
    otherwise."""
    with FakeOpenAIServer(**_fake_llm_options(request, ScriptedLLM())) as fake:
        yield fake


@pytest.fixture
def fake_llm() -> Iterator[Callable[..., FakeOpenAIServer]]:
    """Starts fake OpenAI-compatible servers with the options given (for a test that needs
    several, or options known only at run time); all are closed after the test."""
    started: list[FakeOpenAIServer] = []

    def start(responder: Any = None, **options: Any) -> FakeOpenAIServer:
        started.append(FakeOpenAIServer(responder, **options))
        return started[-1]

    yield start
    for fake in started:
        fake.close()


@pytest.fixture
def fake_index(monkeypatch: pytest.MonkeyPatch) -> FakeTreeIndex:
    """The stand-in tree index, handed to the agent commands in place of loading one."""
    from psirag.cli import agent_cmds as agent_cli

    index = FakeTreeIndex()
    monkeypatch.setattr(agent_cli, "_load_index", lambda path: index)
    return index


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-bad-inputs",
        action="store_true",
        help="rewrite docs/bad-inputs.md from the outcomes of tests/test_bad_inputs.py",
    )
