"""The split Index: the Retriever against rankings composed by hand (a plain-Python Algorithm 2,
brute-force cosine, BM25 scores sorted, SPEC 2.3's RRF), the pipeline's stages against a full
build, and IndexData's immutability."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support import FakeOpenAIServer, HashEmbedder
from support.retrieval import (
    EXTRA,
    QUERIES,
    WeightedHashEmbedder,
    corpus,
    expected,
    tree_reference,
)

from psirag import Index, IndexConfig, Retriever, SearchConfig
from psirag.abstracts.keywords import keyword_abstracts
from psirag.abstracts.llm import llm_abstracts
from psirag.ingest import documents_from_strings
from psirag.llm import LLMClient, OpenAIChat
from psirag.pipeline import (
    build_index_data,
    chunk_documents,
    embed_chunks,
    routing_vectors,
    write_abstracts,
)
from psirag.tree.model import Tree


@pytest.fixture(scope="module")
def index() -> Index:
    """18 one-chunk documents under a tree capped at 3 children, so that a beam of 2 prunes."""
    return Index.build(
        corpus(), IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )


# ------------------------------------------------------------------ the references


TREE = SearchConfig(exact_dense_leaves=0)
"""The tree search at every size (these indexes are far below the default's flat-scan bound)."""
CONFIGS = {
    "tree": TREE.with_(k=4, candidates=6, beam=2, use_bm25=False),
    "tree-wide": TREE.with_(k=5, candidates=10, beam=40, use_bm25=False),
    "bm25": SearchConfig(k=4, use_tree=False),
    "dense": SearchConfig(k=5, use_tree=False, use_bm25=False, use_dense=True),
    "fused": TREE.with_(k=5, candidates=6, beam=2),
    "hybrid": SearchConfig(k=5, use_tree=False, use_dense=True),
    "all-three": TREE.with_(k=6, candidates=5, beam=3, use_dense=True),
    "default-narrow": SearchConfig(k=5, candidates=6, beam=2),
    "exact-below-6": SearchConfig(k=5, candidates=6, beam=2, exact_dense_leaves=6),
}
DOCS = {"all": None, "football+extra": ["4", "5", "6", "7", "13", "17"], "one": ["10"]}


@pytest.mark.parametrize("docs", list(DOCS), ids=list(DOCS))
@pytest.mark.parametrize("name", list(CONFIGS), ids=list(CONFIGS))
def test_search_matches_the_pieces_composed_by_hand(index: Index, name: str, docs: str) -> None:
    config = CONFIGS[name]
    allowed = DOCS[docs]
    for query in QUERIES:
        q = index.embed_query(query)
        want = expected(index.data, query, q.astype(np.float64), config, allowed)
        got = index.search_vector(q, query, config=config, docs=allowed)
        assert [p.leaf for p in got] == [i for i, _ in want], (name, docs, query)
        np.testing.assert_allclose([p.score for p in got], [s for _, s in want], atol=1e-5)
        if allowed:
            assert {p.source.document for p in got} <= set(allowed)
        # the facade and a retriever configured with the same SearchConfig agree
        alone = Retriever(index.data, config, embedder=WeightedHashEmbedder())
        assert alone.search(query, docs=allowed) == got


@pytest.mark.parametrize("docs", list(DOCS), ids=list(DOCS))
def test_visit_is_every_node_algorithm_2_scores(index: Index, docs: str) -> None:
    allowed = DOCS[docs]
    data = index.data
    nodes = None
    if allowed:
        leaves = {i for i, c in enumerate(data.chunks) if c.source.document in allowed}
        nodes = {
            u for u in range(data.tree.n_nodes) if set(data.tree.leaves_under(u).tolist()) & leaves
        }
    for query in QUERIES:
        q = index.embed_query(query)
        _, score, visited = tree_reference(data, q.astype(np.float64), 3, 2, nodes)
        hits = index.visit_vector(q, docs=allowed, beam=2, k=3)
        assert sorted(h.node for h in hits) == sorted(visited)
        assert [h.node for h in hits] == sorted(visited, key=lambda u: (-score[u], u))
        for h in hits:
            assert h.score == pytest.approx(score[h.node], abs=1e-5)
            assert h.text == index.node_text(h.node) and h.layer == int(data.tree.layer[h.node])
        assert any(h.layer > 0 for h in hits) and any(h.layer == 0 for h in hits)


def test_duplicates_are_dropped_by_bm25_and_dense_alone() -> None:
    texts = [*corpus(), corpus()[2], corpus()[9]]  # two repeated texts, later ids
    index = Index.build(
        texts, IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )
    for name in ("bm25", "dense", "hybrid"):
        config = CONFIGS[name].with_(k=8)
        for query in QUERIES:
            q = index.embed_query(query)
            want = expected(index.data, query, q.astype(np.float64), config, None)
            got = index.search_vector(q, query, config=config)
            assert [p.leaf for p in got] == [i for i, _ in want]
            assert not {p.leaf for p in got} & {len(texts) - 2, len(texts) - 1}


def test_unknown_document_and_wrong_dimension_fail_clearly(index: Index) -> None:
    from psirag.errors import EmbedderMismatchError, InputError

    with pytest.raises(InputError, match="unknown document"):
        index.retriever.search("volcano", docs=["nope"])
    with pytest.raises(EmbedderMismatchError, match="dimensions"):
        index.retriever.search_vector(np.ones(7, dtype=np.float32), "volcano")
    with pytest.raises(EmbedderMismatchError, match="built with embedder"):
        Retriever(index.data, embedder=HashEmbedder())


def test_siblings_share_structures_and_keep_their_own_config(index: Index) -> None:
    base = index.retriever
    tree_only = base.with_config(use_bm25=False, k=3)
    assert tree_only.config.k == 3 and not tree_only.config.use_bm25
    assert base.config == SearchConfig()
    assert tree_only.searcher is base.searcher and tree_only.dense is base.dense
    assert tree_only.embedder is base.embedder


# ------------------------------------------------------------------ data and pipeline


def test_index_data_is_immutable_and_round_trips(index: Index, tmp_path: Path) -> None:
    data = index.data
    with pytest.raises(AttributeError):
        data.chunks = ()  # type: ignore[misc]
    with pytest.raises(ValueError):
        data.node_vectors[0, 0] = 1.0
    assert isinstance(data.chunks, tuple) and isinstance(data.abstracts, tuple)
    assert data.documents == tuple(str(i) for i in range(len(corpus())))
    loaded = Index.load(index.save(tmp_path / "i"), embedder=WeightedHashEmbedder())
    for query in QUERIES:
        assert loaded.search(query) == index.search(query)
        assert loaded.visit(query, docs=["1", "2"]) == index.visit(query, docs=["1", "2"])
    with pytest.raises(ValueError, match="disagree in size"):
        data.replace(abstracts=data.abstracts[:-1])


def test_the_facade_is_the_pipeline(index: Index) -> None:
    data, _ = build_index_data(
        corpus(), IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )
    via = Index.from_data(data, embedder=WeightedHashEmbedder())
    assert via.chunks == index.chunks and via.abstracts == index.abstracts
    assert np.array_equal(via.tree.parent, index.tree.parent)
    assert np.array_equal(np.asarray(via.node_vectors), np.asarray(index.node_vectors))
    assert set(data.stats.seconds) == {
        "chunking",
        "embedding",
        "tree",
        "abstracts",
        "routing",
        "bm25",
    }
    for query in QUERIES:
        assert via.search(query) == index.search(query)


def subset(tree: Tree) -> list[int]:
    """Some inner nodes, out of order, the root among them (what an update refreshes)."""
    inner = list(range(tree.n_leaves, tree.n_nodes))
    return [inner[-1], *inner[1::3], inner[0]]


def test_keyword_abstracts_of_some_nodes_equal_the_full_run(index: Index) -> None:
    data = index.data
    texts = [c.text for c in data.chunks]
    nodes = subset(data.tree)
    full = keyword_abstracts(texts, data.tree, max_phrases=20)
    some = keyword_abstracts(texts, data.tree, max_phrases=20, nodes=nodes)
    assert some == [full[u - data.n_leaves] for u in nodes]
    assert all(some)
    stage = write_abstracts(data.tree, texts, data.config, nodes=nodes)
    assert stage.texts == [data.abstracts[u - data.n_leaves] for u in nodes]
    assert keyword_abstracts(texts, data.tree, nodes=[]) == []
    with pytest.raises(ValueError, match="abstract nodes"):
        keyword_abstracts(texts, data.tree, nodes=[0])


@pytest.mark.parametrize("routing", ["leaf_mean", "abstract", "blend"])
def test_routing_of_some_nodes_equals_the_full_run(index: Index, routing: str) -> None:
    data = index.data
    config = IndexConfig(max_children=3, routing=routing)  # type: ignore[arg-type]
    leaves = np.asarray(data.node_vectors[: data.n_leaves])
    full = routing_vectors(data.tree, leaves, data.abstracts, config, WeightedHashEmbedder())
    nodes = subset(data.tree)
    some = routing_vectors(
        data.tree, leaves, data.abstracts, config, WeightedHashEmbedder(), nodes=nodes
    )
    assert some.shape == (len(nodes), data.dim) and some.dtype == np.float32
    np.testing.assert_allclose(some, full[nodes], atol=1e-6)
    if routing == "leaf_mean":
        np.testing.assert_allclose(full, np.asarray(data.node_vectors), atol=1e-6)


def test_embedding_new_chunks_alone_equals_the_full_run(index: Index) -> None:
    docs = documents_from_strings(EXTRA, ids=[f"new-{i}" for i in range(len(EXTRA))])
    chunks = chunk_documents(docs, index.config)
    alone = embed_chunks(chunks, WeightedHashEmbedder()).vectors
    np.testing.assert_allclose(alone, np.asarray(index.node_vectors[12:18]), atol=1e-6)


def _responder(body: dict) -> str:
    """A summary naming the first word of each document the prompt numbers."""
    heads = re.findall(r"(?m)^\[\d+\] (\S+)", body["messages"][-1]["content"])
    return "About " + " and ".join(heads) + "."


def test_llm_abstracts_of_the_changed_ancestors_equal_a_full_run(tmp_path: Path) -> None:
    """Change one leaf, rewrite only its ancestors (given children-last): the abstracts are
    those of a full run over the new texts, for three calls."""
    parent = np.array([8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, -1])
    layer = np.array([0] * 8 + [1] * 4 + [2] * 2 + [3])
    tree = Tree(parent=parent, layer=layer)
    texts = [f"leaf{i} text about topic {i // 2}." for i in range(8)]
    changed = [*texts[:4], "changed leaf four.", *texts[5:]]
    with FakeOpenAIServer(responder=_responder) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "a.sqlite")
        before, _ = llm_abstracts(tree, texts, client, kind="summary")
        fresh = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "b.sqlite")
        after, _ = llm_abstracts(tree, changed, fresh, kind="summary")
        calls = srv.calls
        again = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "c.sqlite")
        part, stats = llm_abstracts(
            tree, changed, again, kind="summary", nodes=[14, 10, 13], current=before
        )
        assert srv.calls - calls == 3 and stats["nodes"] == 3 and stats["calls"] == 3
    assert part == after and part != before
    assert part[8] == before[8] and "changed" in part[10]
    config = IndexConfig(abstracts="llm-summary", routing="leaf_mean")
    with FakeOpenAIServer(responder=_responder) as srv:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), tmp_path / "d.sqlite")
        stage = write_abstracts(
            tree, changed, config, nodes=[13, 10, 14], current=before[8:], llm=client
        )
    assert stage.texts == [after[13], after[10], after[14]] and stage.llm["calls"] == 3
