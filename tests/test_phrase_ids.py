"""A saved phrase table's per-leaf ids (``lw``: word ids, ``lp_pid``: phrase ids) are not read
whole at load (issue 24: at 1M chunks they are about 480 MB); a load checks sample rows and
every reader checks the rows it reads. An id out of range in a damaged or crafted file is a
clear error (naming the array) where it is read, never a wrong count, phrase or crash."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder
from support import competing_texts as _texts

from psirag import Index
from psirag.abstracts.phrases import ID_SAMPLE_ROWS, PhraseTable, _sample
from psirag.config import IndexConfig
from psirag.errors import IndexFormatError


def _saved(table: PhraseTable, counts: bool = True) -> tuple[list[str], dict[str, np.ndarray]]:
    """What a save writes of ``table`` as writable copies (to be damaged); without the corpus
    counts when ``counts`` is false (a load then derives them from the per-leaf arrays)."""
    stems, vocab = table.vocab() or ([], {})
    saved: dict[str, np.ndarray] = {k: np.array(v) for k, v in table.arrays().items()}
    if counts:
        saved.update({k: np.array(v) for k, v in vocab.items()})
        saved.update({k: np.array(v) for k, v in (table.derived_arrays() or {}).items()})
    return list(stems), saved


def _table() -> PhraseTable:
    table = PhraseTable.build(_texts(160, 4))
    assert table.lp_pid.size > 2 * ID_SAMPLE_ROWS and table.lw.size > 2 * ID_SAMPLE_ROWS
    return table


def _unsampled_row(table: PhraseTable, name: str) -> tuple[int, int]:
    """A row of array ``name`` that a load does not check, and the leaf that holds it."""
    n = getattr(table, name).size
    rows = np.setdiff1d(np.arange(n), _sample(n, ID_SAMPLE_ROWS))
    row = int(rows[rows.size // 2])
    ptr = table.lw_ptr if name == "lw" else table.lp_ptr
    return row, int(np.searchsorted(ptr, row, side="right") - 1)


def _bound(table: PhraseTable, name: str) -> int:
    return len(table.words) if name == "lw" else int(table.p_key.size)


@pytest.mark.parametrize("name", ["lw", "lp_pid"])
@pytest.mark.parametrize("bad", ["negative", "past"])
def test_an_id_out_of_range_at_a_sampled_row_fails_at_load(name: str, bad: str) -> None:
    table = _table()
    stems, saved = _saved(table)
    value = -1 if bad == "negative" else _bound(table, name)
    saved[name][int(_sample(saved[name].size, ID_SAMPLE_ROWS)[3])] = value
    with pytest.raises(ValueError, match=f"{name} holds an id outside"):
        PhraseTable.from_arrays(list(table.words), saved, stems)


@pytest.mark.parametrize("name", ["lw", "lp_pid"])
@pytest.mark.parametrize("bad", ["negative", "past"])
def test_an_id_out_of_range_elsewhere_fails_where_it_is_read(name: str, bad: str) -> None:
    table = _table()
    row, leaf = _unsampled_row(table, name)
    value = -1 if bad == "negative" else _bound(table, name)
    keep = np.ones(table.n_leaves, dtype=bool)
    keep[leaf] = False
    match = f"{name} holds an id outside"

    def damaged(counts: bool) -> PhraseTable:
        stems, saved = _saved(table, counts)
        saved[name][row] = value
        # the load reads sample rows only: this row passes it
        return PhraseTable.from_arrays(list(table.words), saved, stems if counts else None)

    with pytest.raises(IndexFormatError, match=match):  # a removal reads the leaf's rows
        damaged(True).remove(keep)
    with pytest.raises(IndexFormatError, match=match):  # counts derived over every row
        damaged(False)._derived()
    # the rows an update's scoring reads (a node's leaves' phrases), and a removal elsewhere
    # that does not read the damaged row
    loaded = damaged(True)
    others = np.ones(table.n_leaves, dtype=bool)
    others[(leaf + 7) % table.n_leaves] = False
    if name == "lp_pid":
        view = loaded.phrase_view()
        every = np.arange(table.n_leaves, dtype=np.int64)  # counted densely
        for leaves in (np.array([leaf], dtype=np.int64), every):
            with pytest.raises(IndexFormatError, match=match):
                view.node_counts(leaves)
        assert loaded.remove(others).n_leaves == table.n_leaves - 1
    # the undamaged table reads the same rows without complaint
    assert table.phrase_view().node_counts(np.array([leaf], dtype=np.int64))[0].size
    assert table.remove(keep).n_leaves == table.n_leaves - 1


def test_a_crafted_phrase_id_in_a_saved_index_fails_clearly(tmp_path: Path) -> None:
    """Through the files: an index whose ``keywords/lp_pid`` file names a phrase the table
    does not have loads (and searches: they do not read the table), and its update fails with
    an IndexFormatError, the index on disk left as it was."""
    texts = _texts(160, 9)
    config = IndexConfig(max_children=4, chunk_tokens=40, abstracts="keywords")
    index = Index.build(texts, config, texts=True, embedder=HashEmbedder())
    folder = tmp_path / "ix"
    index.save(folder)
    table = index.data.phrase_table
    assert table is not None
    sampled = set(_sample(table.lp_pid.size, ID_SAMPLE_ROWS).tolist())
    for doc in index.data.documents[3:]:  # a row the load does not check
        leaf = int(np.flatnonzero(index.data.document_index.leaves_of([doc]))[0])
        row = int(table.lp_ptr[leaf])
        if row not in sampled and table.lp_ptr[leaf + 1] > row:
            break
    else:
        raise AssertionError("every document's first phrase row is sampled")
    gen = max((folder / "generations").glob("[0-9]*"))
    manifest = json.loads((gen / "manifest.json").read_text())
    segments = manifest["tables"]["keywords/lp_pid"]["segments"]
    assert len(segments) == 1
    ids = np.load(gen / segments[0][0], mmap_mode="r+")
    ids[row] = table.p_key.size + 5
    ids.flush()
    del ids
    before = sorted(p.name for p in (folder / "generations").iterdir())
    loaded = Index.load(folder, embedder=HashEmbedder())
    assert loaded.search("apples")
    with pytest.raises(IndexFormatError, match="lp_pid holds an id outside"):
        loaded.remove([doc])
    assert sorted(p.name for p in (folder / "generations").iterdir()) == before
