"""The embedding cache: vectors keyed by sha1 of the text, the model only for what is missing."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder

from psirag.errors import InputError
from psirag.eval.embedcache import CachingEmbedder, text_key


class CountingEmbedder(HashEmbedder):
    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.seen: list[str] = []

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        self.seen.extend(texts)
        return super().embed(texts)


def test_text_key_is_sha1_of_utf8() -> None:
    assert text_key("Lothair II\nking") == hashlib.sha1(b"Lothair II\nking").hexdigest()


def test_reads_a_benchmark_cache_and_embeds_only_the_missing(tmp_path: Path) -> None:
    path = tmp_path / "embeddings-hash.npz"
    planted = np.zeros((1, 64), dtype=np.float32)
    planted[0, 5] = 1.0
    # The benchmarks' format: only `keys` and `vectors`.
    np.savez(path, keys=np.array([text_key("cached text")]), vectors=planted)

    inner = CountingEmbedder()
    cached = CachingEmbedder(inner, path)
    assert (cached.id, cached.spec, cached.dim) == (inner.id, inner.spec, inner.dim)
    out = cached.embed(["cached text", "new text"])
    assert inner.seen == ["new text"]
    assert np.array_equal(out[0], planted[0])  # from the file, not recomputed
    assert np.allclose(out[1], HashEmbedder().embed(["new text"])[0])
    assert (cached.hits, cached.misses) == (1, 1)

    # The new vector was written back; a fresh wrapper needs the model for nothing.
    again = CountingEmbedder()
    out2 = CachingEmbedder(again, path).embed(["new text", "cached text"])
    assert again.seen == []
    assert np.array_equal(out2, out[::-1])


def test_refuses_a_cache_of_another_model(tmp_path: Path) -> None:
    path = tmp_path / "cache.npz"
    CachingEmbedder(HashEmbedder(64, name="one"), path).embed(["a text"])
    with pytest.raises(InputError, match="holds vectors of"):
        CachingEmbedder(HashEmbedder(64, name="two"), path)
    with pytest.raises(InputError, match="holds 64-d vectors"):
        np.savez(path, keys=np.array([text_key("a")]), vectors=np.ones((1, 64), np.float32))
        CachingEmbedder(HashEmbedder(32), path)
