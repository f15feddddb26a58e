"""Chat over any OpenAI-compatible HTTP server (llama.cpp's server, Ollama, vLLM, OpenAI itself).

Standard library only (urllib), so the HTTP backend needs no extra package. The API key is read
from the environment on every call and lives only in the request header: it is never stored on
the object, so it cannot leak through a repr, a cache key, a log line or an error message.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from psirag.llm.base import ChatResult, GenerationParams, Message
from psirag.llm.errors import (
    LLMConnectionError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
)

_LOOPBACK_HOSTS = frozenset({"localhost", "::1"})
_MAX_SERVER_MESSAGE = 500
"""Characters of a server's error body quoted in an error message."""


class OpenAIChat:
    """A chat model behind ``POST {base_url}/chat/completions``.

    ``repeat_penalty`` (llama.cpp/Ollama's name) is sent when it is not 1.0; servers that reject
    unknown fields (OpenAI's own) need ``send_repeat_penalty=False``. ``frequency_penalty`` is sent
    only when given, since its scale differs from ``repeat_penalty``'s.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 120,
        context_tokens: int = 4096,
        *,
        send_repeat_penalty: bool = True,
        frequency_penalty: float | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not model:
            raise ValueError("model must be a non-empty name")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.context_tokens = int(context_tokens)
        self.send_repeat_penalty = send_repeat_penalty
        self.frequency_penalty = frequency_penalty
        self.id = f"openai:{self.base_url}#{model}"
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        # A server on this machine is never reached through an HTTP proxy from the environment.
        self._opener = (
            urllib.request.build_opener(urllib.request.ProxyHandler({}))
            if host in _LOOPBACK_HOSTS or host.startswith("127.")
            else urllib.request.build_opener()
        )

    def __repr__(self) -> str:
        return f"OpenAIChat({self.base_url!r}, {self.model!r}, api_key_env={self.api_key_env!r})"

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

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
        data = json.dumps(self.request_body(messages, params)).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, key) from None
        except urllib.error.URLError as exc:
            raise self._url_error(exc.reason, key) from None
        except TimeoutError as exc:
            raise self._url_error(exc, key) from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise self._url_error(exc, key) from None
        return self._parse(raw, key)

    # -- errors ---------------------------------------------------------------------------------

    def _url_error(self, reason: object, key: str) -> Exception:
        if isinstance(reason, TimeoutError):
            return LLMTimeoutError(
                f"LLM server at {self.url} did not answer within {self.timeout:g} s; "
                "raise the timeout or check that the server is not overloaded"
            )
        if isinstance(reason, ConnectionRefusedError):
            return LLMConnectionError(
                f"could not connect to the LLM server at {self.url}: connection refused; "
                "check that the server is running and that the base URL and port are right"
            )
        detail = _scrub(str(reason), key)
        return LLMConnectionError(
            f"could not reach the LLM server at {self.url}: {detail}; "
            "check the server and the base URL"
        )

    def _http_error(self, exc: urllib.error.HTTPError, key: str) -> LLMHTTPError:
        try:
            body = exc.read().decode("utf-8", errors="replace")
        except Exception:
            body = ""
        reason = _scrub(_server_message(body) or str(exc.reason or ""), key)
        retry_after: float | None = None
        header = exc.headers.get("Retry-After") if exc.headers else None
        if header:
            try:
                retry_after = float(header)
            except ValueError:
                retry_after = None
        hint = ""
        if exc.code in (401, 403):
            hint = f" (check the API key in ${self.api_key_env})"
        elif exc.code == 404:
            hint = " (check the base URL, which usually ends in /v1, and the model name)"
        return LLMHTTPError(
            f"LLM server at {self.url} answered HTTP {exc.code}{hint}: {reason or 'no message'}",
            status=exc.code,
            retry_after=retry_after,
        )

    # -- parsing --------------------------------------------------------------------------------

    def _parse(self, raw: bytes, key: str) -> ChatResult:
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            snippet = _scrub(raw[:200].decode("utf-8", errors="replace"), key)
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


def _server_message(body: str) -> str:
    """The human part of an error body: OpenAI's ``error.message``, or the text itself."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body.strip()[:_MAX_SERVER_MESSAGE]
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:_MAX_SERVER_MESSAGE]
    return body.strip()[:_MAX_SERVER_MESSAGE]


def _scrub(text: str, key: str) -> str:
    """Remove the API key from text that came back from a server or a socket error."""
    return text.replace(key, "***") if key else text


__all__ = ["OpenAIChat"]
