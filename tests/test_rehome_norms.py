"""The inner nodes' sum norms (IndexData.inner_norms) that let a removal's re-home rule out
candidates by their stored vectors: made by a build, carried and refreshed by updates with
the vectors, saved and loaded row for row with them; indexes without them (saved before
them) load, update and save as before, and a compaction adds them. A removal with them makes
the very index a removal without them makes."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

from psirag import Index
from psirag.config import IndexConfig
from psirag.index_data import IndexData
from psirag.living import compact_saved, remove_documents, with_sum_norms
from psirag.pipeline import long_leaves, routing_rows
from psirag.segments import tables_of
from psirag.storage import IndexStore
from psirag.storage_format import INNER_NORMS

WORDS = sorted({w for lines in TOPICS.values() for line in lines for w in line.split()})


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = [line for topic in TOPICS.values() for line in topic]
    return [
        " ".join(rng.sample(lines, rng.randint(1, 3))) + f" Marker{i} {rng.choice(WORDS)}."
        for i in range(n)
    ]


def _build(n: int = 48, seed: int = 3, **config: object) -> Index:
    options: dict = {"max_children": 3, "chunk_tokens": 30, **config}
    return Index.build(
        _corpus(n, seed), IndexConfig(**options), texts=True, embedder=HashEmbedder()
    )


def _fresh_norms(data: IndexData) -> np.ndarray:
    """Every inner node's sum norm made again from its current leaves."""
    n = data.tree.n_leaves
    _, norms = routing_rows(data.tree, data.vector_rows()[:n], data.abstracts, data.config, None)
    assert norms is not None
    return norms


def _current(data: IndexData) -> np.ndarray:
    """The inner nodes whose vector was made for their current leaves (not waiting)."""
    k = data.tree.n_nodes - data.tree.n_leaves
    drift = data.abstract_drift
    return np.ones(k, dtype=bool) if drift is None else np.asarray(drift) == 0


def _same_bits(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    assert a is not None and b is not None
    return np.asarray(a, np.float32).tobytes() == np.asarray(b, np.float32).tobytes()


def test_a_build_stores_each_inner_nodes_sum_norm() -> None:
    data = _build().data
    norms = data.inner_norms
    assert norms is not None and norms.dtype == np.float32
    assert np.isfinite(norms).all() and (norms > 0).all()
    n = data.tree.n_leaves
    sums = np.asarray(data.tree.leaf_membership[n:] @ data.vector_rows()[:n], dtype=np.float64)
    assert np.allclose(norms, np.linalg.norm(sums, axis=1), rtol=1e-5)
    # the vectors are those sums over those norms
    assert np.allclose(data.vector_rows()[n:], sums / norms[:, None], atol=1e-5)


def test_other_routings_store_no_norms() -> None:
    assert _build(routing="blend").data.inner_norms is None


@pytest.mark.parametrize("seed", range(4))
def test_removals_with_norms_make_the_index_removals_without_make(seed: int) -> None:
    """Documents removed one update at a time, with the stored norms and with none: the same
    tree, vectors, abstracts and norms; re-homes happen; norms stay those of the current
    leaves wherever the vector is."""
    index = _build(60, seed)
    rng = random.Random(seed)
    with_norms = index.data
    without = with_norms.replace(inner_norms=None)
    rehomed = 0
    for _ in range(8):
        victims = rng.sample(list(with_norms.documents), rng.randint(1, 3))
        with_norms, summary = remove_documents(with_norms, victims, None)
        without, _ = remove_documents(without, victims, None)
        rehomed += summary.tree.get("rehomed", 0)
        assert np.array_equal(with_norms.tree.parent, without.tree.parent)
        assert np.asarray(with_norms.vector_rows()).tobytes() == (
            np.asarray(without.vector_rows()).tobytes()
        )
        assert list(with_norms.abstracts) == list(without.abstracts)
        norms = with_norms.inner_norms
        assert norms is not None
        ok = _current(with_norms)
        assert np.isfinite(norms[ok]).all()
        assert np.allclose(norms[ok], _fresh_norms(with_norms)[ok], rtol=1e-6)
        assert without.inner_norms is None  # (only a build or a compaction starts them)
    assert rehomed > 0


def test_norms_are_saved_and_loaded_with_the_vectors(tmp_path: Path) -> None:
    emb = HashEmbedder()
    index = _build()
    index.save(tmp_path / "ix")
    again = Index.load(tmp_path / "ix", embedder=emb)
    assert _same_bits(again.data.inner_norms, index.data.inner_norms)
    # an update on top: only the changed nodes' rows are written, and they load back
    for victims in (["3"], ["7", "8"], ["20"]):
        index.remove(victims)
        index.save(tmp_path / "ix")
        again = Index.load(tmp_path / "ix", embedder=emb)
        assert _same_bits(again.data.inner_norms, index.data.inner_norms)
        assert np.array_equal(again.tree.parent, index.tree.parent)
    index.add(_corpus(6, 9), texts=True)
    index.save(tmp_path / "ix")
    again = Index.load(tmp_path / "ix", embedder=emb)
    assert _same_bits(again.data.inner_norms, index.data.inner_norms)
    # and what the load gives is what a removal then uses, to the same result
    a, _ = remove_documents(again.data, ["11"], None)
    b, _ = remove_documents(again.data.replace(inner_norms=None), ["11"], None)
    assert np.array_equal(a.tree.parent, b.tree.parent)


def test_an_index_saved_without_norms_loads_updates_and_gets_them_when_compacted(
    tmp_path: Path,
) -> None:
    """An index saved before the norms (none in the save): it loads without them, removes
    and saves as before (the save adds no norms table: its rows could not follow the vectors'
    rows), and ``psirag compact`` adds them."""
    emb = HashEmbedder()
    old = _build()
    folder = tmp_path / "old"
    Index.from_data(old.data.replace(inner_norms=None), embedder=emb).save(folder)
    loaded = Index.load(folder, embedder=emb)
    assert loaded.data.inner_norms is None
    loaded.remove(["5", "6"])
    loaded.save(folder)
    store = IndexStore(folder)
    assert INNER_NORMS not in store.read(lambda r: tables_of(r.manifest, "m"))
    again = Index.load(folder, embedder=emb)
    assert again.data.inner_norms is None
    assert np.array_equal(again.tree.parent, loaded.tree.parent)
    compact_saved(folder)
    done = Index.load(folder, embedder=emb)
    norms = done.data.inner_norms
    assert norms is not None
    ok = _current(done.data)
    assert np.isfinite(norms[ok]).all() and np.isnan(norms[~ok]).all()
    assert np.allclose(norms[ok], _fresh_norms(done.data)[ok], rtol=1e-6)


def test_an_index_with_a_leaf_longer_than_the_bound_gets_no_norms() -> None:
    """The bound counts on leaves of norm at most LEAF_NORM_MAX (embedders give unit rows):
    a compaction of an index with a longer leaf adds no norms, and an add of one drops them."""
    data = _build().data
    n = data.tree.n_leaves
    assert not long_leaves(data.vector_rows()[:n])
    rows = np.array(data.vector_rows())
    rows[5] *= 1.01
    assert long_leaves(rows[:n])
    longer = data.replace(node_vectors=rows)
    assert longer.inner_norms is None  # new vectors: the old norms are not theirs
    assert with_sum_norms(longer).inner_norms is None
    assert with_sum_norms(data.replace(inner_norms=None)).inner_norms is not None


def test_an_add_of_a_longer_leaf_drops_the_norms(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The pipeline normalises every embedding, so only a changed pipeline could add one: the
    update then drops the index's norms rather than keep a bound that no longer holds.)"""
    import psirag.living as living
    from psirag.pipeline import Embedded, embed_chunks

    def longer(*args, **kwargs):  # type: ignore[no-untyped-def]
        got = embed_chunks(*args, **kwargs)
        return Embedded(got.vectors * 1.5, got.truncated)

    index = _build()
    assert index.data.inner_norms is not None
    index.add(["A new text about volcano ash and lava."], texts=True)
    assert index.data.inner_norms is not None  # unit rows: kept
    monkeypatch.setattr(living, "embed_chunks", longer)
    index.add(["Another new text about rivers and deltas."], texts=True)
    assert index.data.inner_norms is None
