"""Write tests/data/tree_golden.npz: tree builder outputs recorded from the code before the
tree unification (issue 22 item 6), so that test_tree_golden.py can show the builders still give
bit-identical trees.

Run once, from the repository root, on the commit whose outputs are to be recorded:

    PYTHONPATH=src python tests/data/make_tree_golden.py [corpus.json]

The recorded file was made at commit 8da280c (before tree/merge.py and tree/rebalance.py).
Every case names its input embeddings (float32, each stored once), its build arguments and
the builder's ``parent`` and ``layer`` arrays, so the test needs neither this script nor an
embedding model.
The "real" case embeds the first 64 passages of a 2WikiMultihopQA corpus file with the default
MiniLM embedder (skipped when no corpus path is given).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from psirag.tree import build_forest, build_tree

OUT = Path(__file__).with_name("tree_golden.npz")


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _random(seed: int, n: int, d: int) -> np.ndarray:
    return _unit(np.random.default_rng(seed).normal(size=(n, d)))


def _clustered(seed: int, n: int, d: int, clusters: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d))
    rows = centres[rng.integers(clusters, size=n)] + 0.3 * rng.normal(size=(n, d))
    return _unit(rows)


def _cases(real: np.ndarray | None) -> list[tuple[str, np.ndarray, dict[str, object]]]:
    cases: list[tuple[str, np.ndarray, dict[str, object]]] = []
    for seed, n in enumerate([2, 3, 37, 120, 300, 500]):
        for mc in (None, 2, 3, 5, 40):
            e = _random(seed, n, 8) if seed % 2 else _clustered(seed, n, 8, 6)
            cases.append((f"exact-s{seed}-n{n}-mc{mc}", e, {"mode": "exact", "max_children": mc}))
    dup = _unit(np.repeat(np.random.default_rng(9).normal(size=(20, 6)), 4, axis=0))
    cases.append(("exact-duplicates", dup, {"mode": "exact", "max_children": 3}))
    ties = _unit(np.eye(12, dtype=np.float32)[np.arange(48) % 12] + 0.0)
    cases.append(("exact-ties", ties, {"mode": "exact", "max_children": 4}))
    for seed, (n, k) in enumerate([(150, 3), (260, 8), (90, 1)]):
        e = _clustered(10 + seed, n, 12, 5)
        for mc in (None, 4):
            cases.append(
                (f"knn-s{seed}-k{k}-mc{mc}", e, {"mode": "knn", "neighbors": k, "max_children": mc})
            )
    for seed, (n, k) in enumerate([(200, 4), (400, 8)]):
        e = _clustered(20 + seed, n, 16, 7)
        for mc in (None, 5):
            cases.append(
                (f"ann-s{seed}-k{k}-mc{mc}", e, {"mode": "ann", "neighbors": k, "max_children": mc})
            )
    for seed, (n, b) in enumerate([(300, 50), (700, 64), (240, 20)]):
        e = _clustered(30 + seed, n, 10, 9) if seed != 1 else _random(30 + seed, n, 10)
        for mc in (None, 3, 40):
            cases.append(
                (
                    f"bucketed-s{seed}-b{b}-mc{mc}",
                    e,
                    {"mode": "bucketed", "bucket_size": b, "max_children": mc},
                )
            )
    if real is not None:
        for mc in (None, 3, 8, 40):
            cases.append((f"real-mc{mc}", real, {"mode": "exact", "max_children": mc}))
            cases.append(
                (f"real-knn-mc{mc}", real, {"mode": "knn", "neighbors": 4, "max_children": mc})
            )
    return cases


def _real(corpus: Path) -> np.ndarray:
    from psirag.embed import load_embedder

    passages = json.loads(corpus.read_text(encoding="utf-8"))[:64]
    texts = [f"{p['title']}\n{p['text']}" for p in passages]
    return np.asarray(load_embedder("minilm").embed(texts), dtype=np.float32)


def main() -> None:
    real = _real(Path(sys.argv[1])) if len(sys.argv) > 1 else None
    arrays: dict[str, np.ndarray] = {}
    names = []
    for name, e, kwargs in _cases(real):
        extra = {"workers": 1} if kwargs["mode"] == "bucketed" else {}
        tree = build_tree(e, **kwargs, **extra)  # type: ignore[arg-type]
        key = hashlib.sha256(e.tobytes()).hexdigest()[:16]  # each input stored once
        arrays[f"input/{key}"] = e
        arrays[f"{name}/input"] = np.asarray(key)
        arrays[f"{name}/parent"] = tree.parent
        arrays[f"{name}/layer"] = tree.layer
        names.append(name)
        arrays[f"{name}/kwargs"] = np.asarray(json.dumps(kwargs))
    forest_e = _clustered(40, 160, 8, 4)
    groups = np.arange(160) % 5
    forest = build_forest(forest_e, groups, max_children=3)
    arrays["forest/embeddings"] = forest_e
    arrays["forest/groups"] = groups
    arrays["forest/parent"] = forest.parent
    arrays["forest/layer"] = forest.layer
    arrays["cases"] = np.asarray(names)
    np.savez_compressed(OUT, **arrays)
    print(f"{len(names)} cases + 1 forest -> {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
