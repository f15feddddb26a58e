"""scripts/import_cycles.py, the measure of issue 22's cycle count, on a package made here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("grimp")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_cycles.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("", encoding="utf-8")
    for module, source in modules.items():
        (root / name / f"{module}.py").write_text(source, encoding="utf-8")


def test_counts_cycles_made_inside_functions_but_not_type_checking_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(
        tmp_path,
        "cyclespkg",
        {
            # a -> b at module level, b -> a inside a function: one cycle
            "a": "from cyclespkg import b\n",
            "b": "def late():\n    from cyclespkg import a\n    return a\n",
            # c -> d -> e -> c: a second, longer one
            "c": "import cyclespkg.d\n",
            "d": "import cyclespkg.e\n",
            "e": "def late():\n    import cyclespkg.c\n",
            # f -> g, and g -> f only for the type checker: no cycle
            "f": "import cyclespkg.g\n",
            "g": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cyclespkg.f\n"),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = _script().module_cycles("cyclespkg")
    assert cycles == [
        ["cyclespkg.c", "cyclespkg.d", "cyclespkg.e"],
        ["cyclespkg.a", "cyclespkg.b"],
    ]


def test_a_package_without_cycles_has_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "acyclicpkg", {"a": "import acyclicpkg.b\n", "b": "import json\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _script().module_cycles("acyclicpkg") == []
