"""Embedding backends: text in, unit-normalised float32 vectors out.

Heavy libraries load only when a spec needs them: plain ``minilm`` runs on ONNX Runtime and the
``tokenizers`` library; torch and sentence-transformers (``psirag[torch]``) only for ``st:`` and
``minilm-torch``.
"""

from psirag.embed.base import (
    ACCEPTED_SPECS,
    Embedder,
    finalize_vectors,
    minilm_path,
    model_fingerprint,
)
from psirag.embed.factory import load_embedder

__all__ = [
    "ACCEPTED_SPECS",
    "Embedder",
    "finalize_vectors",
    "load_embedder",
    "minilm_path",
    "model_fingerprint",
]
