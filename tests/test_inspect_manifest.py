"""`psirag inspect` reads a format-3 index's summary from its manifest: the same output as a
full load, without loading the index; older indexes (no shape in the manifest) still load."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

import psirag.storage_format
from psirag import Index, IndexConfig
from psirag.cli import main
from psirag.summary import inspect_summary, saved_summary

V2_FIXTURE = Path(__file__).parent / "data" / "index_format_v2"
TEXTS = [t for texts in TOPICS.values() for t in texts]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    index = Index.build(TEXTS, IndexConfig(chunk_tokens=40), embedder=HashEmbedder(), texts=True)
    folder = tmp_path / "ix"
    index.save(folder)
    index.remove([index.documents[0]])
    index.save(folder)  # a lineage with an update, so the drift is not trivial
    return folder


def _inspect(*args: str) -> str:
    out = io.StringIO()
    from psirag.cli import build_parser
    from psirag.cli.index_cmds import run_inspect

    parsed = build_parser(["inspect", *args]).parse_args(["inspect", *args])
    assert run_inspect(parsed, stdout=out) == 0
    return out.getvalue()


def test_the_manifest_summary_equals_a_loaded_index_summary(saved: Path) -> None:
    from_manifest = saved_summary(saved)
    assert from_manifest is not None
    payload, root_text = from_manifest
    loaded = Index.load(saved, embedder=HashEmbedder())
    assert payload == inspect_summary(loaded, saved)
    assert payload["drift"]["updates"] == 1 and payload["drift"]["leaves_removed"] > 0
    tree = loaded.tree
    assert root_text == (loaded.node_text(tree.root)[:200] if tree.roots.size == 1 else "")


def test_inspect_loads_nothing_but_the_manifest(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected_json = _inspect(str(saved), "--json")
    expected_text = _inspect(str(saved))

    def no_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("inspect loaded the index")

    monkeypatch.setattr(psirag.storage_format, "load_index_data", no_load)
    monkeypatch.setattr(Index, "load", no_load)
    assert _inspect(str(saved), "--json") == expected_json
    assert _inspect(str(saved)) == expected_text
    assert "drift:" in expected_text and "fan-out:" in expected_text


def test_an_index_without_a_shape_in_its_manifest_is_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "v2"
    shutil.copytree(V2_FIXTURE, folder)
    assert saved_summary(folder) is None
    out = io.StringIO()
    from contextlib import redirect_stdout

    with redirect_stdout(out):
        assert main(["inspect", str(folder), "--json"]) == 0
    payload = json.loads(out.getvalue())["index"]
    assert payload["chunks"] > 0 and payload["fan_out"]["histogram"]
