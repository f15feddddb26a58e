"""Fenced lookups of the phrase table's sorted keys (issue 24: a cold first add at 1M chunks):
the same positions as ``np.searchsorted``, the fences saved with a sorted part written whole,
kept by the saves on top of it, absent from older indexes (which search as before), and a
saved fence that does not fit its keys an ``IndexFormatError``, never a wrong answer."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import HashEmbedder
from support import competing_texts as _texts

from psirag import Index
from psirag.abstracts import fence as fence_module
from psirag.abstracts import phrases as phrases_module
from psirag.abstracts.fence import fence_of, fenced_search
from psirag.abstracts.phrase_names import FENCE_ARRAYS
from psirag.abstracts.phrases import PhraseTable
from psirag.config import IndexConfig
from psirag.errors import IndexFormatError
from psirag.storage_format import PHRASES_DIR


def _sorted_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.unique(rng.integers(-(2**40), 2**40, size=2 * n + 8))[:n].astype(np.int64)


def _probes(rng: np.random.Generator, keys: np.ndarray, step: int) -> np.ndarray:
    """Keys present, absent, below the first, above the last and at and beside fence keys."""
    if keys.size == 0:
        return rng.integers(-(2**41), 2**41, size=20)
    fence = keys[::step]
    parts = [
        rng.choice(keys, size=min(40, keys.size)),
        rng.integers(int(keys[0]) - 5, int(keys[-1]) + 5, size=40),
        [keys[0] - 1, keys[0], keys[-1], keys[-1] + 1, -(2**62), 2**62],
        fence,
        fence - 1,
        fence + 1,
    ]
    return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 63, 64, 65, 1000, 4099])
@pytest.mark.parametrize("mapped", [False, True])
def test_a_fenced_search_gives_searchsorted_positions(
    n: int, mapped: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = 8
    monkeypatch.setattr(fence_module, "FENCE_STEP", step)
    monkeypatch.setattr(fence_module, "MAX_BLOCK_SHARE", 0)  # never the plain search
    rng = np.random.default_rng(n)
    keys = _sorted_keys(rng, n)
    if mapped:  # as a loaded index holds it (the pages asked for before they are read)
        np.save(tmp_path / "k.npy", keys)
        keys = np.load(tmp_path / "k.npy", mmap_mode="r")
    fence = fence_of(keys, step)
    assert fence.shape == ((n + step - 1) // step,)
    for _ in range(3):
        probes = _probes(rng, np.asarray(keys), step)
        rng.shuffle(probes)
        got = fenced_search(keys, fence, probes, "test")
        assert np.array_equal(got, np.searchsorted(np.asarray(keys), probes))


def test_a_batch_over_much_of_the_keys_is_searched_the_plain_way_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fence_module, "FENCE_STEP", 4)
    rng = np.random.default_rng(3)
    keys = _sorted_keys(rng, 200)
    probes = _probes(rng, keys, 4)
    got = fenced_search(keys, fence_of(keys, 4), probes, "test")
    assert np.array_equal(got, np.searchsorted(keys, probes))


def test_a_fence_that_is_not_its_keys_is_a_format_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fence_module, "FENCE_STEP", 8)
    monkeypatch.setattr(fence_module, "MAX_BLOCK_SHARE", 0)
    rng = np.random.default_rng(5)
    keys = _sorted_keys(rng, 100)
    fence = fence_of(keys, 8)
    probes = rng.choice(keys, size=30)
    with pytest.raises(IndexFormatError, match="s_key fence"):
        fenced_search(keys, fence[:-1], probes, "s_key")  # wrong length
    for at in (0, 3, fence.size - 1):
        bad = fence.copy()
        bad[at] = keys[at * 8 + 1]  # a key of the array, at the wrong place
        with pytest.raises(IndexFormatError, match="s_key fence"):
            fenced_search(keys, bad, keys[::8].copy(), "s_key")


def _fenced(table: PhraseTable) -> PhraseTable:
    """``table`` with fences made for its counts' sorted parts, as a load gives them."""
    d = table._derived()
    p_head = d.p_sorted.shape[0]
    s_head = d.s_key.shape[0] - (0 if d.s_tail is None else d.s_tail.size)
    p_skey = np.asarray(table.p_key)[np.asarray(d.p_sorted)]
    table._cache["derived"] = replace(
        d,
        p_skey=p_skey,
        p_fence=fence_of(p_skey),
        s_fence=fence_of(np.asarray(d.s_key[:s_head])),
    )
    assert p_skey.shape == (p_head,)
    return table


def test_fenced_lookups_equal_the_plain_ones_with_tails_folds_and_removals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(phrases_module, "TAIL_MAX", 5)  # folds along the walk
    monkeypatch.setattr(fence_module, "FENCE_STEP", 4)
    monkeypatch.setattr(phrases_module, "FENCE_STEP", 4)
    monkeypatch.setattr(fence_module, "MAX_BLOCK_SHARE", 0)
    corpus = _texts(90, 3)
    plain = PhraseTable.build(corpus[:30])
    fenced = _fenced(PhraseTable.build(corpus[:30]))
    rng = np.random.default_rng(9)
    for lo in range(30, 90, 6):
        for t in (plain, fenced):
            d = t._derived()
            assert (d.p_fence is not None) is (t is fenced)
        dp, df = plain._derived(), fenced._derived()
        p_key = np.asarray(plain.p_key)
        s_key = np.asarray(dp.s_key)
        probes = np.concatenate(
            [p_key, p_key + 1, p_key - 1, rng.integers(p_key.min() - 9, p_key.max() + 9, 50)]
        )
        assert np.array_equal(df.phrase_ids(fenced.p_key, probes), dp.phrase_ids(p_key, probes))
        forms = np.concatenate([s_key, s_key + 1, [s_key.min() - 1, s_key.max() + 1]])
        assert np.array_equal(df.form_positions(forms), dp.form_positions(forms))
        plain = plain.add(corpus[lo : lo + 6])
        fenced = fenced.add(corpus[lo : lo + 6])
        if lo % 18 == 0:
            keep = np.arange(plain.n_leaves) % 7 != 3
            plain, fenced = plain.remove(keep), fenced.remove(keep)
    for name in ("p_sorted", "p_df", "s_key", "s_cnt", "s_pid", "p_best"):
        assert np.array_equal(
            np.asarray(getattr(plain._derived(), name)),
            np.asarray(getattr(fenced._derived(), name)),
        )


def _tables(folder: Path) -> dict[str, Any]:
    top = json.loads((folder / "manifest.json").read_text())
    generation = folder / "generations" / f"{int(top['generation']):06d}" / "manifest.json"
    tables: dict[str, Any] = json.loads(generation.read_text())["tables"]
    return tables


def _fences_of(folder: Path) -> set[str]:
    names = {n.split("/", 1)[-1] for n in _tables(folder)}
    return names & set(FENCE_ARRAYS)


def _loaded_fences(ix: Index) -> tuple[bool, bool]:
    table = ix.data.phrase_table
    assert table is not None
    d = table._derived()
    return d.p_fence is not None, d.s_fence is not None


def test_an_index_saved_without_fences_loads_updates_saves_and_gains_them_on_compaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from psirag import storage_format

    emb = HashEmbedder()
    docs = _texts(40, 6)
    cfg = IndexConfig(max_children=4)
    with monkeypatch.context() as m:  # saved as 6ac2299 and older save: no fences
        m.setattr(storage_format, "_save_fences", lambda tables, first, keys: None)
        Index.build(docs[:28], cfg, texts=True, embedder=emb).save(tmp_path / "old")
    assert _fences_of(tmp_path / "old") == set()
    old = Index.load(tmp_path / "old", embedder=emb)
    assert _loaded_fences(old) == (False, False)
    old.add(docs[28:34], texts=True)
    old.save(tmp_path / "old")
    assert _fences_of(tmp_path / "old") == set()  # a delta save does not make them
    again = Index.load(tmp_path / "old", embedder=emb)
    again.add(docs[34:], texts=True)
    _compact(tmp_path / "old")
    assert _fences_of(tmp_path / "old") == set(FENCE_ARRAYS)
    compacted = Index.load(tmp_path / "old", embedder=emb)
    assert _loaded_fences(compacted) == (True, True)
    # the same index built with fences from the start: the same abstracts after the same adds
    fresh = Index.build(docs[:28], cfg, texts=True, embedder=emb)
    fresh.save(tmp_path / "new")
    assert _fences_of(tmp_path / "new") == set(FENCE_ARRAYS)
    new = Index.load(tmp_path / "new", embedder=emb)
    assert _loaded_fences(new) == (True, True)
    plain = Index.load(tmp_path / "new", embedder=emb)
    table = plain.data.phrase_table
    assert table is not None
    d = table._derived()
    table._cache["derived"] = replace(d, p_skey=None, p_fence=None, s_fence=None)
    new.add(docs[28:34], texts=True)
    plain.add(docs[28:34], texts=True)
    assert new.abstracts == plain.abstracts
    new.save(tmp_path / "new")  # a delta save keeps the fences of the sorted part
    assert _fences_of(tmp_path / "new") == set(FENCE_ARRAYS)
    assert _loaded_fences(Index.load(tmp_path / "new", embedder=emb)) == (True, True)


def _compact(folder: Path) -> None:
    from psirag.cli import main

    assert main(["compact", str(folder)]) == 0


def _segment_of(folder: Path, name: str) -> Path:
    table = _tables(folder)[f"{PHRASES_DIR}/{name}"]
    top = json.loads((folder / "manifest.json").read_text())
    generation = folder / "generations" / f"{int(top['generation']):06d}"
    return generation / table["segments"][0][0]


@pytest.mark.parametrize("name", ["p_fence", "s_fence", "p_skey"])
@pytest.mark.parametrize("how", ["shape", "values"])
def test_a_crafted_saved_fence_is_a_format_error_naming_it(
    name: str, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fence_module, "MAX_BLOCK_SHARE", 0)
    monkeypatch.setattr(fence_module, "FENCE_STEP", 4)  # fences of many keys, small index
    monkeypatch.setattr(phrases_module, "FENCE_STEP", 4)
    emb = HashEmbedder()
    docs = _texts(40, 7)
    Index.build(docs[:30], IndexConfig(max_children=4), texts=True, embedder=emb).save(
        tmp_path / "ix"
    )
    path = _segment_of(tmp_path / "ix", name)
    saved = np.load(path)
    if how == "shape":
        crafted = saved[:-1] if saved.size > 1 else np.concatenate([saved, saved])
    else:
        crafted = saved[::-1].copy()  # the right keys, in the wrong order
        if crafted.size == 1:
            crafted = crafted + 1
    path.unlink()
    np.save(path, crafted)
    if crafted.size != saved.size:  # the manifest made to agree, as a crafted index would
        top = json.loads((tmp_path / "ix" / "manifest.json").read_text())
        gen_manifest = (
            tmp_path / "ix" / "generations" / f"{int(top['generation']):06d}" / "manifest.json"
        )
        body = json.loads(gen_manifest.read_text())
        seg = body["tables"][f"{PHRASES_DIR}/{name}"]["segments"][0]
        body["files"][seg[0]]["bytes"] = path.stat().st_size
        body["files"][seg[0]].pop("sha256", None)
        seg[1] = int(crafted.size)
        gen_manifest.write_text(json.dumps(body))
        top["manifest_sha256"] = hashlib.sha256(gen_manifest.read_bytes()).hexdigest()
        (tmp_path / "ix" / "manifest.json").write_text(json.dumps(top))
    ix = Index.load(tmp_path / "ix", embedder=emb)
    named = {
        "p_fence": "p_skey fence|p_fence",
        "s_fence": "s_key fence|s_fence",
        "p_skey": "p_skey",
    }
    with pytest.raises(IndexFormatError, match=named[name]):
        ix.add(docs[30:], texts=True)


def test_will_need_asks_for_runs_of_pages_once_and_none_when_they_are_resident(
    tmp_path: Path,
) -> None:
    from psirag.abstracts.fence import will_need

    values = np.arange(1 << 18, dtype=np.int64)  # 512 pages
    np.save(tmp_path / "v.npy", values)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    at = np.array([5, 6, 7, 100_000, 100_001, 200_000], dtype=np.int64)  # three runs of pages
    assert will_need(values, at, at + 1) == 0  # in memory: nothing to ask
    assert will_need(mapped, at, at + 1) <= 3  # adjacent pages asked in one call
    assert np.array_equal(np.asarray(mapped[at]), at)  # read: the pages are resident now
    assert will_need(mapped, at, at + 1) == 0


def test_the_warm_up_leaves_a_fenced_indexs_lookup_arrays_to_the_add() -> None:
    from psirag.server import read_ahead

    names = [f"seg/{p}000001.npy" for p in read_ahead.ADD_FIRST]
    plain = [read_ahead.add_rank(n) for n in names]
    fenced = [read_ahead.add_rank(n, fenced=True) for n in names]
    last = len(read_ahead.ADD_FIRST)
    assert plain == list(range(last))  # without fences each is read first, in order
    for name, rank in zip(names, fenced, strict=True):
        lookup = name.split("/")[-1].startswith(read_ahead.FENCED_LOOKUPS)
        assert (rank == last) is lookup
    assert fenced[0] == 0 and fenced[1] == 1  # the node vectors and the graph still first
