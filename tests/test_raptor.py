"""The RAPTOR-style baseline tree: structure invariants, soft assignment, retrieval.

Most tests swap UMAP for a linear projection (``reducer=``): UMAP's first call in a process
spends ~20 s compiling, and the tree logic under test does not depend on which reduction ran.
One slow test builds with real UMAP.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TOPICS, FakeOpenAIServer, HashEmbedder

pytest.importorskip("sklearn")

from psirag.config import IndexConfig
from psirag.errors import IndexFormatError, InputError
from psirag.eval import raptor
from psirag.eval.harness import run_eval
from psirag.eval.raptor import RaptorTree, _Clustering, require_eval_deps
from psirag.eval.settings import EvalSettings
from psirag.eval.skew import dasgupta_cost
from psirag.index import Index
from psirag.llm import LLMClient, OpenAIChat
from psirag.ownership import MARKER, OWNER

TOPIC_WORDS = ["volcano lava ash", "football club goal", "bread oven yeast", "river delta flood"]


def pca(x: np.ndarray, n_neighbors: int, n_components: int, seed: int) -> np.ndarray:
    """A deterministic stand-in for UMAP: projection on the top principal directions."""
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:n_components].T


def blobs(
    per: int = 30, k: int = 4, dim: int = 16, noise: float = 0.25, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(k, dim))
    labels = np.repeat(np.arange(k), per)
    e = centres[labels] + noise * rng.normal(size=(labels.size, dim))
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32), labels


def texts_for(labels: np.ndarray) -> list[str]:
    return [f"Item {i}\nThis text is about {TOPIC_WORDS[c]}." for i, c in enumerate(labels)]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return blobs()


@pytest.fixture(scope="module")
def tree(data: tuple[np.ndarray, np.ndarray]) -> RaptorTree:
    e, labels = data
    return RaptorTree.build(e, texts_for(labels), seed=0, reducer=pca)


def test_structure_invariants(tree: RaptorTree, data: tuple[np.ndarray, np.ndarray]) -> None:
    e, _ = data
    n = e.shape[0]
    sizes = tree.layer_sizes()
    assert sizes[0] == n and tree.n_leaves == n
    assert len(sizes) >= 2
    assert all(b < a for a, b in itertools.pairwise(sizes)), sizes
    # every leaf is under the top layer; every node below the top has a parent
    top = tree.layer_nodes[tree.depth]
    assert set(np.concatenate([tree.leaves_under(int(u)) for u in top]).tolist()) == set(range(n))
    for u in range(tree.n_nodes):
        if tree.layer[u] < tree.depth:
            assert tree.parent_sets[u].size >= 1
            assert tree.hard_parent[u] in tree.parent_sets[u]
            assert tree.layer[tree.hard_parent[u]] == tree.layer[u] + 1
        else:
            assert tree.hard_parent[u] == -1
    # a node's leaves are the union of its children's leaves; fan-out stays capped
    for u in range(n, tree.n_nodes):
        kids = tree.children[u]
        assert 1 <= kids.size <= 40
        assert np.all(tree.layer[kids] == tree.layer[u] - 1)
        union = np.unique(np.concatenate([tree.leaves_under(int(c)) for c in kids]))
        assert np.array_equal(union, tree.leaves_under(u))
    # routing vectors: leaf embeddings, then normalised leaf means
    assert np.allclose(tree.vectors[:n], e, atol=1e-6)
    u = n
    mean = e[tree.leaves_under(u)].sum(axis=0)
    assert np.allclose(tree.vectors[u], mean / np.linalg.norm(mean), atol=1e-5)


def test_abstracts_are_keyword_lists(tree: RaptorTree, data: tuple[np.ndarray, np.ndarray]) -> None:
    _, labels = data
    assert len(tree.abstracts) == tree.n_nodes - tree.n_leaves
    assert all(isinstance(a, str) and a for a in tree.abstracts)
    # a layer-1 node over one topic names that topic's phrase
    for u in tree.layer_nodes[1].tolist():
        topic = TOPIC_WORDS[labels[tree.leaves_under(u)[0]]]
        assert topic in tree.abstracts[u - tree.n_leaves].split(", ")


def test_clusters_follow_blobs(tree: RaptorTree, data: tuple[np.ndarray, np.ndarray]) -> None:
    """Well-separated blobs never share a layer-1 node (the hard tree keeps them apart)."""
    _, labels = data
    for u in tree.layer_nodes[1].tolist():
        assert np.unique(labels[tree.leaves_under(u)]).size == 1


def test_deterministic_for_a_seed() -> None:
    e, _ = blobs(per=20, k=3, seed=6)
    a = RaptorTree.build(e, seed=3, reducer=pca)
    b = RaptorTree.build(e, seed=3, reducer=pca)
    assert a.layer_sizes() == b.layer_sizes()
    assert all(np.array_equal(x, y) for x, y in zip(a.children, b.children, strict=True))
    assert np.array_equal(a.hard_parent, b.hard_parent)


def test_soft_assignment_rule() -> None:
    """Every cluster over the threshold, and always the most probable one."""
    run = _Clustering(
        reducer=pca,
        mixture=None,
        dim=10,
        threshold=0.1,
        max_clusters=50,
        local_neighbors=10,
        max_children=None,
        seed=0,
    )
    probs = np.array([[0.5, 0.45, 0.05], [0.05, 0.05, 0.9], [0.3, 0.3, 0.4], [0.0, 0.0, 1.0]])
    assert [idx.tolist() for idx, _ in run.members(probs)] == [[0, 2], [0, 2], [1, 2, 3]]
    run.threshold = 0.5  # nothing above it in row 2: only its argmax; cluster 1 is left empty
    assert [idx.tolist() for idx, _ in run.members(probs)] == [[0], [1, 2, 3]]
    weights = [w.tolist() for _, w in run.members(probs)]
    assert weights == [[0.5], [0.9, 0.4, 1.0]]


class _SplitBySign:
    """A stand-in mixture: BIC prefers two components split by the sign of the first axis,
    with a smooth posterior, so a point near the boundary belongs to both."""

    def __init__(self, n_components: int, random_state: int = 0) -> None:
        self.k = n_components

    def fit(self, z: np.ndarray) -> _SplitBySign:
        self.scale = float(np.std(z[:, 0])) * 0.02 + 1e-12
        return self

    def bic(self, z: np.ndarray) -> float:
        return abs(self.k - 2)

    def predict_proba(self, z: np.ndarray) -> np.ndarray:
        if self.k == 1:
            return np.ones((z.shape[0], 1))
        p = 1 / (1 + np.exp(np.clip(-z[:, 0] / self.scale, -50, 50)))
        out = np.full((z.shape[0], self.k), 1e-9)
        out[:, 0], out[:, 1] = p, 1 - p
        return out / out.sum(axis=1, keepdims=True)


def test_soft_assignment_puts_a_leaf_in_two_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = type("FakeMixture", (), {"GaussianMixture": _SplitBySign})
    monkeypatch.setattr(raptor, "require_eval_deps", lambda umap=True: (None, fake))
    rng = np.random.default_rng(0)
    a, b = np.eye(8)[0], np.eye(8)[1]
    e = np.concatenate(
        [a + 0.05 * rng.normal(size=(20, 8)), b + 0.05 * rng.normal(size=(20, 8)), [(a + b) / 2]]
    )
    t = RaptorTree.build(e, seed=0, reducer=pca, dim=3, max_layers=1)
    bridge = 40
    assert t.parent_sets[bridge].size >= 2
    assert sum(t.parent_sets[i].size == 1 for i in range(40)) >= 30
    groups = [set(t.leaves_under(int(u)).tolist()) for u in t.parent_sets[bridge]]
    assert all(bridge in g for g in groups)
    assert t.hard_parent[bridge] in t.parent_sets[bridge]
    # the hard tree keeps the bridge once; soft leaf sets overlap, hard ones do not
    hard = t.hard_tree()
    assert int(hard.leaf_counts[hard.root]) == e.shape[0]
    t1 = RaptorTree.build(e, seed=0, reducer=pca, dim=3, max_layers=1, threshold=1.0)
    assert all(p.size == 1 for p in t1.parent_sets[: t1.n_leaves])


def test_max_children_caps_fan_out() -> None:
    e, _ = blobs(per=40, k=2, noise=0.2, seed=2)
    t = RaptorTree.build(e, seed=0, reducer=pca, max_children=6)
    assert max(c.size for c in t.children[t.n_leaves :]) <= 6
    assert t.stats["reclustered"] + t.stats["forced_splits"] >= 0


def test_tiny_corpus_has_no_layers() -> None:
    e, _ = blobs(per=3, k=2)
    t = RaptorTree.build(e, seed=0, reducer=pca)
    assert t.layer_sizes() == [6]
    hits = t.traverse(e[0], k=3, beam=2)
    assert hits.leaves[0] == 0 and hits.leaves.size == 3


def test_traverse_returns_valid_leaves(tree: RaptorTree, data: tuple[np.ndarray, np.ndarray]):
    e, _ = data
    rng = np.random.default_rng(5)
    for _ in range(10):
        q = rng.normal(size=e.shape[1]).astype(np.float32)
        q /= np.linalg.norm(q)
        hits = tree.traverse(q, k=5, beam=2)
        assert 1 <= hits.leaves.size <= 5
        assert np.all((hits.leaves >= 0) & (hits.leaves < tree.n_leaves))
        assert np.unique(hits.leaves).size == hits.leaves.size
        assert np.all(np.diff(hits.scores) <= 1e-7)
        assert np.allclose(hits.scores, e[hits.leaves] @ q, atol=1e-5)
        assert np.all(tree.layer[hits.nodes] > 0)
        # a huge beam visits every leaf, so the best leaf is the exact nearest neighbour
        wide = tree.traverse(q, k=5, beam=10_000)
        exact = np.argsort(-(e @ q), kind="stable")[:5]
        assert wide.leaves[0] == exact[0]
        assert set(wide.leaves.tolist()) == set(exact.tolist())


def test_collapsed_is_flat_top_k_over_all_nodes(tree: RaptorTree) -> None:
    q = tree.vectors[tree.n_leaves]  # an abstract node's own vector: it ranks first
    hits = tree.collapsed(q, k=8)
    assert hits.nodes.size == 8
    assert hits.nodes[0] == tree.n_leaves
    brute = np.argsort(-(tree.vectors @ q), kind="stable")[:8]
    assert set(hits.nodes.tolist()) == set(brute.tolist())
    assert np.array_equal(hits.leaves, hits.nodes[tree.layer[hits.nodes] == 0])
    assert np.all(hits.leaves < tree.n_leaves)


def test_hard_tree_is_a_single_rooted_tree(
    tree: RaptorTree, data: tuple[np.ndarray, np.ndarray]
) -> None:
    e, _ = data
    hard = tree.hard_tree()
    assert hard.roots.size == 1
    assert hard.n_leaves == tree.n_leaves
    assert int(hard.leaf_counts[hard.root]) == tree.n_leaves
    assert dasgupta_cost(hard, e) > 0


def test_missing_umap_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "umap", None)
    with pytest.raises(ImportError, match=r"psirag\[eval\]"):
        require_eval_deps()


@pytest.mark.slow
def test_real_umap_build_is_deterministic() -> None:
    pytest.importorskip("umap")
    e, labels = blobs(per=30, k=4, dim=32, seed=4)
    a = RaptorTree.build(e, texts_for(labels), seed=0)
    b = RaptorTree.build(e, seed=0)
    assert a.layer_sizes() == b.layer_sizes()
    assert a.layer_sizes()[0] == 120 and len(a.layer_sizes()) >= 2
    assert all(np.array_equal(x, y) for x, y in zip(a.children, b.children, strict=True))
    for u in a.layer_nodes[1].tolist():
        assert np.unique(labels[a.leaves_under(u)]).size == 1


# --- persistence ----------------------------------------------------------------------------------


def test_save_load_roundtrip(tree: RaptorTree, tmp_path: Path) -> None:
    folder = tree.save(tmp_path / "raptor")
    loaded = RaptorTree.load(folder)
    assert loaded.n_nodes == tree.n_nodes and loaded.n_leaves == tree.n_leaves
    for name in ("layer", "hard_parent", "vectors"):
        a, b = getattr(tree, name), getattr(loaded, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for name in ("children", "weights"):
        pairs = zip(getattr(tree, name), getattr(loaded, name), strict=True)
        assert all(np.array_equal(a, b) for a, b in pairs), name
    assert (tree.membership != loaded.membership).nnz == 0
    assert loaded.abstracts == tree.abstracts
    assert loaded.stats == json.loads(json.dumps(tree.stats))
    q = tree.vectors[tree.n_leaves + 1]
    for search in ("traverse", "collapsed"):
        a, b = getattr(tree, search)(q, k=5), getattr(loaded, search)(q, k=5)
        assert np.array_equal(a.leaves, b.leaves) and np.array_equal(a.nodes, b.nodes)
    # nothing but .npy arrays and JSON on disk
    store_files = ("lock", ".readers", OWNER, MARKER)  # the store's own, not the tree's data
    files = [p for p in folder.rglob("*") if p.is_file() and p.name not in store_files]
    assert {p.suffix for p in files} == {".npy", ".jsonl", ".json"}


def test_load_refuses_what_is_not_a_raptor_tree(tmp_path: Path) -> None:
    index = Index.build(
        [f"Text {i} about {w}." for i, w in enumerate(TOPIC_WORDS)],
        IndexConfig(embedder="test:hash"),
        embedder=HashEmbedder(),
        texts=True,
    )
    index.save(tmp_path / "psi")
    with pytest.raises(IndexFormatError, match="RAPTOR"):
        RaptorTree.load(tmp_path / "psi")
    with pytest.raises(IndexFormatError):
        RaptorTree.load(tmp_path / "missing")


def test_llm_abstracts_are_written_from_soft_children(tmp_path: Path) -> None:
    """A RAPTOR node is summarised from every member of its cluster, bottom-up."""
    e, labels = blobs(per=20, k=3, seed=1)
    texts = texts_for(labels)
    t = RaptorTree.build(e, None, seed=0, reducer=pca, max_clusters=8)
    assert t.depth >= 1

    def reply(body: dict[str, Any]) -> str:
        docs = re.findall(r"(?m)^\[\d+\] ", body["messages"][-1]["content"])
        return f"Summary of {len(docs)} documents."

    server = FakeOpenAIServer(reply)
    try:
        client = LLMClient(OpenAIChat(server.base_url, "m"), cache_path=tmp_path / "c.sqlite")
        t.write_abstracts(texts, "llm-summary", llm=client)
        client.close()
    finally:
        server.close()
    for u in range(t.n_leaves, t.n_nodes):
        assert t.abstracts[u - t.n_leaves] == f"Summary of {t.children[u].size} documents."
    assert t.stats["abstracts"] == "llm-summary"
    assert t.stats["llm"]["calls"] == len(server.requests) > 0
    with pytest.raises(InputError, match="LLM"):
        t.write_abstracts(texts, "llm-keywords")


# --- as eval methods ------------------------------------------------------------------------------

EVAL_TOPICS = {
    **TOPICS,
    "river": [
        "The Nile river floods its delta every summer.",
        "The Amazon river carries more water than any other river.",
        "A river delta forms where the river meets the sea.",
        "The Danube river flows through Vienna and Budapest.",
    ],
    "chess": [
        "Chess openings like the Sicilian defence shape the middle game.",
        "A chess grandmaster calculates many moves ahead.",
        "The chess king castles to reach safety.",
        "Chess endgames reward precise king activity.",
    ],
}
EVAL_QUESTIONS = [
    ("q0", "Which volcano destroyed Pompeii with ash?", "Vesuvius", [3]),
    ("q1", "Which river floods its delta?", "Nile", [12]),
    ("q2", "How does a chess king reach safety?", "castles", [18]),
    ("q3", "Which football club is based in London?", "Arsenal", [4]),
]


@pytest.fixture
def eval_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "topics"
    folder.mkdir()
    texts = [(f"{topic} {i}", t) for topic, ts in EVAL_TOPICS.items() for i, t in enumerate(ts)]
    records = [{"idx": i, "title": title, "text": t} for i, (title, t) in enumerate(texts)]
    questions = [
        {"id": i, "question": q, "answer": a, "supporting_passage_ids": g}
        for i, q, a, g in EVAL_QUESTIONS
    ]
    (folder / "corpus.json").write_text(json.dumps(records), encoding="utf-8")
    (folder / "questions.json").write_text(json.dumps(questions), encoding="utf-8")
    return folder


@pytest.fixture
def pca_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eval builds with the linear reducer (no UMAP JIT warm-up in unit tests) and few mixture
    sizes to try (each is a Gaussian-mixture fit)."""
    monkeypatch.setitem(raptor.REDUCERS, "pca", pca)
    monkeypatch.setitem(raptor.EVAL_BUILD, "reducer", "pca")
    monkeypatch.setitem(raptor.EVAL_BUILD, "max_clusters", 8)


class CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Any, **kwargs: Any) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed(texts, **kwargs)


def doc_ids(report: Any, method: str) -> dict[str, list[str]]:
    return {
        r["id"]: [p["doc"] for p in r["retrieved"]] for r in report.rows() if r["method"] == method
    }


def test_raptor_methods_end_to_end_and_cached(
    eval_dir: Path, tmp_path: Path, pca_build: None
) -> None:
    settings = EvalSettings(
        cache_dir=tmp_path / "cache", methods=("raptor", "raptor-collapsed"), beam=2, bootstrap=0
    )
    embedder = CountingEmbedder()
    first = run_eval(eval_dir, settings, embedder=embedder)
    assert first.index_builds == ["psirag", "raptor"]
    # the leaves were embedded once, for psi, and the tree reuses them
    n_passages = sum(len(v) for v in EVAL_TOPICS.values())
    assert len(embedder.texts) == n_passages + len(EVAL_QUESTIONS)

    results = first.to_dict()
    info = results["indexes"]["raptor"]
    loaded = RaptorTree.load(Path(info["path"]) / "index")
    (psi_entry,) = (tmp_path / "cache" / "indexes").glob("psirag-*")
    index = Index.load(psi_entry / "index", embedder=embedder)
    n = loaded.n_leaves
    assert n == n_passages and loaded.depth >= 1
    assert np.allclose(loaded.vectors[:n], np.asarray(index.node_vectors[:n]), atol=1e-6)
    assert all(a for a in loaded.abstracts)  # psi's keyword abstracts
    assert set(info["stage_seconds"]) == set(raptor.RAPTOR_STAGES)
    summary = results["methods"]["raptor"]
    assert summary["index_seconds"] == pytest.approx(sum(info["stage_seconds"].values()), abs=2e-3)
    assert 0 <= summary["recall@2"] <= summary["recall@5"] <= 100

    # each method is its search over the cached tree, and the two differ on some question
    traversal, collapsed = doc_ids(first, "raptor"), doc_ids(first, "raptor-collapsed")
    for qid, question, _, _ in EVAL_QUESTIONS:
        vec = embedder.embed([question])[0]
        hits = loaded.traverse(vec, k=5, beam=2)
        assert traversal[qid] == [index.chunks[i].source.document for i in hits.leaves]
        flat = loaded.collapsed(vec, k=5)
        expected = [index.chunks[u].source.document if u < n else f"raptor:{u}" for u in flat.nodes]
        assert collapsed[qid] == expected
    assert any(traversal[q] != collapsed[q] for q in traversal)
    assert any(d.startswith("raptor:") for docs in collapsed.values() for d in docs)

    second = run_eval(eval_dir, settings, embedder=HashEmbedder())
    assert second.index_builds == []
    assert all(m["index_reused"] for m in second.to_dict()["methods"].values())
    assert [r["retrieved"] for r in second.rows()] == [r["retrieved"] for r in first.rows()]
    # another fan-out cap is another tree (and another psi index)
    capped = run_eval(
        eval_dir,
        replace(settings, index_config=IndexConfig(max_children=4)),
        embedder=HashEmbedder(),
    )
    assert capped.index_builds == ["psirag", "raptor"]
    tree4 = RaptorTree.load(Path(capped.to_dict()["indexes"]["raptor"]["path"]) / "index")
    assert max(c.size for c in tree4.children[tree4.n_leaves :]) <= 4


def test_raptor_agent_and_llm_abstracts_through_the_harness(
    eval_dir: Path, tmp_path: Path, pca_build: None
) -> None:
    def reply(body: dict[str, Any]) -> str:
        last = body["messages"][-1]["content"]
        if last.startswith("Documents:"):
            return f"Summary of {len(last.split(chr(10) * 2)) - 1} documents."
        return "Thought: the documents say so.\nAnswer: Vesuvius"

    server = FakeOpenAIServer(reply)
    spec = f"openai:{server.base_url}#m"
    try:
        settings = EvalSettings(
            cache_dir=tmp_path / "cache",
            methods=("raptor", "raptor-collapsed+agent"),
            llm=spec,
            index_config=IndexConfig(abstracts="llm-summary", routing="abstract"),
            bootstrap=0,
        )
        report = run_eval(eval_dir, settings, embedder=HashEmbedder())
    finally:
        server.close()
    results = report.to_dict()
    assert set(results["methods"]) == {"raptor", "raptor-collapsed+agent"}
    agent = results["methods"]["raptor-collapsed+agent"]
    assert agent["em"] == 25.0 and agent["retrievals_per_question"] == 1.0
    tree = RaptorTree.load(Path(results["indexes"]["raptor"]["path"]) / "index")
    assert all(re.fullmatch(r"Summary of \d+ documents\.", a) for a in tree.abstracts)
    assert tree.stats["abstracts"] == "llm-summary" and tree.stats["routing"] == "abstract"
    n = tree.n_leaves
    assert np.allclose(tree.vectors[n:], HashEmbedder().embed(tree.abstracts), atol=1e-5)


def test_raptor_without_the_eval_extra_names_it(
    eval_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "umap", None)
    settings = EvalSettings(cache_dir=tmp_path / "cache", methods=("raptor",), bootstrap=0)
    with pytest.raises(InputError, match=r"pip install 'psirag\[eval\]'"):
        run_eval(eval_dir, settings, embedder=HashEmbedder())
