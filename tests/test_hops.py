"""The query-hop discriminator: the shipped weights, the model format, the budget mapping, the
``hops`` command and ``--max-retrievals auto`` (the agent and the model server are real)."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support import FakeOpenAIServer, HashEmbedder
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
    LEXICAL_V1,
    HopCascade,
    HopModel,
    HopPredictor,
    HopStage,
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
    assert isinstance(model, HopCascade)
    assert model.meta["recipe"] == "v13"
    # v10 and later add step 2's score to step 3's, at a share picked on inner folds.
    assert model.meta["third_blend"] in (0.0, 0.5, 1.0, 2.0)
    assert model.embedder.startswith("st:all-MiniLM-L6-v2")
    assert model.lexical == hops.LEXICAL_V13
    assert [stage.above for stage in model.stages] == [1, 2, 3]
    for stage in model.stages:
        assert stage.weights.shape == (384 + len(hops.LEXICAL_V13),)
        assert 0.05 < stage.temperature < 20
    assert model.meta["trained_by"] == "scripts/train_hops.py"
    # What the script measured on its grouped split (no template or entity seen in training).
    assert model.meta["grouped_accuracy"] > 0.6
    assert model.meta["grouped_popqa"] > 0.9
    raw = (ROOT / "src" / "psirag" / "data" / hops.WEIGHTS_RESOURCE).read_text()
    assert json.loads(raw)["format"] == hops.FORMAT_CASCADE


def test_the_shipped_model_tells_one_hop_from_three() -> None:
    """The packaged weights with the real MiniLM, on questions written for this test."""
    predictor = HopPredictor()
    one_hop = [
        "Who wrote Hamlet?",
        "What is the capital of Peru?",
        "In what city was Tomas Varga born?",
        "What genre is The Quiet Harbour?",
    ]
    three_hops = [
        "In which country was the wife of the man who painted The Night Watch born?",
        "What language is spoken in the country where the director of Salt Road was born?",
    ]
    assert predictor.predict(one_hop) == [1, 1, 1, 1]
    assert predictor.predict(three_hops) == [3, 3]
    # Four relations (maker, headquarters, mayor, spouse): v9 and earlier called it 3; at least
    # 3 is asked here, since most 4-hop chains are still called 3 (BENCHMARKS).
    (walkman,) = predictor.predict(
        [
            "Who is the spouse of the mayor of the city where the headquarters of the company "
            "that makes the Walkman is located?"
        ]
    )
    assert walkman >= 3
    # A comparison through a relation is 4 hops (two facts per compared thing); a direct one, 2.
    comparisons = [
        "Which film has the director who was born earlier, The Quiet Harbour or Salt Road?",
        "Are the directors of both films The Quiet Harbour and Salt Road from the same country?",
        "Who was born first, Tomas Varga or Ann Lee?",
        "Which film came out first, The Quiet Harbour or Salt Road?",
    ]
    through, same_country, direct, direct_too = predictor.predict(comparisons)
    assert (through, direct, direct_too) == (4, 2, 2)
    # v11 called the same-country comparison 4 too; v13 calls it 2 and 4 at most. This is the
    # 2Wiki loss that v13 was shipped with (BENCHMARKS, "Query-hop discriminator v13").
    assert 2 <= same_country <= 4
    vectors = predictor.embedder.embed(one_hop + three_hops)
    p = predictor.model.probabilities(np.asarray(vectors), one_hop + three_hops)
    assert np.allclose(p.sum(axis=1), 1.0) and ((p >= 0) & (p <= 1)).all()
    # Calibrated: the single facts are more likely 1 hop than the chains are.
    assert p[:4, 0].min() > p[4:, 0].max()


def _length_cascade(embedder_id: str, dim: int, thresholds: tuple[float, ...]) -> HopCascade:
    """A hand-made cascade reading only log(1 + words): each step says yes above a length."""
    d = dim + len(LEXICAL_NAMES)
    stages = []
    for k, cut in enumerate((4, 10, 20)):
        weights = np.zeros(d, dtype=np.float32)
        weights[dim] = 4.0  # log(1 + words)
        stages.append(
            HopStage(
                k + 1,
                np.zeros(d, dtype=np.float32),
                np.ones(d, dtype=np.float32),
                weights,
                -4.0 * float(np.log1p(cut)),
                thresholds[k],
                1.5,
            )
        )
    return HopCascade(embedder_id, tuple(stages), {"trained_by": "hand"})


def test_cascade_walk_round_trip_and_probabilities(tmp_path: Path) -> None:
    embedder = HashEmbedder()
    model = _length_cascade(embedder.id, embedder.dim, (0.0, 0.0, 0.0))
    questions = [" ".join(["word"] * n) + "?" for n in (2, 6, 14, 30)]
    vectors = embedder.embed(questions)
    assert model.predict(vectors, questions) == [1, 2, 3, 4]
    path = tmp_path / "cascade.json"
    model.save(path)
    again = hops.hop_model_from_json(json.loads(path.read_text()), str(path))
    assert isinstance(again, HopCascade) and again.predict(vectors, questions) == [1, 2, 3, 4]
    p = again.probabilities(vectors, questions)
    assert np.allclose(p.sum(axis=1), 1.0)
    assert list(p.argmax(axis=1)) == [0, 1, 2, 3]
    # The walk stops at the first "no": a high step-2 threshold caps the long ones at 2 hops,
    # whatever step 3 says.
    capped = _length_cascade(embedder.id, embedder.dim, (0.0, 100.0, -100.0))
    assert capped.predict(vectors, questions) == [1, 2, 2, 2]
    # Thresholds move decisions, temperatures only probabilities.
    soft = replace(model, stages=tuple(replace(s, temperature=5.0) for s in model.stages))
    assert soft.predict(vectors, questions) == model.predict(vectors, questions)
    assert soft.probabilities(vectors, questions).max(axis=1).max() < p.max(axis=1).max()


def _cascade_json() -> dict[str, object]:
    embedder = HashEmbedder()
    return _length_cascade(embedder.id, embedder.dim, (0.0, 0.0, 0.0)).to_json()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(stages=d["stages"][:2]), "3 steps"),
        (lambda d: d["stages"][1].update(weights=[0.0, 1.0]), "shapes"),
        (lambda d: d["stages"][0].update(above=2), "above"),
        (lambda d: d["stages"][2].update(temperature=-1.0), "temperature"),
        (lambda d: d["stages"][2].pop("bias"), "bias"),
        (lambda d: d.update(lexical=["log_words", "no_such_feature"]), "no_such_feature"),
    ],
)
def test_a_broken_cascade_file_is_a_clear_error(change: object, message: str) -> None:
    data = _cascade_json()
    change(data)  # type: ignore[operator]
    with pytest.raises(InputError, match=message) as error:
        hops.hop_model_from_json(data, "cascade.json")
    assert "cascade.json" in str(error.value)


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
    hash_hops: HashEmbedder, server: FakeOpenAIServer, fake_index: FakeTreeIndex
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


def test_a_version_1_file_still_loads_with_its_features() -> None:
    embedder = HashEmbedder()
    model = length_model(embedder.id, embedder.dim)
    data = model.to_json()
    del data["lexical"], data["temperature"]
    weights = np.zeros((embedder.dim + len(LEXICAL_V1), len(HOPS)))
    weights[embedder.dim] = [-4.0, 0.0, 2.0, 4.0]
    d = embedder.dim + len(LEXICAL_V1)
    data.update(mean=[0.0] * d, scale=[1.0] * d, weights=weights.tolist())
    old = HopModel.from_json(data, "old.json")
    assert old.lexical == LEXICAL_V1 and old.temperature == 1.0
    assert old.predict(embedder.embed([SHORT, LONG]), [SHORT, LONG]) == [1, 4]
    data["lexical"] = ["log_words", "no_such_feature"]
    with pytest.raises(InputError, match="no_such_feature"):
        HopModel.from_json(data, "old.json")


def test_calibrated_probabilities_are_bounded_and_monotone() -> None:
    embedder = HashEmbedder()
    base = length_model(embedder.id, embedder.dim)
    questions = [" ".join(["word"] * n) + "?" for n in (2, 4, 8, 16, 32, 64)]
    vectors = embedder.embed(questions)
    logits = base.logits(vectors, questions)
    for temperature in (0.5, 1.0, 3.0):
        model = replace(base, temperature=temperature)
        p = model.probabilities(vectors, questions)
        assert ((p >= 0) & (p <= 1)).all() and np.allclose(p.sum(axis=1), 1.0)
        # Calibration never changes the prediction.
        assert model.predict(vectors, questions) == base.predict(vectors, questions)
        # The 4-hop probability rises with the 4-hop logit margin (monotone in the score).
        margin = logits[:, 3] - np.log(np.exp(logits[:, :3]).sum(axis=1))
        order = np.argsort(margin)
        assert (np.diff(p[order, 3]) >= -1e-9).all()
    # A higher temperature softens: the top probability shrinks towards uniform.
    sharp = replace(base, temperature=0.5).probabilities(vectors, questions).max(axis=1)
    soft = replace(base, temperature=3.0).probabilities(vectors, questions).max(axis=1)
    assert (soft <= sharp + 1e-9).all() and (soft < sharp).any()
    # Overconfident logits get a temperature above 1, well-calibrated ones about 1.
    train = _train_module()
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 4000)
    true_logits = rng.normal(size=(4000, 4)) + np.eye(4)[y] * 1.5
    sampled = np.array([rng.choice(4, p=row) for row in train.softmax(true_logits)])  # type: ignore[attr-defined]
    assert 0.8 < train.fit_temperature(true_logits, sampled) < 1.25  # type: ignore[attr-defined]
    assert train.fit_temperature(true_logits * 4, sampled) > 3  # type: ignore[attr-defined]


GROUPED_ROWS: list[dict[str, object]] = [
    {"question": "In what city was Ann Lee born?", "hops": 1, "source": "popqa", "id": "1"},
    {"question": "In what city was Bo Diaz born?", "hops": 1, "source": "popqa", "id": "2"},
    {"question": "What is Ann Lee's occupation?", "hops": 1, "source": "popqa", "id": "3"},
    {"question": "What is Cy Young's occupation?", "hops": 1, "source": "popqa", "id": "4"},
    {"question": "Who is the father of Dee Ray?", "hops": 1, "source": "popqa", "id": "5"},
    {"question": "Who wrote Moby Dick?", "hops": 1, "source": "popqa", "id": "6"},
    {
        "question": "When was the person who directed Jaws born?",
        "hops": 2,
        "source": "musique",
        "id": "2hop__11_12",
    },
    {
        "question": "Where did the man who wrote Ulysses die?",
        "hops": 2,
        "source": "musique",
        "id": "2hop__13_12",
    },
    {
        "question": "What country is the city where Bo Diaz's father was born in?",
        "hops": 3,
        "source": "musique",
        "id": "3hop1__20_21_22",
    },
    {
        "question": "Who founded the team that signed the brother of Eve Ott?",
        "hops": 3,
        "source": "musique",
        "id": "3hop1__30_31_32",
    },
    {
        "question": "Which film came out first, Jaws or Rocky?",
        "hops": 2,
        "source": "2wiki",
        "id": "w1",
        "titles": ["Jaws", "Rocky"],
    },
    {
        "question": "Which film came out first, Alien or Heat?",
        "hops": 2,
        "source": "2wiki",
        "id": "w2",
        "titles": ["Alien", "Heat"],
    },
]


def test_grouped_split_shares_no_template_decomposition_or_entity() -> None:
    train = _train_module()
    rows = [dict(r, titles=r.get("titles", [])) for r in GROUPED_ROWS]
    assert train.template_key(rows[0]["question"]) == train.template_key(rows[1]["question"])
    assert train.template_key(rows[0]["question"]) == "in what city was x born"  # type: ignore[attr-defined]
    assert {"ann lee"} <= train.entity_keys(rows[2])  # type: ignore[attr-defined]
    assert train.decomposition_keys(rows[6]) == {"sub:11", "sub:12"}  # type: ignore[attr-defined]
    keys = [train.row_keys(r) for r in rows]  # type: ignore[attr-defined]
    for seed in range(5):
        folds = train.grouped_folds(rows, 3, seed)  # type: ignore[attr-defined]
        # Same template or a shared sub-question: always the same fold.
        assert folds[0] == folds[1] and folds[2] == folds[3] and folds[10] == folds[11]
        assert folds[6] == folds[7]  # both use sub-question 12
        for fold in range(3):
            test = folds == fold
            kept = train.purge(keys, test, ~test)  # type: ignore[attr-defined]
            assert not (kept & test).any()
            held = set().union(*(keys[i] for i in np.flatnonzero(test))) if test.any() else set()
            for i in np.flatnonzero(kept):
                assert not keys[i] & held, (rows[i]["question"], keys[i] & held)
            # Rows dropped from train share something with the test side.
            for i in np.flatnonzero(~test & ~kept):
                assert keys[i] & held


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
            # Written for this test (in no training set): three chained facts.
            "In which country was the wife of the man who painted The Night Watch born?",
            "Where is the Nerina Dam?",
        ]
    )
    assert got == [1, 4, 3, 1]


def _tiny_rows() -> list[dict[str, object]]:
    """Hop-labelled questions in a few phrasings per hop count, each with its own entity."""
    frames = {
        1: ("Who wrote {e}?", "When was {e} born?", "What is the capital of {e}?"),
        2: (
            "Who is the mother of the director of {e}?",
            "Where was the person who founded {e} born?",
            "When did the father of {e}'s author die?",
        ),
        3: (
            "Who is the spouse of the mayor of the city where {e} was born?",
            "In which country was the wife of the man who painted {e} born?",
            "When was the university attended by the author of the book that inspired {e} built?",
        ),
    }
    rows: list[dict[str, object]] = []
    for hop, phrasings in frames.items():
        source = "popqa" if hop == 1 else "musique"
        for i in range(24):
            entity = f"Quill Harbour{'x' * (i + 1)} {hop}"
            question = phrasings[i % len(phrasings)].format(e=entity)
            rows.append(
                {
                    "question": question,
                    "hops": hop,
                    "source": source,
                    "id": f"{hop}hop__{100 * hop + i}" if hop > 1 else str(i),
                    "titles": [],
                }
            )
    return rows


def test_cascade_training_is_reproducible_on_a_tiny_set() -> None:
    train = _train_module()
    rows = _tiny_rows()
    embedder = HashEmbedder()
    questions = [str(r["question"]) for r in rows]
    vectors = np.asarray(embedder.embed(questions))
    recipe = replace(train.CASCADES["v8"], first_l2=(1e-2,), deep_l2=(1e-2, 1e-1))  # type: ignore[attr-defined]
    x = features(vectors, questions, recipe.lexical).astype(np.float64)
    y = np.asarray([HOPS.index(int(r["hops"])) for r in rows])  # type: ignore[call-overload]
    keys = [train.row_keys(r) for r in rows]  # type: ignore[attr-defined]
    folds = train.grouped_folds(rows, 3, 5)  # type: ignore[attr-defined]
    everything = np.ones(len(rows), dtype=bool)

    def trained() -> HopCascade:
        labelled = train.Questions(x, y, rows, keys, folds, embedder.dim)  # type: ignore[attr-defined]
        choice = train.choose_cascade(recipe, labelled, everything)  # type: ignore[attr-defined]
        return train.build_cascade(  # type: ignore[attr-defined, no-any-return]
            recipe, x, y, rows, everything, choice, embedder.dim, embedder.id, {"tiny": True}
        )

    first, second = trained(), trained()
    assert json.dumps(first.to_json()) == json.dumps(second.to_json())
    assert [s.above for s in first.stages] == [1, 2, 3]
    # It learnt the phrasings: 1 hop against more is told apart on its own training questions,
    # and a longer chain never gets fewer hops on average.
    predicted = np.asarray(first.predict(vectors, questions))
    hop = np.asarray(HOPS)[y]
    assert (predicted[hop == 1] == 1).mean() > 0.9
    assert (predicted[hop > 1] > 1).mean() > 0.9
    assert predicted[hop == 3].mean() > predicted[hop == 2].mean()


def test_a_fixed_weight_is_zero_before_its_step_and_leaves_the_learnt_ones_as_they_were() -> None:
    """v9 holds compared_relations at 0 in steps 1-2 and at +4 per noun in step 3; every other
    weight is the one v8's recipe learns."""
    train = _train_module()
    rows = _tiny_rows()
    for i, row in enumerate(rows):
        if row["hops"] == 3 and i % 2:
            # Comparisons through a relation, labelled 4 as in 2Wiki.
            row["question"] = f"Which film has the director who died first, Quill{i} or Salt{i}?"
            row["hops"] = 4
    embedder = HashEmbedder()
    questions = [str(r["question"]) for r in rows]
    vectors = np.asarray(embedder.embed(questions))
    y = np.asarray([HOPS.index(int(r["hops"])) for r in rows])  # type: ignore[call-overload]
    v8, v9 = train.CASCADES["v8"], train.CASCADES["v9"]  # type: ignore[attr-defined]
    assert v9.lexical == (*v8.lexical, "compared_relations")
    x8 = features(vectors, questions, v8.lexical).astype(np.float64)
    x9 = features(vectors, questions, v9.lexical).astype(np.float64)
    assert x9[:, -1].max() == 1
    everything = np.ones(len(rows), dtype=bool)
    j = embedder.dim + len(v8.lexical)
    for above in (1, 2, 3):
        old = train.fit_stage(v8, above, x8, y, rows, everything, 0.1, embedder.dim)  # type: ignore[attr-defined]
        new = train.fit_stage(v9, above, x9, y, rows, everything, 0.1, embedder.dim)  # type: ignore[attr-defined]
        assert np.array_equal(new.weights[:j], old.weights) and new.bias == old.bias
        if above < 3:
            assert new.weights[j] == 0.0
        else:
            assert (new.mean[j], new.scale[j], new.weights[j]) == (0.0, 1.0, 4.0)
            comparison = np.flatnonzero(x9[:, -1] > 0)
            gap = new.score(x9[comparison]) - old.score(x8[comparison])
            assert np.allclose(gap, 4.0)


def test_fit_binary_learns_a_separable_rule() -> None:
    train = _train_module()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    yes = x[:, 0] + 0.5 * x[:, 1] > 0
    coef, bias = train.fit_binary(x, yes, 1e-3, np.ones(300), True)  # type: ignore[attr-defined]
    assert ((x @ coef + bias > 0) == yes).mean() > 0.95
    assert coef[0] > abs(coef[2]) and coef[0] > abs(coef[3])


def _named_features(question: str) -> dict[str, float]:
    return dict(zip(LEXICAL_NAMES, hops.lexical_features(question).tolist(), strict=True))


def test_masked_counts_set_names_aside_and_count_relations() -> None:
    fact = _named_features("What genre is The Count of Monte Cristo?")
    assert hops.masked_template("What genre is The Count of Monte Cristo?") == "what genre is x"
    # The title's "of" is masked away: a short single fact, not a chain.
    assert fact["masked_of"] == 0 and fact["masked_entities"] == 1
    assert fact["masked_words"] == pytest.approx(0.4)
    chain = _named_features("Who is the spouse of the mayor of the city where Ann Lee was born?")
    assert chain["relation_nouns"] == 3  # spouse, mayor, city
    assert chain["masked_relative"] == 1 and chain["masked_of"] == 2
    assert chain["masked_words"] > fact["masked_words"]


def test_chain_links_count_relations_tied_onwards_not_descriptions() -> None:
    chain = _named_features("Who is the spouse of the mayor of the city where Ann Lee was born?")
    # "the spouse of", "the mayor of", "the city where": three links; one defining clause.
    assert chain["relation_links"] == 3 and chain["defining_clauses"] == 1
    league = _named_features(
        "Who was the second pick in the draft of the league Jim Wilson joined?"
    )
    assert league["relation_links"] == 1  # "the league x": the relation is tied to a name
    band = _named_features("What is the name of a band that Ann Lee founded?")
    assert band["relation_links"] == 0 and band["defining_clauses"] == 1
    # A long description of one bridge entity, and single facts, have no link.
    for question in (
        "Which Danish football club that won three Danish Cups did Keld Borg play for?",
        "What is Ann Lee's occupation?",
        "In what city was Tomas Varga born?",
    ):
        fact = _named_features(question)
        assert fact["relation_links"] == 0 and fact["defining_clauses"] == 0, question


def test_compared_relations_count_the_relation_a_comparison_goes_through() -> None:
    def compared(question: str) -> float:
        return _named_features(question)["compared_relations"]

    # Through a relation: the director of each film, then the director's date or country.
    assert compared("Which film has the director who died first, Salt Road or Quill?") == 1
    assert compared("Which film whose director is younger, Salt Road or Quill?") == 1
    both = "Are the directors of both films Salt Road and Quill from the same country?"
    assert compared(both) == 1
    assert compared("Do both films Salt Road and Quill have directors of the same age?") == 1
    # Direct comparisons: the answer type ("which film"), the compared property ("the same
    # country") and a noun naming a name ("both films x") are not relations.
    assert compared("Who was born first, Ann Lee or Tomas Varga?") == 0
    assert compared("Which film came out first, Salt Road or Quill?") == 0
    assert compared("Are both films Salt Road and Quill from the same country?") == 0
    # Not a comparison at all: a chain, however many relations it names.
    assert compared("Who is the spouse of the mayor of the city where Ann Lee was born?") == 0


@pytest.mark.parametrize("names", [hops.LEXICAL_MASKED, hops.LEXICAL_V8])
def test_a_cascade_of_an_older_feature_list_still_loads_and_reads_its_own_features(
    names: tuple[str, ...],
) -> None:
    """v6/v7 files name the 30 features of LEXICAL_MASKED and v8 files the 32 of LEXICAL_V8; they
    load and predict with those."""
    embedder = HashEmbedder()
    short = _length_cascade(embedder.id, embedder.dim, (0.0, 0.0, 0.0))
    d = embedder.dim + len(names)
    older = replace(
        short,
        lexical=names,
        stages=tuple(
            replace(s, mean=s.mean[:d], scale=s.scale[:d], weights=s.weights[:d])
            for s in short.stages
        ),
    )
    data = json.loads(json.dumps(older.to_json()))
    assert data["lexical"] == list(names)
    again = hops.hop_model_from_json(data, "older.json")
    assert isinstance(again, HopCascade) and again.lexical == names
    questions = [SHORT, LONG]
    vectors = np.asarray(embedder.embed(questions))
    assert again.predict(vectors, questions) == short.predict(vectors, questions)


class _RecordingRecipe:
    """A recipe that records what the shared cross-validation loop hands it."""

    name = "recording"
    width = 2

    def __init__(self) -> None:
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []

    def allowed(self, rows: list[dict[str, object]]) -> np.ndarray:
        return np.asarray([r["source"] != "hotpotqa" for r in rows])

    def choose(self, q: object, train: np.ndarray) -> dict[str, object]:
        return {"trained_on": int(train.sum())}

    def held_out(
        self, q: object, choice: object, train: np.ndarray, test: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        self.seen.append((train.copy(), test.copy()))
        return np.zeros((int(test.sum()), self.width)), np.full(int(test.sum()), 1)


def test_one_cross_validation_loop_purges_and_scores_every_real_row_once() -> None:
    train = _train_module()
    rows = _tiny_rows()
    for row in rows[::5]:
        row["source"] = "synthetic"
    for row in rows[1::7]:
        row["source"] = "hotpotqa"
    keys = [train.row_keys(r) for r in rows]  # type: ignore[attr-defined]
    folds = train.grouped_folds(rows, 3, 5)  # type: ignore[attr-defined]
    y = np.zeros(len(rows), dtype=int)
    recipe = _RecordingRecipe()
    questions = train.Questions(np.zeros((len(rows), 1)), y, rows, keys, folds, 0)  # type: ignore[attr-defined]
    scores, pred, log = train.grouped_cross_validation(recipe, questions, 3)  # type: ignore[attr-defined]
    synthetic = np.asarray([r["source"] == "synthetic" for r in rows])
    assert ((pred == 1) == ~synthetic).all() and (pred[synthetic] == -1).all()
    assert scores.shape == (len(rows), 2) and np.isnan(scores[synthetic]).all()
    assert [entry["fold"] for entry in log] == [0, 1, 2]
    tested = np.zeros(len(rows), dtype=int)
    for (train_mask, test_mask), entry in zip(recipe.seen, log, strict=True):
        tested += test_mask
        assert entry["trained_on"] == entry["train"] == int(train_mask.sum())
        assert not (train_mask & test_mask).any()
        assert not any(rows[i]["source"] == "hotpotqa" for i in np.flatnonzero(train_mask))
        held = set().union(*(keys[i] for i in np.flatnonzero(test_mask)))
        assert not any(keys[i] & held for i in np.flatnonzero(train_mask))
    assert (tested == ~synthetic).all()


def test_the_loop_can_score_the_design_folds_alone() -> None:
    """``only`` fits for and scores just the named folds: the others stay unscored (-1)."""
    train = _train_module()
    rows = _tiny_rows()
    keys = [train.row_keys(r) for r in rows]  # type: ignore[attr-defined]
    folds = train.grouped_folds(rows, 3, 5)  # type: ignore[attr-defined]
    recipe = _RecordingRecipe()
    questions = train.Questions(  # type: ignore[attr-defined]
        np.zeros((len(rows), 1)), np.zeros(len(rows), dtype=int), rows, keys, folds, 0
    )
    _, pred, log = train.grouped_cross_validation(recipe, questions, 3, (0, 2))  # type: ignore[attr-defined]
    assert [entry["fold"] for entry in log] == [0, 2] and len(recipe.seen) == 2
    assert (pred[folds == 1] == -1).all()
    assert ((pred == 1) == np.isin(folds, (0, 2))).all()
    assert not any(test[folds == 1].any() for _, test in recipe.seen)


def test_paired_difference_is_zero_for_equal_predictions_and_signed_otherwise() -> None:
    train = _train_module()
    y = np.asarray([1, 1, 2, 2, 3, 1, 1, 0, 0, 0])
    src = np.asarray(["musique"] * 5 + ["hotpotqa"] * 2 + ["popqa"] * 3)
    same = train.paired_difference(y, y, y, src, 1)  # type: ignore[attr-defined]
    assert same["musique"]["difference"] == 0 and same["musique"]["ci95"] == [0, 0]
    assert same["musique_at_target_mix"]["difference"] == 0
    worse = y.copy()
    worse[src == "popqa"] = 1  # every single fact called 2 hops
    diff = train.paired_difference(worse, y, y, src, 1)  # type: ignore[attr-defined]
    assert diff["popqa"]["difference"] == 1.0 and diff["popqa"]["ci95"] == [1.0, 1.0]
    assert diff["hotpotqa"]["difference"] == 0
    flipped = train.paired_difference(y, worse, y, src, 1)  # type: ignore[attr-defined]
    assert flipped["popqa"]["difference"] == -1.0


def test_the_design_pool_seals_the_other_folds() -> None:
    """A design run never trains on a real question of a sealed fold, nor on anything sharing a
    template, sub-question or entity with one; it scores the design folds only."""
    train = _train_module()
    rows = [dict(r, titles=r.get("titles", [])) for r in GROUPED_ROWS] + _tiny_rows()
    for row in rows[::6]:
        row["source"] = "synthetic"
    keys = [train.row_keys(r) for r in rows]  # type: ignore[attr-defined]
    folds = train.grouped_folds(rows, 3, 2)  # type: ignore[attr-defined]
    questions = train.Questions(  # type: ignore[attr-defined]
        np.zeros((len(rows), 1)), np.zeros(len(rows), dtype=int), rows, keys, folds, 0
    )
    design = (0, 1)
    pool = train.sealed_pool(questions, design)  # type: ignore[attr-defined]
    real = np.asarray([r["source"] != "synthetic" for r in rows])
    sealed = real & (folds == 2)
    assert sealed.any() and not (pool & sealed).any()
    held = set().union(*(keys[i] for i in np.flatnonzero(sealed)))
    assert not any(keys[i] & held for i in np.flatnonzero(pool))
    # Rows left out of the pool are sealed or share something with a sealed row.
    assert all(sealed[i] or keys[i] & held for i in np.flatnonzero(~pool))
    recipe = _RecordingRecipe()
    _, pred, _ = train.grouped_cross_validation(recipe, questions, 3, design, pool)  # type: ignore[attr-defined]
    assert (pred[folds == 2] == -1).all()
    for train_mask, _ in recipe.seen:
        assert not (train_mask & ~pool).any()
    unsealed = _RecordingRecipe()
    train.grouped_cross_validation(unsealed, questions, 3, design)  # type: ignore[attr-defined]
    # Without the pool, the sealed fold's questions would be trained on.
    assert any((t & sealed).any() for t, _ in unsealed.seen)


def test_a_blended_stage_scores_its_own_score_plus_a_share_of_the_other() -> None:
    train = _train_module()
    rng = np.random.default_rng(3)
    d = 7

    def stage(above: int) -> HopStage:
        return HopStage(
            above,
            rng.normal(size=d).astype(np.float32),
            rng.uniform(0.5, 2.0, d).astype(np.float32),
            rng.normal(size=d).astype(np.float32),
            float(rng.normal()),
        )

    own, other = stage(3), stage(2)
    x = rng.normal(size=(20, d))
    assert train.blend_stage(own, other, 0.0) is own  # type: ignore[attr-defined]
    for share in (0.5, 2.0):
        mixed = train.blend_stage(own, other, share)  # type: ignore[attr-defined]
        assert mixed.above == 3
        assert np.array_equal(mixed.mean, own.mean) and np.array_equal(mixed.scale, own.scale)
        assert np.allclose(mixed.score(x), own.score(x) + share * other.score(x), atol=1e-5)


def test_v11_is_v10_with_a_stronger_penalty_in_steps_two_and_three() -> None:
    """v11 changes only the L2 grid of steps 2-3 (three times stronger); every other setting,
    step 1's grid and the blend shares included, is v10's."""
    train = _train_module()
    v10, v11 = train.CASCADES["v10"], train.CASCADES["v11"]  # type: ignore[attr-defined]
    assert v11.deep_l2 == (0.1, 0.3, 1.0) and v10.deep_l2 == (0.03, 0.1, 0.3)
    assert replace(v11, name="v10", deep_l2=v10.deep_l2) == v10
    # v11 was shipped until session 39; v13 is now (see the v13 test).


def _chain_features(question: str) -> dict[str, float]:
    names = hops.LEXICAL_V12
    return dict(zip(names, hops.lexical_features(question, names).tolist(), strict=True))


def test_chain_length_counts_nested_links_possessives_and_clause_depth() -> None:
    nested = _chain_features("What is the birthplace of the father of the director of Quill?")
    assert nested["of_chain"] == 3 and nested["possessive_chain"] == 0
    owned = _chain_features("Who is Ann Lee's father's wife's brother?")
    # Three possessives in a row; the relation nouns after them are held by possessives.
    assert owned["possessive_chain"] == 3 and owned["possessed_relations"] == 3
    deep = _chain_features("Where was the man who founded the company that made the Walkman born?")
    assert deep["clause_nesting"] == 2
    # Coordinated clauses ("..., who ..., and who ...") are not nested.
    flat = _chain_features("Who is Ann Lee, who sang, and who danced in Salt Road?")
    assert flat["clause_nesting"] == 1
    for question in ("In what city was Tomas Varga born?", "What is Ann Lee's occupation?"):
        fact = _chain_features(question)
        assert fact["of_chain"] == 0 and fact["clause_nesting"] == 0, question
        assert fact["possessive_chain"] <= 1 and fact["possessed_relations"] == 0, question
    assert (
        nested["relation_mentions"]
        > _chain_features("What is Ann Lee's occupation?")["relation_mentions"]
    )


def test_written_single_facts_are_many_frames_about_made_up_things() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from hops_synthetic import WRITTEN_FRAMES, written_single_facts

    rows = written_single_facts(5, 400)
    again = written_single_facts(5, 400)
    assert rows == again and len(rows) == 400
    assert len({str(r["question"]) for r in rows}) == 400
    assert all(r["hops"] == 1 and r["source"] == "synthetic" for r in rows)
    assert all(r["set"] == "written" for r in rows)
    # Every frame is used, so no single template makes up the 1-hop class.
    train = _train_module()
    templates = {train.template_key(str(r["question"])) for r in rows}  # type: ignore[attr-defined]
    assert len(templates) >= sum(len(t) for t in WRITTEN_FRAMES.values()) * 0.9


def test_written_rows_join_the_folds_without_moving_the_others() -> None:
    train = _train_module()
    rows = [dict(r, titles=r.get("titles", [])) for r in GROUPED_ROWS]
    folds = train.grouped_folds(rows, 3, 4)  # type: ignore[attr-defined]
    extra = [
        {
            "question": "In what city was Quenna Ostrava born?",
            "hops": 1,
            "source": "synthetic",
            "set": "written",
            "titles": [],
        },
        {
            "question": "What does Quenna Ostrava do for a living?",
            "hops": 1,
            "source": "synthetic",
            "set": "written",
            "titles": [],
        },
    ]
    both = train.extend_folds(folds, rows, extra, 3, 4)  # type: ignore[attr-defined]
    assert np.array_equal(both[: len(rows)], folds)
    # Same template as a grouped row: that row's fold.
    assert both[len(rows)] == folds[0]
    assert 0 <= both[len(rows) + 1] < 3
    # Only recipes that ask for them train on the written rows.
    allowed_old = train.CASCADES["v11"].allowed(rows + extra)  # type: ignore[attr-defined]
    allowed_new = train.CASCADES["d-written"].allowed(rows + extra)  # type: ignore[attr-defined]
    assert allowed_old[: len(rows)].all() and not allowed_old[len(rows) :].any()
    assert allowed_new.all()
    assert not train.RECIPES["v3"].allowed(rows + extra)[len(rows) :].any()  # type: ignore[attr-defined]


def test_v12_is_v11_with_the_written_single_facts() -> None:
    """The v12 candidate changes only which rows train: the written single facts join step 1;
    the features, grids, weights and blend are v11's."""
    train = _train_module()
    v11, v12 = train.CASCADES["v11"], train.CASCADES["v12"]  # type: ignore[attr-defined]
    assert v12.written and not v11.written
    assert replace(v12, name="v11", written=False) == v11


def test_the_meta_records_the_split_only_when_one_is_given() -> None:
    """Without --split-seed the meta is v11's (so an older retrain stays byte-identical); with
    it, the split, its design folds and the sealed folds' accuracies are recorded."""
    import argparse

    train = _train_module()
    result = {
        "grouped": {
            "2wiki": {"accuracy": 0.9},
            "hotpotqa": {"accuracy": 0.8},
            "musique/2": {"accuracy": 0.85},
            "musique/3": {"accuracy": 0.6},
        },
        "untouched_folds": {
            "musique_at_target_mix": 0.74,
            "summary": {"popqa": {"accuracy": 0.97}, "2wiki": {"accuracy": 0.94}},
        },
        "ece_calibrated": 0.013,
    }
    plain = argparse.Namespace(split_seed=None)
    assert train.split_meta(plain, 1604, result, (0, 1, 2)) == {}  # type: ignore[attr-defined]
    meta = train.split_meta(argparse.Namespace(split_seed=7), 7, result, (0, 1, 2))  # type: ignore[attr-defined]
    assert meta["split_seed"] == 7 and meta["design_folds"] == [0, 1, 2]
    assert meta["sealed_folds_musique_at_target_mix"] == 0.74
    assert meta["sealed_folds_popqa"] == 0.97 and meta["sealed_folds_hotpotqa"] is None
    assert meta["grouped_musique_by_hops"] == {2: 0.85, 3: 0.6, 4: None}


def _relations(question: str) -> dict[str, float]:
    names = hops.LEXICAL_RELATIONS
    return dict(zip(names, hops.lexical_features(question, names).tolist(), strict=True))


def test_relation_count_sets_typed_mentions_aside() -> None:
    # One relation, whatever the wording; the type noun before a name is not a link.
    for question in (
        "Tell me the birthplace of the novelist Hamida Vosk.",
        "Who directed Jaws?",
        "In what city was Ann Lee born?",
        "name the capital of the republic of veldoria",
    ):
        assert _relations(question)["relations"] == 1, question
    typed = _relations("Tell me the birthplace of the novelist Hamida Vosk.")
    assert typed["typed_mentions"] == 1
    assert _relations("Who directed Jaws?")["typed_mentions"] == 0
    # After a possessive name too ("Juniper Vale's album Northern Static").
    assert _relations("Which label put out Juniper Vale's album Northern Static?") == {
        "relations": 0.0,
        "typed_mentions": 1.0,
    }
    # A chain counts one per link.
    assert _relations("What year was the director of Jaws born?")["relations"] == 2
    assert _relations("Where did Jean Gimpel's father die?")["relations"] == 2
    assert (
        _relations("Who is the father of the wife of the founder of Kestrel Dynamics?")["relations"]
        == 3
    )
    # A model file may name them.
    assert set(hops.LEXICAL_RELATIONS) <= set(hops.LEXICAL_KNOWN)


def test_open_single_facts_and_chains_are_deterministic_and_varied() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from hops_synthetic import open_chains, open_single_facts

    facts = open_single_facts(3, 300)
    assert facts == open_single_facts(3, 300) and len(facts) == 300
    assert len({str(r["question"]) for r in facts}) == 300
    assert all(r["hops"] == 1 and r["source"] == "synthetic" and r["set"] == "open" for r in facts)
    texts = [str(r["question"]) for r in facts]
    # Typed mentions, "Tell me/Name the" asks, lower case without a question mark.
    assert sum(" the novelist " in t.lower() or " the city of " in t.lower() for t in texts) > 0
    assert sum(t.lower().startswith(("tell me", "name the")) for t in texts) >= 20
    assert sum(t == t.lower() and not t.endswith("?") for t in texts) >= 60
    chains = open_chains(3, 300)
    assert chains == open_chains(3, 300) and len(chains) == 300
    assert {r["hops"] for r in chains} == {2, 3}
    assert all(r["set"] == "open_chain" for r in chains)
    chain_texts = [str(r["question"]).lower() for r in chains]
    assert sum(" or " in t for t in chain_texts) >= 30  # comparisons
    assert any("'s " in t for t in chain_texts)  # possessive chains
    assert not {t.lower() for t in texts} & set(chain_texts)


def test_blind_rows_train_only_the_recipes_that_ask(tmp_path: Path) -> None:
    train = _train_module()
    (tmp_path / "single.json").write_text(
        json.dumps(
            [
                {"question": "Who wrote Quill?", "hops": 1, "relation": "author"},
                {"question": "Who directed Quill?", "hops": 1, "relation": "director"},
                {"question": "Where was Ann Lee born?", "hops": 1, "relation": "birthplace"},
            ]
        )
    )
    (tmp_path / "multi.json").write_text(
        json.dumps([{"question": "Where was the author of Quill born?", "hops": 2}] * 4)
    )
    rows = train.load_blind(tmp_path)  # type: ignore[attr-defined]
    assert len(rows) == 7 and all(r["set"] == "blind1" for r in rows)
    assert rows[0]["group"] == "author" and rows[-1]["group"] == "?"
    assert not train.CASCADES["v12"].allowed(rows).any()  # type: ignore[attr-defined]
    assert train.CASCADES["v13"].allowed(rows).all()  # type: ignore[attr-defined]
    assert not train.RECIPES["v4"].allowed(rows).any()  # type: ignore[attr-defined]
    # Held-out parts keep whole relations together.
    parts = train.blind_parts(rows, 2, 1)  # type: ignore[attr-defined]
    assert set(parts.tolist()) <= {0, 1} and len(set(parts[3:].tolist())) == 2
    (tmp_path / "multi.json").write_text(json.dumps([{"question": "Where?", "hops": 7}]))
    with pytest.raises(SystemExit, match=r"multi\.json: item 0"):
        train.load_blind(tmp_path)  # type: ignore[attr-defined]


def test_first_only_features_stay_out_of_steps_two_and_three() -> None:
    train = _train_module()
    rng = np.random.default_rng(0)
    recipe = train.CASCADES["v13"]  # type: ignore[attr-defined]
    dim = 4
    n = 120
    lexical = rng.normal(size=(n, len(recipe.lexical)))
    y = np.tile([0, 1, 2, 3], n // 4)
    j = recipe.lexical.index("relations")
    lexical[:, j] = y + rng.normal(scale=0.1, size=n)  # a feature that predicts every step
    x = np.hstack([rng.normal(size=(n, dim)), lexical])
    rows = [{"source": "musique", "question": "q"} for _ in range(n)]
    train_mask = np.ones(n, dtype=bool)
    first = train.fit_stage(recipe, 1, x, y, rows, train_mask, 0.1, dim)  # type: ignore[attr-defined]
    second = train.fit_stage(recipe, 2, x, y, rows, train_mask, 0.1, dim)  # type: ignore[attr-defined]
    assert abs(first.weights[dim + j]) > 0.1
    assert second.weights[dim + j] == 0.0
    # Without first_only the same step would use it.
    plain = replace(recipe, first_only=())
    assert abs(train.fit_stage(plain, 2, x, y, rows, train_mask, 0.1, dim).weights[dim + j]) > 0.1  # type: ignore[attr-defined]


def test_v13_is_v12_with_relation_counts_open_wordings_and_blind_set_one() -> None:
    """v13 changes step 1's features (the relation counts, step 1 only) and which rows train
    (the open-wording facts and chains, blind set 1 at weight 3); grids, source weights and
    blend are v12's."""
    train = _train_module()
    v12, v13 = train.CASCADES["v12"], train.CASCADES["v13"]  # type: ignore[attr-defined]
    assert v13.lexical == (*v12.lexical, *hops.LEXICAL_RELATIONS)
    assert v13.first_only == hops.LEXICAL_RELATIONS
    assert v13.open_facts and v13.open_chains and v13.blind_weight == 3.0
    assert (
        replace(
            v13,
            name="v12",
            lexical=v12.lexical,
            first_only=(),
            open_facts=False,
            open_chains=False,
            blind_weight=0.0,
        )
        == v12
    )
    # The shipped model is v13's: it passed the rule written before blind set 2 existed.
    shipped = load_hop_model()
    assert shipped.meta["recipe"] == v13.name and shipped.lexical == v13.lexical
