"""Shared fixtures: a small deterministic embedder (a real Embedder, not a model stand-in for
quality) so index tests run in milliseconds, and a tiny on-disk corpus."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest


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


TOPICS = {
    "volcanoes": [
        "Mount Etna is an active volcano on the east coast of Sicily.",
        "Lava from a volcano erupts as molten rock and ash clouds.",
        "Volcanic eruptions release ash, lava and sulfur gases.",
        "Vesuvius destroyed Pompeii with ash in the year 79.",
    ],
    "football": [
        "Arsenal is a football club based in north London.",
        "The football match ended with a late goal from the striker.",
        "Liverpool won the football league title with a record points total.",
        "A football club employs a manager, players and scouts.",
    ],
    "baking": [
        "Bread dough rises when yeast ferments the sugars in flour.",
        "Bake the bread in a hot oven until the crust is brown.",
        "Sourdough bread uses a starter of wild yeast instead of baker's yeast.",
        "Croissants are baked from laminated dough with butter layers.",
    ],
}


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def topic_texts() -> list[str]:
    return [t for texts in TOPICS.values() for t in texts]


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, texts in TOPICS.items():
        (folder / f"{name}.txt").write_text(" ".join(texts) + "\n", encoding="utf-8")
    (folder / "notes.md").write_text(
        "# Notes\n\nVolcanoes and football rarely meet. Bread is baked daily.\n", encoding="utf-8"
    )
    return folder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-bad-inputs",
        action="store_true",
        help="rewrite docs/bad-inputs.md from the outcomes of tests/test_bad_inputs.py",
    )
