"""The ``hnsw`` candidate list and the leaves' HNSW graph (usearch): built with an index past the
exact scan's size, saved in its generation, changed by add and remove, ranking in the tree
search's place at scale, and never written by a search."""

from __future__ import annotations

import importlib.util
import random
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

import psirag.pipeline
import psirag.retrieval.leaf_graph as leaf_graph_module
from psirag import Index, IndexConfig, SearchConfig
from psirag.errors import InputError
from psirag.retrieval.leaf_graph import LeafGraph, usearch_available

# usearch_available loads onnxruntime first: pytest.importorskip("usearch") would import usearch
# (and numkong, with global symbols) first, and onnxruntime would then crash the process.
if not usearch_available():
    pytest.skip("usearch is not installed", allow_module_level=True)

TEXTS = [t for texts in TOPICS.values() for t in texts]
WORDS = [f"w{i}" for i in range(200)]


def _wide_texts(n: int = 400, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, 8)) for _ in range(n)]


@pytest.fixture
def small_graph_size(monkeypatch: pytest.MonkeyPatch) -> int:
    """Indexes of more than 50 leaves get a graph (6,000 by default: too slow for a test)."""
    monkeypatch.setattr(psirag.pipeline, "GRAPH_MIN_LEAVES", 50)
    return 50


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_hnsw_matches_the_exact_list_when_wide_enough() -> None:
    """With ef well above the leaf count the graph search is (nearly: HNSW promises no exact
    answer, and its multi-threaded build varies) the flat scan: at least 9 of its 10 hits score
    as high as the scan's tenth, in order (the hashed embedder ties often)."""
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert index.data.leaf_graph is None  # 400 leaves: below the size that gets a graph
    hnsw = SearchConfig(lists=("hnsw",), k=10, beam=1000)
    dense = SearchConfig(lists=("dense",), k=10)
    for query in ("w1 w2 w3", "w10 w150 w77", "w42 w9"):
        got = index.search(query, config=hnsw)
        want = index.search(query, config=dense)
        scores = np.array([p.score for p in got])
        assert len(got) == 10 and np.all(np.diff(scores) <= 1e-6)
        assert int(np.sum(scores >= want[-1].score - 1e-5)) >= 9


def test_hnsw_with_a_document_filter_stays_inside() -> None:
    index = Index.build(TEXTS, IndexConfig(), embedder=HashEmbedder(), texts=True)
    doc = index.data.documents[1]
    hits = index.search("volcano", config=SearchConfig(lists=("hnsw", "bm25")), docs=[doc])
    assert hits and all(p.source.document == doc for p in hits)


def test_graph_is_built_with_the_index_and_saved_in_its_generation(
    tmp_path: Path, small_graph_size: int
) -> None:
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    graph = index.data.leaf_graph
    assert graph is not None and graph.n_leaves == index.data.n_leaves == 400
    assert "hnsw" in index.stats.seconds
    folder = tmp_path / "idx"
    index.save(folder)
    loaded = Index.load(folder, embedder=HashEmbedder())
    reader_files = list((folder / "generations").rglob("hnsw/graph.usearch"))
    assert len(reader_files) == 1 and reader_files[0].read_bytes()[:2] != b"\x80\x04"
    assert loaded.data.leaf_graph is not None and loaded.data.leaf_graph.read_only
    config = SearchConfig(lists=("hnsw",), k=10)
    for query in ("w1 w2 w3", "w10 w150 w77"):
        assert loaded.search(query, config=config) == index.search(query, config=config)


def test_at_scale_the_default_ranks_by_the_graph_and_the_tree_profile_by_the_tree(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    calls: list[int] = []
    search = LeafGraph.search

    def counted(self: LeafGraph, vector: np.ndarray, count: int, ef: int) -> np.ndarray:
        calls.append(count)
        return search(self, vector, count, ef)

    monkeypatch.setattr(LeafGraph, "search", counted)
    at_scale = SearchConfig(exact_dense_leaves=100)  # 400 leaves: past the exact scan
    hits = index.search("w1 w2 w3", config=at_scale)
    assert calls and hits
    graph_only = index.search("w1 w2 w3", config=at_scale.with_(lists=("hnsw", "bm25")))
    assert [p.leaf for p in hits] == [p.leaf for p in graph_only]
    calls.clear()
    index.search("w1 w2 w3", config=SearchConfig(exact_dense_leaves=0))  # the tree profile
    index.search("w1 w2 w3", config=SearchConfig())  # 400 <= 6,000: the exact scan
    assert calls == []


def _top(graph: LeafGraph, query: np.ndarray, k: int = 10) -> set[int]:
    return set(graph.search(query, k, 64).tolist())


def test_graph_survives_add_and_remove_like_a_rebuild(
    tmp_path: Path, small_graph_size: int
) -> None:
    """After a save, an add and a remove (leaves renumbered), every leaf finds itself first and
    the graph's top 10 matches a freshly built graph's over the same leaves."""
    folder = tmp_path / "idx"
    Index.build(_wide_texts(300), IndexConfig(), embedder=HashEmbedder(), texts=True).save(folder)
    index = Index.load(folder, embedder=HashEmbedder())
    index.add(_wide_texts(120, seed=9), texts=True)
    gone = index.data.documents[:40]
    index.remove(gone)
    data = index.data
    graph = data.leaf_graph
    assert graph is not None and graph.n_leaves == data.n_leaves == 300 + 120 - 40
    assert not graph.read_only
    vectors = np.asarray(data.node_vectors[: data.n_leaves], dtype=np.float32)
    first = data.sparse.first_copy
    for leaf in range(0, data.n_leaves, 7):
        top = graph.search(vectors[leaf], 1, 64)
        assert first[int(top[0])] == first[leaf]  # the leaf itself, or a copy of its text
    fresh = LeafGraph.build(vectors)
    rng = np.random.default_rng(0)
    queries = vectors[rng.choice(data.n_leaves, 30, replace=False)] + 0.3 * rng.normal(
        size=(30, vectors.shape[1])
    ).astype(np.float32)
    overlap = np.mean([len(_top(graph, q) & _top(fresh, q)) / 10 for q in queries])
    assert overlap >= 0.9
    index.save(folder)
    again = Index.load(folder, embedder=HashEmbedder())
    assert again.data.leaf_graph is not None
    assert np.array_equal(again.data.leaf_graph.keys, graph.keys)
    hits = again.search("w1 w2", config=SearchConfig(lists=("hnsw",), k=10))
    assert all(p.source.document not in gone for p in hits)


def test_a_search_writes_nothing_into_the_index_folder(
    tmp_path: Path, small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only index folder (root ignores the mode bits, so the files' sizes and times are
    compared too): searches with the saved graph, and with a graph built in memory for an
    index saved without one, leave it as it was."""
    with_graph = tmp_path / "big"
    Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True).save(with_graph)
    monkeypatch.setattr(psirag.pipeline, "GRAPH_MIN_LEAVES", 10_000)
    without = tmp_path / "small"
    Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True).save(without)
    for folder in (with_graph, without):
        before = _files(folder)
        modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
        try:
            for p in modes:
                p.chmod(stat.S_IMODE(modes[p]) & ~0o222)
            index = Index.load(folder, embedder=HashEmbedder())
            for config in (
                SearchConfig(lists=("hnsw", "bm25")),
                SearchConfig(exact_dense_leaves=100),
            ):
                assert index.search("w1 w2 w3", config=config)
        finally:
            for p, mode in modes.items():
                p.chmod(stat.S_IMODE(mode))
        assert _files(folder) == before
        assert not (folder / "ann").exists()


def test_missing_usearch_names_the_extra_and_the_index_falls_back_to_the_tree(
    tmp_path: Path, small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "idx"
    Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True).save(folder)

    import builtins

    real_import = builtins.__import__

    def no_usearch(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("usearch"):
            raise ImportError("no usearch")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_usearch)
    notes: list[str] = []
    built = Index.build(
        _wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True, report=notes.append
    )
    assert built.data.leaf_graph is None
    note = [n for n in notes if "psirag[hnsw]" in n]
    assert len(note) == 1 and "\n" not in note[0]
    with pytest.raises(InputError, match=r"psirag\[hnsw\]") as err:
        built.search("w1", config=SearchConfig(lists=("hnsw",)))
    assert "\n" not in str(err.value)
    loaded = Index.load(folder, embedder=HashEmbedder())  # saved with a graph: loads without
    assert loaded.data.leaf_graph is None
    assert loaded.search("w1 w2 w3", config=SearchConfig(exact_dense_leaves=100))


def test_an_index_without_a_graph_gets_one_at_its_first_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(psirag.pipeline, "GRAPH_MIN_LEAVES", 10_000)
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert index.data.leaf_graph is None  # built before the graph (or below its size)
    monkeypatch.setattr(psirag.pipeline, "GRAPH_MIN_LEAVES", 50)
    summary = index.add(["w1 w2 w3 w4 w5 w6 w7 w8 fresh"], texts=True)
    graph = index.data.leaf_graph
    assert graph is not None and graph.n_leaves == index.data.n_leaves == 401
    assert "hnsw" in summary.seconds
    hits = index.search("w1 w2 w3 w4 w5 w6 w7 w8 fresh", config=SearchConfig(lists=("hnsw",)))
    assert hits[0].text == "w1 w2 w3 w4 w5 w6 w7 w8 fresh"


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("usearch") is None,
    reason="needs onnxruntime and usearch",
)
def test_the_onnx_embedder_loads_after_the_graph_library() -> None:
    """usearch 2.26 loads numkong with global symbols, after which importing onnxruntime 1.32
    crashes the process; psirag loads usearch only through ``require_usearch``, which loads
    onnxruntime first."""
    script = (
        "from psirag.retrieval.leaf_graph import usearch_available\n"
        "assert usearch_available()\n"
        "import onnxruntime\n"
        "print('both loaded')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "both loaded" in done.stdout


def test_the_graph_is_built_on_a_background_thread_with_two_cores(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two or more cores the build makes its graph beside the other stages (its own
    timer, ``hnsw_thread``); without, in line. Either graph ranks as the exact scan does."""
    import psirag.pipeline as pipeline

    seen: list[str] = []
    real_build = LeafGraph.build

    def build(vectors: np.ndarray, *, threads: int = 0, widen: Any = None) -> LeafGraph:
        import threading

        seen.append(threading.current_thread().name)
        return real_build(vectors, threads=threads, widen=widen)

    monkeypatch.setattr(LeafGraph, "build", build)
    monkeypatch.setattr(pipeline.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(pipeline, "GRAPH_PROCESS", False)
    threaded = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    monkeypatch.setenv("PSIRAG_GRAPH_THREAD", "0")
    inline = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert seen == ["psirag-hnsw", "MainThread"]
    assert "hnsw_thread" in threaded.stats.seconds and "hnsw" in threaded.stats.seconds
    assert "hnsw_thread" not in inline.stats.seconds and "hnsw" in inline.stats.seconds
    hnsw = SearchConfig(lists=("hnsw",), k=10, beam=1000)
    dense = SearchConfig(lists=("dense",), k=10)
    for index in (threaded, inline):
        assert index.data.leaf_graph is not None and index.data.leaf_graph.n_leaves == 400
        for query in ("w1 w2 w3", "w10 w150 w77"):
            got = np.array([p.score for p in index.search(query, config=hnsw)])
            want = index.search(query, config=dense)
            assert int(np.sum(got >= want[-1].score - 1e-5)) >= 9


def test_a_failed_background_graph_build_is_raised_by_the_build(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psirag.pipeline as pipeline

    def broken(vectors: np.ndarray, *, threads: int = 0, widen: Any = None) -> LeafGraph:
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(LeafGraph, "build", broken)
    monkeypatch.setattr(pipeline.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(pipeline, "GRAPH_PROCESS", False)
    with pytest.raises(MemoryError, match="no room for the graph"):
        Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)


def _graph_bytes(graph: LeafGraph, tmp_path: Path, name: str) -> bytes:
    graph.save_base(tmp_path / f"{name}.usearch", tmp_path / f"{name}.npy")
    return (tmp_path / f"{name}.usearch").read_bytes()


def test_a_graph_built_in_batches_on_one_thread_is_the_graph_of_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that may widen inserts ``BUILD_BATCH`` leaves per call, asking ``widen`` before
    each: on one thread throughout, the saved graph is byte for byte the one-call graph (the
    background build's graph is the same as before while the other stages run)."""
    monkeypatch.setattr(leaf_graph_module, "BUILD_BATCH", 97)
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(1000, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    asked: list[int] = []

    def one_thread() -> int:
        asked.append(1)
        return 1

    whole = LeafGraph.build(vectors, threads=1)
    batched = LeafGraph.build(vectors, threads=1, widen=one_thread)
    assert len(asked) == -(-1000 // 97) - 1  # once per batch after the first
    assert _graph_bytes(batched, tmp_path, "b") == _graph_bytes(whole, tmp_path, "a")
    # a different insertion (another M) gives other bytes: the comparison can fail
    monkeypatch.setattr(leaf_graph_module, "CONNECTIVITY", 8)
    other = LeafGraph.build(vectors, threads=1)
    assert _graph_bytes(other, tmp_path, "c") != _graph_bytes(whole, tmp_path, "a")


def test_the_background_graph_widens_to_every_core_once_the_build_waits(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background build asks for one thread per batch until :meth:`GraphBuild.result`
    waits, then for every core (0); the graph holds every leaf and ranks as the exact scan."""
    import threading

    monkeypatch.setattr(leaf_graph_module, "BUILD_BATCH", 50)
    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    gate = threading.Event()
    first_asked = threading.Event()
    asked: list[int] = []
    real_build = LeafGraph.build

    def build(vectors: np.ndarray, *, threads: int = 0, widen: Any = None) -> LeafGraph:
        def widen_after_first() -> int | None:
            if asked:  # the second batch is asked for before the build waits; the rest after
                gate.wait(timeout=60)
            asked.append(widen())
            first_asked.set()
            return asked[-1]

        return real_build(vectors, threads=threads, widen=widen_after_first)

    monkeypatch.setattr(LeafGraph, "build", build)
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(400, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    monkeypatch.setattr(psirag.pipeline, "GRAPH_PROCESS", False)
    job = psirag.pipeline.GraphBuild(vectors)
    real_set = job._waited.set

    def set_then_open() -> None:
        real_set()
        gate.set()

    monkeypatch.setattr(job._waited, "set", set_then_open)
    assert first_asked.wait(timeout=60)
    graph, seconds = job.result()
    assert graph is not None and graph.n_leaves == 400 and seconds is not None
    assert asked == [1] + [0] * 6  # the first batch is not asked about: one thread
    hits = graph.search(vectors[7], 1, 64)
    assert int(np.asarray(hits).ravel()[0]) == 7


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_graph_built_in_a_child_process_is_the_graph_built_here(
    tmp_path: Path, small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background graph of a build comes from a child process (its own interpreter: no
    GIL shared with the build's Python stages). Left to finish on one thread, it is byte for
    byte the graph a one-thread build makes here, and it is an in-memory graph an add changes."""
    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    vectors = _unit_rows(700, 16, 4)
    job = psirag.pipeline.GraphBuild(vectors)
    assert job._process is not None and job._thread is None
    folder = job._process.folder
    for _ in range(600):  # let it finish before the result widens it to every core
        if job.done():
            break
        time.sleep(0.1)
    graph, seconds = job.result()
    assert graph is not None and seconds is not None and seconds >= 0
    assert not folder.exists()  # its files are removed
    here = LeafGraph.build(vectors, threads=1)
    assert _graph_bytes(graph, tmp_path, "child") == _graph_bytes(here, tmp_path, "here")
    assert not graph.base.read_only
    more = graph.updated(None, _unit_rows(3, 16, 9), fold=True, threads=1)
    assert more.n_leaves == 703 and int(more.search(_unit_rows(3, 16, 9)[1], 1, 64)[0]) == 701


def test_an_index_build_gets_its_graph_from_the_child_process(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    started: list[int] = []
    real = psirag.pipeline.GraphProcess

    def counted(vectors: np.ndarray) -> Any:
        started.append(int(vectors.shape[0]))
        return real(vectors)

    monkeypatch.setattr(psirag.pipeline, "GraphProcess", counted)
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert started == [400]
    assert index.data.leaf_graph is not None and index.data.leaf_graph.n_leaves == 400
    assert "hnsw_thread" in index.stats.seconds
    hnsw = SearchConfig(lists=("hnsw",), k=10, beam=1000)
    dense = SearchConfig(lists=("dense",), k=10)
    got = np.array([p.score for p in index.search("w1 w2 w3", config=hnsw)])
    want = index.search("w1 w2 w3", config=dense)
    assert int(np.sum(got >= want[-1].score - 1e-5)) >= 9


def test_a_failed_child_process_is_said_and_the_graph_is_built_here(
    small_graph_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that fails (here: it cannot read its vectors) is reported, and the build makes
    its graph in the parent instead."""
    import psirag.retrieval.graph_process as graph_process

    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(graph_process, "VECTORS_FILE", "vectors-elsewhere.npy")
    said: list[str] = []
    vectors = _unit_rows(300, 16, 6)
    job = psirag.pipeline.GraphBuild(vectors, report=said.append)
    graph, seconds = job.result()
    assert graph is not None and graph.n_leaves == 300 and seconds is None
    assert len(said) == 1 and "build process failed" in said[0]
