"""The candidate-list registry (psirag.retrieval.lists): the built-in lists behind the
SearchConfig flags, a list registered from outside the package, and the ``lists`` field."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support import TOPICS, HashEmbedder

from psirag import Index, IndexConfig, SearchConfig
from psirag.cli import build_parser, search_config_from
from psirag.errors import InputError
from psirag.retrieval.lists import LISTS, ListContext, ListRequest, known_lists, register_list

TEXTS = [t for texts in TOPICS.values() for t in texts]
QUERIES = ["volcano ash and lava", "football club manager", "bread dough yeast oven"]


@pytest.fixture(scope="module")
def index() -> Index:
    return Index.build(TEXTS, IndexConfig(max_children=3), embedder=HashEmbedder(), texts=True)


class LastLeaves:
    """A list from outside the package: the allowed leaves in reverse id order, score = id."""

    def __init__(self, context: ListContext) -> None:
        self.n = context.data.n_leaves

    def rank(self, request: ListRequest) -> tuple[np.ndarray, np.ndarray]:
        ids = np.arange(self.n)[::-1]
        if request.leaves is not None:
            ids = ids[request.leaves[ids]]
        ids = ids[: request.k]
        return ids, ids.astype(np.float32)


@pytest.fixture
def last_leaves() -> Iterator[str]:
    register_list("last-leaves", LastLeaves, "test list")
    yield "last-leaves"
    LISTS.pop("last-leaves")


def test_builtins_are_registered() -> None:
    assert {"tree", "dense", "bm25"} <= set(known_lists())


def test_flags_and_names_search_alike(index: Index) -> None:
    """The flags are a spelling of ``lists``: the same lists, in the same order, same results."""
    pairs = [
        (SearchConfig(), ("tree", "bm25")),
        (SearchConfig(use_tree=False, use_dense=True), ("dense", "bm25")),
        (SearchConfig(use_bm25=False, exact_dense_leaves=0), ("tree",)),
        (SearchConfig(use_dense=True), ("tree", "dense", "bm25")),
    ]
    for flags, names in pairs:
        named = flags.with_(lists=names)
        assert flags.list_names() == names == named.list_names()
        assert (named.use_tree, named.use_dense, named.use_bm25) == (
            flags.use_tree,
            flags.use_dense,
            flags.use_bm25,
        )
        for query in QUERIES:
            assert index.search(query, config=flags) == index.search(query, config=named)


def test_with_keeps_flags_and_lists_in_step() -> None:
    named = SearchConfig(lists=("bm25", "tree"))
    assert named.with_(use_bm25=False).lists == ("tree",)
    assert named.with_(use_dense=True).lists == ("bm25", "tree", "dense")
    assert not named.with_(use_tree=False).use_tree
    with pytest.raises(InputError, match="lists is empty"):
        SearchConfig(lists=())
    with pytest.raises(InputError, match="twice"):
        SearchConfig(lists=("bm25", "bm25"))


def test_a_registered_list_is_fused(index: Index, last_leaves: str) -> None:
    """A list from outside the package joins RRF like the built-ins, alone it is its own
    order, and a document filter reaches it."""
    alone = index.search("volcano", config=SearchConfig(lists=(last_leaves,), k=3))
    assert [p.leaf for p in alone] == [index.data.n_leaves - 1 - i for i in range(3)]
    fused = index.search("volcano", config=SearchConfig(lists=("bm25", last_leaves), k=10))
    bm25 = index.search("volcano", config=SearchConfig(use_tree=False, k=10))
    assert [p.leaf for p in fused] != [p.leaf for p in bm25]
    assert bm25[0].leaf in [p.leaf for p in fused]
    doc = index.data.documents[0]
    inside = index.search("volcano", config=SearchConfig(lists=(last_leaves,)), docs=[doc])
    assert inside and all(p.source.document == doc for p in inside)


def test_unknown_list_fails_with_the_known_ones(index: Index) -> None:
    with pytest.raises(InputError, match=r"unknown candidate list 'nope'.*bm25"):
        index.search("volcano", config=SearchConfig(lists=("nope",)))


def test_cli_lists_option() -> None:
    parser = build_parser()
    args = parser.parse_args(["search", "idx", "q", "--lists", "dense,bm25"])
    assert search_config_from(args).list_names() == ("dense", "bm25")
    args = parser.parse_args(["search", "idx", "q", "--lists", "dense,bm25", "--no-bm25"])
    assert search_config_from(args).list_names() == ("dense",)
    with pytest.raises(InputError, match="unknown candidate list 'flat'"):
        search_config_from(parser.parse_args(["search", "idx", "q", "--lists", "flat"]))


def test_server_request_lists() -> None:
    from psirag.server.models import SearchRequest
    from psirag.server.querying import search_config

    config = search_config(SearchRequest(query="q", lists=["dense", "bm25"]))
    assert config.list_names() == ("dense", "bm25")
    config = search_config(SearchRequest(query="q", lists=["dense", "bm25"], bm25=False))
    assert config.list_names() == ("dense",)
    assert search_config(SearchRequest(query="q")).list_names() == ("tree", "bm25")
    with pytest.raises(InputError, match="unknown candidate list 'flat'"):
        search_config(SearchRequest(query="q", lists=["flat"]))


RACE = """
import importlib, threading, time
import psirag.retrieval.lists as lists

assert lists._loaded is False, "the built-in lists were loaded already"
real = importlib.import_module

def slow_import(name, *args, **kwargs):
    if name.startswith("psirag.retrieval.lists."):
        time.sleep(0.3)  # a list module that takes a while to import
    return real(name, *args, **kwargs)

importlib.import_module = slow_import
first = threading.Thread(target=lists.list_spec, args=("dense",))
first.start()
time.sleep(0.1)  # the first search is loading the lists
print(lists.list_spec("dense").name)
first.join()
"""


def test_a_search_during_the_first_load_of_the_lists_finds_them() -> None:
    """Before: the first caller marked the built-in lists loaded before importing them, so a
    second thread (a server's concurrent first searches) got "unknown candidate list 'dense'"."""
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", RACE], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "dense"
