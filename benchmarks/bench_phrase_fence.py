"""The phrase table's lookups through the saved fences against the plain binary search (issue
24: the first add after a cold start), on a saved index that holds the fences (one compacted
by this code): ``phrase_ids`` (the stem keys of a batch, by ``p_skey``/``p_fence``, against
``np.searchsorted`` over ``p_key`` with ``p_sorted`` as sorter) and ``form_positions`` (over
``s_key``), each on the same keys, with the index's files first dropped from the page cache
(``posix_fadvise(DONTNEED)``: ``cold``) and then again with them cached (``warm``, the median
of ``--repeats``). The keys: ``--keys`` phrase keys of the table (present) and as many one
above them (mostly absent), about what a one-document add looks up.

``table_add``: the phrase table's part of a one-document add (``PhraseTable.add`` of 8 texts of
20 of the table's words), cold (the files dropped, the table loaded, its saved counts
restored, then the add timed) ``--adds`` times, and the MB of the keyword files it read
(``mincore``): what any code measures, so ``--src`` with an old commit's sources on an index
without fences gives the other side.

Usage: nice python benchmarks/bench_phrase_fence.py --index DIR [--keys 1000] [--repeats 20]
       [--src DIR --label NAME] [--out NAME.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _evict(folder: Path) -> int:
    n = 0
    for p in folder.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def _resident(folder: Path) -> dict[str, float]:
    """MB of each keyword file of ``folder`` in the page cache (by its name, generation
    apart)."""
    from psirag.page_cache import resident_pages

    out = {}
    for p in folder.rglob("keywords.*.npy"):
        fd = os.open(p, os.O_RDONLY)
        try:
            got = resident_pages(fd, 0, p.stat().st_size)
        finally:
            os.close(fd)
        if got is not None:
            name = ".".join(p.name.split(".")[:2])
            out[name] = out.get(name, 0.0) + float(got.sum()) * 4096 / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--label", default=None)
    parser.add_argument("--adds", type=int, default=3)
    parser.add_argument("--out", default="phrase_fence.json")
    args = parser.parse_args()
    if args.src is not None:
        sys.path.insert(0, str(args.src))
    from psirag.storage import IndexStore
    from psirag.storage_format import load_index_data

    def table_now() -> Any:
        store = IndexStore(args.index)
        reader = store.open()
        data = load_index_data(reader)
        table = data.phrase_table
        table = table.get() if hasattr(table, "get") else table
        return table, table._derived()

    table, d = table_now()
    fenced = getattr(d, "p_fence", None) is not None and getattr(d, "s_fence", None) is not None
    rng = np.random.default_rng(7)
    p_key = np.asarray(table.p_key)
    s_key = np.asarray(d.s_key)
    pk = rng.choice(p_key, size=args.keys)
    sk = rng.choice(s_key, size=args.keys)
    p_keys = np.unique(np.concatenate([pk, pk + 1]))
    s_keys = np.unique(np.concatenate([sk, sk + 1]))
    words = list(table.words)[:50_000]
    del p_key, s_key, table, d

    out: dict[str, Any] = {
        "label": args.label,
        "keys": args.keys,
        "fences_saved": fenced,
        "p_lookups": int(p_keys.size),
        "s_lookups": int(s_keys.size),
    }
    texts = [" ".join(words[i] for i in rng.integers(0, len(words), 20)) + "." for _ in range(8)]
    adds = []
    for _ in range(args.adds):
        _evict(args.index)
        t, _ = table_now()
        before = _resident(args.index)
        t0 = time.perf_counter()
        t.add(texts)
        seconds = time.perf_counter() - t0
        after = _resident(args.index)
        read = {k: round(v - before.get(k, 0.0), 1) for k, v in after.items()}
        adds.append(
            {"cold_s": round(seconds, 4), "read_mb": {k: v for k, v in read.items() if v >= 0.5}}
        )
        del t
    out["table_add"] = adds
    if not fenced:
        out["plain"] = {}
    for way in ("fenced", "plain") if fenced else ("plain",):
        row: dict[str, Any] = {}
        for what in ("phrase_ids", "form_positions"):
            _evict(args.index)
            table, d = table_now()  # mapped again: the maps' pages were dropped with the files
            if way == "plain" and fenced:
                d = replace(d, p_skey=None, p_fence=None, s_fence=None)

            def call(d: Any = d, table: Any = table, what: str = what) -> np.ndarray:
                if what == "phrase_ids":
                    return np.asarray(d.phrase_ids(table.p_key, p_keys))
                return np.asarray(d.form_positions(s_keys))

            t0 = time.perf_counter()
            got = call()
            cold = time.perf_counter() - t0
            warm = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                again = call()
                warm.append(time.perf_counter() - t0)
                assert np.array_equal(again, got)
            row[what] = {
                "cold_s": round(cold, 4),
                "warm_median_ms": round(1000 * statistics.median(warm), 3),
                "found": int(np.count_nonzero(got >= 0)),
                "checksum": int(np.asarray(got, dtype=np.int64).sum()),
            }
            del table, d
        out[way] = row
    if fenced:
        for what in ("phrase_ids", "form_positions"):
            assert out["fenced"][what]["checksum"] == out["plain"][what]["checksum"], what
    print(json.dumps(out, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
