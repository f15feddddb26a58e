"""A stable 64-bit hash of strings, saved in indexes (a saved format: never change it).

Why: a loaded vocabulary (the keyword abstracts' words and stems, BM25's terms) finds an
update's few strings by a vectorised pass over their saved hashes, instead of building a dict
of every string at each load. Both vocabularies use this one function, so their saved hashes
agree and a test pins it to BLAKE2b.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def hash64(keys: Sequence[str]) -> np.ndarray:
    """BLAKE2b (8 bytes) of each string's UTF-8 (lone surrogates kept), as little-endian int64."""
    digests = b"".join(
        hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        for key in keys
    )
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)
