"""Embedding backends: text in, unit-normalised float32 vectors out.

Heavy libraries (torch, sentence-transformers) load only when a local model is asked for.
"""

from psirag.embed.base import (
    ACCEPTED_SPECS,
    Embedder,
    finalize_vectors,
    load_embedder,
    minilm_path,
    model_fingerprint,
)

__all__ = [
    "ACCEPTED_SPECS",
    "Embedder",
    "finalize_vectors",
    "load_embedder",
    "minilm_path",
    "model_fingerprint",
]
