"""BM25 without bm25s at query time gives bm25s's scores, bit for bit, on a saved index.

For an index saved in bm25s's layout (format 2, e.g. the 2Wiki index): every query's scores from
psirag's numpy path (:class:`psirag.retrieval.bm25.SavedScores`, psirag's tokenizer) against
``bm25s.BM25.load`` + ``bm25s.tokenize`` + ``get_scores`` as psirag called them before. For any
index: psirag's tokens of every chunk text and query against ``bm25s.tokenize``'s.

Queries: the questions of a JSON file (a list of ``{"question": ...}``) and, with
``--chunk-queries``, the first 200 characters of every chunk.

Usage: python benchmarks/check_bm25_equality.py INDEX [--questions questions.json]
       [--chunk-queries] [--out bm25_equality.json]
"""

from __future__ import annotations

import argparse
import json
import time
import unicodedata
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer
from _common import machine_info, write_result

from psirag.retrieval.bm25 import SparseIndex, _tokenize
from psirag.storage import IndexStore


def bm25s_tokens(texts: list[str]) -> list[list[str]]:
    """bm25s's tokens of the NFC texts: what psirag indexed and queried with before."""
    nfc = [unicodedata.normalize("NFC", t) for t in texts]
    stemmer = Stemmer.Stemmer("english")
    tokens: list[list[str]] = bm25s.tokenize(
        nfc, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    return tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("--questions", default=None)
    ap.add_argument("--chunk-queries", action="store_true")
    ap.add_argument("--out", default="bm25_equality.json")
    args = ap.parse_args()
    store = IndexStore(Path(args.index))
    gen_dir = store.generations_dir / f"{store.current():06d}"
    bm25_dir = gen_dir / "bm25"
    texts = [json.loads(line)["text"] for line in (gen_dir / "chunks.jsonl").open(encoding="utf-8")]
    queries: list[str] = []
    if args.questions:
        queries += [q["question"] for q in json.loads(Path(args.questions).read_text("utf-8"))]
    if args.chunk_queries:
        queries += [t[:200] for t in texts]
    result: dict[str, Any] = {"index": Path(args.index).name, "chunks": len(texts)}
    t0 = time.perf_counter()
    same_tokens = sum(a == b for a, b in zip(_tokenize(texts), bm25s_tokens(texts), strict=True))
    same_query_tokens = sum(
        a == b for a, b in zip(_tokenize(queries), bm25s_tokens(queries), strict=True)
    )
    result["tokens"] = {
        "chunks_equal": same_tokens,
        "chunks": len(texts),
        "queries_equal": same_query_tokens,
        "queries": len(queries),
    }
    if (bm25_dir / "params.index.json").is_file():
        native = bm25s.BM25.load(str(bm25_dir), mmap=True, show_progress=False)
        n = int(native.scores["num_docs"])
        ours = SparseIndex.load(bm25_dir, first_copy=np.arange(n))
        equal = matched = 0
        worst = 0.0
        for q in queries:
            terms = [t for t in bm25s_tokens([q])[0] if t in native.vocab_dict]
            ref = (
                np.asarray(native.get_scores(terms), dtype=np.float32)
                if terms
                else np.zeros(n, dtype=np.float32)
            )
            got = ours.scores(q)
            equal += int(got.dtype == ref.dtype and np.array_equal(got, ref))
            matched += int(ref.max(initial=0) > 0)
            worst = max(worst, float(np.abs(got.astype(np.float64) - ref).max(initial=0)))
        result["scores"] = {
            "queries": len(queries),
            "bit_equal": equal,
            "queries_with_a_match": matched,
            "max_abs_difference": worst,
        }
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, indent=1))
    print(f"wrote {write_result(args.out, {'machine': machine_info(), **result})}")


if __name__ == "__main__":
    main()
