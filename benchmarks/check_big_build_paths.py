"""The big-build memory paths save the same index (issue 24 item 6): a synthetic build saved as
is, and again with every such path forced (the phrase table's idle arrays spilled to temporary
files, its layout let go after scoring, every product block split, nodes scored in slices).
Every saved file must be byte-identical, except the manifests (timings, ids) and the HNSW graph
(built by several threads, so not byte-stable between two builds).

Usage: nice python benchmarks/check_big_build_paths.py [--chunks 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_STABLE = ("manifest.json", ".owner", ".psirag-made", "graph.usearch")


def _digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in NOT_STABLE
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, default=10_000)
    args = p.parse_args()
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent / "src"))
    from bench_living_scale import LoopbackHashEmbedder, corpus

    import psirag.abstracts.keywords as keywords
    import psirag.abstracts.phrases as phrases
    from psirag import Index, IndexConfig
    from psirag.ingest import Document

    texts, _, _ = corpus(args.chunks)
    docs = [Document(str(i), "", t, is_record=True) for i, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        Index.build(docs, IndexConfig(), embedder=LoopbackHashEmbedder()).save(out / "plain")
        phrases.KEEP_LAYOUT_MAX_PHRASES = 1000
        keywords._PRODUCT_BUDGET = 1000
        keywords._SCORE_CHUNK = 500
        forced = Index.build(docs, IndexConfig(), embedder=LoopbackHashEmbedder())
        table = forced.data.phrase_table
        assert table is not None and "layout" not in table._cache, "the layout was kept"
        forced.save(out / "forced")
        a, b = _digests(out / "plain"), _digests(out / "forced")
    differing = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    print(f"{len(a)} files compared; differing: {differing or 'none'}")
    if differing:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
