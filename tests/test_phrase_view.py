"""An update's lazy phrase view (:meth:`PhraseTable.phrase_view`): its per-phrase values are
computed when read, and a node's scoring reads several of them for the same phrases one after
another; each read must give the values of the full layout (:meth:`PhraseTable.phrases`),
whatever was read before it, and never an array a caller could change under a later read."""

from __future__ import annotations

import numpy as np
import pytest
from support import competing_texts

from psirag.abstracts.phrases import PhraseTable


def _reads(pids: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Reads in the order a node's scoring makes them, and others: the same phrases for
    several values, a subset, the same values again, other phrases, one phrase."""
    kept = pids[::3]
    return [
        ("col_of", pids),
        ("words", pids),
        ("entity", pids),
        ("words", pids),
        ("surface_ids", kept),
        ("words", kept),
        ("col_of", kept),
        ("entity", pids[::-1].copy()),
        ("words", pids[:1]),
        ("surface_ids", pids[:1]),
        ("col_of", pids),
        ("surface_ids", pids),
        ("words", pids[:0]),
    ]


def test_the_lazy_view_reads_the_layouts_values_in_any_order() -> None:
    texts = competing_texts(120, 3)
    lazy = PhraseTable.build(texts).phrase_view()
    full = PhraseTable.build(texts).phrases()
    assert lazy.lazy and not full.lazy
    leaves = np.arange(0, 60, dtype=np.int64)
    pids, _ = lazy.node_counts(leaves)
    assert pids.size > 50
    others, _ = lazy.node_counts(np.arange(60, 120, dtype=np.int64))
    for pids_now in (pids, others, pids):
        for name, asked in _reads(pids_now):
            got = np.asarray(getattr(lazy, name)[asked])
            want = np.asarray(getattr(full, name)[asked])
            if name == "col_of":  # the lazy view gives the column's order key, not its number
                assert np.array_equal(got >= 0, want >= 0), name
                kept = want >= 0
                assert np.array_equal(np.argsort(got[kept]), np.argsort(want[kept])), name
            else:
                assert np.array_equal(got, want), name


def test_the_lazy_views_values_cannot_be_changed_by_a_reader() -> None:
    """A read of the same phrases hands out the array it gathered before: a reader that wrote
    into it would change what the next reader sees, so it is read-only."""
    lazy = PhraseTable.build(competing_texts(60, 2)).phrase_view()
    pids, _ = lazy.node_counts(np.arange(0, 30, dtype=np.int64))
    for name in ("col_of", "words", "entity", "surface_ids"):
        got = getattr(lazy, name)[pids]
        with pytest.raises(ValueError):
            got[0] = got[1]
        assert np.array_equal(getattr(lazy, name)[pids], got)
