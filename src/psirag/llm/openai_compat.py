"""Chat over any OpenAI-compatible HTTP server (llama.cpp's server, Ollama, vLLM, OpenAI itself).

Standard library only: every request goes through :class:`psirag.http.HttpClient`, which owns the
deadline, the retries, the size cap and the key hygiene (the key is read from the environment on
every call and lives only in the request header, so it cannot leak through a repr, a cache key, a
log line or an error message).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from psirag.http import HTTPCallError, HttpClient, HttpPolicy, scrub
from psirag.llm.base import ChatResult, GenerationParams, Message, TokenSink
from psirag.llm.errors import (
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
)


class OpenAIChat:
    """A chat model behind ``POST {base_url}/chat/completions``.

    ``http`` sets the deadline, retries and size cap (:class:`psirag.http.HttpPolicy`);
    ``timeout`` alone overrides its deadline. ``repeat_penalty`` (llama.cpp/Ollama's name) is sent
    when it is not 1.0; servers that reject unknown fields (OpenAI's own) need
    ``send_repeat_penalty=False``. ``frequency_penalty`` is sent only when given, since its scale
    differs from ``repeat_penalty``'s.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float | None = None,
        context_tokens: int = 4096,
        *,
        send_repeat_penalty: bool = True,
        frequency_penalty: float | None = None,
        http: HttpPolicy | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("model must be a non-empty name")
        policy = http or HttpPolicy()
        if timeout is not None:
            policy = replace(policy, timeout=float(timeout))
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.context_tokens = int(context_tokens)
        self.send_repeat_penalty = send_repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.id = f"openai:{self.base_url}#{model}"
        self._http = HttpClient(
            self.url, what="LLM server", policy=policy, api_key_env=api_key_env or None
        )

    def __repr__(self) -> str:
        return f"OpenAIChat({self.base_url!r}, {self.model!r}, api_key_env={self.api_key_env!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def policy(self) -> HttpPolicy:
        return self._http.policy

    @property
    def timeout(self) -> float:
        """Seconds one call may take in all (the policy's deadline)."""
        return self._http.policy.timeout

    def request_body(self, messages: list[Message], params: GenerationParams) -> dict[str, Any]:
        """The JSON body sent for one call (public so tests and logs can see it; holds no key)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "stream": False,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if self.send_repeat_penalty and params.repeat_penalty != 1.0:
            body["repeat_penalty"] = params.repeat_penalty
        if self.frequency_penalty is not None:
            body["frequency_penalty"] = self.frequency_penalty
        return body

    def chat(self, messages: list[Message], params: GenerationParams) -> ChatResult:
        """One call (retried under the policy); ``extra["retries"]`` says how many retries."""
        try:
            response = self._http.post_json(self.request_body(messages, params))
        except HTTPCallError as exc:
            raise _llm_error(exc) from None
        result = self._parse(response.body)
        if response.attempts > 1:
            result.extra["retries"] = response.attempts - 1
        return result

    def chat_stream(
        self, messages: list[Message], params: GenerationParams, on_token: TokenSink
    ) -> ChatResult:
        """One call with ``stream: true``: each content delta goes to ``on_token`` as the
        server sends it; the result holds the whole reply. A server that answers with one JSON
        body instead (it ignored ``stream``) is read as :meth:`chat` reads it."""
        body = self.request_body(messages, params)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        reader = _StreamReader(on_token, self.url)
        try:
            response = self._http.post_json(body, on_data=reader.feed)
        except HTTPCallError as exc:
            raise _llm_error(exc) from None
        if not reader.events:
            result = self._parse(response.body)
            if result.text:
                on_token(result.text)
        else:
            reader.feed(b"\n")  # a last line without its newline
            if not reader.ended:
                raise LLMResponseError(
                    f"LLM server at {self.url} ended its stream before the reply's end "
                    "(no finish_reason, no [DONE]); the connection may have dropped"
                )
            result = reader.result()
        if response.attempts > 1:
            result.extra["retries"] = response.attempts - 1
        return result

    def _scrub(self, text: str) -> str:
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return scrub(text, key)

    # -- parsing --------------------------------------------------------------------------------

    def _parse(self, raw: bytes) -> ChatResult:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            snippet = self._scrub(raw[:200].decode("utf-8", errors="replace"))
            raise LLMResponseError(
                f"LLM server at {self.url} did not return JSON (first bytes: {snippet!r})"
            ) from None
        if not isinstance(payload, dict):
            raise LLMResponseError(f"LLM server at {self.url} returned JSON that is not an object")
        content = _field(payload, ("choices", 0, "message", "content"), self.url)
        if not isinstance(content, str):
            raise LLMResponseError(
                f"LLM server at {self.url} returned a non-string choices[0].message.content "
                f"({type(content).__name__})"
            )
        usage = payload.get("usage") or {}
        finish = payload["choices"][0].get("finish_reason")
        return ChatResult(
            text=content,
            prompt_tokens=_int(usage.get("prompt_tokens")) if isinstance(usage, dict) else 0,
            completion_tokens=_int(usage.get("completion_tokens"))
            if isinstance(usage, dict)
            else 0,
            finish_reason=finish if isinstance(finish, str) else None,
        )


class _StreamReader:
    """Reads an OpenAI server-sent event stream (``data: {chunk}`` lines, ``data: [DONE]``)
    piece by piece, passing each content delta on as it arrives."""

    def __init__(self, on_token: TokenSink, url: str) -> None:
        self.on_token = on_token
        self.url = url
        self.buffer = b""
        self.events = 0
        self.parts: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.ended = False
        """A finish_reason or ``[DONE]`` came: the reply is whole."""

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return  # a comment, an event name or a blank line between events
        self.events += 1
        data = line[5:].strip()
        if data == b"[DONE]":
            self.ended = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            raise LLMResponseError(
                f"LLM server at {self.url} streamed an event that is not JSON"
            ) from None
        if not isinstance(chunk, dict):
            return
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise LLMResponseError(f"LLM server at {self.url} reported an error: {message}")
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str) and text:
                self.parts.append(text)
                self.on_token(text)
            if isinstance(choice.get("finish_reason"), str):
                self.finish = choice["finish_reason"]
                self.ended = True

    def result(self) -> ChatResult:
        return ChatResult(
            text="".join(self.parts),
            prompt_tokens=_int(self.usage.get("prompt_tokens")),
            completion_tokens=_int(self.usage.get("completion_tokens")),
            finish_reason=self.finish,
        )


def _field(payload: Any, path: tuple[str | int, ...], url: str) -> Any:
    """Walk ``path`` into the JSON; a missing step names the whole field in the error."""
    name = "".join(
        f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path)
    )
    node = payload
    for step in path:
        ok = (isinstance(step, int) and isinstance(node, list) and len(node) > step) or (
            isinstance(step, str) and isinstance(node, dict) and step in node
        )
        if not ok:
            raise LLMResponseError(f"LLM server at {url} returned JSON without {name}")
        node = node[step]
    return node


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _llm_error(exc: HTTPCallError) -> LLMError:
    """The LLM error class for an HTTP failure (same message; retries already spent)."""
    error: LLMError
    message = str(exc)
    if exc.kind == "timeout":
        error = LLMTimeoutError(message)
    elif exc.kind in ("refused", "connection", "tls"):
        error = LLMConnectionError(message)
        error.retryable = exc.retryable  # a certificate problem is not transient
    elif exc.kind == "status" and exc.status is not None:
        error = LLMHTTPError(message, status=exc.status, retry_after=exc.retry_after)
    else:
        error = LLMResponseError(message)
    error.retries = exc.attempts - 1
    return error


__all__ = ["OpenAIChat"]
