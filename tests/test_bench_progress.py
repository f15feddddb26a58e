"""Benchmark bookkeeping that must not lose measurements: a rerun of bench_tree_vs_hnsw keeps
the row it replaces, and bench_embedders records how far a slow embedding got."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from support.embedders import HashEmbedder

from psirag.eval.embedcache import CachingEmbedder

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench_module(name: str) -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.fixture
def tree_vs_hnsw() -> Iterator[ModuleType]:
    yield from _bench_module("bench_tree_vs_hnsw")


@pytest.fixture
def embedders() -> Iterator[ModuleType]:
    yield from _bench_module("bench_embedders")


def test_a_rerun_keeps_the_rows_it_replaces_in_order(tree_vs_hnsw: ModuleType) -> None:
    rows: dict[tuple[str, int], dict] = {}
    first = {"set": "synthetic", "n": 100, "hnswlib": {"16": {"recall@10": 0.9}}}
    tree_vs_hnsw.merge_row(rows, dict(first))
    tree_vs_hnsw.merge_row(rows, {"set": "synthetic", "n": 100, "run": 2})
    tree_vs_hnsw.merge_row(rows, {"set": "synthetic", "n": 100, "run": 3})
    tree_vs_hnsw.merge_row(rows, {"set": "synthetic", "n": 500, "run": 1})

    latest = rows[("synthetic", 100)]
    assert latest["run"] == 3
    assert [r.get("run") for r in latest["earlier"]] == [None, 2]
    assert latest["earlier"][0]["hnswlib"] == first["hnswlib"]
    assert all("earlier" not in r for r in latest["earlier"])
    assert "earlier" not in rows[("synthetic", 500)]


def test_prefill_records_progress_and_a_resumed_run_embeds_nothing_twice(
    embedders: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    (data / "toyset").mkdir(parents=True)
    records = [{"title": f"T{i}", "text": f"passage {i} about topic {i % 5}"} for i in range(20)]
    (data / "toyset" / "corpus.json").write_text(json.dumps(records))
    monkeypatch.setattr(embedders, "DATA", data)
    monkeypatch.setattr(embedders, "OUT", tmp_path / "out")
    (tmp_path / "out" / "cache").mkdir(parents=True)

    first = CachingEmbedder(HashEmbedder(), embedders.cache_path("mpnet"))
    embedders.prefill(first, "toyset", "mpnet", step=8)
    again = CachingEmbedder(HashEmbedder(), embedders.cache_path("mpnet"))
    embedders.prefill(again, "toyset", "mpnet", step=8)

    record = json.loads(embedders.progress_path("mpnet").read_text())["toyset"]
    assert record["cached"] == record["chunks"] > 0
    assert record["runs"][0]["embedded"] == record["chunks"]
    assert record["runs"][1]["embedded"] == 0
    assert again.misses == 0

    note = embedders.not_run_note({"progress": {"mpnet": {"toyset": record}}}, "toyset")
    assert f"{record['chunks']} of its {record['chunks']} passages" in note
    assert embedders.not_run_note({}, "toyset").startswith("not run")
