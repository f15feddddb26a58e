"""An embedder that remembers vectors in an ``.npz`` file keyed by the sha1 of each text.

Embedding 2Wiki's 6,119 passages with MiniLM takes 10-20 minutes on a busy 2-core machine, and
the benchmarks already keep such a file (``bench-out/cache/embeddings-<name>.npz``, arrays
``keys`` and ``vectors``). Reading it lets an evaluation skip that work; new vectors are added and
the file is replaced atomically. The file records the embedder id when this class writes it, and
a file written for another model is refused (its vectors would be meaningless here).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from psirag.embed import Embedder
from psirag.errors import InputError


def text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class CachingEmbedder:
    """Wraps an embedder; same ``spec``/``id``/``dim``, vectors from the file where it has them."""

    def __init__(self, inner: Embedder, path: str | Path) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.id = inner.id
        self.max_tokens = inner.max_tokens
        self.last_truncated = 0
        self.path = Path(path).expanduser()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._store: dict[str, np.ndarray] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            with np.load(self.path, allow_pickle=False) as data:
                keys = data["keys"].tolist()
                vectors = np.asarray(data["vectors"], dtype=np.float32)
                owner = str(data["embedder_id"]) if "embedder_id" in data.files else None
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"cannot read the embedding cache {self.path}: {exc}") from exc
        if owner is not None and owner != self.id:
            raise InputError(
                f"the embedding cache {self.path} holds vectors of {owner!r}, not {self.id!r}"
            )
        if vectors.ndim != 2 or len(keys) != vectors.shape[0]:
            raise InputError(f"the embedding cache {self.path} has mismatched keys and vectors")
        if keys and vectors.shape[1] != self.inner.dim:
            raise InputError(
                f"the embedding cache {self.path} holds {vectors.shape[1]}-d vectors; "
                f"{self.id!r} makes {self.inner.dim}-d ones"
            )
        self._store = dict(zip(keys, vectors, strict=True))

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        with self._lock:
            missing = [i for i, k in enumerate(keys) if k not in self._store]
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
            if missing:
                fresh = self.inner.embed([texts[i] for i in missing], progress=progress, desc=desc)
                for i, vector in zip(missing, fresh, strict=True):
                    self._store[keys[i]] = np.asarray(vector, dtype=np.float32)
                self._save()
            self.last_truncated = self.count_truncated(texts) if len(texts) > 1 else 0
            if not keys:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._store[k] for k in keys]).astype(np.float32)

    def count_truncated(self, texts: Sequence[str]) -> int:
        counter = getattr(self.inner, "count_truncated", None)
        return int(counter(texts)) if callable(counter) else 0

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self._store)
        tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.tmp.npz")
        np.savez(
            tmp,
            keys=np.array(keys),
            vectors=np.stack([self._store[k] for k in keys]),
            embedder_id=np.array(self.id),
        )
        os.replace(tmp, self.path)


__all__ = ["CachingEmbedder", "text_key"]
