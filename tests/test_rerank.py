"""Cross-encoder reranker, on a tiny random BERT built here (no reranker weights exist offline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from psirag.embed import minilm_path
from psirag.errors import InputError
from psirag.retrieval.rerank import CrossEncoderReranker, _sigmoid


def _tiny_cross_encoder(folder: Path, num_labels: int) -> Path:
    """Save a 2-layer, 32-wide BertForSequenceClassification with MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=num_labels,
    )
    torch.manual_seed(0)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_cross_encoder(tmp_path_factory.mktemp("tiny-ce"), num_labels=1)


QUERY = "who directed jaws"
TEXTS = [
    "Jaws is a 1975 film directed by Steven Spielberg.",
    "The mitochondrion is the powerhouse of the cell.",
    "",
    "word " * 600,
]


def test_scores_shape_range_and_determinism(tiny_model: Path) -> None:
    reranker = CrossEncoderReranker(str(tiny_model), batch_size=2)
    first = reranker.score(QUERY, TEXTS)
    assert first.shape == (len(TEXTS),) and first.dtype == np.float32
    assert np.isfinite(first).all() and ((first >= 0) & (first <= 1)).all()
    assert np.array_equal(first, reranker.score(QUERY, TEXTS))
    assert reranker.score(QUERY, []).shape == (0,)


def test_two_label_model_gives_probabilities(tmp_path: Path) -> None:
    reranker = CrossEncoderReranker(_tiny_cross_encoder(tmp_path / "two", num_labels=2))
    scores = reranker.score(QUERY, TEXTS[:2])
    assert scores.shape == (2,) and ((scores > 0) & (scores < 1)).all()


def test_missing_or_empty_folder_raises_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "nope")
    with pytest.raises(InputError, match="not a model folder"):
        CrossEncoderReranker(tmp_path)


def test_sigmoid_does_not_overflow() -> None:
    with np.errstate(over="raise"):
        out = _sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    np.testing.assert_allclose(out, [0.0, 0.5, 1.0])


def test_index_search_with_reranker(tiny_model: Path) -> None:
    """fusion='rerank' scores the union of both retrievers' lists with the local model."""
    from support import HashEmbedder

    from psirag import Index, IndexConfig, SearchConfig

    texts = [*TEXTS[:2], "Spielberg also directed E.T.", "Sharks appear in Jaws.", "Cells."]
    index = Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    config = SearchConfig(k=3, fusion="rerank", reranker=str(tiny_model))
    hits = index.search(QUERY, config=config)
    assert 1 <= len(hits) <= 3
    expected = CrossEncoderReranker(str(tiny_model)).score(QUERY, [h.text for h in hits])
    np.testing.assert_allclose([h.score for h in hits], expected, rtol=1e-5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    with pytest.raises(InputError, match="reranker"):
        SearchConfig(fusion="rerank")


def test_eval_ranks_by_the_reranker(tiny_model: Path, tmp_path: Path) -> None:
    """``psirag eval --reranker``: psi and hybrid keep the passages the cross-encoder ranks
    best among their two lists, in its order, with its scores (no RRF)."""
    from support import HashEmbedder
    from support.datasets import write_dataset

    from psirag.eval.harness import run_eval
    from psirag.eval.settings import EvalSettings

    dataset = write_dataset(tmp_path / "tiny")
    settings = EvalSettings(
        methods=("psi", "hybrid"),
        reranker=str(tiny_model),
        cache_dir=tmp_path / "cache",
        bootstrap=0,
    )
    report = run_eval(dataset, settings, embedder=HashEmbedder())
    assert report.settings["reranker"] == str(tiny_model)
    model = CrossEncoderReranker(str(tiny_model))
    texts = {c.id: c.text for c in _index_chunks(dataset)}
    for method in report.methods:
        assert method.rows
        for row in method.rows:
            got = row["retrieved"]
            assert 1 <= len(got) <= 5
            scores = [p["score"] for p in got]
            assert scores == sorted(scores, reverse=True)
            expected = model.score(row["question"], [texts[p["id"]] for p in got])
            np.testing.assert_allclose(scores, expected, rtol=1e-5)


def _index_chunks(dataset: Path) -> list:
    """The tiny dataset's leaves, as the eval index holds them (one per record)."""
    from support import HashEmbedder

    from psirag import Index, IndexConfig
    from psirag.eval.data import load_dataset

    data = load_dataset(dataset)
    return Index.build(data.documents, IndexConfig(), embedder=HashEmbedder()).chunks
