"""The tests' small corpora and the fixture indexes built from them."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from psirag.abstracts.phrases import PhraseTable
from psirag.config import IndexConfig
from psirag.index import Index
from psirag.ingest import documents_from_strings
from psirag.storage import IndexStore, sha256_file
from support.embedders import HashEmbedder

TOPICS = {
    "volcanoes": [
        "Mount Etna is an active volcano on the east coast of Sicily.",
        "Lava from a volcano erupts as molten rock and ash clouds.",
        "Volcanic eruptions release ash, lava and sulfur gases.",
        "Vesuvius destroyed Pompeii with ash in the year 79.",
    ],
    "football": [
        "Arsenal is a football club based in north London.",
        "The football match ended with a late goal from the striker.",
        "Liverpool won the football league title with a record points total.",
        "A football club employs a manager, players and scouts.",
    ],
    "baking": [
        "Bread dough rises when yeast ferments the sugars in flour.",
        "Bake the bread in a hot oven until the crust is brown.",
        "Sourdough bread uses a starter of wild yeast instead of baker's yeast.",
        "Croissants are baked from laminated dough with butter layers.",
    ],
}


# names and words that recur in several surface forms, so counts tie and forms compete, and
# removals move a word's first occurrence
COMPETING_NAMES = [
    "Mount Etna",
    "mount etna",
    "Bank of England",
    "Film",
    "film",
    "films",
    "the Film",
]


def competing_texts(n: int, seed: int) -> list[str]:
    """``n`` passages of 1-3 topic lines plus two competing names and a numbered word (one in
    ten is a passage without a phrase): the keyword and BM25 update tests' random corpus."""
    rng = random.Random(seed)
    lines = [line for topic in TOPICS.values() for line in topic]
    out = []
    for i in range(n):
        parts = rng.sample(lines, rng.randint(1, 3))
        names = COMPETING_NAMES
        parts += [f"{rng.choice(names)} {rng.choice(names)}, Word{rng.randint(0, 9)} word{i}."]
        if rng.random() < 0.1:
            parts = ["1990 42 -- ."]  # a leaf without a phrase
        out.append(" ".join(parts))
    return out


def random_phrase_updates(
    rng: random.Random,
    pool: list[str],
    *,
    start: int,
    steps: int,
    min_left: int,
    drop_share: float,
    move_first: bool = False,
) -> Iterator[tuple[PhraseTable, list[str]]]:
    """A phrase table built on ``pool[:start]``, then ``steps`` random updates: each removes
    about ``drop_share`` of the passages (while more than ``min_left`` are left; with
    ``move_first``, half the time the first ones too, so their words' first occurrences move)
    or adds the next 1-6 of ``pool``. Yields the table and its corpus after each step; the
    caller may draw from ``rng`` between steps."""
    corpus = pool[:start]
    table = PhraseTable.build(corpus)
    nxt = start
    for _step in range(steps):
        if rng.random() < 0.5 and len(corpus) > min_left:
            keep = np.array([rng.random() > drop_share for _ in corpus])
            if move_first and rng.random() < 0.5:
                keep[: rng.randint(1, 3)] = False
            keep[rng.randrange(len(corpus))] = True
            table = table.remove(keep)
            corpus = [t for t, k in zip(corpus, keep.tolist(), strict=True) if k]
        else:
            batch = pool[nxt : nxt + rng.randint(1, 6)] or pool[:2]
            nxt += len(batch)
            table = table.add(batch)
            corpus = corpus + batch
        yield table, corpus


def build_index(folder: Path) -> Index:
    """Three one-topic documents indexed with HashEmbedder, saved in ``folder`` and loaded back
    (the index the server tests serve)."""
    texts = [" ".join(t) for t in TOPICS.values()]
    docs = documents_from_strings(texts, titles=list(TOPICS), ids=list(TOPICS))
    config = IndexConfig(chunk_tokens=12, embedder="test:hash")
    index = Index.build(docs, config, embedder=HashEmbedder())
    index.save(folder)
    return Index.load(folder, embedder=HashEmbedder())


def write_format1(index: Index, folder: Path, *, bm25_from: Index | None = None) -> None:
    """The flat layout of format 1 (node_vectors.npy, parent.npy, layer.npy, chunks.jsonl,
    abstracts.jsonl and bm25/ beside manifest.json), written from ``index``'s data; BM25's
    files are those of a saved generation (their format never changed)."""
    tmp = folder.parent / (folder.name + "-v2")
    index.save(tmp)
    gen = tmp / "generations" / f"{IndexStore(tmp).current():06d}"
    manifest = json.loads((gen / "manifest.json").read_text())
    folder.mkdir(parents=True)
    shutil.copytree(gen / "bm25", folder / "bm25")
    if bm25_from is not None:
        other = folder.parent / (folder.name + "-other")
        bm25_from.save(other)
        shutil.rmtree(folder / "bm25")
        shutil.copytree(other / "generations" / "000001" / "bm25", folder / "bm25")
    first_copy = (bm25_from or index).data.sparse.first_copy  # a table of its own in format 3
    np.save(folder / "bm25" / "first_copy.npy", np.asarray(first_copy), allow_pickle=False)
    data = index.data
    n = data.tree.n_leaves
    np.save(folder / "node_vectors.npy", np.asarray(data.node_vectors), allow_pickle=False)
    np.save(folder / "parent.npy", np.asarray(data.tree.parent), allow_pickle=False)
    np.save(folder / "layer.npy", np.asarray(data.tree.layer), allow_pickle=False)
    with open(folder / "chunks.jsonl", "w", encoding="utf-8") as fh:
        for c in data.chunks:
            fh.write(json.dumps({"id": c.id, **c.source.to_dict(), "text": c.text}) + "\n")
    with open(folder / "abstracts.jsonl", "w", encoding="utf-8") as fh:
        for i, a in enumerate(data.abstracts):
            fh.write(json.dumps({"node": n + i, "text": a}) + "\n")
    manifest.pop("generation")
    manifest.pop("tables")
    manifest["format_version"] = 1
    manifest["files"] = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(tmp)


def segment_of(generation: Path, table: str) -> str:
    """The first segment file of ``table`` (``leaf_vectors``, ``chunks`` ...) in a format-3
    generation folder, as its manifest names it."""
    manifest = json.loads((generation / "manifest.json").read_text())
    return str(manifest["tables"][table]["segments"][0][0])


def as_format1(folder: Path) -> None:
    """Make ``folder``, a copy of a saved generation's folder, a format-1 index: no readers'
    file, a manifest without a generation and with every file's size and hash."""
    (folder / ".readers").unlink()
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("generation")
    manifest["format_version"] = 1
    manifest["files"] = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))


def plant_endpoint(index: Path, spec: str, *, llm: bool = False) -> None:
    """What an attacker sharing an index would do: point its embedder (and, with ``llm``, its
    LLM) at ``spec``, in the current generation's manifest and in the pointer, with the
    pointer's hash made to match."""

    def planted(manifest: dict[str, Any]) -> dict[str, Any]:
        manifest["embedder"]["spec"] = spec
        manifest["config"]["embedder"] = spec
        if llm:
            manifest["config"]["llm"] = spec
        return manifest

    pointer_path = index / "manifest.json"
    pointer = json.loads(pointer_path.read_text(encoding="utf-8"))
    generation = index / "generations" / f"{pointer['generation']:06d}" / "manifest.json"
    raw = json.dumps(planted(json.loads(generation.read_text(encoding="utf-8")))).encode()
    generation.write_bytes(raw)
    pointer = planted(pointer)
    pointer["manifest_sha256"] = hashlib.sha256(raw).hexdigest()
    pointer_path.write_text(json.dumps(pointer), encoding="utf-8")
