"""The Index: a thin facade over the three parts it is made of. The build pipeline
(:mod:`psirag.pipeline`) makes an immutable :class:`IndexData`, storage saves and loads it, and a
:class:`Retriever` answers queries from it. The CLI is a thin shell around this class."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag._version import __version__
from psirag.config import IndexConfig, SearchConfig
from psirag.embed import Embedder
from psirag.errors import IndexFormatError
from psirag.index_data import BuildStats, IndexData, SavedOrigin
from psirag.ingest import Document
from psirag.pipeline import BatchBackend, Reporter, build_index_data, fresh_lineage
from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.retriever import NodeHit, Retriever
from psirag.storage import IndexReader, IndexStore, IndexWriter, Verify, _resolve, read_index
from psirag.tree import Tree
from psirag.tree.update import InsertRule
from psirag.types import Chunk, Passage, Source, source_from_dict

if TYPE_CHECKING:
    from psirag.living import UpdateSummary
    from psirag.llm.client import LLMClient

log = logging.getLogger("psirag")

PHRASES_DIR = "keywords"
"""The keyword phrase table's files (absent in indexes saved before it, or without keyword
abstracts: such an index loads as before and its first update builds the table once)."""


DRIFT_FILE = "abstract_drift.npy"
"""Per inner node, the leaves changed under it since its keyword abstract was scored (see
:class:`psirag.living.AbstractDriftRule`); written only when some abstract is waiting."""


def _load_phrase_table(reader: IndexReader, folder: str | Path, n_chunks: int) -> Any:
    """The saved phrase table (arrays memory-mapped; its counts derive on first use), or None."""
    if f"{PHRASES_DIR}/words.json" not in reader.files:
        return None
    from psirag.abstracts.phrases import ARRAYS, DERIVED_ARRAYS, VOCAB_ARRAYS, PhraseTable

    path = reader.path(f"{PHRASES_DIR}/words.json")
    try:
        words = json.loads(path.read_text(encoding="utf-8"))
        arrays = {a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in ARRAYS}
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError("words.json is not a list of words")
        stems = None
        if f"{PHRASES_DIR}/stems.json" in reader.files:  # saved since the vocabulary is kept
            stems = json.loads(reader.path(f"{PHRASES_DIR}/stems.json").read_text("utf-8"))
            if not isinstance(stems, list) or not all(isinstance(w, str) for w in stems):
                raise ValueError("stems.json is not a list of stems")
            arrays.update({a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in VOCAB_ARRAYS})
            if all(f"{PHRASES_DIR}/{a}.npy" in reader.files for a in DERIVED_ARRAYS):
                arrays.update(
                    {a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in DERIVED_ARRAYS}
                )
        table = PhraseTable.from_arrays(words, arrays, stems)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, IndexFormatError):
            raise
        raise IndexFormatError(
            f"{folder}: the keyword phrase table ({PHRASES_DIR}/) is unreadable ({exc}); "
            "rebuild the index"
        ) from exc
    if table.n_leaves != n_chunks:
        raise IndexFormatError(
            f"{folder}: the keyword phrase table holds {table.n_leaves} leaves but the index "
            f"has {n_chunks} chunks; the index is corrupted or mixed, rebuild it"
        )
    return table


def _link_unchanged(writer: IndexWriter) -> None:
    """Replace each staged file that is byte-equal to the base generation's by a hard link to
    it (sizes compared first, then sha256), so unchanged files are stored once."""
    base = writer.base
    if base is None or base.legacy:
        return
    from psirag.storage import sha256_file

    files = base.files
    for p in sorted(writer.staging.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(writer.staging).as_posix()
        old = files.get(rel)
        if not old or p.stat().st_size != old.get("bytes"):
            continue
        if sha256_file(p) != old.get("sha256"):
            continue
        p.unlink()
        writer.keep(rel)


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
        batch: BatchBackend | None = None,
    ) -> Index:
        """Chunk, embed, build the tree, write abstracts and BM25 (:mod:`psirag.pipeline`).

        ``corpus`` is paths (files or folders), :class:`Document` objects, or, with
        ``texts=True``, a list of strings (one document each). ``llm`` (an
        :class:`psirag.llm.LLMClient`) writes the abstracts when ``config.abstracts`` is
        ``llm-summary`` or ``llm-keywords``; its response cache makes a killed build resumable.
        ``batch`` (:class:`psirag.ray_backend.RayBackend`) runs the batch work on a cluster.
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
        own = writer is None
        if writer is None:
            writer = IndexWriter(Path(folder))
        try:
            self._write(writer)
        except BaseException:
            writer.abort()
            raise
        return Path(folder) if own else writer.target

    def _write(self, writer: IndexWriter) -> int:
        """Every file of this index into ``writer``'s new generation, then publish it. A file
        whose bytes equal the base generation's is replaced by a hard link to it, so unchanged
        data is stored once across generations."""
        writer.save_array("node_vectors.npy", self.node_vectors)
        writer.save_array("parent.npy", self.tree.parent)
        writer.save_array("layer.npy", self.tree.layer)
        if self._data.abstract_drift is not None:  # absent: every abstract is current
            writer.save_array(DRIFT_FILE, self._data.abstract_drift)
        chunks = self.chunks
        kept = self._kept_chunk_lines(writer)
        writer.save_jsonl(
            "chunks.jsonl",
            ({"id": c.id, **c.source.to_dict(), "text": c.text} for c in chunks[kept:]),
            base_lines=kept,
        )
        n = self.tree.n_leaves
        writer.save_jsonl(
            "abstracts.jsonl",
            ({"node": n + i, "text": a} for i, a in enumerate(self.abstracts)),
        )
        sources = self._data.sources
        writer.save_jsonl(
            "documents.jsonl",
            ({"id": d, **sources[d]} for d in self._documents if d in sources),
        )
        self.sparse.save(writer.path("bm25"))
        table = self._data.phrase_table
        if table is not None:
            for name, array in table.arrays().items():
                writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)
            with open(writer.path(f"{PHRASES_DIR}/words.json"), "w", encoding="utf-8") as fh:
                fh.write(json.dumps(table.words, ensure_ascii=False))  # dumps: the C encoder
            vocab = table.vocab()
            if vocab is not None:
                stems, vocab_arrays = vocab
                for name, array in vocab_arrays.items():
                    writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)
                with open(writer.path(f"{PHRASES_DIR}/stems.json"), "w", encoding="utf-8") as fh:
                    fh.write(json.dumps(stems, ensure_ascii=False))
                derived = table.derived_arrays()
                for name, array in (derived or {}).items():
                    writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)
        _link_unchanged(writer)
        return writer.commit(self.describe())

    def _kept_chunk_lines(self, writer: IndexWriter) -> int:
        """How many leading lines of the base generation's chunks.jsonl this save can copy:
        the chunks still there, in order, since this index was loaded from that generation."""
        origin = self._data.origin
        base = writer.base
        if origin is None or base is None or base.legacy or base.generation != origin.generation:
            return 0
        if str(_resolve(base.root)) != origin.folder or "chunks.jsonl" not in base.files:
            return 0
        return origin.prefix(self.chunks)

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
            "lineage": dict(self._data.lineage) or fresh_lineage(self.tree.n_leaves),
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
        bm25_docs = sparse.n_docs
        if sparse.first_copy.size != len(chunks) or bm25_docs != len(chunks):
            raise IndexFormatError(
                f"{folder}: the BM25 index holds {bm25_docs} documents but the index has "
                f"{len(chunks)} chunks; the index is corrupted or mixed, rebuild it"
            )
        phrase_table = _load_phrase_table(reader, folder, len(chunks))
        drift = None
        if DRIFT_FILE in reader.files:
            drift = np.asarray(reader.load_array(DRIFT_FILE, mmap=False), dtype=np.int64)
            if drift.shape != (len(abstracts),) or (drift.size and int(drift.min()) < 0):
                raise IndexFormatError(
                    f"{folder}: {DRIFT_FILE} holds {drift.shape} counts for {len(abstracts)} "
                    "abstracts; the index is corrupted or mixed, rebuild it"
                )
        sources: dict[str, dict[str, Any]] = {}
        if "documents.jsonl" in reader.files:
            try:
                for row in reader.iter_jsonl("documents.jsonl"):
                    sources[str(row["id"])] = {"path": row.get("path"), "sha256": row.get("sha256")}
            except (KeyError, TypeError) as exc:
                raise IndexFormatError(f"{folder}: a documents.jsonl record lacks {exc}") from exc
        lineage = m.get("lineage")
        if not isinstance(lineage, dict):
            lineage = fresh_lineage(len(chunks))
        data = IndexData(
            config=config,
            chunks=tuple(chunks),
            tree=tree,
            node_vectors=node_vectors,
            abstracts=tuple(abstracts),
            sparse=sparse,
            embedder_id=embedder_id,
            stats=BuildStats(
                seconds=dict(m.get("build_seconds", {})),
                tree_mode=m.get("tree_mode_used"),
                documents=int(m.get("counts", {}).get("documents", 0) or 0),
                truncated=int(m.get("counts", {}).get("truncated_chunks", 0) or 0),
            ),
            sources=sources,
            lineage={k: int(v) for k, v in lineage.items() if isinstance(v, int)},
            phrase_table=phrase_table,
            abstract_drift=drift,
            origin=None
            if reader.legacy or reader.generation is None
            else SavedOrigin(str(_resolve(reader.root)), reader.generation, tuple(chunks)),
        )
        index = cls.from_data(data)
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
        self._replace_data(data)
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
        self._replace_data(data)
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
        self._replace_data(data)
        return summary

    def _replace_data(self, data: IndexData) -> None:
        """Point this facade at new data; the old value (and retrievers over it) stay valid."""
        if data is self._data:
            return
        embedder = self._retriever._shared.embedder
        self._data = data
        self._retriever = Retriever(data, embedder=embedder)

    def embedder_or_none(self) -> Embedder | None:
        """The embedder if loaded or needed (abstract-text routing), else None: an update
        that only averages leaf vectors never loads the model."""
        if self.config.routing != "leaf_mean":
            return self.embedder
        return self._retriever._shared.embedder

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


def open_for_update(
    folder: str | Path, *, embedder: Embedder | None = None
) -> tuple[IndexWriter, Index]:
    """The writer (holding the lock) and the index of the generation it builds on: every
    writer (the CLI, the server) reads what is on disk under the lock, so no write is lost."""
    store = IndexStore(folder)
    state = store.state()
    if state not in ("index", "legacy"):
        if state in ("missing", "empty", "pending"):
            raise IndexFormatError(
                f"{folder} holds no index; build one first with `psirag index PATH --out {folder}`"
            )
        if state == "newer":
            raise IndexFormatError(
                f"{folder} holds an index in a format this psirag does not know; upgrade "
                "psirag or rebuild the index"
            )
        raise IndexFormatError(f"{folder} is not a psirag index; build one with `psirag index`")
    writer = IndexWriter(folder)
    try:
        generation = writer.base.generation if writer.base is not None else None
        index = Index.load(folder, generation=generation, embedder=embedder)
        index._from_legacy = state == "legacy"  # type: ignore[attr-defined]
    except BaseException:
        writer.abort()
        raise
    return writer, index


__all__ = ["BuildStats", "Index", "NodeHit", "open_for_update"]
