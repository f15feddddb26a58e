"""The Index: a thin facade over the three parts it is made of. The build pipeline
(:mod:`psirag.pipeline`) makes an immutable :class:`IndexData`, storage saves and loads it, and a
:class:`Retriever` answers queries from it. The CLI is a thin shell around this class."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag._version import __version__
from psirag.config import IndexConfig, SearchConfig
from psirag.embed import Embedder
from psirag.errors import IndexFormatError
from psirag.index_data import BuildStats, IndexData
from psirag.ingest import Document
from psirag.pipeline import Reporter, build_index_data
from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.retriever import NodeHit, Retriever
from psirag.storage import IndexReader, IndexWriter, Verify, read_index
from psirag.tree import Tree
from psirag.types import Chunk, Passage, Source, source_from_dict

if TYPE_CHECKING:
    from psirag.llm.client import LLMClient

log = logging.getLogger("psirag")


class Index:
    """An abstract-tree index over a corpus. Build with :meth:`build`, reopen with :meth:`load`."""

    def __init__(
        self,
        *,
        config: IndexConfig,
        chunks: Sequence[Chunk],
        tree: Tree,
        node_vectors: np.ndarray,
        abstracts: Sequence[str],
        sparse: SparseIndex,
        embedder_id: str,
        embedder: Embedder | None = None,
        stats: BuildStats | None = None,
    ) -> None:
        data = IndexData(
            config=config,
            chunks=tuple(chunks),
            tree=tree,
            node_vectors=node_vectors,
            abstracts=tuple(abstracts),
            sparse=sparse,
            embedder_id=embedder_id,
            stats=stats or BuildStats(),
        )
        self._data = data
        self._retriever = Retriever(data, embedder=embedder)

    @classmethod
    def from_data(cls, data: IndexData, *, embedder: Embedder | None = None) -> Index:
        """The facade over data made elsewhere (the pipeline, an update)."""
        index = cls.__new__(cls)
        index._data = data
        index._retriever = Retriever(data, embedder=embedder)
        return index

    # ------------------------------------------------------------------ the parts
    @property
    def data(self) -> IndexData:
        return self._data

    @property
    def retriever(self) -> Retriever:
        """The default-config retriever; ``index.retriever.with_config(...)`` gives others that
        share its tree searcher, dense matrix and embedder."""
        return self._retriever

    @property
    def config(self) -> IndexConfig:
        return self._data.config

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        return self._data.chunks

    @property
    def tree(self) -> Tree:
        return self._data.tree

    @property
    def node_vectors(self) -> np.ndarray:
        return self._data.node_vectors

    @property
    def abstracts(self) -> tuple[str, ...]:
        return self._data.abstracts

    @property
    def sparse(self) -> SparseIndex:
        return self._data.sparse

    @property
    def embedder_id(self) -> str:
        return self._data.embedder_id

    @property
    def stats(self) -> BuildStats:
        return self._data.stats

    @property
    def _documents(self) -> tuple[str, ...]:
        return self._data.documents

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        corpus: Sequence[str | Path] | Sequence[Document] | str | Path,
        config: IndexConfig | None = None,
        *,
        embedder: Embedder | None = None,
        progress: bool = False,
        report: Reporter | None = None,
        on_bad_file: str = "fail",
        texts: bool = False,
        llm: LLMClient | None = None,
    ) -> Index:
        """Chunk, embed, build the tree, write abstracts and BM25 (:mod:`psirag.pipeline`).

        ``corpus`` is paths (files or folders), :class:`Document` objects, or, with
        ``texts=True``, a list of strings (one document each). ``llm`` (an
        :class:`psirag.llm.LLMClient`) writes the abstracts when ``config.abstracts`` is
        ``llm-summary`` or ``llm-keywords``; its response cache makes a killed build resumable.
        """
        data, embedder = build_index_data(
            corpus,
            config,
            embedder=embedder,
            progress=progress,
            report=report,
            on_bad_file=on_bad_file,
            texts=texts,
            llm=llm,
        )
        return cls.from_data(data, embedder=embedder)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the index to ``folder`` as a new generation, published by one atomic rename:
        readers see the old index or the new one, and an interrupted save changes nothing.
        Refuses a folder that is not a psirag index, and a second writer (IndexLockedError)."""
        writer = IndexWriter(Path(folder))
        try:
            writer.save_array("node_vectors.npy", self.node_vectors)
            writer.save_array("parent.npy", self.tree.parent)
            writer.save_array("layer.npy", self.tree.layer)
            writer.save_jsonl(
                "chunks.jsonl",
                ({"id": c.id, **c.source.to_dict(), "text": c.text} for c in self.chunks),
            )
            n = self.tree.n_leaves
            writer.save_jsonl(
                "abstracts.jsonl",
                ({"node": n + i, "text": a} for i, a in enumerate(self.abstracts)),
            )
            self.sparse.save(writer.path("bm25"))
            writer.commit(self.describe())
        except BaseException:
            writer.abort()
            raise
        return Path(folder)

    def describe(self) -> dict[str, Any]:
        """The manifest body: what a person or a program needs to know about this index."""
        layers = self.tree.layer_sizes()
        return {
            "psirag_version": __version__,
            "config": self.config.to_dict(),
            "embedder": {
                "spec": self.config.embedder,
                "id": self.embedder_id,
                "dim": int(self.node_vectors.shape[1]),
            },
            "counts": {
                "documents": len(self._documents),
                "chunks": self.tree.n_leaves,
                "nodes": self.tree.n_nodes,
                "trees": int(self.tree.roots.size),
                "depth": self.tree.depth,
                "nodes_per_layer": layers,
                "truncated_chunks": self.stats.truncated,
            },
            "build_seconds": {k: round(v, 3) for k, v in self.stats.seconds.items()},
            "tree_mode_used": self.stats.tree_mode,
            "llm_abstracts": self.stats.llm or None,
        }

    @classmethod
    def load(
        cls,
        folder: str | Path,
        *,
        embedder: Embedder | None = None,
        verify: Verify | bool = "size",
        generation: int | None = None,
    ) -> Index:
        """Open a saved index: everything from the one generation its pointer names (or
        ``generation``), so a save running meanwhile is never half seen. Arrays are
        memory-mapped; the embedder loads on first query. ``verify="size"`` (default) checks
        file sizes and the manifest's hash, ``"full"`` the sha256 of every file."""
        return read_index(
            Path(folder),
            lambda reader: cls._from_reader(reader, folder, embedder),
            verify=verify,
            generation=generation,
        )

    @classmethod
    def _from_reader(
        cls, reader: IndexReader, folder: str | Path, embedder: Embedder | None
    ) -> Index:
        """The body of :meth:`load`: build the object from one open generation."""
        m = reader.manifest
        try:
            config = IndexConfig.from_dict(m["config"])
            embedder_id = m["embedder"]["id"]
            dim = int(m["embedder"]["dim"])
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexFormatError(f"{folder}: manifest field {exc} is missing or invalid") from exc
        node_vectors = reader.load_array("node_vectors.npy")
        tree = Tree(
            parent=np.asarray(reader.load_array("parent.npy", mmap=False), dtype=np.int64),
            layer=np.asarray(reader.load_array("layer.npy", mmap=False), dtype=np.int32),
        )
        try:
            chunks = [
                Chunk(row["id"], row["text"], source_from_dict(row))
                for row in reader.iter_jsonl("chunks.jsonl")
            ]
            abstracts = [row["text"] for row in reader.iter_jsonl("abstracts.jsonl")]
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, IndexFormatError):
                raise
            raise IndexFormatError(f"{folder}: a chunk or abstract record lacks {exc}") from exc
        if (
            node_vectors.ndim != 2
            or node_vectors.shape != (tree.n_nodes, dim)
            or len(chunks) != tree.n_leaves
            or len(abstracts) != tree.n_nodes - tree.n_leaves
        ):
            raise IndexFormatError(f"{folder}: arrays and records disagree in size; rebuild it")
        try:
            sparse = SparseIndex.load(reader.path("bm25"))
        except (OSError, ValueError, KeyError) as exc:
            if isinstance(exc, IndexFormatError):
                raise
            raise IndexFormatError(f"{folder}: cannot read the BM25 index ({exc})") from exc
        bm25_docs = sparse.retriever.scores.get("num_docs")
        if sparse.first_copy.size != len(chunks) or bm25_docs != len(chunks):
            raise IndexFormatError(
                f"{folder}: the BM25 index holds {bm25_docs} documents but the index has "
                f"{len(chunks)} chunks; the index is corrupted or mixed, rebuild it"
            )
        index = cls(
            config=config,
            chunks=chunks,
            tree=tree,
            node_vectors=node_vectors,
            abstracts=abstracts,
            sparse=sparse,
            embedder_id=embedder_id,
            stats=BuildStats(
                seconds=dict(m.get("build_seconds", {})), tree_mode=m.get("tree_mode_used")
            ),
        )
        if embedder is not None:
            index.embedder = embedder
        return index

    # ------------------------------------------------------------------ querying
    @property
    def embedder(self) -> Embedder:
        return self._retriever.embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self._retriever.embedder = value

    @property
    def documents(self) -> list[str]:
        return list(self._data.documents)

    def embed_query(self, query: str) -> np.ndarray:
        return self._retriever.embed_query(query)

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Passage]:
        """Hybrid retrieval: tree (Algorithm 2) and BM25, fused by RRF (or a reranker)."""
        return self._retriever.search(query, k, config=config, docs=docs)

    def search_vector(
        self,
        vector: np.ndarray,
        query: str,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Passage]:
        """:meth:`search` with the query already embedded (the timed part of a search)."""
        return self._retriever.search_vector(vector, query, config=config, docs=docs)

    def visit(
        self,
        query: str,
        *,
        docs: Sequence[str] | None = None,
        beam: int = 10,
        k: int = 10,
    ) -> list[NodeHit]:
        """Every node a tree search scores (abstracts and leaves), best first (SPEC 2.5)."""
        return self._retriever.visit(query, docs=docs, beam=beam, k=k)

    def visit_vector(
        self,
        vector: np.ndarray,
        *,
        docs: Sequence[str] | None = None,
        beam: int = 10,
        k: int = 10,
    ) -> list[NodeHit]:
        """:meth:`visit` with the query already embedded."""
        return self._retriever.visit_vector(vector, docs=docs, beam=beam, k=k)

    def passage(self, leaf: int, score: float) -> Passage:
        return self._retriever.passage(leaf, score)

    def node_text(self, node: int) -> str:
        return self._data.node_text(node)

    def node_hit(self, node: int, score: float) -> NodeHit:
        return self._retriever.node_hit(node, score)

    def source(self, leaf: int) -> Source:
        return self._retriever.source(leaf)

    def __repr__(self) -> str:
        return (
            f"Index({self.tree.n_leaves:,} chunks, {self.tree.n_nodes:,} nodes, "
            f"depth {self.tree.depth}, embedder {self.embedder_id!r})"
        )


__all__ = ["BuildStats", "Index", "NodeHit"]
