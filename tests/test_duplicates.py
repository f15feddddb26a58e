"""Passages that are one passage: equal up to layout (a heading underlined with ===== in one
document and ----- in another), merged like identical texts; near-duplicates (word shingles
overlapping by 0.9 or more) merged within a result list."""

from __future__ import annotations

import json
from pathlib import Path

from support import HashEmbedder

from psirag import Index, IndexConfig
from psirag.config import PROFILES
from psirag.retrieval.duplicates import (
    duplicate_key,
    jaccard,
    merge_near_duplicates,
    record_heading,
    shingles,
)

BODY = (
    "The grammar uses extended BNF notation, where each rule names a symbol and gives the "
    "sequence of tokens and other symbols that may replace it in a valid program text"
)
EQUALS = f"Notation\n========\n\n{BODY}."
DASHES = f"notation\n--------\n{BODY}."
OTHER = [
    "Volcanoes erupt lava and ash when magma rises through the crust of the earth.",
    "The football club hired a new manager after a poor season in the league.",
    "Bread dough rises when yeast ferments the sugars and releases carbon dioxide gas.",
    "Lexical analysis splits the program text into tokens such as names and numbers.",
]


def _index(texts: list[str]) -> Index:
    return Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)


def test_duplicate_key_ignores_layout_only() -> None:
    assert duplicate_key(EQUALS) == duplicate_key(DASHES)
    assert duplicate_key("## Title\n* item one\n- item two") == "title item one item two"
    assert duplicate_key("Well-known facts") == "well-known facts"  # a hyphen is a word's
    assert duplicate_key(EQUALS) != duplicate_key(EQUALS.replace("symbol", "word"))


def test_underline_variants_come_back_once_naming_both_documents() -> None:
    """The demo's case: the same passage from two documents whose heading underline differs."""
    index = _index([EQUALS, *OTHER, DASHES])
    hits = index.search("grammar notation symbols rule", k=3)
    texts = [p.text for p in hits]
    assert len(texts) == 3 == len({duplicate_key(t) for t in texts})
    top = next(p for p in hits if "BNF" in p.text)
    sources = {top.source.document, *(s.document for s in top.also)}
    assert sources == set(index.data.documents[i] for i in (0, 5))
    # the paper profile keeps duplicates (merge_duplicates=False), as for identical texts
    paper = index.search("grammar notation symbols rule", config=PROFILES["paper"].with_(k=3))
    assert sum("BNF" in p.text for p in paper) == 2


def test_near_duplicates_are_merged_within_a_result_list() -> None:
    """Two texts a remark apart (shingle Jaccard >= 0.9) give one result naming both sources,
    and the list still holds k distinct passages; the paper profile keeps both."""
    long = f"{BODY}. Each production is written on its own line, and literal tokens are quoted."
    near = long + " Changed in 3.12."
    assert 0.9 <= jaccard(shingles(long), shingles(near)) < 1
    index = _index([long, *OTHER, near])
    hits = index.search("grammar BNF symbols rule tokens", k=3)
    assert len(hits) == 3
    assert sum("BNF" in p.text for p in hits) == 1
    top = next(p for p in hits if "BNF" in p.text)
    assert {top.source.document, *(s.document for s in top.also)} == {
        index.data.documents[0],
        index.data.documents[5],
    }
    paper = index.search("grammar BNF symbols rule tokens", config=PROFILES["paper"].with_(k=3))
    assert sum("BNF" in p.text for p in paper) == 2


def test_texts_that_differ_more_stay_apart() -> None:
    half = " ".join(BODY.split()[:15]) + " and nothing else of the kind is said here at all."
    assert jaccard(shingles(BODY), shingles(half)) < 0.9
    index = _index([BODY + ".", *OTHER, half])
    hits = index.search("grammar BNF symbols rule tokens", k=5)
    assert sum("grammar uses extended" in p.text for p in hits) == 2


def test_merge_near_duplicates_keeps_order_and_stops_at_the_limit() -> None:
    texts = ["a b c d e f g h i j", "a b c d e f g h i j k", "x y z", "p q r", "m n o"]
    groups = merge_near_duplicates(range(5), texts.__getitem__, limit=3, threshold=0.8)
    assert groups == [(0, [1]), (2, []), (3, [])]


def test_records_under_different_titles_stay_apart(tmp_path: Path) -> None:
    """A JSON record's title is part of the passage: one body under two titles (a series'
    blurb under each book) is two results; under one title written two ways, one."""
    long = f"{BODY}. Each production is written on its own line, and literal tokens are quoted."
    records = [
        {"title": "Grammar notation", "text": long},
        *({"title": f"Other {i}", "text": t} for i, t in enumerate(OTHER)),
        {"title": "Grammar notation (reference)", "text": long},
        {"title": "GRAMMAR  notation", "text": long + " Changed in 3.12."},
    ]
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    index = Index.build([path], IndexConfig(), embedder=HashEmbedder())
    hits = index.search("grammar BNF symbols rule tokens", k=4)
    titles = sorted(p.source.title for p in hits if "BNF" in p.text)
    assert len(titles) == 2 and "Grammar notation (reference)" in titles
    merged = next(p for p in hits if "BNF" in p.text and "(reference)" not in p.source.title)
    assert {merged.source.title, *(s.title for s in merged.also)} == {
        "Grammar notation",
        "GRAMMAR  notation",
    }
    assert record_heading("Tara Strong", "Tara Strong\nbody") == "tara strong"
    assert record_heading("notes", "Some text") is None


def test_the_duplicate_key_is_the_regex_normalisation() -> None:
    """duplicate_key skips the markup pass when no rule character occurs and collapses
    whitespace with str.split: the keys must be the plain regex ones (rules replaced by a
    space, every run of \\s one space, stripped, casefolded), for every whitespace character
    \\s knows and for markup at line starts and inside lines."""
    import re

    from psirag.retrieval.duplicates import _RULES

    def reference(text: str) -> str:
        return re.sub(r"\s+", " ", _RULES.sub(" ", text)).strip().casefold()

    spaces = [c for c in map(chr, range(0x110000)) if re.fullmatch(r"\s", c)]
    texts = [f"{c}A{c}{c}b  STRASSE{c}" for c in spaces]
    texts += [
        "Title\n=====\n\nBody text",
        "  # Heading\n* item one\n- item two\n+ three\n> quoted\n",
        "a--b  c__d ~~e~~ **bold** x=y 1+1 a>b a-b",
        "#notaheading\n-1 stays\n>> deep\tquote",
        "+ plus only",
        "> quote only",
        "under__score only",
        "",
        "   ",
        "\u00c9t\u00c9 \u1e9e \ufb01",
    ]
    for text in texts:
        assert duplicate_key(text) == reference(text), repr(text)
