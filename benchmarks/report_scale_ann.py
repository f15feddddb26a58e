"""BENCHMARKS.md section on the ann and bucketed tree modes and the ONNX embedder.

Rendered from ann_libs.json (bench_ann_libs.py), scale_ann.json (bench_scale_ann.py) and
embed_onnx.json (bench_embed_onnx.py) into results/section_scale_ann.md, which report.py then
includes like every other cached section. Run by report.py; also runnable alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SECTION = RESULTS / "section_scale_ann.md"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _libs(r: dict[str, Any]) -> str:
    p = r["params"]
    rows = [
        [
            x["library"],
            f"{x['n']:,}",
            x["build_seconds"],
            x["query_all_seconds"],
            x["total_seconds"],
            f"{x['recall_at_k']:.3f}",
        ]
        for x in r["rows"]
    ]
    return f"""### Which ANN library

`python benchmarks/bench_ann_libs.py`: an HNSW graph (M {p["M"]}, ef_construction
{p["ef_construction"]}) over synthetic clustered vectors (dim 384), then every row's top-33
query (ef_search {p["ef_search"]}), {r["rows"][0]["threads"]} threads, one library after the
other; recall@32 on 1,000 sampled rows against exact top-32.

{_table(["library", "rows", "build s", "query all s", "total s", "recall@32"], rows)}

hnswlib is used: the fastest in total (its queries are several times faster than usearch's
and faiss's here), with the same recall within 0.005, and the paper's own choice. The tree
mode builds the graph on one thread so that the same vectors give the same tree.
"""


def _knn_reference(r: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Today's knn build at 100k: from this run if measured, else from knn.json."""
    for x in r["synthetic"]:
        if x["mode"] == "knn" and x["n"] == 100_000 and "seconds" in x:
            return x, "measured in this run"
    knn = _load("knn.json")
    for x in (knn or {}).get("synthetic", []):
        if x["mode"] == "knn" and x["n"] == 100_000:
            return x, "from knn.json (bench_knn.py: an earlier run here, BLAS on one thread)"
    return None, ""


def _synthetic(r: dict[str, Any]) -> str:
    knn, knn_source = _knn_reference(r)
    rows = []
    for x in r["synthetic"]:
        if "seconds" not in x:
            state = x.get("timed_out_after_seconds")
            rows.append(
                [x["mode"], f"{x['n']:,}", f"not finished in {state} s" if state else "failed"]
                + [""] * 5
            )
            continue
        rows.append(
            [
                x["mode"],
                f"{x['n']:,}",
                x["seconds"],
                x["cpu_seconds"],
                round(x["peak_rss_mib"] / 1024, 2),
                round(knn["cpu_seconds"] / x["cpu_seconds"], 1)
                if knn and x["n"] == 100_000
                else "",
                len(x["layers"]),
                x["measured_at"][11:16],
            ]
        )
    header = ["mode", "leaves", "wall s", "CPU s", "peak RSS GiB", "knn CPU / this", "layers"]
    header.append("UTC")
    load = r["machine"].get("loadavg_at_end", "?")
    knn_line = ""
    if knn:
        knn_line = (
            f"\nToday's knn mode at 100,000 leaves, {knn_source}: {knn['seconds']} s wall, "
            f"{knn['cpu_seconds']} CPU s, {knn.get('peak_extra_mib', '?')} MiB above the "
            'vectors; "knn CPU / this" divides its CPU seconds by each mode\'s.\n'
        )
    return f"""### Build time and memory at scale

`python benchmarks/bench_scale_ann.py --sizes ...`: `build_tree` (max_children 40, k 32,
bucket bound 4,096) on synthetic clustered unit vectors (dim 384, 60 clusters), each build in a
fresh process under nice 10. CPU s adds the bucket worker processes. Peak RSS is the build
process's high-water mark (vectors included). The machine ran ~8 other engineers' jobs on its
2 cores during these runs (load averages of 7 to 17 while they ran; {load} when the file was
written), so wall seconds are inflated several-fold and CPU seconds are the steadier figure.

{_table(header, rows)}
{knn_line}"""


def _wiki(r: dict[str, Any]) -> str:
    rows = []
    for x in r["rows"]:
        setting = x["mode"]
        if "tree_neighbors" in x:
            setting += f", k {x['tree_neighbors']}"
        if "tree_bucket_size" in x:
            setting += f", bucket {x['tree_bucket_size']} ({x['buckets']} buckets)"
        kept = x.get(
            "exact_spanning_edges_kept_pct", x.get("exact_spanning_edges_in_one_bucket_pct", "")
        )
        rows.append(
            [
                setting,
                x["psi"]["recall@5"],
                x.get("psi_recall@5_minus_exact", ""),
                x["tree_alone"]["recall@5"],
                x.get("tree_alone_recall@5_minus_exact", ""),
                kept,
                x["tree_stage_seconds"],
            ]
        )
    header = ["tree", "psi R@5", "Δ exact", "tree R@5", "Δ exact", "exact edges %", "tree s"]
    return f"""### Quality on 2Wiki

All {r["n_passages"]:,} 2WikiMultihopQA passages (cached MiniLM vectors), {r["n_questions"]:,}
questions, default search. "exact edges %": for ann, the share of the exact spanning tree's
edges its spanning tree keeps; for bucketed, the share of exact spanning edges whose two leaves
share a bucket (the most its bucket trees can use).

{_table(header, rows)}
"""


def _embed(r: dict[str, Any]) -> str:
    rows = [
        [
            x["backend"],
            x["batch_size"],
            x["chunks_per_second"],
            f"{x['speedup_vs_torch']} ({x.get('speedup_vs_torch_median_slice', '?')})",
            f"{x['cosine_vs_torch_min']:.6f}",
            f"{x['cosine_vs_torch_mean']:.6f}",
            f"{x['max_abs_diff_vs_torch']:.1e}",
            "same as torch"
            if x["embedder_id"].endswith(r["rows"][0]["embedder_id"][-8:])
            else "own id",
        ]
        for x in r["rows"]
    ]
    quality = ""
    if r.get("quality"):
        q = _table(
            ["vectors", "psi R@5", "tree R@5"],
            [
                [x["backend"], x["psi"]["recall@5"], x["tree_alone"]["recall@5"]]
                for x in r["quality"]
            ],
        )
        quality = f"\nRecall@5 on all 2Wiki questions (exact tree), int8 against torch:\n\n{q}\n"
    return f"""### Embedding speed: torch against ONNX Runtime

`python benchmarks/bench_embed_onnx.py`: {r["sample"]}, {r["threads"]} threads each, cut
into slices of {r.get("slice", "?")} texts that every backend embeds in turn (rotating order),
{r["rounds"]} rounds. "× torch": total torch seconds over the backend's (in brackets: the
median of the per-slice ratios); chunks/s from the best round. Cosine and max abs difference
against the torch vectors.

{_table(["backend", "batch", "chunks/s", "× torch", "cos min", "cos mean", "max abs", "id"], rows)}
{quality}"""


def render() -> str | None:
    """The section's markdown, or None when none of its results exist."""
    parts = []
    if libs := _load("ann_libs.json"):
        parts.append(_libs(libs))
    scale = _load("scale_ann.json")
    if scale and scale.get("synthetic"):
        parts.append(_synthetic(scale))
    if scale and scale.get("2wiki"):
        parts.append(_wiki(scale["2wiki"]))
    if embed := _load("embed_onnx.json"):
        parts.append(_embed(embed))
    if not parts:
        return None
    head = """## Scale: ann and bucketed tree modes, ONNX embedder

The `ann` tree mode (`--tree-mode ann`, `psirag[ann]`) takes each chunk's neighbours from an
HNSW graph and joins the remaining components through ANN queries; `bucketed` splits the corpus
by recursive spherical k-means into buckets of at most `--tree-bucket-size` chunks, builds each
bucket's exact tree on its own process and merges them on top (paper App. E.1). Neither has an
O(n²) step.
"""
    return "\n".join([head, *parts])


def write_section() -> Path | None:
    """Write results/section_scale_ann.md (report.py includes every section_*.md)."""
    text = render()
    if text is None:
        return None
    SECTION.write_text(text.rstrip() + "\n")
    return SECTION


if __name__ == "__main__":
    print(write_section())
