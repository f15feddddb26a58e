"""The web page `psirag serve` shows at ``/``: plain HTML, CSS and JavaScript modules shipped as
package data (no build step, no CDN), so ``pip install`` alone gives a working page offline."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["INDEX_HTML", "static_dir"]

INDEX_HTML = "index.html"


def static_dir() -> Path:
    """The folder holding ``index.html`` and the assets it loads from ``static/``."""
    return Path(str(resources.files(__name__).joinpath("static")))
