"""Seconds per LLM abstract node, measured on layer-1 nodes of a tree over 2Wiki passages.

Builds the real tree (MiniLM embeddings, ``build_tree(max_children=40)``), samples layer-1 nodes
with a fixed seed, and writes their summary and keyword abstracts with the chosen model, each kind
with a fresh, throw-away response cache so every call is paid and timed. Prints one JSON report
(per-node seconds, tokens, cuts, a few abstracts to eyeball). The corpus is read where it lies;
nothing is written into the repository.

    PYTHONPATH=src python scripts/bench_llm_abstracts.py --nodes 20 --model local --threads 2
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from psirag.abstracts.llm import llm_abstracts
from psirag.embed import load_embedder
from psirag.llm import ChatResult, GenerationParams, LLMClient, Message, load_chat_model
from psirag.llm.base import token_counter
from psirag.prompts import PROMPT_VERSION
from psirag.tree import Tree, build_tree

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared/data/2wikimultihopqa/corpus.json"


class TimedModel:
    """Wraps a ChatModel to time each call (the client's totals hide the spread)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.id = model.id
        self.context_tokens = model.context_tokens
        self.count_tokens = token_counter(model)
        self.calls: list[dict[str, float]] = []

    def chat(self, messages: list[Message], params: GenerationParams) -> ChatResult:
        start = time.perf_counter()
        result = self.model.chat(messages, params)
        call = {
            "seconds": round(time.perf_counter() - start, 2),
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
        }
        self.calls.append(call)
        print(f"call {len(self.calls)}: {call}", file=sys.stderr, flush=True)
        return result


def sample_layer1(tree: Tree, n_nodes: int, seed: int) -> tuple[Tree, list[int]]:
    """A forest of ``n_nodes`` randomly chosen layer-1 nodes with their leaves (original ids)."""
    layer1 = np.flatnonzero(tree.layer == 1)
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(layer1, size=min(n_nodes, layer1.size), replace=False).tolist())
    groups = [tree.children(node).tolist() for node in chosen]
    assert all(tree.layer[c] == 0 for g in groups for c in g), "layer-1 children are leaves"
    n = sum(len(g) for g in groups)
    leaves = [leaf for g in groups for leaf in g]
    parent_arr = np.array(
        [n + k for k, g in enumerate(groups) for _ in g] + [-1] * len(chosen), dtype=np.int64
    )
    layer_arr = np.array([0] * n + [1] * len(chosen), dtype=np.int64)
    return Tree(parent=parent_arr, layer=layer_arr), leaves


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="local", help="LLM spec (default: the local Qwen 1.5B)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--kinds", default="summary,keywords")
    ap.add_argument("--embeddings", type=Path, help=".npy to reuse (written if missing)")
    ap.add_argument("--out", type=Path, help="also write the report here, after each kind")
    args = ap.parse_args(argv)
    faulthandler.enable()  # a crash inside llama.cpp still says where it happened

    records = json.loads(args.corpus.read_text())
    texts = [f"{r['title']}\n{r['text']}" for r in records]
    t0 = time.perf_counter()
    if args.embeddings and args.embeddings.is_file():
        emb = np.load(args.embeddings)
    else:
        emb = load_embedder("minilm").embed(texts, progress=True)
        if args.embeddings:
            np.save(args.embeddings, emb)
    t_embed = time.perf_counter() - t0
    t0 = time.perf_counter()
    tree = build_tree(emb, max_children=40)
    t_tree = time.perf_counter() - t0
    fan = tree.fan_out[tree.layer == 1]
    sub, leaf_ids = sample_layer1(tree, args.nodes, args.seed)
    sub_texts = [texts[i] for i in leaf_ids]
    sub_fan = sub.fan_out[sub.layer == 1]

    report: dict[str, Any] = {
        "prompt_version": PROMPT_VERSION,
        "corpus_passages": len(texts),
        "tree": {
            "layer_sizes": tree.layer_sizes(),
            "layer1_nodes": int(fan.size),
            "layer1_children_mean": float(fan.mean()),
            "abstract_nodes": int(np.count_nonzero(tree.layer > 0)),
            "embed_seconds": round(t_embed, 1),
            "build_seconds": round(t_tree, 1),
        },
        "sample": {
            "nodes": int(sub_fan.size),
            "children": sub_fan.tolist(),
            "children_mean": float(sub_fan.mean()),
            "seed": args.seed,
        },
        "model": args.model,
        "threads": args.threads,
        "context_tokens": args.context,
        "kinds": {},
    }
    t0 = time.perf_counter()
    options: dict[str, Any] = (
        {"n_ctx": args.context, "n_threads": args.threads}
        if not args.model.startswith("openai:")
        else {"context_tokens": args.context}
    )
    model = load_chat_model(args.model, **options)
    report["model_load_seconds"] = round(time.perf_counter() - t0, 1)
    for kind in args.kinds.split(","):
        timed = TimedModel(model)
        with tempfile.TemporaryDirectory() as tmp:
            client = LLMClient(timed, Path(tmp) / "cache.sqlite", max_concurrency=1)
            abstracts, stats = llm_abstracts(
                sub, sub_texts, client, kind=kind, context_tokens=args.context, progress=True
            )
            client.close()
        secs = [c["seconds"] for c in timed.calls]
        report["kinds"][kind] = {
            "calls": stats["calls"],
            "seconds_total": round(stats["seconds"], 1),
            "seconds_per_node_mean": round(statistics.mean(secs), 2),
            "seconds_per_node_median": round(statistics.median(secs), 2),
            "seconds_per_node_min": round(min(secs), 2),
            "seconds_per_node_max": round(max(secs), 2),
            "prompt_tokens_mean": round(stats["prompt_tokens"] / stats["calls"], 1),
            "completion_tokens_mean": round(stats["completion_tokens"] / stats["calls"], 1),
            "cut_nodes": stats["cut_nodes"],
            "length_capped": len(stats["length_capped"]),
            "fallback": len(stats["fallback"]),
            "per_call": timed.calls,
            "examples": [
                {"children": int(sub.fan_out[u]), "abstract": abstracts[u]}
                for u in np.flatnonzero(sub.layer == 1)[:4].tolist()
            ],
        }
        print(f"{kind}: {report['kinds'][kind]['seconds_per_node_mean']} s/node", file=sys.stderr)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
