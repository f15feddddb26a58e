"""An index written by an older psirag (torch-exported ONNX, tests/fixtures/minilm_index, made by
scripts/make_compat_index.py at main 8da280c) loads and searches under today's torch-free
``minilm`` with the same results, embedding only the queries."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from psirag import Index
from psirag.embed import load_embedder

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_index"

pytestmark = pytest.mark.skipif(find_spec("onnxruntime") is None, reason="onnxruntime missing")


class CountingEmbedder:
    """Wraps the real embedder and records every text it is asked to embed."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.seen: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str], **kwargs: object) -> np.ndarray:
        self.seen.extend(texts)
        return self.inner.embed(texts, **kwargs)  # type: ignore[attr-defined]


def test_index_saved_by_older_main_searches_without_reembedding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "index"
    shutil.copytree(FIXTURE / "index", folder)  # loading registers a reader: not in the repo
    expected = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))
    embedder = load_embedder("minilm")
    assert "torch" not in type(embedder).__module__
    counting = CountingEmbedder(embedder)
    index = Index.load(folder, embedder=counting)  # type: ignore[arg-type]
    assert index.embedder_id == embedder.id  # same id: no mismatch error, no rebuild
    for query, texts in expected.items():
        assert [p.text for p in index.search(query, k=3)] == texts
    assert counting.seen == list(expected)  # only the queries were embedded
    # the stored leaf vectors (torch-exported ONNX at the time) equal today's vectors
    chunks = [c.text for c in index.chunks]
    stored = np.asarray(index.node_vectors[: len(chunks)])
    fresh = embedder.embed(chunks)
    assert float((stored * fresh).sum(axis=1).min()) >= 0.99999
