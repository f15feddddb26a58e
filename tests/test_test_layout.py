"""The layout of the tests themselves: helpers come from ``tests/support``, fixtures from
``conftest.py``, and no test module imports ``conftest``, another test module or a removed
helper module, so that one test file can be read, moved or deleted on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
REMOVED = {
    "chat_server",
    "server_procs",
    "server_fixture",
    "psirag.web.testing",
    "psirag.llm.testing",
}
"""Modules that are gone: their helpers live in ``tests/support``."""


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``, inside functions too; for ``from . import x``
    and ``from pkg import x`` the names are listed as ``pkg.x`` as well, since x may be a
    module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}".lstrip(".")) for alias in node.names]
    return found


def layout_problems(path: Path) -> list[str]:
    """What breaks the rule in ``path``, at most one problem per import statement."""
    problems = []
    flagged: set[int] = set()
    for line, module in imported_modules(path):
        top = module.lstrip(".").split(".")[0]
        where = f"{path.name}:{line}"
        if line in flagged:
            continue
        flagged.add(line)
        if top == "conftest":
            problems.append(f"{where} imports conftest: import helpers from tests/support")
        elif top.startswith("test_"):
            problems.append(
                f"{where} imports the test module {top}: move what it shares to tests/support"
            )
        elif module in REMOVED or top in REMOVED:
            problems.append(f"{where} imports {module}, which is gone: use tests/support")
        else:
            flagged.discard(line)
    return problems


def test_no_test_file_imports_conftest_another_test_or_a_removed_helper() -> None:
    files = sorted(TESTS.glob("*.py")) + sorted((TESTS / "support").glob("*.py"))
    assert len(files) > 40  # the glob found the suite
    problems = [p for f in files for p in layout_problems(f)]
    assert problems == []


def test_no_testing_helpers_in_the_installed_package() -> None:
    assert not (ROOT / "src" / "psirag" / "web" / "testing.py").exists()
    assert not (ROOT / "src" / "psirag" / "llm" / "testing.py").exists()
    for path in [*ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")]:
        assert [p for p in layout_problems(path) if "gone" in p] == []


def fake_servers(path: Path) -> list[str]:
    """The classes in ``path`` that serve HTTP themselves (a ``do_POST`` handler, in them or in
    a class nested in them) or subclass the fake OpenAI server, as ``line Name``."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8"), filename=str(path)).body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
        classes = [node, *(n for n in ast.walk(node) if isinstance(n, ast.ClassDef))]
        serves = any(
            isinstance(f, ast.FunctionDef) and f.name == "do_POST" for c in classes for f in c.body
        )
        if serves or "FakeOpenAIServer" in bases:
            found.append(f"{node.lineno} {node.name}")
    return found


def test_one_fake_openai_server() -> None:
    """One fake OpenAI-compatible server class, in tests/support, for the tests, benchmarks and
    scripts alike: a test that wants other replies gives it a responder, not a subclass."""
    files = [*TESTS.rglob("*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py")]
    assert len(files) > 60  # the globs found the suite and the benchmarks
    found = [f"{f.relative_to(ROOT)}:{c}" for f in sorted(files) for c in fake_servers(f)]
    assert len(found) == 1, found
    assert found[0].startswith("tests/support/fake_llm.py:")
    assert found[0].endswith(" FakeOpenAIServer")


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("class Sub(FakeOpenAIServer):\n    pass\n", "Sub"),
        ("class Sub(support.FakeOpenAIServer):\n    pass\n", "Sub"),
        ("class Own:\n    def __init__(self):\n        class H:\n            def do_POST(s):\n"
         "                pass\n", "Own"),
    ],
)  # fmt: skip
def test_the_server_check_catches(tmp_path: Path, source: str, name: str) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source, encoding="utf-8")
    assert fake_servers(path) == [f"1 {name}"]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("from conftest import HashEmbedder\n", "imports conftest"),
        ("def f():\n    import conftest\n", "imports conftest"),
        ("from test_agent import FakeIndex\n", "imports the test module test_agent"),
        ("import test_tree as t\n", "imports the test module test_tree"),
        ("from chat_server import ChatServer\n", "chat_server, which is gone"),
        ("from psirag.web.testing import ServerProcess\n", "psirag.web.testing, which is gone"),
        ("from psirag.web import testing\n", "psirag.web.testing, which is gone"),
        ("from psirag.llm.testing import FakeOpenAIServer\n", "psirag.llm.testing, which is gone"),
    ],
)
def test_the_check_catches(tmp_path: Path, source: str, problem: str) -> None:
    path = tmp_path / "test_probe.py"
    path.write_text(source, encoding="utf-8")
    found = layout_problems(path)
    assert len(found) == 1 and problem in found[0], found


def test_the_check_passes_support_imports(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("from support import HashEmbedder\nfrom support.trees import unit\n")
    assert imported_modules(path) == [
        (1, "support"),
        (1, "support.HashEmbedder"),
        (2, "support.trees"),
        (2, "support.trees.unit"),
    ]
    assert [m for _, m in imported_modules(path) if m.split(".")[0] != "support"] == []
