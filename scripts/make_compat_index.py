"""Write the small index that tests/test_embed_compat.py loads: run with an older psirag.

    PYTHONPATH=<older checkout>/src python scripts/make_compat_index.py tests/fixtures/minilm_index

It saves an index of a few short texts built with the default embedder (``minilm``) plus
``expected.json`` (each query's ranked texts), so a newer psirag can show it loads and searches
an index it did not write, with the same results, without embedding the texts again.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from psirag import Index, IndexConfig

TEXTS = [
    "Mount Etna is an active volcano on the east coast of Sicily, in Italy.",
    "Arsenal is a football club based in Islington, north London.",
    "Bread dough rises when yeast ferments the sugars in flour.",
    "The Danube flows through ten countries before reaching the Black Sea.",
    "Marie Curie won Nobel Prizes in both physics and chemistry.",
    "The Great Barrier Reef lies off the coast of Queensland, Australia.",
    "Johann Sebastian Bach composed the Brandenburg Concertos in Leipzig.",
    "A haiku has three lines of five, seven and five syllables.",
]
QUERIES = ["volcano in Italy", "who composed concertos", "river to the Black Sea"]


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    index = Index.build(TEXTS, IndexConfig(), texts=True)
    index.save(out / "index")
    expected = {q: [p.text for p in index.search(q, k=3)] for q in QUERIES}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
