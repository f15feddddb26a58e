"""The pages for people: ``/docs`` (Swagger UI, served from the swagger-ui-bundle package, so no
CDN is needed) and ``/`` (the web page, when the package ships it). Neither is in the schema."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.staticfiles import StaticFiles

from psirag.server.middleware import DOCS_ASSETS

if TYPE_CHECKING:
    from fastapi import FastAPI


def web_static() -> Path | None:
    """The web page's files, when the package ships them (src/psirag/web/static)."""
    folder = Path(__file__).resolve().parents[2] / "web" / "static"
    return folder if (folder / "index.html").is_file() else None


def swagger_assets() -> Path | None:
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    folder = Path(str(swagger_ui_path))
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install_pages(app: FastAPI, web: Path | None, swagger: Path | None) -> None:
    """``/docs`` and its assets; ``/`` and ``/static`` when ``web`` is the page's folder."""

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        if swagger is None:
            return get_swagger_ui_html(openapi_url="/openapi.json", title="psirag API")
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="psirag API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    if swagger is not None:
        app.mount(DOCS_ASSETS, StaticFiles(directory=swagger), name="docs-assets")

    if web is not None:
        app.mount("/static", StaticFiles(directory=web), name="static")

        @app.get("/", include_in_schema=False)
        async def page() -> FileResponse:
            return FileResponse(web / "index.html")


__all__ = ["install_pages", "swagger_assets", "web_static"]
