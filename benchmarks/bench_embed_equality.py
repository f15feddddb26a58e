"""Torch-free MiniLM (ONNX Runtime + tokenizers) against sentence-transformers on all of 2Wiki:
the minimum cosine between their vectors over the 6,119 passages (title + text, as indexed),
the 1,000 questions and three edge texts (empty, a space, a text over 256 word pieces), and the
truncation counts of both. tests/test_embed_onnx.py has the same check as a slow test.

Usage: python benchmarks/bench_embed_equality.py [--out embed_equality.json]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import dataset, machine_info, passage_text, write_result

from psirag.embed import load_embedder


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="embed_equality.json")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # the truncation warning; the counts are reported
    corpus, questions = dataset("2wikimultihopqa")
    groups = {
        "passages": [passage_text(r) for r in corpus],
        "questions": [q["question"] for q in questions],
        "edge": ["", " ", "word " * 400],
    }
    onnx = load_embedder("minilm-onnx")
    torch = load_embedder("minilm-torch")
    rows = []
    for name, texts in groups.items():
        t0 = time.perf_counter()
        ref = torch.embed(texts)
        got = onnx.embed(texts)
        cosine = (ref.astype(np.float64) * got).sum(axis=1)
        rows.append(
            {
                "texts": name,
                "n": len(texts),
                "min_cosine": round(float(cosine.min()), 9),
                "truncated_torch": torch.last_truncated,
                "truncated_onnx": onnx.last_truncated,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(rows[-1], flush=True)
    print(f"wrote {write_result(args.out, {'machine': machine_info(), 'rows': rows})}")


if __name__ == "__main__":
    main()
