"""Prefetching the query embedder: a local MiniLM starts loading while the index loads, the next
load_embedder of the same spec takes it, its failure surfaces there, and nothing but local
models is ever prefetched (a manifest's endpoint is not contacted)."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from psirag.embed import factory
from psirag.embed.endpoints import prefetch_index_embedder
from psirag.errors import EmbeddingError


@pytest.fixture(autouse=True)
def _no_leftovers() -> None:
    factory._PREFETCHED.clear()


def test_load_embedder_takes_the_prefetched_one(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, int | None]] = []
    sentinel = object()

    def fake_load(spec: str, batch_size: int | None, device: str) -> object:
        made.append((spec, batch_size))
        return sentinel

    monkeypatch.setattr(factory, "_load_minilm", fake_load)
    monkeypatch.setattr(factory, "default_minilm_backend", lambda device="cpu": "onnx")
    assert factory.prefetch_embedder("minilm", 16)
    assert factory.load_embedder("minilm", batch_size=16) is sentinel
    assert made == [("minilm", 16)]
    # taken once: the next load builds its own
    assert factory.load_embedder("minilm", batch_size=16) is sentinel
    assert made == [("minilm", 16), ("minilm", 16)]


def test_prefetch_failure_is_raised_by_load_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(spec: str, batch_size: int | None, device: str) -> object:
        raise EmbeddingError("no model here")

    monkeypatch.setattr(factory, "_load_minilm", failing)
    monkeypatch.setattr(factory, "default_minilm_backend", lambda device="cpu": "onnx")
    assert factory.prefetch_embedder("minilm-onnx")
    with pytest.raises(EmbeddingError, match="no model here"):
        factory.load_embedder("minilm-onnx")


@pytest.mark.parametrize(
    "spec", ["openai:http://127.0.0.1:9/v1#m", "st:/nowhere", "minilm-torch", "mpnet", "hash"]
)
def test_only_local_onnx_minilm_is_prefetched(spec: str, tmp_path: Path) -> None:
    manifest = {"config": {"embedder": spec, "batch_size": None}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert not prefetch_index_embedder(tmp_path)
    assert factory._PREFETCHED == {}


@pytest.mark.parametrize("body", ["", "[1]", '{"config": {"embedder": 3}}', "{not json"])
def test_an_unreadable_manifest_prefetches_nothing(body: str, tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(body, encoding="utf-8")
    assert not prefetch_index_embedder(tmp_path)
    assert not prefetch_index_embedder(tmp_path / "missing")


@pytest.mark.skipif(find_spec("onnxruntime") is None, reason="onnxruntime missing")
def test_prefetched_minilm_embeds_like_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import numpy as np

    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    fresh = factory.load_embedder("minilm-onnx")
    (tmp_path / "index").mkdir()
    manifest = {"config": {"embedder": "minilm-onnx", "batch_size": None}}
    (tmp_path / "index" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert prefetch_index_embedder(tmp_path / "index")
    early = factory.load_embedder("minilm-onnx")
    assert early is not fresh and early.id == fresh.id
    texts = ["a volcano in Sicily", ""]
    np.testing.assert_array_equal(early.embed(texts), fresh.embed(texts))
