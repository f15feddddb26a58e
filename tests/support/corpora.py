"""The tests' small corpora and the fixture indexes built from them."""

from __future__ import annotations

from pathlib import Path

from psirag.config import IndexConfig
from psirag.index import Index
from psirag.ingest import documents_from_strings
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
