"""The ``psirag`` command. Each module adds its commands with ``register(subparsers)``; every
option that more than one command takes is declared once, in :mod:`psirag.cli.options`, and
only modules of this package use argparse.

Every command is a thin shell over the Python API (:class:`psirag.Index`). Problems the user can
fix are printed as one line on stderr with exit status 2, never as a traceback. Heavy modules
(torch, the embedders, fastapi) load inside the command that needs them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
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
from psirag.devices import DEVICE_ENV
from psirag.errors import PsiragError

COMMAND_MODULES: dict[str, str] = {
    "index": "index_cmds",
    "search": "index_cmds",
    "inspect": "index_cmds",
    "demo": "index_cmds",
    "add": "living_cmds",
    "remove": "living_cmds",
    "sync": "living_cmds",
    "compact": "living_cmds",
    "ask": "agent_cmds",
    "chat": "agent_cmds",
    "hops": "agent_cmds",
    "summarize": "agent_cmds",
    "eval": "eval_cmd",
    "serve": "serve",
    "mcp": "serve",
}
"""Which module of this package registers each command, so that a command line loads only the
module of its own command (``psirag search`` does not import the agent, the LLM clients, the
evaluation or the server settings). Every command is listed; a test compares this table with
the full parser."""
_MODULE_ORDER = ("index_cmds", "living_cmds", "agent_cmds", "eval_cmd", "serve")


def _command_of(argv: Sequence[str]) -> str | None:
    """The command a command line names (its first word), or None (``--help``, ``--version``,
    nothing, or a word that is no command: the full parser answers those)."""
    first = next(iter(argv), None)
    return first if first in COMMAND_MODULES else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``psirag`` parser: every command, or, given a command line that names one, only the
    commands of that command's module (its help and errors are the same either way)."""
    parser = argparse.ArgumentParser(
        prog="psirag",
        description="Ψ-RAG: hierarchical abstract tree indexes for retrieval-augmented generation.",
    )
    parser.add_argument("--version", action="version", version=f"psirag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = None if argv is None else _command_of(argv)
    names = _MODULE_ORDER if command is None else (COMMAND_MODULES[command],)
    for name in names:
        importlib.import_module(f"psirag.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", message=".*truncated by the model.*")
    device = getattr(args, "device", None)
    env_device = os.environ.get(DEVICE_ENV)
    if device is not None:  # every embedder load of this command (and its processes) reads it
        os.environ[DEVICE_ENV] = device
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
    finally:
        if device is not None:  # a caller of main() in-process keeps its own setting
            if env_device is None:
                os.environ.pop(DEVICE_ENV, None)
            else:
                os.environ[DEVICE_ENV] = env_device
        factory = sys.modules.get("psirag.embed.factory")  # loaded only by commands that embed
        if factory is not None:  # a model prefetched for this command but never used
            factory.discard_prefetched()


__all__ = [
    "COMMAND_MODULES",
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
