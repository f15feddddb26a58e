"""The ``psirag`` command. Each module adds its commands with ``register(subparsers)``; every
option that more than one command takes is declared once, in :mod:`psirag.cli.options`, and
only modules of this package use argparse.

Every command is a thin shell over the Python API (:class:`psirag.Index`). Problems the user can
fix are printed as one line on stderr with exit status 2, never as a traceback. Heavy modules
(torch, the embedders, fastapi) load inside the command that needs them.
"""

from __future__ import annotations

import argparse
import logging
import os
import warnings
from collections.abc import Sequence

from psirag._version import __version__
from psirag.cli.common import eprint as _eprint
from psirag.cli.index_cmds import (
    INDEX_SCHEMA,
    INSPECT_SCHEMA,
    SEARCH_SCHEMA,
    demo_corpus,
    inspect_summary,
    print_passage,
    run_demo,
    run_index,
    run_inspect,
    run_search,
    search_config_from,
)
from psirag.errors import PsiragError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="psirag",
        description="Ψ-RAG: hierarchical abstract tree indexes for retrieval-augmented generation.",
    )
    parser.add_argument("--version", action="version", version=f"psirag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from psirag.cli import agent_cmds, eval_cmd, index_cmds, living_cmds, serve

    for module in (index_cmds, living_cmds, agent_cmds, eval_cmd, serve):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", message=".*truncated by the model.*")
    try:
        return int(args.func(args) or 0)
    except PsiragError as exc:
        _eprint(f"psirag: error: {exc}")
        return 2
    except KeyboardInterrupt:
        _eprint("psirag: interrupted; nothing half-written was kept")
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # disk full, permission denied, too many open files, ...
        from psirag.oserrors import describe

        _eprint(f"psirag: error: {describe(exc)}")
        return 2


__all__ = [
    "INDEX_SCHEMA",
    "INSPECT_SCHEMA",
    "SEARCH_SCHEMA",
    "build_parser",
    "demo_corpus",
    "inspect_summary",
    "main",
    "print_passage",
    "run_demo",
    "run_index",
    "run_inspect",
    "run_search",
    "search_config_from",
]
