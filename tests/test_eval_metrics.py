"""The paper's metrics on cases worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from psirag.eval.metrics import (
    exact_match,
    exact_match_max,
    f1,
    f1_max,
    lcs_length,
    normalize_answer,
    paired_bootstrap_ci,
    passage_key,
    recall_at_k,
    rouge_l,
    rouge_l_max,
    rouge_n_recall,
    rouge_tokens,
    segment_coverage,
)

# --- Recall@k ------------------------------------------------------------------------------------


def test_passage_key_is_title_newline_text() -> None:
    assert passage_key("Lothair II", "Lothair II was king.") == "Lothair II\nLothair II was king."
    assert passage_key("", "untitled text") == "untitled text"
    assert passage_key(None, "untitled text") == "untitled text"


def test_recall_counts_gold_passages_in_the_top_k() -> None:
    gold = ["A\na", "B\nb"]
    retrieved = ["C\nc", "A\na", "D\nd", "B\nb", "E\ne"]
    assert recall_at_k(retrieved, gold, 1) == 0.0
    assert recall_at_k(retrieved, gold, 2) == 0.5
    assert recall_at_k(retrieved, gold, 3) == 0.5
    assert recall_at_k(retrieved, gold, 4) == 1.0
    assert recall_at_k(retrieved, gold, 50) == 1.0  # shorter list than k


def test_recall_is_exact_passage_identity() -> None:
    gold = ["Paris\nParis is the capital of France."]
    # Same text without the title, different case, trailing space: none of these is the passage.
    near = [
        "Paris is the capital of France.",
        "paris\nParis is the capital of France.",
        "Paris\nParis is the capital of France. ",
    ]
    assert recall_at_k(near, gold, 5) == 0.0


def test_recall_counts_each_gold_passage_once() -> None:
    gold = ["A\na", "A\na", "B\nb"]  # a duplicated gold id is one passage
    assert recall_at_k(["A\na", "A\na"], gold, 2) == 0.5


def test_recall_needs_gold_and_positive_k() -> None:
    with pytest.raises(ValueError):
        recall_at_k(["x"], [], 5)
    with pytest.raises(ValueError):
        recall_at_k(["x"], ["x"], 0)


# --- EM / F1 -------------------------------------------------------------------------------------


def test_squad_normalisation() -> None:
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("an apple, a pear and the plum") == "apple pear and plum"
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("Theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("  20 March   851 ") == "20 march 851"


def test_exact_match() -> None:
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    assert exact_match("20 March 851", "20 March 851") == 1.0


def test_f1_by_hand() -> None:
    # pred tokens: [march, 851]; gold: [20, march, 851] -> P 2/2, R 2/3, F1 = 0.8
    assert f1("March 851", "20 March 851") == pytest.approx(0.8)
    # pred [new, york, city, new] gold [new, york]: overlap min(2,1)+1 = 2 -> P 2/4 R 2/2 -> 2/3
    assert f1("New York City new", "New York") == pytest.approx(2 / 3)
    assert f1("Paris", "London") == 0.0
    assert f1("The Paris", "paris!") == 1.0


def test_f1_with_empty_answers() -> None:
    assert f1("", "Paris") == 0.0
    assert f1("Paris", "the") == 0.0  # gold normalises to nothing
    assert f1("a", "the") == 1.0  # both normalise to nothing: they agree, as EM says
    assert exact_match("a", "the") == 1.0


def test_alias_maxima() -> None:
    golds = ["Arsenal F.C.", "Arsenal"]
    assert exact_match("arsenal", "Arsenal F.C.") == 0.0
    assert exact_match_max("arsenal", golds) == 1.0
    # "arsenal" vs "arsenal fc": P 1, R 1/2 -> 2/3; vs "arsenal": 1
    assert f1("arsenal", "Arsenal F.C.") == pytest.approx(2 / 3)
    assert f1_max("arsenal", golds) == 1.0
    assert f1_max("Arsenal football", ["Chelsea", "Arsenal F.C."]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        f1_max("x", [])


# --- ROUGE-L -------------------------------------------------------------------------------------


def test_lcs_length() -> None:
    assert lcs_length(list("ABCBDAB"), list("BDCABA")) == 4  # the textbook example
    assert lcs_length([], ["a"]) == 0
    assert lcs_length(["a", "b"], ["a", "b"]) == 2


def test_rouge_l_by_hand() -> None:
    # LCS "the cat on the mat" = 5 of 6 tokens on each side: P = R = 5/6
    assert rouge_l("the cat sat on the mat", "the cat was on the mat") == pytest.approx(5 / 6)
    # order matters: [police, kill, the, gunman] vs [gunman, kill] share one token in order
    # (LCS 1): P 1/4, R 1/2 -> F = 1/3; vs [police, gunman]: LCS 2, P 1/2, R 1 -> F = 2/3
    assert rouge_l("police killed the gunman", "gunman killed") == pytest.approx(1 / 3)
    assert rouge_l("police killed the gunman", "police gunman") == pytest.approx(2 / 3)
    assert rouge_l("", "anything") == 0.0
    assert rouge_l("abc", "xyz") == 0.0


def test_rouge_l_stems_and_ignores_case_and_punctuation() -> None:
    assert rouge_tokens("The Meetings discussed, running!") == ["the", "meet", "discuss", "run"]
    # "was" stays "was" (short tokens are not stemmed), so it matches itself only
    assert rouge_tokens("was") == ["was"]
    # stemmed, [run, dog] vs [the, dog, run]: LCS 1 -> P 1/2, R 1/3 -> F 0.4
    assert rouge_l("Running dogs", "the dogs run") == pytest.approx(0.4)
    # without stemming there would be no common token at all
    assert rouge_l("discussions", "discussion") == 1.0


def test_rouge_l_max_over_references() -> None:
    assert rouge_l_max("the cat sat", ["a dog barked", "the cat sat"]) == 1.0


# --- paired bootstrap ----------------------------------------------------------------------------


def test_rouge_n_recall_by_hand() -> None:
    ref = "the cat sat on the mat"
    # unigrams: the x2, cat, sat, on, mat = 6; the context holds "the" once, cat, mat
    assert rouge_n_recall("a cat and the mat", ref, 1) == pytest.approx(3 / 6)
    # bigrams of ref: the-cat, cat-sat, sat-on, on-the, the-mat; context has the-mat only
    assert rouge_n_recall("a cat and the mat", ref, 2) == pytest.approx(1 / 5)
    assert rouge_n_recall(ref + " and more words", ref, 2) == pytest.approx(1.0)
    assert rouge_n_recall("anything", "", 1) == 0.0
    with pytest.raises(ValueError):
        rouge_n_recall("a", "a", 0)


def test_rouge_n_recall_clips_repeats_and_stems() -> None:
    # a context repeating "cat" does not cover the reference's two cats twice over
    assert rouge_n_recall("Cats cats cats", "cat cat dog dog", 1) == pytest.approx(2 / 4)


def test_segment_coverage_counts_stretches_touched() -> None:
    assert segment_coverage([0, 1, 2], total=100, parts=10) == pytest.approx(0.1)
    assert segment_coverage([0, 15, 99], total=100, parts=10) == pytest.approx(0.3)
    assert segment_coverage(range(0, 100, 10), total=100, parts=10) == pytest.approx(1.0)
    assert segment_coverage([], total=100) == 0.0
    assert segment_coverage(range(5), total=5, parts=10) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        segment_coverage([100], total=100)


def test_bootstrap_of_identical_scores_is_zero() -> None:
    a = [1.0, 0.0, 1.0, 1.0]
    ci = paired_bootstrap_ci(a, a, n=500)
    assert (ci.diff, ci.low, ci.high) == (0.0, 0.0, 0.0)
    assert not ci.significant


def test_bootstrap_of_a_constant_difference_is_that_difference() -> None:
    rng = np.random.default_rng(1)
    b = rng.random(50)
    ci = paired_bootstrap_ci(b + 0.25, b, n=300)
    assert ci.diff == pytest.approx(0.25)
    assert ci.low == pytest.approx(0.25) and ci.high == pytest.approx(0.25)
    assert ci.significant


def test_bootstrap_two_questions_by_hand() -> None:
    # d = [1, 0]: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4, so the 2.5th
    # and 97.5th percentiles are 0 and 1.
    ci = paired_bootstrap_ci([1.0, 0.0], [0.0, 0.0], n=4000, seed=3)
    assert ci.diff == 0.5
    assert (ci.low, ci.high) == (0.0, 1.0)
    assert not ci.significant


def test_bootstrap_keeps_the_pairing_and_is_deterministic() -> None:
    rng = np.random.default_rng(7)
    b = rng.random(200)
    a = b + rng.normal(0.05, 0.02, size=200)  # a small, consistent per-question gain
    ci = paired_bootstrap_ci(a, b, n=2000, seed=0)
    assert ci.low < ci.diff < ci.high
    assert ci.low > 0  # paired: significant although the score spread (~0.3) dwarfs the gain
    assert ci == paired_bootstrap_ci(a, b, n=2000, seed=0)
    assert ci != paired_bootstrap_ci(a, b, n=2000, seed=1)


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_bootstrap_ci([], [])
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1.0], [1.0], n=0)
