"""The first update after a load copies none of the phrase table's corpus counts (issue 24:
a change costs O(change) also in the process that loaded the index). A save writes the
count arrays with spare rows (a hole in the file), a load maps them copy-on-write, and an
add appends and patches in place; the files never change. Appended rows of the sorted
groups become the in-memory tails instead of being sorted in on load, per-leaf entries stay
segment pieces, and a spent surface form is saved as a count of 0 rather than a removed
row, so the next load still maps the table as it is."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import HashEmbedder
from support.counting import record_tables

import psirag.segments as segments
from psirag import Index, IndexConfig
from psirag.errors import IndexFormatError
from psirag.rows import MappedLines
from psirag.storage_format import GROWABLE_TABLES


def _docs(n: int, start: int = 0) -> list[str]:
    topics = ["volcano lava ash Etna", "river delta silt Nile", "bread yeast dough oven"]
    return [
        f"{topics[i % 3]} passage {i} with Word{i} and Name{i % 7} near Place{i % 5}."
        for i in range(start, start + n)
    ]


def _current(folder: Path) -> dict[str, Any]:
    gens = sorted((folder / "generations").iterdir())
    return json.loads((gens[-1] / "manifest.json").read_text())


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.npy"))
    }


def _logical_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables read as one array (:func:`segments.read_logical`), in order."""
    return record_tables(monkeypatch, segments, "read_logical")


def _same_counts(a: Index, b: Index) -> None:
    """The two indexes' phrase tables hold the same corpus counts (restored if unread)."""
    ta, tb = a._data.phrase_table, b._data.phrase_table
    assert ta is not None and tb is not None
    assert ta.restore_saved_counts() and tb.restore_saved_counts()
    da, db = ta.derived_arrays(), tb.derived_arrays()
    assert da is not None and db is not None and set(da) == set(db)
    for name in db:
        assert np.array_equal(np.asarray(da[name]), np.asarray(db[name])), name


def test_a_save_writes_the_count_arrays_with_spare_rows(tmp_path: Path) -> None:
    folder = tmp_path / "ix"
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=HashEmbedder()).save(
        folder
    )
    manifest = _current(folder)
    gen = sorted((folder / "generations").iterdir())[-1]
    for name in sorted(GROWABLE_TABLES):
        table = manifest["tables"][name]
        (file, rows), *_ = table["segments"]
        on_disk = np.load(gen / file, mmap_mode="r")
        assert on_disk.shape[0] == rows + segments.spare_rows(rows), name
        assert not np.asarray(on_disk[rows:]).any(), name  # the room is zeros


def test_the_first_add_after_a_load_grows_the_counts_in_place_and_changes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    before = _digests(folder)
    reads = _logical_reads(monkeypatch)
    index = Index.load(folder, embedder=emb)
    loaded = index._data.phrase_table
    assert loaded is not None
    loaded._derived()
    held = loaded._cache["derived"]
    bases = {name: getattr(held, name).base for name in ("p_df", "s_cnt", "p_best")}
    index.add(["Lava and ash from Etna, said Word9000 near Place9.", "Nile silt"], texts=True)
    after = index._data.phrase_table
    assert after is not None and after is not loaded
    grown = after._cache["derived"]
    for name, base in bases.items():
        # the same (copy-on-write) buffer, grown into its spare rows: nothing was copied
        assert getattr(grown, name).base is base, name
        assert getattr(grown, name).shape[0] >= getattr(held, name).shape[0]
    assert not set(reads) & GROWABLE_TABLES, reads
    assert _digests(folder) == before  # a private map never writes its file
    index.save(folder)
    again = Index.load(folder, verify="full", embedder=emb)
    assert again.abstracts == index.abstracts
    _same_counts(again, index)


def test_removals_keep_spent_forms_as_rows_so_the_next_load_maps_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    steps = (
        lambda ix: ix.add(["Unique Zanzibarword lava of Word9001."], texts=True),
        lambda ix: ix.remove([ix.documents[-1], ix.documents[3]]),  # spends surface forms
        lambda ix: ix.add(["Another Etna passage with Word9002, Zanzibarword."], texts=True),
    )
    memory = Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb)
    memory.save(folder)
    for step in steps:  # the same updates in one process, nothing saved
        step(memory)
    reads: list[str] = []
    for k, step in enumerate(steps):  # and each in a new process: load, update, save
        index = Index.load(folder, embedder=emb)
        if k == len(steps) - 1:
            reads = _logical_reads(monkeypatch)
        step(index)
        index.save(folder)
        if k == 1:
            tables = _current(folder)["tables"]
            for name in sorted(GROWABLE_TABLES):
                assert tables[name]["n_dead"] == 0, name
    assert not set(reads) & GROWABLE_TABLES, reads
    assert index.abstracts == memory.abstracts
    _same_counts(index, memory)


def test_a_compaction_writes_the_counts_again(tmp_path: Path) -> None:
    """A compaction's loaded table had not restored its counts: it used to save none, and
    the next load then derived them over the whole corpus."""
    from psirag.cli import main

    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    assert main(["compact", str(folder)]) == 0
    tables = _current(folder)["tables"]
    for name in sorted(GROWABLE_TABLES):
        assert name in tables, name
    again = Index.load(folder, embedder=emb)
    table = again._data.phrase_table
    assert table is not None and "saved_derived" in table._cache


def _save_table(folder: Path, rows: np.ndarray, src: np.ndarray | None = None) -> None:
    from psirag.storage import IndexWriter

    with IndexWriter(folder) as writer:
        base = None
        if writer.base is not None:
            base = (segments.tables_of(writer.base.manifest, "base")["t"], writer.base)
        table, _ = segments.write_table(writer, "t", "npy", rows, base=base, src=src, spare=True)
        writer.commit({"tables": {"t": table.to_json()}})


def test_growable_rows_equal_the_logical_rows_and_refuse_removed_rows(tmp_path: Path) -> None:
    from psirag.storage import IndexStore

    folder = tmp_path / "ix"
    first = np.arange(10_000, dtype=np.int64) * 3
    _save_table(folder, first)
    grown = np.concatenate([first, np.array([7, 8, 9])])
    grown[[5, 9_000]] = [-1, -2]
    _save_table(folder, grown)
    with IndexStore(folder).open(verify="full") as reader:
        table = segments.tables_of(reader.manifest, "t")["t"]
        assert len(table.segments) == 2 and table.patches
        got = segments.growable_rows(reader, table, "t")
        assert got is not None
        buf, n = got
        assert n == grown.size and buf.shape[0] > n  # grown into the file's spare rows
        assert np.array_equal(buf[:n], grown)
        assert np.array_equal(buf[:n], segments.read_logical(reader, table, "t"))
        buf[:n] = 0  # private: the file keeps what was written
        on_disk = np.load(reader.path(table.segments[0][0]))
        assert np.array_equal(on_disk[: first.size], first)
    _save_table(folder, grown[1:], src=np.arange(1, grown.size))
    with IndexStore(folder).open() as reader:
        table = segments.tables_of(reader.manifest, "t")["t"]
        assert table.n_dead == 1
        assert segments.growable_rows(reader, table, "t") is None


def test_every_value_decodes_each_file_at_once_and_names_a_bad_line(tmp_path: Path) -> None:
    good = tmp_path / "a.jsonl"
    rows = ["word", {"k": [1, 2]}, 3, "with\nnewline"]
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = MappedLines([(good, len(rows), None, "a")])
    assert lines.every_value() == rows
    joined = tmp_path / "b.jsonl"  # lines that join into other values than one per line
    joined.write_text("[1\n2]\n")
    with pytest.raises(IndexFormatError, match="line 1"):
        MappedLines([(joined, 2, None, "b")]).every_value()


def test_a_second_update_from_the_loaded_index_reads_the_counts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first add grew the loaded counts in place; a second update from the same loaded
    index (a retried server write, a benchmark's second step) reads the saved counts again
    instead of deriving them over the corpus, and gets what a fresh load gets."""
    import psirag.abstracts.phrases as phrases

    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    base = Index.load(folder, embedder=emb)
    first = Index.from_data(base.data, embedder=emb)
    first.add(["Lava and ash from Etna, said Word9000 near Place9."], texts=True)
    derived: list[int] = []
    real = phrases._word_stats  # what a derivation over the corpus computes

    def counted(*args: Any) -> Any:
        derived.append(1)
        return real(*args)

    monkeypatch.setattr(phrases, "_word_stats", counted)
    second = Index.from_data(base.data, embedder=emb)
    second.remove([second.documents[5]])
    control = Index.load(folder, embedder=emb)
    control.remove([control.documents[5]])
    assert not derived
    assert second.abstracts == control.abstracts
    _same_counts(second, control)


def test_a_second_update_from_the_loaded_index_restores_the_vocabulary_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loaded table's vocabulary (its words' checks and flags, and the words by stem made
    of it) is restored by the first update only: a second update from the same loaded index
    takes it again, and gets what a fresh load's update gets."""
    import psirag.abstracts.phrases as phrases

    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    base = Index.load(folder, embedder=emb)
    restored: list[int] = []
    real = phrases._Vocab.restore.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, *args: Any) -> Any:
        restored.append(1)
        return real(cls, *args)

    monkeypatch.setattr(phrases._Vocab, "restore", classmethod(counted))
    first = Index.from_data(base.data, embedder=emb)
    first.remove([first.documents[3]])
    second = Index.from_data(base.data, embedder=emb)
    second.remove([second.documents[5]])
    third = Index.from_data(base.data, embedder=emb)
    third.add(["Lava and ash from Etna, said Word9000 near Place9."], texts=True)
    assert len(restored) == 1
    monkeypatch.undo()
    for got, change in ((second, "remove"), (third, "add")):
        control = Index.load(folder, embedder=emb)
        if change == "remove":
            control.remove([control.documents[5]])
        else:
            control.add(["Lava and ash from Etna, said Word9000 near Place9."], texts=True)
        assert got.abstracts == control.abstracts
        _same_counts(got, control)


@pytest.mark.parametrize("gone", [False, True])
def test_a_second_update_maps_the_saved_counts_again_without_copying_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gone: bool
) -> None:
    """A second update from the same loaded index gets the growable count files mapped
    copy-on-write once more (from descriptors opened at load: the generation's files may be
    gone by then), not copies of the rows the first update grew in place; its counts and
    abstracts are what a fresh load's update gives."""
    import shutil

    import psirag.rows as rows
    import psirag.storage_format as storage_format

    monkeypatch.setattr(rows, "MAP_MIN_BYTES", 0)  # the small test files mapped, as big ones
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(90), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    control = Index.load(folder, embedder=emb)
    control.remove([control.documents[5]])
    if gone:  # the saved files read by a copy of the folder, which then goes
        shutil.copytree(folder, tmp_path / "copy")
        folder = tmp_path / "copy"
    base = Index.load(folder, embedder=emb)
    first = Index.from_data(base.data, embedder=emb)
    first.add(["Lava and ash from Etna, said Word9000 near Place9."], texts=True)
    if gone:
        shutil.rmtree(folder)
    handed: list[Any] = []
    real = storage_format._MappedFiles.load_array

    def recorded(self: Any, name: str, **kwargs: Any) -> np.ndarray:
        got = real(self, name, **kwargs)
        if kwargs.get("private"):
            handed.append(got)
        return got

    monkeypatch.setattr(storage_format._MappedFiles, "load_array", recorded)
    second = Index.from_data(base.data, embedder=emb)
    second.remove([second.documents[5]])
    assert len(handed) >= len(GROWABLE_TABLES) - 1  # the counts (p_key: kept by the table)
    assert all(isinstance(a, np.memmap) and a.mode == "c" for a in handed)
    assert second.abstracts == control.abstracts
    _same_counts(second, control)


def test_a_crafted_appended_phrase_id_is_a_clear_error(tmp_path: Path) -> None:
    """The rows saves appended to ``p_sorted`` must be the newest phrase ids (they become the
    tail): a file that names another is refused at the first update, not used."""
    folder = tmp_path / "ix"
    emb = HashEmbedder()
    Index.build(_docs(60), IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    index = Index.load(folder, embedder=emb)
    index.add(["Unique Zanzibarword lava of Word9001."], texts=True)
    index.save(folder)
    table = _current(folder)["tables"]["keywords/p_sorted"]
    assert len(table["segments"]) == 2  # the base and the appended ids
    gen = sorted((folder / "generations").iterdir())[-1]
    appended = gen / table["segments"][1][0]
    ids = np.load(appended)
    appended.unlink()
    np.save(appended, np.zeros_like(ids))  # same size: the ids of old phrases instead
    broken = Index.load(folder, embedder=emb)
    with pytest.raises(IndexFormatError, match="corpus counts"):
        broken.add(["Another passage about Etna."], texts=True)
