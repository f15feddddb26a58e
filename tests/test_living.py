"""The living index: Index.add / Index.remove through random sequences, each step checked
against the tree invariants and a full consistency check; save/load after updates; refreshed
nodes equal a full recompute; ids stay unique; tree-per-document adds a tree."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

from psirag import Index
from psirag.config import IndexConfig
from psirag.errors import EmbedderMismatchError, InputError
from psirag.pipeline import routing_rows, routing_vectors, write_abstracts
from psirag.tree.update import check_invariants

WORDS = sorted({w for lines in TOPICS.values() for line in lines for w in line.split()})


def _corpus(n: int, seed: int) -> list[str]:
    """``n`` small documents mixing the topic sentences (one to four each)."""
    rng = random.Random(seed)
    lines = [line for topic in TOPICS.values() for line in topic]
    docs = []
    for i in range(n):
        picked = rng.sample(lines, rng.randint(1, 4))
        docs.append(" ".join(picked) + f" Marker{i} {rng.choice(WORDS)}.")
    return docs


def check_consistent(index: Index, expected: dict[str, str]) -> None:
    """Everything an index holds agrees: sizes, BM25's document count, each document's chunks,
    unique ids, and search works."""
    data = index.data
    tree = data.tree
    check_invariants(tree, index.config.max_children, forest=index.config.tree_per_document)
    assert len(data.chunks) == tree.n_leaves
    assert len(data.abstracts) == tree.n_nodes - tree.n_leaves
    assert data.node_vectors.shape == (tree.n_nodes, 64)
    assert index.sparse.n_docs == len(data.chunks)
    assert index.sparse.first_copy.size == len(data.chunks)
    ids = [c.id for c in data.chunks]
    assert len(set(ids)) == len(ids)
    assert sorted(index.documents) == sorted(expected)
    for doc, text in expected.items():
        got = [c for c in data.chunks if c.source.document == doc]
        assert got, doc
        assert all(c.text in text for c in got)
    # leaves keep their own embeddings
    emb = HashEmbedder()
    vecs = emb.embed([c.text for c in data.chunks])
    assert np.allclose(data.node_vectors[: tree.n_leaves], vecs, atol=1e-5)
    # routing vectors of every inner node are what a full recompute gives (leaf_mean routing
    # depends on the subtree only, so a stale one would show)
    full = routing_vectors(tree, vecs, data.abstracts, index.config, None)
    assert np.allclose(full, data.node_vectors, atol=1e-4)
    # and each one's stored sum norm is its current leaves' (a waiting abstract's node keeps
    # its vector and norm: drift says so)
    _, norms = routing_rows(tree, vecs, data.abstracts, index.config, None)
    assert norms is not None and data.inner_norms is not None
    current = np.ones(norms.size, bool) if data.abstract_drift is None else data.abstract_drift == 0
    assert np.allclose(data.inner_norms[current], norms[current], rtol=1e-4)
    hits = index.search("volcano lava ash", k=3)
    assert hits and all(h.source.document in expected for h in hits)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_random_adds_and_removes(seed: int) -> None:
    rng = random.Random(seed)
    pool = _corpus(60, seed)
    config = IndexConfig(max_children=4, chunk_tokens=30)
    start = pool[:8]
    index = Index.build(start, config, texts=True, embedder=HashEmbedder())
    expected = {str(i): t for i, t in enumerate(start)}
    next_text = 8
    for _step in range(12):
        if rng.random() < 0.25 and len(expected) >= 3 and next_text < len(pool):
            # one update removing some documents and adding others (what sync does)
            victims = rng.sample(sorted(expected), rng.randint(1, len(expected) - 1))
            batch = pool[next_text : next_text + 3]
            next_text += len(batch)
            summary = index.update(victims, batch, texts=True)
            for v in victims:
                del expected[v]
            for given, text in enumerate(batch):
                expected[summary.renamed.get(str(given), str(given))] = text
            assert summary.removed == victims and len(summary.added) == len(batch)
        elif rng.random() < 0.6 or len(expected) < 3:
            k = rng.randint(1, 6)
            batch = pool[next_text : next_text + k]
            next_text += k
            if not batch:
                break
            summary = index.add(batch, texts=True)
            assert len(summary.added) == len(batch)
            for given, text in zip(range(len(batch)), batch, strict=True):
                new_id = summary.renamed.get(str(given), str(given))
                expected[new_id] = text
            assert summary.chunks_added > 0
        else:
            victims = rng.sample(sorted(expected), rng.randint(1, len(expected) - 1))
            before = len(index.chunks)
            summary = index.remove(victims)
            assert summary.chunks_removed == before - len(index.chunks)
            for v in victims:
                del expected[v]
        check_consistent(index, expected)
    assert index.data.lineage["updates"] >= 1


def test_save_load_round_trip_after_updates(tmp_path: Path) -> None:
    emb = HashEmbedder()
    docs = _corpus(20, 5)
    index = Index.build(docs[:10], IndexConfig(max_children=4), texts=True, embedder=emb)
    index.add(docs[10:], texts=True)
    index.remove(["3", "4"])
    index.save(tmp_path / "ix")
    again = Index.load(tmp_path / "ix", embedder=emb)
    assert [c.id for c in again.chunks] == [c.id for c in index.chunks]
    assert again.abstracts == index.abstracts
    assert np.array_equal(again.tree.parent, index.tree.parent)
    assert np.allclose(again.node_vectors, index.node_vectors)
    assert again.data.lineage == index.data.lineage
    assert again.drift()["leaves_removed"] == 2
    q = "volcano ash"
    assert [p.id for p in again.search(q, k=4)] == [p.id for p in index.search(q, k=4)]


def test_refreshed_keyword_abstracts_equal_a_full_recompute() -> None:
    emb = HashEmbedder()
    docs = _corpus(30, 7)
    index = Index.build(docs[:20], IndexConfig(max_children=4), texts=True, embedder=emb)
    summary = index.add(docs[20:], texts=True)
    assert summary.nodes_refreshed > 0
    data = index.data
    full = write_abstracts(data.tree, [c.text for c in data.chunks], index.config).texts
    n = data.tree.n_leaves
    # the root is always refreshed (its leaves changed); it must equal the full recompute
    root = int(data.tree.roots[0])
    assert data.abstracts[root - n] == full[root - n]
    assert data.abstracts[root - n]  # not empty


def test_adding_the_same_documents_again_is_skipped() -> None:
    docs = _corpus(6, 1)
    index = Index.build(docs, texts=True, embedder=HashEmbedder())
    summary = index.add(docs[:3], texts=True)
    assert summary.skipped == ["0", "1", "2"] and not summary.added
    assert len(index.documents) == 6


def test_json_records_numbered_alike_stay_unique(tmp_path: Path) -> None:
    import json

    a = [{"idx": i, "title": f"A{i}", "text": t} for i, t in enumerate(_corpus(3, 2))]
    b = [{"idx": i, "title": f"B{i}", "text": t} for i, t in enumerate(_corpus(3, 3))]
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    index = Index.build([tmp_path / "a.json"], embedder=HashEmbedder())
    summary = index.add([tmp_path / "b.json"])
    assert sorted(index.documents) == ["0", "1", "2", "b.json:0", "b.json:1", "b.json:2"]
    assert summary.renamed == {"0": "b.json:0", "1": "b.json:1", "2": "b.json:2"}


def test_unknown_id_and_other_embedder_change_nothing() -> None:
    docs = _corpus(6, 4)
    index = Index.build(docs, texts=True, embedder=HashEmbedder())
    before = index.data
    with pytest.raises(InputError, match="unknown document id"):
        index.remove(["nope"])
    with pytest.raises(EmbedderMismatchError, match="embedder"):
        index.add(["new text about lava"], texts=True, embedder=HashEmbedder(dim=32))
    with pytest.raises(InputError, match="empty index"):
        index.remove(index.documents)
    assert index.data is before


def test_tree_per_document_add_grows_the_forest() -> None:
    docs = _corpus(8, 6)
    config = IndexConfig(tree_per_document=True, max_children=3, chunk_tokens=20)
    index = Index.build(docs[:5], config, texts=True, embedder=HashEmbedder())
    trees = index.tree.roots.size
    summary = index.add(docs[5:], texts=True)
    assert index.tree.roots.size == trees + 3
    assert summary.tree["trees_added"] == 3
    expected = {str(i): t for i, t in enumerate(docs[:5])}
    for given, text in enumerate(docs[5:]):
        expected[summary.renamed.get(str(given), str(given))] = text
    check_consistent(index, expected)
    index.remove([index.documents[0]])
    del expected[next(iter(expected))]
    check_consistent(index, expected)


@pytest.mark.parametrize("chunk_tokens", [None, 12])
def test_the_documents_listed_after_removals_keep_their_order(chunk_tokens: int | None) -> None:
    """A removal carries the listed documents over without the removed ones, in order: a few
    found by position (looked for near their leaves first: exactly there with one chunk per
    document, elsewhere with several), many by a filter (both as listing them afresh)."""
    from dataclasses import replace

    config = IndexConfig(
        max_children=4, **({} if chunk_tokens is None else {"chunk_tokens": chunk_tokens})
    )
    index = Index.build(_corpus(16, 4), config, texts=True, embedder=HashEmbedder())
    if chunk_tokens is not None:
        assert index.data.n_leaves > 2 * len(index.data.documents)
    order = list(index.data.documents)
    for pick in ([3], [14, 0, 7], list(range(1, 11))):  # positions in the current order
        gone = [order[i] for i in pick]
        assert "documents" in index.data.__dict__  # listed: the removal carries the list over
        index.remove(gone)
        order = [d for d in order if d not in gone]
        assert list(index.data.documents) == order
        afresh = replace(index.data)  # a copy that lists them again from its chunks
        afresh.__dict__.pop("documents", None)
        assert list(afresh.documents) == order
