"""benchmarks/report.py merges generated sections into BENCHMARKS.md without losing hand edits."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def report() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("report")
    finally:
        sys.path.remove(str(BENCHMARKS))


EXISTING = """# Benchmarks

old header

## Latency

old latency table

### Added by hand under latency

kept words

## Written by hand

a section no script makes

## Machine and how to regenerate

old machine
"""

GENERATED = [
    ("latency.json", "## Latency\n\nnew latency table\n"),
    ("beam.json", "## Beam\n\nnew beam section\n"),
]
MACHINE = "## Machine and how to regenerate\n\nnew machine\n"


def test_a_plain_rerun_keeps_hand_edits_and_adds_new_sections(report: ModuleType) -> None:
    merged = report.merge_into(EXISTING, "# Benchmarks\n\nnew header", GENERATED, MACHINE, set())
    assert "old latency table" in merged and "kept words" in merged
    assert "a section no script makes" in merged
    assert "new beam section" in merged and "new latency table" not in merged
    assert merged.index("## Written by hand") < merged.index("## Beam") < merged.index("## Mach")
    assert "new machine" in merged and "old machine" not in merged
    assert merged.startswith("# Benchmarks\n\nnew header\n\n## Latency")


def test_redo_regenerates_only_the_named_results(report: ModuleType) -> None:
    merged = report.merge_into(EXISTING, "# Benchmarks", GENERATED, MACHINE, {"latency.json"})
    assert "new latency table" in merged and "old latency table" not in merged
    assert "a section no script makes" in merged
    # the section's place in the file is kept
    assert merged.index("## Latency") < merged.index("## Written by hand")
    everything = report.merge_into(EXISTING, "# Benchmarks", GENERATED, MACHINE, None)
    assert "new latency table" in everything and "kept words" not in everything


def test_the_repository_file_survives_a_plain_rerun(report: ModuleType) -> None:
    """Every heading of today's BENCHMARKS.md is still there after merging what the results
    generate (the bug this guards: a rerun dropped every hand-written section)."""
    existing = (BENCHMARKS.parent / "BENCHMARKS.md").read_text(encoding="utf-8")
    merged = report.merge_into(existing, "# Benchmarks", GENERATED, MACHINE, set())
    before = [h for h, _ in report.split_sections(existing)[1]]
    after = [h for h, _ in report.split_sections(merged)[1]]
    assert [h for h in after if h not in ("## Beam", "## Latency")] == before
    assert after[-1] == before[-1] == "## Machine and how to regenerate"
