"""A build's HNSW graph made in a child process (``python -m psirag.retrieval.graph_process``).

usearch's insertion holds Python's GIL for much of its work, so a graph built on a thread
beside the build's other stages (mostly Python: the keyword abstracts, BM25) and those stages
slow each other down: at 200k leaves a one-thread insertion took 94 s alone and 409 s beside a
Python loop on the other core (BENCHMARKS.md, "Build time at 1M"). A child process has its own
interpreter. It reads the leaf vectors from a file the parent writes, inserts them in key order
(:meth:`LeafGraph.build`, on one thread until the parent asks for every core), saves the graph
with its keys, and the parent loads it back into memory: the same graph, byte for byte, as a
one-thread build in the parent.

The folder's files: ``vectors.npy`` (float32, written by the parent), ``wide`` (made by the
parent once the build waits for the graph: the rest is inserted on every core), the graph and
keys files (:data:`~psirag.retrieval.leaf_graph.BASE_FILES`), ``seconds`` (the child's build
time), ``error.txt`` (the child's error, when it fails).

The child asks for transparent huge pages for the graph's memory after each batch
(:func:`~psirag.heap.ask_for_huge_pages`): insertion reads nodes at random, and with 4 KiB pages
it also misses the TLB. At 200k leaves that took 11-13% off the insertion's CPU
(BENCHMARKS.md, "Build time at 1M: huge pages for the graph").
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

from psirag.heap import ask_for_huge_pages
from psirag.retrieval.child_process import ChildJob, child_main
from psirag.retrieval.leaf_graph import (
    CONNECTIVITY,
    EXPANSION_ADD,
    GRAPH_FILE,
    KEYS_FILE,
    GraphBase,
    LeafGraph,
    new_base_id,
    require_usearch,
)

VECTORS_FILE = "vectors.npy"
WIDE_FILE = "wide"
SECONDS_FILE = "seconds"


class GraphProcess:
    """A child process building the leaf graph of ``leaf_vectors`` (started at once)."""

    def __init__(self, leaf_vectors: np.ndarray) -> None:
        self.n = int(leaf_vectors.shape[0])
        self.job = ChildJob("psirag.retrieval.graph_process", "psirag-graph-")
        self.folder = self.job.folder

        def write(folder: Path) -> None:
            vectors = np.ascontiguousarray(leaf_vectors, dtype=np.float32)
            with open(folder / VECTORS_FILE, "wb") as fh:
                np.save(fh, vectors, allow_pickle=False)

        self.job.start_after(write)

    def done(self) -> bool:
        """Whether the child has finished (either way)."""
        return self.job.done()

    def widen(self) -> None:
        """Ask the child to insert the rest of the leaves on every core."""
        (self.folder / WIDE_FILE).touch()

    def result(self) -> tuple[LeafGraph, float]:
        """The graph (loaded into this process's memory) and the child's build seconds; waits
        for the child, on every core from now on. The folder is removed either way."""
        try:
            self.widen()
            self.job.wait("the HNSW graph's build process")
            graph = require_usearch().restore(
                str(self.folder / GRAPH_FILE),
                view=False,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
            )
            keys = np.load(self.folder / KEYS_FILE, allow_pickle=False).astype(np.int64)
            if graph is None or len(graph) != self.n or keys.size != self.n:
                raise RuntimeError(
                    f"the HNSW graph's build process wrote a graph of "
                    f"{0 if graph is None else len(graph)} leaves for {self.n}"
                )
            seconds = float((self.folder / SECONDS_FILE).read_text())
            return LeafGraph(GraphBase(graph, keys, new_base_id(), read_only=False)), seconds
        finally:
            self.close()

    def close(self) -> None:
        """Stop the child if it still runs, and remove the folder."""
        self.job.close()


def build_in_folder(folder: Path) -> None:
    """The child's work: the graph of ``folder``'s vectors, saved there (see the module)."""
    parent = os.getppid()
    vectors = np.load(folder / VECTORS_FILE, mmap_mode="r", allow_pickle=False)

    def threads_now() -> int:
        if os.getppid() != parent:  # the parent is gone: nobody will read the graph
            raise SystemExit(1)
        ask_for_huge_pages()  # the regions the last batch mapped
        return 0 if (folder / WIDE_FILE).exists() else 1

    t0 = time.perf_counter()
    graph = LeafGraph.build(vectors, threads=1, widen=threads_now)
    seconds = time.perf_counter() - t0
    graph.save_base(folder / GRAPH_FILE, folder / KEYS_FILE)
    (folder / SECONDS_FILE).write_text(f"{seconds:.3f}")


def main(argv: list[str]) -> int:
    return child_main(build_in_folder, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
