"""A build's background child processes (issue 24 item 6): the BM25 term counts made in a
child process are the counts the parent makes, and a build with them (forced on a small corpus)
gives the index a build in line gives."""

from __future__ import annotations

import random

import numpy as np
import pytest
from support import HashEmbedder

import psirag.pipeline
import psirag.retrieval.bm25_process as bm25_process
from psirag import Index, IndexConfig, SearchConfig
from psirag.retrieval.bm25 import TermCounts

WORDS = ["river", "Rivers", "volcano", "ash", "café", "naïve", "über", "x-ray", "it's", "the"]
WORDS += [f"w{i}" for i in range(300)]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(1, 30))
        out.append(" ".join(words) + rng.choice([".", "!", "\n", " — ok", ""]))
    return out


def _same_counts(a: TermCounts, b: TermCounts) -> bool:
    return (
        list(a.vocab.items()) == list(b.vocab.items())
        and all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("doc_ptr", "terms", "tf"))
        and all(getattr(a, k).dtype == getattr(b, k).dtype for k in ("doc_ptr", "terms", "tf"))
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_counts_from_the_child_process_are_the_counts_made_here(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several tokenising batches (renumbered in order at the end) and non-ASCII texts."""
    monkeypatch.setattr(psirag.retrieval.bm25, "TOKENIZE_BATCH", 97)
    texts = _texts(700, seed)
    here = TermCounts.of(texts)
    job = bm25_process.CountsProcess(texts)
    folder = job.folder
    # the child runs with the default batch (one pass): the same counts either way
    got = job.result()
    assert not folder.exists()
    assert _same_counts(got, here)
    other = TermCounts.of(_texts(700, seed + 10))
    assert not _same_counts(got, other)  # the comparison can fail


def test_a_failed_counting_process_is_said_and_the_terms_are_counted_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(psirag.pipeline, "SPARSE_PROCESS_MIN_LEAVES", 10)
    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(bm25_process, "OFFSETS_FILE", "offsets-elsewhere.npy")
    said: list[str] = []
    texts = _texts(120, 3)
    index = Index.build(
        texts, IndexConfig(), embedder=HashEmbedder(), texts=True, report=said.append
    )
    assert any("BM25 counting process failed" in s for s in said)
    inline = Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert index.search("volcano ash", config=SearchConfig(lists=("bm25",))) == inline.search(
        "volcano ash", config=SearchConfig(lists=("bm25",))
    )


def test_a_build_with_counts_from_the_child_process_is_the_build_in_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = _texts(300, 7)
    inline = Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    monkeypatch.setattr(psirag.pipeline, "SPARSE_PROCESS_MIN_LEAVES", 10)
    monkeypatch.setattr(psirag.pipeline.os, "cpu_count", lambda: 2)
    started: list[int] = []
    real = psirag.pipeline.CountsProcess

    def counted(leaf_texts: list[str]) -> bm25_process.CountsProcess:
        started.append(len(leaf_texts))
        return real(leaf_texts)

    monkeypatch.setattr(psirag.pipeline, "CountsProcess", counted)
    child = Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    assert started == [child.data.n_leaves]
    a, b = inline.data.sparse.counts, child.data.sparse.counts
    assert a is not None and b is not None and _same_counts(a, b)
    assert np.array_equal(inline.data.sparse.first_copy, child.data.sparse.first_copy)
    for query in ("volcano ash", "river w7 w12", "café über"):
        config = SearchConfig(lists=("bm25",))
        got = child.search(query, config=config)
        assert got and got == inline.search(query, config=config)
