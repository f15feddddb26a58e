"""A large real-text corpus made offline: the docstrings of the installed Python packages.

Why: the benchmark sets here are small (2Wiki has 6,119 passages), and the 1M benchmarks use
hash vectors, which have none of the structure real embeddings have. A machine with torch,
transformers, scipy and the like installed holds a few hundred thousand paragraphs of English
prose about code in their docstrings: not a user's domain, but real language, so its MiniLM
vectors cluster as real corpora do. Used to measure the leaf graph's recall at 200k real
vectors (``bench_graph_expansion.py --vectors``).

Each module's, class's and function's docstring is split into runs of about ``--words`` words
(paragraphs kept whole up to that size); runs under 20 words are dropped, exact repeats kept
once, and the rest shuffled with a fixed seed. Then optionally embedded.

    python benchmarks/docstring_corpus.py --root <site-packages> --limit 200500 \\
        --texts docs.jsonl [--vectors docs.npy --embedder minilm]
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing
import random
import re
import time
import warnings
from pathlib import Path

import numpy as np

MIN_WORDS = 20


def _chunks(doc: str, words: int) -> list[str]:
    out: list[str] = []
    run: list[str] = []
    for paragraph in re.split(r"\n\s*\n", doc):
        tokens = paragraph.split()
        if run and len(run) + len(tokens) > words:
            out.append(" ".join(run))
            run = []
        run.extend(tokens)
        while len(run) > words:
            out.append(" ".join(run[:words]))
            run = run[words:]
    if run:
        out.append(" ".join(run))
    return [c for c in out if len(c.split()) >= MIN_WORDS]


def file_chunks(args: tuple[str, int]) -> list[str]:
    path, words = args
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError, RecursionError):
        return []
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                out.extend(_chunks(doc, words))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, nargs="+", required=True, help="folders of .py files")
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--limit", type=int, default=200_500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--texts", type=Path, required=True, help="the chunks, one JSON string a line")
    ap.add_argument("--vectors", type=Path, default=None, help="embed them into this .npy")
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--batch-size", type=int, default=None)
    args = ap.parse_args()

    t0 = time.perf_counter()
    files = sorted(str(p) for root in args.root for p in root.rglob("*.py"))
    with multiprocessing.Pool() as pool:
        parts = pool.map(file_chunks, [(f, args.words) for f in files], chunksize=64)
    chunks = list(dict.fromkeys(c for part in parts for c in part))  # first of each, in order
    unique = len(chunks)
    random.Random(args.seed).shuffle(chunks)
    chunks = chunks[: args.limit]
    with args.texts.open("w", encoding="utf-8") as f:
        for c in chunks:
            f.write(json.dumps(c) + "\n")
    print(
        json.dumps(
            {
                "files": len(files),
                "unique_chunks": unique,
                "kept": len(chunks),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        ),
        flush=True,
    )
    if args.vectors is not None:
        from psirag.embed import load_embedder

        warnings.filterwarnings("ignore", message=".*truncated by the model.*")
        embedder = load_embedder(args.embedder, batch_size=args.batch_size)
        t0 = time.perf_counter()
        vectors = np.asarray(embedder.embed(chunks), dtype=np.float32)
        np.save(args.vectors, vectors)
        print(
            json.dumps({"embedded": len(chunks), "seconds": round(time.perf_counter() - t0, 1)}),
            flush=True,
        )


if __name__ == "__main__":
    main()
