"""The one update path of a saved index (living.update_saved, Index.update_saved): lock, load
the generation on disk, change, save, publish; nothing written when nothing changed or the
change fails, and a format-1 folder reported as such."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import HashEmbedder
from support.corpora import as_format1

from psirag import Index
from psirag.living import UpdateSummary, update_saved
from psirag.storage import IndexStore

FIXTURE = Path(__file__).parent / "data" / "index_format_v2"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "idx"
    shutil.copytree(FIXTURE, out)
    return out


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=16)  # the fixture index's embedder: test:hash-16


def test_update_saved_publishes_the_next_generation(folder: Path, embedder: Any) -> None:
    index, done = Index.update_saved(
        folder,
        lambda ix: ix.add(["Tea is brewed from dried leaves."], texts=True),
        embedder=embedder,
    )
    assert done.generation == 3 and IndexStore(folder).current() == 3
    assert done.summary.changed and not done.from_legacy and done.save_seconds > 0
    assert len(index.documents) == 4 and index.data is done.data
    again = Index.load(folder)
    assert again.documents == index.documents
    assert any("Tea is brewed" in c.text for c in again.chunks)


def test_each_update_builds_on_the_generation_on_disk(folder: Path, embedder: Any) -> None:
    stale = Index.load(folder)  # an older in-memory copy must not be what the next write uses
    Index.update_saved(
        folder, lambda ix: ix.add(["First new text."], texts=True), embedder=embedder
    )
    Index.update_saved(
        folder, lambda ix: ix.add(["Second new text."], texts=True), embedder=embedder
    )
    texts = [c.text for c in Index.load(folder).chunks]
    assert "First new text." in texts and "Second new text." in texts
    assert len(stale.documents) == 3


def generation_entries(folder: Path) -> list[str]:
    """The generation and staging folders (not the store's ``.owner`` token file)."""
    return sorted(n for n in os.listdir(folder / "generations") if n != ".owner")


def test_nothing_changed_writes_nothing(folder: Path) -> None:
    before = generation_entries(folder)
    done = update_saved(folder, lambda data: (data, UpdateSummary()))
    assert done.generation is None and not done.summary.changed
    assert generation_entries(folder) == before
    assert IndexStore(folder).current() == 2


def test_a_failing_change_leaves_the_index_and_releases_the_lock(folder: Path) -> None:
    pointer = (folder / "manifest.json").read_bytes()

    def broken(index: Index) -> UpdateSummary:
        index.remove(index.documents[0])
        raise RuntimeError("the change failed half way")

    with pytest.raises(RuntimeError, match="half way"):
        Index.update_saved(folder, broken)
    assert (folder / "manifest.json").read_bytes() == pointer
    assert generation_entries(folder) == ["000001", "000002"]  # no staging
    index, done = Index.update_saved(folder, lambda ix: ix.remove(ix.documents[0]))
    assert done.generation == 3 and len(index.documents) == 2


def test_no_index_is_a_clear_error(tmp_path: Path) -> None:
    from psirag.errors import IndexFormatError

    with pytest.raises(IndexFormatError, match="holds no index"):
        update_saved(tmp_path / "missing", lambda data: (data, UpdateSummary()))
    assert not (tmp_path / "missing").exists()


def test_a_format1_folder_is_reported_and_migrated(tmp_path: Path, embedder: Any) -> None:
    old = tmp_path / "old"
    shutil.copytree(FIXTURE / "generations" / "000002", old)
    as_format1(old)
    assert IndexStore(old).state() == "legacy"
    _, done = Index.update_saved(
        old, lambda ix: ix.add(["Coffee beans are roasted."], texts=True), embedder=embedder
    )
    assert done.from_legacy and done.generation == 1
    assert IndexStore(old).state() == "index"
    assert len(Index.load(old).documents) == 4


def _fingerprint(index: Index) -> tuple[Any, ...]:
    """What an update could change in place: ids, texts, vectors, tree, BM25 scores."""
    data = index.data
    return (
        data.documents,
        tuple(c.text for c in data.chunks),
        data.node_vectors.tobytes(),
        data.tree.parent.tobytes(),
        data.abstracts,
        [(p.id, round(p.score, 6)) for p in index.search("dried leaves tea", k=5)],
    )


def test_a_base_that_is_the_disk_generation_is_changed_without_loading(
    folder: Path, embedder: Any
) -> None:
    served = Index.load(folder, embedder=embedder)
    before = _fingerprint(served)
    index, done = Index.update_saved(
        folder, lambda ix: ix.add(["Tea is brewed from dried leaves."], texts=True), base=served
    )
    assert not done.loaded and done.generation == 3
    assert _fingerprint(served) == before  # the served object is never changed
    # the result names its generation, so it is the base of the next update, still no load
    assert index.data.origin is not None and index.data.origin.generation == 3
    again, second = Index.update_saved(
        folder, lambda ix: ix.add(["Coffee beans are roasted."], texts=True), base=index
    )
    assert not second.loaded and second.generation == 4
    fresh = Index.load(folder, embedder=embedder)
    assert _fingerprint(fresh) == _fingerprint(again)  # memory equals what a load reads


def test_a_stale_base_falls_back_to_the_generation_on_disk(folder: Path, embedder: Any) -> None:
    served = Index.load(folder, embedder=embedder)
    # another writer (a `psirag add` from the command line) publishes meanwhile
    Index.update_saved(
        folder, lambda ix: ix.add(["Milk is added by some."], texts=True), embedder=embedder
    )
    index, done = Index.update_saved(
        folder, lambda ix: ix.add(["Tea is brewed from dried leaves."], texts=True), base=served
    )
    assert done.loaded and done.generation == 4
    texts = " ".join(c.text for c in Index.load(folder).chunks)
    assert "Milk is added" in texts and "Tea is brewed" in texts
    assert index.documents == Index.load(folder).documents


def test_a_base_from_another_folder_is_not_used(
    folder: Path, tmp_path: Path, embedder: Any
) -> None:
    other = tmp_path / "copy"
    shutil.copytree(folder, other)
    elsewhere = Index.load(other, embedder=embedder)  # same generation number, other folder
    _, done = Index.update_saved(
        folder, lambda ix: ix.add(["Tea is brewed from dried leaves."], texts=True), base=elsewhere
    )
    assert done.loaded
