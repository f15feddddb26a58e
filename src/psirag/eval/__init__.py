"""Evaluation: the paper's metrics (SPEC 3), benchmark folders, and the ``psirag eval`` harness.

The metrics import eagerly (numpy and PyStemmer only); the harness and the method registry load
on first use, so that ``psirag --help`` does not import the index layer.

    from psirag.eval import EvalSettings, run_eval
    report = run_eval("../shared/data/2wikimultihopqa", EvalSettings(methods=("psi", "bm25")))
    print(report.table())
    report.write("results.json")
"""

from __future__ import annotations

import importlib
from typing import Any

from psirag.eval.metrics import (
    BootstrapCI,
    exact_match,
    exact_match_max,
    f1,
    f1_max,
    normalize_answer,
    paired_bootstrap_ci,
    passage_key,
    recall_at_k,
    rouge_l,
    rouge_l_max,
)

_LAZY = {
    "EvalDataset": "psirag.eval.data",
    "EvalQuestion": "psirag.eval.data",
    "load_dataset": "psirag.eval.data",
    "default_data_dir": "psirag.eval.data",
    "EvalSettings": "psirag.eval.settings",
    "EMBEDDER_HOOKS": "psirag.eval.settings",
    "EvalReport": "psirag.eval.harness",
    "run_eval": "psirag.eval.harness",
    "format_table": "psirag.eval.harness",
    "METHODS": "psirag.eval.methods",
    "EvalContext": "psirag.eval.methods",
    "IndexCache": "psirag.eval.methods",
    "Retrieval": "psirag.eval.methods",
    "register_method": "psirag.eval.methods",
    "score_published_outputs": "psirag.eval.published",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'psirag.eval' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "EMBEDDER_HOOKS",
    "METHODS",
    "BootstrapCI",
    "EvalContext",
    "EvalDataset",
    "EvalQuestion",
    "EvalReport",
    "EvalSettings",
    "IndexCache",
    "Retrieval",
    "default_data_dir",
    "exact_match",
    "exact_match_max",
    "f1",
    "f1_max",
    "format_table",
    "load_dataset",
    "normalize_answer",
    "paired_bootstrap_ci",
    "passage_key",
    "recall_at_k",
    "register_method",
    "rouge_l",
    "rouge_l_max",
    "run_eval",
    "score_published_outputs",
]
