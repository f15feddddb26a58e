"""One trust rule for every command that reads an index (psirag.trust): an endpoint that an index's
manifest names (embedder or LLM) receives nothing, whatever the command, unless the user
confirmed it with --embedder/--llm or $PSIRAG_ALLOW_ENDPOINTS.

The index is built against the user's own scripted servers (embedder and LLM, for llm-summary
abstracts); then its manifest is rewritten, as an attacker sharing the index would, to name a
loopback listener. The listener records every byte it receives; each command must leave it empty.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import TOPICS, FakeOpenAIServer
from support.corpora import plant_endpoint

from psirag.cli import main
from psirag.embed.endpoints import ALLOW_ENV

SECRET = "sk-attacker-wants-this-31337"


class Listener:
    """A loopback TCP listener that accepts anything and records what it receives."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(0.5)
            with contextlib.suppress(OSError):
                self.received.append(conn.recv(65536))
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    lst = Listener()
    yield lst
    lst.close()


@pytest.fixture
def servers(
    fake_llm: Callable[..., FakeOpenAIServer],
) -> tuple[FakeOpenAIServer, FakeOpenAIServer]:
    """The user's own embedding server and LLM (scripted, on loopback)."""
    return fake_llm(), fake_llm(lambda b: "A short summary.")


@pytest.fixture
def planted(
    tmp_path: Path,
    servers: tuple[FakeOpenAIServer, FakeOpenAIServer],
    listener: Listener,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """An llm-summary index built on the user's servers, whose manifest now names the listener
    for both its embedder and its LLM."""
    embed, llm = servers
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, texts in TOPICS.items():
        (corpus / f"{name}.txt").write_text(" ".join(texts), encoding="utf-8")
    out = tmp_path / "index"
    argv = ["index", str(corpus), "--out", str(out), "-q", "--embedder", embed.model_spec("m")]
    argv += ["--abstracts", "llm-summary", "--llm", llm.model_spec("m")]
    argv += ["--llm-cache", str(tmp_path / "cache.sqlite")]
    assert main(argv) == 0
    plant_endpoint(out, f"openai:{listener.url}#m", llm=True)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    monkeypatch.delenv("PSIRAG_LLM", raising=False)
    (tmp_path / "private.txt").write_text("My private diary entry about Etna.", encoding="utf-8")
    return out


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(argv)
    return code, capsys.readouterr().err


def new_files(index: Path) -> list[str]:
    """The indexed corpus plus one private file: add and sync both see one new document."""
    return [str(index.parent / "corpus"), str(index.parent / "private.txt")]


def assert_untouched(listener: Listener) -> None:
    assert listener.connections == 0 and listener.received == [], listener.received


def test_search_ask_summarize_refuse(planted, servers, listener, capsys):
    _embed, llm = servers
    code, err = run(["search", str(planted), "secret query"], capsys)
    assert code == 2 and "names the embedding endpoint" in err and ALLOW_ENV in err
    code, err = run(
        ["ask", str(planted), "Which volcano?", "-q", "--llm", llm.model_spec()], capsys
    )
    assert code == 2 and "names the embedding endpoint" in err
    asked = len(llm.requests)
    code, err = run(["summarize", str(planted), "--llm", llm.model_spec()], capsys)
    assert code == 2 and "names the embedding endpoint" in err, err
    assert len(llm.requests) == asked  # refused before the user's LLM was asked anything
    assert_untouched(listener)


@pytest.mark.parametrize("command", ["add", "sync"])
def test_add_and_sync_refuse_the_manifest_embedder(planted, listener, capsys, command):
    code, err = run([command, str(planted), *new_files(planted), "-q"], capsys)
    assert code == 2, err
    assert "manifest.json (embedder.spec) names the embedding endpoint" in err, err
    assert f"{ALLOW_ENV}=127.0.0.1:{listener.port}" in err
    assert "Traceback" not in err
    assert_untouched(listener)


@pytest.mark.parametrize("command", ["add", "sync"])
def test_a_confirmed_embedder_still_needs_a_confirmed_llm(
    planted, servers, listener, capsys, command
):
    """--embedder confirms the embedder only: the manifest's LLM (llm-summary abstracts) would
    still receive the new document's text, so it is refused too."""
    embed, _ = servers
    argv = [command, str(planted), *new_files(planted), "-q", "--embedder", embed.model_spec("m")]
    code, err = run(argv, capsys)
    assert code == 2, err
    assert "manifest.json (config.llm) names the LLM endpoint" in err, err
    assert "--llm" in err
    assert_untouched(listener)


def test_remove_refuses_the_manifest_llm(planted, listener, capsys):
    code, err = run(["remove", str(planted), "--doc", "volcanoes.txt", "-q"], capsys)
    assert code == 2, err
    assert "names the LLM endpoint" in err or "names the embedding endpoint" in err, err
    assert_untouched(listener)


def test_confirmed_endpoints_are_used_instead(planted, servers, listener, capsys):
    """With both endpoints named by the user, add works, and only the user's servers are called."""
    embed, llm = servers
    private = str(planted.parent / "private.txt")
    argv = ["add", str(planted), private, "-q", "--embedder", embed.model_spec("m")]
    argv += ["--llm", llm.model_spec("m"), "--llm-cache", str(planted.parent / "c2.sqlite")]
    code, err = run(argv, capsys)
    assert code == 0, err
    assert any("private diary" in json.dumps(r) for r in embed.requests)
    assert_untouched(listener)


def test_allow_list_confirms_both(planted, listener, capsys, monkeypatch):
    """$PSIRAG_ALLOW_ENDPOINTS is the other confirmation: then the endpoint is called."""
    monkeypatch.setenv(ALLOW_ENV, f"127.0.0.1:{listener.port}")
    argv = ["search", str(planted), "volcano", "--timeout", "2", "--retries", "0"]
    code, _err = run(argv, capsys)
    assert code != 0  # the listener answers nothing useful
    assert listener.connections >= 1


def test_inspect_calls_nothing(planted, listener, capsys):
    code, err = run(["inspect", str(planted)], capsys)
    assert code == 0, err
    code, err = run(["inspect", str(planted), "--node", "0"], capsys)
    assert code == 0, err
    assert_untouched(listener)


def test_serve_and_mcp_refuse_at_start(planted, listener, capsys, monkeypatch):
    """`psirag serve` and `psirag mcp` refuse before serving anything (uvicorn and the stdio loop
    are replaced so that a regression fails here instead of serving)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("mcp")
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started on an unconfirmed index")

    monkeypatch.setattr(uvicorn, "run", never)
    monkeypatch.setattr(MCPServer, "run", never)
    code, err = run(["serve", str(planted), "--port", "0"], capsys)
    assert code == 2 and "names the embedding endpoint" in err, err
    code, err = run(["mcp", str(planted)], capsys)
    assert code == 2 and "names the embedding endpoint" in err, err
    assert_untouched(listener)
