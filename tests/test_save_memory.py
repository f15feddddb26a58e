"""A whole save holds little more than what it writes (issue 24 item 6: a 1M-chunk build,
save included, in 8 GiB): a phrase table's entry arrays held in pieces are written piece after
piece, never joined; the corpus counts are made one array at a time as they are written; a
JSON-lines segment's line starts are found a block at a time. The files are the same as
before: what a load reads back equals the table in memory."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import HashEmbedder

import psirag.heap as heap
import psirag.rows as rows
from psirag import Index, IndexConfig
from psirag.errors import IndexFormatError
from psirag.rows import ArrayParts, file_line_starts, line_starts
from psirag.storage import IndexStore, IndexWriter


class _Parts(ArrayParts):
    __slots__ = ("_parts", "dtype")

    def __init__(self, parts: list[np.ndarray], dtype: Any) -> None:
        self._parts = parts
        self.dtype = np.dtype(dtype)

    def parts(self) -> list[np.ndarray]:
        return self._parts


def _docs(n: int) -> list[str]:
    topics = ["volcano lava ash Etna", "river delta silt Nile", "bread yeast dough oven"]
    return [
        f"{topics[i % 3]} passage {i} with Word{i} and Name{i % 7} near Place{i % 5}, "
        f"Term{i % 11} Kind{i % 13} of Sort{i % 17}."
        for i in range(n)
    ]


def _many_phrases(n: int) -> list[str]:
    """Passages whose phrases are mostly their own (the corpus counts grow with the corpus)."""
    rng = np.random.default_rng(5)
    words = [f"w{k}" for k in range(4000)]
    return [
        " ".join(f"{a.capitalize()} {b} {c}." for a, b, c in rng.choice(words, (6, 3)).tolist())
        for _ in range(n)
    ]


@pytest.mark.parametrize("spare", [0, 5])
def test_parts_are_saved_as_the_joined_array(tmp_path: Path, spare: int) -> None:
    parts = [np.arange(4, dtype=np.int32), np.arange(10, 13, dtype=np.int64), np.array([7])]
    writer = IndexStore(tmp_path / "ix").begin()
    try:
        writer.save_array("joined.npy", np.concatenate(parts).astype(np.int64), spare_rows=spare)
        writer.save_array("parts.npy", _Parts(parts, np.int64), spare_rows=spare)
        a, b = (
            (writer.staging / "joined.npy").read_bytes(),
            (writer.staging / "parts.npy").read_bytes(),
        )
        assert a == b
        got = np.load(writer.staging / "parts.npy")
        assert got.dtype == np.int64 and got.shape == (8 + spare,)
        assert got[:8].tolist() == [0, 1, 2, 3, 10, 11, 12, 7] and not got[8:].any()
    finally:
        writer.abort()


def test_line_starts_are_found_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b'{"a": 1}\n"two"\n[3, 4, 5]\n{}\n"a longer row than a block"\n'
    path = tmp_path / "rows.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(rows, "LINE_BLOCK_BYTES", 7)  # rows cross blocks
    got = file_line_starts(path, 5, str(path))
    assert got.tolist() == line_starts(data, 5, str(path)).tolist()
    with pytest.raises(IndexFormatError, match="holds 5 lines, the manifest says 4"):
        file_line_starts(path, 4, str(path))
    path.write_bytes(data + b"no newline")
    with pytest.raises(IndexFormatError, match="rebuild it"):
        file_line_starts(path, 5, str(path))


def test_a_whole_save_writes_pieces_without_joining_them(tmp_path: Path) -> None:
    """An add to a loaded index holds the entry arrays as pieces (the mapped saved arrays and
    the new entries); a save to a new folder writes every table whole, from the pieces, which
    stay pieces, and a load of it reads the same table."""
    emb = HashEmbedder()
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=emb).save(
        tmp_path / "a"
    )
    index = Index.load(tmp_path / "a", embedder=emb)
    index.add(_docs(75)[60:], texts=True)
    table = index.data.phrase_table
    assert table is not None
    pieced = [
        n for n in ("lw", "ls_key", "ls_cnt", "lp_pid") if isinstance(getattr(table, n), ArrayParts)
    ]
    assert pieced, "the add held no entry array in pieces: nothing to check"
    counts = [len(getattr(table, n).parts()) for n in pieced]
    assert max(counts) > 1
    index.save(tmp_path / "b")
    assert [len(getattr(table, n).parts()) for n in pieced] == counts  # not joined
    loaded = Index.load(tmp_path / "b", embedder=emb).data.phrase_table
    assert loaded is not None
    for name, array in table.arrays().items():
        assert np.array_equal(np.asarray(loaded.arrays()[name]), array), name


def test_a_whole_save_makes_the_corpus_counts_one_array_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the save holds more (traced) while it writes the corpus counts than before it
    made the first: about two of them at most (the phrase ids by key and their keys), not
    all of them and their copies at once."""
    emb = HashEmbedder()
    index = Index.build(_many_phrases(800), IndexConfig(max_children=4), texts=True, embedder=emb)
    table = index.data.phrase_table
    assert table is not None
    derived = table.derived_arrays()
    assert derived is not None
    sizes = {name: np.asarray(derived[name]).nbytes for name in derived}
    del derived
    held: dict[str, int] = {}
    save_array = IndexWriter.save_array

    def traced(self: IndexWriter, name: str, *args: Any, **kwargs: Any) -> None:
        file = name.rsplit("/", 1)[-1]  # seg/keywords.<array>.<generation>.npy
        if file.startswith("keywords."):
            held[file.split(".")[1]] = tracemalloc.get_traced_memory()[0]
        save_array(self, name, *args, **kwargs)

    monkeypatch.setattr(IndexWriter, "save_array", traced)
    tracemalloc.start()
    try:
        index.save(tmp_path / "ix")
    finally:
        tracemalloc.stop()
    before = held["stems"]  # (the stems' line starts: the last file before the counts)
    more = max(held[name] for name in sizes) - before
    print({k: v - before for k, v in held.items()})
    assert sizes["p_sorted"] > 100_000  # big enough to see
    assert more <= 2.5 * max(sizes.values()) < 0.6 * sum(sizes.values()), (more, sizes)


def _resident_file_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) / 1024
    pytest.skip("no RssFile in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's MADV_PAGEOUT")
def test_a_spilled_array_leaves_memory_once_a_save_wrote_it(tmp_path: Path) -> None:
    """A big build's arrays spilled to a mapped temporary file (:func:`psirag.heap.mapped_copy`)
    are paged in when a save reads them; once written they are paged out again, block by
    block, and their values stay what they were."""
    values = np.arange(24 << 20, dtype=np.int64)  # 192 MiB
    spilled = heap.mapped_copy(values)
    if not isinstance(spilled, np.memmap):
        pytest.skip("no temporary file to spill to")
    del values
    assert int(spilled[::4096].sum()) > 0  # every page read once
    read = _resident_file_mib()
    writer = IndexStore(tmp_path / "ix").begin()
    try:
        writer.save_array("spilled.npy", spilled)
        if not heap.page_out_spilled(spilled[:1]):
            pytest.skip("this system does not page out on request")
        after = _resident_file_mib()
        got = np.load(writer.staging / "spilled.npy", mmap_mode="r")
        assert got.shape == spilled.shape and int(got[-1]) == (24 << 20) - 1
    finally:
        writer.abort()
    assert read - after > 96, (read, after)  # most of its 192 MiB left this process
    assert int(spilled[12345678]) == 12345678 and int(spilled[-1]) == (24 << 20) - 1
