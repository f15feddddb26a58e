"""A saved index is data, never instructions: which embedding endpoints an index may send to.

An index records the embedder it was built with (``manifest.json`` field ``embedder.spec``). For a
local model that is harmless, but an ``openai:<url>#<model>`` spec is a network address: loading
it blindly would let whoever wrote the manifest receive every query, and ``$OPENAI_API_KEY`` with
it. So an endpoint named by an index is used only when the user confirmed it:

- ``--embedder SPEC`` (or ``Index.embedder = load_embedder(SPEC)``) names the endpoint to use; it
  must serve the index's model (the embedder ids must match), whatever URL the manifest holds;
- or the endpoint's ``host:port`` (or just ``host``, any port) is listed in the environment
  variable ``PSIRAG_ALLOW_ENDPOINTS`` (comma-separated), e.g.
  ``PSIRAG_ALLOW_ENDPOINTS=127.0.0.1:8080,embed.internal``.

Loopback is not trusted by default: on a shared machine another user can listen there too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from psirag.embed.base import Embedder
from psirag.embed.factory import load_embedder, prefetch_embedder
from psirag.trust import (
    ALLOW_ENV,
    allowed_endpoints,
    endpoint_allowed,
    endpoint_of,
    require_confirmed,
)

if TYPE_CHECKING:
    from psirag.http import HttpPolicy
    from psirag.index import Index


def load_index_embedder(
    spec: str, *, batch_size: int | None = None, http: HttpPolicy | None = None
) -> Embedder:
    """The embedder an index's manifest names, unless it is an endpoint nobody confirmed
    (the one rule of :mod:`psirag.trust`)."""
    require_confirmed(spec, kind="embedder")
    return load_embedder(spec, batch_size=batch_size, http=http)


def prefetch_index_embedder(folder: str | Path) -> bool:
    """Start loading the local model an index's ``manifest.json`` names, while the caller loads
    the index itself (:func:`psirag.embed.factory.prefetch_embedder`: local MiniLM only, so an
    endpoint named by a manifest is never contacted here). A manifest that cannot be read
    prefetches nothing; loading the index then reports the problem."""
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
        config = manifest["config"]
        spec, batch_size = config["embedder"], config.get("batch_size")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(spec, str) or not (batch_size is None or type(batch_size) is int):
        return False
    return prefetch_embedder(spec, batch_size)


def confirm_index_embedder(index: Index, spec: str | None, http: HttpPolicy | None = None) -> None:
    """Give a loaded index the embedder the user chose (``--embedder``), or its own one under the
    user's HTTP policy when its endpoint is allowed; otherwise the index keeps loading its own
    embedder lazily (a local model, or an error for an unconfirmed endpoint).
    The index's setter checks that the chosen embedder serves the index's model.
    """
    batch_size = index.config.batch_size
    if spec:
        index.embedder = load_embedder(spec, batch_size=batch_size, http=http)
        return
    own = index.config.embedder
    endpoint = endpoint_of(own)
    if http is not None and endpoint is not None and endpoint_allowed(endpoint):
        index.embedder = load_embedder(own, batch_size=batch_size, http=http)


__all__ = [
    "ALLOW_ENV",
    "allowed_endpoints",
    "confirm_index_embedder",
    "endpoint_allowed",
    "endpoint_of",
    "load_index_embedder",
    "prefetch_index_embedder",
]
