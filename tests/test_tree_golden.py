"""The tree builders give bit-identical trees to the code before their unification.

``tests/data/tree_golden.npz`` holds inputs and ``(parent, layer)`` outputs recorded by
``tests/data/make_tree_golden.py`` at commit 8da280c, when the exact walk, the bucket merge
and the approximate spanning trees each had their own union-find, merge loop or rebalancer.
Exact, knn, ann and bucketed builds, several ``max_children``, duplicate and tied rows, a
forest, and 64 real MiniLM passage embeddings must all come out exactly as recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from psirag.tree import build_forest, build_tree

GOLDEN = np.load(Path(__file__).parent / "data" / "tree_golden.npz")
CASES = [str(name) for name in GOLDEN["cases"]]


@pytest.mark.parametrize("name", CASES)
def test_builder_reproduces_recorded_tree(name: str) -> None:
    kwargs = json.loads(str(GOLDEN[f"{name}/kwargs"]))
    if kwargs["mode"] == "ann":
        pytest.importorskip("hnswlib")
    if kwargs["mode"] == "bucketed":
        kwargs["workers"] = 1
    embeddings = GOLDEN[f"input/{GOLDEN[f'{name}/input']}"]
    tree = build_tree(embeddings, **kwargs)
    assert tree.parent.dtype == GOLDEN[f"{name}/parent"].dtype
    assert tree.layer.dtype == GOLDEN[f"{name}/layer"].dtype
    assert np.array_equal(tree.parent, GOLDEN[f"{name}/parent"])
    assert np.array_equal(tree.layer, GOLDEN[f"{name}/layer"])


def test_forest_reproduces_recorded_tree() -> None:
    forest = build_forest(GOLDEN["forest/embeddings"], GOLDEN["forest/groups"], max_children=3)
    assert np.array_equal(forest.parent, GOLDEN["forest/parent"])
    assert np.array_equal(forest.layer, GOLDEN["forest/layer"])


def test_recorded_cases_cover_every_mode() -> None:
    """A guard on the fixture itself: the golden file must still hold each kind of case."""
    kinds = {json.loads(str(GOLDEN[f"{name}/kwargs"]))["mode"] for name in CASES}
    assert kinds == {"exact", "knn", "ann", "bucketed"}
    assert any(name.startswith("real-") for name in CASES)
    assert any(GOLDEN[f"{name}/parent"].size > 500 for name in CASES)
