"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, with the standard library only.

Works with llama.cpp's server, vLLM, text-embeddings-inference and OpenAI itself. The API key comes
from the caller or ``OPENAI_API_KEY`` and goes only into the Authorization header: never into
messages, ``repr``, ``spec`` or ``id``.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from psirag.embed.base import finalize_vectors
from psirag.errors import EmbeddingError

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_PROBE = "dimension probe"
_LOOPBACK = {"localhost", "127.0.0.1", "::1"}


class OpenAIEmbedder:
    """Client for ``POST {base_url}/embeddings``; retries transient failures with backoff."""

    max_tokens: int | None = None
    """The server truncates (or rejects) long inputs on its own terms; we cannot count them."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60,
        *,
        retries: int = 4,
        backoff: float = 1.0,
        spec: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.spec = spec if spec is not None else f"openai:{self.base_url}#{model}"
        # Identity is the served model, not the host: the same model behind another URL is equal.
        self.id = f"openai:{model}"
        self.last_truncated = 0
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._dim: int | None = None
        host = urllib.parse.urlsplit(self.url).hostname or ""
        # A proxy set for the internet must not capture a server on this machine.
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r})"

    @property
    def dim(self) -> int:
        """Vector length, learnt from the first response (a one-text probe if none came yet)."""
        if self._dim is None:
            self._dim = int(self._request([_PROBE]).shape[1])
        return self._dim

    def count_truncated(self, texts: Sequence[str]) -> int:
        """Unknown for a remote model: always 0."""
        return 0

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        """Embed in batches of ``batch_size`` texts per request."""
        texts = [str(t) for t in texts]
        self.last_truncated = 0
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts: list[np.ndarray] = []
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc=desc, unit="text")
        try:
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start : start + self.batch_size]
                parts.append(self._request(batch))
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        dims = {p.shape[1] for p in parts}
        if len(dims) != 1:
            raise EmbeddingError(
                f"{self.url} returned vectors of different lengths {sorted(dims)} across requests"
            )
        return finalize_vectors(np.concatenate(parts), texts, self._dim)

    # -- HTTP ---------------------------------------------------------------------------------

    def _request(self, batch: list[str]) -> np.ndarray:
        """One embeddings request; returns raw (unnormalised) rows in input order."""
        # Many servers reject empty strings; a single space embeds "nothing" just as well.
        payload = {"model": self.model, "input": [t if t.strip() else " " for t in batch]}
        body = self._post(json.dumps(payload).encode("utf-8"))
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise EmbeddingError(
                f"{self.url} did not return JSON ({exc}); body starts {body[:120]!r}"
            ) from exc
        vectors = self._parse(data, len(batch))
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            raise EmbeddingError(
                f"{self.url} returned vectors of length {vectors.shape[1]}, earlier {self._dim}"
            )
        return vectors

    def _parse(self, data: Any, n: int) -> np.ndarray:
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise EmbeddingError(f"{self.url} response has no 'data' list")
        items = data["data"]
        if len(items) != n:
            raise EmbeddingError(
                f"{self.url} response 'data' has {len(items)} items for {n} inputs"
            )
        rows: list[Any] = [None] * n
        for pos, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise EmbeddingError(f"{self.url} response 'data[{pos}].embedding' is not a list")
            index = item.get("index", pos)
            if not isinstance(index, int) or not 0 <= index < n or rows[index] is not None:
                raise EmbeddingError(f"{self.url} response 'data[{pos}].index' is invalid")
            rows[index] = item["embedding"]
        lengths = {len(r) for r in rows}
        if len(lengths) != 1 or 0 in lengths:
            raise EmbeddingError(
                f"{self.url} response 'data[*].embedding' vectors have lengths {sorted(lengths)}"
            )
        try:
            # None (JSON null, how some servers write NaN) becomes NaN; finalize_vectors names it.
            return np.array(
                [[np.nan if x is None else x for x in r] for r in rows], dtype=np.float64
            )
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{self.url} response 'data[*].embedding' holds non-numbers: {exc}"
            ) from exc

    def _post(self, body: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        last = ""
        retry_after: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, retry_after))
            retry_after = None
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    return resp.read()
            except urllib.error.HTTPError as exc:
                detail = _read_error(exc)
                if exc.code not in _RETRY_STATUS:
                    raise EmbeddingError(f"{self.url} answered HTTP {exc.code}: {detail}") from None
                last = f"HTTP {exc.code}: {detail}"
                retry_after = _retry_after(exc)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"{type(reason).__name__}: {reason}"
        raise EmbeddingError(
            f"cannot get embeddings from {self.url} after {self.retries + 1} tries ({last}); "
            "is the server running and the URL right?"
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = self.backoff * 2 ** (attempt - 1)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 30.0))
        return delay


def _read_error(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(300).decode("utf-8", "replace").strip()
    except Exception:
        text = ""
    return text or str(exc.reason)


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    value = exc.headers.get("Retry-After") if exc.headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
