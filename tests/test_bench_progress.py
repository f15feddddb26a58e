"""Benchmark bookkeeping that must not lose measurements: a rerun of bench_tree_vs_hnsw keeps
the row it replaces, and bench_embedders records how far a slow embedding got."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from support.embedders import HashEmbedder

from psirag.eval.embedcache import CachingEmbedder
from psirag.retrieval.leaf_graph import usearch_available

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


needs_usearch = pytest.mark.skipif(
    not usearch_available(), reason="usearch (psirag[hnsw]) is not installed"
)


@needs_usearch
def test_a_checkpointed_size_resumes_every_finished_step_with_its_measurements(
    tree_vs_hnsw: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree_vs_hnsw, "OUT", tmp_path / "out")  # the upkeep's scratch folder
    folder = tmp_path / "checkpoint"

    def run() -> dict:
        store = tree_vs_hnsw.Checkpoint(folder)
        e, q = tree_vs_hnsw.synthetic_set(800, 20, 25, store)
        return tree_vs_hnsw.compare("synthetic", e, q, store=store)

    first, again = run(), run()

    assert "resumed" not in first
    assert again["resumed"] == ["vectors", "truth", "tree", "graph"]
    measured = ("tree_build_s", "tree_build_peak_rss_mib", "hnsw_build_s", "hnsw_build_threads")
    assert {k: again[k] for k in measured} == {k: first[k] for k in measured}
    assert again["tree_depth"] == first["tree_depth"]
    # the same tree and the same graph answer the same queries alike
    for family in ("tree", "hnsw"):
        recalls = {s: r["recall@10"] for s, r in first[family].items()}
        assert {s: r["recall@10"] for s, r in again[family].items()} == recalls
    assert first["exact"]["recall@10"] == again["exact"]["recall@10"] == 1.0
    assert set(first["hnsw_update_s"]) >= {"add 10 leaves", "fold those changes", "save"}
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    limited = importlib.util.find_spec("threadpoolctl") is not None
    # one thread in every BLAS library the process has loaded (a full test run can hold two)
    blas = first["blas_threads_while_timed"]
    assert (blas and set(blas) == {1}) if limited else blas is None


@needs_usearch
def test_an_unfinished_step_is_not_taken_for_finished(
    tree_vs_hnsw: ModuleType, tmp_path: Path
) -> None:
    store = tree_vs_hnsw.Checkpoint(tmp_path)
    (tmp_path / ".graph.usearch.tmp").write_bytes(b"half a graph")
    assert store.graph(10) is None
    (tmp_path / "graph.usearch").write_bytes(b"not a graph")
    with pytest.raises((ValueError, RuntimeError)):
        store.graph(10)


def _recording_searches(
    names: str, answers: dict[str, list[int]] | None = None
) -> tuple[dict[str, Callable[[np.ndarray], list[int]]], list[tuple[str, int]]]:
    """Fake searches that log (name, query number; the query's first value) and answer fixed
    leaves."""
    calls: list[tuple[str, int]] = []

    def search(name: str) -> Callable[[np.ndarray], list[int]]:
        def run(v: np.ndarray) -> list[int]:
            calls.append((name, int(v[0])))
            return (answers or {}).get(name, [])

        return run

    return {name: search(name) for name in names}, calls


def test_timed_searches_run_every_query_once_in_varying_order(tree_vs_hnsw: ModuleType) -> None:
    answers = {"e": list(range(10)), "a": list(range(5)), "b": [], "c": list(range(20, 30))}
    queries = np.arange(40, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    truth = [set(range(10))] * 40
    for order in ("staggered", "random"):
        searches, calls = _recording_searches("eabc", answers)
        got = tree_vs_hnsw.timed(searches, queries, truth, order=order)

        steps = [calls[i : i + 4] for i in range(0, len(calls), 4)]
        assert len(steps) == 40 and all(sorted(n for n, _ in s) == list("abce") for s in steps)
        assert len({s[0][0] for s in steps}) == 4  # no search always goes first
        for name in "eabc":
            assert sorted(i for n, i in calls if n == name) == list(range(40))
        assert [got[n]["recall@10"] for n in "eabc"] == [1.0, 0.5, 0.0, 0.0]
        assert all(got[n]["n"] == 40 for n in "eabc")
        same_query_in_a_step = [len({i for _, i in s}) < 4 for s in steps]
        assert not any(same_query_in_a_step) if order == "staggered" else all(same_query_in_a_step)
        follows_same_query = [a[1] == b[1] for a, b in itertools.pairwise(calls)]
        assert not any(follows_same_query) if order == "staggered" else any(follows_same_query)


def test_recall_is_counted_against_the_query_that_ran(tree_vs_hnsw: ModuleType) -> None:
    queries = np.arange(12, dtype=np.float32)[:, None]
    truth = [{i} for i in range(12)]
    searches = {name: (lambda v: [int(v[0])]) for name in "abc"}
    got = tree_vs_hnsw.timed(searches, queries, truth)  # staggered: a different query each
    assert all(got[n]["recall@10"] == 0.1 for n in "abc")  # 1 of K=10, every time


def test_the_fixed_order_kept_for_comparison_is_the_listed_one(tree_vs_hnsw: ModuleType) -> None:
    searches, calls = _recording_searches("abc")
    tree_vs_hnsw.timed(searches, np.zeros((5, 2)), [set()] * 5, order="fixed")
    assert [n for n, _ in calls] == list("abc") * 5
    with pytest.raises(ValueError, match="order 'sorted'"):
        tree_vs_hnsw.timed(searches, np.zeros((5, 2)), [set()] * 5, order="sorted")


def test_a_checkpoint_of_another_size_is_refused(tree_vs_hnsw: ModuleType, tmp_path: Path) -> None:
    tree_vs_hnsw.synthetic_set(50, 5, 4, tree_vs_hnsw.Checkpoint(tmp_path))
    with pytest.raises(ValueError, match="another size"):
        tree_vs_hnsw.synthetic_set(60, 5, 4, tree_vs_hnsw.Checkpoint(tmp_path))
