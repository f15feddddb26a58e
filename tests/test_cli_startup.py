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
NOT_FOR_SEARCH = (
    "psirag.agent",
    "psirag.llm",
    "psirag.eval",
    "psirag.server",
    "psirag.pipeline",
    "psirag.ingest",
    "psirag.tree.build",
    "psirag.cli.agent_cmds",
    "psirag.cli.serve",
    "bm25s",
    "scipy",
    "psirag.abstracts.keywords",
    "psirag.abstracts.phrases",
    "http.client",
    "ssl",
    "urllib.request",
)
"""What a search has no use for: the agent, the LLM clients, evaluation, the server, the build
pipeline and the tree builders; bm25s and scipy (BM25 is scored with numpy), the keyword
phrase table (only updates use it, and it is made on first use) and an HTTP client (a local
model calls no server)."""

_RUN = """
import json, sys
from psirag.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "loaded": sorted(m for m in %r if m in sys.modules)}))
print(json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr)
"""


def _run_cli(args: list[str], cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "PSIRAG_CACHE": str(cache)}
    code = _RUN % (HEAVY + MODEL, NOT_FOR_SEARCH)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    *out, last = proc.stdout.strip().splitlines()
    result = json.loads(last)
    result["unneeded"] = json.loads(proc.stderr.strip().splitlines()[-1])
    return result, "\n".join(out)


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
    assert result["unneeded"] == []


def test_each_command_is_registered_by_its_listed_module() -> None:
    """``COMMAND_MODULES`` names every command of the full parser, and a parser built for one
    command line (which loads only that command's module) gives the same help."""
    import argparse

    from psirag.cli import COMMAND_MODULES, build_parser

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(action.choices)

    full = commands(build_parser())
    assert sorted(full) == sorted(COMMAND_MODULES)
    for name in ("search", "serve", "ask", "add"):
        lean = commands(build_parser([name, "--help"]))
        assert name in lean and len(lean) < len(full)
        assert lean[name].format_help() == full[name].format_help()
    assert sorted(commands(build_parser(["--version"]))) == sorted(full)
    assert sorted(commands(build_parser(["no-such-command"]))) == sorted(full)


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


@pytest.mark.parametrize("package", ["psirag", "psirag.tree", "psirag.abstracts"])
def test_lazy_exports_are_the_objects_not_submodules(package: str) -> None:
    """Every name the package exports resolves (on first use) to what its module defines, never
    to a submodule of the same name, even after every submodule was imported (a fresh
    interpreter, so that import order is the one a user gets)."""
    code = (
        "import importlib, pkgutil, types, sys\n"
        f"pkg = importlib.import_module({package!r})\n"
        "for info in pkgutil.iter_modules(pkg.__path__):\n"
        "    importlib.import_module(f'{pkg.__name__}.{info.name}')\n"
        "bad = [n for n in pkg.__all__ if isinstance(getattr(pkg, n), types.ModuleType)]\n"
        "print(bad, sorted(set(pkg.__all__) - set(dir(pkg))))\n"
    )
    if package == "psirag":  # importing every subpackage of psirag needs the extras
        code = code.replace("for info in", "for info in [] and")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[] []"


_GATED_MCP = """
import pathlib, sys, time
import psirag.cli.serve as serve
real = serve._load_index
gate = pathlib.Path(sys.argv[1])
def gated(args, embedder):
    deadline = time.monotonic() + 600  # beyond the answer timeout: the old order fails
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return real(args, embedder)
serve._load_index = gated
from psirag.cli import main
sys.exit(main(["mcp", sys.argv[2]]))
"""
"""``psirag mcp`` whose index load waits until the file ``argv[1]`` exists."""


def _rpc(proc: subprocess.Popen, message: dict, *, answer: bool = True) -> dict | None:
    import select

    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    if not answer:
        return None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    assert ready, "no answer within 120 s"
    return json.loads(proc.stdout.readline())


@pytest.mark.skipif(find_spec("mcp") is None, reason="psirag[server] not installed")
@pytest.mark.parametrize("broken", [False, True], ids=["loads", "broken"])
def test_mcp_answers_initialize_before_the_index_loads(
    index_dir: Path, tmp_path: Path, broken: bool
) -> None:
    """``initialize`` is answered while the index load is still held back; the first tool call
    waits for the load and answers from the index, or, when the index does not load, says so
    as a tool error (and on stderr) instead of killing the server."""
    gate = tmp_path / "gate"
    if broken:
        next(index_dir.glob("generations/*/node_vectors.npy")).unlink()
    env = {**os.environ, "PSIRAG_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _GATED_MCP, str(gate), str(index_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}}
        init["clientInfo"] = {"name": "test", "version": "0"}
        reply = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        assert reply is not None and reply["result"]["serverInfo"]["name"] == "psirag"
        assert not gate.exists()  # answered with the load still held back
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"}, answer=False)
        gate.write_text("go")
        call = {"name": "search", "arguments": {"query": "volcano in Italy", "k": 2}}
        reply = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        assert reply is not None
        result = reply["result"]
        if broken:
            assert result["isError"] and "could not be loaded" in result["content"][0]["text"]
        else:
            assert not result.get("isError"), result
            passages = result["structuredContent"]["passages"]
            assert "Mount Etna" in passages[0]["text"]
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=60)
    assert ("the index did not load" in err) == broken, err


NOT_FOR_ONE_ADD = ("multiprocessing", "concurrent.futures.process", "scipy")
"""What a one-document ``psirag add`` has no use for: worker processes (the tree's bucket
builds and the keyword build's pools) and scipy (a build's)."""


def test_a_one_document_add_imports_no_process_pool_or_scipy(tmp_path: Path) -> None:
    from support import HashEmbedder

    from psirag import Index, IndexConfig

    folder = tmp_path / "ix"
    texts = [f"Chunk {i} speaks of volcano {i % 7} and river {i % 5}." for i in range(60)]
    Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True).save(folder)
    doc = tmp_path / "new.txt"
    doc.write_text("A new note about volcano 3 and the river delta.", encoding="utf-8")
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from support import HashEmbedder\n"
        "from psirag.cli import living_cmds, main\n"
        "living_cmds.load_embedder_for = lambda *a, **k: HashEmbedder()\n"
        f"rc = main(['add', {str(folder)!r}, {str(doc)!r}, '-q'])\n"
        f"print(json.dumps([rc, sorted(m for m in {NOT_FOR_ONE_ADD!r} if m in sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rc, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc == 0 and loaded == []
    assert len(Index.load(folder, embedder=HashEmbedder()).documents) == 61
