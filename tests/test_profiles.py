"""Search profiles (config.PROFILES, ``--profile``) and the merging of identical texts into one
result that names every source (``Passage.also``)."""

from __future__ import annotations

import argparse
import json
import random

import numpy as np
import pytest
from support.retrieval import QUERIES, WeightedHashEmbedder, corpus, expected

from psirag import Index, IndexConfig, SearchConfig
from psirag.cli import build_parser, search_config_from
from psirag.config import PROFILES, profile_config
from psirag.errors import InputError
from psirag.eval.settings import EvalSettings

PAPER = PROFILES["paper"]
DEFAULT = PROFILES["default"]
COPIES = {18: 2, 19: 9}
"""Documents 18 and 19 repeat the texts of documents 2 and 9."""


@pytest.fixture(scope="module")
def dup_index() -> Index:
    texts = [*corpus(), corpus()[2], corpus()[9]]
    return Index.build(
        texts, IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )


def test_paper_profile_is_the_search_of_before() -> None:
    """The paper profile holds the values SearchConfig() had before profiles existed."""
    assert (
        SearchConfig(
            k=5,
            candidates=10,
            beam=40,
            use_tree=True,
            use_bm25=True,
            use_dense=False,
            fusion="rrf",
            rrf_k=60,
            reranker=None,
            merge_duplicates=False,
            exact_dense_leaves=0,
        )
        == PAPER
    )
    assert SearchConfig() == DEFAULT and DEFAULT != PAPER
    assert PROFILES["tree"] == DEFAULT.with_(exact_dense_leaves=0)
    with pytest.raises(InputError, match="unknown search profile 'fast'"):
        profile_config("fast")
    with pytest.raises(InputError, match="unknown search profile"):
        EvalSettings(profile="fast")  # type: ignore[arg-type]


def test_paper_profile_equals_the_reference_search() -> None:
    """The paper profile is tree + BM25 RRF at beam 40, composed by hand (test_retriever's
    references, which refuse the exact ties that repeated texts make: so distinct texts)."""
    index = Index.build(
        corpus(), IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )
    for query in QUERIES:
        q = index.embed_query(query)
        want = expected(index.data, query, q.astype(np.float64), PAPER, None)
        got = index.search_vector(q, query, config=PAPER)
        assert [p.leaf for p in got] == [i for i, _ in want]
        np.testing.assert_allclose([p.score for p in got], [s for _, s in want], atol=1e-5)
        assert all(p.also == () for p in got)


def _wide_index() -> Index:
    rng = random.Random(7)
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.sample(words, 8)) for _ in range(1500)]
    return Index.build(
        texts, IndexConfig(max_children=3), embedder=WeightedHashEmbedder(), texts=True
    )


def test_profile_switch_changes_the_tree_list() -> None:
    """Each profile's tree list is Algorithm 2 at that profile's beam (and BM25 follows it);
    on a tree whose layers are wider than 40 nodes, the two beams find different leaves for
    some query."""
    index = _wide_index()
    differ = 0
    for query in ("w1 w2 w3", "w10 w200 w77 w5", "w150 w151", "w42 w9 w260"):
        q = index.embed_query(query)
        trees = {}
        for name in ("tree", "paper"):
            profile = PROFILES[name]
            lists = index.retriever.candidate_lists(q, query, config=profile)
            assert len(lists) == 1 + profile.use_dense + profile.use_bm25
            # Algorithm 2 itself is checked against a plain-Python one in test_retriever
            hits = index.retriever.searcher.search(q, k=profile.candidates, beam=profile.beam)
            found = hits.leaves.tolist()
            assert lists[0][0].tolist() == found
            trees[name] = found
        differ += trees["tree"] != trees["paper"]
    assert differ > 0


def test_default_ranks_the_dense_list_exactly_on_a_small_index() -> None:
    """Up to exact_dense_leaves leaves the default's first list is the exact cosine top (what
    hybrid fuses), so the default ranks as hybrid does; above it, the tree search. The beam
    below is so narrow that the tree search misses some of the exact top."""
    index = _wide_index()  # 1,500 leaves
    retriever = index.retriever
    assert index.data.n_leaves <= DEFAULT.exact_dense_leaves
    narrow = DEFAULT.with_(beam=2)
    hybrid = DEFAULT.with_(use_tree=False, use_dense=True)
    tree_missed = 0
    for query in ("w1 w2 w3", "w10 w200 w77 w5", "w150 w151", "w42 w9 w260"):
        q = index.embed_query(query)
        exact = retriever.dense.ranked(q, narrow.candidates)[0].tolist()
        lists = retriever.candidate_lists(q, query, config=narrow)
        assert lists[0][0].tolist() == exact
        assert retriever.ranked(q, query, config=narrow) == retriever.ranked(
            q, query, config=hybrid
        )
        above = narrow.with_(exact_dense_leaves=index.data.n_leaves - 1)
        tree = retriever.candidate_lists(q, query, config=above)[0][0].tolist()
        want = retriever.searcher.search(q, k=narrow.candidates, beam=2).leaves.tolist()
        assert tree == want
        tree_missed += set(tree) != set(exact)
    assert tree_missed > 0  # so the two paths were told apart


def test_a_document_filter_counts_only_the_leaves_it_keeps() -> None:
    """The threshold reads the leaves searched: a few documents of a large index are ranked
    exactly, inside those documents."""
    index = _wide_index()
    config = DEFAULT.with_(beam=2, exact_dense_leaves=100)
    docs = [str(i) for i in range(0, 1500, 20)]  # 75 documents of one leaf each
    assert {c.source.document for c in index.data.chunks} >= set(docs)
    keep = np.isin(index.data.leaf_documents, docs)
    retriever = index.retriever
    assert retriever.exact_in_tree_place(config, keep)
    assert not retriever.exact_in_tree_place(config, None)
    q = index.embed_query("w1 w2 w3")
    got = retriever.candidate_lists(q, "w1 w2 w3", config=config, docs=docs)[0][0].tolist()
    assert got == retriever.dense.ranked(q, config.candidates, keep)[0].tolist()
    assert {index.data.chunks[i].source.document for i in got} <= set(docs)
    with pytest.raises(InputError, match="exact_dense_leaves must be 0 or more"):
        SearchConfig(exact_dense_leaves=-1)


def test_identical_texts_come_back_as_one_result_naming_every_source(dup_index: Index) -> None:
    chunks = dup_index.data.chunks
    seen_merge = False
    seen_pair = False
    for query in QUERIES:
        merged = dup_index.search(query, config=DEFAULT)
        texts = [p.text for p in merged]
        assert len(texts) == len(set(texts)) == DEFAULT.k
        for p in merged:
            copy_of = {v: k for k, v in COPIES.items()}
            if p.leaf in copy_of:
                seen_merge = True
                assert p.leaf not in COPIES  # the first copy stands for the text
                assert p.also == (chunks[copy_of[p.leaf]].source,)
                assert p.to_dict()["also"] == [chunks[copy_of[p.leaf]].source.to_dict()]
            else:
                assert p.also == ()
        kept = [p.text for p in dup_index.search(query, config=PAPER)]
        seen_pair |= len(kept) != len(set(kept))
    assert seen_merge  # some query reaches a repeated text
    assert seen_pair  # and without merging, both copies fill two slots for some query


def test_merging_respects_the_document_filter(dup_index: Index) -> None:
    query = "Lava from a volcano erupts as molten rock and ash clouds."
    assert corpus()[1] == query  # not a repeated text: pick the repeated one below
    query = corpus()[2]
    only_copy = dup_index.search(query, config=DEFAULT, docs=["18"])
    assert [p.source.document for p in only_copy] == ["18"] and only_copy[0].also == ()
    both = dup_index.search(query, config=DEFAULT, docs=["2", "18"])
    assert [p.source.document for p in both] == ["2"]
    assert [s.document for s in both[0].also] == ["18"]
    # the flat dense list alone, BM25 alone, and the tree: a copy stands in when its first is
    # filtered out
    flat = DEFAULT.with_(use_tree=False, use_bm25=False, use_dense=True)
    for config in (flat, DEFAULT.with_(use_tree=False), PROFILES["tree"]):
        found = dup_index.search(query, k=1, config=config, docs=["18"])
        assert [p.source.document for p in found] == ["18"]


def _args(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def test_cli_profile_flag(dup_index: Index, tmp_path, capsys, monkeypatch) -> None:
    assert search_config_from(_args(["search", "x", "q"])) == DEFAULT
    assert search_config_from(_args(["search", "x", "q", "--profile", "paper"])) == PAPER
    tree = search_config_from(_args(["search", "x", "q", "--profile", "tree"]))
    assert tree == PROFILES["tree"] and tree.exact_dense_leaves == 0
    wide = search_config_from(_args(["search", "x", "q", "--profile", "paper", "--beam", "7"]))
    assert wide == PAPER.with_(beam=7)
    assert _args(["ask", "x", "q", "--profile", "paper"]).profile == "paper"
    assert _args(["eval", "x", "--profile", "paper"]).profile == "paper"
    with pytest.raises(SystemExit):
        _args(["search", "x", "q", "--profile", "fast"])
    assert EvalSettings(profile="paper").search_config() == PAPER
    assert EvalSettings().search_config() == DEFAULT

    import psirag.retrieval.retriever as retriever_module
    from psirag.cli import main

    # the saved index names the test embedder, which only this process can make
    monkeypatch.setattr(
        retriever_module, "load_index_embedder", lambda spec, **_: WeightedHashEmbedder()
    )
    folder = tmp_path / "idx"
    dup_index.save(folder)
    query = corpus()[2]
    for profile in ("default", "tree", "paper"):
        assert main(["search", str(folder), query, "--profile", profile, "--json"]) == 0
        got = json.loads(capsys.readouterr().out)["passages"]
        want = dup_index.search(query, config=PROFILES[profile])
        assert [p["id"] for p in got] == [p.id for p in want]
        assert [len(p["also"]) for p in got] == [len(p.also) for p in want]


class _EvalContext:
    """What a psi method's factory reads from the eval: its settings and a retriever."""

    def __init__(self, index: Index, beam: int) -> None:
        self.settings = EvalSettings(beam=beam)
        self.index = index

    def retriever(self, **changes: object) -> tuple[object, None]:
        config = self.settings.search_config(**changes)
        return self.index.retriever.with_config(config), None


def test_eval_tree_methods_search_the_tree_whatever_the_index_size() -> None:
    """psi-tree and psi-paper measure the tree itself; psi follows the default profile, whose
    exact stand-in covers an index this small."""
    from psirag.eval.methods import METHODS

    index = _wide_index()
    ctx = _EvalContext(index, beam=2)  # narrow enough for the tree to miss some exact top
    made = {name: METHODS[name].factory(ctx) for name in ("psi", "psi-tree", "psi-paper")}
    differ = 0
    for query in ("w1 w2 w3", "w10 w200 w77 w5", "w150 w151", "w42 w9 w260"):
        q = index.embed_query(query)
        leaves = {name: [p.leaf for p in m.search(query, q)] for name, m in made.items()}
        tree_only = PROFILES["tree"].with_(use_bm25=False, beam=2)
        assert leaves["psi-tree"] == [
            p.leaf for p in index.search_vector(q, query, config=tree_only)
        ]
        assert leaves["psi-paper"] == [
            p.leaf for p in index.search_vector(q, query, config=PAPER.with_(beam=2))
        ]
        default = DEFAULT.with_(beam=2)
        assert leaves["psi"] == [p.leaf for p in index.search_vector(q, query, config=default)]
        exact = default.with_(use_bm25=False)
        differ += leaves["psi-tree"] != [
            p.leaf for p in index.search_vector(q, query, config=exact)
        ]
    assert differ > 0  # the tree list and its exact stand-in told apart
