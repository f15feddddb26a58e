"""Agent runs side by side, with paired bootstrap intervals across separate ``psirag eval`` runs.

One ``psirag eval`` run compares the methods it ran; the agent comparisons of issue 16 also pair
runs made with other flags (``--profile paper``, ``--max-retrievals auto`` or ``3``). This reads
the per-question files those runs write (``<output>.questions.jsonl``), keeps the questions every
run answered, and prints one table per dataset: each arm's scores and agent counters, then each
arm against the reference arm (paired bootstrap of the per-question difference, 95% interval).
The aggregates (no per-question rows: those hold the benchmark's questions) are kept in
``benchmarks/results/llm_<name>.json``.

    python benchmarks/agent_compare.py --name agent_2wiki --reference "hybrid+agent" \\
        "psi+agent=runs/w2-L100.questions.jsonl:psi+agent" \\
        "hybrid+agent=runs/w2-L100.questions.jsonl:hybrid+agent" \\
        "psi paper+agent=runs/w2paper-L100.questions.jsonl:psi+agent"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS
from llm_tables import ci_cell

from psirag.eval.metrics import paired_bootstrap_ci

SCORES = (
    ("recall@2", "R@2"),
    ("recall@5", "R@5"),
    ("em", "EM"),
    ("f1", "F1"),
    ("em_alias", "EM*"),
    ("f1_alias", "F1*"),
)
COMPARED = (("recall@5", "Recall@5"), ("em", "EM"), ("f1", "F1"))
COUNTERS = ("retrievals", "llm_calls", "repeated_queries", "example_queries", "no_answer")


def parse_arm(spec: str) -> tuple[str, Path, str]:
    """``LABEL=FILE:METHOD`` -> (label, file, method)."""
    label, sep, rest = spec.partition("=")
    path, sep2, method = rest.rpartition(":")
    if not sep or not sep2 or not label or not method:
        raise SystemExit(f"an arm is LABEL=FILE:METHOD, got {spec!r}")
    return label, Path(path), method


def load_rows(path: Path, method: str) -> dict[str, dict[str, Any]]:
    """The rows of one method in a questions.jsonl, by question id."""
    if not path.is_file():
        raise SystemExit(f"{path}: no such file (psirag eval --output X writes X.questions.jsonl)")
    rows: dict[str, dict[str, Any]] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                if row.get("method") == method:
                    rows[str(row["id"])] = row
    if not rows:
        raise SystemExit(f"{path}: no rows for method {method!r}")
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean scores in percent, counter totals, and citation precision over answers citing."""
    out: dict[str, Any] = {}
    for key, _ in SCORES:
        values = [r.get(key) for r in rows]
        out[key] = None if any(v is None for v in values) else 100 * float(np.mean(values))
    for key in COUNTERS:
        out[key] = int(sum(int((r.get("agent_stats") or {}).get(key, 0)) for r in rows))
    precision = [r["citation_precision"] for r in rows if r.get("citation_precision") is not None]
    out["citation_precision"] = 100 * float(np.mean(precision)) if precision else None
    out["answers_citing"] = len(precision)
    out["questions"] = len(rows)
    return out


def _evidence(row: dict[str, Any]) -> list[str]:
    return [str(p.get("id")) for p in row.get("retrieved") or []]


def compare(
    arms: dict[str, list[dict[str, Any]]], reference: str, resamples: int
) -> dict[str, dict[str, Any]]:
    """Each arm minus the reference, per compared score, and on how many questions the two
    episodes ended with the same evidence list (then the scores can only tie)."""
    base = arms[reference]
    result: dict[str, dict[str, Any]] = {}
    for label, rows in arms.items():
        if label == reference:
            continue
        same = sum(_evidence(r) == _evidence(b) for r, b in zip(rows, base, strict=True))
        entry: dict[str, Any] = {"same_evidence": same}
        for key, _ in COMPARED:
            a = [r.get(key) for r in rows]
            b = [r.get(key) for r in base]
            if any(v is None for v in a + b):
                continue
            ci = paired_bootstrap_ci(
                [100 * float(v) for v in a], [100 * float(v) for v in b], n=resamples
            )
            entry[key] = ci.to_dict()
        result[f"{label} - {reference}"] = entry
    return result


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}"


def markdown(summaries: dict[str, dict[str, Any]], comparisons: dict[str, Any], n: int) -> str:
    lines = [
        f"{n} questions answered by every arm:",
        "",
        "| arm | " + " | ".join(label for _, label in SCORES) + " | cite P | retrievals | LLM "
        "calls | repeats refused | example copies refused | no answer |",
        "|---|" + "---|" * (len(SCORES) + 6),
    ]
    for label, s in summaries.items():
        cells = [_fmt(s[key]) for key, _ in SCORES]
        cells += [
            _fmt(s["citation_precision"]),
            str(s["retrievals"]),
            str(s["llm_calls"]),
            str(s["repeated_queries"]),
            str(s["example_queries"]),
            str(s["no_answer"]),
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| difference, points (paired bootstrap 95% CI) | "
        + " | ".join(label for _, label in COMPARED)
        + " | same evidence |",
        "|---|" + "---|" * (len(COMPARED) + 1),
    ]
    for pair, entry in comparisons.items():
        cells = [ci_cell(entry.get(key)) for key, _ in COMPARED]
        cells.append(f"{entry['same_evidence']} of {n}")
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="+", metavar="LABEL=FILE:METHOD")
    parser.add_argument("--reference", required=True, help="the label every arm is compared to")
    parser.add_argument(
        "--name", help="also save the aggregates as benchmarks/results/llm_NAME.json"
    )
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)
    loaded: dict[str, dict[str, dict[str, Any]]] = {}
    sources: dict[str, str] = {}
    for spec in args.arms:
        label, path, method = parse_arm(spec)
        if label in loaded:
            raise SystemExit(f"two arms are labelled {label!r}")
        loaded[label] = load_rows(path, method)
        sources[label] = f"{path.name}:{method}"  # no folders: no machine paths in the repository
    if args.reference not in loaded:
        raise SystemExit(f"--reference {args.reference!r} names no arm ({', '.join(loaded)})")
    first = next(iter(loaded.values()))
    common = [qid for qid in first if all(qid in rows for rows in loaded.values())]
    if not common:
        raise SystemExit("no question is answered by every arm")
    arms = {label: [rows[qid] for qid in common] for label, rows in loaded.items()}
    summaries = {label: summarise(rows) for label, rows in arms.items()}
    comparisons = compare(arms, args.reference, args.resamples)
    print(markdown(summaries, comparisons, len(common)))
    if args.name:
        out = RESULTS / f"llm_{args.name}.json"
        document = {
            "questions": len(common),
            "reference": args.reference,
            "arms": sources,
            "summaries": summaries,
            "comparisons": comparisons,
        }
        out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
