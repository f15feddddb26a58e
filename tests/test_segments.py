"""Index format 3: segment tables shared between generations (issue 24 items 1 and 2).

A table saved after random appends, changes and removals reads back as the plain list it
models, while a save writes files only for what changed; a one-document add to a saved index
writes a small fraction of it and hard-links the rest (appended leaves renumber no inner
node on disk); ``psirag compact`` merges everything into one segment per table and drops
removed rows; a SIGKILL at a random moment of an add, a removal or a compaction leaves the
old or the new generation, whole."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TOPICS, HashEmbedder
from support.processes import fork

from psirag import Index, IndexConfig
from psirag.cli import main
from psirag.errors import IndexFormatError
from psirag.living import UpdateSummary, compact_saved
from psirag.segments import (
    COMPACT_FRACTION,
    Table,
    dead_rows,
    key_order,
    live_rows,
    logical_of,
    physical_of,
    read_logical,
    sorted_rows,
    tables_of,
    values_at,
    write_delta,
    write_table,
)
from psirag.storage import IndexStore, IndexWriter

LINES = [line for topic in TOPICS.values() for line in topic]


# ---------------------------------------------------------------------------- tables
def _save(
    folder: Path, name: str, kind: str, rows: Any, src: np.ndarray | None, compact: bool = False
) -> tuple[Table, set[str]]:
    """One generation holding table ``name``; returns it and the files this save wrote."""
    with IndexWriter(folder) as writer:
        base = None
        if writer.base is not None:
            base = (tables_of(writer.base.manifest, "base")[name], writer.base)
        table, _ = write_table(
            writer,
            name,
            kind,
            rows,
            base=base,
            src=src,
            compact=compact,  # type: ignore[arg-type]
        )
        before = {p for p in writer.staging.rglob("*") if p.is_file()}
        written = {
            p.relative_to(writer.staging).as_posix()
            for p in before
            if p.stat().st_nlink == 1 and p.parent.name == "seg"
        }
        writer.commit({"tables": {name: table.to_json()}})
    return table, written


def _read(folder: Path, name: str) -> Any:
    with IndexStore(folder).open(verify="full") as reader:
        return read_logical(reader, tables_of(reader.manifest, "t")[name], "t")


@pytest.mark.parametrize("kind", ["npy", "jsonl"])
def test_a_table_after_random_changes_reads_back_as_its_model(tmp_path: Path, kind: str) -> None:
    rng = random.Random(5 if kind == "npy" else 6)
    folder = tmp_path / kind
    counter = iter(range(10**6))

    def row() -> Any:
        v = next(counter)
        return [v, v * 0.5, -v] if kind == "npy" else {"v": v, "text": f"row {v}"}

    def rows_of(model: list[Any]) -> Any:
        return np.asarray(model, dtype=np.float64).reshape(-1, 3) if kind == "npy" else model

    model = [row() for _ in range(400)]
    _save(folder, "t", kind, rows_of(model), None)
    max_files = 0
    for step in range(40):
        op = rng.choice(["append", "change", "remove", "mixed", "none"])
        src = np.arange(len(model))
        if op in ("remove", "mixed"):
            gone = set(rng.sample(range(len(model)), rng.randint(1, 6)))
            keep = [i for i in range(len(model)) if i not in gone]
            model = [model[i] for i in keep]
            src = np.asarray(keep)
        if op in ("change", "mixed"):
            for i in rng.sample(range(len(model)), 3):
                model[i] = row()
        added = rng.randint(1, 9) if op in ("append", "mixed") else 0
        model += [row() for _ in range(added)]
        src = np.concatenate([src, np.full(added, -1)])
        table, written = _save(folder, "t", kind, rows_of(model), src)
        got = _read(folder, "t")
        if kind == "npy":
            assert np.array_equal(got, rows_of(model)), step
        else:
            assert got == model, step
        assert table.rows == len(model)
        if op == "none":
            assert not written, written  # nothing changed: nothing written
        if len(table.segments) == 1 and not table.patches and not table.n_dead:
            continue  # compacted (or nothing appended yet)
        max_files = max(max_files, len(table.files()))
    assert max_files <= 16, max_files  # small segments and patches merge


def test_deltas_written_unread_read_back_as_their_model(tmp_path: Path) -> None:
    """write_delta (the save's O(change) path: rows appended, patched and removed as told,
    nothing of the base read) after random changes: the table reads back as its model, each
    row's physical place maps to and from its logical one, values_at reads patched values,
    and a delta too big for the table's fractions is refused with nothing written."""
    rng = random.Random(24)
    folder = tmp_path / "t"
    counter = iter(range(1, 10**6))
    model = [next(counter) for _ in range(1200)]
    _save(folder, "t", "npy", np.asarray(model, dtype=np.int64), None)
    refused = 0
    for step in range(30):
        with IndexStore(folder).open() as reader:
            table = tables_of(reader.manifest, "t")["t"]
            live = live_rows(reader, table, "t")
            dead = dead_rows(reader, table, "t")
        logical = np.arange(len(model))
        assert np.array_equal(physical_of(logical, dead), live), step
        assert np.array_equal(logical_of(live, dead), logical), step
        big = step % 7 == 6  # past COMPACT_FRACTION: refused
        gone = sorted(rng.sample(range(len(model)), 400 if big else rng.randint(0, 5)))
        kept = [i for i in range(len(model)) if i not in set(gone)]
        changed = sorted(rng.sample(kept, rng.randint(0, 4)))
        values = np.asarray([next(counter) for _ in changed], dtype=np.int64)
        added = np.asarray([next(counter) for _ in range(rng.randint(0, 8))], dtype=np.int64)
        with IndexWriter(folder) as writer:
            assert writer.base is not None
            new = write_delta(
                writer,
                writer.base,
                "t",
                table,
                append=added,
                patch_ids=live[changed],
                patch_values=values,
                dead=live[gone],
            )
            if new is None:
                refused += 1
                assert not list(writer.staging.glob("seg/*")), step
                assert big or table.n_dead + table.patched > 200, (step, table)
                continue
            writer.commit({"tables": {"t": new.to_json()}})
        for i, v in zip(changed, values.tolist(), strict=True):
            model[i] = v
        model = [model[i] for i in kept] + added.tolist()
        if step % 10 == 9:  # what a save does now and then: the table as one segment
            _save(folder, "t", "npy", np.asarray(model, dtype=np.int64), None, compact=True)
        with IndexStore(folder).open(verify="full") as reader:
            table = tables_of(reader.manifest, "t")["t"]
            assert read_logical(reader, table, "t").tolist() == model, step
            live = live_rows(reader, table, "t")
            pick = np.asarray(rng.sample(range(len(model)), 20))
            got = values_at(reader, table, live[pick], "t")
            assert got.tolist() == [model[i] for i in pick.tolist()], step
    assert refused >= 3


def test_an_append_writes_only_the_new_rows_and_links_the_base(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    base = np.arange(3000, dtype=np.float32).reshape(1000, 3)
    _save(folder, "t", "npy", base, None)
    more = np.concatenate([base, np.ones((4, 3), dtype=np.float32)])
    table, written = _save(folder, "t", "npy", more, None)
    assert len(written) == 1
    (name,) = written
    assert np.load(folder / "generations" / "000002" / name).shape == (4, 3)
    g1, g2 = (folder / "generations" / g for g in ("000001", "000002"))
    first = table.segments[0][0]
    assert (g1 / first).stat().st_ino == (g2 / first).stat().st_ino
    # a change and a removal: a patch of one row, tombstones of two
    changed = more.copy()
    changed[10] = -1
    src = np.delete(np.arange(1004), [3, 500])
    table, written = _save(folder, "t", "npy", changed[src], src)
    assert table.patched == 1 and table.n_dead == 2 and len(written) == 3
    assert np.array_equal(_read(folder, "t"), changed[src])


def test_changes_beyond_the_fraction_compact_the_table(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    rows = np.arange(4000, dtype=np.int64)
    _save(folder, "t", "npy", rows, None)
    n_remove = int(COMPACT_FRACTION * 4000) + 1
    src = np.arange(n_remove, 4000)
    table, _ = _save(folder, "t", "npy", rows[src], src)
    assert len(table.segments) == 1 and table.n_dead == 0 and table.rows == 4000 - n_remove
    src = np.arange(1, table.rows)
    table, _ = _save(folder, "t", "npy", rows[n_remove + 1 :], src)
    assert table.n_dead == 1
    table, _ = _save(folder, "t", "npy", rows[n_remove + 1 :], None, compact=True)
    assert len(table.segments) == 1 and table.n_dead == 0
    assert np.array_equal(_read(folder, "t"), rows[n_remove + 1 :])


def test_a_malformed_table_entry_is_a_clear_error() -> None:
    good = {"kind": "npy", "segments": [["seg/a.npy", 3]], "patches": [], "dead": None}
    assert Table.from_json(good, "m").rows == 3
    for bad, words in (
        ({**good, "kind": "pickle"}, "kind"),
        ({**good, "segments": []}, "no segment"),
        ({**good, "segments": [["seg/a.npy", -1]]}, "whole number"),
        ({**good, "n_dead": 5, "dead": "seg/d.npy"}, "do not fit"),
        ({**good, "segments": "x"}, "lists of entries"),
    ):
        with pytest.raises(IndexFormatError, match=words):
            Table.from_json(bad, "m")


# ---------------------------------------------------------------------------- an index
def _docs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.sample(LINES, 3)) + f" Mount Word{i} word{i} tag{i % 7}." for i in range(n)
    ]


def _index(folder: Path, n: int = 120) -> Index:
    emb = HashEmbedder()
    index = Index.build(_docs(n, 1), IndexConfig(max_children=4), texts=True, embedder=emb)
    index.save(folder)
    return Index.load(folder, embedder=emb)


def _new_bytes(generation: Path) -> int:
    """Bytes of the files a generation wrote itself (a hard-linked file has other links)."""
    return sum(
        p.stat().st_size
        for p in generation.rglob("*")
        if p.is_file() and p.stat().st_nlink == 1 and p.name not in ("manifest.json", ".readers")
    )


def _same(a: Index, b: Index) -> None:
    assert a.chunks == b.chunks and a.abstracts == b.abstracts
    assert np.array_equal(a.tree.parent, b.tree.parent)
    assert np.array_equal(a.tree.layer, b.tree.layer)
    assert np.asarray(a.node_vectors).tobytes() == np.asarray(b.node_vectors).tobytes()


def test_a_one_document_add_writes_only_what_changed(tmp_path: Path) -> None:
    folder = tmp_path / "ix"
    index = _index(folder)
    g1 = folder / "generations" / "000001"
    total = _new_bytes(g1)
    index.add(["Mount Etna erupted again with lava and ash, said Word9000."], texts=True)
    index.save(folder)
    g2 = folder / "generations" / "000002"
    tables = json.loads((g2 / "manifest.json").read_text())["tables"]
    # the leaves: one appended row each, the base segment shared
    for name in ("leaf_vectors", "chunks"):
        (first, rows), *rest = tables[name]["segments"]
        assert (g1 / first).stat().st_ino == (g2 / first).stat().st_ino
        assert sum(n for _, n in rest) == 1 and rows == 120
    # the inner nodes: ids moved (a node was appended before them), rows did not; only the
    # new leaf's changed ancestors are new rows
    inner = tables["inner_vectors"]
    new_rows = sum(n for _, n in inner["segments"][1:])
    assert 0 < new_rows < (index.tree.n_nodes - index.tree.n_leaves) / 4
    # the inner nodes' arrays (format 5): the rows that changed, not whole files again
    for name in ("inner_order", "inner_parent", "inner_layer", "inner_ids"):
        (first, rows), *rest = tables[name]["segments"]
        assert (g1 / first).stat().st_ino == (g2 / first).stat().st_ino, name
        changed = sum(n for _, n in rest) + sum(n for _, _, n in tables[name]["patches"])
        assert changed <= new_rows + 1, (name, tables[name])
    assert not list((g2 / "tree").glob("*.npy"))
    written = _new_bytes(g2)
    assert written < total / 3, (written, total)
    _same(Index.load(folder, verify="full"), index)


def test_psirag_compact_merges_segments_drops_removed_rows_and_migrates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psirag.rows

    monkeypatch.setattr(psirag.rows, "MAP_MIN_BYTES", 0)  # map every file, however small
    folder = tmp_path / "ix"
    index = _index(folder)
    docs = _docs(140, 2)[120:]
    for i in range(4):
        index.add(docs[i * 5 : i * 5 + 5], texts=True)
        index.remove([index.documents[i * 3]])
        index.save(folder)
        index = Index.load(folder, embedder=HashEmbedder())
    tables = json.loads((folder / "manifest.json").read_text())["tables"]
    assert any(t["n_dead"] or len(t["segments"]) > 1 for t in tables.values())
    capsys.readouterr()
    assert main(["compact", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bytes_after"] < report["bytes_before"]
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, t in manifest["tables"].items():
        assert len(t["segments"]) == 1 and not t["patches"] and not t["n_dead"], name
    compacted = Index.load(folder, verify="full")
    _same(compacted, index)
    assert isinstance(compacted.node_vectors, np.memmap)  # one file in memory order again
    # garbage collection: once the generations before the compaction are collected, no
    # segment written before it is left on disk (the compaction rewrote every table)
    index.save(folder)
    index.save(folder)
    compacted_at = report["generation"]
    assert min(IndexStore(folder).generations()) > compacted_at - 1
    on_disk = {p.name for p in (folder / "generations").rglob("seg/*")}
    made = [int(re.search(r"\.(\d{6})\.", n).group(1)) for n in on_disk]  # type: ignore[union-attr]
    assert made and min(made) >= compacted_at, on_disk


def test_compact_migrates_a_format2_index(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "old"
    shutil.copytree(Path(__file__).parent / "data" / "index_format_v2", folder)
    before = Index.load(folder)
    done = compact_saved(folder)
    assert json.loads((folder / "manifest.json").read_text())["format_version"] == 5
    assert done.generation == 3
    _same(Index.load(folder, verify="full"), before)


# ---------------------------------------------------------------------------- SIGKILL
def test_sigkill_at_random_moments_of_add_remove_and_compact(tmp_path: Path) -> None:
    """Bounded loop: a child adds a document, removes one or compacts, and is killed after a
    random delay; the index then loads (every checksum) as the old or the new generation,
    equal to that operation's result computed in memory here."""
    folder = tmp_path / "ix"
    _index(folder, 60)
    emb = HashEmbedder()
    extra = _docs(200, 3)
    rng = random.Random(24)
    timings: dict[str, float] = {}
    outcomes = {"old": 0, "new": 0}
    rounds = 24
    for i in range(rounds):
        op = ("add", "remove", "compact")[i % 3]
        before = Index.load(folder, embedder=emb)

        def change(ix: Index, op: str = op, i: int = i) -> UpdateSummary:
            if op == "add":
                return ix.add([extra[i]], texts=True)
            return ix.remove([ix.documents[i % len(ix.documents)]])

        expected = Index.load(folder, embedder=emb)
        if op != "compact":
            change(expected)

        def child(change: Callable[[Index], UpdateSummary] = change, op: str = op) -> None:
            if op == "compact":
                compact_saved(folder)
            else:
                Index.update_saved(folder, change, embedder=emb)

        t0 = time.monotonic()
        pid = fork(child)
        if op not in timings:  # first of its kind: measured to the end, not killed
            status = os.waitpid(pid, 0)[1]
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            timings[op] = time.monotonic() - t0
        else:
            time.sleep(rng.uniform(0, 1.2 * timings[op]))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        after = Index.load(folder, embedder=emb, verify="full")
        assert after.sparse.n_docs == len(after.chunks)
        if after.documents == before.documents and after.chunks == before.chunks:
            outcomes["old" if op != "compact" else "new"] += 1
            _same(after, before)
        else:
            outcomes["new"] += 1
            _same(after, expected)
        assert after.search("volcano lava", k=2)
    assert outcomes["old"] > 0 and outcomes["new"] > 0, outcomes
    print(f"\nrandom SIGKILL during add/remove/compact: {rounds} rounds, {outcomes}")


def test_key_sorted_rows_keep_their_place_and_sort_back_on_load() -> None:
    """A table kept in key order stores new keys after the base's rows (wherever they fall in
    key order) and :func:`key_order` sorts them back: a merge of the sorted head."""
    rng = np.random.default_rng(3)
    old = np.sort(rng.choice(10_000, 300, replace=False))
    stored = old.copy()
    for _ in range(20):
        keep = np.sort(rng.choice(old.size, old.size - 3, replace=False))
        fresh = np.setdiff1d(rng.choice(10_000, 5, replace=False), old)
        new = np.union1d(old[keep], fresh)
        plan = sorted_rows(stored, new)
        assert plan is not None
        rows, src = plan
        kept = src >= 0
        assert np.array_equal(stored[src[kept]], new[rows[kept]])  # a kept row is its key's
        assert bool(np.all(np.diff(src[kept]) > 0)) and not bool(np.any(kept[kept.sum() :]))
        stored, old = new[rows], new
        head = int(kept.sum())
        order = key_order(stored, head)
        assert np.array_equal(stored if order is None else stored[order], new)
    assert sorted_rows(None, np.array([1, 1, 2])) is None  # keys not unique: a plain table


def test_a_removal_writes_tombstones_not_the_phrase_lists(tmp_path: Path) -> None:
    folder = tmp_path / "ix"
    index = _index(folder)
    g1, g2 = (folder / "generations" / g for g in ("000001", "000002"))
    total = _new_bytes(g1)
    index.remove([index.documents[7]])
    index.save(folder)
    tables = json.loads((g2 / "manifest.json").read_text())["tables"]
    for name in ("chunks", "leaf_vectors", "keywords/ls_key", "keywords/lp_pid", "keywords/lw"):
        t = tables[name]
        assert t["n_dead"] > 0, name
        (first, _), *rest = t["segments"]
        assert not rest and (g1 / first).stat().st_ino == (g2 / first).stat().st_ino, name
    assert _new_bytes(g2) < total / 3
    _same(Index.load(folder, verify="full"), index)


def test_joined_values_reads_one_value_per_line_or_gives_up() -> None:
    """The whole-file read of a JSON-lines table: one value per line (a last line with or
    without its newline), None where that is not so (a blank line, bad UTF-8, bad JSON),
    so that the caller reads line by line and names the bad one."""
    import json

    from psirag.rows import joined_values

    values = ["w", "é", 'a "q"', 3, None, [1, "x\\ny"], {"k": "v,w"}]
    text = "\n".join(json.dumps(v) for v in values)
    assert joined_values(text.encode()) == values
    assert joined_values((text + "\n").encode()) == values
    assert joined_values(b"") == []
    for bad in (b'"a"\n\n"b"\n', b'"a"\n\n', b"\xff\n", b'"a"\n{\n', b'"a" "b"\n'):
        assert joined_values(bad) is None, bad


@pytest.mark.parametrize("cut", [0, 4])
def test_rows_continued_in_order_keep_their_physical_rows(tmp_path: Path, cut: int) -> None:
    """A ``src`` that is 0..m-1 then new rows (an add's leaf tables) saves the same table,
    files and physical rows as ``src=None`` (row i continues row i) when nothing is cut;
    with the base's last rows dropped, those become removed rows and the new rows follow
    the base's physical rows; both read back as the rows."""
    base = np.arange(120, dtype=np.int64).reshape(-1, 2)
    m = base.shape[0] - cut
    rows = np.concatenate([base[:m], [[-1, -2], [-3, -4], [-5, -6]]])
    rows[7] = [99, 98]  # one changed row: a patch
    got = {}
    for how in ("none", "src"):
        folder = tmp_path / how
        _save(folder, "t", "npy", base, None)
        src = None if how == "none" else np.concatenate([np.arange(m), np.full(3, -1)])
        with IndexWriter(folder) as writer:
            assert writer.base is not None
            old = tables_of(writer.base.manifest, "base")["t"]
            table, physical = write_table(
                writer, "t", "npy", rows, base=(old, writer.base), src=src
            )
            files = sorted(
                p.relative_to(writer.staging).as_posix()
                for p in writer.staging.rglob("*")
                if p.is_file() and p.stat().st_nlink == 1 and p.parent.name == "seg"
            )
            writer.commit({"tables": {"t": table.to_json()}})
        assert np.array_equal(_read(folder, "t"), rows)
        got[how] = (table.to_json(), physical.tolist(), files)
        if how == "src":
            assert table.n_dead == cut
            want = list(range(m)) + [base.shape[0] + k for k in range(3)]
            assert physical.tolist() == want
    if cut == 0:
        assert got["src"] == got["none"]
