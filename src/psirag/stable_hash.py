"""A stable 64-bit hash of strings, saved in indexes (a saved format: never change it).

Why: a loaded vocabulary (the keyword abstracts' words and stems, BM25's terms) finds an
update's few strings by a vectorised pass over their saved hashes, instead of building a dict
of every string at each load. Both vocabularies use this one function, so their saved hashes
agree and a test pins it to BLAKE2b.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np


def hash64(keys: Sequence[str]) -> np.ndarray:
    """BLAKE2b (8 bytes) of each string's UTF-8 (lone surrogates kept), as little-endian int64."""
    digests = b"".join(
        hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        for key in keys
    )
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


HASH_SAMPLE = 64
"""Rows of a loaded vocabulary whose saved hashes are checked against their strings."""


def hashes_agree(
    keys: Sequence[str], hashes: np.ndarray, hasher: Callable[[Sequence[str]], np.ndarray] = hash64
) -> bool:
    """Whether saved ``hashes`` fit ``keys``: one int64 per string, equal to ``hasher``'s
    at :data:`HASH_SAMPLE` evenly spread rows (a load checks a sample, not every string)."""
    if hashes.shape != (len(keys),) or hashes.dtype != np.int64:
        return False
    if not len(keys):
        return True
    at = np.unique(np.linspace(0, len(keys) - 1, HASH_SAMPLE).astype(np.int64))
    return bool(np.array_equal(hasher([keys[i] for i in at.tolist()]), hashes[at]))


def find_hashed(
    keys: Sequence[str],
    held: np.ndarray,
    batch: Sequence[str],
    wanted: np.ndarray,
    ranked: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """The position in ``keys`` (whose hashes are ``held``) of each string of ``batch`` (whose
    hashes are ``wanted``); -1: not held. One vectorised pass over ``held``, or with
    ``ranked`` (``held`` sorted, and the positions in that order) a search per string;
    strings behind equal hashes are compared, and of equal strings the lowest position
    wins."""
    out = np.full(len(batch), -1, dtype=np.int64)
    if not batch or not len(keys):
        return out
    if ranked is not None:  # each wanted hash's run among the sorted held ones
        ranked_held, order = ranked
        lo = np.searchsorted(ranked_held, wanted, side="left")
        hi = np.searchsorted(ranked_held, wanted, side="right")
        runs = zip(lo.tolist(), hi.tolist(), strict=True)
        hits = np.concatenate([order[a:b] for a, b in runs])
    else:
        sorted_wanted = np.sort(wanted)
        pos = np.minimum(np.searchsorted(sorted_wanted, held), sorted_wanted.size - 1)
        hits = np.flatnonzero(sorted_wanted[pos] == held)
    found: dict[str, int] = {}
    for i in np.sort(hits).tolist():
        found.setdefault(keys[i], i)
    for j, key in enumerate(batch):
        out[j] = found.get(key, -1)
    return out
