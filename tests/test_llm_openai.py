"""OpenAIChat against a real HTTP server on 127.0.0.1: the request it sends and every failure."""

from __future__ import annotations

import socket

import pytest
from support import Reply

from psirag.errors import InputError, PsiragError
from psirag.http import HttpPolicy
from psirag.llm import (
    GenerationParams,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
    OpenAIChat,
    load_chat_model,
)

NO_RETRY = HttpPolicy(timeout=10, retries=0)

MESSAGES = [{"role": "user", "content": "Who founded the Oberoi Group?"}]


pytestmark = pytest.mark.fake_llm(responder=lambda body: "Answer: Mohan Singh Oberoi")
"""The answer of each test's ``server`` (tests/conftest.py)."""


def test_success_sends_params_and_reads_usage(server, monkeypatch):
    monkeypatch.setenv("PSIRAG_TEST_KEY", "sk-secret-value")
    model = OpenAIChat(server.base_url + "/", "qwen", api_key_env="PSIRAG_TEST_KEY")
    params = GenerationParams(max_tokens=50, temperature=0.0, repeat_penalty=1.3, stop=("\n\n",))
    result = model.chat(MESSAGES, params)
    assert result.text == "Answer: Mohan Singh Oberoi"
    assert (result.prompt_tokens, result.completion_tokens) == (10, 5)
    assert result.finish_reason == "stop" and not result.cached
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    body = request
    assert body["model"] == "qwen" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.0 and body["max_tokens"] == 50
    assert body["stop"] == ["\n\n"] and body["repeat_penalty"] == 1.3
    assert "frequency_penalty" not in body
    assert request.headers["Authorization"] == "Bearer sk-secret-value"
    assert model.id == f"openai:{server.base_url}#qwen"
    assert "sk-secret" not in repr(model) and "sk-secret" not in model.id
    assert "sk-secret" not in str(vars(model))


def test_no_key_no_header_and_optional_penalties(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAIChat(server.base_url, "m", frequency_penalty=0.5, send_repeat_penalty=False)
    model.chat(MESSAGES, GenerationParams(repeat_penalty=1.3))
    request = server.requests[0]
    assert "Authorization" not in request.headers
    assert request["frequency_penalty"] == 0.5
    assert "repeat_penalty" not in request and "stop" not in request


def test_connection_refused_names_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChat(f"http://127.0.0.1:{port}/v1", "m", http=NO_RETRY)
    with pytest.raises(LLMConnectionError) as info:
        model.chat(MESSAGES, GenerationParams())
    message = str(info.value)
    assert f"127.0.0.1:{port}/v1/chat/completions" in message
    assert "refused" in message and "server is running" in message
    assert info.value.retryable and isinstance(info.value, PsiragError)


def test_timeout(server):
    server.script(Reply(content="late", delay=1.5))
    model = OpenAIChat(server.base_url, "m", timeout=0.3)
    with pytest.raises(LLMTimeoutError) as info:
        model.chat(MESSAGES, GenerationParams())
    assert "0.3 s" in str(info.value) and info.value.retryable


@pytest.mark.parametrize(
    ("status", "body", "expected", "retryable"),
    [
        (400, {"error": {"message": "context length exceeded"}}, "context length exceeded", False),
        (429, {"error": {"message": "slow down"}}, "slow down", True),
        (500, "internal kaboom", "internal kaboom", True),
        (404, {"detail": "Not Found"}, "check the base URL", False),
    ],
)
def test_http_errors_carry_server_message(server, status, body, expected, retryable):
    server.script(Reply(status=status, body=body))
    with pytest.raises(LLMHTTPError) as info:
        OpenAIChat(server.base_url, "m", http=NO_RETRY).chat(MESSAGES, GenerationParams())
    assert info.value.status == status
    assert f"HTTP {status}" in str(info.value) and expected in str(info.value)
    assert info.value.retryable is retryable


def test_http_error_never_echoes_key(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leaky-123")
    server.script(Reply(status=401, body={"error": {"message": "bad key sk-leaky-123"}}))
    with pytest.raises(LLMHTTPError) as info:
        OpenAIChat(server.base_url, "m").chat(MESSAGES, GenerationParams())
    assert "sk-leaky-123" not in str(info.value)
    assert "$OPENAI_API_KEY" in str(info.value)


def test_malformed_json(server):
    server.script(Reply(body="<html>proxy error</html>"))
    with pytest.raises(LLMResponseError, match="did not return JSON"):
        OpenAIChat(server.base_url, "m").chat(MESSAGES, GenerationParams())


@pytest.mark.parametrize(
    "body",
    [
        {"choices": []},
        {"choices": [{"message": {"role": "assistant"}}]},
        {"object": "error"},
    ],
)
def test_missing_content_names_the_field(server, body):
    server.script(Reply(body=body))
    with pytest.raises(LLMResponseError, match=r"choices\[0\]\.message\.content"):
        OpenAIChat(server.base_url, "m").chat(MESSAGES, GenerationParams())


def test_missing_usage_is_zero(server):
    server.script(Reply(body={"choices": [{"message": {"content": "hi"}}]}))
    result = OpenAIChat(server.base_url, "m").chat(MESSAGES, GenerationParams())
    assert (result.text, result.prompt_tokens, result.finish_reason) == ("hi", 0, None)


def test_load_chat_model_specs(server):
    model = load_chat_model(f"openai:{server.base_url}#qwen2.5", timeout=3)
    assert isinstance(model, OpenAIChat) and model.model == "qwen2.5" and model.timeout == 3
    for bad in ("openai:http://x/v1", "openai:#m", "gpt-4", "ollama:foo", "llamacpp:"):
        with pytest.raises(InputError):
            load_chat_model(bad)
    with pytest.raises(InputError, match="no GGUF model file"):
        load_chat_model("llamacpp:/nonexistent/model.gguf")


def test_errors_are_psirag_errors():
    assert issubclass(LLMError, PsiragError)
