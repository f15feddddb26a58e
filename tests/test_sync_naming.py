"""One naming rule for files (issue 26): ``sync`` names a document as ``index`` does, by the path
it was found under (a symbolic link by its own name, a file in a sub-folder with its folder),
never by the link's target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

import psirag.cli.living_cmds as cli_living
import psirag.embed as embed
from psirag import Index
from psirag.cli import main


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(embed, "load_embedder", lambda spec, **kw: HashEmbedder())
    monkeypatch.setattr(cli_living, "load_embedder_for", lambda spec, *a, **kw: HashEmbedder())
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name, texts in TOPICS.items():
        (elsewhere / f"{name}-target.txt").write_text(" ".join(texts))
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    os.symlink("../elsewhere/volcanoes-target.txt", docs / "volcanoes.txt")
    (docs / "sub" / "plain.txt").write_text("Trains run on steel rails between stations.")
    return tmp_path


def test_sync_names_new_files_as_index_does(tree: Path) -> None:
    assert main(["index", "docs", "--out", "idx", "-q"]) == 0
    built = set(Index.load("idx").documents)
    assert built == {"volcanoes.txt", "sub/plain.txt"}
    os.symlink("../../elsewhere/baking-target.txt", tree / "docs" / "sub" / "bread.txt")
    assert main(["sync", "idx", "docs", "-q"]) == 0
    assert set(Index.load("idx").documents) == built | {"sub/bread.txt"}
    # a changed target is re-indexed under the link's name too
    (tree / "elsewhere" / "volcanoes-target.txt").write_text("Etna erupted again with lava.")
    assert main(["sync", "idx", "docs", "-q"]) == 0
    assert set(Index.load("idx").documents) == built | {"sub/bread.txt"}


def test_sync_of_a_fresh_folder_equals_index(tree: Path) -> None:
    """Replacing everything (--allow-remove-all) names the documents as a fresh index would."""
    assert main(["index", "docs", "--out", "a", "-q"]) == 0
    (tree / "other").mkdir()
    (tree / "other" / "x.txt").write_text("Football clubs employ scouts and managers.")
    assert main(["index", "other", "--out", "b", "-q"]) == 0
    assert main(["sync", "b", "docs", "-q", "--allow-remove-all"]) == 0
    assert set(Index.load("b").documents) == set(Index.load("a").documents)
