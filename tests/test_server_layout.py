"""The server package's shape, kept by a test: small modules, and no import of the CLI (the
server sits beside the CLI, not above it; what both need lives below them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import psirag.server

SERVER = Path(psirag.server.__file__).resolve().parent
MAX_LINES = 400


def server_modules() -> list[Path]:
    modules = sorted(SERVER.rglob("*.py"))
    assert len(modules) > 10, f"found only {len(modules)} modules under {SERVER}"
    return modules


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module an import names, at module level or inside a function; ``from psirag import
    cli`` counts as ``psirag.cli``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def is_cli(module: str) -> bool:
    """psirag.cli, anything under it, and its helper modules (psirag.cli_common, cli_living)."""
    return module == "psirag.cli" or module.startswith(("psirag.cli.", "psirag.cli_"))


def test_no_server_module_is_longer_than_the_limit() -> None:
    too_long = {}
    for path in server_modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            too_long[str(path.relative_to(SERVER))] = lines
    assert not too_long, f"split these server modules (over {MAX_LINES} lines): {too_long}"


def test_the_server_imports_nothing_from_the_cli() -> None:
    offending = {}
    for path in server_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = sorted(m for m in imported_modules(tree) if is_cli(m))
        if found:
            offending[str(path.relative_to(SERVER))] = found
    assert not offending, f"server modules import the CLI: {offending}"


def test_the_checks_see_a_cli_import() -> None:
    """The import walk finds CLI imports in every form, inside functions too."""
    source = (
        "import psirag.cli\n"
        "from psirag import cli\n"
        "def f():\n"
        "    from psirag.cli_living import x\n"
        "from psirag.client import y\n"
    )
    found = {m for m in imported_modules(ast.parse(source)) if is_cli(m)}
    assert found == {"psirag.cli", "psirag.cli_living", "psirag.cli_living.x"}


API_ROUTES = {
    ("GET", "/health"),
    ("GET", "/index"),
    ("POST", "/search"),
    ("POST", "/ask"),
    ("POST", "/summarize"),
    ("GET", "/tree"),
    ("GET", "/nodes/{node_id}"),
    ("GET", "/generation"),
    ("GET", "/documents"),
    ("POST", "/documents"),
    ("DELETE", "/documents/{doc_id}"),
    ("GET", "/sources"),
    ("POST", "/sync"),
    ("GET", "/jobs/{job_id}"),
    ("POST", "/jobs/{job_id}/retry"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("POST", "/api/chat"),
    ("POST", "/api/generate"),
}
"""The JSON API, as the README's "HTTP API" table lists it."""


def test_the_routers_make_up_the_documented_api() -> None:
    """The routers alone, without an index or create_app, describe the whole JSON API: a route
    left out of ROUTERS, or one added twice, shows here."""
    pytest.importorskip("fastapi")
    from fastapi import FastAPI

    from psirag.server.routes import ROUTERS

    app = FastAPI()
    for router in ROUTERS:
        app.include_router(router)
    operations = [
        (method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops
    ]
    assert len(operations) == len(set(operations))
    assert set(operations) == API_ROUTES
