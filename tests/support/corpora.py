"""The tests' small corpora and the fixture indexes built from them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

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
    """The flat layout today's main writes (format 1), made from a format-2 generation."""
    tmp = folder.parent / (folder.name + "-v2")
    index.save(tmp)
    gen = tmp / "generations" / f"{IndexStore(tmp).current():06d}"
    shutil.copytree(gen, folder)
    if bm25_from is not None:
        other = folder.parent / (folder.name + "-other")
        bm25_from.save(other)
        shutil.rmtree(folder / "bm25")
        shutil.copytree(other / "generations" / "000001" / "bm25", folder / "bm25")
    as_format1(folder)
    shutil.rmtree(tmp)


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
