"""The query-hop discriminator: the shipped weights, the model format, the budget mapping, the
``hops`` command and ``--max-retrievals auto`` (the agent and the model server are real)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from support import HashEmbedder, ScriptedServer
from support.agents import (
    FakeTreeIndex,
    length_model,
    parse,
)

import psirag.hops as hops
from psirag.cli.options import parse_max_retrievals
from psirag.errors import InputError
from psirag.eval.settings import EvalSettings
from psirag.hops import (
    HOPS,
    LEXICAL_NAMES,
    HopModel,
    HopPredictor,
    features,
    load_hop_model,
    max_retrievals_for,
)

ROOT = Path(__file__).resolve().parents[1]


SHORT = "Who wrote Hamlet?"
LONG = (
    "Which film has the director who was born later, the one about the river crossing or the "
    "one set in the northern mountains?"
)


def test_the_shipped_model_loads_offline() -> None:
    model = load_hop_model()
    assert model.embedder.startswith("st:all-MiniLM-L6-v2")
    assert model.weights.shape == (384 + len(LEXICAL_NAMES), len(HOPS))
    assert model.meta["trained_by"] == "scripts/train_hops.py"
    assert model.meta["test_accuracy"] > 0.8  # what the script measured on its held-out split
    raw = (ROOT / "src" / "psirag" / "data" / hops.WEIGHTS_RESOURCE).read_text()
    assert json.loads(raw)["format"] == hops.FORMAT


def test_model_round_trip_and_prediction(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    model = length_model(embedder.id, embedder.dim)
    path = tmp_path / "m.json"
    model.save(path)
    again = HopModel.from_json(json.loads(path.read_text()), str(path))
    assert again.embedder == embedder.id
    vectors = embedder.embed([SHORT, LONG])
    assert again.predict(vectors, [SHORT, LONG]) == [1, 4]
    probabilities = again.probabilities(vectors, [SHORT, LONG])
    assert np.allclose(probabilities.sum(axis=1), 1.0)
    assert features(vectors[:1], [SHORT]).shape == (1, embedder.dim + len(LEXICAL_NAMES))


@pytest.mark.parametrize(
    "data",
    [
        {"format": "other"},
        {"format": hops.FORMAT, "hops": [1, 2, 3, 4], "mean": [0.0], "scale": [1.0]},
        {
            "format": hops.FORMAT,
            "hops": [1, 2, 3, 4],
            "mean": [0.0, 0.0],
            "scale": [1.0, 1.0],
            "weights": [[0.0] * 4],
            "bias": [0.0] * 4,
        },
    ],
)
def test_a_broken_model_file_is_a_clear_error(data: dict[str, object]) -> None:
    with pytest.raises(InputError, match=r"m\.json"):
        HopModel.from_json(data, "m.json")


def test_budget_mapping_and_argument() -> None:
    assert [max_retrievals_for(h) for h in HOPS] == [1, 1, 2, 3]
    assert parse_max_retrievals("auto") == "auto" and parse_max_retrievals(" 3 ") == 3
    import argparse

    for bad in ("-1", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_max_retrievals(bad)
    assert EvalSettings(max_retrievals="auto").max_retrievals == "auto"
    with pytest.raises(InputError, match="auto"):
        EvalSettings(max_retrievals="sometimes")


def test_predictor_refuses_another_embedder() -> None:
    with pytest.raises(InputError, match="trained on"):
        HopPredictor(HashEmbedder())


@pytest.fixture
def hash_hops(monkeypatch: pytest.MonkeyPatch) -> HashEmbedder:
    """The shipped model replaced by the length model over the hash embedder."""
    embedder = HashEmbedder()
    model = length_model(embedder.id, embedder.dim)
    monkeypatch.setattr(hops, "load_hop_model", lambda: model)
    import psirag.embed

    monkeypatch.setattr(psirag.embed, "load_embedder", lambda spec: embedder)
    return embedder


def test_cli_hops(hash_hops: HashEmbedder) -> None:
    out = io.StringIO()
    args = parse(["hops", SHORT, LONG, "--json"])
    assert args.func(args, stdout=out) == 0
    assert json.loads(out.getvalue()) == [
        {"question": SHORT, "hops": 1},
        {"question": LONG, "hops": 4},
    ]
    out = io.StringIO()
    args = parse(["hops", SHORT])
    assert args.func(args, stdout=out) == 0
    assert out.getvalue() == f"1\t{SHORT}\n"


def test_cli_ask_auto_sets_the_budget_from_the_hops(
    hash_hops: HashEmbedder, server: ScriptedServer, fake_index: FakeTreeIndex
) -> None:
    # LONG is 4 hops: 3 retrievals after the first; the model asks for three and answers.
    server.script("Retrieve: a", "Retrieve: b", "Retrieve: c", "Answer: Lisbon")
    out = io.StringIO()
    args = parse(["ask", "idx", LONG, "--llm", server.spec, "-q", "--max-retrievals", "auto"])
    args.names_check = "off"
    args.answer_check = False
    assert args.func(args, stdout=out) == 0
    assert fake_index.queries == [LONG, "a", "b", "c"]
    # SHORT is 1 hop: still one retrieval after the first (the mapping's floor).
    fake_index.queries.clear()
    server.script("Retrieve: a", "Retrieve: b", "Answer: Lisbon")
    out = io.StringIO()
    args = parse(
        ["ask", "idx", SHORT, "--llm", server.spec, "-q", "--json", "--max-retrievals", "auto"]
    )
    assert args.func(args, stdout=out) == 0
    assert fake_index.queries == [SHORT, "a"]
    assert json.loads(out.getvalue())["max_retrievals"] == 1


def _train_module() -> object:
    spec = importlib.util.spec_from_file_location("train_hops", ROOT / "scripts" / "train_hops.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_hops"] = module
    spec.loader.exec_module(module)
    return module


def test_training_split_is_stratified_and_fit_learns() -> None:
    train = _train_module()
    rows = [
        {"question": f"q{i}", "hops": 1 + i % 2, "source": "s" if i < 50 else "t"}
        for i in range(100)
    ]
    test = train.split(rows, 0.2, 7)  # type: ignore[attr-defined]
    assert test.sum() == 20
    for source in ("s", "t"):
        for h in (1, 2):
            members = [i for i, r in enumerate(rows) if r["source"] == source and r["hops"] == h]
            assert test[members].sum() == 5  # a fifth of every stratum
    assert (train.split(rows, 0.2, 7) == test).all()  # type: ignore[attr-defined]  # fixed seed
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 200)
    x = rng.normal(size=(200, 5)) + np.eye(4, 5)[y] * 4
    w, b = train.fit(x, y, 1e-3)  # type: ignore[attr-defined]
    assert ((x @ w + b).argmax(axis=1) == y).mean() > 0.95


@pytest.mark.slow
def test_shipped_model_on_minilm() -> None:
    predictor = HopPredictor()
    got = predictor.predict(
        [
            "What is the occupation of Jean Moulin?",
            "Which film has the director who died first, Le Mans 1955 or The Lost Road?",
        ]
    )
    assert got == [1, 4]
