"""The query side of an index: document filtering, the candidate lists (tree, dense, BM25),
fusion (RRF) or rerank, and the visit of summarization mode, over one :class:`IndexData`.

A :class:`Retriever` is configured by a :class:`SearchConfig`; :meth:`Retriever.with_config`
gives siblings with other configs that share the derived structures (tree searcher, dense
matrix, loaded rerankers, the embedder), so the evaluation's methods are retrievers composed
over one index instead of code reaching into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from psirag.config import SearchConfig
from psirag.embed import Embedder, finalize_vectors
from psirag.embed.endpoints import load_index_embedder
from psirag.errors import EmbedderMismatchError, InputError
from psirag.index_data import IndexData
from psirag.retrieval.dense import DenseFlat, Ranked
from psirag.retrieval.duplicates import merge_near_duplicates, record_heading
from psirag.retrieval.fusion import Reranker, boosted_rrf, convex_fuse, rerank_union, rrf_fuse
from psirag.retrieval.lists import CandidateList, ListRequest, list_spec
from psirag.retrieval.lists.tree import TreeList, exact_in_tree_place
from psirag.retrieval.tree_search import TreeSearcher
from psirag.types import Passage, Source, first_surrogate


@dataclass(frozen=True)
class NodeHit:
    """A node visited by tree search: an abstract node (layer > 0) or a leaf (layer 0)."""

    node: int
    layer: int
    score: float
    text: str
    order: int
    """Position of the node's first leaf in corpus order (for reading hits in document order)."""
    document: str | None
    """The document of a leaf, or of an abstract node whose leaves all come from one document."""


@dataclass(frozen=True)
class DocFilter:
    """Boolean masks of what a search restricted to some documents may return or enter."""

    leaves: np.ndarray
    nodes: np.ndarray
    """Nodes holding at least one allowed leaf (what tree search may enter)."""


class _Shared:
    """What every retriever over one IndexData shares, built on first use: the candidate
    lists (:mod:`psirag.retrieval.lists`), the embedder, the rerankers."""

    def __init__(self, data: IndexData) -> None:
        self.data = data
        self.embedder: Embedder | None = None
        self.rerankers: dict[str, Reranker] = {}
        self.lists: dict[str, CandidateList] = {}

    def candidate_list(self, name: str) -> CandidateList:
        """The registered list ``name`` over this index, built on first use."""
        built = self.lists.get(name)
        if built is None:
            built = self.lists[name] = list_spec(name).factory(self)
        return built

    @property
    def searcher(self) -> TreeSearcher:
        tree = self.candidate_list("tree")
        assert isinstance(tree, TreeList)
        return tree.searcher

    @property
    def dense(self) -> DenseFlat:
        dense = self.candidate_list("dense")
        assert isinstance(dense, DenseFlat)
        return dense

    @cached_property
    def copies(self) -> dict[int, np.ndarray]:
        """Every leaf whose text another leaf repeats -> all leaves with that text, in order."""
        first = np.asarray(self.data.sparse.first_copy)
        repeated = np.flatnonzero(first != np.arange(first.size))
        groups: dict[int, list[int]] = {}
        for leaf in repeated.tolist():
            groups.setdefault(int(first[leaf]), [int(first[leaf])]).append(leaf)
        return {leaf: np.asarray(g) for g in groups.values() for leaf in g}

    def reranker(self, path: str) -> Reranker:
        if path not in self.rerankers:
            from psirag.retrieval.rerank import CrossEncoderReranker

            self.rerankers[path] = CrossEncoderReranker(path)
        return self.rerankers[path]


class Retriever:
    """Search and visit over one :class:`IndexData`, as ``config`` says (each call may pass
    another config). The embedder loads on first use unless given; a ``reranker`` object
    replaces the one ``config.reranker`` names (the evaluation shares one across methods)."""

    def __init__(
        self,
        data: IndexData,
        config: SearchConfig | None = None,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self._shared = _Shared(data)
        self.config = config or SearchConfig()
        self._reranker = reranker
        if embedder is not None:
            self.embedder = embedder

    def with_config(
        self,
        config: SearchConfig | None = None,
        *,
        reranker: Reranker | None = None,
        **changes: Any,
    ) -> Retriever:
        """A retriever over the same data and shared structures with another config (``config``,
        else this one, with ``changes`` applied)."""
        sibling = Retriever.__new__(Retriever)
        sibling._shared = self._shared
        base = config or self.config
        sibling.config = base.with_(**changes) if changes else base
        sibling._reranker = reranker if reranker is not None else self._reranker
        return sibling

    @property
    def data(self) -> IndexData:
        return self._shared.data

    @property
    def searcher(self) -> TreeSearcher:
        """Algorithm 2 over the tree (benchmarks time it alone)."""
        return self._shared.searcher

    @property
    def dense(self) -> DenseFlat:
        return self._shared.dense

    # ------------------------------------------------------------------ the query embedder
    @property
    def embedder(self) -> Embedder:
        shared = self._shared
        if shared.embedder is None:
            config = self.data.config
            # An endpoint named by the manifest needs the user's confirmation (embed/endpoints.py).
            embedder = load_index_embedder(config.embedder, batch_size=config.batch_size)
            self._check_embedder(embedder)
            shared.embedder = embedder
        return shared.embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self._check_embedder(value)
        self._shared.embedder = value

    @property
    def loaded_embedder(self) -> Embedder | None:
        """The query embedder if one was given or loaded already, else None: reading it never
        loads a model (what an update that needs none asks)."""
        return self._shared.embedder

    def _check_embedder(self, embedder: Embedder) -> None:
        data = self.data
        if embedder.id != data.embedder_id:
            raise EmbedderMismatchError(
                f"this index was built with embedder {data.embedder_id!r} but the query embedder "
                f"is {embedder.id!r}; query vectors from another model are meaningless here. "
                f"Use the index's own embedder ({data.config.embedder!r}) or rebuild the index."
            )

    def embed_query(self, query: str) -> np.ndarray:
        if not isinstance(query, str) or not query.strip():
            raise InputError("the query is empty; give a question or some keywords")
        position = first_surrogate(query)
        if position is not None:
            raise InputError(
                f"the query holds a lone surrogate at character {position} (bytes that were not "
                "UTF-8); pass the query as UTF-8 text"
            )
        return finalize_vectors(self.embedder.embed([query]), [query])[0]

    def _check_vector(self, vector: np.ndarray) -> np.ndarray:
        vector = np.asarray(vector, dtype=np.float32).ravel()
        dim = self.data.dim
        if vector.shape[0] != dim:
            raise EmbedderMismatchError(
                f"query vector has {vector.shape[0]} dimensions, the index {dim}"
            )
        return vector

    # ------------------------------------------------------------------ filtering
    def doc_filter(self, docs: Sequence[str] | None) -> DocFilter | None:
        """The masks of ``docs`` (None or empty: no restriction); unknown ids fail clearly."""
        if not docs:
            return None
        from psirag.ids import some

        data = self.data
        found = data.document_index  # keyed: reads only the named documents' chunks
        docs, missing = found.match(docs)
        if missing:
            sample = ", ".join(repr(d) for d in data.first_documents(5))
            raise InputError(
                f"unknown document id(s) [{some(missing)}]; this index holds "
                f"{found.count:,} documents, e.g. {sample} (see `psirag inspect`)"
            )
        leaves = found.leaves_of(docs)
        nodes = data.tree.ancestors_of(np.flatnonzero(leaves))
        return DocFilter(leaves, nodes)

    # ------------------------------------------------------------------ ranking
    def candidate_lists(
        self,
        vector: np.ndarray,
        query: str,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Ranked]:
        """The lists ``config`` names (:meth:`SearchConfig.list_names`), ``config.candidates``
        deep each, in fusion order (RRF breaks ties by the first)."""
        config = config or self.config
        vector = self._check_vector(vector)
        where = self.doc_filter(docs)
        leaves = None if where is None else where.leaves
        request = ListRequest(
            vector=vector,
            query=query,
            config=config,
            leaves=leaves,
            nodes=None if where is None else where.nodes,
        )
        shared = self._shared
        lists = [shared.candidate_list(name).rank(request) for name in config.list_names()]
        if config.merge_duplicates and shared.copies:
            lists = [self._merge_copies(ids, scores, leaves) for ids, scores in lists]
        return lists

    def exact_in_tree_place(self, config: SearchConfig, leaves: np.ndarray | None) -> bool:
        """Whether the tree's dense list is ranked by a flat scan: when no more leaves are
        searched (``leaves``: the allowed mask, None for all) than
        ``config.exact_dense_leaves``."""
        return exact_in_tree_place(self.data.n_leaves, leaves, config.exact_dense_leaves)

    def _canonical(self, leaf: int, allowed: np.ndarray | None) -> int:
        """The first leaf (among ``allowed`` ones) with ``leaf``'s text."""
        group = self._shared.copies.get(leaf)
        if group is None:
            return leaf
        if allowed is not None:
            group = group[allowed[group]]
        return int(group[0])

    def _merge_copies(
        self, ids: np.ndarray, scores: np.ndarray, allowed: np.ndarray | None
    ) -> Ranked:
        """One entry per distinct text (its first allowed leaf), at its best rank."""
        seen: set[int] = set()
        keep_ids: list[int] = []
        keep_pos: list[int] = []
        for pos, leaf in enumerate(ids.tolist()):
            c = self._canonical(int(leaf), allowed)
            if c not in seen:
                seen.add(c)
                keep_ids.append(c)
                keep_pos.append(pos)
        return np.asarray(keep_ids, dtype=np.int64), np.asarray(scores)[keep_pos]

    def ranked(
        self,
        vector: np.ndarray,
        query: str,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[tuple[int, float]]:
        """The final top ``config.k`` ``(leaf, score)``: a single list's own order, else RRF or
        the reranker over the lists; with ``merge_duplicates``, near-duplicates of a better
        result are left out (:mod:`psirag.retrieval.duplicates`) and later ones move up."""
        return [(i, s) for i, s, _ in self._ranked_groups(vector, query, config, docs)]

    def _ranked_groups(
        self,
        vector: np.ndarray,
        query: str,
        config: SearchConfig | None,
        docs: Sequence[str] | None,
    ) -> list[tuple[int, float, list[int]]]:
        """:meth:`ranked`'s results, each with the near-duplicate leaves merged into it."""
        config = config or self.config
        lists = self.candidate_lists(vector, query, config=config, docs=docs)
        ids = [leaves.tolist() for leaves, _ in lists]
        # merging may drop some, so rank the whole union and cut after
        depth = sum(len(x) for x in ids) if config.merge_duplicates else config.k
        if config.fusion == "rerank":
            reranker = self._reranker or self._shared.reranker(str(config.reranker))
            pairs = rerank_union(query, ids, self.data.node_text, reranker, k=depth)
        elif len(lists) == 1:
            pairs = list(zip(ids[0][:depth], lists[0][1].tolist(), strict=False))
        elif config.fusion == "rrf-boost":
            sparse = [name == "bm25" for name in config.list_names()]
            scores = [x.tolist() for _, x in lists]
            pairs = boosted_rrf(
                ids, scores, sparse, k=depth, rrf_k=config.rrf_k, ratio=config.boost_ratio
            )
        elif config.fusion == "convex":
            pairs = convex_fuse(ids, [x.tolist() for _, x in lists], self._weights(config), k=depth)
        else:
            pairs = rrf_fuse(ids, k=depth, rrf_k=config.rrf_k)
        if not config.merge_duplicates:
            return [(i, s, []) for i, s in pairs]
        score = dict(pairs)
        chunks = self.data.chunks
        groups = merge_near_duplicates(
            [i for i, _ in pairs],
            self.data.node_text,
            limit=config.k,
            heading_of=lambda i: record_heading(chunks[i].source.title, chunks[i].text),
        )
        return [(i, score[i], merged) for i, merged in groups]

    @staticmethod
    def _weights(config: SearchConfig) -> list[float]:
        """Convex fusion's weight per list: ``sparse_weight`` for BM25, the rest shared by the
        others (all of it to BM25, or to them, when it is alone or absent)."""
        names = config.list_names()
        dense = sum(name != "bm25" for name in names)
        if dense == 0 or dense == len(names):
            return [1.0] * len(names)
        w = config.sparse_weight
        return [w if name == "bm25" else (1.0 - w) / dense for name in names]

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Passage]:
        """Embed the query and return the passages of :meth:`ranked`."""
        config = config or self.config
        if k is not None:
            config = config.with_(k=k)
        return self.search_vector(self.embed_query(query), query, config=config, docs=docs)

    def search_vector(
        self,
        vector: np.ndarray,
        query: str,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Passage]:
        """:meth:`search` with the query already embedded (the timed part of a search)."""
        config = config or self.config
        groups = self._ranked_groups(vector, query, config, docs)
        if not config.merge_duplicates:
            return [self.passage(i, s) for i, s, _ in groups]
        where = self.doc_filter(docs)
        allowed = None if where is None else where.leaves
        return [
            self.passage(i, s, merged=True, allowed=allowed, near=near) for i, s, near in groups
        ]

    # ------------------------------------------------------------------ visit
    def visit(
        self, query: str, *, docs: Sequence[str] | None = None, beam: int = 10, k: int = 10
    ) -> list[NodeHit]:
        """Every node a tree search scores (abstracts and leaves), best first (SPEC 2.5)."""
        return self.visit_vector(self.embed_query(query), docs=docs, beam=beam, k=k)

    def visit_vector(
        self,
        vector: np.ndarray,
        *,
        docs: Sequence[str] | None = None,
        beam: int = 10,
        k: int = 10,
    ) -> list[NodeHit]:
        """:meth:`visit` with the query already embedded, so that an evaluation embeds each
        question once for every method (and times the visit alone)."""
        vector = self._check_vector(vector)
        where = self.doc_filter(docs)
        hits = self.searcher.search(
            vector,
            k=k,
            beam=beam,
            allowed=None if where is None else where.nodes,
            collect_visited=True,
        )
        pairs = zip(hits.visited.tolist(), hits.visited_scores.tolist(), strict=True)
        out = [self.node_hit(u, s) for u, s in pairs]
        out.sort(key=lambda h: (-h.score, h.node))
        return out

    # ------------------------------------------------------------------ results
    def passage(
        self,
        leaf: int,
        score: float,
        *,
        merged: bool = False,
        allowed: np.ndarray | None = None,
        near: Sequence[int] = (),
    ) -> Passage:
        """Leaf ``leaf`` as a result; ``merged`` also names the other leaves (inside the
        ``allowed`` mask, when given) that hold the same text, and the ``near``-duplicate
        leaves merged into it with their copies (``Passage.also``)."""
        chunks = self.data.chunks
        c = chunks[leaf]
        also: tuple[Source, ...] = ()
        if merged:
            others: list[int] = []
            for u in (leaf, *near):
                group = self._shared.copies.get(int(u))
                others += [int(u)] if group is None else [int(x) for x in group.tolist()]
            others = [u for u in dict.fromkeys(others) if u != leaf]
            if allowed is not None:
                others = [u for u in others if allowed[u]]
            also = tuple(chunks[u].source for u in others)
        return Passage(id=c.id, text=c.text, score=score, source=c.source, leaf=leaf, also=also)

    def node_hit(self, node: int, score: float) -> NodeHit:
        data = self.data
        tree = data.tree
        leaves = tree.leaves_under(node) if node >= tree.n_leaves else np.array([node])
        return NodeHit(
            node=node,
            layer=int(tree.layer[node]),
            score=score,
            text=data.node_text(node),
            order=int(leaves.min()),
            document=_one_document(data, leaves),
        )

    def source(self, leaf: int) -> Source:
        return self.data.chunks[leaf].source


_PROBES = 16
"""Leaves of a node whose documents :func:`_one_document` reads first."""
_WALK = 64
"""Up to this many leaves, :func:`_one_document` reads each leaf's chunk rather than the
document of every leaf of the index."""


def _one_document(data: IndexData, leaves: np.ndarray) -> str | None:
    """The document all ``leaves`` come from (None: several). Reads a few spread leaves
    first (mixed nodes, the common case, end there), then the rest of a small node; only a
    large node of one document uses the per-leaf document array, which reads every chunk."""
    if leaves.size == 0:
        return None
    if "leaf_documents" not in data.__dict__:  # not derived yet: read as few chunks as will do
        chunks = data.chunks
        picks = np.unique(np.linspace(0, leaves.size - 1, min(leaves.size, _PROBES)).astype(int))
        first = chunks[int(leaves[0])].source.document
        if any(chunks[int(leaves[i])].source.document != first for i in picks.tolist()):
            return None
        if leaves.size <= _WALK:
            same = all(chunks[u].source.document == first for u in leaves.tolist())
            return first if same else None
    docs = set(data.leaf_documents[leaves].tolist())
    return docs.pop() if len(docs) == 1 else None


__all__ = ["DenseFlat", "DocFilter", "NodeHit", "Ranked", "Retriever"]
