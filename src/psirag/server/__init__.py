"""``psirag serve``: an HTTP API over a saved index, an OpenAI-compatible chat endpoint and an
MCP server (issue 13). Needs the extra: ``pip install 'psirag[server]'``.

The web framework is imported only when a server is built, so ``psirag --help`` and the rest of
the package work without the extra; :func:`require_server_extra` names the extra when it lacks.
"""

from __future__ import annotations

from typing import Any

from psirag.errors import PsiragError

EXTRA_HINT = "pip install 'psirag[server]'"


class ServerExtraMissingError(PsiragError):
    """The ``server`` extra (FastAPI, uvicorn, mcp) is not installed."""


def require_server_extra(*modules: str) -> None:
    """Import ``modules`` (default: fastapi, uvicorn) or raise an error that names the extra."""
    import importlib

    for name in modules or ("fastapi", "uvicorn"):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ServerExtraMissingError(
                f"psirag serve needs the package {name!r}: {EXTRA_HINT}"
            ) from exc


def create_app(*args: Any, **kwargs: Any) -> Any:
    """The FastAPI application (see :func:`psirag.server.app.create_app`)."""
    require_server_extra()
    from psirag.server.app import create_app as _create_app

    return _create_app(*args, **kwargs)


__all__ = ["EXTRA_HINT", "ServerExtraMissingError", "create_app", "require_server_extra"]
