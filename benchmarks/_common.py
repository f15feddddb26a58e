"""Shared helpers for the benchmark scripts: data paths, an embedding cache, machine facts.

The embedding cache only spares re-embedding the same texts across benchmark runs (embedding
6,119 passages takes minutes on 2 cores); end-to-end timings are taken without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("PSIRAG_DATA", ROOT.parent / "shared" / "data"))
OUT = Path(os.environ.get("PSIRAG_BENCH_OUT", ROOT / "bench-out"))


def dataset(name: str) -> tuple[list[dict], list[dict]]:
    folder = DATA / name
    if not folder.is_dir():
        raise SystemExit(f"{folder} not found: set PSIRAG_DATA to the folder holding {name}/")
    corpus = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    return corpus, questions


def passage_text(record: dict) -> str:
    """The paper's retrieval unit: title + newline + text."""
    return f"{record['title']}\n{record['text']}" if record.get("title") else record["text"]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


class CachedEmbedder:
    """Wraps an embedder and keeps every vector it computed in OUT/cache (keyed by text)."""

    def __init__(self, inner, name: str = "minilm") -> None:
        self.inner = inner
        self.spec, self.id = inner.spec, inner.id
        self.max_tokens = inner.max_tokens
        self.last_truncated = 0
        folder = OUT / "cache"
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"embeddings-{name}.npz"
        self.store: dict[str, np.ndarray] = {}
        if self.path.exists():
            data = np.load(self.path, allow_pickle=False)
            keys = data["keys"].tolist()
            self.store = dict(zip(keys, data["vectors"], strict=True))

    @property
    def dim(self) -> int:
        return self.inner.dim

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()

    def embed(self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"):
        keys = [self.key(t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self.store]
        if missing:
            vecs = self.inner.embed([texts[i] for i in missing], progress=progress, desc=desc)
            self.last_truncated = self.inner.last_truncated
            for i, v in zip(missing, vecs, strict=True):
                self.store[keys[i]] = v
            self.save()
        return np.stack([self.store[k] for k in keys]).astype(np.float32)

    def count_truncated(self, texts: Sequence[str]) -> int:
        return self.inner.count_truncated(texts)

    def save(self) -> None:
        keys = list(self.store)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.store[k] for k in keys]))
        os.replace(tmp, self.path)


def minilm_cached() -> CachedEmbedder:
    from psirag.embed import load_embedder

    return CachedEmbedder(load_embedder("minilm"))
