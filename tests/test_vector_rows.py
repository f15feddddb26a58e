"""Node vectors kept in parts (:mod:`psirag.vector_rows`): a :class:`RowStack` reads exactly as
the joined array would; appended rows never overwrite rows another value can read; an update
copies none of the leaves' rows, a search does not join them, and an index updated with its
vectors in parts holds, saves and finds exactly what the same updates give with one array."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

from psirag import Index
from psirag.config import IndexConfig
from psirag.index_data import IndexData
from psirag.vector_rows import RowOverlay, RowStack, appended, without_rows


def _parts(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((k, 5)).astype(np.float32) for k in (7, 1, 0, 12, 3)]


@pytest.mark.parametrize("seed", [0, 1])
def test_a_row_stack_reads_as_the_joined_array(seed: int) -> None:
    parts = _parts(seed)
    stack = RowStack.of(*parts)
    joined = np.concatenate(parts)
    assert isinstance(stack, RowStack) and stack.shape == joined.shape
    assert len(stack) == joined.shape[0] and stack.dtype == joined.dtype
    np.testing.assert_array_equal(np.asarray(stack), joined)
    n = joined.shape[0]
    for i in [0, 6, 7, 8, 19, n - 1, -1, -n]:
        np.testing.assert_array_equal(stack[i], joined[i])
    for s in [slice(None), slice(3, 9), slice(7, 8), slice(8, 20), slice(5, 5), slice(-4, None)]:
        np.testing.assert_array_equal(np.asarray(stack[s]), joined[s])
    np.testing.assert_array_equal(stack[1:20:3], joined[1:20:3])
    rng = np.random.default_rng(seed)
    idx = rng.integers(-n, n, size=40)
    np.testing.assert_array_equal(stack[idx], joined[idx])
    np.testing.assert_array_equal(stack[idx.reshape(5, 8)], joined[idx.reshape(5, 8)])
    np.testing.assert_array_equal(np.take(stack, idx, axis=0), np.take(joined, idx, axis=0))
    for ordered in (np.sort(idx % n), np.sort(idx), np.array([0, 0, 7, 7, 8, n - 1])):
        np.testing.assert_array_equal(stack[ordered], joined[ordered])  # a range per part
    mask = rng.random(n) < 0.5
    np.testing.assert_array_equal(stack[mask], joined[mask])
    np.testing.assert_array_equal(stack[idx, 2], joined[idx, 2])
    np.testing.assert_array_equal(stack[4, 1:3], joined[4, 1:3])
    np.testing.assert_array_equal(stack[idx] @ joined[0], joined[idx] @ joined[0])
    with pytest.raises(IndexError):
        stack[n]
    with pytest.raises(IndexError):
        stack[np.array([0, n])]
    for start, size in [(0, n), (5, 4), (8, 12), (19, 3), (n, 0)]:
        out = np.empty((size, 5), dtype=np.float32)
        stack.copy_rows(start, out)
        np.testing.assert_array_equal(out, joined[start : start + size])
    with pytest.raises(IndexError):
        stack.copy_rows(n - 1, np.empty((2, 5), dtype=np.float32))
    # a slice within one part is a view of it, not a copy
    assert np.shares_memory(stack[8:15], parts[3])
    assert RowStack.of(parts[0], parts[2]) is parts[0]


def test_appending_never_writes_rows_another_value_reads() -> None:
    base = np.arange(20, dtype=np.float32).reshape(10, 2)
    a = appended(base, np.full((2, 2), 1.0, dtype=np.float32))
    b = appended(a, np.full((3, 2), 2.0, dtype=np.float32))  # in place: a holds the last rows
    assert isinstance(a, RowStack) and isinstance(b, RowStack)
    assert np.shares_memory(a.parts[-1], b.parts[-1]) and a.parts[0] is base
    # a again (an older value updated a second time): b's rows must stay as they are
    c = appended(a, np.full((1, 2), 3.0, dtype=np.float32))
    assert isinstance(c, RowStack)
    np.testing.assert_array_equal(np.asarray(b)[10:], [[1, 1], [1, 1], [2, 2], [2, 2], [2, 2]])
    np.testing.assert_array_equal(np.asarray(c)[10:], [[1, 1], [1, 1], [3, 3]])
    np.testing.assert_array_equal(np.asarray(c)[:10], base)
    assert not np.shares_memory(c.parts[-1], b.parts[-1])
    # and b appends in place still, c too (each now holds its own buffer's last row)
    d = appended(b, np.full((1, 2), 4.0, dtype=np.float32))
    e = appended(c, np.full((1, 2), 5.0, dtype=np.float32))
    assert np.shares_memory(d.parts[-1], b.parts[-1])  # type: ignore[union-attr]
    np.testing.assert_array_equal(np.asarray(d)[-2:], [[2, 2], [4, 4]])
    np.testing.assert_array_equal(np.asarray(e)[-2:], [[3, 3], [5, 5]])
    np.testing.assert_array_equal(np.asarray(b)[-1], [2, 2])
    many = appended(d, np.ones((9000, 2), dtype=np.float32))  # past the buffer: a new one
    assert np.asarray(many).shape == (10 + 6 + 9000, 2)
    np.testing.assert_array_equal(np.asarray(many)[:16], np.asarray(d))


def test_a_row_overlay_reads_as_the_rows_it_names_and_never_writes_them() -> None:
    rng = np.random.default_rng(3)
    parts = _parts(3)
    base = RowStack.of(*parts)
    loaded = np.concatenate(parts)
    n = loaded.shape[0]
    before = loaded.copy()
    # rows moved (some dropped, two new ones), then three rows changed
    pick = np.concatenate([np.arange(0, 5), [-1], np.arange(9, n), [-2]])
    new_rows = rng.standard_normal((2, 5)).astype(np.float32)
    moved = RowOverlay.over(base).moved(pick, new_rows)
    want = np.concatenate([loaded[0:5], new_rows[:1], loaded[9:n], new_rows[1:]])
    np.testing.assert_array_equal(np.asarray(moved), want)
    changed = np.array([0, 7, want.shape[0] - 1])
    values = rng.standard_normal((3, 5)).astype(np.float32)
    over = moved.with_rows(changed, values)
    np.testing.assert_array_equal(np.asarray(moved), want)  # the older value is unchanged
    want2 = want.copy()
    want2[changed] = values
    m = want2.shape[0]
    assert over.shape == want2.shape and len(over) == m and over.dtype == want2.dtype
    np.testing.assert_array_equal(np.asarray(over), want2)
    for i in [0, 5, 6, 7, m - 1, -1, -m]:
        np.testing.assert_array_equal(over[i], want2[i])
    for sl in [slice(None), slice(2, 9), slice(6, 7), slice(5, 5), slice(-4, None), slice(1, m, 3)]:
        np.testing.assert_array_equal(np.asarray(over[sl]), want2[sl])
    idx = rng.integers(-m, m, size=30)
    np.testing.assert_array_equal(over[idx], want2[idx])
    np.testing.assert_array_equal(np.take(over, idx, axis=0), want2[idx])
    np.testing.assert_array_equal(over[idx.reshape(5, 6)], want2[idx.reshape(5, 6)])
    np.testing.assert_array_equal(over[idx, 2], want2[idx, 2])
    mask = rng.random(m) < 0.5
    np.testing.assert_array_equal(over[mask], want2[mask])
    np.testing.assert_array_equal(np.compress(mask, over, axis=0), want2[mask])
    flat = rng.random(want2.size) < 0.3  # flattened, and across columns: the joined rows'
    np.testing.assert_array_equal(np.compress(flat, over), np.compress(flat, want2))
    cols = np.array([True, False, True, False, False])
    np.testing.assert_array_equal(np.compress(cols, over, axis=1), want2[:, cols])
    out = np.empty((4, 5), dtype=np.float32)
    over.copy_rows(3, out)
    np.testing.assert_array_equal(out, want2[3:7])
    with pytest.raises(IndexError):
        over[m]
    with pytest.raises(IndexError):
        over[np.array([0, m])]
    with pytest.raises(IndexError):
        RowOverlay.over(base).moved(np.array([0, n]), new_rows)
    # a part of a row stack, after leaf rows: it reads as the joined rows
    leaves = rng.standard_normal((6, 5)).astype(np.float32)
    stack = RowStack.of(leaves, over)
    joined = np.concatenate([leaves, want2])
    assert isinstance(stack, RowStack)
    np.testing.assert_array_equal(np.asarray(stack), joined)
    idx = rng.integers(0, joined.shape[0], size=40)
    np.testing.assert_array_equal(stack[idx], joined[idx])
    np.testing.assert_array_equal(stack[np.sort(idx)], joined[np.sort(idx)])
    mask = rng.random(joined.shape[0]) < 0.5
    np.testing.assert_array_equal(stack[mask], joined[mask])
    np.testing.assert_array_equal(np.asarray(stack[6:]), want2)
    np.testing.assert_array_equal(np.asarray(stack.read_only()), joined)
    np.testing.assert_array_equal(loaded, before)  # the base was never written
    # no overlay over an overlay: the moved rows name the first base
    assert over.base is base and RowOverlay.over(over) is over


def test_rows_without_some_are_views_of_the_kept_runs_in_few_parts() -> None:
    import psirag.vector_rows as vector_rows

    rng = np.random.default_rng(8)
    base = rng.standard_normal((300, 4)).astype(np.float32)
    base.flags.writeable = False
    rows: np.ndarray | RowStack = base
    alive = np.arange(300)
    cap = 6
    old_cap = vector_rows.MAX_REMOVAL_PARTS
    vector_rows.MAX_REMOVAL_PARTS = cap
    try:
        for step in range(25):
            n = rows.shape[0]
            gone = np.unique(rng.integers(0, n, size=1 + step % 3))
            rows = without_rows(rows, gone)
            alive = np.delete(alive, gone)
            np.testing.assert_array_equal(np.asarray(rows), base[alive])
            assert isinstance(rows, RowStack) and len(rows.parts) <= cap
        # the first removal's parts are views of the base, not copies
        first = without_rows(base, np.array([10, 11, 200]))
        assert isinstance(first, RowStack) and len(first.parts) == 3
        assert all(np.shares_memory(p, base) for p in first.parts)
        np.testing.assert_array_equal(np.asarray(first), np.delete(base, [10, 11, 200], axis=0))
        assert without_rows(base, np.array([], dtype=np.int64)) is base
        assert np.shares_memory(np.asarray(without_rows(base, np.array([299]))), base)
        with pytest.raises(IndexError):
            without_rows(base, np.array([5, 3]))
        with pytest.raises(IndexError):
            without_rows(base, np.array([300]))
    finally:
        vector_rows.MAX_REMOVAL_PARTS = old_cap


WORDS = sorted({w for lines in TOPICS.values() for line in lines for w in line.split()})


def _docs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = [line for topic in TOPICS.values() for line in topic]
    return [
        " ".join(rng.sample(lines, rng.randint(1, 4))) + f" Marker{i} {rng.choice(WORDS)}."
        for i in range(n)
    ]


def _held(data: IndexData) -> object:
    return IndexData.__dict__["node_vectors"].held(data)


def _state(index: Index) -> tuple[bytes, tuple[str, ...], list[tuple[str, float]]]:
    data = index.data
    hits = [(h.id, h.score) for q in ("volcano lava", "river delta") for h in index.search(q)]
    return np.asarray(data.vector_rows()).tobytes(), tuple(data.abstracts), hits


def _steps(seed: int) -> list[tuple[list[str], list[str]]]:
    """(removed ids, added texts) per step: adds, a removal, an add and a removal at once."""
    pool = _docs(40, seed + 100)
    return [([], pool[0:2]), ([], pool[2:3]), (["3"], []), (["0"], pool[3:6]), ([], pool[6:7])]


def _run(
    index: Index, steps: list[tuple[list[str], list[str]]], join: bool, folder: Path | None
) -> list[tuple[bytes, tuple[str, ...], list[tuple[str, float]]]]:
    seen = []
    for k, (gone, new) in enumerate(steps):
        index.update(gone, new, texts=True)
        if join:  # the vectors as one array, what every update made before the parts
            _ = index.data.node_vectors
            assert isinstance(_held(index.data), np.ndarray)
        if folder is not None:  # saved and loaded between updates
            index.save(folder / str(k))
            index = Index.load(folder / str(k), embedder=HashEmbedder())
        seen.append(_state(index))
    return seen


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("abstracts", ["keywords", "none"])
def test_updates_with_vectors_in_parts_equal_them_joined(
    seed: int, abstracts: str, tmp_path: Path
) -> None:
    config = IndexConfig(max_children=4, chunk_tokens=30, abstracts=abstracts)
    start = _docs(12, seed)
    steps = _steps(seed)

    def fresh() -> Index:
        return Index.build(start, config, texts=True, embedder=HashEmbedder())

    parts = _run(fresh(), steps, join=False, folder=None)
    joined = _run(fresh(), steps, join=True, folder=None)
    saved = _run(fresh(), steps, join=False, folder=tmp_path / "a")
    saved_joined = _run(fresh(), steps, join=True, folder=tmp_path / "b")
    assert parts == joined
    assert saved == saved_joined
    assert [s[:2] for s in saved] == [s[:2] for s in parts]  # vectors and abstracts survive


def test_an_add_copies_no_leaf_row_and_a_search_joins_nothing(tmp_path: Path) -> None:
    config = IndexConfig(max_children=4, chunk_tokens=30)
    index = Index.build(_docs(30, 5), config, texts=True, embedder=HashEmbedder())
    index.save(tmp_path / "i")
    index = Index.load(tmp_path / "i", embedder=HashEmbedder())
    n0 = index.data.n_leaves
    loaded = index.data.vector_rows()
    pool = _docs(6, 9)
    index.add(pool[:1], texts=True)
    first = index.data.vector_rows()
    n_mid = index.data.n_leaves
    assert isinstance(first, RowStack)
    assert np.shares_memory(first.parts[0], loaded)  # the loaded leaves, not a copy
    index.search("volcano lava ash")  # tree, BM25 and dense lists read the parts
    assert _held(index.data) is first
    index.add(pool[1:2], texts=True)
    second = index.data.vector_rows()
    assert isinstance(second, RowStack)
    assert np.shares_memory(second.parts[0], loaded)
    # the second add appended to the first one's buffer
    assert np.shares_memory(second[n0:n_mid], first[n0:n_mid])
    for k in range(2, 6):  # appended in place: the parts do not grow in number
        index.add(pool[k : k + 1], texts=True)
    assert len(index.data.vector_rows().parts) == 3  # type: ignore[attr-defined]
    index.save(tmp_path / "i")  # a save neither joins the parts nor copies the leaves
    saved = index.data.vector_rows()
    assert _held(index.data) is saved and isinstance(saved, RowStack)
    assert np.shares_memory(saved.parts[0], loaded)
    # the joined field is what the parts hold
    np.testing.assert_array_equal(index.data.node_vectors, np.asarray(saved))
    assert isinstance(_held(index.data), np.ndarray)


@pytest.mark.parametrize("change", ["add", "remove"])
def test_an_update_copies_no_kept_inner_row(change: str, tmp_path: Path) -> None:
    """The inner nodes' rows after an update are the loaded rows (not a copy) with the new
    and changed nodes' rows: an overlay that owns only those (issue 24)."""
    config = IndexConfig(max_children=4, chunk_tokens=30)
    index = Index.build(_docs(40, 11), config, texts=True, embedder=HashEmbedder())
    index.save(tmp_path / "i")
    index = Index.load(tmp_path / "i", embedder=HashEmbedder())
    n0 = index.data.n_leaves
    loaded = np.asarray(index.data.vector_rows()[n0:]).copy()
    held = index.data.vector_rows()[n0:]
    index_leaves = index.data.vector_rows()[:n0]
    if change == "add":
        summary = index.add(_docs(1, 12), texts=True)
    else:
        summary = index.remove([index.data.documents[3]])
    data = index.data
    n = data.n_leaves
    inner = data.vector_rows()[n:]
    assert isinstance(inner, RowOverlay)
    if change == "remove":  # the kept leaves' rows are the loaded ones too
        leaves = data.vector_rows()[:n]
        assert isinstance(leaves, RowStack)
        loaded_leaves = (
            index_leaves.parts if isinstance(index_leaves, RowStack) else (index_leaves,)
        )
        assert all(any(np.shares_memory(p, q) for q in loaded_leaves) for p in leaves.parts)
    held_parts = held.parts if isinstance(held, RowStack) else (held,)
    base_parts = inner.base.parts if isinstance(inner.base, RowStack) else (inner.base,)
    assert all(any(np.shares_memory(b, h) for h in held_parts) for b in base_parts)
    # it owns the new rows (zeros until refresh) and the refreshed ones only
    assert 0 < inner.own_rows <= 2 * summary.nodes_refreshed < inner.shape[0]
    kept = inner.index >= 0
    np.testing.assert_array_equal(np.asarray(inner)[kept], loaded[inner.index[kept]])
    index.search("volcano lava ash")
    index.save(tmp_path / "i")
    again = Index.load(tmp_path / "i", embedder=HashEmbedder())
    np.testing.assert_array_equal(
        np.asarray(again.data.vector_rows()), np.asarray(data.vector_rows())
    )


def test_a_load_after_updates_reads_the_saved_rows_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An updated generation (leaves and inner rows in several segments, removed leaves
    tombstoned) opens as views of its saved rows, with the vectors and results the update
    had; past the run limit it is copied into one array, with the same rows."""
    import psirag.storage_format as storage_format
    import psirag.tree.update as tree_update

    config = IndexConfig(max_children=4, chunk_tokens=30)
    index = Index.build(_docs(30, 7), config, texts=True, embedder=HashEmbedder())
    index.save(tmp_path / "i")
    index = Index.load(tmp_path / "i", embedder=HashEmbedder())
    index.update(["4"], _docs(3, 8), texts=True)  # new segments and a tombstone
    index.save(tmp_path / "i")
    want = _state(index)
    loaded = Index.load(tmp_path / "i", embedder=HashEmbedder())
    rows = loaded.data.vector_rows()
    assert isinstance(rows, RowStack) and len(rows.parts) >= 3
    assert all(p.base is not None for p in rows.parts)  # views of what was read, no copy
    assert _state(loaded) == want
    assert isinstance(_held(loaded.data), RowStack)  # the search joined nothing
    joined: list[tuple[int, ...]] = []
    join = RowStack.__array__

    def counted(self: RowStack, dtype: object = None, copy: object = None) -> np.ndarray:
        joined.append(self.shape)
        return join(self, dtype, copy)

    monkeypatch.setattr(RowStack, "__array__", counted)
    monkeypatch.setattr(tree_update, "SCAN_BELOW", 0)  # insertion points by descent, as at scale
    loaded.add(_docs(2, 9), texts=True)  # the first update copies the rows it keeps in runs
    assert joined == []
    monkeypatch.undo()
    monkeypatch.setattr(storage_format, "MAX_STACKED_RUNS", 1)
    copied = Index.load(tmp_path / "i", embedder=HashEmbedder())
    assert isinstance(_held(copied.data), np.ndarray)
    assert _state(copied) == want
