"""``psirag eval``: methods x questions on a benchmark folder, a table, results.json + JSONL.

``register(subparsers)`` adds the command to the main CLI. Progress goes to stderr; the table to
stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from psirag.config import DEFAULT_EMBEDDER, SearchConfig
from psirag.errors import InputError

LLM_ENV = "PSIRAG_LLM"


def _methods(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--methods needs at least one name")
    return names


def register(subparsers: Any) -> None:
    """Add ``eval`` to the main CLI's subparsers."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate retrieval and QA methods on a benchmark folder",
        description="Run methods over the questions of a folder holding corpus.json and "
        "questions.json (the ../shared/data format) with the paper's metrics: Recall@2/5 by "
        "passage identity, EM/F1 with SQuAD normalisation (and the best over aliases), "
        "ROUGE-L for reference summaries. Indexes are built once and reused from --cache-dir.",
    )
    p.add_argument("dataset", metavar="DATASET_DIR", help="folder with corpus.json, questions.json")
    p.add_argument(
        "--methods",
        type=_methods,
        default=(),
        metavar="LIST",
        help="comma-separated: psi, psi-tree, bm25, dense, hybrid, and NAME+agent with --llm "
        "(default: psi,psi-tree,bm25,dense,hybrid; with --llm: psi,hybrid,psi+agent,"
        "hybrid+agent). With --llm, a plain NAME answers with one LLM call over one retrieval.",
    )
    p.add_argument("--limit", type=int, metavar="N", help="first N questions only")
    p.add_argument(
        "--llm",
        metavar="SPEC",
        default=None,
        help="LLM spec (openai:<base_url>#<model>, llamacpp:<path.gguf>, local); "
        f"default ${LLM_ENV} when methods need one",
    )
    p.add_argument(
        "--output",
        metavar="PATH",
        default="results.json",
        help="results file (default results.json); per-question rows go to "
        "<stem>.questions.jsonl beside it",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="built indexes and the LLM reply cache (default ~/.cache/psirag/eval)",
    )
    p.add_argument(
        "--embedder",
        default=DEFAULT_EMBEDDER,
        metavar="SPEC",
        help="minilm (default), st:/path/to/model, openai:http://host/v1#model",
    )
    p.add_argument(
        "--embedding-cache",
        metavar="NPZ",
        default=None,
        help="npz of vectors keyed by sha1 of the text (e.g. bench-out/cache/"
        "embeddings-minilm.npz): reused, extended; index build seconds then exclude embedding",
    )
    p.add_argument(
        "--beam",
        type=int,
        default=SearchConfig.beam,
        metavar="N",
        help=f"tree search beam (default {SearchConfig.beam})",
    )
    p.add_argument(
        "--reranker",
        metavar="PATH",
        default=None,
        help="local cross-encoder folder: psi and hybrid rerank their union instead of RRF",
    )
    p.add_argument(
        "--max-retrievals",
        type=int,
        default=1,
        metavar="N",
        help="agent retrievals after the first (default 1, the paper's 2Wiki setting)",
    )
    p.add_argument("--max-tokens", type=int, default=256, metavar="N", help="cap on each LLM reply")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="questions answered in parallel by LLM methods (default 1)",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=10000,
        metavar="N",
        help="paired bootstrap resamples vs the first method (default 10000; 0: off)",
    )
    p.add_argument("--rebuild", action="store_true", help="rebuild indexes even if cached")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run_eval_command)


def run_eval_command(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.eval.harness import run_eval
    from psirag.eval.settings import EvalSettings, default_cache_dir

    stdout = stdout or sys.stdout
    llm = args.llm
    if llm is None and any(m.endswith("+agent") for m in args.methods):
        llm = os.environ.get(LLM_ENV) or None
        if llm is None:
            raise InputError(f"the +agent methods need an LLM: pass --llm SPEC or set ${LLM_ENV}")
    settings = EvalSettings(
        methods=args.methods,
        limit=args.limit,
        llm=llm,
        cache_dir=Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir(),
        embedder=args.embedder,
        beam=args.beam,
        reranker=args.reranker,
        max_retrievals=args.max_retrievals,
        max_tokens=args.max_tokens,
        workers=args.workers,
        embedding_cache=Path(args.embedding_cache) if args.embedding_cache else None,
        rebuild=args.rebuild,
        bootstrap=args.bootstrap,
    )

    def say(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    report = run_eval(args.dataset, settings, say=say, progress=not args.quiet)
    results, questions = report.write(args.output)
    print(report.table(), file=stdout)
    say(f"wrote {results} and {questions}")
    return 0


__all__ = ["register", "run_eval_command"]
