"""``--max-retrievals auto`` against a fixed budget, one question at a time, resumable (issue 27).

The agent (psi+agent, the default profile) answers the first N questions of each set twice: with
a fixed budget of retrievals after the first (the CLI's default, 1) and with ``auto`` (the hop
discriminator's h hops give h-1, at least 1). Where the predicted budget equals the fixed one the
two episodes are the same (same prompts, replies replayed from the cache, deterministic search),
so their difference is 0 by construction; the questions whose budgets differ are therefore run
first, then the others, each group in the order q0 of every set, q1 of every set, ..., with the
fixed arm first, so a run stopped at any point has answered the sets evenly. The predicted
budgets of all N questions are saved in ``OUT/budgets.json``. Each finished episode is appended
(and fsynced) to ``OUT/<set>-<arm>.questions.jsonl`` as soon as it ends, in the row format of
``psirag eval`` (``benchmarks/agent_compare.py`` reads it too); a rerun skips what is there. All
arms share one LLM reply cache, so a reply the arms have in common (the same prompt) is paid
once: an ``auto`` episode with the fixed budget replays the fixed one. Each row adds ``wall_s``
(the episode as run) and the LLM calls paid or replayed.

    python benchmarks/bench_auto_budget.py run --out DIR --cache-dir DIR --n 40 \\
        --llm openai:http://127.0.0.1:8011/v1#qwen --embedding-cache NPZ
    python benchmarks/bench_auto_budget.py report --out DIR --name auto_budget
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from _common import DATA, RESULTS

from psirag.eval.clients import LLM_CACHE_FILE
from psirag.eval.data import load_dataset
from psirag.eval.harness import run_eval
from psirag.eval.metrics import paired_bootstrap_ci
from psirag.eval.settings import EvalSettings, resolve_embedder
from psirag.http import HttpPolicy
from psirag.llm import load_chat_model
from psirag.llm.client import LLMClient

SETS = ("2wikimultihopqa", "hotpotqa-dev200")
METHOD = "psi+agent"
FIXED = 1
"""The CLI's default budget (``psirag ask`` and ``psirag eval`` without ``--max-retrievals``)."""
ARMS: tuple[tuple[str, int | str], ...] = (("fixed1", FIXED), ("auto", "auto"))
COMPARED = (
    ("recall@5", "Recall@5", 100.0),
    ("em", "EM", 100.0),
    ("f1", "F1", 100.0),
    ("retrievals", "retrievals", 1.0),
    ("wall_s", "s / question as run", 1.0),
    ("est_s", "s / question, none replayed (est.)", 1.0),
)


def rows_path(out: Path, name: str, arm: str) -> Path:
    return out / f"{name}-{arm}.questions.jsonl"


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Finished episodes by question id (a torn last line from a crash is skipped)."""
    rows: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows[str(row["id"])] = row
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def predicted_budgets(data: dict[str, Any]) -> dict[str, list[int]]:
    """The ``auto`` budget of every question (the harness predicts the same per run)."""
    from psirag.hops import HopPredictor, load_hop_model, max_retrievals_for

    predictor = HopPredictor(model=load_hop_model())
    return {
        name: [max_retrievals_for(h) for h in predictor.predict([q.question for q in d.questions])]
        for name, d in data.items()
    }


def run_order(budgets: dict[str, list[int]]) -> list[tuple[str, int]]:
    """Questions whose budgets differ first, then the rest; each part interleaved by set."""
    longest = max(len(b) for b in budgets.values())
    order = [(name, i) for i in range(longest) for name in budgets if i < len(budgets[name])]
    differ = [(name, i) for name, i in order if budgets[name][i] != FIXED]
    return differ + [(name, i) for name, i in order if budgets[name][i] == FIXED]


def _paid(client: LLMClient) -> tuple[int, int, float]:
    usage = client.usage.values()
    return (
        sum(int(u["calls"]) for u in usage),
        sum(int(u["cached"]) for u in usage),
        sum(float(u["seconds"]) for u in usage),
    )


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(args.cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    http = HttpPolicy(timeout=args.timeout)
    base = EvalSettings(
        methods=(METHOD,),
        llm=args.llm,
        cache_dir=cache_dir,
        embedding_cache=Path(args.embedding_cache) if args.embedding_cache else None,
        bootstrap=0,
        http=http,
    )
    embedder = resolve_embedder(base.embedder)
    client = LLMClient(load_chat_model(args.llm, http=http), cache_dir / LLM_CACHE_FILE)
    data = {name: load_dataset(Path(args.data) / name, args.n) for name in args.sets}
    done = {
        (name, arm): read_rows(rows_path(out, name, arm)) for name in args.sets for arm, _ in ARMS
    }
    budgets = predicted_budgets(data)
    (out / "budgets.json").write_text(json.dumps(budgets) + "\n", encoding="utf-8")
    try:
        for name, i in run_order(budgets):
            question = data[name].questions[i]
            for arm, budget in ARMS:
                if question.id in done[(name, arm)]:
                    continue
                settings = replace(base, max_retrievals=budget)
                before = _paid(client)
                start = time.perf_counter()
                report = run_eval(
                    replace(data[name], questions=[question]),
                    settings,
                    embedder=embedder,
                    llm=client,
                )
                wall = time.perf_counter() - start
                after = _paid(client)
                (row,) = report.rows()
                row.update(
                    index=i,
                    arm=arm,
                    wall_s=wall,
                    retrievals=int((row.get("agent_stats") or {}).get("retrievals", 0)),
                    llm_paid_calls=after[0] - before[0],
                    llm_replayed_calls=after[1] - before[1],
                    llm_paid_s=after[2] - before[2],
                )
                append_row(rows_path(out, name, arm), row)
                done[(name, arm)][question.id] = row
                print(
                    f"{name} q{i} {arm}: budget {row['max_retrievals']} "
                    f"hops {row.get('predicted_hops')} R@5 {row['recall@5']:.2f} "
                    f"EM {row['em']:.0f} {wall:.0f} s "
                    f"(paid {row['llm_paid_calls']}, replayed {row['llm_replayed_calls']})",
                    flush=True,
                )
    finally:
        client.close()
    return 0


def add_estimated_seconds(arms: dict[str, list[dict[str, Any]]]) -> None:
    """``est_s``: an episode's seconds had none of its LLM calls been replayed from the cache,
    estimated as its wall time plus its replayed calls at the mean paid seconds per call of the
    same question's other episode (else its own)."""
    for row, other in zip(arms["auto"], arms["fixed1"], strict=True):
        for a, b in ((row, other), (other, row)):
            source = b if int(b["llm_paid_calls"]) else a
            per_call = float(source["llm_paid_s"]) / max(1, int(source["llm_paid_calls"]))
            a["est_s"] = float(a["wall_s"]) + int(a["llm_replayed_calls"]) * per_call


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"questions": len(rows)}
    for key, _, scale in COMPARED:
        out[key] = scale * float(np.mean([float(r[key]) for r in rows]))
    out["llm_calls"] = int(sum(int(r["llm_calls"]) for r in rows))
    out["llm_paid_calls"] = int(sum(int(r["llm_paid_calls"]) for r in rows))
    out["llm_replayed_calls"] = int(sum(int(r["llm_replayed_calls"]) for r in rows))
    out["budgets"] = {
        str(b): sum(1 for r in rows if r["max_retrievals"] == b)
        for b in sorted({int(r["max_retrievals"]) for r in rows})
    }
    return out


def _over_all(
    out: Path, name: str, arms: dict[str, list[dict[str, Any]]], resamples: int
) -> dict[str, Any]:
    """auto - fixed over all N questions of the run, where those not run with equal budgets count
    as 0 (the same episode); only when every question whose budgets differ was run. Also how many
    run pairs with equal budgets differed in any score (0 unless the replay assumption fails)."""
    path = out / "budgets.json"
    if not path.is_file():
        return {}
    budgets: list[int] = json.loads(path.read_text(encoding="utf-8"))[name]
    run_pairs = {int(a["index"]): (a, f) for a, f in zip(arms["auto"], arms["fixed1"], strict=True)}
    equal_but_different = sum(
        1
        for a, f in run_pairs.values()
        if int(a["max_retrievals"]) == FIXED
        and any(float(a[key]) != float(f[key]) for key, _, _ in COMPARED[:3])
    )
    result: dict[str, Any] = {
        "predicted_budgets": {str(b): budgets.count(b) for b in sorted(set(budgets))},
        "equal_budget_pairs_run": sum(
            1 for a, _ in run_pairs.values() if int(a["max_retrievals"]) == FIXED
        ),
        "equal_budget_pairs_that_differ": equal_but_different,
    }
    differing = [i for i, b in enumerate(budgets) if b != FIXED]
    if not all(i in run_pairs for i in differing):
        return result
    over_all: dict[str, Any] = {"questions": len(budgets)}
    for key, _, scale in COMPARED[:4]:
        diff = [0.0] * len(budgets)
        for i, (a, f) in run_pairs.items():
            diff[i] = scale * (float(a[key]) - float(f[key]))
        over_all[key] = paired_bootstrap_ci(diff, [0.0] * len(diff), n=resamples).to_dict()
    result["auto_minus_fixed_all_n"] = over_all
    return result


def report(args: argparse.Namespace) -> int:
    out = Path(args.out)
    document: dict[str, Any] = {
        "method": METHOD,
        "fixed_budget": FIXED,
        "resamples": args.resamples,
        "sets": {},
    }
    lines = [
        "| set, questions (0-based) | arm | budgets (retrievals after the first: questions) | "
        "R@5 | EM | F1 | retrievals / q (first included) | LLM calls (paid + replayed) | "
        "s / q as run | s / q, none replayed (est.) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    diffs = [
        "| set | " + " | ".join(f"{label}, auto − fixed" for _, label, _ in COMPARED) + " |",
        "|---|" + "---|" * len(COMPARED),
    ]
    for name in args.sets:
        loaded = {arm: read_rows(rows_path(out, name, arm)) for arm, _ in ARMS}
        common = [qid for qid in loaded["fixed1"] if qid in loaded["auto"]]
        if not common:
            continue
        arms = {arm: [loaded[arm][q] for q in common] for arm in loaded}
        add_estimated_seconds(arms)
        summaries = {arm: summarise(rows) for arm, rows in arms.items()}
        same = sum(
            [p["id"] for p in a["retrieved"]] == [p["id"] for p in f["retrieved"]]
            for a, f in zip(arms["auto"], arms["fixed1"], strict=True)
        )
        comparisons: dict[str, Any] = {"same_evidence": same}
        for key, _, scale in COMPARED:
            ci = paired_bootstrap_ci(
                [scale * float(r[key]) for r in arms["auto"]],
                [scale * float(r[key]) for r in arms["fixed1"]],
                n=args.resamples,
            )
            comparisons[key] = ci.to_dict()
        document["sets"][name] = {
            "questions": len(common),
            "summaries": summaries,
            "auto_minus_fixed": comparisons,
            "per_question": [  # positions and scores only: no benchmark text
                {
                    "index": int(a["index"]),
                    "auto_budget": int(a["max_retrievals"]),
                    **{
                        f"{key} {arm}": round(float(r[key]), 4)
                        for key in ("recall@5", "em", "f1", "retrievals", "llm_calls", "wall_s")
                        for arm, r in (("fixed", f), ("auto", a))
                    },
                }
                for a, f in zip(arms["auto"], arms["fixed1"], strict=True)
            ],
            **_over_all(out, name, arms, args.resamples),
        }
        positions = "q" + ", q".join(str(r["index"]) for r in arms["auto"])
        for arm, s in summaries.items():
            budgets = ", ".join(f"{b}: {c}" for b, c in s["budgets"].items())
            lines.append(
                f"| {name}, {positions} | {arm} | {budgets} | {s['recall@5']:.1f} | "
                f"{s['em']:.1f} | {s['f1']:.1f} | {s['retrievals']:.2f} | {s['llm_calls']} "
                f"({s['llm_paid_calls']} + {s['llm_replayed_calls']}) | {s['wall_s']:.1f} | "
                f"{s['est_s']:.1f} |"
            )
        cells = [
            f"{c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]"
            for c in (comparisons[key] for key, _, _ in COMPARED)
        ]
        diffs.append(f"| {name} ({same} of {len(common)} same evidence) | " + " | ".join(cells))
        diffs[-1] += " |"
        extra = document["sets"][name]
        if "auto_minus_fixed_all_n" in extra:
            every = extra["auto_minus_fixed_all_n"]
            cells = [
                f"{c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}]"
                for c in (every[key] for key, _, _ in COMPARED[:4])
            ]
            diffs.append(
                f"| {name}, all first {every['questions']} (equal budgets not run: 0) | "
                + " | ".join(cells)
                + " | – | – |"
            )
    print("\n".join([*lines, "", *diffs]))
    if args.name:
        path = RESULTS / f"llm_{args.name}.json"
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="answer the questions not yet in OUT")
    r.add_argument(
        "--llm", required=True, help="LLM spec, e.g. openai:http://127.0.0.1:8011/v1#qwen"
    )
    r.add_argument("--cache-dir", required=True, help="indexes and the shared LLM reply cache")
    r.add_argument("--embedding-cache", help="npz of passage vectors (psirag eval's)")
    r.add_argument("--n", type=int, default=40, help="first N questions of each set")
    r.add_argument("--timeout", type=float, default=900.0, help="deadline of one LLM call, s")
    r.add_argument("--data", default=str(DATA))
    p = sub.add_parser("report", help="tables and benchmarks/results/llm_NAME.json")
    p.add_argument("--name", help="save the aggregates as benchmarks/results/llm_NAME.json")
    p.add_argument("--resamples", type=int, default=10_000)
    for q in (r, p):
        q.add_argument("--out", required=True, help="folder of the per-question rows")
        q.add_argument("--sets", nargs="+", default=list(SETS))
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    raise SystemExit(main())
