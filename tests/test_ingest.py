"""Ingestion: sentence splitting, chunk packing, loaders, error messages and chunk ids."""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from psirag.errors import InputError
from psirag.ingest import (
    Document,
    chunk_spans,
    count_tokens,
    documents_from_strings,
    load_documents,
    make_chunks,
    sentence_spans,
)

PROSE = (
    "Teutberga (died 11 November 875) was a queen of Lotharingia. She married Lothair II!\n"
    'Was she happy? "Not at all." The marriage\nwas annulled (eventually).\n\n'
    "A new paragraph without a final stop\n\nAnd a last one, e.g. this."
)


def texts(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[s:e] for s, e in spans]


def assert_covers(text: str, spans: list[tuple[int, int]]) -> None:
    """Spans are ordered, stripped, disjoint, and everything between them is whitespace."""
    prev = 0
    for start, end in spans:
        assert prev <= start < end <= len(text)
        assert text[start:end] == text[start:end].strip()
        assert not text[prev:start].strip(), f"lost text {text[prev:start]!r}"
        prev = end
    assert not text[prev:].strip()
    kept = "".join("".join(text[s:e].split()) for s, e in spans)
    assert kept == "".join(text.split())


def collect() -> tuple[list[str], Callable[[str], None]]:
    messages: list[str] = []
    return messages, messages.append


# --- chunking -------------------------------------------------------------------------------


def test_count_tokens_words_and_punctuation() -> None:
    assert count_tokens("") == 0
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("a" * 25) == 3  # long words count as several word pieces


def test_sentence_spans_keep_punctuation_and_join_wrapped_lines() -> None:
    got = texts(PROSE, sentence_spans(PROSE))
    assert got == [
        "Teutberga (died 11 November 875) was a queen of Lotharingia.",
        "She married Lothair II!",
        "Was she happy?",
        '"Not at all."',
        "The marriage\nwas annulled (eventually).",
        "A new paragraph without a final stop",
        "And a last one, e.g.",
        "this.",
    ]
    assert_covers(PROSE, sentence_spans(PROSE))


def test_sentence_spans_no_boundary_inside_numbers_or_without_whitespace() -> None:
    text = "Pi is 3.14 roughly.It continues?!yes"
    assert texts(text, sentence_spans(text)) == [text]
    assert sentence_spans("   \n\n  ") == []


def test_chunks_never_cut_short_sentences() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "(eta)", "theta,"]
    sentences = [
        " ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) + rng.choice(".!?")
        for _ in range(200)
    ]
    text = " ".join(sentences)
    spans = chunk_spans(text, max_tokens=40)
    assert len(spans) > 20
    sentence_set = {text[s:e] for s, e in sentence_spans(text)}
    for chunk in texts(text, spans):
        assert chunk[-1] in ".!?"
        for piece in re.split(r"(?<=[.!?]) ", chunk):
            assert piece in sentence_set
    assert_covers(text, spans)


def test_chunk_budget_respected_and_packed() -> None:
    text = " ".join(f"Sentence number {i} says something short." for i in range(300))
    spans = chunk_spans(text, max_tokens=100)
    counts = [count_tokens(c) for c in texts(text, spans)]
    assert max(counts) <= 100
    assert min(counts[:-1]) > 80  # greedy packing fills chunks, not one sentence each
    assert_covers(text, spans)


def test_spans_map_back_exactly_and_keep_line_breaks() -> None:
    text = "Line one of a\nwrapped sentence.  Second one!\n\n\tThird paragraph here."
    spans = chunk_spans(text, max_tokens=8)
    assert texts(text, spans) == [
        "Line one of a\nwrapped sentence.",
        "Second one!\n\n\tThird paragraph here.",  # packed across the paragraph break
    ]
    assert_covers(text, spans)


def test_random_texts_cover_everything_within_budget() -> None:
    rng = random.Random(0)
    alphabet = ["a", "word", "x" * 37, ".", "!", "?", '"', ")", " ", "\n", "\n\n", "é", "日本", ","]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
        budget = rng.choice([1, 3, 8, 20])
        spans = chunk_spans(text, budget)
        assert_covers(text, spans)
        assert all(count_tokens(c) <= budget for c in texts(text, spans))


def test_long_sentence_is_split_at_whitespace() -> None:
    text = " ".join(f"w{i}" for i in range(1000))  # one sentence, 1000 tokens
    spans = chunk_spans(text, max_tokens=100)
    assert len(spans) >= 10
    for start, end in spans:
        assert start == 0 or text[start - 1] == " "
        assert end == len(text) or text[end] == " "
        assert count_tokens(text[start:end]) <= 100
    assert_covers(text, spans)


@pytest.mark.parametrize(
    "text",
    [
        "lorem ipsum dolor sit amet " * 200_000,  # ~5.4 MB, one line, no sentence end
        "a" * 5_000_000,  # 5 MB without a single space
    ],
    ids=["no-sentence-end", "no-whitespace"],
)
def test_enormous_single_line_chunks_fast_within_budget(text: str) -> None:
    start = time.perf_counter()
    spans = chunk_spans(text, max_tokens=100)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"took {elapsed:.1f}s"
    assert len(spans) > 1000
    assert max(count_tokens(text[s:e]) for s, e in spans) <= 100
    assert spans[0][0] == 0 and spans[-1][1] == len(text.rstrip())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert sum(len(text[s:e].replace(" ", "")) for s, e in spans) == len(text.replace(" ", ""))


def test_custom_counter_and_bad_budget() -> None:
    text = "one two three. four five six seven. eight."
    spans = chunk_spans(text, max_tokens=4, count=lambda s: len(s.split()))
    assert texts(text, spans) == ["one two three.", "four five six seven.", "eight."]
    with pytest.raises(ValueError):
        chunk_spans(text, max_tokens=0)


# --- loaders --------------------------------------------------------------------------------


def test_text_folder_recursive_sorted_hidden_and_other_skipped(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "z.md").write_text("# Zed\n\nSome markdown.", encoding="utf-8")
    (tmp_path / "a.txt").write_text("Plain text.", encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("secret", encoding="utf-8")
    (tmp_path / ".git" / "x.txt").write_text("secret", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    messages, warn = collect()
    docs = load_documents([tmp_path], warn=warn)
    assert [(d.id, d.title, d.is_record) for d in docs] == [
        ("a.txt", "a", False),
        ("b/z.md", "z", False),
    ]
    assert docs[0].text == "Plain text."
    assert len(messages) == 1 and "image.png" in messages[0]


def test_single_file_id_is_its_name_and_crlf_normalised(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"\xef\xbb\xbfFirst line\r\nsecond line.\r\n")
    [doc] = load_documents([str(path)])
    assert doc == Document("notes.txt", "notes", "First line\nsecond line.\n", False)


def test_non_utf8_fails_naming_the_file_and_is_skipped_in_skip_mode(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("Fine text.", encoding="utf-8")
    (tmp_path / "latin.txt").write_bytes("Caf\xe9 au lait.".encode("latin-1"))
    with pytest.raises(InputError) as err:
        load_documents([tmp_path])
    message = str(err.value)
    assert "latin.txt" in message and "UTF-8" in message
    assert "offset 3" in message and "--skip-bad-files" in message
    messages, warn = collect()
    docs = load_documents([tmp_path], on_bad_file="skip", warn=warn)
    assert [d.id for d in docs] == ["good.txt"]
    assert any("latin.txt" in m for m in messages)


def test_missing_path_and_unsupported_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_documents([tmp_path / "nope"])
    (tmp_path / "doc.docx").write_bytes(b"PK")
    with pytest.raises(InputError, match="unsupported"):
        load_documents([tmp_path / "doc.docx"])


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no usable files"):
        load_documents([tmp_path])


def test_empty_file_gives_empty_corpus(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    messages, warn = collect()
    with pytest.raises(InputError, match="is empty"):
        load_documents([tmp_path], warn=warn)
    assert any("empty.txt" in m for m in messages)
    with pytest.raises(InputError, match="is empty"):
        make_chunks(documents_from_strings(["", "   "]))


def test_json_corpus_one_leaf_per_record(tmp_path: Path) -> None:
    records = [
        {"idx": 10, "title": "Teutberga", "text": "Teutberga was a queen. " * 30},
        {"title": "No idx", "text": "Short passage."},
        {"idx": 12, "title": "Blank", "text": "   "},
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(records), encoding="utf-8")
    messages, warn = collect()
    docs = load_documents([tmp_path / "corpus.json"], warn=warn)
    assert [d.id for d in docs] == ["10", "corpus.json:1"]
    assert all(d.is_record for d in docs)
    assert docs[0].text == "Teutberga\n" + records[0]["text"]
    assert any("empty text" in m and "record 2" in m for m in messages)
    chunks = make_chunks(docs, chunk_tokens=20)
    assert len(chunks) == 2  # a long record stays one leaf
    assert chunks[0].text == docs[0].text
    assert chunks[0].source.document == "10" and chunks[0].source.title == "Teutberga"
    assert (chunks[0].source.start, chunks[0].source.end) == (0, len(docs[0].text))


def test_split_records(tmp_path: Path) -> None:
    body = " ".join(f"Fact number {i} is here." for i in range(40))
    (tmp_path / "c.jsonl").write_text(
        json.dumps({"idx": "a", "title": "T", "text": body})
        + "\n\n"
        + json.dumps({"idx": "b", "text": "Tiny."})
        + "\n",
        encoding="utf-8",
    )
    docs = load_documents([tmp_path / "c.jsonl"])
    chunks = make_chunks(docs, chunk_tokens=30, split_records=True)
    from_a = [c for c in chunks if c.source.document == "a"]
    assert len(from_a) > 3
    assert [c.source.chunk for c in from_a] == list(range(len(from_a)))
    assert all(count_tokens(c.text) <= 30 for c in from_a)
    assert all(docs[0].text[c.source.start : c.source.end] == c.text for c in from_a)
    assert chunks[-1].text == "Tiny." and chunks[-1].source.document == "b"


def test_malformed_json_names_the_file_and_position(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('[\n {"text": "ok"},\n {"text": }\n]', encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_documents([tmp_path / "broken.json"])
    assert "broken.json" in str(err.value) and "line 3" in str(err.value)
    (tmp_path / "broken.jsonl").write_text('{"text": "ok"}\n{oops\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.jsonl.*line 2"):
        load_documents([tmp_path / "broken.jsonl"])


def test_record_without_text_names_file_and_record(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text(
        json.dumps([{"text": "fine"}, {"title": "no text"}]), encoding="utf-8"
    )
    with pytest.raises(InputError, match=r"c\.json, record 1.*'text'"):
        load_documents([tmp_path / "c.json"])
    messages, warn = collect()
    docs = load_documents([tmp_path / "c.json"], on_bad_file="skip", warn=warn)
    assert [d.text for d in docs] == ["fine"]
    assert any("record 1" in m for m in messages)


def test_documents_from_strings() -> None:
    docs = documents_from_strings(["One.", "Two."], titles=["a", "b"])
    assert [(d.id, d.title, d.is_record) for d in docs] == [("0", "a", False), ("1", "b", False)]
    with pytest.raises(InputError):
        documents_from_strings(["One."], titles=["a", "b"])
    with pytest.raises(InputError, match="more than once"):
        documents_from_strings(["One.", "Two."], ids=["x", "x"])


# --- chunk ids ------------------------------------------------------------------------------


def test_ids_stable_and_unique_with_many_identical_chunks() -> None:
    repeated = "The same sentence again. " * 500
    docs = documents_from_strings([repeated, repeated, "Other text."], ids=["d1", "d2", "d3"])
    chunks = make_chunks(docs, chunk_tokens=10)
    ids = [c.id for c in chunks]
    assert len(ids) == len(set(ids))
    d1 = [c.id for c in chunks if c.source.document == "d1"]
    assert d1[1] == d1[0] + "-2" and d1[2] == d1[0] + "-3"
    assert re.fullmatch(r"[0-9a-f]{16}", d1[0])
    # Same document in another corpus (others removed, one added first): same ids.
    again = make_chunks(
        documents_from_strings(["New first.", repeated], ids=["d0", "d1"]), chunk_tokens=10
    )
    assert [c.id for c in again if c.source.document == "d1"] == d1
    # The same text in another document gets other ids.
    assert not set(d1) & {c.id for c in chunks if c.source.document == "d2"}


def test_one_chunk_corpus() -> None:
    chunks = make_chunks(documents_from_strings(["Just one sentence."], titles=["t"]))
    assert len(chunks) == 1
    [chunk] = chunks
    assert chunk.text == "Just one sentence."
    assert chunk.source.to_dict() == {"document": "0", "title": "t", "chunk": 0, "span": [0, 18]}
