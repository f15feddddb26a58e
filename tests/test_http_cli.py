"""The CLI face of the HTTP rules: ``--timeout``/``--retries`` bound ``ask`` and ``index`` against
sleeping and trickling servers, and a saved index cannot send queries or the API key to an
endpoint its manifest names unless the user confirms it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import TOPICS, FakeOpenAIServer, Reply
from support.corpora import plant_endpoint

from psirag.cli import build_parser, main
from psirag.cli.options import http_policy_from
from psirag.embed.endpoints import ALLOW_ENV, endpoint_of
from psirag.errors import InputError
from psirag.eval.clients import llm_client
from psirag.eval.settings import EvalSettings
from psirag.http import HttpPolicy
from psirag.index import Index

QUESTION = "Which volcano destroyed Pompeii?"
SECRET = "sk-attacker-wants-this-31337"


@pytest.fixture
def embed_server(fake_llm: Callable[..., FakeOpenAIServer]) -> FakeOpenAIServer:
    """The user's own embedding server (the scripted one: bag-of-words vectors)."""
    return fake_llm()


@pytest.fixture
def built(tmp_path: Path, embed_server: FakeOpenAIServer) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, texts in TOPICS.items():
        (corpus / f"{name}.txt").write_text(" ".join(texts), encoding="utf-8")
    out = tmp_path / "index"
    argv = [
        "index",
        str(corpus),
        "--out",
        str(out),
        "-q",
        "--embedder",
        embed_server.model_spec("m"),
    ]
    assert main(argv) == 0
    return out


def ask(index: Path, llm: FakeOpenAIServer, embedder: str, *extra: str) -> int:
    argv = ["ask", str(index), QUESTION, "-q", "--llm", llm.model_spec("m"), "--embedder", embedder]
    return main([*argv, *extra])


@pytest.mark.parametrize(
    "reply",
    [Reply(content="Answer: late", delay=60), Reply(content="Answer: " + "x" * 300, trickle=0.5)],
    ids=["sleeping", "trickling"],
)
def test_ask_with_timeout_fails_clearly_in_bounded_time(built, embed_server, capsys, reply):
    with FakeOpenAIServer(responder=lambda body: reply) as llm:
        capsys.readouterr()
        start = time.monotonic()
        code = ask(built, llm, embed_server.model_spec("m"), "--timeout", "2", "--retries", "1")
        elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 2
    assert "psirag: error: LLM server at" in err and "did not answer within 2 s" in err
    assert "--timeout" in err and "Traceback" not in err
    assert elapsed < 6, elapsed
    assert len([r for r in llm.requests if r.path.endswith("/chat/completions")]) == 1


def test_ask_retries_a_busy_server_and_answers(built, embed_server, capsys, caplog):
    with FakeOpenAIServer(responder=lambda body: "Answer: Vesuvius") as llm:
        llm.script(Reply(status=503, body="warming up", headers={"Retry-After": "0.1"}))
        capsys.readouterr()
        assert (
            ask(built, llm, embed_server.model_spec("m"), "--timeout", "10", "--retries", "1") == 0
        )
        assert llm.calls == 2
    assert capsys.readouterr().out.strip() == "Vesuvius"
    assert "HTTP 503; waiting 0.1 s before attempt 2 of 2" in caplog.text  # said, on stderr


def test_index_embedding_call_has_the_deadline(tmp_path, capsys):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Vesuvius destroyed Pompeii.", encoding="utf-8")
    with FakeOpenAIServer(embed=lambda texts: Reply(delay=60)) as srv:
        start = time.monotonic()
        argv = ["index", str(corpus), "--out", str(tmp_path / "i"), "-q"]
        code = main([*argv, "--embedder", srv.model_spec("m"), "--timeout", "1", "--retries", "0"])
        elapsed = time.monotonic() - start
    assert code == 2 and elapsed < 5
    assert "embedding server at" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--timeout", "0"], ["--timeout", "x"], ["--retries", "-1"]])
def test_bad_http_options_are_usage_errors(built, bad, capsys):
    with pytest.raises(SystemExit) as info:
        main(["ask", str(built), QUESTION, *bad])
    assert info.value.code == 2 and "--" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["ask", "summarize", "eval", "index", "search"])
def test_every_calling_command_takes_the_http_options(command):
    head = {
        "ask": ["ask", "i", "q"],
        "summarize": ["summarize", "i"],
        "eval": ["eval", "d"],
        "index": ["index", "p", "--out", "o"],
        "search": ["search", "i", "q"],
    }[command]
    args = build_parser().parse_args([*head, "--timeout", "7.5", "--retries", "0"])
    assert http_policy_from(args) == HttpPolicy(timeout=7.5, retries=0)
    default = build_parser().parse_args(head)
    assert http_policy_from(default) == HttpPolicy()


def test_eval_settings_carry_the_policy_to_the_llm(tmp_path):
    settings = EvalSettings(
        llm="openai:http://127.0.0.1:9/v1#m", cache_dir=tmp_path, http=HttpPolicy(timeout=3)
    )
    client, owned = llm_client(settings, None)
    assert client is not None and owned
    assert client.model.policy.timeout == 3  # type: ignore[attr-defined]
    client.close()


# -- a saved index is data, never instructions -------------------------------------------------


@pytest.fixture
def attacker(fake_llm: Callable[..., FakeOpenAIServer]) -> FakeOpenAIServer:
    """The endpoint an attacker plants in a shared index's manifest."""
    return fake_llm()


def test_manifest_endpoint_gets_no_query_and_no_key(
    built, attacker, embed_server, capsys, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    plant_endpoint(built, attacker.spec)  # the same model name: the embedder id matches
    capsys.readouterr()
    assert main(["search", str(built), "secret query"]) == 2
    err = capsys.readouterr().err
    assert attacker.requests == [], "the manifest's endpoint was contacted"
    assert f"names the embedding endpoint {attacker.base_url}" in err
    assert "--embedder" in err and f"{ALLOW_ENV}=127.0.0.1:{attacker.port}" in err
    assert "Traceback" not in err
    # ask and the Python API refuse in the same way
    assert ask_without_confirming(built, capsys) == 2 and attacker.requests == []
    with pytest.raises(InputError, match="names the embedding endpoint"):
        Index.load(built).search("secret query")
    assert attacker.requests == []


def ask_without_confirming(index: Path, capsys: pytest.CaptureFixture[str]) -> int:
    with FakeOpenAIServer(responder=lambda body: "Answer: x") as llm:
        code = main(["ask", str(index), QUESTION, "-q", "--llm", llm.model_spec("m")])
        assert llm.requests == []  # refused before the LLM was asked anything
    assert "names the embedding endpoint" in capsys.readouterr().err
    return code


def test_confirmed_embedder_is_used_instead_of_the_manifest(
    built, attacker, embed_server, capsys, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    plant_endpoint(built, attacker.spec)
    before = embed_server.calls
    capsys.readouterr()
    argv = [
        "search",
        str(built),
        "Pompeii volcano",
        "--json",
        "--embedder",
        embed_server.model_spec("m"),
    ]
    assert main(argv) == 0
    hits = json.loads(capsys.readouterr().out)["passages"]
    assert hits and "Vesuvius" in hits[0]["text"]
    assert attacker.requests == [] and embed_server.calls == before + 1
    assert embed_server.requests[-1]["input"] == ["Pompeii volcano"]


def test_confirmed_embedder_must_serve_the_index_model(built, embed_server, capsys):
    capsys.readouterr()
    assert main(["search", str(built), "q", "--embedder", embed_server.model_spec("other")]) == 2
    assert "built with embedder 'openai:m'" in capsys.readouterr().err


def test_allow_rule_lets_a_listed_endpoint_through(built, attacker, monkeypatch, capsys):
    plant_endpoint(built, attacker.spec)
    monkeypatch.setenv(ALLOW_ENV, f"example.org, 127.0.0.1:{attacker.port}")
    assert main(["search", str(built), "Pompeii", "--timeout", "5"]) == 0
    assert [r["input"] for r in attacker.requests] == [["Pompeii"]]
    monkeypatch.setenv(ALLOW_ENV, "127.0.0.1:1")  # another port of the same host: refused
    assert main(["search", str(built), "Pompeii"]) == 2


def test_endpoint_of_names_host_and_port():
    assert endpoint_of("openai:http://Example.org/v1#m") == "example.org:80"
    assert endpoint_of("openai:https://api.example.org/v1#m") == "api.example.org:443"
    assert endpoint_of("openai:http://[::1]:8080/v1#m") == "[::1]:8080"
    assert endpoint_of("minilm") is None and endpoint_of("st:/models/x") is None
