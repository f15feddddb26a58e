"""A build's BM25 term counts made in a child process (``python -m psirag.retrieval.bm25_process``).

Tokenising every chunk the way bm25s does (:meth:`TermCounts.of`) is about a minute and a half
of one core of Python at 1M chunks. The build's other stages are Python too (the keyword
abstracts), and one process runs one of them at a time (the GIL), so the counts are made in a
child process beside them, on a core the HNSW graph's process leaves idle once it is done. The
parent writes the chunk texts to a file, the child writes the counts (arrays and the
vocabulary in id order) and the parent reads them back: the same counts :meth:`TermCounts.of`
gives in the parent, and the index is made from them (:meth:`SparseIndex.from_counts`).

The folder's files: ``texts.bin`` and ``offsets.npy`` (UTF-8 texts end to end, and where each
starts and ends), then ``doc_ptr.npy``, ``terms.npy``, ``tf.npy`` and ``vocab.json`` (the
terms in id order), or ``error.txt`` when the child fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from psirag.retrieval.bm25 import TermCounts
from psirag.retrieval.child_process import ChildJob, child_main

TEXTS_FILE = "texts.bin"
OFFSETS_FILE = "offsets.npy"
VOCAB_FILE = "vocab.json"
ARRAYS = ("doc_ptr", "terms", "tf")


class CountsProcess:
    """A child process counting the terms of ``texts`` (started at once)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.n = len(texts)
        self.job = ChildJob("psirag.retrieval.bm25_process", "psirag-bm25-")
        self.folder = self.job.folder
        self.job.start_after(lambda folder: _write_texts(folder, texts))

    def done(self) -> bool:
        return self.job.done()

    def result(self) -> TermCounts:
        """The counts (waits for the child); the folder is removed either way."""
        try:
            self.job.wait("the BM25 counting process")
            names = json.loads((self.folder / VOCAB_FILE).read_text(encoding="utf-8"))
            arrays = [np.load(self.folder / f"{a}.npy", allow_pickle=False) for a in ARRAYS]
            counts = TermCounts(dict(zip(names, range(len(names)), strict=True)), *arrays)
            if counts.n_docs != self.n or len(counts.vocab) != len(names):
                raise RuntimeError(
                    f"the BM25 counting process counted {counts.n_docs} chunks for {self.n}"
                )
            return counts
        finally:
            self.close()

    def close(self) -> None:
        self.job.close()


def _write_texts(folder: Path, texts: Sequence[str]) -> None:
    """The child's input: the texts' UTF-8 end to end, and where each starts and ends."""
    encoded = [t.encode("utf-8") for t in texts]
    ends = np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
    with open(folder / TEXTS_FILE, "wb") as fh:
        fh.write(b"".join(encoded))
    del encoded
    with open(folder / OFFSETS_FILE, "wb") as fh:
        np.save(fh, np.concatenate(([0], ends)).astype(np.int64), allow_pickle=False)


def count_in_folder(folder: Path) -> None:
    """The child's work: the counts of the folder's texts, written there."""
    data = (folder / TEXTS_FILE).read_bytes()
    offsets = np.load(folder / OFFSETS_FILE, allow_pickle=False).tolist()
    texts = [data[a:b].decode("utf-8") for a, b in pairwise(offsets)]
    del data
    counts = TermCounts.of(texts)
    names = [""] * len(counts.vocab)
    for name, i in counts.vocab.items():
        names[i] = name
    for a in ARRAYS:
        with open(folder / f"{a}.npy", "wb") as fh:
            np.save(fh, np.asarray(getattr(counts, a)), allow_pickle=False)
    # the vocabulary last: the parent reads the arrays only after the child exits anyway
    (folder / VOCAB_FILE).write_text(json.dumps(names, ensure_ascii=False), encoding="utf-8")


def main(argv: list[str]) -> int:
    return child_main(count_in_folder, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
