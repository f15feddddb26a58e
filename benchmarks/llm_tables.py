"""Markdown tables from ``psirag eval`` results with an LLM, for the hand-written LLM sections.

The LLM runs take hours of local-model time, so they are run by hand (commands in
``section_llm_2wiki.md``) and never by ``run_all.py``. This script turns their results.json
files into the tables of that section, and keeps a copy of the aggregate numbers in
``benchmarks/results/llm_<name>.json`` with machine paths removed (no per-question rows: those
hold the benchmark's questions, which stay out of the repository).

    python benchmarks/llm_tables.py bench-out/eval/2wiki-llm20-compare.json --name 2wiki_compare20
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _common import RESULTS

SCORES = (("recall@2", "R@2"), ("recall@5", "R@5"), ("em", "EM"), ("f1", "F1"))
SUMMARY_SCORES = (("rouge_l", "ROUGE-L"),)
"""Document-level sets (QMSum) have reference summaries only: no passages, no answer string."""
COMPARED = (("recall@5", "Recall@5"), ("f1", "F1"), ("rouge_l", "ROUGE-L"))
PATH_KEYS = ("cache_dir", "embedding_cache", "path")


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}"


def ci_cell(ci: dict[str, Any] | None) -> str:
    """A paired-bootstrap entry as ``+1.2 [-0.5, +3.0]`` (``–`` when missing)."""
    return "–" if ci is None else f"{ci['diff']:+.1f} [{ci['low']:+.1f}, {ci['high']:+.1f}]"


def _strip_paths(value: Any) -> Any:
    """The results without machine paths (cache folders, index locations)."""
    if isinstance(value, dict):
        return {k: _strip_paths(v) for k, v in value.items() if k not in PATH_KEYS}
    if isinstance(value, list):
        return [_strip_paths(v) for v in value]
    return value


def _is_summary(results: dict[str, Any]) -> bool:
    """Whether every method was scored by ROUGE-L alone (a summarization run)."""
    return all(
        m.get("rouge_l") is not None and m.get("em") is None for m in results["methods"].values()
    )


def tables(results: dict[str, Any]) -> str:
    """The quality table, the reply-format table and the bootstrap comparisons."""
    summary = _is_summary(results)
    scores = SUMMARY_SCORES if summary else SCORES
    alias_header = "" if summary else " EM / F1 over aliases |"
    lines = [
        f"{results['dataset']}, first {results['n_questions']} questions:",
        "",
        "| method | " + " | ".join(label for _, label in scores) + " |" + alias_header,
        "|---|" + "---|" * (len(scores) + (0 if summary else 1)),
    ]
    for name, m in results["methods"].items():
        cells = [_fmt(m.get(key)) for key, _ in scores]
        alias = "" if summary else f" {_fmt(m.get('em_alias'))} / {_fmt(m.get('f1_alias'))} |"
        lines.append(f"| {name} | " + " | ".join(cells) + " |" + alias)
    # Summaries are free text: only methods whose replies have a format get this table.
    formatted = {name: m for name, m in results["methods"].items() if m.get("replies")}
    if formatted:
        lines += [
            "",
            "| method | LLM calls | replies well-formed | rescued | forced turns | nudged turns "
            "| checked answers | names checks | Not mentioned | retrievals / question |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    for name, m in formatted.items():
        lines.append(
            f"| {name} | {m['llm_calls']} | {m['well_formed_pct']}% of {m['replies']} "
            f"| {m['rescued_replies']} | {m['forced_turns']} | {m.get('nudged_turns', 0)} "
            f"| {m.get('checked_turns', 0)} | {m.get('names_checks', 0)} "
            f"| {m['not_mentioned']} "
            f"| {m['retrievals_per_question']} |"
        )
    comparisons = results.get("comparisons") or {}
    if comparisons:
        lines += [
            "",
            "Paired bootstrap (10,000 resamples) of the per-question difference, points, 95% CI:",
            "",
        ]
        compared = [
            (key, label)
            for key, label in COMPARED
            if any(entry.get(key) is not None for entry in comparisons.values())
        ]
        lines += [
            "| difference | " + " | ".join(label for _, label in compared) + " |",
            "|---|" + "---|" * len(compared),
        ]
        for pair, entry in comparisons.items():
            cells = [ci_cell(entry.get(score)) for score, _ in compared]
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a results.json written by psirag eval")
    parser.add_argument("--name", required=True, help="saved as benchmarks/results/llm_NAME.json")
    args = parser.parse_args()
    results = json.loads(args.results.read_text(encoding="utf-8"))
    keep = {k: results[k] for k in ("dataset", "n_questions", "methods", "comparisons", "llm")}
    keep["embedder"] = results.get("embedder")
    keep["settings"] = _strip_paths(results.get("settings", {}))
    out = RESULTS / f"llm_{args.name}.json"
    out.write_text(json.dumps(keep, indent=2) + "\n", encoding="utf-8")
    print(tables(results))


if __name__ == "__main__":
    main()
