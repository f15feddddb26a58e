"""The build pipeline as stage functions: chunk, embed, tree, abstracts, routing, sparse.

A full build (:func:`build_index_data`) runs every stage over the whole corpus. An update runs
the same stages on less: :func:`embed_chunks` on the new chunks only, and
:func:`write_abstracts` and :func:`routing_vectors` with ``nodes=`` on the inner nodes whose
leaves changed (their ancestors), so a refreshed node gets exactly what a full build would give
it over the same tree.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from psirag.config import EXACT_DENSE_LEAVES, IndexConfig
from psirag.embed import Embedder, finalize_vectors, load_embedder
from psirag.errors import InputError
from psirag.heap import give_back_freed_memory, mapped_copy
from psirag.index_data import BuildStats, IndexData, fresh_lineage
from psirag.ingest import Document, documents_from_strings, load_documents, make_chunks
from psirag.retrieval.bm25 import SparseIndex, check_indexable
from psirag.retrieval.bm25_process import CountsProcess
from psirag.retrieval.graph_process import GraphProcess
from psirag.retrieval.leaf_graph import INSTALL_HINT, LeafGraph, usearch_available
from psirag.tree import Tree, build_forest, build_tree
from psirag.tree.build import resolve_tree_mode
from psirag.types import Chunk
from psirag.vector_rows import RowStack

if TYPE_CHECKING:
    from psirag.abstracts.phrases import PhraseTable
    from psirag.llm.client import LLMClient
    from psirag.retrieval.bm25 import TermCounts
    from psirag.tree.bucket import BucketRunner

Reporter = Callable[[str], None]
Corpus = Sequence[str | Path] | Sequence[Document] | str | Path


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

    def wrap(self, items: Sequence[Any]) -> Iterator[Any]:
        for item in items:
            yield item
            if self.bar is not None:
                self.bar.update(1)


def _normalise_rows(x: np.ndarray) -> np.ndarray:
    return _normalised_with_norms(x)[0]


def _normalised_with_norms(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``x`` over their norms (float32; a zero row stays zero), and those norms
    (float32) as the division used them."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    rows = (x / np.where(norms == 0, 1, norms)).astype(np.float32)
    return rows, norms.reshape(-1).astype(np.float32)


def _quiet(message: str) -> None:
    """The default reporter: says nothing."""


class BatchBackend(Protocol):
    """Runs a build's batch work elsewhere (a Ray cluster, :mod:`psirag.ray_backend`): the same
    stages, the same results, other machines. Every method stands in for a local step."""

    def embed_texts(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Raw vectors of ``texts`` in input order, and how many the model truncated."""
        ...

    def bucket_runner(self) -> BucketRunner:
        """Builds the bucketed tree mode's per-bucket trees (in job order)."""
        ...

    def llm_client(self, llm: LLMClient) -> LLMClient:
        """``llm`` with the calls that miss its cache sent to the workers."""
        ...


# ------------------------------------------------------------------ stages


def load_corpus(
    corpus: Corpus,
    *,
    texts: bool = False,
    on_bad_file: str = "fail",
    report: Reporter | None = None,
) -> list[Document]:
    """Paths (files or folders), :class:`Document` objects, or with ``texts=True`` strings (one
    document each), as documents."""
    say = report or _quiet
    if texts:
        return documents_from_strings(list(corpus))  # type: ignore[arg-type]
    if isinstance(corpus, (str, Path)):
        return load_documents([corpus], on_bad_file=on_bad_file, warn=say)  # type: ignore[arg-type]
    if corpus and all(isinstance(d, Document) for d in corpus):
        return list(corpus)  # type: ignore[arg-type]
    return load_documents(list(corpus), on_bad_file=on_bad_file, warn=say)  # type: ignore[arg-type]


def chunk_documents(
    documents: Sequence[Document], config: IndexConfig, *, progress: bool = False
) -> list[Chunk]:
    """Documents cut into ~``config.chunk_tokens``-token leaves, never inside a sentence."""
    with _Bar(progress, "chunking", total=len(documents), unit="doc") as bar:
        return make_chunks(
            bar.wrap(documents),
            chunk_tokens=config.chunk_tokens,
            split_records=config.split_records,
        )


@dataclass(frozen=True)
class Embedded:
    vectors: np.ndarray
    """One unit float32 row per chunk."""
    truncated: int = 0
    """Chunks longer than the embedder reads (cut by the model)."""


def embed_chunks(
    chunks: Sequence[Chunk],
    embedder: Embedder,
    *,
    progress: bool = False,
    batch: BatchBackend | None = None,
) -> Embedded:
    """The leaf embeddings of ``chunks`` (all of a corpus, or just the ones an update adds);
    on ``batch``'s workers when given (they load the embedder from its spec)."""
    texts = [c.text for c in chunks]
    if batch is not None:
        raw, truncated = batch.embed_texts(texts)
        return Embedded(finalize_vectors(raw, texts), truncated)
    vectors = finalize_vectors(
        embedder.embed(texts, progress=progress, desc="embedding chunks"), texts
    )
    return Embedded(vectors, int(getattr(embedder, "last_truncated", 0) or 0))


@dataclass(frozen=True)
class BuiltTree:
    tree: Tree
    mode: str | None
    """The tree mode used (``exact``/``knn``; ``exact+knn`` for a mixed forest)."""


def build_chunk_tree(
    vectors: np.ndarray,
    chunks: Sequence[Chunk],
    config: IndexConfig,
    *,
    progress: bool = False,
    report: Reporter | None = None,
    bucket_runner: BucketRunner | None = None,
) -> BuiltTree:
    """The abstract tree over the leaf embeddings (one per document with
    ``config.tree_per_document``); ``bucket_runner`` builds the bucketed mode's buckets."""
    say = report or _quiet
    n_docs = len({c.source.document for c in chunks})
    tree_steps = n_docs if config.tree_per_document else max(len(chunks) - 1, 0)
    with _Bar(progress, "abstract tree", total=tree_steps) as bar:
        if config.tree_per_document:
            doc_codes = np.unique([c.source.document for c in chunks], return_inverse=True)[1]
            sizes = np.unique(np.bincount(doc_codes)).tolist() if chunks else []
            modes = {resolve_tree_mode(config.tree_mode, size) for size in sizes}
            tree = build_forest(
                vectors,
                doc_codes,
                max_children=config.max_children,
                progress=bar,
                mode=config.tree_mode,
                neighbors=config.tree_neighbors,
                bucket_size=config.tree_bucket_size,
                bucket_runner=bucket_runner,
            )
            return BuiltTree(tree, "+".join(sorted(modes)) or None)
        mode = resolve_tree_mode(config.tree_mode, len(chunks))
        if mode == "knn":
            say(
                f"tree mode knn: {config.tree_neighbors} neighbours per chunk "
                f"over {len(chunks):,} chunks"
            )
        tree = build_tree(
            vectors,
            max_children=config.max_children,
            progress=bar,
            mode=mode,
            neighbors=config.tree_neighbors,
            bucket_size=config.tree_bucket_size,
            bucket_runner=bucket_runner,
        )
        return BuiltTree(tree, mode)


@dataclass(frozen=True)
class Abstracts:
    texts: list[str]
    """One abstract per node asked for: every inner node in id order, or ``nodes`` in order."""
    llm: dict[str, Any] = field(default_factory=dict)
    """LLM abstraction counts (calls paid and cached, tokens, cuts); empty without an LLM."""
    table: PhraseTable | None = None
    """Keyword abstracts: the corpus's phrase table (kept in the index for updates)."""


def write_abstracts(
    tree: Tree,
    leaf_texts: Sequence[str],
    config: IndexConfig,
    *,
    nodes: Sequence[int] | None = None,
    current: Sequence[str] | None = None,
    llm: LLMClient | None = None,
    progress: bool = False,
    table: PhraseTable | None = None,
) -> Abstracts:
    """The abstract text of every inner node (``nodes=None``) or of the inner ``nodes`` given,
    as ``config.abstracts`` asks. LLM abstracts read a child outside ``nodes`` from ``current``
    (one per inner node of ``tree``, as :attr:`IndexData.abstracts`). Keyword abstracts read
    the phrase ``table`` of ``leaf_texts`` when given (an update keeps one), else build it."""
    n = tree.n_leaves
    count = tree.n_nodes - n if nodes is None else len(nodes)
    if config.abstracts == "none" or count == 0:
        return Abstracts([""] * count)
    if config.abstracts == "keywords":
        from psirag.abstracts.keywords import format_abstract, keyword_abstracts
        from psirag.abstracts.phrases import PhraseTable

        if table is None:
            table = PhraseTable.build(leaf_texts)
        if nodes is None:
            table.spill_idle()  # a big build: what scoring does not read, out of memory
            table.phrases()  # the layout, then the counts only it read, out of memory too
            table.spill_laid_out()
        phrases = keyword_abstracts(
            leaf_texts,
            tree,
            max_phrases=config.max_keywords,
            progress=progress,
            nodes=nodes,
            table=table,
        )
        if nodes is None:
            table.release_big_layout()  # a big build's BM25 stage and save do not read it
        return Abstracts([format_abstract(p) for p in phrases], table=table)
    from psirag.abstracts.llm import llm_abstracts

    if llm is None:
        raise InputError(
            f"abstracts={config.abstracts!r} needs an LLM: pass llm= (an LLMClient) or, "
            "on the command line, --llm SPEC"
        )
    if nodes is not None and current is None:
        raise InputError("rewriting some LLM abstracts needs the current ones (current=)")
    written, llm_stats = llm_abstracts(
        tree,
        leaf_texts,
        llm,
        kind="summary" if config.abstracts == "llm-summary" else "keywords",
        context_tokens=config.context_tokens,
        progress=progress,
        max_keywords=config.max_keywords,
        nodes=nodes,
        current=None if current is None else [""] * n + list(current),
    )
    stats = {k: v for k, v in llm_stats.items() if k not in ("cuts",)}
    stats["cut_nodes_detail"] = llm_stats.get("cuts", [])[:50]
    texts = written[n:] if nodes is None else [written[int(u)] for u in nodes]
    return Abstracts(texts, stats)


def routing_vectors(
    tree: Tree,
    leaf_vectors: np.ndarray,
    abstracts: Sequence[str],
    config: IndexConfig,
    embedder: Embedder | None,
    *,
    nodes: Sequence[int] | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Leaves keep their embeddings; inner nodes get the routing vector SPEC 1.6 asks
    (``config.routing``). ``nodes=None``: every node's vector (leaves first, the index's
    ``node_vectors``); else one row per inner node in ``nodes``. ``abstracts`` holds one text per
    inner node of ``tree`` (read only for abstract-text routing)."""
    return routing_rows(
        tree, leaf_vectors, abstracts, config, embedder, nodes=nodes, progress=progress
    )[0]


def routing_rows(
    tree: Tree,
    leaf_vectors: np.ndarray,
    abstracts: Sequence[str],
    config: IndexConfig,
    embedder: Embedder | None,
    *,
    nodes: Sequence[int] | None = None,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`routing_vectors`, and with ``routing="leaf_mean"`` each inner node's (``nodes``')
    sum norm, float32 (:attr:`psirag.index_data.IndexData.inner_norms`: what lets a removal's
    re-home rule out candidates, :class:`psirag.tree.update.RehomeHint`): the norm of the leaf
    sum its vector was divided by (NaN where the sum is 0). The bound counts on leaves no
    longer than :data:`~psirag.tree.update.LEAF_NORM_MAX`: the caller keeps norms only for an
    index whose leaves it checked (:func:`long_leaves`). Other routings: None (their vectors
    are not leaf means)."""
    n = tree.n_leaves
    targets = None if nodes is None else np.asarray(nodes, dtype=np.int64).reshape(-1)
    if targets is None:
        mean, norms = _normalised_with_norms(np.asarray(tree.leaf_membership[n:] @ leaf_vectors))
    else:
        mean, norms = _normalised_with_norms(_leaf_sums(tree, targets, leaf_vectors))
    texts: list[str] = []  # read for text routing only (a loaded index decodes each one read)
    if config.routing != "leaf_mean":
        texts = list(abstracts) if targets is None else [abstracts[int(u) - n] for u in targets]
    sum_norms: np.ndarray | None = None
    if config.routing == "leaf_mean":
        sum_norms = np.where(norms > 0, norms, np.float32(np.nan)).astype(np.float32)
    if config.routing == "leaf_mean" or not texts:
        routing = mean
    else:
        if embedder is None:
            raise InputError(f"routing={config.routing!r} embeds the abstracts: pass an embedder")
        text_vecs = embedder.embed(
            [a or " " for a in texts], progress=progress, desc="embedding abstracts"
        )
        if config.routing == "abstract":
            routing = text_vecs
        else:
            w = config.routing_blend
            routing = _normalise_rows((1 - w) * mean + w * text_vecs)
    if targets is not None:
        rows = np.asarray(routing, dtype=np.float32).reshape(targets.size, leaf_vectors.shape[1])
        return rows, sum_norms
    return np.concatenate([leaf_vectors, routing]).astype(np.float32), sum_norms


def long_leaves(leaf_vectors: np.ndarray) -> bool:
    """Whether a row of ``leaf_vectors`` is longer than
    :data:`~psirag.tree.update.LEAF_NORM_MAX` (embedders give unit rows: none is). An index
    keeps sum norms only while none of its leaves is (a build and a compaction check every
    leaf, an add its new ones), so :class:`~psirag.tree.update.RehomeHint`'s bound holds."""
    from psirag.tree.update import LEAF_NORM_MAX

    for lo in range(0, leaf_vectors.shape[0], 1 << 16):
        block = np.asarray(leaf_vectors[lo : lo + (1 << 16)], dtype=np.float64)
        if bool((np.sqrt((block * block).sum(axis=1)) > LEAF_NORM_MAX).any()):
            return True
    return False


_SUMMED_IN_NUMPY = 1 << 16
"""Leaves (all target rows together) up to which :func:`_leaf_sums` adds them up itself."""


def _leaf_sums(tree: Tree, targets: np.ndarray, leaf_vectors: np.ndarray) -> np.ndarray:
    """``membership_of(targets) @ leaf_vectors``, the same floats: each row's leaves added in
    ascending order one after another (an accumulate, as scipy's sparse product does), for an
    update's few nodes without importing scipy; a larger sum is scipy's product."""
    ptr, leaves = tree.membership_rows(targets)
    if leaves.size > _SUMMED_IN_NUMPY:
        rows = tree.membership_of(targets)
        if isinstance(leaf_vectors, RowStack):  # the rows it reads, not every leaf joined
            import scipy.sparse as sp

            cols = np.unique(rows.indices)  # columns renumbered in order: the same sums
            rows = sp.csr_matrix(
                (rows.data, np.searchsorted(cols, rows.indices), rows.indptr),
                shape=(rows.shape[0], cols.size),
            )
            return np.asarray(rows @ leaf_vectors[cols])
        return np.asarray(rows @ leaf_vectors)
    dtype = np.result_type(np.float32, leaf_vectors.dtype)
    out = np.zeros((targets.size, leaf_vectors.shape[1]), dtype=dtype)
    for i in range(targets.size):
        rows = leaves[ptr[i] : ptr[i + 1]]
        if rows.size:
            out[i] = np.cumsum(np.asarray(leaf_vectors[rows], dtype=dtype), axis=0)[-1]
    out += 0.0  # scipy's sum starts at +0: never -0.0
    return out


def sparse_index(
    leaf_texts: Sequence[str],
    config: IndexConfig,
    *,
    progress: bool = False,
    counts: TermCounts | None = None,
) -> SparseIndex:
    """BM25 over the leaf texts (SPEC 1.7), kept as counts and scored at query time
    (:class:`~psirag.retrieval.bm25.Postings`); ``counts``: the leaves' term counts when known,
    so they are not tokenised again."""
    if counts is not None:
        return SparseIndex.from_counts(counts, leaf_texts, k1=config.bm25_k1, b=config.bm25_b)
    return SparseIndex.build(leaf_texts, k1=config.bm25_k1, b=config.bm25_b, progress=progress)


# ------------------------------------------------------------------ the full build


def build_index_data(
    corpus: Corpus,
    config: IndexConfig | None = None,
    *,
    embedder: Embedder | None = None,
    progress: bool = False,
    report: Reporter | None = None,
    on_bad_file: str = "fail",
    texts: bool = False,
    llm: LLMClient | None = None,
    batch: BatchBackend | None = None,
) -> tuple[IndexData, Embedder]:
    """Every stage over the whole corpus, each timed; returns the data and the embedder used
    (loaded from ``config.embedder`` when none is given). ``batch`` runs the leaf embedding, the
    bucket trees and the LLM calls on its workers (a Ray cluster); the result is the same."""
    config = config or IndexConfig()
    say = report or _quiet
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    documents = load_corpus(corpus, texts=texts, on_bad_file=on_bad_file, report=say)
    chunks = chunk_documents(documents, config, progress=progress)
    check_indexable([c.text for c in chunks])  # before the embedder loads, not after
    seconds["chunking"] = time.perf_counter() - t0
    say(f"{len(documents):,} documents -> {len(chunks):,} chunks")

    if embedder is None:
        embedder = load_embedder(config.embedder, batch_size=config.batch_size)
    t0 = time.perf_counter()
    embedded = embed_chunks(chunks, embedder, progress=progress, batch=batch)
    seconds["embedding"] = time.perf_counter() - t0
    give_back_freed_memory()
    if embedded.truncated:
        say(
            f"warning: {embedded.truncated:,} of {len(chunks):,} chunks are longer than the "
            f"embedder's {embedder.max_tokens} tokens and were truncated by the model"
        )

    truncated, leaf_vectors = embedded.truncated, embedded.vectors
    del embedded
    # the HNSW graph reads only the leaf vectors and the BM25 counts only the leaf texts:
    # made beside the tree, the abstracts and the routing, started as soon as their inputs
    # exist (the tree's serial parts leave a core idle)
    graph_build = GraphBuild(leaf_vectors, report=say)
    leaf_texts = [c.text for c in chunks]
    counting = sparse_counts_in_background(leaf_texts, report=say)
    try:
        t0 = time.perf_counter()
        built = build_chunk_tree(
            leaf_vectors,
            chunks,
            config,
            progress=progress,
            report=say,
            bucket_runner=batch.bucket_runner() if batch is not None else None,
        )
        seconds["tree"] = time.perf_counter() - t0
        if len(chunks) >= SPILL_VECTORS_MIN_LEAVES:
            # the abstracts (the build's peak) do not read them: a mapped file until routing
            leaf_vectors = graph_build.use_vectors(mapped_copy(leaf_vectors))
        give_back_freed_memory()

        t0 = time.perf_counter()
        if batch is not None and llm is not None:
            llm = batch.llm_client(llm)
        abstracts = write_abstracts(built.tree, leaf_texts, config, llm=llm, progress=progress)
        seconds["abstracts"] = time.perf_counter() - t0
        give_back_freed_memory()

        t0 = time.perf_counter()
        node_vectors, inner_norms = routing_rows(
            built.tree, leaf_vectors, abstracts.texts, config, embedder, progress=progress
        )
        if inner_norms is not None and long_leaves(node_vectors[: built.tree.n_leaves]):
            inner_norms = None
        del leaf_vectors
        seconds["routing"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        counts = None
        if counting is not None:
            job, counting = counting, None
            try:
                counts = job.result()
            except (OSError, RuntimeError, ValueError) as exc:
                say(f"warning: {exc}; counting the BM25 terms here")
        sparse = sparse_index(leaf_texts, config, progress=progress, counts=counts)
        seconds["bm25"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        graph, thread_seconds = graph_build.result()
    except BaseException:
        graph_build.close()
        if counting is not None:
            counting.close()
        raise
    if graph is not None:
        seconds["hnsw"] = time.perf_counter() - t0
        if thread_seconds is not None:
            seconds["hnsw_thread"] = thread_seconds
    stats = BuildStats(
        seconds=seconds,
        truncated=truncated,
        documents=len(documents),
        llm=abstracts.llm,
        tree_mode=built.mode,
    )
    data = IndexData(
        config=config,
        chunks=tuple(chunks),
        tree=built.tree,
        node_vectors=node_vectors,
        abstracts=tuple(abstracts.texts),
        sparse=sparse,
        embedder_id=embedder.id,
        stats=stats,
        sources=document_sources(documents, chunks),
        lineage=fresh_lineage(len(chunks), (d.id for d in documents)),
        phrase_table=abstracts.table,
        leaf_graph=graph,
        inner_norms=inner_norms,
    )
    return data, embedder


GRAPH_MIN_LEAVES = EXACT_DENSE_LEAVES
"""An index gets an HNSW graph of its leaves when it has more leaves than this: where the
default stops ranking its dense list by an exact scan."""


def leaf_graph(leaf_vectors: np.ndarray, *, report: Reporter | None = None) -> LeafGraph | None:
    """The HNSW graph an index of these leaves gets: one when it has more than
    :data:`GRAPH_MIN_LEAVES` leaves and usearch is installed; None otherwise (below that size
    the exact scan ranks; without usearch the tree search does, and ``report`` says how to get
    the graph)."""
    n = int(leaf_vectors.shape[0])
    if n <= GRAPH_MIN_LEAVES:
        return None
    if not usearch_available():
        (report or _quiet)(
            f"note: {n:,} leaves are past the exact scan's {GRAPH_MIN_LEAVES:,}, so the dense "
            f"list is the tree search; {INSTALL_HINT} builds an HNSW graph instead, faster at "
            "equal recall (BENCHMARKS.md, 'Tree against HNSW')"
        )
        return None
    return LeafGraph.build(leaf_vectors)


def graph_in_background() -> bool:
    """Whether a build makes its leaf graph beside the other stages: with two or more cores
    (the abstracts, routing and BM25 stages are mostly one core of Python).
    ``PSIRAG_GRAPH_THREAD=0`` turns it off."""
    if os.environ.get("PSIRAG_GRAPH_THREAD", "1") == "0":
        return False
    return (os.cpu_count() or 1) >= 2


GRAPH_PROCESS = True
"""A background graph is built in a child process (:mod:`psirag.retrieval.graph_process`):
usearch's insertion holds the GIL for much of its work, so on a thread it and the Python
stages beside it slow each other down. False (or ``PSIRAG_GRAPH_PROCESS=0``): on a thread."""


def graph_in_process() -> bool:
    return GRAPH_PROCESS and os.environ.get("PSIRAG_GRAPH_PROCESS", "1") != "0"


SPARSE_PROCESS_MIN_LEAVES = 50_000
"""A build of at least this many chunks counts its BM25 terms in a child process
(:mod:`psirag.retrieval.bm25_process`) beside the keyword abstracts, when it has a background
(:func:`graph_in_background`); a smaller one counts them in line (a second or two)."""


def sparse_counts_in_background(
    leaf_texts: Sequence[str], *, report: Reporter | None = None
) -> CountsProcess | None:
    """A child process counting the BM25 terms of ``leaf_texts`` (None: they are counted in
    line, at the BM25 stage). ``PSIRAG_BM25_PROCESS=0`` turns it off."""
    if (
        len(leaf_texts) < SPARSE_PROCESS_MIN_LEAVES
        or not graph_in_background()
        or os.environ.get("PSIRAG_BM25_PROCESS", "1") == "0"
    ):
        return None
    try:
        return CountsProcess(leaf_texts)
    except OSError as exc:
        (report or _quiet)(f"note: the BM25 terms are counted in line ({exc})")
        return None


SPILL_VECTORS_MIN_LEAVES = 500_000
"""A build of at least this many chunks keeps its leaf vectors in a mapped temporary file
(:func:`~psirag.heap.mapped_copy`) from the tree to the routing stage: the keyword abstracts,
the build's memory peak, do not read them (64-d: 244 MiB at 1M chunks)."""


class GraphBuild:
    """The leaf graph of a build (:func:`leaf_graph`), made in the background
    (:func:`graph_in_background`) with one usearch thread until :meth:`result` waits for it,
    then with every core (the rest of its leaves): in a child process
    (:func:`graph_in_process`), else on a thread; without a background, when :meth:`result`
    is asked. The graph is the same kind either way (usearch's insertion order is the keys'
    order; a graph built with several threads is not deterministic anyway)."""

    def __init__(self, leaf_vectors: np.ndarray, *, report: Reporter | None = None) -> None:
        self._vectors: np.ndarray | None = leaf_vectors
        self._report = report
        self._graph: LeafGraph | None = None
        self._error: BaseException | None = None
        self._seconds: float | None = None
        self._thread: threading.Thread | None = None
        self._process: GraphProcess | None = None
        self._waited = threading.Event()
        """Set by :meth:`result`: the other stages are done, every core may insert."""
        n = int(leaf_vectors.shape[0])
        if n > GRAPH_MIN_LEAVES and graph_in_background() and usearch_available():
            if graph_in_process():
                try:
                    self._process = GraphProcess(leaf_vectors)
                    return
                except OSError as exc:  # no temporary folder, no process: a thread instead
                    (report or _quiet)(f"note: the HNSW graph is built on a thread ({exc})")
            self._thread = threading.Thread(target=self._run, name="psirag-hnsw", daemon=True)
            self._thread.start()

    def use_vectors(self, leaf_vectors: np.ndarray) -> np.ndarray:
        """Read ``leaf_vectors`` (the same values: a mapped copy) where the graph is built
        here after all; returns them."""
        if self._vectors is not None and self._thread is None:
            self._vectors = leaf_vectors
        return leaf_vectors

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            assert self._vectors is not None
            self._graph = LeafGraph.build(self._vectors, threads=1, widen=self._threads_now)
        except BaseException as exc:  # raised again by result(), on the caller's thread
            self._error = exc
        self._seconds = time.perf_counter() - t0

    def _threads_now(self) -> int:
        """One usearch thread while the other stages run beside the graph (their core), every
        core once the build waits for it."""
        return 0 if self._waited.is_set() else 1

    def close(self) -> None:
        """Stop a background child process (a build that failed before asking the result)."""
        if self._process is not None:
            self._process.close()
            self._process = None

    def done(self) -> bool:
        """Whether a background graph is finished (True when there is none)."""
        if self._process is not None:
            return self._process.done()
        return self._thread is None or not self._thread.is_alive()

    def result(self) -> tuple[LeafGraph | None, float | None]:
        """The graph (None where :func:`leaf_graph` gives none) and the seconds the background
        build took (None when it was built here). A child process that failed is said
        (``report``) and the graph is built here instead."""
        if self._process is not None:
            process, self._process = self._process, None
            try:
                graph, seconds = process.result()
            except (OSError, RuntimeError, ValueError) as exc:
                (self._report or _quiet)(f"warning: {exc}; building the HNSW graph here")
            else:
                self._vectors = None
                return graph, seconds
        if self._thread is None:
            vectors, self._vectors = self._vectors, None
            assert vectors is not None
            return leaf_graph(vectors, report=self._report), None
        self._waited.set()
        self._thread.join()
        self._vectors = None
        if self._error is not None:
            raise self._error
        return self._graph, self._seconds


def document_sources(
    documents: Sequence[Document], chunks: Sequence[Chunk]
) -> dict[str, dict[str, Any]]:
    """Where each document read from a file came from (for ``psirag sync``), in document
    order; only documents that gave ``chunks`` (an index saves its sources in this order)."""
    made = {c.source.document for c in chunks}
    return {
        d.id: {"path": d.path, "sha256": d.sha256}
        for d in documents
        if d.path is not None and d.id in made
    }


__all__ = [
    "GRAPH_MIN_LEAVES",
    "SPARSE_PROCESS_MIN_LEAVES",
    "Abstracts",
    "BatchBackend",
    "BuiltTree",
    "Embedded",
    "GraphBuild",
    "Reporter",
    "build_chunk_tree",
    "build_index_data",
    "chunk_documents",
    "document_sources",
    "embed_chunks",
    "fresh_lineage",
    "leaf_graph",
    "load_corpus",
    "routing_vectors",
    "sparse_index",
    "write_abstracts",
]
