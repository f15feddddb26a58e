"""One Unicode form (NFC) before tokenising in BM25 and in document ids (issue 26), and short
lists of unknown ids in errors."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

from psirag import Index, IndexConfig
from psirag.errors import InputError
from psirag.retrieval.bm25 import SparseIndex

COMPOSED = "Caf\u00e9 Br\u00fbl\u00e9 serves cr\u00e8me br\u00fbl\u00e9e daily."
DECOMPOSED = unicodedata.normalize("NFD", COMPOSED)


@pytest.mark.parametrize(("stored", "query"), [(COMPOSED, DECOMPOSED), (DECOMPOSED, COMPOSED)])
def test_bm25_matches_either_form(stored: str, query: str) -> None:
    assert stored != query
    texts = [stored, *TOPICS["football"]]
    sparse = SparseIndex.build(texts)
    scores = sparse.scores("cr\u00e8me" if query == COMPOSED else "cre\u0300me")
    assert scores[0] > 0 and scores[1:].max() == 0


def build(folder: Path) -> Index:
    name = unicodedata.normalize("NFD", "r\u00e9sum\u00e9.txt")  # as macOS names files
    (folder / name).write_text(COMPOSED)
    (folder / "football.txt").write_text(" ".join(TOPICS["football"]))
    (folder / "baking.txt").write_text(" ".join(TOPICS["baking"]))
    return Index.build([folder], IndexConfig(max_children=3), embedder=HashEmbedder())


def test_document_ids_are_nfc_and_found_by_either_form(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    index = build(corpus)
    composed = "r\u00e9sum\u00e9.txt"
    assert composed in index.documents
    hits = index.search("football", docs=[unicodedata.normalize("NFD", composed)])
    assert hits and {h.source.document for h in hits} == {composed}
    index.remove([unicodedata.normalize("NFD", composed)])
    assert composed not in index.documents


def test_unknown_ids_are_listed_short(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    index = build(corpus)
    unknown = [f"nope-{i}" for i in range(20000)]
    with pytest.raises(InputError) as caught:
        index.remove(unknown)
    message = str(caught.value)
    assert "'nope-9'" in message and "'nope-10'" not in message
    assert "and 19,990 more" in message and len(message) < 1000
    with pytest.raises(InputError) as caught:
        index.search("football", docs=unknown)
    assert "and 19,990 more" in str(caught.value) and len(str(caught.value)) < 1000
