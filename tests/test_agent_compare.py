"""benchmarks/agent_compare.py: arms from separate eval runs, paired on the questions they share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "agent_compare.py"


def _row(method: str, qid: str, recall: float, em: float, **stats: int) -> dict[str, object]:
    return {
        "method": method,
        "id": qid,
        "recall@2": recall,
        "recall@5": recall,
        "em": em,
        "f1": em,
        "em_alias": em,
        "f1_alias": em,
        "citation_precision": 1.0 if em else None,
        "agent_stats": {"retrievals": 2, "llm_calls": 3, **stats},
        "retrieved": [{"id": f"{qid}-{recall}"}],
    }


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_arms_are_paired_on_common_questions(tmp_path: Path) -> None:
    first = tmp_path / "run.questions.jsonl"
    other = tmp_path / "paper.questions.jsonl"
    _write(
        first,
        [
            _row("hybrid+agent", "q1", 1.0, 1.0),
            _row("hybrid+agent", "q2", 0.5, 0.0),
            _row("hybrid+agent", "q3", 0.0, 0.0, repeated_queries=1),
            _row("psi+agent", "q1", 1.0, 1.0),
        ],
    )
    # The paper-profile run reached one question fewer; q4 is in no other arm.
    _write(
        other,
        [
            _row("psi+agent", "q1", 0.5, 0.0, example_queries=1),
            _row("psi+agent", "q2", 0.5, 0.0),
            _row("psi+agent", "q4", 1.0, 1.0),
        ],
    )
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--reference",
            "hybrid",
            "--resamples",
            "500",
            f"hybrid={first}:hybrid+agent",
            f"paper={other}:psi+agent",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = done.stdout
    assert out.startswith("2 questions answered by every arm")  # q1, q2
    # hybrid on q1, q2: R@5 (1.0 + 0.5) / 2 = 75; paper: 50; EM 50 against 0.
    assert "| hybrid | 75.0 | 75.0 | 50.0 | 50.0 | 50.0 | 50.0 | 100.0 | 4 | 6 | 0 | 0 | 0 |" in out
    assert "| paper | 50.0 | 50.0 | 0.0 | 0.0 | 0.0 | 0.0 | – | 4 | 6 | 0 | 1 | 0 |" in out
    assert "| paper - hybrid | -25.0 [" in out
    assert out.rstrip().endswith("| 1 of 2 |")  # q2: the same evidence in both arms


def test_a_bad_arm_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.questions.jsonl"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--reference", "a", f"a={missing}:psi+agent"],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "nope.questions.jsonl: no such file" in done.stderr
