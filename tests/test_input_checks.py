"""The checks behind docs/bad-inputs.md, from the Python API (the CLI cases are in
tests/test_bad_inputs.py), and the quiet BM25 build."""

from __future__ import annotations

import argparse
import logging

import pytest

from psirag.cli.options import nonnegative_int, positive_int, text
from psirag.config import IndexConfig
from psirag.errors import InputError
from psirag.ingest.loaders import documents_from_strings, load_documents
from psirag.retrieval.bm25 import SparseIndex, check_indexable, has_indexable_word
from psirag.types import first_surrogate


def test_bm25_build_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """bm25s put "Building index from IDs objects" on stderr at every build, even with -q."""
    caplog.set_level(logging.DEBUG)
    SparseIndex.build(["Mount Etna is a volcano.", "Bread is baked in an oven."])
    assert not [r for r in caplog.records if r.name.startswith("bm25s")], caplog.text


@pytest.mark.parametrize(
    "texts",
    [["the and of"], ["a b c"], ["\x00\x00"], ["\U0001f30b \u2728"], ["", "  "], []],
)
def test_a_corpus_without_a_usable_word_is_refused(texts: list[str]) -> None:
    assert not has_indexable_word(texts)
    with pytest.raises(InputError, match="no word that search can use"):
        check_indexable(texts)
    with pytest.raises(InputError, match="no word that search can use"):
        SparseIndex.build(texts)


def test_one_usable_word_is_enough() -> None:
    texts = ["the and of", "\x00", "volcano"]
    check_indexable(texts)
    index = SparseIndex.build(texts)
    leaves, _scores = index.search("volcano")
    assert leaves.tolist() == [2]


def test_config_bounds_are_psirag_errors() -> None:
    for bad in ({"batch_size": 0}, {"batch_size": -1}, {"bm25_k1": -1.0}, {"bm25_b": 2.0}):
        with pytest.raises(InputError):
            IndexConfig(**bad)


def test_strings_with_lone_surrogates_are_refused() -> None:
    with pytest.raises(InputError, match=r"'texts\[1\]' holds a lone surrogate \(U\+D800"):
        documents_from_strings(["fine", "bad \ud800"])


def test_jsonl_skip_names_each_broken_line(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"text": "one"}\nnot json\n{"text": "three"}\n{oops\n', encoding="utf-8")
    warnings: list[str] = []
    docs = load_documents([path], on_bad_file="skip", warn=warnings.append)
    assert [d.text for d in docs] == ["one", "three"]
    assert [w.split(": malformed JSON on ")[1].split(",")[0] for w in warnings] == [
        "line 2",
        "line 4",
    ]
    with pytest.raises(InputError, match="line 2"):
        load_documents([path])


def test_argument_types() -> None:
    assert positive_int("3") == 3 and nonnegative_int("0") == 0
    for parse, value in ((positive_int, "0"), (nonnegative_int, "-1"), (positive_int, "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(value)
    assert text("plain é") == "plain é" and first_surrogate("ok") is None
    with pytest.raises(argparse.ArgumentTypeError, match="byte 0xff at character 2"):
        text("ab\udcff")


def test_python_api_refuses_a_query_with_a_lone_surrogate() -> None:
    """Index.search (not only the CLI) names the bad character instead of a tokenizer TypeError."""
    from support import HashEmbedder

    from psirag import Index

    index = Index.build(
        ["Volcanoes erupt lava and ash.", "Football clubs play league matches."],
        texts=True,
        embedder=HashEmbedder(),
    )
    with pytest.raises(InputError, match="lone surrogate at character 4"):
        index.search("lava\udcff flows")
