"""Texts added without ids get numbered ids ("0", "1", ...); one whose number is taken gets
the next free number. The index keeps its highest number in its lineage (``last_number``),
so that number costs no list of every document id; ids stay unique after adds, removals, a
save and a load, and a removed number is never given again."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

from psirag import Index
from psirag.config import IndexConfig
from psirag.index_data import LAST_NUMBER, last_number, numbered_id
from psirag.living import _Left

LINES = [line for topic in TOPICS.values() for line in topic]


def _texts(n: int, start: int) -> list[str]:
    return [f"{LINES[(start + i) % len(LINES)]} Marker{start + i}." for i in range(n)]


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times an update listed every document id."""
    calls: list[int] = []
    every_id = _Left.every_id

    def counted(self: _Left) -> set[str]:
        calls.append(1)
        return every_id(self)

    monkeypatch.setattr(_Left, "every_id", counted)
    return calls


def _unique(index: Index) -> list[str]:
    ids = list(index.documents)
    assert len(ids) == len(set(ids)), ids
    return ids


def test_numbered_ids_stay_unique_without_listing_the_ids(
    tmp_path: Path, listings: list[int]
) -> None:
    config = IndexConfig(max_children=4)
    index = Index.build(_texts(6, 0), config, texts=True, embedder=HashEmbedder())
    assert sorted(index.documents, key=int) == ["0", "1", "2", "3", "4", "5"]
    assert index.data.lineage[LAST_NUMBER] == 5

    summary = index.add(_texts(2, 10), texts=True)  # "0" and "1" are taken
    assert summary.renamed == {"0": "6", "1": "7"}
    assert index.data.lineage[LAST_NUMBER] == 7

    index.remove(["7", "2"])  # the highest number goes: it is not given again
    assert index.data.lineage[LAST_NUMBER] == 7
    summary = index.add(_texts(1, 20), texts=True)
    assert summary.renamed == {"0": "8"}

    index.save(tmp_path / "index")
    loaded = Index.load(tmp_path / "index", embedder=HashEmbedder())
    assert loaded.data.lineage[LAST_NUMBER] == 8
    summary = loaded.add(_texts(3, 30), texts=True)  # "2" was removed: it is free again
    assert summary.renamed == {"0": "9", "1": "10"}
    ids = _unique(loaded)
    assert sorted(ids, key=int) == ["0", "1", "2", "3", "4", "5", "6", "8", "9", "10"]
    assert listings == []  # the count answered: no list of every id


def test_a_number_given_explicitly_moves_the_count(listings: list[int]) -> None:
    from psirag.ingest import documents_from_strings

    index = Index.build(
        _texts(3, 0), IndexConfig(max_children=4), texts=True, embedder=HashEmbedder()
    )
    index.add(documents_from_strings(_texts(1, 40), ids=["41"]))
    assert index.data.lineage[LAST_NUMBER] == 41
    summary = index.add(_texts(1, 50), texts=True)  # "0" is taken: past 41
    assert summary.renamed == {"0": "42"}
    _unique(index)
    assert listings == []


def test_an_index_saved_before_the_count_lists_the_ids_once(
    tmp_path: Path, listings: list[int]
) -> None:
    index = Index.build(
        _texts(5, 0), IndexConfig(max_children=4), texts=True, embedder=HashEmbedder()
    )
    lineage = {k: v for k, v in index.data.lineage.items() if k != LAST_NUMBER}
    old = Index.from_data(index.data.replace(lineage=lineage), embedder=HashEmbedder())
    old.save(tmp_path / "index")
    loaded = Index.load(tmp_path / "index", embedder=HashEmbedder())
    assert LAST_NUMBER not in loaded.data.lineage

    summary = loaded.add(_texts(2, 10), texts=True)
    assert summary.renamed == {"0": "5", "1": "6"}
    assert len(listings) == 1  # once, for the first number; the second came from the count
    assert loaded.data.lineage[LAST_NUMBER] == 6
    loaded.add(_texts(1, 20), texts=True)
    assert len(listings) == 1
    assert loaded.data.lineage[LAST_NUMBER] == 7
    _unique(loaded)


def test_an_add_that_renames_nothing_keeps_an_unknown_count_unknown(
    listings: list[int],
) -> None:
    from psirag.ingest import documents_from_strings

    index = Index.build(
        _texts(3, 0), IndexConfig(max_children=4), texts=True, embedder=HashEmbedder()
    )
    lineage = {k: v for k, v in index.data.lineage.items() if k != LAST_NUMBER}
    old = Index.from_data(index.data.replace(lineage=lineage), embedder=HashEmbedder())
    old.add(documents_from_strings(_texts(1, 60), ids=["7"]))
    # "7" may not be the highest number of the index: the count is not guessed
    assert LAST_NUMBER not in old.data.lineage
    assert listings == []


@pytest.mark.parametrize(
    ("doc_id", "number"), [("17", 17), ("007", 7), ("x17", None), ("", None), ("١٢", None)]
)
def test_numbered_id(doc_id: str, number: int | None) -> None:
    assert numbered_id(doc_id) == number


def test_last_number() -> None:
    assert last_number(["a", "3", "12", "b7"]) == 12
    assert last_number(["a"]) == -1
