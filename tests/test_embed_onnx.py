"""The ONNX Runtime MiniLM backend: export checked against torch, cached atomically outside the
model folder, its id shared with torch (fp32) or not (int8), and a clear error without the extra."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psirag import Index, IndexConfig
from psirag.embed import base as embed_base
from psirag.embed import load_embedder, model_fingerprint
from psirag.embed import onnx as onnx_module
from psirag.errors import EmbedderMismatchError, EmbeddingError, InputError

needs_ort = pytest.mark.skipif(find_spec("onnxruntime") is None, reason="psirag[onnx] missing")

SAMPLE = [
    "Mount Etna is an active volcano on the east coast of Sicily.",
    "Arsenal is a football club based in north London.",
    "Bread dough rises when yeast ferments the sugars in flour.",
    "short",
    "A much longer passage about the history of the Roman Empire, its provinces, roads, "
    "legions and emperors, written to need many more tokens than the others in its batch. " * 3,
    "word " * 400,  # longer than MiniLM's 256 tokens: truncated alike by both paths
]


def test_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(InputError, match=r"pip install 'psirag\[onnx\]'"):
        load_embedder("minilm-onnx")
    assert embed_base.default_minilm_backend() == "torch"  # plain minilm still runs


def test_minilm_specs_pick_their_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each MiniLM spec reaches its backend class with its own precision and spec string."""
    made: list[tuple[str, dict[str, Any]]] = []

    class Fake:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append((type(self).__name__, kwargs))

    class OnnxFake(Fake):
        pass

    class TorchFake(Fake):
        pass

    monkeypatch.setattr(onnx_module, "OnnxEmbedder", OnnxFake)
    import psirag.embed.sentence_transformers as st_module

    monkeypatch.setattr(st_module, "SentenceTransformerEmbedder", TorchFake)
    for spec in ("minilm", "minilm-torch", "minilm-onnx", "minilm-onnx-int8"):
        load_embedder(spec)
    kinds = [(name, kw.get("precision"), kw["spec"]) for name, kw in made]
    assert kinds == [
        ("TorchFake", None, "minilm"),
        ("TorchFake", None, "minilm-torch"),
        ("OnnxFake", "fp32", "minilm-onnx"),
        ("OnnxFake", "int8", "minilm-onnx-int8"),
    ]


def test_cache_folder_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path / "c"))
    assert onnx_module.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PSIRAG_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert onnx_module.cache_dir() == tmp_path / "x" / "psirag"
    folder = embed_base.minilm_path()
    path = onnx_module.onnx_path(folder, "int8")
    assert path.parent == tmp_path / "x" / "psirag" / "onnx"
    assert model_fingerprint(folder) in path.name and path.name.endswith("-int8.onnx")
    assert folder not in path.parents  # never inside the model folder (its fingerprint)


def test_failed_export_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    monkeypatch.setattr(onnx_module, "_encoder_module", lambda folder: torch.nn.Identity())

    def broken_export(module: Any, args: Any, f: str, **kwargs: Any) -> None:
        Path(f).write_bytes(b"half a model")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch.onnx, "export", broken_export)
    folder = embed_base.minilm_path()
    with pytest.raises(EmbeddingError, match="disk full"):
        onnx_module.export_onnx(folder)
    assert list((tmp_path / "onnx").iterdir()) == []  # no target, no temporary file


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """torch, ONNX fp32 and ONNX int8 MiniLM, the ONNX files exported into a fresh cache."""
    pytest.importorskip("onnxruntime")
    cache = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PSIRAG_CACHE", str(cache))
        before = model_fingerprint(embed_base.minilm_path())
        out = {
            "torch": load_embedder("minilm-torch"),
            "onnx": load_embedder("minilm-onnx"),
            "int8": load_embedder("minilm-onnx-int8"),
            "cache": cache,
            "fingerprint_before": before,
        }
        yield out


@needs_ort
@pytest.mark.slow
def test_onnx_vectors_match_torch_and_share_its_id(backends: dict[str, Any]) -> None:
    ref = backends["torch"].embed(SAMPLE)
    got = backends["onnx"].embed(SAMPLE)
    cosine = (ref * got).sum(axis=1)
    assert cosine.min() >= 0.999
    assert np.abs(ref - got).max() < 1e-3  # close enough to share the id
    assert backends["onnx"].id == backends["torch"].id
    assert backends["onnx"].last_truncated == 1 == backends["torch"].last_truncated
    assert backends["onnx"].dim == 384
    # exporting wrote only into the cache: the model folder, so every index's id, is unchanged
    assert model_fingerprint(embed_base.minilm_path()) == backends["fingerprint_before"]
    assert sorted(p.name.split("-")[-1] for p in (backends["cache"] / "onnx").iterdir()) == [
        "fp32.onnx",
        "int8.onnx",
    ]


@needs_ort
@pytest.mark.slow
def test_int8_is_close_but_has_its_own_id(backends: dict[str, Any]) -> None:
    ref = backends["torch"].embed(SAMPLE)
    got = backends["int8"].embed(SAMPLE)
    assert (ref * got).sum(axis=1).mean() >= 0.98
    assert backends["int8"].id != backends["torch"].id
    assert backends["int8"].id.startswith(backends["torch"].id)


@needs_ort
@pytest.mark.slow
def test_index_from_torch_serves_onnx_queries_and_refuses_int8(
    backends: dict[str, Any], tmp_path: Path
) -> None:
    index = Index.build(SAMPLE[:3], IndexConfig(), embedder=backends["torch"], texts=True)
    index.save(tmp_path / "ix")
    loaded = Index.load(tmp_path / "ix", embedder=backends["onnx"])
    hits = loaded.search("volcano in Sicily", k=1)
    assert "Etna" in hits[0].text
    with pytest.raises(EmbedderMismatchError, match="int8"):
        Index.load(tmp_path / "ix", embedder=backends["int8"]).search("volcano", k=1)
