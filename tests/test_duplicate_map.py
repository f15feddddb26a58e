"""BM25's duplicate map is extended by an add's new texts only, and equals a fresh map after
any sequence of adds and removals."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder
from support.counting import count_calls

import psirag.retrieval.duplicates as duplicates
from psirag import Index, IndexConfig
from psirag.retrieval.duplicates import DuplicateMap, first_copy_of

WORDS = [f"w{i}" for i in range(60)]


def _texts(rng: random.Random, n: int) -> list[str]:
    base = [" ".join(rng.sample(WORDS, 12)) for _ in range(n)]
    # some copies equal up to layout: a heading rule, case, spacing
    return [
        t if rng.random() < 0.7 else rng.choice(base[: i + 1]).upper() + "\n=====\n"
        for i, t in enumerate(base)
    ]


def test_extended_equals_a_fresh_map() -> None:
    rng = random.Random(5)
    texts = _texts(rng, 300)
    grown = DuplicateMap.of(texts[:100]).extended(texts[:180]).extended(texts)
    assert np.array_equal(grown.first_copy, first_copy_of(texts))
    with pytest.raises(ValueError, match="texts for a duplicate map"):
        grown.extended(texts[:10])


def test_updates_keep_the_map_equal_and_normalise_only_new_texts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    config = IndexConfig(chunk_tokens=40, split_records=False)
    index = Index.build(_texts(rng, 120), config, embedder=HashEmbedder(), texts=True)
    calls = count_calls(monkeypatch, duplicates, "duplicate_key")
    for step in range(6):
        before = calls.n
        if step == 3:
            index.remove(index.documents[:5])
        else:
            new = [*_texts(rng, 4), index.chunks[rng.randrange(len(index.chunks))].text.lower()]
            index.add(new, texts=True)
        made = calls.n - before
        texts = [c.text for c in index.chunks]
        assert np.array_equal(index.sparse.first_copy, first_copy_of(texts)), step
        if step == 3:  # a removal: the kept texts' map from their hashes, no text mapped
            assert made == 0, (step, made)
        else:  # an add: its new texts (and a hash match) only
            assert made <= 3 * 5, (step, made)


def test_an_add_of_stopwords_only_to_a_searchable_index_is_accepted() -> None:
    """The corpus-wide "nothing to index" check looks at the whole corpus, not at an add's own
    texts: a second add of stopwords only (the map then extends) must not be refused."""
    index = Index.build(
        ["volcano eruption in Sicily", "river delta sediments"],
        IndexConfig(),
        embedder=HashEmbedder(),
        texts=True,
    )
    index.add(["the a of"], texts=True)
    index.add(["and the"], texts=True)
    assert len(index.chunks) == 4
    assert np.array_equal(index.sparse.first_copy, first_copy_of([c.text for c in index.chunks]))


def test_a_loaded_index_adds_without_mapping_every_text_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key hashes are saved with the index: the first add after a load normalises its own
    texts (and a text whose hash it meets), not the corpus, and the map equals a fresh one."""
    rng = random.Random(11)
    config = IndexConfig(chunk_tokens=40, split_records=False)
    built = Index.build(_texts(rng, 150), config, embedder=HashEmbedder(), texts=True)
    built.save(tmp_path / "ix")
    index = Index.load(tmp_path / "ix", embedder=HashEmbedder())
    assert index.sparse.duplicates is not None
    assert np.array_equal(index.sparse.duplicates.hashes, built.sparse.duplicates.hashes)
    calls = count_calls(monkeypatch, duplicates, "duplicate_key")
    copy = index.chunks[7].text.upper() + "\n-----\n"  # a copy up to layout of a saved text
    index.add([*_texts(rng, 3), copy], texts=True)
    assert calls.n <= 2 * 4, calls.n
    texts = [c.text for c in index.chunks]
    assert np.array_equal(index.sparse.first_copy, first_copy_of(texts))
    assert index.sparse.first_copy[-1] == index.sparse.first_copy[7]
    index.save(tmp_path / "ix")  # saved again: the hashes follow the leaves
    again = Index.load(tmp_path / "ix", embedder=HashEmbedder())
    assert again.sparse.duplicates is not None
    assert np.array_equal(again.sparse.duplicates.hashes, index.sparse.duplicates.hashes)


def test_colliding_hashes_are_told_apart_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(duplicates, "_key_hash", lambda key: 7)  # every key collides
    texts = _texts(random.Random(3), 80)
    monkeypatch.undo()
    fresh = first_copy_of(texts)
    monkeypatch.setattr(duplicates, "_key_hash", lambda key: 7)
    grown = DuplicateMap.of(texts[:30]).extended(texts[:55]).extended(texts)
    assert np.array_equal(grown.first_copy, fresh)
    assert np.array_equal(DuplicateMap.of(texts).first_copy, fresh)


def test_a_removal_maps_from_hashes_unless_two_keys_share_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = _texts(random.Random(9), 120)
    keep = np.array([i % 7 not in (0, 3) for i in range(len(texts))])
    kept_texts = [t for t, k in zip(texts, keep, strict=True) if k]
    got = DuplicateMap.of(texts).kept(keep)
    assert got is not None
    assert np.array_equal(got.first_copy, first_copy_of(kept_texts))
    assert got.extended([*kept_texts, kept_texts[0].upper()]).first_copy[-1] == 0
    monkeypatch.setattr(duplicates, "_key_hash", lambda key: 7)  # every key collides
    collided = DuplicateMap.of(texts).kept(keep)  # groups come from the keys' first copies
    assert np.array_equal(collided.first_copy, got.first_copy)
    grown = collided.extended([*kept_texts, kept_texts[0].upper(), "a text of its own"])
    assert grown.first_copy[-2] == 0 and grown.first_copy[-1] == len(kept_texts) + 1


def test_removals_keep_the_groups_of_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Random removals, also of first copies whose later copies stay, and of whole groups,
    equal the map made anew from the kept texts, without sorting the corpus's hashes."""
    rng = random.Random(5)
    base = _texts(rng, 40)
    texts = [rng.choice(base) if rng.random() < 0.5 else t for t in _texts(rng, 300)]
    dmap = DuplicateMap.of(texts)
    assert (dmap.first_copy != np.arange(len(texts))).sum() > 50  # many copies
    sorts = count_calls(monkeypatch, np, "unique")
    for _ in range(30):
        keep = np.array([rng.random() > 0.1 for _ in texts])
        keep[0] = False  # a first copy with later copies
        texts = [t for t, k in zip(texts, keep, strict=True) if k]
        dmap = dmap.kept(keep)
        assert np.array_equal(dmap.first_copy, DuplicateMap.of(texts).first_copy)
    assert sorts.n <= 30  # only the orphaned groups, one small sort per removal


def test_a_removal_that_leaves_nothing_to_index_is_refused() -> None:
    """The map of the kept texts comes from hashes, but the corpus-wide check still runs on
    what a removal leaves."""
    from psirag.errors import InputError

    index = Index.build(
        ["volcano eruption in Sicily", "the a of"],
        IndexConfig(),
        embedder=HashEmbedder(),
        texts=True,
    )
    with pytest.raises(InputError, match="nothing to index"):
        index.remove([index.documents[0]])
