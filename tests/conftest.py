"""Shared fixtures only; the helpers they use live in ``tests/support`` (``from support import
...``). Never imported by a test module."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-bad-inputs",
        action="store_true",
        help="rewrite docs/bad-inputs.md from the outcomes of tests/test_bad_inputs.py",
    )
