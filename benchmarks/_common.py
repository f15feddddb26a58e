"""Shared helpers for the benchmark scripts: data paths, an embedding cache, machine facts.

The embedding cache only spares re-embedding the same texts across benchmark runs (embedding
6,119 passages takes minutes on 2 cores); end-to-end timings are taken without it.
"""

from __future__ import annotations

import json
import os
import platform
import resource
from pathlib import Path

from psirag.embed import load_embedder
from psirag.eval.embedcache import CachingEmbedder

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("PSIRAG_DATA", ROOT.parent / "shared" / "data"))
OUT = Path(os.environ.get("PSIRAG_BENCH_OUT", ROOT / "bench-out"))


def dataset(name: str) -> tuple[list[dict], list[dict]]:
    folder = DATA / name
    if not folder.is_dir():
        raise SystemExit(f"{folder} not found: set PSIRAG_DATA to the folder holding {name}/")
    corpus = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((folder / "questions.json").read_text(encoding="utf-8"))
    return corpus, questions


def passage_text(record: dict) -> str:
    """The paper's retrieval unit: title + newline + text."""
    return f"{record['title']}\n{record['text']}" if record.get("title") else record["text"]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def minilm_cached() -> CachingEmbedder:
    """MiniLM with its vectors kept in OUT/cache/embeddings-minilm.npz across benchmark runs."""
    (OUT / "cache").mkdir(parents=True, exist_ok=True)
    return CachingEmbedder(load_embedder("minilm"), OUT / "cache" / "embeddings-minilm.npz")
