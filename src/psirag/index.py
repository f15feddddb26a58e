"""The Index: chunks, their embeddings, the abstract tree, keyword abstracts and BM25, in one
object that builds, saves, loads and searches. The CLI is a thin shell around this class."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from psirag import __version__
from psirag.config import IndexConfig, SearchConfig
from psirag.embed import Embedder, finalize_vectors, load_embedder
from psirag.errors import EmbedderMismatchError, IndexFormatError, InputError
from psirag.ingest import Document, documents_from_strings, load_documents, make_chunks
from psirag.retrieval.bm25 import SparseIndex
from psirag.retrieval.fusion import rrf_fuse
from psirag.retrieval.tree_search import TreeSearcher
from psirag.storage import IndexReader, IndexWriter
from psirag.tree import Tree, build_forest, build_tree
from psirag.tree.build import resolve_tree_mode
from psirag.types import Chunk, Passage, Source, source_from_dict

log = logging.getLogger("psirag")

Reporter = Callable[[str], None]


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


@dataclass
class BuildStats:
    seconds: dict[str, float] = field(default_factory=dict)
    truncated: int = 0
    documents: int = 0
    llm: dict[str, Any] = field(default_factory=dict)
    """Counts from LLM abstraction: calls paid and cached, tokens, inputs cut to fit."""
    tree_mode: str | None = None
    """The tree mode the build ran in (``exact`` or ``knn``; ``exact+knn`` for a forest whose
    trees differ under ``auto``); None for an index saved before it was recorded."""


class _Bar:
    """A tqdm bar when ``enabled``, usable as a ``progress(done, total)`` callback; else inert."""

    def __init__(
        self, enabled: bool, desc: str, total: int | None = None, unit: str = "step"
    ) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit)

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.update(done - self.bar.n)

    def wrap(self, items: Sequence[Any]) -> Any:
        for item in items:
            yield item
            if self.bar is not None:
                self.bar.update(1)


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(norms == 0, 1, norms)).astype(np.float32)


class Index:
    """An abstract-tree index over a corpus. Build with :meth:`build`, reopen with :meth:`load`."""

    def __init__(
        self,
        *,
        config: IndexConfig,
        chunks: list[Chunk],
        tree: Tree,
        node_vectors: np.ndarray,
        abstracts: list[str],
        sparse: SparseIndex,
        embedder_id: str,
        embedder: Embedder | None = None,
        stats: BuildStats | None = None,
    ) -> None:
        self.config = config
        self.chunks = chunks
        self.tree = tree
        self.node_vectors = node_vectors
        self.abstracts = abstracts
        self.sparse = sparse
        self.embedder_id = embedder_id
        self._embedder = embedder
        self.stats = stats or BuildStats()
        self._searcher = TreeSearcher(tree, node_vectors)
        self._doc_of_leaf = np.array([c.source.document for c in chunks], dtype=object)
        self._documents = list(dict.fromkeys(c.source.document for c in chunks))
        self._reranker: Any = None

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
        llm: Any = None,
    ) -> Index:
        """Chunk, embed, build the tree, write abstracts and BM25.

        ``corpus`` is paths (files or folders), :class:`Document` objects, or, with
        ``texts=True``, a list of strings (one document each). ``llm`` (an
        :class:`psirag.llm.LLMClient`) writes the abstracts when ``config.abstracts`` is
        ``llm-summary`` or ``llm-keywords``; its response cache makes a killed build resumable.
        """
        config = config or IndexConfig()
        say = report or (lambda msg: None)
        stats = BuildStats()
        t0 = time.perf_counter()
        if texts:
            documents = documents_from_strings(list(corpus))  # type: ignore[arg-type]
        elif isinstance(corpus, (str, Path)):
            documents = load_documents([corpus], on_bad_file=on_bad_file, warn=say)  # type: ignore[arg-type]
        elif corpus and all(isinstance(d, Document) for d in corpus):
            documents = list(corpus)  # type: ignore[arg-type]
        else:
            documents = load_documents(list(corpus), on_bad_file=on_bad_file, warn=say)  # type: ignore[arg-type]
        with _Bar(progress, "chunking", total=len(documents), unit="doc") as bar:
            chunks = make_chunks(
                bar.wrap(documents),
                chunk_tokens=config.chunk_tokens,
                split_records=config.split_records,
            )
        stats.documents = len(documents)
        stats.seconds["chunking"] = time.perf_counter() - t0
        say(f"{len(documents):,} documents -> {len(chunks):,} chunks")

        if embedder is None:
            embedder = load_embedder(config.embedder, batch_size=config.batch_size)
        texts_ = [c.text for c in chunks]
        t0 = time.perf_counter()
        embeddings = finalize_vectors(
            embedder.embed(texts_, progress=progress, desc="embedding chunks"), texts_
        )
        stats.truncated = int(getattr(embedder, "last_truncated", 0) or 0)
        stats.seconds["embedding"] = time.perf_counter() - t0
        if stats.truncated:
            say(
                f"warning: {stats.truncated:,} of {len(chunks):,} chunks are longer than the "
                f"embedder's {embedder.max_tokens} tokens and were truncated by the model"
            )

        t0 = time.perf_counter()
        n_docs = len({c.source.document for c in chunks})
        tree_steps = n_docs if config.tree_per_document else max(len(chunks) - 1, 0)
        with _Bar(progress, "abstract tree", total=tree_steps) as bar:
            if config.tree_per_document:
                doc_codes = np.unique([c.source.document for c in chunks], return_inverse=True)[1]
                sizes = np.unique(np.bincount(doc_codes)).tolist() if chunks else []
                modes = {resolve_tree_mode(config.tree_mode, size) for size in sizes}
                stats.tree_mode = "+".join(sorted(modes)) or None
                tree = build_forest(
                    embeddings,
                    doc_codes,
                    max_children=config.max_children,
                    progress=bar,
                    mode=config.tree_mode,
                    neighbors=config.tree_neighbors,
                    bucket_size=config.tree_bucket_size,
                )
            else:
                mode = resolve_tree_mode(config.tree_mode, len(chunks))
                stats.tree_mode = mode
                if mode == "knn":
                    say(
                        f"tree mode knn: {config.tree_neighbors} neighbours per chunk "
                        f"over {len(chunks):,} chunks"
                    )
                tree = build_tree(
                    embeddings,
                    max_children=config.max_children,
                    progress=bar,
                    mode=mode,
                    neighbors=config.tree_neighbors,
                    bucket_size=config.tree_bucket_size,
                )
        stats.seconds["tree"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        abstracts = cls._make_abstracts(tree, texts_, config, progress, llm, stats)
        stats.seconds["abstracts"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        node_vectors = cls._routing_vectors(tree, embeddings, abstracts, config, embedder, progress)
        stats.seconds["routing"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        sparse = SparseIndex.build(texts_, k1=config.bm25_k1, b=config.bm25_b, progress=progress)
        stats.seconds["bm25"] = time.perf_counter() - t0
        return cls(
            config=config,
            chunks=chunks,
            tree=tree,
            node_vectors=node_vectors,
            abstracts=abstracts,
            sparse=sparse,
            embedder_id=embedder.id,
            embedder=embedder,
            stats=stats,
        )

    @staticmethod
    def _make_abstracts(
        tree: Tree,
        texts: list[str],
        config: IndexConfig,
        progress: bool,
        llm: Any,
        stats: BuildStats,
    ) -> list[str]:
        n_abstract = tree.n_nodes - tree.n_leaves
        if config.abstracts == "none" or n_abstract == 0:
            return [""] * n_abstract
        if config.abstracts == "keywords":
            from psirag.abstracts.keywords import format_abstract, keyword_abstracts

            phrases = keyword_abstracts(
                texts, tree, max_phrases=config.max_keywords, progress=progress
            )
            return [format_abstract(p) for p in phrases]
        from psirag.abstracts.llm import llm_abstracts

        if llm is None:
            raise InputError(
                f"abstracts={config.abstracts!r} needs an LLM: pass llm= (an LLMClient) or, "
                "on the command line, --llm SPEC"
            )
        written, llm_stats = llm_abstracts(
            tree,
            texts,
            llm,
            kind="summary" if config.abstracts == "llm-summary" else "keywords",
            context_tokens=config.context_tokens,
            progress=progress,
            max_keywords=config.max_keywords,
        )
        stats.llm = {k: v for k, v in llm_stats.items() if k not in ("cuts",)}
        stats.llm["cut_nodes_detail"] = llm_stats.get("cuts", [])[:50]
        return written[tree.n_leaves :]

    @staticmethod
    def _routing_vectors(
        tree: Tree,
        embeddings: np.ndarray,
        abstracts: list[str],
        config: IndexConfig,
        embedder: Embedder,
        progress: bool,
    ) -> np.ndarray:
        """Leaves keep their embeddings; abstract nodes get the routing vector SPEC 1.6 asks."""
        n = tree.n_leaves
        membership = tree.leaf_membership[n:]
        mean = _normalise_rows(np.asarray(membership @ embeddings))
        if config.routing == "leaf_mean" or not abstracts:
            routing = mean
        else:
            text_vecs = embedder.embed(
                [a or " " for a in abstracts], progress=progress, desc="embedding abstracts"
            )
            if config.routing == "abstract":
                routing = text_vecs
            else:
                w = config.routing_blend
                routing = _normalise_rows((1 - w) * mean + w * text_vecs)
        return np.concatenate([embeddings, routing]).astype(np.float32)

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write the index to ``folder`` atomically (an interrupted save leaves no index)."""
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
        cls, folder: str | Path, *, embedder: Embedder | None = None, verify: bool = True
    ) -> Index:
        """Open a saved index. Arrays are memory-mapped; the embedder loads on first query."""
        reader = IndexReader(Path(folder), verify=verify)
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
            raise IndexFormatError(f"{folder}: a chunk or abstract record lacks {exc}") from exc
        if (
            node_vectors.ndim != 2
            or node_vectors.shape != (tree.n_nodes, dim)
            or len(chunks) != tree.n_leaves
            or len(abstracts) != tree.n_nodes - tree.n_leaves
        ):
            raise IndexFormatError(f"{folder}: arrays and records disagree in size; rebuild it")
        try:
            sparse = SparseIndex.load(Path(folder) / "bm25")
        except (OSError, ValueError, KeyError) as exc:
            raise IndexFormatError(f"{folder}: cannot read the BM25 index ({exc})") from exc
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
        if self._embedder is None:
            self._embedder = load_embedder(self.config.embedder, batch_size=self.config.batch_size)
            self._check_embedder(self._embedder)
        return self._embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self._check_embedder(value)
        self._embedder = value

    def _check_embedder(self, embedder: Embedder) -> None:
        if embedder.id != self.embedder_id:
            raise EmbedderMismatchError(
                f"this index was built with embedder {self.embedder_id!r} but the query embedder "
                f"is {embedder.id!r}; query vectors from another model are meaningless here. "
                f"Use the index's own embedder ({self.config.embedder!r}) or rebuild the index."
            )

    @property
    def documents(self) -> list[str]:
        return list(self._documents)

    def embed_query(self, query: str) -> np.ndarray:
        if not isinstance(query, str) or not query.strip():
            raise InputError("the query is empty; give a question or some keywords")
        return finalize_vectors(self.embedder.embed([query]), [query])[0]

    def _allowed(self, docs: Sequence[str] | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        if not docs:
            return None, None
        known = set(self._documents)
        missing = [d for d in docs if d not in known]
        if missing:
            sample = ", ".join(repr(d) for d in self._documents[:5])
            raise InputError(
                f"unknown document id(s) {missing}; this index holds {len(known):,} documents, "
                f"e.g. {sample} (see `psirag inspect`)"
            )
        leaves = np.isin(self._doc_of_leaf, list(docs))
        nodes = np.asarray(self.tree.leaf_membership @ leaves.astype(np.float32)).ravel() > 0
        return leaves, nodes

    def search(
        self,
        query: str,
        k: int | None = None,
        *,
        config: SearchConfig | None = None,
        docs: Sequence[str] | None = None,
    ) -> list[Passage]:
        """Hybrid retrieval: tree (Algorithm 2) and BM25, fused by RRF (or a reranker)."""
        config = config or SearchConfig()
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
        config = config or SearchConfig()
        vector = np.asarray(vector, dtype=np.float32).ravel()
        if vector.shape[0] != self.node_vectors.shape[1]:
            raise EmbedderMismatchError(
                f"query vector has {vector.shape[0]} dimensions, "
                f"the index {self.node_vectors.shape[1]}"
            )
        allowed_leaves, allowed_nodes = self._allowed(docs)
        lists: list[tuple[np.ndarray, np.ndarray]] = []
        if config.use_tree:
            hits = self._searcher.search(
                vector, k=config.candidates, beam=config.beam, allowed=allowed_nodes
            )
            lists.append((hits.leaves, hits.scores))
        if config.use_bm25:
            lists.append(
                self.sparse.search(query, k=config.candidates, allowed_leaves=allowed_leaves)
            )
        if config.fusion == "rerank":
            return self._rerank(query, lists, config)
        if len(lists) == 1:
            leaves, scores = lists[0]
            top = zip(leaves[: config.k].tolist(), scores.tolist(), strict=False)
            return [self.passage(i, s) for i, s in top]
        fused = rrf_fuse([ids.tolist() for ids, _ in lists], k=config.k, rrf_k=config.rrf_k)
        return [self.passage(i, s) for i, s in fused]

    def _rerank(
        self, query: str, lists: list[tuple[np.ndarray, np.ndarray]], config: SearchConfig
    ) -> list[Passage]:
        if self._reranker is None or self._reranker[0] != config.reranker:
            from psirag.retrieval.rerank import CrossEncoderReranker

            self._reranker = (config.reranker, CrossEncoderReranker(str(config.reranker)))
        union = list(dict.fromkeys(int(i) for ids, _ in lists for i in ids))
        if not union:
            return []
        scores = self._reranker[1].score(query, [self.chunks[i].text for i in union])
        order = sorted(range(len(union)), key=lambda j: (-float(scores[j]), union[j]))
        return [self.passage(union[j], float(scores[j])) for j in order[: config.k]]

    def passage(self, leaf: int, score: float) -> Passage:
        c = self.chunks[leaf]
        return Passage(id=c.id, text=c.text, score=score, source=c.source, leaf=leaf)

    def visit(
        self,
        query: str,
        *,
        docs: Sequence[str] | None = None,
        beam: int = 10,
        k: int = 10,
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
        vector = np.asarray(vector, dtype=np.float32).ravel()
        if vector.shape[0] != self.node_vectors.shape[1]:
            raise EmbedderMismatchError(
                f"query vector has {vector.shape[0]} dimensions, "
                f"the index {self.node_vectors.shape[1]}"
            )
        _, allowed_nodes = self._allowed(docs)
        hits = self._searcher.search(
            vector, k=k, beam=beam, allowed=allowed_nodes, collect_visited=True
        )
        pairs = zip(hits.visited.tolist(), hits.visited_scores.tolist(), strict=True)
        out = [self.node_hit(u, s) for u, s in pairs]
        out.sort(key=lambda h: (-h.score, h.node))
        return out

    def node_text(self, node: int) -> str:
        n = self.tree.n_leaves
        return self.chunks[node].text if node < n else self.abstracts[node - n]

    def node_hit(self, node: int, score: float) -> NodeHit:
        leaves = self.tree.leaves_under(node) if node >= self.tree.n_leaves else np.array([node])
        docs = set(self._doc_of_leaf[leaves].tolist())
        return NodeHit(
            node=node,
            layer=int(self.tree.layer[node]),
            score=score,
            text=self.node_text(node),
            order=int(leaves.min()),
            document=docs.pop() if len(docs) == 1 else None,
        )

    def source(self, leaf: int) -> Source:
        return self.chunks[leaf].source

    def __repr__(self) -> str:
        return (
            f"Index({self.tree.n_leaves:,} chunks, {self.tree.n_nodes:,} nodes, "
            f"depth {self.tree.depth}, embedder {self.embedder_id!r})"
        )
