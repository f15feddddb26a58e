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

from psirag.cli.options import (
    LLM_ENV,
    Flag,
    add_abstracts_option,
    add_answer_check_option,
    add_build_embedder_option,
    add_http_options,
    add_llm_options,
    add_max_children_option,
    add_max_retrievals_option,
    add_names_check_option,
    add_profile_option,
    add_routing_option,
    add_settings_options,
    add_tree_mode_options,
    http_policy_from,
    positive_int,
    settings_values,
)
from psirag.config import PROFILES, IndexConfig, SearchConfig
from psirag.errors import InputError
from psirag.eval.settings import EvalSettings


def _methods(value: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("--methods needs at least one name")
    return names


EVAL_FLAGS: dict[str, Flag] = {
    "methods": Flag(
        "--methods",
        "comma-separated: psi, psi-tree, bm25, dense, hybrid, raptor, raptor-collapsed "
        "(the last two need psirag[eval]); with --llm also NAME+agent (the R&A agent) and "
        "NAME+ircot (IRCoT baseline: each reasoning sentence is the next query, same retrieval "
        "budget and answer step as the agent) and NAME+summarize (the paper's summarization "
        "mode: one retrieval inside the question's own document, the visited abstracts and "
        "passages summarized, scored by ROUGE-L; psi, psi-tree, dense, bm25, hybrid) "
        "(default: psi,psi-tree,bm25,dense,hybrid; with --llm: psi,hybrid,psi+agent,"
        "hybrid+agent, or psi+summarize,dense+summarize when the questions have reference "
        "summaries and no answer, as QMSum). With --llm, a plain NAME answers with one LLM call "
        "over one retrieval (unless --retrieval-only).",
        type=_methods,
        metavar="LIST",
    ),
    "limit": Flag("--limit", "first N questions only", type=int, metavar="N"),
    "beam": Flag(
        "--beam",
        f"tree search beam (default: the profile's, {SearchConfig.beam} or "
        f"{PROFILES['paper'].beam} for --profile paper)",
        type=int,
        metavar="N",
    ),
    "reranker": Flag(
        "--reranker",
        "local cross-encoder folder: psi and hybrid rerank their union instead of RRF",
        metavar="PATH",
    ),
    "max_tokens": Flag("--max-tokens", "cap on each LLM reply", type=int, metavar="N"),
    "summary_top_k": Flag(
        "--summary-top-k",
        "NAME+summarize: nodes given to the LLM, also the tree visit's k and beam "
        "(default {default}, the paper's QMSum setting; WCEP: 15)",
        type=positive_int,
        metavar="K",
    ),
    "summary_max_tokens": Flag(
        "--summary-max-tokens",
        "NAME+summarize: cap on the summary (default {default}, QMSum; WCEP: 150)",
        type=positive_int,
        metavar="N",
    ),
    "workers": Flag(
        "--workers",
        "questions answered in parallel by LLM methods (default {default})",
        type=int,
        metavar="N",
    ),
    "bootstrap": Flag(
        "--bootstrap",
        "paired bootstrap resamples vs the first method (default {default}; 0: off)",
        type=int,
        metavar="N",
    ),
    "subcorpus": Flag(
        "--subcorpus",
        "index N passages only: the evaluated questions' gold passages, then the others "
        "in corpus order (for LLM-abstract ablations; combine with --limit)",
        type=positive_int,
        metavar="N",
    ),
    "retrieval_only": Flag(
        "--retrieval-only",
        "score Recall@k only, even with --llm (which then only writes --abstracts llm-*): "
        "no answer call per question and method",
        action="store_true",
    ),
    "rebuild": Flag("--rebuild", "rebuild indexes even if cached", action="store_true"),
}
"""The :class:`EvalSettings` fields ``psirag eval`` sets one to one, as options (defaults: the
fields'); :func:`settings_from` reads them back by the same table and adds the others."""
_ANSWER_FIELDS = ("max_tokens", "summary_top_k", "summary_max_tokens", "workers", "bootstrap")


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
    add_settings_options(p, EvalSettings, EVAL_FLAGS, ["methods", "limit"])
    add_llm_options(
        p,
        help="LLM spec (openai:<base_url>#<model>, llamacpp:<path.gguf>, local); "
        f"default ${LLM_ENV} when methods need one",
        cache=None,
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
    add_build_embedder_option(p)
    p.add_argument(
        "--embedding-cache",
        metavar="NPZ",
        default=None,
        help="npz of vectors keyed by sha1 of the text (e.g. bench-out/cache/"
        "embeddings-minilm.npz): reused, extended; index build seconds then exclude embedding",
    )
    add_settings_options(p, EvalSettings, EVAL_FLAGS, ["beam"])
    add_profile_option(p)
    add_settings_options(p, EvalSettings, EVAL_FLAGS, ["reranker"])
    add_max_retrievals_option(
        p,
        default=1,
        help="retrievals after the first for NAME+agent and NAME+ircot "
        "(default 1, the paper's 2Wiki setting); auto: per question from the hop "
        "discriminator (h hops: h-1, at least 1)",
    )
    add_answer_check_option(
        p,
        help="NAME+agent: no follow-up turn after an answer found in no document (the paper's "
        "loop)",
    )
    add_names_check_option(
        p,
        help="NAME+agent, an answer whose reasoning names people or works that no retrieved "
        "document is about: retrieve them and answer again (lookup, default), ask the model "
        "(ask), or take the answer (off)",
    )
    add_settings_options(p, EvalSettings, EVAL_FLAGS, _ANSWER_FIELDS)
    _ablation_arguments(p)
    add_settings_options(p, EvalSettings, EVAL_FLAGS, ["retrieval_only", "rebuild"])
    add_http_options(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run_eval_command)


def _ablation_arguments(p: argparse.ArgumentParser) -> None:
    """The index ablations of the paper: abstract type, routing, fan-out, and a sub-corpus to run
    the costly (LLM-abstract) ones on. Each variant gets its own cached index."""
    g = p.add_argument_group("ablations (each variant is indexed and cached apart)")
    add_abstracts_option(
        g,
        default=None,
        help="abstract text of inner nodes, for psi and raptor alike: LLM-free keywords "
        "(default), none, or written by the --llm model (keyword lists, summaries)",
    )
    add_routing_option(
        g,
        default=None,
        help="routing embedding of inner nodes: leaf_mean (the 'mean embedding' abstract type), "
        "abstract (the embedding of the abstract text, as the paper) or blend; default: "
        "abstract with --abstracts llm-*, else leaf_mean",
    )
    add_max_children_option(
        g,
        help=f"most children per node, psi and raptor (default {IndexConfig.max_children}; "
        "'none': no cap)",
    )
    add_tree_mode_options(g)
    g.add_argument(
        "--context-tokens",
        type=int,
        default=IndexConfig.context_tokens,
        metavar="N",
        help=f"the LLM's context for --abstracts llm-* (default {IndexConfig.context_tokens})",
    )
    g.add_argument(
        "--split",
        action="store_true",
        help="split corpus records into ~100-token chunks (by default a record is one leaf, as "
        "the paper's QA passages; long documents such as QMSum transcripts need this)",
    )
    g.add_argument(
        "--tree-per-document",
        action="store_true",
        help="one abstract tree per corpus document instead of one over the corpus (the "
        "paper's single-document setting, for NAME+summarize on QMSum)",
    )
    add_settings_options(g, EvalSettings, EVAL_FLAGS, ["subcorpus"])


def _index_config(args: argparse.Namespace) -> IndexConfig | None:
    """The index config the ablation flags ask for; None when none is given (the defaults)."""
    abstracts = args.abstracts or IndexConfig.abstracts
    routing = args.routing
    if routing is None:
        routing = "abstract" if abstracts.startswith("llm-") else IndexConfig.routing
    config = IndexConfig(
        max_children=args.max_children,
        tree_mode=args.tree_mode,
        tree_neighbors=args.tree_neighbors,
        tree_bucket_size=args.tree_bucket_size,
        abstracts=abstracts,
        routing=routing,
        context_tokens=args.context_tokens,
        split_records=args.split,
        tree_per_document=args.tree_per_document,
    )
    return None if config == IndexConfig() else config


def settings_from(
    args: argparse.Namespace, llm: str | None, config: IndexConfig | None
) -> EvalSettings:
    """The run the parsed options ask for: the :data:`EVAL_FLAGS` fields as given, the
    others from the shared options (``llm``: the spec after the ``$PSIRAG_LLM`` fallback)."""
    from psirag.eval.settings import default_cache_dir

    return EvalSettings(
        **settings_values(args, EVAL_FLAGS, list(EVAL_FLAGS)),
        llm=llm,
        cache_dir=Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir(),
        embedder=args.embedder,
        profile=args.profile,
        max_retrievals=args.max_retrievals,
        answer_check=args.answer_check,
        names_check=args.names_check,
        embedding_cache=Path(args.embedding_cache) if args.embedding_cache else None,
        index_config=config,
        http=http_policy_from(args),
    )


def run_eval_command(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    from psirag.eval.harness import run_eval

    stdout = stdout or sys.stdout
    llm = args.llm
    config = _index_config(args)
    llm_abstracts = config is not None and config.abstracts.startswith("llm-")
    if llm is None and (llm_abstracts or any("+" in m for m in args.methods)):
        llm = os.environ.get(LLM_ENV) or None
        if llm is None and llm_abstracts:
            raise InputError(
                f"--abstracts {args.abstracts} needs an LLM: pass --llm SPEC or set ${LLM_ENV}"
            )
        if llm is None:
            needing = ", ".join(m for m in args.methods if "+" in m)
            raise InputError(f"{needing} need an LLM: pass --llm SPEC or set ${LLM_ENV}")
    settings = settings_from(args, llm, config)

    def say(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    report = run_eval(args.dataset, settings, say=say, progress=not args.quiet)
    results, questions = report.write(args.output)
    print(report.table(), file=stdout)
    say(f"wrote {results} and {questions}")
    return 0


__all__ = ["register", "run_eval_command"]
