"""The living index on 2Wiki: what Index.add / Index.remove cost against a full rebuild, the
recall they keep, the LLM calls they make, and a sync over a folder of 2,000 files.

Every index is a full psirag index (keyword abstracts, leaf-mean routing, BM25, default config)
over 2Wiki's 6,119 passages, with the cached MiniLM vectors (``--embedding-cache``), so the
update costs below exclude embedding; embedding the new text with the real MiniLM model is
measured on its own (``embedding``), as is loading that model.

- Cost: a full build over 100% against adding 1% and 10% to an index of the rest, side by side,
  interleaved, best of ``--repeats``; per stage (tree, abstracts, routing, BM25) and the save of
  a new generation.
- Recall@2/5 (psi and the tree alone) after adding 10% in one batch to a 90% build, and after
  removing 10% of the full build and adding it back, against the full build.
- LLM calls: llm-summary abstracts on a sub-corpus (``--llm-corpus`` passages): a full build's
  calls against a 1% add's, and the same add repeated (served by the response cache). The LLM is
  the tests' scripted loopback server (tests/support): it counts calls, it does not judge the
  abstracts' quality.
- Sync: a folder of 2,000 passage files, 20 of them rewritten, through ``psirag sync``.

Usage: nice -n 10 python benchmarks/bench_living.py [--repeats 3] [--limit 1000]
       [--embedding-cache PATH] [--only cost sync] [--no-recall] [--skip-model].
Writes benchmarks/results/living.json (``--no-recall`` keeps its stored recall rows; the cost
rows and MiniLM timings are measured either way, ~4 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import (
    MINILM_CACHE,
    CachedVectors,
    documents,
    machine_info,
    passage_text,
    recall,
    two_wiki_queries,
    write_result,
)

from psirag import Index, IndexConfig, SearchConfig

# the tests' scripted OpenAI-compatible server (tests/support, not installed)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import FakeOpenAIServer


def _search_recall(
    index: Index, qvecs: np.ndarray, queries: list[str], golds: list[set[str]]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, cfg in (("psi", SearchConfig()), ("tree_alone", SearchConfig(use_bm25=False))):
        r2 = r5 = 0.0
        for v, q, gold in zip(qvecs, queries, golds, strict=True):
            got = [p.text for p in index.search_vector(v, q, config=cfg)]
            r2 += recall(got, gold, 2)
            r5 += recall(got, gold, 5)
        n = len(golds)
        out[name] = {"recall@2": round(100 * r2 / n, 2), "recall@5": round(100 * r5 / n, 2)}
    return out


def _stages(seconds: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in seconds.items()}


def cost_and_recall(args: argparse.Namespace, result: dict[str, Any]) -> None:
    corpus, queries, golds = two_wiki_queries(args.limit)
    emb = CachedVectors(Path(args.embedding_cache))
    docs = documents(corpus)
    rng = random.Random(args.seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    n10 = len(docs) // 10
    n1 = len(docs) // 100
    rest = [docs[i] for i in order[:n10]]
    base_docs = [docs[i] for i in order[n10:]]
    one_pct = rest[:n1]
    config = IndexConfig()
    base90 = Index.build(base_docs, config, embedder=emb).data
    rows: dict[str, list[dict[str, Any]]] = {"full build": [], "add 1%": [], "add 10%": []}
    full: Index | None = None
    added10: Index | None = None
    for _ in range(args.repeats):  # interleaved, so load on the machine hits all alike
        t0 = time.perf_counter()
        full = Index.build(docs, config, embedder=emb)
        total = time.perf_counter() - t0
        rows["full build"].append({"seconds": total, "stages": _stages(full.stats.seconds)})
        for name, batch in (("add 1%", one_pct), ("add 10%", rest)):
            index = Index.from_data(base90, embedder=emb)
            t0 = time.perf_counter()
            summary = index.add(batch)
            total = time.perf_counter() - t0
            rows[name].append(
                {
                    "seconds": total,
                    "stages": _stages(summary.seconds),
                    "nodes_refreshed": summary.nodes_refreshed,
                    "tree": summary.tree,
                }
            )
            if name == "add 10%":
                added10 = index
    assert full is not None and added10 is not None
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in rows.items()}
    full_s = best["full build"]["seconds"]
    result["cost"] = {
        k: {
            **b,
            "seconds": round(b["seconds"], 3),
            "vs_full_build": round(b["seconds"] / full_s, 4),
        }
        for k, b in best.items()
    }
    result["cost_all_seconds"] = {k: [round(r["seconds"], 3) for r in v] for k, v in rows.items()}

    # saving the update as a new generation (hard links where files are unchanged)
    with tempfile.TemporaryDirectory() as tmp:
        Index.from_data(base90, embedder=emb).save(Path(tmp) / "ix")
        # what `psirag add` on a saved index does: load, add 1%, save a new generation
        t0 = time.perf_counter()
        index = Index.load(Path(tmp) / "ix", embedder=emb)
        t1 = time.perf_counter()
        index.add(one_pct)
        t2 = time.perf_counter()
        index.save(Path(tmp) / "ix")
        t3 = time.perf_counter()
        result["save_generation_seconds"] = round(t3 - t2, 3)
        result["saved_index_add_1pct"] = {
            "load_seconds": round(t1 - t0, 3),
            "add_seconds": round(t2 - t1, 3),
            "save_seconds": round(t3 - t2, 3),
            "total_seconds": round(t3 - t0, 3),
            "add_vs_full_build": round((t2 - t1) / full_s, 4),
            "total_vs_full_build": round((t3 - t0) / full_s, 4),
        }
        t0 = time.perf_counter()
        Index.load(Path(tmp) / "ix", embedder=emb)
        result["load_seconds"] = round(time.perf_counter() - t0, 3)

    back = Index.from_data(full.data, embedder=emb)
    ids = [d.id for d in rest]
    t0 = time.perf_counter()
    rm = back.remove(ids)
    remove_s = time.perf_counter() - t0
    result["cost"]["remove 10%"] = {
        "seconds": round(remove_s, 3),
        "stages": _stages(rm.seconds),
        "nodes_refreshed": rm.nodes_refreshed,
        "vs_full_build": round(remove_s / full_s, 4),
    }
    # embedding the new text with the real model (excluded above)
    model = None
    if not args.skip_model:
        from psirag.embed import load_embedder

        t0 = time.perf_counter()
        model = load_embedder("minilm")
        model.embed(["warm up"])
        load_s = time.perf_counter() - t0
        emb_rows = {}
        for name, batch in (("1%", one_pct), ("10%", rest)):
            t0 = time.perf_counter()
            model.embed([d.text for d in batch])
            emb_rows[name] = round(time.perf_counter() - t0, 2)
        # the full corpus, scaled from the 10% batch (embedding all of it takes ~10 minutes
        # here; cost per passage is flat across batch sizes)
        full_emb = emb_rows["10%"] * len(docs) / len(rest)
        add_emb = emb_rows["1%"]
        result["embedding"] = {
            "model_load_seconds": round(load_s, 2),
            "new_text_seconds": emb_rows,
            "full_corpus_seconds_scaled_from_10pct": round(full_emb, 1),
            "queries_seconds": result.get("embedding", {}).get("queries_seconds"),
        }
        add_s = result["cost"]["add 1%"]["seconds"]
        result["cost_with_embedding"] = {
            "add 1% seconds": round(add_s + add_emb, 2),
            "full build seconds": round(full_s + full_emb, 2),
            "add 1% vs full build": round((add_s + add_emb) / (full_s + full_emb), 4),
            "note": "update seconds plus MiniLM seconds for the new text, against a full build "
            "plus MiniLM seconds for every passage (scaled from the 10% batch)",
        }
    if args.no_recall:
        return
    if model is not None:
        t0 = time.perf_counter()
        qvecs = model.embed(queries)
        result["embedding"]["queries_seconds"] = round(time.perf_counter() - t0, 2)
    else:
        qvecs = emb.embed(queries)

    # recall: full build, 10% added in one batch, 10% removed from the full build and added back
    result["recall_run"] = result["machine"]["date"]  # a later --no-recall run keeps these rows
    rec = {"full build": _search_recall(full, qvecs, queries, golds)}
    rec["90% build + 10% added (one batch)"] = _search_recall(added10, qvecs, queries, golds)
    rec["full build - 10% removed"] = _search_recall(back, qvecs, queries, golds)
    back.add(rest)
    rec["full build - 10% + 10% added back"] = _search_recall(back, qvecs, queries, golds)
    result["recall"] = rec
    result["n_passages"] = len(docs)
    result["n_questions"] = len(queries)
    result["drift_after_10pct"] = added10.drift()


def llm_calls(args: argparse.Namespace, result: dict[str, Any]) -> None:
    from psirag.llm import LLMClient, OpenAIChat

    corpus, _, _ = two_wiki_queries(1)
    emb = CachedVectors(Path(args.embedding_cache))
    docs = documents(corpus)[: args.llm_corpus]
    n1 = max(1, len(docs) // 100)
    base, extra = docs[n1:], docs[:n1]
    config = IndexConfig(abstracts="llm-summary", llm="scripted")

    def responder(body: dict[str, Any]) -> str:
        return "A summary of these passages."

    with FakeOpenAIServer(responder=responder) as srv, tempfile.TemporaryDirectory() as tmp:
        client = LLMClient(OpenAIChat(srv.base_url, "m"), Path(tmp) / "c.sqlite")
        full = Index.build(docs, config, embedder=emb, llm=client)
        full_calls = srv.calls
        client2 = LLMClient(OpenAIChat(srv.base_url, "m"), Path(tmp) / "c2.sqlite")
        start = srv.calls
        index = Index.build(base, config, embedder=emb, llm=client2)
        base_calls = srv.calls - start
        start = srv.calls
        first = Index.from_data(index.data, embedder=emb)
        s1 = first.add(extra, llm=client2)
        add_calls = srv.calls - start
        start = srv.calls
        again = Index.from_data(index.data, embedder=emb)
        s2 = again.add(extra, llm=client2)
        repeat_calls = srv.calls - start
        client.close()
        client2.close()
    result["llm"] = {
        "corpus_passages": len(docs),
        "inner_nodes_full_build": full.tree.n_nodes - full.tree.n_leaves,
        "full_build_calls": full_calls,
        "base_build_calls": base_calls,
        "add_passages": len(extra),
        "add_calls": add_calls,
        "add_calls_reported": s1.llm_calls,
        "add_nodes_refreshed": s1.nodes_refreshed,
        "repeat_add_calls": repeat_calls,
        "repeat_add_cached": s2.llm_cached,
        "add_vs_full_build": round(add_calls / max(full_calls, 1), 4),
        "note": "scripted loopback server: counts calls, does not judge the abstracts' quality",
    }


def sync_bench(args: argparse.Namespace, result: dict[str, Any]) -> None:
    import psirag.cli.living_cmds as cl
    from psirag.cli import main

    corpus, _, _ = two_wiki_queries(1)
    emb = CachedVectors(Path(args.embedding_cache))
    texts = [passage_text(r) for r in corpus]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "files"
        folder.mkdir()
        for i, t in enumerate(texts[: args.sync_files]):
            (folder / f"p{i:05d}.txt").write_text(t, encoding="utf-8")
        t0 = time.perf_counter()
        Index.build([folder], IndexConfig(chunk_tokens=4000), embedder=emb).save(Path(tmp) / "ix")
        build_s = time.perf_counter() - t0
        spare = texts[args.sync_files : args.sync_files + args.sync_changed]
        for i, t in enumerate(spare):
            (folder / f"p{(i * 97) % args.sync_files:05d}.txt").write_text(t, encoding="utf-8")
        original = cl.load_embedder_for
        cl.load_embedder_for = lambda spec, batch_size=None, http=None: emb  # type: ignore[assignment]
        try:
            out = io.StringIO()
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(out):
                code = main(["sync", str(Path(tmp) / "ix"), str(folder), "-q", "--json"])
            sync_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                main(["sync", str(Path(tmp) / "ix"), str(folder), "-q", "--json"])
            noop_s = time.perf_counter() - t0
        finally:
            cl.load_embedder_for = original  # type: ignore[assignment]
        import json

        summary = json.loads(out.getvalue())
    assert code == 0
    result["sync"] = {
        "files": args.sync_files,
        "changed": args.sync_changed,
        "build_seconds": round(build_s, 2),
        "sync_seconds": round(sync_s, 2),
        "sync_stages": summary["seconds"],
        "documents_added": summary["documents_added"],
        "documents_removed": summary["documents_removed"],
        "unchanged_sync_seconds": round(noop_s, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="first N questions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedding-cache", default=str(MINILM_CACHE))
    ap.add_argument("--llm-corpus", type=int, default=400)
    ap.add_argument("--sync-files", type=int, default=2000)
    ap.add_argument("--sync-changed", type=int, default=20)
    ap.add_argument("--skip-model", action="store_true", help="no real MiniLM timings")
    ap.add_argument("--only", nargs="*", default=["cost", "llm", "sync"])
    ap.add_argument(
        "--no-recall", action="store_true", help="cost rows only (keeps the stored recall)"
    )
    args = ap.parse_args()
    import json

    from _common import RESULTS

    previous = RESULTS / "living.json"
    result: dict[str, Any] = json.loads(previous.read_text()) if previous.exists() else {}
    result.update(machine=machine_info(), seed=args.seed)
    if "cost" in args.only:
        cost_and_recall(args, result)
    if "llm" in args.only:
        llm_calls(args, result)
    if "sync" in args.only:
        sync_bench(args, result)
    path = write_result("living.json", result)
    print(path)


if __name__ == "__main__":
    main()
