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

from psirag.argtypes import first_surrogate
from psirag.config import SearchConfig
from psirag.embed import Embedder, finalize_vectors
from psirag.embed.endpoints import load_index_embedder
from psirag.errors import EmbedderMismatchError, InputError
from psirag.index_data import IndexData
from psirag.retrieval.fusion import Reranker, rerank_union, rrf_fuse
from psirag.retrieval.ranking import first_copies, top_k
from psirag.retrieval.tree_search import TreeSearcher
from psirag.types import Passage, Source

Ranked = tuple[np.ndarray, np.ndarray]
"""A candidate list: leaf ids best first, and their scores."""


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


class DenseFlat:
    """Exact cosine over every leaf embedding, one leaf per distinct text (as BM25 does)."""

    def __init__(self, leaf_vectors: np.ndarray, text_of: np.ndarray) -> None:
        self.vectors = np.ascontiguousarray(np.asarray(leaf_vectors), dtype=np.float32)
        self.text_of = np.asarray(text_of, dtype=np.int64)
        """Each leaf's text, as the first leaf holding it (the index's ``first_copy``)."""
        self.first = first_copies(self.text_of)

    @classmethod
    def of(cls, data: IndexData) -> DenseFlat:
        return cls(data.node_vectors[: data.n_leaves], data.sparse.first_copy)

    def ranked(self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None) -> Ranked:
        """Top-k leaves by cosine, best first (ties by leaf id), with their scores; ``allowed``
        (a boolean mask over leaves) keeps the ranking inside some documents."""
        scores = self.vectors @ np.asarray(vector, dtype=np.float32).ravel()
        keep = self.first if allowed is None else first_copies(self.text_of, allowed)
        cand = np.flatnonzero(keep)
        cand = cand[top_k(scores[cand], k, cand)]
        return cand, scores[cand]


class _Shared:
    """What every retriever over one IndexData shares, built on first use."""

    def __init__(self, data: IndexData) -> None:
        self.data = data
        self.embedder: Embedder | None = None
        self.rerankers: dict[str, Reranker] = {}

    @cached_property
    def searcher(self) -> TreeSearcher:
        return TreeSearcher(self.data.tree, self.data.node_vectors)

    @cached_property
    def dense(self) -> DenseFlat:
        return DenseFlat.of(self.data)

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
        from psirag.ids import match, some

        data = self.data
        documents = data.documents
        docs, missing = match(docs, documents)
        if missing:
            sample = ", ".join(repr(d) for d in documents[:5])
            raise InputError(
                f"unknown document id(s) [{some(missing)}]; this index holds "
                f"{len(documents):,} documents, e.g. {sample} (see `psirag inspect`)"
            )
        leaves = np.isin(data.leaf_documents, list(docs))
        nodes = np.asarray(data.tree.leaf_membership @ leaves.astype(np.float32)).ravel() > 0
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
        """The lists ``config`` turns on, ``config.candidates`` deep each, in fusion order:
        tree, dense, BM25 (RRF breaks ties by the first)."""
        config = config or self.config
        vector = self._check_vector(vector)
        where = self.doc_filter(docs)
        leaves = None if where is None else where.leaves
        lists: list[Ranked] = []
        if config.use_tree and self.exact_in_tree_place(config, leaves):
            lists.append(self.dense.ranked(vector, config.candidates, leaves))
        elif config.use_tree:
            hits = self.searcher.search(
                vector,
                k=config.candidates,
                beam=config.beam,
                allowed=None if where is None else where.nodes,
            )
            lists.append((hits.leaves, hits.scores))
        if config.use_dense:
            lists.append(self.dense.ranked(vector, config.candidates, leaves))
        if config.use_bm25:
            lists.append(self.data.sparse.search(query, k=config.candidates, allowed_leaves=leaves))
        if config.merge_duplicates and self._shared.copies:
            lists = [self._merge_copies(ids, scores, leaves) for ids, scores in lists]
        return lists

    def exact_in_tree_place(self, config: SearchConfig, leaves: np.ndarray | None) -> bool:
        """Whether the tree's dense list is ranked by a flat scan: when no more leaves are
        searched (``leaves``: the allowed mask, None for all) than
        ``config.exact_dense_leaves``."""
        searched = self.data.n_leaves if leaves is None else int(np.count_nonzero(leaves))
        return searched <= config.exact_dense_leaves

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
        the reranker over the lists."""
        config = config or self.config
        lists = self.candidate_lists(vector, query, config=config, docs=docs)
        ids = [leaves.tolist() for leaves, _ in lists]
        if config.fusion == "rerank":
            reranker = self._reranker or self._shared.reranker(str(config.reranker))
            return rerank_union(query, ids, self.data.node_text, reranker, k=config.k)
        if len(lists) == 1:
            return list(zip(ids[0][: config.k], lists[0][1].tolist(), strict=False))
        return rrf_fuse(ids, k=config.k, rrf_k=config.rrf_k)

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
        pairs = self.ranked(vector, query, config=config, docs=docs)
        if not config.merge_duplicates:
            return [self.passage(i, s) for i, s in pairs]
        where = self.doc_filter(docs)
        allowed = None if where is None else where.leaves
        return [self.passage(i, s, merged=True, allowed=allowed) for i, s in pairs]

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
        self, leaf: int, score: float, *, merged: bool = False, allowed: np.ndarray | None = None
    ) -> Passage:
        """Leaf ``leaf`` as a result; ``merged`` also names the other leaves (inside the
        ``allowed`` mask, when given) that hold the same text (``Passage.also``)."""
        chunks = self.data.chunks
        c = chunks[leaf]
        also: tuple[Source, ...] = ()
        group = self._shared.copies.get(leaf) if merged else None
        if group is not None:
            others = [int(u) for u in group.tolist() if u != leaf]
            if allowed is not None:
                others = [u for u in others if allowed[u]]
            also = tuple(chunks[u].source for u in others)
        return Passage(id=c.id, text=c.text, score=score, source=c.source, leaf=leaf, also=also)

    def node_hit(self, node: int, score: float) -> NodeHit:
        data = self.data
        tree = data.tree
        leaves = tree.leaves_under(node) if node >= tree.n_leaves else np.array([node])
        docs = set(data.leaf_documents[leaves].tolist())
        return NodeHit(
            node=node,
            layer=int(tree.layer[node]),
            score=score,
            text=data.node_text(node),
            order=int(leaves.min()),
            document=docs.pop() if len(docs) == 1 else None,
        )

    def source(self, leaf: int) -> Source:
        return self.data.chunks[leaf].source


__all__ = ["DenseFlat", "DocFilter", "NodeHit", "Ranked", "Retriever"]
