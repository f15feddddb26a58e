"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, with the standard library only.

Works with llama.cpp's server, vLLM, text-embeddings-inference and OpenAI itself. Requests go
through :class:`psirag.http.HttpClient` (one deadline, retry rule and size cap for chat and
embeddings). The API key is read from ``$OPENAI_API_KEY`` (or ``api_key_env``) on every request
and goes only into the Authorization header: never onto the object, into messages, ``repr``,
``spec`` or ``id``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from psirag.embed.base import finalize_vectors
from psirag.errors import EmbeddingError
from psirag.http import HTTPCallError, HttpClient, HttpPolicy, scrub

_PROBE = "dimension probe"


class OpenAIEmbedder:
    """Client for ``POST {base_url}/embeddings``; ``http`` sets its deadline, retries, size cap."""

    max_tokens: int | None = None
    """The server truncates (or rejects) long inputs on its own terms; we cannot count them."""

    def __init__(
        self,
        base_url: str,
        model: str,
        batch_size: int = 64,
        *,
        http: HttpPolicy | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        spec: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.batch_size = batch_size
        self.api_key_env = api_key_env
        self.spec = spec if spec is not None else f"openai:{self.base_url}#{model}"
        # Identity is the served model, not the host: the same model behind another URL is equal.
        self.id = f"openai:{model}"
        self.last_truncated = 0
        self._dim: int | None = None
        self._http = HttpClient(
            self.url, what="embedding server", policy=http, api_key_env=api_key_env or None
        )

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r})"

    @property
    def policy(self) -> HttpPolicy:
        return self._http.policy

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
        try:
            body = self._http.post_json(payload).body
        except HTTPCallError as exc:
            raise EmbeddingError(str(exc)) from None
        try:
            data = json.loads(body)
        except ValueError as exc:
            snippet = scrub(body[:120].decode("utf-8", "replace"), self._key())
            raise EmbeddingError(
                f"{self.url} did not return JSON ({exc}); body starts {snippet!r}"
            ) from None
        vectors = self._parse(data, len(batch))
        if self._dim is None:
            self._dim = int(vectors.shape[1])
        elif vectors.shape[1] != self._dim:
            raise EmbeddingError(
                f"{self.url} returned vectors of length {vectors.shape[1]}, earlier {self._dim}"
            )
        return vectors

    def _key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

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


__all__ = ["OpenAIEmbedder"]
