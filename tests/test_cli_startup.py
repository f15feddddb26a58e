"""Start-up stays lean: a real ``psirag search`` through the CLI entry point, in a fresh
interpreter, embeds its query with ONNX Runtime and never imports torch, transformers or
sentence-transformers; ``psirag inspect`` loads no model at all; the modules behind ask, add,
mcp and serve import none of them either."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_index" / "index"
HEAVY = ("torch", "transformers", "sentence_transformers")
MODEL = ("onnxruntime", "tokenizers", "onnx")

_RUN = """
import json, sys
from psirag.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "loaded": sorted(m for m in %r if m in sys.modules)}))
"""


def _run_cli(args: list[str], cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "PSIRAG_CACHE": str(cache)}
    code = _RUN % (HEAVY + MODEL,)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    *out, last = proc.stdout.strip().splitlines()
    return json.loads(last), "\n".join(out)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    shutil.copytree(FIXTURE, folder)
    return folder


@pytest.mark.skipif(find_spec("onnxruntime") is None, reason="onnxruntime missing")
def test_cli_search_runs_without_torch(
    index_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from psirag.embed import minilm_path
    from psirag.embed.onnx import export_onnx

    monkeypatch.setenv("PSIRAG_CACHE", str(tmp_path))
    export_onnx(minilm_path())  # written once, as by the first use on a machine
    result, out = _run_cli(["search", str(index_dir), "volcano in Italy", "-k", "2"], tmp_path)
    assert result["rc"] == 0
    assert "Mount Etna" in out.splitlines()[1]  # the first hit's text: the query was embedded
    assert "onnxruntime" in result["loaded"] and "tokenizers" in result["loaded"]
    assert not set(result["loaded"]) & set(HEAVY)
    assert "onnx" not in result["loaded"]  # the cached graph is read by ONNX Runtime alone


def test_cli_inspect_loads_no_model(index_dir: Path, tmp_path: Path) -> None:
    result, out = _run_cli(["inspect", str(index_dir)], tmp_path)
    assert result["rc"] == 0 and "drift" in out
    assert result["loaded"] == []


def test_command_modules_import_no_torch() -> None:
    code = (
        "import sys, importlib\n"
        "for m in ('psirag.cli', 'psirag.cli.agent_cmds', 'psirag.cli.serve',\n"
        "          'psirag.server.app', 'psirag.server.mcp_tools', 'psirag.cli.living_cmds',\n"
        "          'psirag.cli.eval_cmd', 'psirag.living'):\n"
        "    importlib.import_module(m)\n"
        f"print(sorted(m for m in {HEAVY + MODEL!r} if m in sys.modules))\n"
    )
    if find_spec("fastapi") is None:
        pytest.skip("psirag[server] not installed")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
