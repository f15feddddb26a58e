"""The one HTTP client (psirag.http) through the chat client, against the scripted loopback server:
overall deadlines (sleeping and trickling servers), the Retry-After cap, the body cap, key hygiene
and the plain-http warning. Each of these failed (or hung) with the two urllib clients before."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import FakeOpenAIServer, Reply, echo_prompt

from psirag.errors import InputError
from psirag.http import HTTPCallError, HttpClient, HttpPolicy, is_loopback, warn_plain_http_key
from psirag.llm import (
    GenerationParams,
    LLMClient,
    LLMConnectionError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
    OpenAIChat,
)

MESSAGES = [{"role": "user", "content": "Which volcano destroyed Pompeii?"}]
PARAMS = GenerationParams(max_tokens=16)


pytestmark = pytest.mark.fake_llm(responder=lambda body: "Answer: Vesuvius")
"""The answer of each test's ``server`` (tests/conftest.py)."""


def chat(server: FakeOpenAIServer, **policy: float) -> OpenAIChat:
    return OpenAIChat(server.base_url, "m", http=HttpPolicy(**policy))  # type: ignore[arg-type]


def test_sleeping_server_costs_one_deadline_not_tries_times_timeout(server):
    server.script(*[Reply(content="late", delay=30)] * 4)
    start = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"did not answer within 1 s \(the whole call"):
        chat(server, timeout=1, retries=3, backoff=0.01).chat(MESSAGES, PARAMS)
    assert time.monotonic() - start < 2.5
    assert server.calls == 1  # no time was left to retry


def test_trickling_server_is_cut_off_at_the_deadline(server):
    """One byte every 0.3 s resets any per-read socket timeout; the deadline still holds."""
    server.script(Reply(content="Answer: " + "x" * 400, trickle=0.3))
    start = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"within 1\.5 s"):
        chat(server, timeout=1.5, retries=0).chat(MESSAGES, PARAMS)
    assert time.monotonic() - start < 3


def test_trickled_headers_are_cut_off_too(server):
    """Header lines are read by http.client itself, where no per-chunk check can reach: the
    watchdog closes the socket at the deadline."""
    server.script(Reply(content="Answer: late", trickle=0.2, trickle_head=True))
    start = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"within 1\.5 s"):
        chat(server, timeout=1.5, retries=2).chat(MESSAGES, PARAMS)
    assert time.monotonic() - start < 3 and server.calls == 1


def test_echo_responder_repeats_the_prompt():
    with FakeOpenAIServer(responder=echo_prompt) as srv:
        text = OpenAIChat(srv.base_url, "m").chat(MESSAGES, PARAMS).text
    assert text == MESSAGES[0]["content"]


def test_retry_after_is_capped_and_the_wait_is_said(server, caplog):
    server.script(Reply(status=429, body="busy", headers={"Retry-After": "100000"}))
    caplog.set_level(logging.WARNING, logger="psirag.http")
    start = time.monotonic()
    result = chat(server, timeout=20, max_wait=0.3).chat(MESSAGES, PARAMS)
    waited = time.monotonic() - start
    assert result.text == "Answer: Vesuvius" and result.extra["retries"] == 1
    assert 0.3 <= waited < 3
    said = caplog.text
    assert "asked to wait 100000 s (Retry-After), capped at 0.3 s" in said
    assert "waiting 0.3 s before attempt 2 of 4" in said and "HTTP 429" in said


def test_retry_after_beyond_the_deadline_gives_up_at_once(server):
    server.script(Reply(status=503, body="maintenance", headers={"Retry-After": "100000"}))
    start = time.monotonic()
    with pytest.raises(LLMHTTPError, match=r"asked to wait 100000 s\): only .* of the 1 s timeout"):
        chat(server, timeout=1).chat(MESSAGES, PARAMS)
    assert time.monotonic() - start < 1 and server.calls == 1


@pytest.mark.parametrize("omit_length", [False, True])
def test_oversized_body_is_an_error(server, omit_length):
    """Declared (Content-Length) or found while reading: either way at most the cap is read."""
    server.script(Reply(pad_bytes=3 * 2**20, omit_length=omit_length))
    with pytest.raises(LLMResponseError, match="larger than 1 MiB, the limit"):
        chat(server, max_body_bytes=2**20, retries=0).chat(MESSAGES, PARAMS)


def test_a_body_under_the_cap_is_read_whole(server):
    server.script(Reply(body={"choices": [{"message": {"content": "y" * 500_000}}]}))
    assert len(chat(server, max_body_bytes=2**20).chat(MESSAGES, PARAMS).text) == 500_000


def test_key_never_in_error_log_or_repr(server, monkeypatch, caplog):
    secret = "sk-never-shown-5150"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    server.script(*[Reply(status=503, body=f"upstream rejected Bearer {secret}")] * 2)
    model = chat(server, retries=1, backoff=0.01)
    client = LLMClient(model, None)
    with pytest.raises(LLMHTTPError) as info:
        client.chat(MESSAGES, PARAMS)
    assert server.calls == 2
    assert server.requests[0].headers["Authorization"] == f"Bearer {secret}"
    message = str(info.value)
    assert "upstream rejected Bearer ***" in message and "gave up after 2 attempts" in message
    for text in (message, caplog.text, repr(model), repr(client), repr(model._http)):
        assert secret not in text
    assert secret not in str(vars(model)) and secret not in str(vars(model._http))


def test_plain_http_key_to_another_host_is_warned_once(server, monkeypatch, caplog):
    """Through a proxy (the loopback server stands in for it), so the far host is never dialled:
    this also checks that HTTP proxies from the environment are honoured."""
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.port}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-over-the-wire")
    caplog.set_level(logging.WARNING, logger="psirag.http")
    model = OpenAIChat("http://api.example.test/v1", "m", http=HttpPolicy(timeout=10))
    assert model.chat(MESSAGES, PARAMS).text == "Answer: Vesuvius"
    model.chat(MESSAGES, PARAMS)
    assert server.requests[0].path == "http://api.example.test/v1/chat/completions"
    warnings = [r.getMessage() for r in caplog.records if "plain http://" in r.getMessage()]
    assert len(warnings) == 1
    assert "$OPENAI_API_KEY" in warnings[0] and "api.example.test" in warnings[0]
    assert "sk-over-the-wire" not in caplog.text


def test_no_warning_without_a_key_or_on_loopback_or_https(server, monkeypatch, caplog):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    caplog.set_level(logging.WARNING, logger="psirag.http")
    chat(server).chat(MESSAGES, PARAMS)  # loopback, no key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    chat(server).chat(MESSAGES, PARAMS)  # loopback with a key
    warn_plain_http_key("https://api.example.test/v1/embeddings", "OPENAI_API_KEY")
    assert "plain http://" not in caplog.text


def test_loopback_is_never_proxied(server, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("no_proxy", "")
    assert chat(server).chat(MESSAGES, PARAMS).text == "Answer: Vesuvius"


def test_dropped_connection_is_retried(server):
    server.script(Reply(drop=True))
    result = chat(server, backoff=0.01).chat(MESSAGES, PARAMS)
    assert result.text == "Answer: Vesuvius" and server.calls == 2


def test_waits_follow_the_backoff_and_the_cap(server):
    """With an injected clock-free sleep: 1, 2, 4, ... seconds, never above max_wait."""
    server.script(*[Reply(status=500, body="down")] * 5)
    sleeps: list[float] = []
    policy = HttpPolicy(timeout=1000, retries=4, backoff=1.0, max_wait=3.0)
    client = HttpClient(
        server.base_url + "/chat/completions", what="LLM server", policy=policy, sleep=sleeps.append
    )
    with pytest.raises(HTTPCallError, match="gave up after 5 attempts"):
        client.post_json({"messages": MESSAGES})
    assert sleeps == [1.0, 2.0, 3.0, 3.0] and server.calls == 5


@pytest.mark.parametrize(
    "bad",
    [{"timeout": 0}, {"timeout": -1}, {"retries": -1}, {"max_body_bytes": 0}, {"backoff": -1}],
)
def test_policy_rejects_nonsense(bad):
    with pytest.raises(InputError):
        HttpPolicy(**bad)  # type: ignore[arg-type]


def test_is_loopback_by_name_only():
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.8.9.1", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("example.com", "10.0.0.1", "127.0.0.1.nip.io", ""))


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1 (openssl from the system; skipped without it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return folder


@pytest.fixture
def https_server(certificate: Path, fake_llm: Callable[..., FakeOpenAIServer]) -> FakeOpenAIServer:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate / "cert.pem", certificate / "key.pem")
    return fake_llm(lambda body: "Answer: over TLS", tls=context)


def test_https_verifies_the_certificate_and_does_not_retry_a_bad_one(https_server):
    model = OpenAIChat(https_server.base_url, "m", http=HttpPolicy(timeout=10, backoff=0.01))
    start = time.monotonic()
    with pytest.raises(LLMConnectionError, match=r"TLS with the LLM server at https://.*certif"):
        model.chat(MESSAGES, PARAMS)
    assert https_server.calls == 0 and time.monotonic() - start < 2  # no retries


def test_https_with_a_trusted_certificate_works(https_server, certificate, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate / "cert.pem"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-tls")
    model = OpenAIChat(https_server.base_url, "m", http=HttpPolicy(timeout=10))
    assert model.chat(MESSAGES, PARAMS).text == "Answer: over TLS"
    assert https_server.requests[0].headers["Authorization"] == "Bearer sk-tls"
