"""The device setting: ``--device`` and ``$PSIRAG_DEVICE`` reach every embedder load, bad names
stop with a message naming where they came from, and a device torch cannot use fails before a
model loads (the GPU path itself is checked on a GPU machine: benchmarks/bench_gpu_embed.py)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from psirag.cli import build_parser, main
from psirag.devices import DEVICE_ENV, default_device, parse_device
from psirag.embed import factory as factory_module
from psirag.embed import load_embedder
from psirag.embed.base import DEFAULT_BATCH_SIZES, default_batch_size
from psirag.errors import InputError

HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize(
    ("given", "name"),
    [("cpu", "cpu"), ("CUDA", "cuda"), (" cuda:1 ", "cuda:1"), ("mps", "mps")],
)
def test_device_names(given: str, name: str) -> None:
    assert parse_device(given) == name


@pytest.mark.parametrize("given", ["gpu", "cuda:", "cuda:x", "cuda0", "", "cpu,cuda", "cuda:1234"])
def test_unknown_device_names_say_where_they_came_from(given: str) -> None:
    with pytest.raises(InputError, match=r"^--flag: unknown device .*cpu, cuda, cuda:N"):
        parse_device(given, "--flag")


def test_the_environment_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert default_device() == "cpu"
    monkeypatch.setenv(DEVICE_ENV, "  ")
    assert default_device() == "cpu"
    monkeypatch.setenv(DEVICE_ENV, "Cuda:2")
    assert default_device() == "cuda:2"
    monkeypatch.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(InputError, match=DEVICE_ENV):
        default_device()
    with pytest.raises(InputError, match=DEVICE_ENV):  # read by every load without a device
        load_embedder("minilm")


@pytest.mark.parametrize(
    "args",
    [
        ["index", "C", "--out", "I"],
        ["search", "I", "q"],
        ["add", "I", "F"],
        ["sync", "I", "F"],
        ["ask", "I", "q"],
        ["serve", "I"],
        ["eval", "D"],
    ],
)
def test_commands_that_embed_take_device(args: list[str]) -> None:
    parser = build_parser(args)
    assert parser.parse_args([*args, "--device", "cuda:1"]).device == "cuda:1"
    assert parser.parse_args(args).device is None


def test_a_bad_device_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["search", "I", "q", "--device", "gpu"])
    assert stopped.value.code == 2
    assert "argument --device: unknown device 'gpu'" in capsys.readouterr().err


def test_the_option_sets_the_process_device_for_the_command_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str | None] = []

    def fake_load(spec: str, **kwargs: object) -> object:
        seen.append(os.environ.get(DEVICE_ENV))
        raise InputError("stop here")

    monkeypatch.setenv(DEVICE_ENV, "mps")
    monkeypatch.setattr("psirag.embed.load_embedder", fake_load)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("some words to index", encoding="utf-8")
    command = ["index", str(tmp_path / "c"), "--out", str(tmp_path / "i"), "--device", "cuda:3"]
    code = main([*command, "-q"])
    assert code == 2
    assert seen and set(seen) == {"cuda:3"}
    assert os.environ[DEVICE_ENV] == "mps"  # restored after the command
    monkeypatch.delenv(DEVICE_ENV)
    main([*command, "-q"])
    assert DEVICE_ENV not in os.environ


def test_onnx_runs_on_the_cpu_only() -> None:
    for spec in ("minilm-onnx", "minilm-onnx-int8"):
        with pytest.raises(InputError, match=r"runs on the CPU only .* device 'cuda'"):
            load_embedder(spec, device="cuda")


def test_prefetch_stays_off_for_another_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    assert factory_module.prefetch_embedder("minilm") is False
    assert factory_module._PREFETCHED == {}


@pytest.mark.skipif(not HAS_TORCH, reason="needs psirag[torch]")
def test_a_device_torch_cannot_see_fails_before_the_model_loads() -> None:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(InputError, match=rf"device 'cuda:{count}' .*sees"):
        load_embedder("minilm-torch", device=f"cuda:{count}")
    if count == 0:
        with pytest.raises(InputError, match=r"device 'cuda' .*no CUDA GPU"):
            load_embedder("minilm", device="cuda")  # plain minilm goes to torch off the CPU


@pytest.mark.skipif(not HAS_TORCH, reason="needs psirag[torch]")
def test_minilm_on_cpu_through_torch_matches_onnx() -> None:
    texts = ["a small test sentence", "another, longer sentence about trees and abstracts"]
    torch_vectors = load_embedder("minilm-torch", device="cpu").embed(texts)
    onnx_vectors = load_embedder("minilm-onnx").embed(texts)
    assert torch_vectors.shape == onnx_vectors.shape == (2, 384)
    assert float((torch_vectors * onnx_vectors).sum(axis=1).min()) > 0.9999


def test_torch_batches_are_larger_on_a_gpu() -> None:
    assert default_batch_size("torch") == DEFAULT_BATCH_SIZES["torch"] == 16
    assert default_batch_size("torch", "cuda:1") == default_batch_size("torch", "mps") == 256
    assert default_batch_size("onnx", "cpu") == 8
