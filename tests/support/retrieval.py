"""Reference searches written from the spec in plain Python (tree walk, flat dense scan, BM25,
reciprocal rank fusion), the corpus they run on and its embedder, for the retrieval tests."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from psirag import IndexData, SearchConfig
from support import TOPICS, HashEmbedder


class WeightedHashEmbedder(HashEmbedder):
    """HashEmbedder's hashed bag of words with a weight per word, so that texts of the same shape
    do not score exactly alike (the plain one ties often, and ties would hide ranking bugs)."""

    def __init__(self) -> None:
        super().__init__(dim=256, name="weighted-hash")

    def embed(
        self, texts: Sequence[str], *, progress: bool = False, desc: str = "embedding"
    ) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
                out[i, h % self.dim] += 1.0 + (h // self.dim % 1000) / 250
            if not out[i].any():
                out[i, 0] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


TIE = 1e-5
"""Scores closer than this count as a near tie: the reference refuses to decide one, since
float32 products over different row subsets round differently."""


QUERIES = [
    "volcano ash and lava",
    "football club manager",
    "bread dough yeast oven",
    "sourdough starter wild yeast",
    "league title record points",
]


EXTRA = [
    "Magma chambers feed volcanoes deep under the crust.",
    "The goalkeeper saved a penalty in the cup final.",
    "Rye flour makes a dense and dark loaf of bread.",
    "Tectonic plates collide and lift mountain ranges.",
    "Pastry chefs fold butter into dough many times.",
    "Supporters sang in the stadium before kick-off.",
]


def corpus() -> list[str]:
    return [t for texts in TOPICS.values() for t in texts] + EXTRA


def ordered(ids: Sequence[int], score: dict[int, float], width: int) -> list[int]:
    """The best ``width`` ids by score, ties by id; fails on a near tie the cut or the order
    would depend on (a tie at exactly 0, no shared word, is exact in any float order)."""
    best = sorted(ids, key=lambda u: (-score[u], u))
    for a, b in itertools.pairwise(best[: width + 1]):
        exact_zero = score[a] == score[b] == 0.0
        assert exact_zero or abs(score[a] - score[b]) > TIE, f"near tie between {a} and {b}"
    return best[:width]


def tree_reference(
    data: IndexData, q: np.ndarray, k: int, beam: int, allowed: set[int] | None
) -> tuple[list[int], dict[int, float], list[int]]:
    """Algorithm 2 in plain Python: leaves found, scores, every node scored."""
    tree = data.tree
    vectors = np.asarray(data.node_vectors, dtype=np.float64)
    score = {u: float(vectors[u] @ q) for u in range(tree.n_nodes)}
    ok = (lambda u: True) if allowed is None else (lambda u: u in allowed)
    layer = tree.layer.tolist()
    parent = tree.parent.tolist()
    children: dict[int, list[int]] = {u: [] for u in range(tree.n_nodes)}
    for u, p in enumerate(parent):
        if p >= 0:
            children[p].append(u)
    at = {lv: [u for u in range(tree.n_nodes) if layer[u] == lv and ok(u)] for lv in set(layer)}
    depth = max(layer)
    start = next((lv for lv in range(depth, -1, -1) if len(at[lv]) > beam), 0)
    visited = [u for lv in range(depth, start, -1) for u in at[lv]]
    cands = at[start]
    kept: list[int] = []
    for lv in range(start, -1, -1):
        if lv < start:
            roots = [u for u in at[lv] if parent[u] < 0]
            cands = [c for u in kept for c in children[u] if ok(c)] + roots
        visited += cands
        kept = ordered(cands, score, k if lv == 0 else beam)
    return kept, score, visited


def dense_reference(data: IndexData, q: np.ndarray, k: int, allowed: set[int] | None) -> list:
    texts = [c.text for c in data.chunks]
    kept = [i for i in range(len(texts)) if allowed is None or i in allowed]
    ids = [i for i in kept if [texts[j] for j in kept].index(texts[i]) == kept.index(i)]
    vectors = np.asarray(data.node_vectors[: data.n_leaves], dtype=np.float64)
    score = {i: float(vectors[i] @ q) for i in ids}
    return [(i, score[i]) for i in ordered(ids, score, k)]


def bm25_reference(data: IndexData, query: str, k: int, allowed: set[int] | None) -> list:
    texts = [c.text for c in data.chunks]
    s = data.sparse.scores(query)
    score = {i: float(s[i]) for i in range(len(texts))}
    kept = [i for i in range(len(texts)) if allowed is None or i in allowed]
    ids = [
        i for i in kept if [texts[j] for j in kept].index(texts[i]) == kept.index(i) and s[i] > 0
    ]
    best = sorted(ids, key=lambda i: (-score[i], i))[:k]  # one scoring pass: exact ties are fine
    return [(i, score[i]) for i in best]


def rrf_reference(lists: list[list[int]], k: int, c: int = 60) -> list[tuple[int, float]]:
    """SPEC 2.3: sum of 1 / (60 + rank); ties by best rank, then the first list, then id."""
    items = {i for ids in lists for i in ids}

    def rank(i: int, ids: list[int]) -> int | None:
        return ids.index(i) + 1 if i in ids else None

    def key(i: int) -> tuple[float, int, float, int]:
        ranks = [r for r in (rank(i, ids) for ids in lists) if r is not None]
        first = rank(i, lists[0])
        return (-sum(1 / (c + r) for r in ranks), min(ranks), first or float("inf"), i)

    best = sorted(items, key=key)[:k]
    return [(i, -key(i)[0]) for i in best]


def expected(
    data: IndexData, query: str, q: np.ndarray, config: SearchConfig, docs: list[str] | None
) -> list[tuple[int, float]]:
    """What a search should return, composed from the references."""
    leaves = None
    nodes = None
    if docs:
        leaves = {i for i, c in enumerate(data.chunks) if c.source.document in docs}
        nodes = {
            u for u in range(data.tree.n_nodes) if set(data.tree.leaves_under(u).tolist()) & leaves
        } | leaves
    lists: list[list[tuple[int, float]]] = []
    searched = data.n_leaves if leaves is None else len(leaves)
    if config.use_tree and searched <= config.exact_dense_leaves:  # a flat scan stands in
        lists.append(dense_reference(data, q, config.candidates, leaves))
    elif config.use_tree:
        found, score, _ = tree_reference(data, q, config.candidates, config.beam, nodes)
        lists.append([(i, score[i]) for i in found])
    if config.use_dense:
        lists.append(dense_reference(data, q, config.candidates, leaves))
    if config.use_bm25:
        lists.append(bm25_reference(data, query, config.candidates, leaves))
    if len(lists) == 1:
        return lists[0][: config.k]
    return rrf_reference([[i for i, _ in pairs] for pairs in lists], config.k)
