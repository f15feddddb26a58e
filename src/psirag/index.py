"""The Index: a thin facade over the three parts it is made of. The build pipeline
(:mod:`psirag.pipeline`) makes an immutable :class:`IndexData`, storage saves and loads it, and a
:class:`Retriever` answers queries from it. The CLI is a thin shell around this class."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag.config import IndexConfig, SearchConfig
from psirag.embed import Embedder
from psirag.index_data import BuildStats, IndexData
from psirag.retrieval.retriever import NodeHit, Retriever
from psirag.storage import IndexReader, IndexWriter, Verify, read_index
from psirag.storage_format import load_index_data, manifest_body, save_index_data
from psirag.tree import Tree
from psirag.types import Chunk, Passage, Source

if TYPE_CHECKING:
    from psirag.ingest import Document
    from psirag.living import SavedUpdate, UpdateSummary
    from psirag.llm.client import LLMClient
    from psirag.pipeline import BatchBackend, Reporter
    from psirag.retrieval.bm25 import SparseIndex
    from psirag.tree.update import InsertRule

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
    def chunks(self) -> Sequence[Chunk]:
        return self._data.chunks

    @property
    def tree(self) -> Tree:
        return self._data.tree

    @property
    def node_vectors(self) -> np.ndarray:
        return self._data.vector_rows()  # not joined: rows by index, as a search reads them

    @property
    def abstracts(self) -> Sequence[str]:
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
        batch: BatchBackend | None = None,
    ) -> Index:
        """Chunk, embed, build the tree, write abstracts and BM25 (:mod:`psirag.pipeline`).

        ``corpus`` is paths (files or folders), :class:`Document` objects, or, with
        ``texts=True``, a list of strings (one document each). ``llm`` (an
        :class:`psirag.llm.LLMClient`) writes the abstracts when ``config.abstracts`` is
        ``llm-summary`` or ``llm-keywords``; its response cache makes a killed build resumable.
        ``batch`` (:class:`psirag.ray_backend.RayBackend`) runs the batch work on a cluster.
        """
        from psirag.pipeline import build_index_data  # building needs what a search does not

        data, embedder = build_index_data(
            corpus,
            config,
            embedder=embedder,
            progress=progress,
            report=report,
            on_bad_file=on_bad_file,
            texts=texts,
            llm=llm,
            batch=batch,
        )
        return cls.from_data(data, embedder=embedder)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path, *, writer: IndexWriter | None = None) -> Path:
        """Write the index to ``folder`` as a new generation, published by one atomic rename:
        readers see the old index or the new one, and an interrupted save changes nothing.
        Refuses a folder that is not a psirag index, and a second writer (IndexLockedError).
        ``writer``: an :class:`IndexWriter` already holding the lock (an update reads the
        current generation and writes the next under one lock)."""
        from psirag.oserrors import saving

        own = writer is None
        if writer is None:
            with saving(folder, had_index=False):
                writer = IndexWriter(Path(folder))
        with saving(writer.target, had_index=writer.base is not None), writer:
            generation = save_index_data(writer, self._data)
        if own:  # what the next save on top of this generation may keep unread
            from psirag.living import as_saved

            self._data = as_saved(self._data, writer.target, generation)
        return Path(folder) if own else writer.target

    def describe(self) -> dict[str, Any]:
        """The manifest body: what a person or a program needs to know about this index."""
        return manifest_body(self._data)

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
        memory-mapped; a format-3 index's chunk and abstract records are decoded when first
        read, and its keyword phrase table when an update first uses it, so opening costs
        about the same at any size; the embedder loads on first query. ``verify="size"``
        (default) checks file sizes and the manifest's hash, ``"full"`` the sha256 of every
        file."""
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
        index = cls.from_data(load_index_data(reader, folder))
        if embedder is not None:
            index.embedder = embedder
        return index

    # ------------------------------------------------------------------ updating
    def add(
        self,
        paths_or_texts: Sequence[str | Path] | Sequence[Document] | str | Path,
        *,
        texts: bool = False,
        progress: bool = False,
        llm: Any = None,
        embedder: Embedder | None = None,
        on_bad_file: str = "fail",
        rule: InsertRule = "auto",
        report: Reporter | None = None,
    ) -> UpdateSummary:
        """Add documents (paths, :class:`Document` objects or, with ``texts=True``, strings)
        without a rebuild: new chunks are embedded and inserted into the tree (App. G), only
        the changed ancestors get new abstracts and routing vectors (``llm`` writes LLM
        abstracts), BM25 is rescored from cached term counts. Documents already indexed are
        skipped; a new document whose id is taken is renamed (see :mod:`psirag.living`). This
        object then holds the new :class:`IndexData`; ``save`` writes it as a new generation."""
        from psirag.living import add_documents

        if embedder is not None and embedder.id != self.embedder_id:
            add_documents(self._data, [], embedder)  # raises the mismatch error
        data, summary = add_documents(
            self._data,
            paths_or_texts,
            embedder or self.embedder,
            texts=texts,
            llm=llm,
            progress=progress,
            on_bad_file=on_bad_file,
            rule=rule,
            report=report,
        )
        self.replace_data(data)
        return summary

    def remove(
        self, doc_ids: Sequence[str] | str, *, llm: Any = None, progress: bool = False
    ) -> UpdateSummary:
        """Remove documents by id: their leaves go, emptied nodes are pruned, the changed
        ancestors are refreshed (as :meth:`add`). An unknown id changes nothing and fails."""
        from psirag.living import remove_documents

        needs_embedder = self.config.routing != "leaf_mean"
        data, summary = remove_documents(
            self._data,
            [doc_ids] if isinstance(doc_ids, str) else list(doc_ids),
            self.embedder if needs_embedder else None,
            llm=llm,
            progress=progress,
        )
        self.replace_data(data)
        return summary

    def update(
        self,
        remove: Sequence[str],
        add: Sequence[str | Path] | Sequence[Document] | None,
        *,
        texts: bool = False,
        progress: bool = False,
        llm: Any = None,
        on_bad_file: str = "fail",
        rule: InsertRule = "auto",
        report: Reporter | None = None,
    ) -> UpdateSummary:
        """Remove documents and add others in one update (a changed file is both): the tree
        changes twice, the dirty nodes and BM25 are refreshed once."""
        from psirag.living import update_documents

        needs = bool(add) or self.config.routing != "leaf_mean"
        data, summary = update_documents(
            self._data,
            list(remove),
            add if add else None,
            self.embedder if needs else None,
            texts=texts,
            llm=llm,
            progress=progress,
            on_bad_file=on_bad_file,
            rule=rule,
            report=report,
        )
        self.replace_data(data)
        return summary

    @classmethod
    def update_saved(
        cls,
        folder: str | Path,
        change: Callable[[Index], UpdateSummary],
        *,
        embedder: Embedder | None = None,
        save: bool = True,
        wait: float = 0.0,
        base: Index | None = None,
        collect_later: bool = False,
    ) -> tuple[Index, SavedUpdate]:
        """Change a saved index in place, safely against other writers: under the writer
        lock, load the generation on disk, run ``change(index)`` (``index.add``,
        ``index.remove``, ``index.update``...), save the result as the next generation and
        publish it; nothing is written when nothing changed, and an exception leaves the
        published index as it was (:func:`psirag.living.update_saved`); ``save=False`` (a dry
        run) changes the index in memory only. ``base``: an index this process holds (a
        server's); when it is still the generation on disk it is changed without reading the
        folder (``done.loaded`` is False). ``wait``: seconds to wait for another writer's lock.
        ``collect_later``: the retired generations' files are deleted on a background thread.
        Returns the changed index and what was done::

            index, done = Index.update_saved("my-index", lambda ix: ix.add(["new.txt"]))
        """
        from psirag.living import update_saved

        facades: list[Index] = []

        def run(data: IndexData) -> tuple[IndexData, UpdateSummary]:
            index = cls.from_data(data, embedder=embedder)
            facades.append(index)
            summary = change(index)
            return index.data, summary

        if base is not None and embedder is None:
            embedder = base.embedder_or_none()

        done = update_saved(
            folder,
            run,
            save=save,
            base=base.data if base is not None else None,
            wait=wait,
            collect_later=collect_later,
        )
        index = facades[0]
        index.replace_data(done.data)  # saved: it now names its generation (next ``base``)
        return index, done

    def replace_data(self, data: IndexData) -> None:
        """Point this facade at new data (what a change passed to :meth:`update_saved` does
        after it made new data itself, such as a rebuild); the old value, and retrievers over
        it, stay valid: ``IndexData`` is immutable."""
        if data is self._data:
            return
        embedder = self._retriever.loaded_embedder
        self._data = data
        self._retriever = Retriever(data, embedder=embedder)

    def embedder_or_none(self) -> Embedder | None:
        """The embedder if loaded or needed (abstract-text routing), else None: an update
        that only averages leaf vectors never loads the model."""
        if self.config.routing != "leaf_mean":
            return self.embedder
        return self._retriever.loaded_embedder

    def drift(self) -> dict[str, Any]:
        """Updates since the last full build and whether a rebuild is due (README)."""
        from psirag.living import drift_report

        return drift_report(self._data)

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
