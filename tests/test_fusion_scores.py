"""Score-aware fusion (``rrf-boost``, ``convex``) against plain RRF, on hand-made lists and
through a search."""

from __future__ import annotations

import pytest
from support import TOPICS, HashEmbedder

from psirag import Index, IndexConfig, SearchConfig
from psirag.errors import InputError
from psirag.retrieval.fusion import boosted_rrf, convex_fuse, decisive_top, rrf_fuse

# The issue's case: a just-added document (id 9) is BM25's exact hit (13.1 against 4.8 next),
# while the dense list ranks it low.
DENSE = ([1, 2, 3, 4, 9], [0.81, 0.80, 0.78, 0.77, 0.60])
BM25 = ([9, 1, 2, 5], [13.1, 4.8, 4.5, 4.0])


def test_decisive_top() -> None:
    assert decisive_top([13.1, 4.8, 4.5], 2.0)
    assert not decisive_top([6.0, 4.8], 2.0)
    assert decisive_top([3.0], 2.0) and not decisive_top([], 2.0) and not decisive_top([0.0], 1)


def test_rrf_buries_the_decisive_hit_and_the_boost_lifts_it() -> None:
    ids = [DENSE[0], BM25[0]]
    plain = [i for i, _ in rrf_fuse(ids, k=5)]
    assert plain.index(9) >= 2  # what the issue saw: third or worse
    boosted = boosted_rrf(ids, [DENSE[1], BM25[1]], [False, True], k=5, ratio=2.0)
    assert boosted[0][0] == 9
    assert [i for i, _ in boosted][1:] == [i for i in plain if i != 9][:4]
    # not decisive at a higher ratio: plain RRF
    same = boosted_rrf(ids, [DENSE[1], BM25[1]], [False, True], k=5, ratio=3.0)
    assert [i for i, _ in same] == plain


def test_convex_fuse_weights_normalised_scores() -> None:
    ids, scores = [DENSE[0], BM25[0]], [DENSE[1], BM25[1]]
    dense_only = [i for i, _ in convex_fuse(ids, scores, [1.0, 0.0], k=3)]
    assert dense_only == [1, 2, 3]
    sparse_heavy = convex_fuse(ids, scores, [0.3, 0.7], k=5)
    assert sparse_heavy[0][0] == 9  # 0.7 * 1.0 + 0.3 * 0.0 beats 1's 0.3 + 0.7 * 0.09
    assert sparse_heavy[0][1] == pytest.approx(0.7)
    balanced = dict(convex_fuse(ids, scores, [0.5, 0.5], k=6))
    assert balanced[1] == pytest.approx(0.5 * 1.0 + 0.5 * (4.8 - 4.0) / (13.1 - 4.0))


def test_search_with_each_fusion() -> None:
    texts = [t for ts in TOPICS.values() for t in ts]
    index = Index.build(texts, IndexConfig(), embedder=HashEmbedder(), texts=True)
    for fusion in ("rrf", "rrf-boost", "convex"):
        hits = index.search("volcano lava", config=SearchConfig(fusion=fusion, k=3))
        assert len(hits) == 3 and "lava" in hits[0].text.lower(), fusion
    with pytest.raises(InputError, match="fusion must be"):
        SearchConfig(fusion="sum")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="sparse_weight"):
        SearchConfig(fusion="convex", sparse_weight=1.5)
    with pytest.raises(InputError, match="boost_ratio"):
        SearchConfig(boost_ratio=0.5)
