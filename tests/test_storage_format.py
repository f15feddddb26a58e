"""The storage format module: an index saved before it existed loads, and saving it again
writes the same bytes; the table of files is what a save actually writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from psirag import Index
from psirag.ownership import MARKER
from psirag.storage import FORMAT_VERSION, LEGACY_VERSION, IndexStore
from psirag.storage_format import FILES, PHRASES_DIR, load_index_data, save_index_data

FIXTURE = Path(__file__).parent / "data" / "index_format_v2"
"""Saved by the code at 8da280c (a build of two texts, then an add of a third), before the
format moved out of index.py."""


def _data_files(generation: Path) -> dict[str, bytes]:
    """The data files of a generation (not its manifest, reader list or ownership marker)."""
    return {
        p.relative_to(generation).as_posix(): p.read_bytes()
        for p in sorted(generation.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", ".readers", MARKER)
    }


@pytest.fixture
def old_index(tmp_path: Path) -> Path:
    folder = tmp_path / "old"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_old_index_loads_with_every_field(old_index: Path) -> None:
    index = Index.load(old_index, verify="full")
    assert index.tree.n_leaves == 3 and index.tree.n_nodes == 4
    assert len(index.documents) == 3
    assert index.data.phrase_table is not None and index.data.phrase_table.n_leaves == 3
    assert index.data.lineage["added"] == 1 and index.data.lineage["updates"] == 1
    assert index.data.origin is not None and index.data.origin.generation == 2
    assert index.node_vectors.dtype == np.float32 and index.node_vectors.shape == (4, 16)
    assert any("Etna" in c.text for c in index.chunks)
    assert index.abstracts and all(isinstance(a, str) and a for a in index.abstracts)


def test_resave_writes_the_same_bytes_as_the_old_code(old_index: Path, tmp_path: Path) -> None:
    """Every data file a fresh save writes equals the one the old code wrote, and the
    manifest bodies agree but for the version that wrote them."""
    index = Index.load(old_index)
    out = tmp_path / "new"
    index.save(out)
    old_gen = old_index / "generations" / "000002"
    new_gen = out / "generations" / "000001"
    assert _data_files(new_gen) == _data_files(old_gen)
    old_m = json.loads((old_gen / "manifest.json").read_text())
    new_m = json.loads((new_gen / "manifest.json").read_text())
    for m in (old_m, new_m):
        for key in ("psirag_version", "generation", "created", "base_generation"):
            m.pop(key, None)
    assert new_m == old_m


def test_save_on_the_loaded_generation_links_every_unchanged_file(old_index: Path) -> None:
    index = Index.load(old_index)
    index.save(old_index)
    two, three = (old_index / "generations" / g for g in ("000002", "000003"))
    files = _data_files(three)
    assert files == _data_files(two)
    for name in files:  # unchanged: hard links to generation 2's files
        assert (three / name).stat().st_ino == (two / name).stat().st_ino, name


def test_the_table_names_every_file_a_save_writes(old_index: Path) -> None:
    written = set(_data_files(old_index / "generations" / "000002"))
    tops = {f.name for f in FILES if f.kind != "folder"}
    folders = {f.name for f in FILES if f.kind == "folder"} | {PHRASES_DIR}
    for name in written:
        assert name in tops or name.split("/")[0] in folders, name
    assert {f.name for f in FILES if f.required} <= {n.split("/")[0] for n in written} | tops
    assert all(LEGACY_VERSION <= f.since <= FORMAT_VERSION for f in FILES)


def test_load_and_save_index_data_round_trip(old_index: Path, tmp_path: Path) -> None:
    store = IndexStore(old_index)
    data = store.read(load_index_data)
    out = tmp_path / "copy"
    with IndexStore(out).begin() as writer:
        number = save_index_data(writer, data)
    assert number == 1
    again = IndexStore(out).read(load_index_data)
    assert again.chunks == data.chunks and again.abstracts == data.abstracts
    assert np.array_equal(again.tree.parent, data.tree.parent)
    assert again.lineage == data.lineage
