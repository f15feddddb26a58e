"""Debian's Chromium driven through Playwright, for the browser tests, ``benchmarks/bench_web.py``
and ``scripts/web_screenshots.py``. Playwright's own browser download (``playwright install``)
is not used: the system Chromium is (``apt-get install chromium``), found on PATH or named by
``PSIRAG_CHROMIUM``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from psirag.errors import InputError

CHROMIUM_ENV = "PSIRAG_CHROMIUM"


def chromium_path() -> str | None:
    """The system Chromium: ``$PSIRAG_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on
    PATH; None when there is none."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_chromium(playwright: Any, **kwargs: Any) -> Any:
    """A headless Chromium browser from a started ``sync_playwright()``."""
    path = chromium_path()
    if path is None:
        raise InputError(
            "no Chromium found: install it (Debian: apt-get install -y chromium) or set "
            f"{CHROMIUM_ENV} to its executable"
        )
    args = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    return playwright.chromium.launch(executable_path=path, headless=True, args=args, **kwargs)
