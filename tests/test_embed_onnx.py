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

needs_ort = pytest.mark.skipif(find_spec("onnxruntime") is None, reason="onnxruntime missing")

SAMPLE = [
    "Mount Etna is an active volcano on the east coast of Sicily.",
    "Arsenal is a football club based in north London.",
    "Bread dough rises when yeast ferments the sugars in flour.",
    "short",
    "A much longer passage about the history of the Roman Empire, its provinces, roads, "
    "legions and emperors, written to need many more tokens than the others in its batch. " * 3,
    "word " * 400,  # longer than MiniLM's 256 tokens: truncated alike by both paths
]


def test_missing_onnxruntime_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(InputError, match=r"pip install 'onnxruntime"):
        load_embedder("minilm-onnx")
    assert embed_base.default_minilm_backend() == "torch"  # plain minilm still runs


class _Fake:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs


class OnnxFake(_Fake):
    pass


class TorchFake(_Fake):
    pass


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both MiniLM backend classes replaced by recorders; no model is loaded."""
    import psirag.embed.sentence_transformers as st_module

    monkeypatch.setattr(onnx_module, "OnnxEmbedder", OnnxFake)
    monkeypatch.setattr(st_module, "SentenceTransformerEmbedder", TorchFake)
    monkeypatch.setattr(embed_base, "_ONNX_FAILED", {})


@needs_ort
def test_minilm_specs_pick_their_backend_and_batch(fakes: None) -> None:
    """Plain minilm is ONNX fp32 at batch 8 on CPU; each spec reaches its backend with its own
    precision, spec string and batch size; an explicit batch size wins."""
    made = [load_embedder(s) for s in embed_base.MINILM_SPECS]
    kinds = [(type(e).__name__, e.kwargs.get("precision"), e.kwargs["spec"]) for e in made]
    assert kinds == [
        ("OnnxFake", "fp32", "minilm"),
        ("TorchFake", None, "minilm-torch"),
        ("OnnxFake", "fp32", "minilm-onnx"),
        ("OnnxFake", "int8", "minilm-onnx-int8"),
    ]
    assert [e.kwargs["batch_size"] for e in made] == [8, 16, 8, 8]
    assert load_embedder("minilm", batch_size=32).kwargs["batch_size"] == 32
    assert load_embedder("minilm-torch", batch_size=4).kwargs["batch_size"] == 4
    assert type(load_embedder("minilm", device="cuda")).__name__ == "TorchFake"
    assert embed_base.default_minilm_backend() == "onnx"


@needs_ort
def test_default_falls_back_to_torch_once_when_export_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An unwritable cache (a file where its folder should be): plain minilm warns one line
    and runs torch, also on the next load; minilm-onnx by name still says why it cannot run."""
    import psirag.embed.sentence_transformers as st_module

    monkeypatch.setattr(st_module, "SentenceTransformerEmbedder", TorchFake)
    monkeypatch.setattr(embed_base, "_ONNX_FAILED", {})
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("PSIRAG_CACHE", str(blocker))
    real_export = onnx_module.export_onnx
    tried: list[str] = []

    def counted(folder: Path, precision: Any = "fp32") -> Path:
        tried.append(precision)
        return real_export(folder, precision)

    monkeypatch.setattr(onnx_module, "export_onnx", counted)
    first = load_embedder("minilm")
    second = load_embedder("minilm")
    assert type(first) is TorchFake and type(second) is TorchFake
    assert first.kwargs["batch_size"] == 16 and first.kwargs["spec"] == "minilm"
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("psirag: warning: ONNX MiniLM unavailable") and "with torch" in err
    assert tried == ["fp32"]  # the second load did not try (and wait for) the export again
    assert blocker.is_file() and blocker.read_text() == ""
    with pytest.raises(EmbeddingError, match="cannot run minilm-onnx"):
        load_embedder("minilm-onnx")


@needs_ort
def test_damaged_cached_model_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    monkeypatch.setattr(embed_base, "_ONNX_FAILED", {})
    target = onnx_module.onnx_path(embed_base.minilm_path(), "fp32")
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not an onnx graph")
    with pytest.raises(EmbeddingError, match="delete it to export it again"):
        load_embedder("minilm-onnx")


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
