"""Shared fixtures only; the helpers they use live in ``tests/support`` (``from support import
...``). Never imported by a test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder, ScriptedServer
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


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """The scripted LLM server of the agent tests (a module whose ``server`` is something else,
    such as a ``psirag serve`` process, defines its own)."""
    s = ScriptedServer()
    yield s
    s.close()


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
