"""``/mcp``: the MCP server (:mod:`psirag.server.mcp_tools`) over streamable HTTP, on the same
state as the HTTP API. It is a Starlette sub-application, so its routes are added to the app's
router as they are rather than through an ``APIRouter``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from psirag.server.settings import ServerSettings

MCP_PATH = "/mcp"


def mount_mcp(app: FastAPI, mcp_server: Any, settings: ServerSettings) -> None:
    """Serve ``mcp_server`` (:func:`psirag.server.mcp_tools.build_mcp_server`) at ``/mcp``:
    stateless, JSON answers. Its session manager runs in the app's lifespan."""
    mcp_app = mcp_server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=settings.host,
        stateless_http=True,
        json_response=True,
    )
    for route in mcp_app.routes:
        app.router.routes.append(route)


__all__ = ["MCP_PATH", "mount_mcp"]
