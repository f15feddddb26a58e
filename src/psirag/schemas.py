"""The ``schema`` tags of psirag's JSON documents, shared by the CLI (``--json``) and the HTTP
API, so both name the same version of the same shape."""

from __future__ import annotations

SEARCH_SCHEMA = "psirag.search/1"
"""``psirag search --json`` and ``POST /search``."""
INSPECT_SCHEMA = "psirag.inspect/1"
"""``psirag inspect --json`` (its "index" part is also ``GET /index``)."""
INDEX_SCHEMA = "psirag.index-summary/1"
"""``psirag index --json``: what a build made."""

__all__ = ["INDEX_SCHEMA", "INSPECT_SCHEMA", "SEARCH_SCHEMA"]
