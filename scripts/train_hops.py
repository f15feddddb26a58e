"""Train the query-hop discriminator (psirag.hops) and write its shipped weights.

Data (from the benchmark data folder, ``--data``, default ``../shared/data``):
- ``hops/questions.json``: 500 PopQA questions (1 hop) and 484 MuSiQue ones (2-4 hops);
- ``2wikimultihopqa/questions.json``: 2 hops, except ``bridge_comparison`` questions (4
  supporting passages), labelled 4;
- ``hotpotqa-dev200/questions.json``: 2 hops.

Split: every distinct question (case and space folded, so a duplicate never sits on both sides)
goes to test with probability ``--test-share`` inside its (source, hops) stratum, with a fixed
seed. All four sources are in both train and test. The L2 strength is chosen on a validation
slice of train only; the final model is fit on all of train and scored once on test.

Usage: ``python scripts/train_hops.py --cache PATH.npz [--out src/psirag/data/hops-minilm.json]
[--report benchmarks/results/hops.json]``. Embedding the ~2,200 questions with MiniLM takes a few
CPU minutes; ``--cache`` keeps the vectors (an .npz keyed by text sha1).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from psirag.hops import HOPS, HopModel, features  # noqa: E402

SEED = 1604


def load_questions(data: Path) -> list[dict[str, object]]:
    """All labelled questions: {question, hops, source}."""
    rows: list[dict[str, object]] = []
    for q in json.loads((data / "hops" / "questions.json").read_text(encoding="utf-8")):
        rows.append({"question": q["question"], "hops": int(q["hops"]), "source": q["source"]})
    for q in json.loads((data / "2wikimultihopqa" / "questions.json").read_text(encoding="utf-8")):
        hops = 4 if len(q["supporting_passage_ids"]) == 4 else 2
        rows.append({"question": q["question"], "hops": hops, "source": "2wiki"})
    for q in json.loads((data / "hotpotqa-dev200" / "questions.json").read_text(encoding="utf-8")):
        rows.append({"question": q["question"], "hops": 2, "source": "hotpotqa"})
    # One row per distinct question (the first label wins), so none is on both sides.
    seen: set[str] = set()
    unique = []
    for row in rows:
        key = " ".join(str(row["question"]).lower().split())
        if key not in seen:
            seen.add(key)
            unique.append(row)
    return unique


def split(rows: list[dict[str, object]], share: float, seed: int) -> np.ndarray:
    """Boolean test mask, stratified by (source, hops)."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(rows), dtype=bool)
    strata: dict[tuple[object, object], list[int]] = {}
    for i, row in enumerate(rows):
        strata.setdefault((row["source"], row["hops"]), []).append(i)
    for members in strata.values():
        order = rng.permutation(members)
        n_test = max(1, round(share * len(members)))
        test[order[:n_test]] = True
    return test


def fit(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray]:
    """Class-weighted softmax regression by L-BFGS (each class weighs as much in the loss)."""
    n, d = x.shape
    k = len(HOPS)
    counts = np.bincount(y, minlength=k).astype(np.float64)
    sample_w = (n / (k * np.maximum(counts, 1)))[y]
    onehot = np.eye(k)[y]

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w = theta[: d * k].reshape(d, k)
        b = theta[d * k :]
        logits = x @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        value = -(sample_w * (onehot * logp).sum(axis=1)).sum() / n + 0.5 * l2 * (w * w).sum()
        grad_logits = (np.exp(logp) - onehot) * sample_w[:, None] / n
        gw = x.T @ grad_logits + l2 * w
        gb = grad_logits.sum(axis=0)
        return float(value), np.concatenate([gw.ravel(), gb])

    theta0 = np.zeros(d * k + k)
    res = minimize(loss, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return res.x[: d * k].reshape(d, k), res.x[d * k :]


def standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale > 1e-6, scale, 1.0)


def confusion(y_true: np.ndarray, y_pred: np.ndarray) -> list[list[int]]:
    k = len(HOPS)
    m = np.zeros((k, k), dtype=int)
    for t, p in zip(y_true, y_pred, strict=True):
        m[t, p] += 1
    return m.tolist()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--cache", required=True, help=".npz file caching the question vectors")
    ap.add_argument("--out", default=str(ROOT / "src" / "psirag" / "data" / "hops-minilm.json"))
    ap.add_argument("--report", default=str(ROOT / "benchmarks" / "results" / "hops.json"))
    ap.add_argument("--test-share", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args(argv)

    from psirag.embed import load_embedder
    from psirag.eval.embedcache import CachingEmbedder

    rows = load_questions(Path(args.data))
    questions = [str(r["question"]) for r in rows]
    y = np.asarray([HOPS.index(int(r["hops"])) for r in rows])  # type: ignore[call-overload]
    embedder = CachingEmbedder(load_embedder("minilm"), args.cache)
    vectors = np.asarray(embedder.embed(questions, progress=True, desc="questions"))
    x_all = features(vectors, questions).astype(np.float64)

    test = split(rows, args.test_share, args.seed)
    train_idx = np.flatnonzero(~test)
    test_idx = np.flatnonzero(test)
    # Validation slice of train (same stratified split, another seed) to pick the L2 strength.
    train_rows = [rows[i] for i in train_idx]
    val_mask = split(train_rows, 0.2, args.seed + 1)
    tr, va = train_idx[~val_mask], train_idx[val_mask]
    mean, scale = standardise(x_all[tr])
    best = None
    for l2 in (1e-3, 3e-3, 1e-2, 3e-2, 1e-1):
        w, b = fit((x_all[tr] - mean) / scale, y[tr], l2)
        pred = (((x_all[va] - mean) / scale) @ w + b).argmax(axis=1)
        # Balanced accuracy: 3- and 4-hop questions are few, plain accuracy would ignore them.
        recall = [
            float((pred[y[va] == c] == c).mean()) for c in range(len(HOPS)) if (y[va] == c).any()
        ]
        score = float(np.mean(recall))
        print(f"l2={l2:g}: validation balanced accuracy {100 * score:.1f}", file=sys.stderr)
        if best is None or score > best[0]:
            best = (score, l2)
    assert best is not None
    l2 = best[1]
    mean, scale = standardise(x_all[train_idx])
    w, b = fit((x_all[train_idx] - mean) / scale, y[train_idx], l2)
    pred = (((x_all[test_idx] - mean) / scale) @ w + b).argmax(axis=1)
    y_test = y[test_idx]
    acc = float((pred == y_test).mean())
    per_class = {str(HOPS[c]): float((pred[y_test == c] == c).mean()) for c in range(len(HOPS))}
    by_source = {}
    for source in sorted({str(r["source"]) for r in rows}):
        sel = np.asarray([str(rows[i]["source"]) == source for i in test_idx])
        by_source[source] = {
            "n": int(sel.sum()),
            "accuracy": float((pred[sel] == y_test[sel]).mean()),
        }
    by_stratum = {}
    for key in sorted({f"{r['source']}/{r['hops']}" for r in rows}):
        sel = np.asarray([f"{rows[i]['source']}/{rows[i]['hops']}" == key for i in test_idx])
        by_stratum[key] = round(float((pred[sel] == y_test[sel]).mean()), 4)
    # The budget the agent gets: exact when the predicted budget equals the true one.
    budget = np.maximum(1, np.asarray(HOPS)[pred] - 1)
    budget_true = np.maximum(1, np.asarray(HOPS)[y_test] - 1)

    sizes = {
        side: dict(sorted(Counter(f"{rows[i]['source']}/{rows[i]['hops']}" for i in idx).items()))
        for side, idx in (("train", train_idx), ("test", test_idx))
    }
    meta = {
        "trained_by": "scripts/train_hops.py",
        "seed": args.seed,
        "l2": l2,
        "train": len(train_idx),
        "test": len(test_idx),
        "test_accuracy": round(acc, 4),
    }
    model = HopModel(
        embedder.id,
        mean.astype(np.float32),
        scale.astype(np.float32),
        w.astype(np.float32),
        b.astype(np.float32),
        meta,
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    model.save(args.out)
    # The shipped (float32) model must reproduce the test predictions.
    shipped = HopModel.from_json(json.loads(Path(args.out).read_text()), args.out)
    check = shipped.predict(vectors[test_idx], [questions[i] for i in test_idx])
    agree = float(np.mean(np.asarray(check) == np.asarray(HOPS)[pred]))
    report = {
        "embedder": embedder.id,
        "seed": args.seed,
        "test_share": args.test_share,
        "l2": l2,
        "validation_balanced_accuracy": round(best[0], 4),
        "sizes": sizes,
        "test_accuracy": round(acc, 4),
        "test_balanced_accuracy": round(float(np.mean(list(per_class.values()))), 4),
        "per_class_recall": {k: round(v, 4) for k, v in per_class.items()},
        "by_source": by_source,
        "by_stratum": by_stratum,
        "budget_accuracy": round(float((budget == budget_true).mean()), 4),
        "confusion": confusion(y_test, pred),
        "shipped_agreement": agree,
    }
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.report + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tmp.replace(args.report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
