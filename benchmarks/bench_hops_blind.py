"""Hop discriminators on questions written blind (issue 27 item 1).

Two sets, each written by a separate helper that saw neither the repository, the training
frames (``hops_synthetic``), PopQA, MuSiQue nor any score: ``benchmarks/data/hops_blind/`` (set
1) and ``benchmarks/data/hops_blind2/`` (set 2), each 240 single-fact questions (40+ relations,
real and made-up entities, many wordings) and 180 chains (2, 3 and 4 hops, bridges and
comparisons). They test whether a model's single-fact calls and hop counts carry over to
wordings nobody tuned on. Set 1 was scored once under a rule written beforehand, then became
v13's design data; set 2 was written after v13 was frozen and scored once (BENCHMARKS.md,
"Query-hop discriminator v13 shipped").

Each model file is scored on the same questions with the same MiniLM vectors; differences are
paired (question bootstrap, 10,000 resamples).

    python benchmarks/bench_hops_blind.py --data benchmarks/data/hops_blind2 \\
        --model v11=OLD.json --model v13=NEW.json --out benchmarks/results/hops_blind.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS

from psirag.embed import load_embedder
from psirag.eval.metrics import paired_bootstrap_ci
from psirag.hops import hop_model_from_json

BLIND = Path(__file__).resolve().parent / "data" / "hops_blind"


def _questions(path: Path) -> list[dict[str, Any]]:
    rows = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and isinstance(r.get("question"), str) and r.get("hops") in (1, 2, 3, 4)
        for r in rows
    ):
        raise SystemExit(f"{path}: expected a list of {{question, hops in 1-4}} objects")
    return rows


def _share(values: np.ndarray) -> float:
    return round(100.0 * float(values.mean()), 2) if values.size else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="NAME=FILE",
        help="a hop model JSON file; the first is the baseline of the paired differences",
    )
    ap.add_argument("--data", default=str(BLIND), help="folder with single.json and multi.json")
    ap.add_argument("--out", default=str(RESULTS / "hops_blind.json"))
    args = ap.parse_args()

    data = Path(args.data)
    single = _questions(data / "single.json")
    multi = _questions(data / "multi.json")
    rows = single + multi
    texts = [r["question"].strip() for r in rows]
    truth = np.array([r["hops"] for r in rows])
    is_single = truth == 1
    embedder = load_embedder("minilm")
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)

    predicted: dict[str, np.ndarray] = {}
    for spec in args.model:
        name, _, file = spec.partition("=")
        if not file:
            raise SystemExit(f"--model {spec!r}: write NAME=FILE")
        raw = json.loads(Path(file).read_text(encoding="utf-8"))
        model = hop_model_from_json(raw, file)
        predicted[name] = np.asarray(model.predict(vectors, texts))

    def scores(pred: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "single_called_1": (pred[is_single] == 1).astype(float),
            "multi_exact": (pred[~is_single] == truth[~is_single]).astype(float),
            "multi_called_2plus": (pred[~is_single] >= 2).astype(float),
            **{f"multi_{h}_exact": (pred[truth == h] == h).astype(float) for h in (2, 3, 4)},
        }

    out: dict[str, Any] = {
        "n_single": int(is_single.sum()),
        "n_multi": int((~is_single).sum()),
        "n_multi_by_hops": {str(h): int((truth == h).sum()) for h in (2, 3, 4)},
        "models": {},
        "paired": {},
    }
    base_name = next(iter(predicted))
    base = scores(predicted[base_name])
    for name, pred in predicted.items():
        s = scores(pred)
        confusion = [
            [int(((truth == t) & (pred == p)).sum()) for p in (1, 2, 3, 4)] for t in (1, 2, 3, 4)
        ]
        relations = Counter(
            r.get("relation", "?") for r, p in zip(single, pred[is_single], strict=True) if p != 1
        )
        out["models"][name] = {
            **{k: _share(v) for k, v in s.items()},
            "confusion_true_1_to_4": confusion,
            "single_missed_by_relation": dict(relations.most_common()),
        }
        if name != base_name:
            out["paired"][f"{name}-{base_name}"] = {
                k: paired_bootstrap_ci(s[k], base[k]).to_dict() for k in s if s[k].size
            }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    for name, m in out["models"].items():
        print(name, {k: v for k, v in m.items() if not isinstance(v, (list, dict))})
    for key, diffs in out["paired"].items():
        for k, ci in diffs.items():
            low, high = 100 * ci["low"], 100 * ci["high"]
            print(f"{key} {k}: {100 * ci['diff']:+.1f} [{low:+.1f}, {high:+.1f}]")


if __name__ == "__main__":
    main()
