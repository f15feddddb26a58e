"""Regenerate BENCHMARKS.md: run the benchmarks whose results are missing, then report.py.

Results already in benchmarks/results/ are reused, so a plain run only fills gaps. ``--force``
reruns every LLM-free benchmark; ``--only NAME ...`` reruns just those. The LLM measurements
(``section_llm_*.md``) are never rerun from here: they take hours of local-model time on this
machine, so their cached sections are always reused (their own commands are listed by
``--list`` and in BENCHMARKS.md).

Usage: nice -n 19 python benchmarks/run_all.py [--force | --only latency beam ...] [--list]
       [--dry-run]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass

from _common import RESULTS, ROOT


@dataclass(frozen=True)
class Bench:
    """One benchmark script, its arguments and the result files it writes."""

    name: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]
    cost: str

    @property
    def command(self) -> str:
        return "python benchmarks/" + " ".join(self.args)

    def missing(self) -> list[str]:
        return [o for o in self.outputs if not (RESULTS / o).exists()]


BENCHES: tuple[Bench, ...] = (
    Bench("tree", ("bench_tree.py",), ("tree.json",), "~1 min"),
    Bench(
        "storage",
        ("bench_storage.py",),
        ("storage.json", "section_storage.md"),
        "~1 min with the embedding cache",
    ),
    Bench(
        "index_e2e",
        ("bench_index_e2e.py",),
        ("index_e2e_2wikimultihopqa.json",),
        "~12 min: embeds all 6,119 passages with MiniLM, nothing cached",
    ),
    Bench(
        "retrieval",
        ("bench_2wiki_retrieval.py",),
        ("2wiki_retrieval.json",),
        "~3 min with the embedding cache (loads MiniLM)",
    ),
    Bench(
        "retrieval_abstract",
        ("bench_2wiki_retrieval.py", "--routing", "abstract", "--beams", "10", "40"),
        ("2wiki_retrieval_abstract.json",),
        "~3 min with the embedding cache; ~5 more to embed abstracts not yet in it",
    ),
    Bench(
        "retrieval_variants",
        ("bench_retrieval_variants.py",),
        ("retrieval_variants.json", "section_retrieval_variants.md"),
        "~4 min with saved indexes and cached question vectors (--index, --vectors)",
    ),
    Bench(
        "dense_crossover",
        ("bench_dense_crossover.py",),
        ("dense_crossover.json", "section_retrieval_variants_size.md"),
        "~1 min with cached passage and question vectors (--passages, --vectors)",
    ),
    Bench(
        "tree_vs_hnsw",
        ("bench_tree_vs_hnsw.py", "--sizes", "100000"),
        ("tree_vs_hnsw.json",),
        "~25 min on the busy machine (the 100k HNSW build is 7 min); 1M not run",
    ),
    Bench(
        "fusion_dups",
        ("bench_fusion_dups.py",),
        ("fusion_dups.json",),
        "~20 min on the busy machine with saved indexes and cached vectors",
    ),
    Bench(
        "skew",
        ("bench_skew.py",),
        ("skew.json", "section_skew.md"),
        "~10 min (UMAP + GMM for the RAPTOR-style trees)",
    ),
    Bench(
        "latency",
        ("bench_latency.py",),
        ("latency.json",),
        "~30 min on the busy machine (a 100k knn tree)",
    ),
    Bench("beam", ("bench_beam.py",), ("beam.json", "recall_vs_beam.png"), "~5 min"),
    Bench("scale", ("bench_scale.py",), ("scale.json", "index_time_vs_size.png"), "~5 min"),
    Bench(
        "max_children",
        ("bench_max_children.py",),
        ("max_children.json",),
        "~5 min: five 2Wiki indexes from the embedding cache",
    ),
    Bench(
        "server",
        ("bench_server.py",),
        ("server.json",),
        "~5 min on a quiet machine (builds a 2Wiki index under bench-out/ first without --index)",
    ),
    Bench(
        "knn",
        ("bench_knn.py",),
        ("knn.json",),
        "~45 min: six 2Wiki indexes, synthetic trees up to 100,000 leaves",
    ),
    Bench(
        "updates",
        ("bench_updates.py",),
        ("updates.json",),
        "~10 min: tree inserts/removals on 2Wiki from the embedding cache",
    ),
    Bench(
        "living",
        ("bench_living.py",),
        ("living.json",),
        "~15 min: 2Wiki adds/removes vs rebuilds, LLM calls (loopback), a 2,000-file sync",
    ),
    Bench(
        "living_scale",
        ("bench_living_scale.py",),
        ("living_scale.json",),
        "~20-40 min on the busy machine, 12 GiB peak: synthetic 20k and 200k chunks, one-document "
        "adds and removes (its section in BENCHMARKS.md is written by hand)",
    ),
    Bench("ann_libs", ("bench_ann_libs.py",), ("ann_libs.json",), "~8 min: three HNSW builds"),
    Bench(
        "scale_ann",
        ("bench_scale_ann.py", "--sizes", "100000", "350000", "1000000"),
        ("scale_ann.json",),
        "~1-2 h on the busy machine: ann/bucketed trees up to 1M leaves, seven 2Wiki indexes",
    ),
    Bench(
        "embed_onnx",
        ("bench_embed_onnx.py", "--quality"),
        ("embed_onnx.json",),
        "~20 min: MiniLM torch/ONNX/int8 on 1,000 passages; int8 embeds all of 2Wiki",
    ),
    Bench(
        "embed_onnx_batch",
        (
            "bench_embed_onnx.py",
            "--sample",
            "300",
            "--batch-sizes",
            "8",
            "16",
            "32",
            "--out",
            "embed_onnx_batch.json",
        ),
        ("embed_onnx_batch.json",),
        "~8-12 min: torch against ONNX fp32/int8 at batch 8, 16 and 32 on 300 passages",
    ),
    Bench(
        "int8_quality",
        ("bench_int8_quality.py",),
        ("int8_quality.json",),
        "~10 min: int8 ONNX embeds all 2Wiki passages once (cached), then two indexes",
    ),
    Bench(
        "latency_1m",
        (
            "bench_latency.py",
            "--n",
            "1000000",
            "--tree",
            "bucketed",
            "--queries",
            "200",
            "--rounds",
            "2",
            "--skip-2wiki",
            "--also-profile",
            "paper",
            "--out",
            "latency_1m.json",
        ),
        ("latency_1m.json",),
        "~30 min on the busy machine, 7 GiB: a 1M-leaf bucketed tree and BM25, then timing",
    ),
    Bench("tree_gather", ("bench_tree_gather.py",), ("tree_gather.json",), "~1 min"),
    Bench(
        "chat_stream",
        ("bench_chat_stream.py",),
        ("chat_stream.json", "section_chat_stream.md"),
        "~1 min: streamed and plain chats and Ollama client calls against a scripted LLM",
    ),
    Bench(
        "ray",
        ("bench_ray.py", "--limit", "1000", "--rounds", "2"),
        ("ray.json", "section_scale_ann_ray.md"),
        "~10 min: four `psirag index` builds of 1,000 2Wiki passages, local and on a local Ray "
        "cluster (needs psirag[ray])",
    ),
)

LLM_COST = "local LLM, tens of minutes to hours: cached, rerun by hand only"

CACHED_ONLY: tuple[tuple[str, str, str, str], ...] = (
    (
        "baselines_2wiki",
        "section_baselines_2wiki.md",
        "psirag eval <data>/2wikimultihopqa --methods psi,raptor,raptor-collapsed ...",
        "~10 min (RAPTOR clustering): cached, rerun by hand only",
    ),
    (
        "llm_2wiki",
        "section_llm_2wiki.md",
        "psirag eval <data>/2wikimultihopqa --methods psi+agent,hybrid+ircot,psi,hybrid "
        "--llm local ..., then benchmarks/llm_tables.py",
        LLM_COST,
    ),
    (
        "llm_abstracts",
        "section_llm_abstracts.md",
        "python scripts/bench_llm_abstracts.py --nodes 20 --model local --threads 2 "
        "--kinds summary",
        LLM_COST,
    ),
    (
        "qmsum",
        "section_qmsum.md",
        "psirag eval <data>/qmsum --split --tree-per-document --methods "
        "psi+summarize,dense+summarize --llm local ..., then benchmarks/llm_tables.py",
        LLM_COST,
    ),
    (
        "web",
        "section_web.md",
        "python benchmarks/bench_web.py --index DIR --loads 3 --writes 2 (a 2Wiki index; needs "
        "chromium)",
        "~3 min: ten page loads in headless Chromium; rerun by hand only",
    ),
    (
        "web_synthetic_100000",
        "section_web_synthetic_100000.md",
        "python benchmarks/bench_web.py --synthetic-leaves 100000 --keep DIR --loads 3 "
        "--writes 1 (needs chromium)",
        "~6 min to build the index, ~5 min of page loads and writes; rerun by hand only",
    ),
)
"""(name, cached section, command, cost) of the measurements run by hand (local LLM, browser);
each section holds its exact commands."""

REPORT_COMMAND = "python benchmarks/report.py"
RUN_ALL_COMMAND = "nice -n 19 python benchmarks/run_all.py"


def run(bench: Bench) -> float:
    """Run one benchmark in a child process (same interpreter and nice value); its seconds."""
    t0 = time.perf_counter()
    cmd = [sys.executable, str(ROOT / "benchmarks" / bench.args[0]), *bench.args[1:]]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return time.perf_counter() - t0


def main() -> None:
    """Run the missing (or chosen) benchmarks, then render BENCHMARKS.md."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rerun every LLM-free benchmark")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="rerun just these benchmarks")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    args = ap.parse_args()
    by_name = {b.name: b for b in BENCHES}
    if args.list:
        for b in BENCHES:
            state = "missing " + ", ".join(b.missing()) if b.missing() else "cached"
            print(f"{b.name:20} {state:30} {b.command}  [{b.cost}]")
        for name, section, command, _ in CACHED_ONLY:
            state = "cached" if (RESULTS / section).exists() else "missing"
            print(f"{name:20} {state:30} never rerun here: {command}")
        return
    if args.only:
        llm = {name for name, *_ in CACHED_ONLY}
        unknown = [n for n in args.only if n not in by_name]
        if unknown:
            hint = " (LLM runs are never rerun by run_all.py)" if set(unknown) & llm else ""
            raise SystemExit(f"unknown benchmark(s) {unknown}{hint}; known: {list(by_name)}")
        todo = [by_name[n] for n in args.only]
    elif args.force:
        todo = list(BENCHES)
    else:
        todo = [b for b in BENCHES if b.missing()]
    for name, section, command, _ in CACHED_ONLY:
        if not (RESULTS / section).exists():
            print(f"note: {section} is missing; {name} is only run by hand: {command}")
    for bench in todo:
        print(f"== {bench.name}: {bench.command}  [{bench.cost}]", flush=True)
        if not args.dry_run:
            print(f"== {bench.name} done in {run(bench):.0f} s", flush=True)
    if not todo:
        print("every result is cached; rendering BENCHMARKS.md only")
    if not args.dry_run:
        import report

        # Regenerate the sections of what just ran; hand-extended ones stay as they are.
        report.main({output for bench in todo for output in bench.outputs})


if __name__ == "__main__":
    main()
