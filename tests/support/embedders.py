"""A small deterministic embedder for tests: a real Embedder (not a stand-in for quality), so
index tests run in milliseconds and need no model."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np


class HashEmbedder:
    """Hashed bag of lower-cased words: texts sharing words get similar vectors."""

    spec = "test:hash"
    max_tokens = None
    last_truncated = 0

    def __init__(self, dim: int = 64, name: str = "hash") -> None:
        self._dim = dim
        self.id = f"test:{name}-{dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
                out[i, h % self._dim] += 1.0
            out[i, 0] += 0.01  # never all-zero
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def count_truncated(self, texts: Sequence[str]) -> int:
        return 0
