"""Incremental updates give what a full recompute gives: the keyword phrase table after random
adds and removes scores every node exactly as a table extracted afresh from the final corpus,
BM25 rescored from cached term counts equals a fresh bm25s build, both survive save/load, and
an index saved without them still loads and updates."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer
from support import HashEmbedder, random_phrase_updates
from support import competing_texts as _texts
from support.trees import random_tree

from psirag import Index
from psirag.abstracts.keywords import keyword_abstracts
from psirag.abstracts.phrases import PhraseTable
from psirag.config import IndexConfig
from psirag.errors import IndexFormatError
from psirag.pipeline import write_abstracts
from psirag.retrieval.bm25 import Postings, SparseIndex, TermCounts
from psirag.storage import IndexStore
from psirag.storage_format import CSR_GROUPS, PHRASES_DIR


def _signature(table: PhraseTable) -> tuple[object, ...]:
    """Everything scoring reads from a table, with stem ids relabelled by first use (ids are
    arbitrary, only their identity counts)."""
    ph = table.phrases()
    k = ph.leaf_phrase.shape[1]
    relabel: dict[int, int] = {}
    stems = [tuple(relabel.setdefault(s, len(relabel)) for s in ph.stems[i]) for i in range(k)]
    content = [tuple(relabel.setdefault(s, len(relabel)) for s in ph.content[i]) for i in range(k)]
    return (
        ph.leaf_phrase.toarray().tolist(),
        [ph.text(i) for i in range(k)],
        stems,
        content,
        ph.n_words.tolist(),
        ph.is_entity.tolist(),
    )


@pytest.mark.parametrize("seed", range(6))
def test_phrase_table_after_random_updates_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    updates = random_phrase_updates(
        rng, _texts(80, seed), start=12, steps=10, min_left=4, drop_share=0.3
    )
    for table, corpus in updates:
        fresh = PhraseTable.build(corpus)
        assert table.n_leaves == len(corpus)
        assert _signature(table) == _signature(fresh)
        tree = random_tree(len(corpus), seed)
        assert keyword_abstracts(corpus, tree, table=table) == keyword_abstracts(corpus, tree)


def test_phrase_table_updates_leave_the_old_table_intact() -> None:
    texts = _texts(20, 9)
    base = PhraseTable.build(texts[:10])
    before = _signature(base)
    base.add(texts[10:])
    base.remove(np.arange(10) % 2 == 0)
    assert _signature(base) == before


def test_phrase_table_round_trips_through_its_arrays() -> None:
    texts = _texts(30, 3)
    table = PhraseTable.build(texts[:20]).remove(np.arange(20) % 3 != 0).add(texts[20:])
    again = PhraseTable.from_arrays(list(table.words), table.arrays())
    assert _signature(again) == _signature(table)
    # the reloaded table keeps updating like the original
    assert _signature(again.add(texts[:3])) == _signature(table.add(texts[:3]))


def _native(texts: list[str]) -> bm25s.BM25:
    """bm25s's own build (what SparseIndex.build did before it kept term counts)."""
    r = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    stemmer = Stemmer.Stemmer("english")
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    r.index(tokens, show_progress=False)
    return r


QUERIES = ["volcano ash lava", "football club London", "bread oven", "Mount Etna film", "zzz"]


@pytest.mark.parametrize("seed", range(4))
def test_bm25_from_updated_counts_equals_a_fresh_build(seed: int) -> None:
    rng = random.Random(seed)
    pool = _texts(60, seed + 100)
    corpus = pool[:10]
    counts = TermCounts.of(corpus)
    nxt = 10
    for _step in range(8):
        if rng.random() < 0.4 and len(corpus) > 3:
            keep = np.array([rng.random() > 0.3 for _ in corpus])
            keep[0] = True
            counts = counts.select(keep)
            corpus = [t for t, k in zip(corpus, keep.tolist(), strict=True) if k]
        else:
            batch = pool[nxt : nxt + rng.randint(1, 5)] or pool[:1]
            nxt += len(batch)
            counts = counts.append(batch)
            corpus = corpus + batch
        ours = SparseIndex.from_counts(counts, corpus)
        ref = SparseIndex(_native(corpus), ours.first_copy)
        assert ours.n_docs == len(corpus)
        for q in [*QUERIES, corpus[-1][:40]]:
            a, b = ours.scores(q), ref.scores(q)
            assert a.dtype == b.dtype == np.float32
            assert np.array_equal(a, b), q  # bit for bit: the same arithmetic
            assert [x.tolist() for x in ours.search(q, k=5)] == [
                x.tolist() for x in ref.search(q, k=5)
            ]


@pytest.mark.parametrize("seed", range(4))
def test_bm25_postings_after_random_adds_and_removes_score_as_a_fresh_build(
    seed: int, tmp_path: Path
) -> None:
    """Counts adjusted by each update (segments, tombstones, merges, compactions), idf at query
    time: every score equals bm25s's fresh build of the same corpus, bit for bit, also after a
    save and load."""
    rng = random.Random(seed)
    pool = _texts(160, seed + 200)
    corpus = pool[:12]
    postings = Postings.of_counts(TermCounts.of(corpus))
    nxt = 12
    segments_seen = set()
    previous: Path | None = None
    for step in range(24):
        if rng.random() < 0.4 and len(corpus) > 4:
            keep = np.array([rng.random() > 0.25 for _ in corpus])
            keep[0] = True
            postings = postings.remove(keep)
            corpus = [t for t, k in zip(corpus, keep.tolist(), strict=True) if k]
        else:
            batch = pool[nxt : nxt + rng.randint(1, 4)] or pool[:2]
            nxt += len(batch)
            postings = postings.add(batch)
            corpus = corpus + batch
        segments_seen.add(len(postings.segments))
        if step % 3 == 2:  # saved on top of the save before, keeping its files by name
            folder = tmp_path / f"s{step}"
            folder.mkdir()
            postings.save(folder, reuse=_linker(previous, folder))
            previous = folder
            postings = Postings.load(folder)
        ours = SparseIndex.from_postings(postings, corpus)
        ref = SparseIndex(_native(corpus), ours.first_copy)
        assert ours.n_docs == len(corpus)
        for q in [*QUERIES, corpus[-1][:40], corpus[0][:30] + " " + corpus[0][:30]]:
            a, b = ours.scores(q), ref.scores(q)
            assert a.dtype == b.dtype == np.float32
            assert np.array_equal(a, b), (step, q)
        fresh = Postings.of_counts(TermCounts.of(corpus))
        by_term = {t: int(postings.df[i]) for t, i in postings.vocab.items()}
        assert {t: by_term[t] for t in fresh.vocab} == {
            t: int(fresh.df[i]) for t, i in fresh.vocab.items()
        }
        assert sum(by_term.values()) == int(fresh.df.sum())  # gone terms count 0
        assert postings.total_len == fresh.total_len
    assert max(segments_seen) > 1  # the adds did make segments, not one rewrite


def _linker(previous: Path | None, folder: Path) -> Callable[[Sequence[str]], bool]:
    """A save's ``reuse``: hard-link the named files from ``previous`` when it has them all."""

    def reuse(names: Sequence[str]) -> bool:
        if previous is None or not all((previous / n).is_file() for n in names):
            return False
        for n in names:
            os.link(previous / n, folder / n)
        return True

    return reuse


def test_index_saves_and_reloads_the_caches(tmp_path: Path) -> None:
    emb = HashEmbedder()
    docs = _texts(30, 4)
    index = Index.build(docs[:20], IndexConfig(max_children=4), texts=True, embedder=emb)
    assert index.data.phrase_table is not None and index.sparse.counts is not None
    index.save(tmp_path / "ix")
    again = Index.load(tmp_path / "ix", embedder=emb)
    assert again.data.phrase_table is not None and again.sparse.counts is not None
    assert _signature(again.data.phrase_table) == _signature(index.data.phrase_table)
    # updating the loaded index and the one in memory gives the same index
    for ix in (index, again):
        ix.add(docs[20:], texts=True)
        ix.remove(["2", "5"])
    assert again.abstracts == index.abstracts
    q = "volcano ash"
    assert np.array_equal(again.sparse.scores(q), index.sparse.scores(q))
    data = again.data
    texts = [c.text for c in data.chunks]
    full = write_abstracts(data.tree, texts, again.config).texts
    n = data.tree.n_leaves
    root = int(data.tree.roots[0])
    assert data.abstracts[root - n] == full[root - n]
    fresh = SparseIndex.build(texts)
    assert np.abs(again.sparse.scores(q) - fresh.scores(q)).max() <= 1e-6


def test_an_index_saved_without_the_caches_loads_and_updates(tmp_path: Path) -> None:
    """An index from before the caches: no keywords/ folder, no term counts in bm25/."""
    emb = HashEmbedder()
    docs = _texts(24, 6)
    config = IndexConfig(max_children=4)
    index = Index.build(docs[:16], config, texts=True, embedder=emb)
    bare = index.data.replace(
        phrase_table=None,
        sparse=SparseIndex(_native([c.text for c in index.chunks]), index.sparse.first_copy),
    )
    Index.from_data(bare, embedder=emb).save(tmp_path / "old")
    files = json.loads((tmp_path / "old" / "manifest.json").read_text())["files"]
    assert not any(f.startswith("keywords/") or f.endswith("doc_tf.npy") for f in files)
    assert "bm25/postings.json" not in files
    old = Index.load(tmp_path / "old", embedder=emb)
    assert old.data.phrase_table is None and old.sparse.counts is None
    old.add(docs[16:], texts=True)
    index.add(docs[16:], texts=True)
    assert old.abstracts == index.abstracts
    assert old.data.phrase_table is not None and old.sparse.counts is not None
    q = "football club"
    assert np.abs(old.sparse.scores(q) - index.sparse.scores(q)).max() <= 1e-6
    old.save(tmp_path / "old")
    files = json.loads((tmp_path / "old" / "manifest.json").read_text())["files"]
    tables = json.loads((tmp_path / "old" / "manifest.json").read_text())["tables"]
    assert "keywords/words" in tables
    assert any(f.startswith("bm25/s.") and f.endswith(".doc_tf.npy") for f in files)


def test_a_damaged_phrase_table_is_a_clear_error(tmp_path: Path) -> None:
    emb = HashEmbedder()
    index = Index.build(_texts(12, 2), IndexConfig(max_children=4), texts=True, embedder=emb)
    index.save(tmp_path / "ix")
    other = Index.build(_texts(14, 3), IndexConfig(max_children=4), texts=True, embedder=emb)
    other.save(tmp_path / "other")
    gen = next((tmp_path / "ix" / "generations").glob("[0-9]*"))
    other_gen = next((tmp_path / "other" / "generations").glob("[0-9]*"))
    # a phrase table of another corpus, with the sizes the manifest expects patched in
    manifest_path = gen / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    other_tables = json.loads((other_gen / "manifest.json").read_text())["tables"]
    for name, table in manifest["tables"].items():
        if not name.startswith("keywords/"):
            continue
        (mine, _), (theirs, rows) = table["segments"][0], other_tables[name]["segments"][0]
        target = gen / mine
        target.unlink()
        shutil.copy(other_gen / theirs, target)
        manifest["files"][mine]["bytes"] = target.stat().st_size
        table["segments"][0][1] = rows
    raw = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    manifest_path.write_text(raw)
    pointer = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    import hashlib

    pointer["manifest_sha256"] = hashlib.sha256(raw.encode()).hexdigest()
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(pointer))
    with pytest.raises(IndexFormatError, match="phrase table"):
        Index.load(tmp_path / "ix", embedder=emb)


def _shown(texts: list[str]) -> set[str]:
    ph = PhraseTable.build(texts).phrases()
    return {ph.text(i) for i in range(ph.leaf_phrase.shape[1])}


def test_a_phrase_is_shown_in_its_most_frequent_form_ties_to_the_first_seen() -> None:
    tie = ["Volcano ash fell near the coast.", "The volcano erupted at night."]
    assert "Volcano" in _shown(tie) and "volcano" not in _shown(tie)
    assert "volcano" in _shown(tie[::-1]) and "Volcano" not in _shown(tie[::-1])
    more = [*tie, "A volcano again, the volcano."]
    assert "volcano" in _shown(more) and "Volcano" not in _shown(more)
    # removing the leaf that showed a form first hands the tie to the other one
    table = PhraseTable.build(tie).remove(np.array([False, True])).add(tie[:1])
    ph = table.phrases()
    assert "volcano" in {ph.text(i) for i in range(ph.leaf_phrase.shape[1])}


def test_a_save_after_an_update_writes_only_the_changed_chunk_rows(tmp_path: Path) -> None:
    """A loaded index updated and saved keeps the base generation's chunk segments (hard
    links) and writes a segment of the new chunks (add) or tombstones of the gone ones
    (remove); what loads back equals the index in memory and a fresh save of it."""
    emb = HashEmbedder()
    docs = _texts(30, 8)
    Index.build(docs[:20], IndexConfig(max_children=4), texts=True, embedder=emb).save(
        tmp_path / "ix"
    )
    for step, change in enumerate(("add", "remove")):
        index = Index.load(tmp_path / "ix", embedder=emb)
        before = len(index.chunks)
        if change == "add":
            index.add(docs[20:], texts=True)
        else:
            index.remove([index.chunks[5].source.document])
        index.save(tmp_path / "ix")
        gens = sorted((tmp_path / "ix" / "generations").glob("[0-9]*"))
        old_m, new_m = (json.loads((g / "manifest.json").read_text()) for g in gens[-2:])
        old_t, new_t = old_m["tables"]["chunks"], new_m["tables"]["chunks"]
        for name, _ in old_t["segments"]:  # the base's segments: the very same files
            assert (gens[-1] / name).stat().st_ino == (gens[-2] / name).stat().st_ino
        if change == "add":
            added = new_t["segments"][len(old_t["segments"]) :]
            assert sum(n for _, n in added) == len(index.chunks) - before > 0
            assert new_t["n_dead"] == old_t["n_dead"]
        else:
            assert new_t["segments"] == old_t["segments"]
            assert new_t["n_dead"] == old_t["n_dead"] + before - len(index.chunks) > 0
        index.save(tmp_path / f"fresh{step}")  # a new folder: written from scratch
        again = Index.load(tmp_path / "ix", embedder=emb)
        fresh = Index.load(tmp_path / f"fresh{step}", embedder=emb)
        assert again.chunks == index.chunks == fresh.chunks
        assert again.abstracts == index.abstracts == fresh.abstracts
        # the phrase table's per-leaf lists: an add appends the new leaves' lengths and
        # entries to the base's (not a pass over every leaf); they load back as in memory
        for ptr_name in CSR_GROUPS:
            lens = (m["tables"][f"{PHRASES_DIR}/{ptr_name}_len"] for m in (old_m, new_m))
            old_len, new_len = lens
            rows = sum(n for _, n in new_len["segments"]) - new_len["n_dead"]
            assert rows == len(index.chunks)
            if change == "add":
                assert new_len["segments"][: len(old_len["segments"])] == old_len["segments"]
        tables = [ix.data.phrase_table for ix in (again, index, fresh)]
        assert all(t is not None for t in tables)
        arrays = [t.arrays() for t in tables if t is not None]
        for name in arrays[1]:
            assert np.array_equal(arrays[0][name], arrays[1][name]), name
            assert np.array_equal(arrays[2][name], arrays[1][name]), name
        assert np.asarray(again.node_vectors).tobytes() == np.asarray(fresh.node_vectors).tobytes()


def test_a_table_whose_arrays_disagree_fails_clearly_on_first_use() -> None:
    table = PhraseTable.build(_texts(10, 1))
    arrays = table.arrays()
    arrays["p_key"] = arrays["p_key"][::-1] + 1  # every phrase key shifted: no candidate matches
    with pytest.raises(IndexFormatError, match="phrase table is inconsistent"):
        PhraseTable.from_arrays(list(table.words), arrays).add(["more text here"])
    with pytest.raises(IndexFormatError, match="word twice"):
        PhraseTable.from_arrays([*table.words[:-1], table.words[0]], table.arrays()).phrases()


def test_a_table_restored_with_its_saved_stems_updates_like_one_that_stems_again() -> None:
    """The stem list and per-word flags a save keeps spare a load the re-stemming: the
    updated tables are the same (and equal a fresh one), and contradicting files fail."""
    texts = _texts(40, 3)
    table = PhraseTable.build(texts[:30])
    saved = table.vocab()
    assert saved is not None
    stems, vocab_arrays = saved
    restored = PhraseTable.from_arrays(list(table.words), {**table.arrays(), **vocab_arrays}, stems)
    plain = PhraseTable.from_arrays(list(table.words), table.arrays())
    assert plain.vocab() is None  # nothing to save before its first use
    fresh = PhraseTable.build(texts)
    assert _signature(restored.add(texts[30:])) == _signature(fresh)
    assert _signature(plain.add(texts[30:])) == _signature(fresh)
    bad = {**vocab_arrays, "w_stem": np.full_like(vocab_arrays["w_stem"], len(stems))}
    with pytest.raises(IndexFormatError, match="saved stems disagree"):
        PhraseTable.from_arrays(list(table.words), {**table.arrays(), **bad}, stems).phrases()


def test_a_saved_index_keeps_the_stems_and_its_first_update_equals_a_build(
    tmp_path: Path,
) -> None:
    emb = HashEmbedder()
    docs = _texts(30, 9)
    config = IndexConfig(max_children=4)
    Index.build(docs[:20], config, texts=True, embedder=emb).save(tmp_path / "ix")
    loaded = Index.load(tmp_path / "ix", embedder=emb)
    assert loaded.data.phrase_table is not None
    assert loaded.data.phrase_table._cache.get("vocab") is not None  # read back, not re-stemmed
    loaded.add(docs[20:], texts=True)
    table = loaded.data.phrase_table
    leaf_texts = [c.text for c in loaded.chunks]
    assert _signature(table) == _signature(PhraseTable.build(leaf_texts))
    assert keyword_abstracts(leaf_texts, loaded.tree, table=table) == keyword_abstracts(
        leaf_texts, loaded.tree
    )


def _bm25_files(folder: Path) -> dict[str, int]:
    """The current generation's BM25 files and their inodes."""
    pointer = json.loads((folder / "manifest.json").read_text())
    gen = folder / "generations" / f"{pointer['generation']:06d}" / "bm25"
    return {p.name: p.stat().st_ino for p in gen.iterdir()}


def test_a_saved_update_writes_only_its_own_bm25_files(tmp_path: Path) -> None:
    """Issue 24: a save keeps every BM25 file the generation before holds (a hard link) and
    writes only the new segment, the tombstones, the new terms and a df patch; scores after
    the adds and removals, saved and loaded, equal a fresh build's; compaction writes one
    segment, whole df and one vocabulary part, scoring the same."""
    emb = HashEmbedder()
    docs = _texts(70, 11)
    folder = tmp_path / "ix"
    Index.build(docs[:60], IndexConfig(max_children=4), texts=True, embedder=emb).save(folder)
    before = _bm25_files(folder)
    index = Index.load(folder, embedder=emb)
    index.add([docs[60] + " zyxwordnew"], texts=True)
    index.save(folder)
    after = _bm25_files(folder)
    new = {name for name, ino in after.items() if before.get(name) != ino}
    kept = set(after) - new
    assert {n for n in before if n.startswith("s.")} <= kept  # the built segment: linked
    assert all(before[n] == after[n] for n in kept)
    assert "postings.json" in new and any(n.startswith("df_patch.") for n in new)
    assert any(n.startswith("terms.") for n in new)  # the new word's part
    assert not any(n.startswith("df.") for n in new)  # df itself kept, patched
    assert len([n for n in new if n.startswith("s.")]) == 8  # one new segment's files
    index = Index.load(folder, embedder=emb)
    index.remove([index.documents[3]])
    index.save(folder)
    removed = _bm25_files(folder)
    written = {name for name, ino in removed.items() if after.get(name) != ino}
    assert written <= {"postings.json"} | {n for n in written if ".dead." in n or "df_patch" in n}
    assert any(".dead." in n for n in written)
    loaded = Index.load(folder, embedder=emb)
    fresh = SparseIndex.build([c.text for c in loaded.chunks])
    for q in [*QUERIES, "zyxwordnew"]:
        assert np.array_equal(loaded.sparse.scores(q), fresh.scores(q)), q
    from psirag.living import compact_saved

    compact_saved(folder)
    compacted = _bm25_files(folder)
    meta = json.loads(
        (
            folder / "generations" / f"{IndexStore(folder).current():06d}" / "bm25/postings.json"
        ).read_text()
    )
    assert len(meta["segments"]) == 1 and meta["segments"][0][2] is None
    assert meta["df"][1] is None and len(meta["terms"]) == 1
    assert not any(".dead." in n or "df_patch" in n for n in compacted)
    again = Index.load(folder, embedder=emb)
    for q in [*QUERIES, "zyxwordnew"]:
        assert np.array_equal(again.sparse.scores(q), fresh.scores(q)), q
