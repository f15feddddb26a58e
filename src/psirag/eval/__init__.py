"""Evaluation: the paper's metrics (SPEC 3), benchmark folders, and the ``psirag eval`` harness.

The metrics import eagerly (numpy and PyStemmer only); the harness and the method registry load
on first use, so that ``psirag --help`` does not import the index layer.

    from psirag.eval import EvalSettings, run_eval
    report = run_eval("../shared/data/2wikimultihopqa", EvalSettings(methods=("psi", "bm25")))
    print(report.table())
    report.write("results.json")
"""

from __future__ import annotations

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
from psirag.lazy import lazy_exports

_LAZY = {
    "EvalDataset": "data",
    "EvalQuestion": "data",
    "load_dataset": "data",
    "default_data_dir": "data",
    "EvalSettings": "settings",
    "EMBEDDER_HOOKS": "settings",
    "EvalReport": "harness",
    "run_eval": "harness",
    "format_table": "harness",
    "METHODS": "methods",
    "EvalContext": "methods",
    "IndexCache": "methods",
    "Retrieval": "methods",
    "register_method": "methods",
    "score_published_outputs": "published",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


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
