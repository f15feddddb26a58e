"""Embeddings from a local sentence-transformers model folder, strictly offline.

torch, transformers and sentence-transformers are the optional extra ``psirag[torch]``; this
module imports none of them until a model is loaded, and says which extra to install.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag.embed.base import LengthSortedEmbedder, model_fingerprint, model_name_from_path
from psirag.errors import InputError

_TOKENIZE_BATCH = 1024
TORCH_EXTRA = "pip install 'psirag[torch]'"
_TORCH_MODULES = ("torch", "transformers", "sentence_transformers")


def torch_extra_installed() -> bool:
    """True when torch, transformers and sentence-transformers are importable (not imported)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in _TORCH_MODULES)
    except (ImportError, ValueError):  # a module set to None in sys.modules
        return False


def require_torch_extra(what: str) -> None:
    """Raise a one-line InputError naming the extra when torch's stack is not installed."""
    if not torch_extra_installed():
        raise InputError(
            f"{what} needs torch, transformers and sentence-transformers, which the default "
            f"install leaves out: {TORCH_EXTRA} (plain 'minilm' runs without them)"
        )


def check_torch_device(device: str) -> None:
    """Raise a one-line InputError when torch cannot run on ``device`` (``cuda`` on a machine
    without a GPU, or with torch built for the CPU only; a GPU number past the last one;
    ``mps`` off Apple silicon), instead of torch's own error deep in the first batch."""
    if device == "cpu":
        return
    import torch

    where = "--device or $PSIRAG_DEVICE"
    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        number = int(device.partition(":")[2] or 0)
        if number >= count:
            seen = f"{count} CUDA GPU(s)" if count else "no CUDA GPU"
            build = torch.version.cuda or "the CPU only"
            raise InputError(
                f"device {device!r} ({where}): torch {torch.__version__} (built for {build}) "
                f"sees {seen}; use --device cpu, or install a CUDA build of torch"
            )
    elif device == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device 'mps' ({where}): torch sees no Apple GPU; use --device cpu")


def force_offline() -> None:
    """Forbid Hugging Face hub access for this process, before the libraries read the flags.

    Models are always loaded by local path; this makes any stray lookup fail fast instead of
    hanging on a machine without internet.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Hide transformers' per-load "Loading weights" bar, restoring the user's setting after."""
    try:
        from transformers.utils import logging as tf_logging
    except ImportError:  # pragma: no cover - transformers always comes with sentence-transformers
        yield
        return
    enabled = tf_logging.is_progress_bar_enabled()
    if enabled:
        tf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            tf_logging.enable_progress_bar()


def check_model_folder(path: Path, what: str) -> Path:
    """Resolve a local model folder or raise InputError saying what is wrong with it."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise InputError(f"{what} folder {str(path)!r} does not exist (models load by local path)")
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise InputError(
            f"{str(path)!r} is not a model folder: it has no config.json or modules.json "
            f"(expected a {what} saved with save_pretrained / save)"
        )
    return path.resolve()


class SentenceTransformerEmbedder(LengthSortedEmbedder):
    """A sentence-transformers model loaded from a folder; batch 16 is fastest on CPU."""

    def __init__(
        self,
        path: str | Path,
        batch_size: int = 16,
        device: str = "cpu",
        *,
        name: str | None = None,
        spec: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        folder = check_model_folder(Path(path), "sentence-transformers model")
        require_torch_extra(f"the sentence-transformers model {str(folder)!r}")
        check_torch_device(device)
        force_offline()
        from sentence_transformers import SentenceTransformer

        try:
            with quiet_loading():
                self._model: Any = SentenceTransformer(
                    str(folder), device=device, local_files_only=True
                )
        except Exception as exc:
            raise InputError(
                f"cannot load a sentence-transformers model from {str(folder)!r}: {exc}"
            ) from exc
        self.path = folder
        self.batch_size = batch_size
        self.spec = spec if spec is not None else f"st:{folder}"
        self.id = f"st:{name or model_name_from_path(folder)}@{model_fingerprint(folder)}"
        get_dim = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if not dim:
            raise InputError(f"the model in {str(folder)!r} does not say its embedding size")
        self._dim = int(dim)
        max_len = getattr(self._model, "max_seq_length", None)
        self.max_tokens: int | None = int(max_len) if max_len else None
        self.last_truncated = 0

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(id={self.id!r}, dim={self.dim})"

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        """Length of each text in the model's tokens, special tokens included, untruncated."""
        tokenizer = self._model.tokenizer
        lengths = np.zeros(len(texts), dtype=np.int64)
        for start in range(0, len(texts), _TOKENIZE_BATCH):
            batch = list(texts[start : start + _TOKENIZE_BATCH])
            ids = tokenizer(
                batch,
                add_special_tokens=True,
                truncation=False,
                return_attention_mask=False,
                return_token_type_ids=False,
                verbose=False,
            )["input_ids"]
            lengths[start : start + len(batch)] = [len(x) for x in ids]
        return lengths

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            vectors = self._model.encode(
                texts,
                batch_size=len(texts),
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=False,
            )
        return np.asarray(vectors)
