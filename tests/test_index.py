"""Index build / save / load / search, bad input, and persistence safety."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.corpora import segment_of

from psirag import Index, IndexConfig, SearchConfig
from psirag.errors import EmbedderMismatchError, EmbeddingError, IndexFormatError, InputError
from psirag.ingest import documents_from_strings
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.tree_search import TreeSearcher
from psirag.storage import IndexWriter
from psirag.tree import Tree, build_tree

PASSAGE_KEYS = {"id", "text", "score", "source", "also"}
SOURCE_KEYS = {"document", "title", "chunk", "span"}


def check_passage_shape(d: dict) -> None:
    assert set(d) == PASSAGE_KEYS
    assert set(d["source"]) == SOURCE_KEYS
    assert isinstance(d["id"], str) and isinstance(d["text"], str)
    assert isinstance(d["score"], float)
    start, end = d["source"]["span"]
    assert 0 <= start <= end


def build(texts: list[str], embedder: HashEmbedder | None = None, **cfg) -> Index:
    return Index.build(texts, IndexConfig(**cfg), embedder=embedder or HashEmbedder(), texts=True)


def test_build_search_round_trip(
    tmp_path: Path, topic_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psirag.rows

    monkeypatch.setattr(psirag.rows, "MAP_MIN_BYTES", 0)  # map files however small (a big index's)
    index = build(topic_texts, max_children=3)
    hits = index.search("volcano lava ash eruption", k=3)
    assert len(hits) == 3
    volcano_docs = {str(i) for i in range(len(TOPICS["volcanoes"]))}
    assert {h.source.document for h in hits} <= volcano_docs
    for h in hits:
        check_passage_shape(h.to_dict())
        assert h.text == topic_texts[int(h.source.document)]

    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["format"] == "psirag-index" and manifest["format_version"] == 5
    assert manifest["counts"]["chunks"] == len(topic_texts)
    assert manifest["embedder"]["id"] == "test:hash-64"
    assert all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    assert not any(p.suffix in (".pkl", ".pickle") for p in (tmp_path / "idx").rglob("*"))

    loaded = Index.load(tmp_path / "idx", embedder=HashEmbedder())
    assert isinstance(loaded.node_vectors, np.memmap)
    assert np.array_equal(loaded.tree.parent, index.tree.parent)
    assert np.array_equal(np.asarray(loaded.node_vectors), index.node_vectors)
    assert loaded.abstracts == index.abstracts
    again = loaded.search("volcano lava ash eruption", k=3)
    assert [h.to_dict() for h in again] == [h.to_dict() for h in hits]


def test_rebalanced_tree_and_abstracts(topic_texts: list[str]) -> None:
    index = build(topic_texts * 3, max_children=4)
    tree = index.tree
    assert tree.fan_out.max() <= 4
    assert len(index.abstracts) == tree.n_nodes - tree.n_leaves
    assert all(index.abstracts), "every abstract node gets a keyword abstract"


def test_routing_modes(topic_texts: list[str]) -> None:
    mean = build(topic_texts, routing="leaf_mean")
    text = build(topic_texts, routing="abstract")
    n = mean.tree.n_leaves
    assert np.array_equal(mean.tree.parent, text.tree.parent)
    assert not np.allclose(mean.node_vectors[n:], text.node_vectors[n:])
    norms = np.linalg.norm(text.node_vectors, axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    # leaf-mean routing is the normalised mean of each node's leaves
    root = mean.tree.root
    expected = mean.node_vectors[:n].mean(axis=0)
    expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(mean.node_vectors[root], expected, atol=1e-5)


def test_restrict_to_documents(topic_texts: list[str]) -> None:
    index = build(topic_texts)
    hits = index.search("volcano lava", k=5, docs=["5", "9"])
    assert hits and {h.source.document for h in hits} <= {"5", "9"}
    with pytest.raises(InputError, match="unknown document"):
        index.search("volcano", docs=["no-such-doc"])


def test_tree_per_document_forest() -> None:
    long_docs = [" ".join(texts * 6) for texts in TOPICS.values()]
    index = Index.build(
        documents_from_strings(long_docs, titles=list(TOPICS), ids=list(TOPICS)),
        IndexConfig(tree_per_document=True, chunk_tokens=20),
        embedder=HashEmbedder(),
    )
    tree = index.tree
    assert tree.roots.size == 3
    for root in tree.roots:
        docs = {index.chunks[i].source.document for i in tree.leaves_under(int(root))}
        assert len(docs) == 1, "a tree never mixes documents"
    hits = index.search("yeast dough", k=3, docs=["baking"])
    assert hits and all(h.source.document == "baking" for h in hits)
    visited = index.visit("yeast dough", docs=["baking"])
    assert any(v.layer > 0 for v in visited) and any(v.layer == 0 for v in visited)
    assert all(v.document in ("baking", None) for v in visited)


def test_search_modes(topic_texts: list[str]) -> None:
    index = build(topic_texts)
    q = "football club"
    both = index.search(q, k=4)
    tree_only = index.search(q, config=SearchConfig(k=4, use_bm25=False))
    bm25_only = index.search(q, config=SearchConfig(k=4, use_tree=False))
    assert len(both) == len(tree_only) == 4 and 1 <= len(bm25_only) <= 4
    assert all("football" in h.text.lower() for h in bm25_only)
    expected = rrf_fuse(
        [
            [h.leaf for h in index.search(q, config=SearchConfig(k=10, use_bm25=False))],
            [h.leaf for h in index.search(q, config=SearchConfig(k=10, use_tree=False))],
        ],
        k=4,
    )
    assert [(h.leaf, pytest.approx(h.score)) for h in both] == expected


@pytest.mark.parametrize(
    "texts",
    [
        ["Only one chunk in this corpus."],
        ["First chunk about rivers.", "Second chunk about mountains."],
        ["The very same sentence repeated."] * 30,
        ["word " * 20000],  # one enormous line with no sentence ends
    ],
    ids=["one", "two", "identical", "enormous-line"],
)
def test_degenerate_corpora(texts: list[str], tmp_path: Path) -> None:
    index = build(texts)
    assert index.tree.roots.size == 1
    assert index.tree.n_leaves == len(index.chunks) >= 1
    hits = index.search("rivers mountains sentence word", k=5)
    assert 1 <= len(hits) <= 5
    if len(set(texts)) == 1 and len(texts) > 1:
        texts_found = [
            h.text for h in index.search("sentence", config=SearchConfig(use_tree=False))
        ]
        assert len(texts_found) == 1, "BM25 drops duplicate texts"
    index.save(tmp_path / "i")
    assert Index.load(tmp_path / "i", embedder=HashEmbedder()).tree.n_nodes == index.tree.n_nodes


def test_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        build([""])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no usable files"):
        Index.build([tmp_path / "empty"], embedder=HashEmbedder())


class BrokenEmbedder(HashEmbedder):
    def __init__(self, fill: float) -> None:
        super().__init__()
        self.fill = fill

    def embed(self, texts, *, progress=False, desc="embedding"):  # type: ignore[override]
        out = super().embed(texts)
        out[1] = self.fill
        return out


@pytest.mark.parametrize("fill, message", [(np.nan, "NaN"), (0.0, "zeros")])
def test_bad_vectors_name_the_text(topic_texts: list[str], fill: float, message: str) -> None:
    with pytest.raises(EmbeddingError, match=message) as err:
        build(topic_texts, embedder=BrokenEmbedder(fill))
    assert "text 1" in str(err.value)


def test_query_with_another_embedder(tmp_path: Path, topic_texts: list[str]) -> None:
    build(topic_texts).save(tmp_path / "idx")
    with pytest.raises(EmbedderMismatchError, match="built with embedder 'test:hash-64'"):
        Index.load(tmp_path / "idx", embedder=HashEmbedder(dim=64, name="other"))
    index = Index.load(tmp_path / "idx", embedder=HashEmbedder())
    with pytest.raises(EmbedderMismatchError, match="dimensions"):
        index.search_vector(np.ones(32, dtype=np.float32), "q")


def test_interrupted_save_keeps_previous_index(
    tmp_path: Path, topic_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "idx"
    build(topic_texts[:6]).save(target)
    before = json.loads((target / "manifest.json").read_text())

    def crash(self, manifest):  # the process dies after the data files, before publishing
        raise KeyboardInterrupt

    monkeypatch.setattr(IndexWriter, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        build(topic_texts).save(target)
    monkeypatch.undo()
    assert json.loads((target / "manifest.json").read_text()) == before
    assert Index.load(target, embedder=HashEmbedder()).tree.n_leaves == 6
    assert [p.name for p in tmp_path.iterdir()] == ["idx"], "no staging folder left behind"

    # a save interrupted before anything was published leaves no index at a new path
    monkeypatch.setattr(IndexWriter, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        build(topic_texts).save(tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()


def test_corrupted_and_foreign_folders(tmp_path: Path, topic_texts: list[str]) -> None:
    target = tmp_path / "idx"
    build(topic_texts).save(target)
    generation = target / "generations" / "000001"
    vec = generation / segment_of(generation, "leaf_vectors")
    original = vec.read_bytes()
    data = bytearray(original)
    data[-3] ^= 0xFF
    vec.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="checksum"):
        Index.load(target, verify="full")
    vec.write_bytes(original)
    (generation / segment_of(generation, "inner_parent")).write_bytes(b"short")
    with pytest.raises(IndexFormatError, match="bytes"):
        Index.load(target)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "something.txt").write_text("hi")
    with pytest.raises(IndexFormatError, match="not a psirag index"):
        Index.load(foreign)
    (foreign / "manifest.json").write_text('{"format": "other"}')
    with pytest.raises(IndexFormatError, match="does not describe"):
        Index.load(foreign)
    (foreign / "manifest.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupted"):
        Index.load(foreign)
    with pytest.raises(IndexFormatError, match="not a psirag index"):
        build(topic_texts).save(foreign / "..")  # never overwrite a non-index folder


# ---------------------------------------------------------------- retrieval units
def test_rrf_tie_breaks() -> None:
    # b and c tie on score (ranks 1+2 vs 2+1); a appears once at rank 1 in list 2
    fused = rrf_fuse([[20, 10], [10, 20]], k=2)
    assert [i for i, _ in fused] == [20, 10], "equal best ranks -> the tree list's order wins"
    fused = rrf_fuse([[5, 7], [9, 3]], k=4)
    # all four have score 1/61 or 1/62: rank-1 items first, tree list first among them
    assert [i for i, _ in fused] == [5, 9, 7, 3]
    fused = rrf_fuse([[1, 2, 3], [3, 2, 1]], k=3, rrf_k=60)
    # 1 and 3 tie on 1/61 + 1/63 (above 2's 2/62) and on best rank; the tree list puts 1 first
    assert [i for i, _ in fused] == [1, 3, 2]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 63)


def test_tree_search_with_wide_beam_is_exact() -> None:
    rng = np.random.default_rng(0)
    e = rng.normal(size=(300, 16)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    tree = build_tree(e, max_children=6)
    vectors = np.concatenate([e, (tree.leaf_membership[300:] @ e).astype(np.float32)])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    searcher = TreeSearcher(tree, vectors)
    q = e[17] + 0.1 * e[3]
    q /= np.linalg.norm(q)
    hits = searcher.search(q, k=10, beam=10_000)
    brute = np.argsort(-(e @ q), kind="stable")[:10]
    assert hits.leaves.tolist() == brute.tolist()
    narrow = searcher.search(q, k=10, beam=2, collect_visited=True)
    assert narrow.leaves.size <= 10 and set(narrow.leaves) <= set(range(300))
    # with beam 2, every visited non-top layer holds only children of two kept nodes
    assert narrow.visited.size < tree.n_nodes


def test_tree_search_follows_algorithm_2() -> None:
    """Hand-made tree: root -> A, B; A -> a1 (leaves 0,1), a2 (2,3); B -> b1 (4,5)."""
    # nodes: 0-5 leaves; 6=a1, 7=a2, 8=b1 (layer 1); 9=A, 10=B (layer 2); 11=root (layer 3)
    parent = np.array([6, 6, 7, 7, 8, 8, 9, 9, 10, 11, 11, -1])
    layer = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3])
    tree = Tree(parent=parent, layer=layer)
    vec = np.zeros((12, 3), dtype=np.float32)
    vec[:, 2] = 1
    vec[9] = [1, 0, 0]  # A looks like the query
    vec[10] = [0, 1, 0]  # B does not
    vec[6], vec[7], vec[8] = [0.9, 0.1, 0], [0.2, 0.8, 0], [1, 0, 0]
    vec[0], vec[1], vec[2], vec[3], vec[4], vec[5] = (
        [1, 0, 0],
        [0.5, 0.5, 0],
        [0.99, 0.01, 0],
        [0, 1, 0],
        [1, 0, 0],
        [1, 0, 0],
    )
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    searcher = TreeSearcher(tree, vec)
    q = np.array([1, 0, 0], dtype=np.float32)
    # beam 1: layer 2 has 2 > 1 nodes -> keep A; children a1, a2 -> keep a1; leaves 0, 1
    hits = searcher.search(q, k=2, beam=1)
    assert hits.leaves.tolist() == [0, 1]
    # beam 2: layer 1 (3 nodes) is the highest with > 2 -> keep a1, b1 -> leaves 0,1,4,5
    hits = searcher.search(q, k=3, beam=2)
    assert sorted(hits.leaves.tolist()[:2]) == [0, 4] and 1 not in hits.leaves[:2]
    assert set(hits.leaves.tolist()) <= {0, 1, 4, 5}


def test_summarize_over_a_real_forest() -> None:
    """Summarization mode (SPEC 2.5) on a tree-per-document index: one retrieval, abstracts and
    leaves of that document only, in document order, to a loopback chat server."""
    from support import FakeOpenAIServer

    from psirag.agent import Summarizer
    from psirag.llm import LLMClient, OpenAIChat

    long_docs = [" ".join(texts * 4) for texts in TOPICS.values()]
    index = Index.build(
        documents_from_strings(long_docs, titles=list(TOPICS), ids=list(TOPICS)),
        IndexConfig(tree_per_document=True, chunk_tokens=20),
        embedder=HashEmbedder(),
    )
    server = FakeOpenAIServer(lambda body: "Summary: a meeting about bread.")
    try:
        client = LLMClient(OpenAIChat(server.base_url, "m"), cache_path=None)
        result = Summarizer(
            client, lambda q: index.visit(q, docs=["baking"]), top_k=6, max_tokens=200
        ).run("Summarize the whole document.")
    finally:
        server.close()
    assert result.answer == "a meeting about bread."
    assert len(server.requests) == 1 and server.requests[0]["max_tokens"] == 200
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "volcano" not in prompt.lower() and "football" not in prompt.lower()
    assert 1 <= len(result.evidence) <= 6
    orders = [n.order for n in result.evidence]
    assert orders == sorted(orders), "nodes are given in document order"
    assert any(n.layer > 0 for n in result.evidence), "abstract nodes are part of the context"
