"""Saved-index storage on 2Wiki (6,119 passages, cached MiniLM vectors): what a load and a save
cost, side by side in one run.

- load: ``Index.load`` with the default check (file sizes and the manifest's hash) against
  ``verify="full"`` (sha256 of every file, which every load did before generations), and the
  same two on a format-1 (flat) copy of the index;
- save: a full ``Index.save`` (a new generation, every file rewritten, fsynced and hashed)
  against a generation that keeps every file of the previous one as a hard link
  (``IndexWriter.keep``, what an update that changes little can do), with the disk each
  generation adds.

Methods alternate round by round (``--rounds``, default 7) and each keeps its median, so the
machine's load hits them alike.

Usage: PSIRAG_BENCH_OUT=<folder holding cache/embeddings-minilm.npz> \\
       python benchmarks/bench_storage.py [--rounds 7]
Writes benchmarks/results/storage.json and benchmarks/results/section_storage.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import RESULTS, dataset, machine_info, two_wiki_index, write_result

from psirag import Index
from psirag.storage import IndexStore, IndexWriter, sha256_file


def disk_bytes(folder: Path) -> int:
    """Bytes of distinct inodes under ``folder`` (a hard link counts once)."""
    seen: set[int] = set()
    total = 0
    for p in folder.rglob("*"):
        st = p.lstat()
        if p.is_file() and st.st_ino not in seen:
            seen.add(st.st_ino)
            total += st.st_size
    return total


def flat_copy(index_dir: Path, out: Path) -> None:
    """The current generation laid out as format 1 (what psirag wrote before generations)."""
    store = IndexStore(index_dir)
    gen = index_dir / "generations" / f"{store.current():06d}"
    shutil.copytree(gen, out)
    (out / ".readers").unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("generation")
    manifest["format_version"] = 1
    manifest["files"] = {
        p.relative_to(out).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }
    (out / "manifest.json").write_text(json.dumps(manifest))


def keep_all(index_dir: Path) -> None:
    manifest = json.loads((index_dir / "manifest.json").read_text())
    with IndexWriter(index_dir) as writer:
        for name in sorted({f.split("/")[0] for f in manifest["files"]}):
            writer.keep(name)
        writer.commit(manifest)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    corpus, _ = dataset("2wikimultihopqa")
    index, _ = two_wiki_index(corpus)
    work = Path(tempfile.mkdtemp(prefix="psirag-bench-storage-"))
    try:
        folder = work / "idx"
        index.save(folder)
        flat = work / "flat"
        flat_copy(folder, flat)
        loads: dict[str, Callable[[], object]] = {
            "generation, default check": lambda: Index.load(folder),
            "generation, verify=full": lambda: Index.load(folder, verify="full"),
            "format 1, default check": lambda: Index.load(flat),
            "format 1, verify=full (every load before)": lambda: Index.load(flat, verify="full"),
        }
        saves: dict[str, Callable[[], object]] = {
            "Index.save (all files rewritten)": lambda: index.save(folder),
            "keep every file (hard links)": lambda: keep_all(folder),
        }
        times: dict[str, list[float]] = {k: [] for k in [*loads, *saves]}
        added: dict[str, list[int]] = {k: [] for k in saves}
        for r in range(args.rounds):
            order = list(loads.items())
            order = order[r % len(order) :] + order[: r % len(order)]
            for name, fn in order:
                times[name].append(timed(fn))
            for name, fn in list(saves.items())[:: 1 if r % 2 == 0 else -1]:
                times[name].append(timed(fn))
                store = IndexStore(folder)
                newest = folder / "generations" / f"{store.current():06d}"
                older = [g for g in store.generations() if g != store.current()]
                previous = {
                    os.stat(p).st_ino
                    for g in older
                    for p in (folder / "generations" / f"{g:06d}").rglob("*")
                    if p.is_file()
                }
                added[name].append(
                    sum(
                        p.stat().st_size
                        for p in newest.rglob("*")
                        if p.is_file() and p.stat().st_ino not in previous
                    )
                )
        current = folder / "generations" / f"{IndexStore(folder).current():06d}"
        result = {
            "corpus": "2wikimultihopqa",
            "chunks": index.tree.n_leaves,
            "nodes": index.tree.n_nodes,
            "index_bytes": disk_bytes(current),
            "rounds": args.rounds,
            "median_seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
            "seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
            "bytes_added_per_generation": {k: int(statistics.median(v)) for k, v in added.items()},
            "machine": machine_info(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_result("storage.json", result)
    (RESULTS / "section_storage.md").write_text(section(result))
    print(json.dumps(result["median_seconds"], indent=2))


def section(r: dict) -> str:
    med = r["median_seconds"]
    gen_default = med["generation, default check"]
    lines = [
        "## Saved-index storage: load checks and generations (2Wiki, no LLM)",
        "",
        f"`python benchmarks/bench_storage.py` on the 2Wiki index ({r['chunks']:,} chunks, "
        f"{r['nodes']:,} nodes, {r['index_bytes'] / 2**20:.1f} MiB on disk). Median of "
        f"{r['rounds']} rounds, the methods alternating round by round, on the shared "
        "2-core machine (differences under ~20% are within its noise).",
        "",
        "| load | seconds | vs the default |",
        "|---|---|---|",
    ]
    for name in (
        "generation, default check",
        "generation, verify=full",
        "format 1, default check",
        "format 1, verify=full (every load before)",
    ):
        lines.append(f"| {name} | {med[name]:.3f} | {med[name] / gen_default:.2f}x |")
    lines += ["", "| save | seconds | bytes the new generation adds |", "|---|---|---|"]
    for name, added in r["bytes_added_per_generation"].items():
        lines.append(f"| {name} | {med[name]:.3f} | {added / 2**20:.2f} MiB |")
    lines += [
        "",
        "The default load checks sizes and the manifest's hash; `verify=full` also hashes "
        "every file (`psirag inspect DIR --verify`). A generation that keeps unchanged files "
        "links them instead of writing them again.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
