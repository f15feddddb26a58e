"""The keyword-abstract stage of a build alone (issue 24 item 6): phrase table, then the
abstracts of every node, on the synthetic corpus and tree of ``bench_living_scale.py`` (hash
embedder, default ``IndexConfig``), with digests of the abstracts and of the phrase table's
saved arrays so that two checkouts' outputs can be compared. Each stage is timed in wall and CPU
seconds (user + system, with the scoring's forked second process).

Each (size, sources) runs in a fresh child process (its peak RSS is its own); ``--src`` may be
given several times for an old-versus-new table in one run (``git archive <commit> src | tar
-x -C dir``). The corpus, chunks, vectors and tree are made by each checkout's own pipeline; the
tree digest is reported too, so a table shows that both read the same tree.

Usage: nice python benchmarks/bench_keyword_build.py --sizes 100000 --src OLD/src --src src
       [--repeat 1] [--out keyword_build.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _cpu() -> float:
    """User + system seconds of this process and its waited-for children (the keyword
    scoring's forked second process): what a stage costs on a shared machine, where its wall
    time depends on the other work."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def worker(n: int) -> dict[str, Any]:
    import numpy as np
    from _common import peak_rss_mib
    from bench_living_scale import LoopbackHashEmbedder, corpus

    from psirag import IndexConfig
    from psirag.abstracts.keywords import format_abstract, keyword_abstracts
    from psirag.abstracts.phrases import PhraseTable
    from psirag.eval.harness import single_thread_blas
    from psirag.ingest import Document
    from psirag.pipeline import build_chunk_tree, chunk_documents, embed_chunks

    texts, _, _ = corpus(n)
    config = IndexConfig()
    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
    del texts
    with single_thread_blas():
        chunks = chunk_documents(docs, config)
        vectors = embed_chunks(chunks, LoopbackHashEmbedder()).vectors
        tree = build_chunk_tree(vectors, chunks, config).tree
        leaf_texts = [c.text for c in chunks]
        del vectors, docs
        tree_digest = hashlib.sha256(
            np.ascontiguousarray(tree.parent, dtype=np.int64).tobytes()
        ).hexdigest()[:16]
        c0, t0 = _cpu(), time.perf_counter()
        table = PhraseTable.build(leaf_texts)
        c1, t1 = _cpu(), time.perf_counter()
        phrases = keyword_abstracts(leaf_texts, tree, table=table)
        c2, t2 = _cpu(), time.perf_counter()
    text = "\n".join(format_abstract(p) for p in phrases)
    table_digest = _table_digest(table)
    return {
        "n": n,
        "nodes": len(phrases),
        "table_seconds": round(t1 - t0, 3),
        "keywords_seconds": round(t2 - t1, 3),
        "stage_seconds": round(t2 - t0, 3),
        "table_cpu_seconds": round(c1 - c0, 3),
        "keywords_cpu_seconds": round(c2 - c1, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "tree_digest": tree_digest,
        "abstracts_digest": hashlib.sha256(text.encode()).hexdigest()[:16],
        "table_digest": table_digest,
    }


def _table_digest(table: Any) -> str:
    """A digest of what a save writes of the phrase table: its words, per-leaf arrays, vocabulary
    arrays and corpus counts (each array's name, dtype and bytes)."""
    import numpy as np

    h = hashlib.sha256(json.dumps(table.words).encode())
    arrays = {f"table.{k}": a for k, a in table.arrays().items()}
    vocab = table.vocab()
    if vocab is not None:
        h.update(json.dumps(vocab[0]).encode())
        arrays.update({f"vocab.{k}": a for k, a in vocab[1].items()})
    arrays.update({f"counts.{k}": a for k, a in (table.derived_arrays() or {}).items()})
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name]))
        h.update(f"{name}:{a.dtype}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    p.add_argument("--src", type=Path, action="append", default=None)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", default="keyword_build.json")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))
        return
    sources = args.src or [HERE.parent / "src"]
    rows = []
    for n in args.sizes:
        for rep in range(args.repeat):
            for src in sources:
                env = dict(os.environ, OMP_NUM_THREADS="1")
                env["PYTHONPATH"] = f"{src}{os.pathsep}{HERE}"
                out = subprocess.run(
                    [sys.executable, str(Path(__file__).resolve()), "--worker", str(n)],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                row = json.loads(out.strip().splitlines()[-1])
                row.update(src=Path(src).parent.name or str(src), repeat=rep)
                print(json.dumps(row), flush=True)
                rows.append(row)
    Path(args.out).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
