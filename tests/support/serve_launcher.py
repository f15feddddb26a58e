"""Runs ``psirag serve`` / ``psirag mcp`` in a subprocess with the tests' HashEmbedder.

The tests' fixture index is built with :class:`support.embedders.HashEmbedder` (milliseconds
per query, no model to load). A real ``psirag serve`` would look for that embedder's spec and
refuse it, as it must, so this script parses the same command line with psirag's own parser
and hands the embedder object to the same ``run_serve``/``run_mcp`` functions the CLI calls.
Everything else (flags, settings checks, uvicorn, the app) is the real code path.

    python tests/support/serve_launcher.py serve INDEX_DIR --port 8123 --llm openai:...#fake
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for ``support``

from psirag.cli import build_parser
from psirag.cli.serve import run_mcp, run_serve
from psirag.errors import PsiragError
from support.embedders import HashEmbedder


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    run = {"serve": run_serve, "mcp": run_mcp}[args.command]
    try:
        return run(args, embedder=HashEmbedder())
    except PsiragError as exc:
        print(f"psirag: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
