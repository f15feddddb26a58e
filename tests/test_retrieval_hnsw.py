"""The ``hnsw`` candidate list: an HNSW graph over the leaves, against the exact list, kept
beside a saved index and rebuilt when the leaves change."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

from psirag import Index, IndexConfig, SearchConfig

pytest.importorskip("hnswlib")

TEXTS = [t for texts in TOPICS.values() for t in texts]


def _wide_texts(n: int = 400) -> list[str]:
    rng = random.Random(3)
    words = [f"w{i}" for i in range(200)]
    return [" ".join(rng.sample(words, 8)) for _ in range(n)]


def test_hnsw_matches_the_exact_list_when_wide_enough() -> None:
    """With ef well above the leaf count the graph search is exact: the flat scan's cosines in
    the same order, and the same leaves above the cut (the hashed embedder ties often, and
    HNSW breaks ties its own way)."""
    index = Index.build(_wide_texts(), IndexConfig(), embedder=HashEmbedder(), texts=True)
    hnsw = SearchConfig(lists=("hnsw",), k=10, beam=1000)
    dense = SearchConfig(lists=("dense",), k=10)
    for query in ("w1 w2 w3", "w10 w150 w77", "w42 w9"):
        got = index.search(query, config=hnsw)
        want = index.search(query, config=dense)
        np.testing.assert_allclose([p.score for p in got], [p.score for p in want], atol=1e-5)
        cut = want[-1].score + 1e-5
        assert {p.leaf for p in got if p.score > cut} == {p.leaf for p in want if p.score > cut}


def test_hnsw_with_a_document_filter_stays_inside(tmp_path: Path) -> None:
    index = Index.build(TEXTS, IndexConfig(), embedder=HashEmbedder(), texts=True)
    doc = index.data.documents[1]
    hits = index.search("volcano", config=SearchConfig(lists=("hnsw", "bm25")), docs=[doc])
    assert hits and all(p.source.document == doc for p in hits)


def test_graph_is_saved_beside_the_index_and_rebuilt_after_an_update(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    Index.build(TEXTS, IndexConfig(), embedder=HashEmbedder(), texts=True).save(folder)
    config = SearchConfig(lists=("hnsw", "bm25"))

    first = Index.load(folder, embedder=HashEmbedder())
    before = first.search("bread dough", config=config)
    graphs = sorted((folder / "ann").glob("hnsw-*.bin"))
    assert len(graphs) == 1 and graphs[0].read_bytes()[:2] != b"\x80\x04"  # not a pickle

    again = Index.load(folder, embedder=HashEmbedder())
    assert again.search("bread dough", config=config) == before
    built = again.retriever._shared.candidate_list("hnsw")
    assert built.index.loaded_from == graphs[0]  # type: ignore[attr-defined]

    # an add appends leaves: the saved graph is loaded and only the new leaf inserted
    again.add(["Rye bread needs a sour starter and a long proof."], texts=True)
    hits = again.search("rye bread sour starter", config=config.with_(k=10))
    assert "Rye bread needs a sour starter and a long proof." in [p.text for p in hits]
    extended = again.retriever._shared.candidate_list("hnsw").index  # type: ignore[attr-defined]
    assert extended.loaded_from is None and extended.extended_from == graphs[0]
    assert extended.graph.get_current_count() == again.data.n_leaves
    after_add = sorted((folder / "ann").glob("hnsw-*.bin"))
    assert len(after_add) == 1 and after_add != graphs

    # a remove renumbers leaves: no saved graph matches, it is built again, without the doc
    gone = again.data.documents[0]
    again.remove(gone)
    rebuilt = again.retriever._shared.candidate_list("hnsw").index  # type: ignore[attr-defined]
    hits = again.search("volcano lava ash", config=config.with_(k=10))
    assert rebuilt.extended_from is None and rebuilt.loaded_from is None
    assert all(p.source.document != gone for p in hits)


def test_missing_hnswlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    from psirag.errors import InputError

    real_import = builtins.__import__

    def no_hnswlib(name: str, *args: object, **kwargs: object) -> object:
        if name == "hnswlib":
            raise ImportError("no hnswlib")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_hnswlib)
    index = Index.build(TEXTS, IndexConfig(), embedder=HashEmbedder(), texts=True)
    with pytest.raises(InputError, match=r"psirag\[ann\]"):
        index.search("volcano", config=SearchConfig(lists=("hnsw",)))
