"""Opening a format-3 index reads no chunk record (issue 24 item 6, issue 23 item 3).

Chunks and abstracts load as :class:`psirag.rows.LazyRows` over memory-mapped segment files;
a record is decoded when its row is first read. These tests count decodes: none at load, a
handful for a search, and the lazy rows equal what reading every record gives, through adds,
removals (tombstones) and compaction. The keyword phrase table is assembled only when an
update uses it. A save after a load and an add still writes only the new rows."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

import psirag.storage_format as storage_format
from psirag import Index, IndexConfig
from psirag.errors import IndexFormatError
from psirag.living import compact_saved
from psirag.rows import LazyRows, MappedLines, line_starts
from psirag.segments import line_starts_file, read_logical, read_physical, tables_of
from psirag.storage import IndexStore

LINES = [line for topic in TOPICS.values() for line in topic]


def _docs(n: int, seed: int, tag: str = "doc") -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(LINES, 3)) + f" {tag}{i} Mount Word{i}." for i in range(n)]


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    folder = tmp_path / "ix"
    config = IndexConfig(max_children=4)
    Index.build(_docs(60, 1), config, texts=True, embedder=HashEmbedder()).save(folder)
    return folder


class Counts:
    """How many chunk records were made into chunks, and phrase tables assembled."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chunks = 0
        self.phrase_tables = 0
        chunk, table = storage_format._chunk, storage_format._load_phrase_table_v3

        def counted_chunk(row: dict[str, Any]) -> Any:
            self.chunks += 1
            return chunk(row)

        def counted_table(*args: Any) -> Any:
            self.phrase_tables += 1
            return table(*args)

        monkeypatch.setattr(storage_format, "_chunk", counted_chunk)
        monkeypatch.setattr(storage_format, "_load_phrase_table_v3", counted_table)


def _eager(folder: Path) -> tuple[list[Any], list[str]]:
    """Every chunk and abstract of the current generation, read record by record."""
    with IndexStore(folder).open() as reader:
        tables = tables_of(reader.manifest, "t")
        chunks = [storage_format._chunk(r) for r in read_logical(reader, tables["chunks"], "t")]
        texts = read_physical(reader, tables["inner_abstracts"], "t")
        order = storage_format.saved_inner_order(reader)
    return chunks, [texts[i] for i in order.tolist()]


def test_a_load_decodes_no_chunk_and_a_search_only_its_results(
    saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = Counts(monkeypatch)
    index = Index.load(saved, embedder=HashEmbedder())
    assert counts.chunks == 0 and counts.phrase_tables == 0
    assert isinstance(index.chunks, LazyRows) and index.chunks.read() == 0
    passages = index.search("volcano eruption lava", k=3)
    assert passages and counts.chunks <= 12, counts.chunks  # results and a few neighbours
    assert index.chunks.read() == counts.chunks
    hits = index.visit("volcano eruption lava", k=3)
    assert hits and counts.chunks < len(index.chunks)
    assert counts.phrase_tables == 0  # a search never assembles the phrase table
    index.add(_docs(2, 9, "more"), texts=True)
    assert counts.phrase_tables == 1  # an update does, once
    assert index.data.phrase_table is not None and index.data.phrase_table.n_leaves == 62


def test_a_record_read_twice_is_one_object_even_from_two_threads(saved: Path) -> None:
    index = Index.load(saved, embedder=HashEmbedder())
    got: list[Any] = []
    start = threading.Barrier(4)

    def read() -> None:
        start.wait()
        got.append(index.chunks[7])

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(c is got[0] for c in got) and index.chunks[7] is got[0]
    assert index.chunks[-1] is index.chunks[len(index.chunks) - 1]
    assert index.chunks[2:5] == tuple(index.chunks[i] for i in range(2, 5))
    with pytest.raises(IndexError):
        index.chunks[len(index.chunks)]


def test_lazy_rows_equal_every_record_through_adds_removals_and_compaction(saved: Path) -> None:
    emb = HashEmbedder()
    steps = [
        lambda ix: ix.add(_docs(5, 2, "added"), texts=True),
        lambda ix: ix.remove([ix.chunks[3].source.document, ix.chunks[40].source.document]),
        lambda ix: ix.add(_docs(3, 3, "again"), texts=True),
        lambda ix: ix.remove([ix.chunks[-1].source.document]),
    ]
    for step in [*steps, None]:
        if step is None:
            compact_saved(saved)
            expected = None
        else:
            index = Index.load(saved, embedder=emb)
            step(index)
            expected = (tuple(index.chunks), tuple(index.abstracts))
            index.save(saved)
        loaded = Index.load(saved, embedder=emb)
        chunks, abstracts = _eager(saved)
        assert isinstance(loaded.chunks, LazyRows) and isinstance(loaded.abstracts, LazyRows)
        assert len(loaded.chunks) == len(chunks) and list(loaded.chunks) == chunks
        assert list(loaded.abstracts) == abstracts
        if expected is not None:  # what loads back is what was saved
            assert loaded.chunks == expected[0] and loaded.abstracts == expected[1]
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["tables"]["chunks"]["n_dead"] == 0  # compacted: the tombstones are gone


def test_removed_rows_stay_invisible(saved: Path) -> None:
    emb = HashEmbedder()
    index = Index.load(saved, embedder=emb)
    gone = index.chunks[10].source.document
    index.remove([gone])
    index.save(saved)
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["tables"]["chunks"]["n_dead"] > 0  # a tombstone, not a rewrite
    loaded = Index.load(saved, embedder=emb)
    assert gone not in {c.source.document for c in loaded.chunks}
    assert len(loaded.chunks) == loaded.tree.n_leaves == len(index.chunks)
    assert all(p.source.document != gone for p in loaded.search(index.chunks[10].text, k=10))


def test_a_save_after_load_and_add_writes_only_the_new_chunk_rows(saved: Path) -> None:
    emb = HashEmbedder()
    index = Index.load(saved, embedder=emb)
    origin = index.data.origin
    assert origin is not None and origin.chunks is index.chunks
    index.add(_docs(4, 5, "fresh"), texts=True)
    n_new = len(index.chunks) - 60
    rows = origin.rows_of(index.data.chunks)
    assert np.array_equal(rows[:60], np.arange(60)) and bool(np.all(rows[60:] == -1))
    index.save(saved)
    gens = sorted((saved / "generations").glob("[0-9]*"))
    old, new = (json.loads((g / "manifest.json").read_text())["tables"]["chunks"] for g in gens)
    assert new["segments"][0] == old["segments"][0]
    assert sum(n for _, n in new["segments"][1:]) == n_new > 0
    first = old["segments"][0][0]
    assert (gens[0] / first).stat().st_ino == (gens[1] / first).stat().st_ino  # linked
    starts = line_starts_file(first)  # kept beside its segment
    assert (gens[0] / starts).stat().st_ino == (gens[1] / starts).stat().st_ino
    for name, _ in new["segments"]:
        assert (gens[1] / line_starts_file(name)).is_file()


def test_rows_derived_from_loaded_ones_are_known_by_row_without_decoding(saved: Path) -> None:
    index = Index.load(saved, embedder=HashEmbedder())
    chunks = index.chunks
    assert isinstance(chunks, LazyRows)
    kept = chunks.take(np.array([0, 5, 9, 30]))
    extra = ["not a loaded chunk"]
    both = kept + extra  # type: ignore[operator]
    assert chunks.read() == 0
    assert chunks.positions_of(both).tolist() == [0, 5, 9, 30, -1]
    assert chunks.read() == 0
    decoded = [chunks[4], chunks[8]]  # plain objects read from the rows are known too
    mixed: list[Any] = [decoded[1], "x", decoded[0]]
    assert chunks.positions_of(mixed).tolist() == [8, -1, 4]
    assert both[1] is chunks[5] and len(both) == 5 and both[4] == "not a loaded chunk"
    # a sequence of chosen rows knows its own rows carried on with more after them
    assert isinstance(kept, LazyRows)
    read = chunks.read()
    assert kept.positions_of(both).tolist() == [0, 1, 2, 3, -1]
    assert kept.positions_of(chunks.take(np.array([9, 0, 30]))).tolist() == [2, 0, 3]
    shuffled = chunks.take(np.array([30, 5, 9]))
    assert isinstance(shuffled, LazyRows)
    assert shuffled.positions_of(shuffled + extra).tolist() == [0, 1, 2, -1]  # type: ignore[operator]
    assert chunks.read() == read  # none decoded


def test_line_starts_are_found_with_numpy_when_a_segment_has_none(tmp_path: Path) -> None:
    rows = [{"id": i, "text": f"line {i}\nwith a newline inside"} for i in range(50)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    derived = MappedLines([(path, 50, None, "t")])
    saved = MappedLines([(path, 50, line_starts(path.read_bytes(), 50, "t"), "t")])
    assert [derived.value(i) for i in range(50)] == rows == [saved.value(i) for i in range(50)]
    short = MappedLines([(path, 49, None, "t")])  # found when a row is first read
    with pytest.raises(IndexFormatError, match="holds 50 lines, the manifest says 49"):
        short.value(0)
    bad = np.arange(51, dtype=np.int64)
    with pytest.raises(IndexFormatError, match="line starts do not fit"):
        MappedLines([(path, 50, bad, "t")])


def test_a_damaged_chunk_record_fails_clearly_when_read(saved: Path) -> None:
    gen = max((saved / "generations").glob("[0-9]*"))
    manifest = json.loads((gen / "manifest.json").read_text())
    name = manifest["tables"]["chunks"]["segments"][0][0]
    raw = (gen / name).read_bytes()
    first_end = raw.index(b"\n")
    broken = b'{"not": "a chunk"' + b" " * (first_end - 17) + raw[first_end:]
    assert len(broken) == len(raw)
    (gen / name).write_bytes(broken)
    index = Index.load(saved, embedder=HashEmbedder())  # sizes agree: no record is read
    assert index.chunks[1].id
    with pytest.raises(IndexFormatError, match="table chunks"):
        index.chunks[0]


def test_the_document_of_a_visited_node_is_found_with_few_chunks_read(tmp_path: Path) -> None:
    """Each node's single document (or None) is the same whether read from a few chunks
    (a fresh load) or from the per-leaf document array."""
    rng = random.Random(4)
    docs = [" ".join(rng.choice(LINES) for _ in range(40)) for _ in range(6)]
    emb = HashEmbedder()
    built = Index.build(docs, IndexConfig(max_children=3), texts=True, embedder=emb)
    built.save(tmp_path / "ix")
    lazy = Index.load(tmp_path / "ix", embedder=emb)
    eager = Index.load(tmp_path / "ix", embedder=emb)
    assert len(eager.data.leaf_documents) == len(eager.chunks)  # derived: read every chunk
    got = [lazy.node_hit(u, 0.0).document for u in range(lazy.tree.n_nodes)]
    assert got == [eager.node_hit(u, 0.0).document for u in range(eager.tree.n_nodes)]
    assert any(d is not None for d in got[lazy.tree.n_leaves :]) and None in got


def test_segments_and_patches_read_alike_one_by_one_and_in_bulk(tmp_path: Path) -> None:
    def write(name: str, rows: list[Any]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    first, second = [{"v": i} for i in range(30)], [{"v": i} for i in range(30, 40)]
    early, late = [{"v": -1}, {"v": -2}], [{"v": -3}]
    lines = MappedLines(
        [(write("a", first), 30, None, "a"), (write("b", second), 10, None, "b")],
        [
            (np.array([3, 35]), write("p1", early), None, "p1"),
            (np.array([35]), write("p2", late), None, "p2"),  # a later patch wins
        ],
    )
    model = first + second
    model[3], model[35] = {"v": -1}, {"v": -3}
    rows = np.array([39, 3, 0, 35, 31, 3])
    assert lines.values(rows) == [model[r] for r in rows.tolist()]
    assert [lines.value(r) for r in range(40)] == model
    lazy = LazyRows(lines, lambda v: v["v"], np.array([1, 3, 35, 39]))
    assert list(lazy) == [1, -1, -3, 39] and lazy.read() == 4


def test_a_saved_origin_finds_its_rows_by_identity_not_equality() -> None:
    """``SavedOrigin.rows_of`` on a plain list (what a save made): each chunk that is the
    very object of a row gets that row, an equal copy or a new chunk gets -1, in any order
    (matched by vectorised ids, not a Python dict of every chunk)."""
    from psirag.index_data import SavedOrigin
    from psirag.types import Chunk, Source

    def chunk(i: int | str) -> Chunk:
        return Chunk(id=f"c{i}", text=f"text {i}", source=Source("d", "", 0, 0, 1))

    loaded = [chunk(i) for i in range(50)]
    origin = SavedOrigin("/nowhere", 3, loaded)
    copy = chunk(7)
    assert copy == loaded[7] and copy is not loaded[7]
    new = chunk("new")
    asked = [loaded[5], loaded[0], new, copy, loaded[49], loaded[5]]
    assert origin.rows_of(asked).tolist() == [5, 0, -1, -1, 49, 5]
    assert origin.rows_of([]).tolist() == []
    assert SavedOrigin("/nowhere", 3, []).rows_of([new]).tolist() == [-1]
