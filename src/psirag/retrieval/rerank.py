"""Cross-encoder reranking: score (query, passage) pairs jointly with a local model.

Used by ``fusion='rerank'`` in place of reciprocal rank fusion. Models load from a local folder
only; nothing is fetched from the Hugging Face hub.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psirag.devices import default_device, parse_device
from psirag.embed.sentence_transformers import (
    check_model_folder,
    check_torch_device,
    force_offline,
    quiet_loading,
    require_torch_extra,
)
from psirag.errors import InputError


class CrossEncoderReranker:
    """A ``sentence_transformers.CrossEncoder`` from a local folder, returning relevance in [0, 1].

    Scores are probabilities so they can be compared across queries and thresholded: a one-label
    model's logit goes through a sigmoid; a multi-label model gives the softmax of its last label
    (the "relevant" class by convention).
    """

    def __init__(self, path: str | Path, batch_size: int = 16, device: str | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        folder = check_model_folder(Path(path), "cross-encoder model")
        require_torch_extra(f"the cross-encoder {str(folder)!r}")
        device = default_device() if device is None else parse_device(device)
        check_torch_device(device)
        force_offline()
        import torch
        from sentence_transformers import CrossEncoder

        try:
            with quiet_loading():
                self._model: Any = CrossEncoder(
                    str(folder),
                    device=device,
                    local_files_only=True,
                    activation_fn=torch.nn.Identity(),
                )
        except Exception as exc:
            raise InputError(f"cannot load a cross-encoder from {str(folder)!r}: {exc}") from exc
        self.path = folder
        self.batch_size = batch_size
        self.num_labels = int(getattr(self._model, "num_labels", 1) or 1)

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(path={str(self.path)!r}, labels={self.num_labels})"

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """Relevance of each text to the query: float32 array of shape (len(texts),)."""
        if not texts:
            return np.zeros(0, dtype=np.float32)
        import torch

        pairs = [(query, str(t)) for t in texts]
        with torch.inference_mode():
            raw = self._model.predict(
                pairs,
                batch_size=self.batch_size,
                show_progress_bar=False,
                activation_fn=torch.nn.Identity(),
                convert_to_numpy=True,
            )
        logits = np.asarray(raw, dtype=np.float64)
        if logits.ndim == 1 or (logits.ndim == 2 and logits.shape[1] == 1):
            scores = _sigmoid(logits.reshape(-1))
        else:
            shifted = logits - logits.max(axis=1, keepdims=True)
            probs = np.exp(shifted)
            scores = probs[:, -1] / probs.sum(axis=1)
        return scores.astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function."""
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out
