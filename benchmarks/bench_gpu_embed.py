"""MiniLM on a GPU (``--device cuda``) against the default ONNX Runtime on the CPU.

Why: the README says a GPU runs the default model through torch; this checks it on a real GPU
and measures what it buys. On the corpus of a benchmark folder (passages as the paper's
``title + "\\n" + text``), it embeds every passage with ``minilm`` on the CPU (ONNX Runtime
fp32, the default) and with ``minilm`` on ``--device`` at several batch sizes, and reports
passages per second and the cosine between the two vectors of each passage; then passages per
second over ``--repeat`` copies of the corpus at the best batch. Run it on a machine with a
GPU and psirag[torch]; the end-to-end check (``psirag eval ... --device cuda`` against the same
on the CPU) is the other half, see BENCHMARKS.md.

    python benchmarks/bench_gpu_embed.py ../shared/data/2wikimultihopqa --out gpu_embed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from psirag.embed import Embedder, load_embedder


def passages(folder: Path) -> list[str]:
    rows = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
    return [f"{row['title']}\n{row['text']}" for row in rows]


def timed_embed(embedder: Embedder, texts: list[str]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    vectors = embedder.embed(texts)
    return np.asarray(vectors, dtype=np.float32), time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path, help="folder with corpus.json")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--repeat", type=int, default=16, help="copies of the corpus for the rate")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=".*truncated by the model.*")  # counted once here

    import torch

    texts = passages(args.dataset)
    info = {
        "passages": len(texts),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(json.dumps(info), flush=True)

    cpu = load_embedder("minilm", device="cpu")
    timed_embed(cpu, texts[:64])
    reference, cpu_seconds = timed_embed(cpu, texts)
    rows = [
        {
            "backend": type(cpu).__name__,
            "device": "cpu",
            "batch": getattr(cpu, "batch_size", None),
            "seconds": round(cpu_seconds, 3),
            "passages_per_s": round(len(texts) / cpu_seconds, 1),
        }
    ]
    print(json.dumps(rows[-1]), flush=True)
    best: tuple[float, int] = (0.0, args.batches[0])
    for batch in args.batches:
        gpu = load_embedder("minilm", device=args.device, batch_size=batch)
        timed_embed(gpu, texts[: batch * 2])  # kernels compiled, memory pools grown
        vectors, seconds = timed_embed(gpu, texts)
        cosine = (vectors * reference).sum(axis=1)
        rate = len(texts) / seconds
        best = max(best, (rate, batch))
        rows.append(
            {
                "backend": type(gpu).__name__,
                "device": args.device,
                "batch": batch,
                "seconds": round(seconds, 3),
                "passages_per_s": round(rate, 1),
                "cosine_min": round(float(cosine.min()), 7),
                "cosine_mean": round(float(cosine.mean()), 7),
                "same_dim": vectors.shape == reference.shape,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
        del gpu
        torch.cuda.empty_cache()

    batch = best[1]
    many = texts * args.repeat
    gpu = load_embedder("minilm", device=args.device, batch_size=batch)
    timed_embed(gpu, texts[: batch * 2])
    _, seconds = timed_embed(gpu, many)
    scale = {
        "texts": len(many),
        "batch": batch,
        "seconds": round(seconds, 2),
        "passages_per_s": round(len(many) / seconds, 1),
        "peak_gpu_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
    }
    print(json.dumps(scale), flush=True)
    args.out.write_text(json.dumps({"info": info, "rows": rows, "scale": scale}, indent=1) + "\n")


if __name__ == "__main__":
    main()
