"""One trust rule for every command that reads a saved index: its manifest names no endpoint
that psirag will call unless the user confirmed it.

A manifest records the embedder (``embedder.spec``) and, for LLM abstracts, the LLM
(``config.llm``) the index was built with. A local model is harmless; an ``openai:<url>#<model>``
spec is a network address, and calling it would hand whoever wrote the manifest the user's
queries, documents and ``$OPENAI_API_KEY``. So a spec taken from a manifest is used only when

- the user names the endpoint themselves (``--embedder SPEC`` / ``--llm SPEC``; the caller then
  uses the user's spec, and an embedder must still embed as the index's model), or
- its ``host:port`` (or host) is listed in ``$PSIRAG_ALLOW_ENDPOINTS``.

search, ask, chat, summarize, serve and mcp reach this rule through
:func:`psirag.embed.endpoints.load_index_embedder`; add, sync and remove through
:func:`embedder_spec` and :func:`llm_spec`. inspect and eval never call an index's endpoint.
"""

from __future__ import annotations

import os
import urllib.parse

from psirag.errors import InputError

ALLOW_ENV = "PSIRAG_ALLOW_ENDPOINTS"


def endpoint_of(spec: str) -> str | None:
    """``host:port`` of a spec that names a network endpoint; None for local models."""
    spec = spec.strip()
    if not spec.startswith("openai:"):
        return None
    url = spec[len("openai:") :].partition("#")[0].strip()
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    host = (parts.hostname or "").lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_endpoints() -> frozenset[str]:
    """The entries of ``$PSIRAG_ALLOW_ENDPOINTS``, lower-cased."""
    raw = os.environ.get(ALLOW_ENV, "")
    return frozenset(e.strip().lower() for e in raw.split(",") if e.strip())


def endpoint_allowed(endpoint: str) -> bool:
    """True when ``$PSIRAG_ALLOW_ENDPOINTS`` lists this ``host:port`` or its host."""
    allowed = allowed_endpoints()
    host = endpoint.rpartition(":")[0]
    return endpoint in allowed or host in allowed or host.strip("[]") in allowed


def _url_and_model(spec: str) -> tuple[str, str]:
    rest = spec.strip()[len("openai:") :]
    url, _, model = rest.rpartition("#") if "#" in rest else (rest, "", "")
    return url, model or "MODEL"


def require_confirmed(spec: str, *, kind: str) -> str:
    """``spec`` (read from an index's manifest) when it may be called: a local model, or an
    endpoint ``$PSIRAG_ALLOW_ENDPOINTS`` lists; otherwise :class:`InputError` naming the field,
    the endpoint and both ways to confirm it. ``kind``: ``"embedder"`` or ``"llm"``."""
    endpoint = endpoint_of(spec)
    if endpoint is None or endpoint_allowed(endpoint):
        return spec
    url, model = _url_and_model(spec)
    if kind == "embedder":
        raise InputError(
            f"this index's manifest.json (embedder.spec) names the embedding endpoint {url}; "
            "an index is data, so psirag sends your queries and documents (and $OPENAI_API_KEY) "
            "only to an endpoint you confirm: pass --embedder openai:<a URL you trust>#"
            f"{model} (it must serve the index's model), or allow this one with "
            f"{ALLOW_ENV}={endpoint}"
        )
    raise InputError(
        f"this index's manifest.json (config.llm) names the LLM endpoint {url}; an index is "
        "data, so psirag sends your documents (and $OPENAI_API_KEY) only to an LLM you confirm: "
        f"pass --llm openai:<a URL you trust>#{model}, or allow this one with "
        f"{ALLOW_ENV}={endpoint}"
    )


def embedder_spec(manifest_spec: str, given: str | None) -> str:
    """The embedder to load for an index: the user's ``--embedder`` if given, else the
    manifest's own under :func:`require_confirmed`."""
    return given if given else require_confirmed(manifest_spec, kind="embedder")


def llm_spec(manifest_spec: str | None, given: str | None) -> str | None:
    """The LLM to load for an index's abstracts: the user's ``--llm`` if given, else the
    manifest's own under :func:`require_confirmed` (None when it names none)."""
    if given:
        return given
    if not manifest_spec:
        return None
    return require_confirmed(manifest_spec, kind="llm")


__all__ = [
    "ALLOW_ENV",
    "allowed_endpoints",
    "embedder_spec",
    "endpoint_allowed",
    "endpoint_of",
    "llm_spec",
    "require_confirmed",
]
