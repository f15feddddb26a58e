"""The index's on-disk format: which file of a generation holds each :class:`IndexData` field,
in which dtype, since which format version, and the one place that saves and loads them.

:mod:`psirag.storage` knows generations, pointers, locks and checksums but not what an index
holds; :class:`psirag.index.Index` is a facade and knows no file names. A change to the format
touches this module (and its tests) only. The BM25 folder's and the phrase table's inner files
belong to :class:`~psirag.retrieval.bm25.SparseIndex` and
:class:`~psirag.abstracts.phrases.PhraseTable`, which save and read them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from psirag._version import __version__
from psirag.config import IndexConfig
from psirag.errors import IndexFormatError
from psirag.index_data import BuildStats, IndexData, SavedOrigin, fresh_lineage
from psirag.storage import FORMAT_VERSION, IndexReader, IndexWriter, _resolve
from psirag.tree import Tree
from psirag.types import Chunk, source_from_dict

if TYPE_CHECKING:
    from psirag.abstracts.phrases import PhraseTable

FileKind = Literal["npy", "jsonl", "json", "folder", "manifest"]


@dataclass(frozen=True)
class FormatFile:
    """One file (or folder) of a generation and the :class:`IndexData` field it holds."""

    name: str
    """Its path inside a generation folder (``manifest`` entries: a key of the manifest)."""
    field: str
    """The :class:`IndexData` field (``tree.parent``: a part of one)."""
    kind: FileKind
    dtype: str | None
    """The dtype an array is saved in (None: text)."""
    since: int
    """The first format version that has it."""
    required: bool
    """False: an index saved before it loads without it (and gets it from its next save)."""


PHRASES_DIR = "keywords"
DRIFT_FILE = "abstract_drift.npy"
"""Per inner node, the leaves changed under it since its keyword abstract was scored (see
:class:`psirag.living.AbstractDriftRule`); written only when some abstract is waiting."""
"""The keyword phrase table's folder (absent in indexes saved before it, or without keyword
abstracts: such an index loads as before and its first update builds the table once)."""

NODE_VECTORS = FormatFile("node_vectors.npy", "node_vectors", "npy", "float32", 1, True)
PARENT = FormatFile("parent.npy", "tree.parent", "npy", "int64", 1, True)
LAYER = FormatFile("layer.npy", "tree.layer", "npy", "int32", 1, True)
CHUNKS = FormatFile("chunks.jsonl", "chunks", "jsonl", None, 1, True)
"""One line per leaf: ``{"id", **source, "text"}``; a save on top of the generation the chunks
came from copies the lines of the chunks still there."""
ABSTRACTS = FormatFile("abstracts.jsonl", "abstracts", "jsonl", None, 1, True)
"""One line per inner node: ``{"node", "text"}``."""
DOCUMENTS = FormatFile("documents.jsonl", "sources", "jsonl", None, 2, False)
"""One line per document read from a file: ``{"id", "path", "sha256"}``."""
BM25 = FormatFile("bm25", "sparse", "folder", None, 1, True)
"""bm25s's files, ``first_copy.npy`` and (since the living index) the term counts."""
PHRASE_WORDS = FormatFile(f"{PHRASES_DIR}/words.json", "phrase_table", "json", None, 2, False)
"""With ``keywords/<array>.npy`` for each of :data:`psirag.abstracts.phrases.ARRAYS`."""
PHRASE_STEMS = FormatFile(f"{PHRASES_DIR}/stems.json", "phrase_table", "json", None, 2, False)
"""With ``keywords/<array>.npy`` for each of :data:`psirag.abstracts.phrases.VOCAB_ARRAYS`."""
HNSW = FormatFile("hnsw", "leaf_graph", "folder", None, 2, False)
"""The leaves' HNSW graph (usearch's own file ``graph.usearch`` and ``keys.npy``, see
:mod:`psirag.retrieval.leaf_graph`); only in indexes past the exact scan's size built or updated
with ``psirag[hnsw]``. Without usearch an index loads without it."""
MANIFEST_FIELDS = (
    FormatFile("config", "config", "manifest", None, 1, True),
    FormatFile("embedder.id", "embedder_id", "manifest", None, 1, True),
    FormatFile("build_seconds", "stats.seconds", "manifest", None, 1, False),
    FormatFile("tree_mode_used", "stats.tree_mode", "manifest", None, 2, False),
    FormatFile("counts", "stats.documents, stats.truncated", "manifest", None, 1, False),
    FormatFile("lineage", "lineage", "manifest", None, 2, False),
)
"""Fields kept in the generation's manifest body (see :func:`manifest_body`)."""

FILES: tuple[FormatFile, ...] = (
    NODE_VECTORS,
    PARENT,
    LAYER,
    CHUNKS,
    ABSTRACTS,
    DOCUMENTS,
    BM25,
    PHRASE_WORDS,
    PHRASE_STEMS,
    HNSW,
)
"""Every file of a generation besides its manifest, in the order a save writes them."""

SAVES_VERSION = FORMAT_VERSION
"""The format version :func:`save_index_data` writes (storage reads it and format 1)."""


# ---------------------------------------------------------------------------- saving
def save_index_data(writer: IndexWriter, data: IndexData) -> int:
    """Every file of ``data`` into ``writer``'s new generation, then publish it (the
    generation number). A file whose bytes equal the base generation's becomes a hard link to
    it, so unchanged data is stored once across generations."""
    writer.save_array(NODE_VECTORS.name, data.node_vectors)
    writer.save_array(PARENT.name, data.tree.parent)
    writer.save_array(LAYER.name, data.tree.layer)
    if data.abstract_drift is not None:  # absent: every abstract is current
        writer.save_array(DRIFT_FILE, data.abstract_drift)
    chunks = data.chunks
    kept = _kept_chunk_lines(writer, data)
    writer.save_jsonl(
        CHUNKS.name,
        ({"id": c.id, **c.source.to_dict(), "text": c.text} for c in chunks[kept:]),
        base_lines=kept,
    )
    n = data.tree.n_leaves
    writer.save_jsonl(
        ABSTRACTS.name,
        ({"node": n + i, "text": a} for i, a in enumerate(data.abstracts)),
    )
    sources = data.sources
    writer.save_jsonl(
        DOCUMENTS.name,
        ({"id": d, **sources[d]} for d in data.documents if d in sources),
    )
    data.sparse.save(writer.path(BM25.name))
    if data.phrase_table is not None:
        _save_phrase_table(writer, data.phrase_table)
    if data.leaf_graph is not None:
        data.leaf_graph.save(writer.path(HNSW.name))
    _link_unchanged(writer)
    return writer.commit(manifest_body(data))


def _save_phrase_table(writer: IndexWriter, table: PhraseTable) -> None:
    for name, array in table.arrays().items():
        writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)
    _write_json_list(writer.path(PHRASE_WORDS.name), table.words)
    vocab = table.vocab()
    if vocab is not None:
        stems, vocab_arrays = vocab
        for name, array in vocab_arrays.items():
            writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)
        _write_json_list(writer.path(PHRASE_STEMS.name), stems)
        for name, array in (table.derived_arrays() or {}).items():
            writer.save_array(f"{PHRASES_DIR}/{name}.npy", array)


def _write_json_list(path: Path, words: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(words, ensure_ascii=False))  # dumps: the C encoder


def manifest_body(data: IndexData) -> dict[str, Any]:
    """The manifest body: what a person or a program needs to know about the index, and the
    fields of :data:`MANIFEST_FIELDS` that :func:`load_index_data` reads back."""
    tree = data.tree
    stats = data.stats
    return {
        "psirag_version": __version__,
        "config": data.config.to_dict(),
        "embedder": {
            "spec": data.config.embedder,
            "id": data.embedder_id,
            "dim": int(data.node_vectors.shape[1]),
        },
        "counts": {
            "documents": len(data.documents),
            "chunks": tree.n_leaves,
            "nodes": tree.n_nodes,
            "trees": int(tree.roots.size),
            "depth": tree.depth,
            "nodes_per_layer": tree.layer_sizes(),
            "truncated_chunks": stats.truncated,
        },
        "build_seconds": {k: round(v, 3) for k, v in stats.seconds.items()},
        "tree_mode_used": stats.tree_mode,
        "llm_abstracts": stats.llm or None,
        "lineage": dict(data.lineage) or fresh_lineage(tree.n_leaves),
    }


def _kept_chunk_lines(writer: IndexWriter, data: IndexData) -> int:
    """How many leading lines of the base generation's chunks.jsonl this save can copy: the
    chunks still there, in order, since ``data`` was loaded from that generation."""
    origin = data.origin
    base = writer.base
    if origin is None or base is None or base.legacy or base.generation != origin.generation:
        return 0
    if str(_resolve(base.root)) != origin.folder or CHUNKS.name not in base.files:
        return 0
    return origin.prefix(data.chunks)


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


# ---------------------------------------------------------------------------- loading
def load_index_data(reader: IndexReader, folder: str | Path | None = None) -> IndexData:
    """The :class:`IndexData` of one open generation (arrays memory-mapped). ``folder``: the
    name errors give (the reader's folder by default)."""
    where = reader.root if folder is None else folder
    m = reader.manifest
    try:
        config = IndexConfig.from_dict(m["config"])
        embedder_id = m["embedder"]["id"]
        dim = int(m["embedder"]["dim"])
    except (KeyError, TypeError, ValueError) as exc:
        raise IndexFormatError(f"{where}: manifest field {exc} is missing or invalid") from exc
    node_vectors = reader.load_array(NODE_VECTORS.name)
    tree = Tree(
        parent=np.asarray(reader.load_array(PARENT.name, mmap=False), dtype=np.int64),
        layer=np.asarray(reader.load_array(LAYER.name, mmap=False), dtype=np.int32),
    )
    try:
        chunks = [
            Chunk(row["id"], row["text"], source_from_dict(row))
            for row in reader.iter_jsonl(CHUNKS.name)
        ]
        abstracts = [row["text"] for row in reader.iter_jsonl(ABSTRACTS.name)]
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, IndexFormatError):
            raise
        raise IndexFormatError(f"{where}: a chunk or abstract record lacks {exc}") from exc
    if (
        node_vectors.ndim != 2
        or node_vectors.shape != (tree.n_nodes, dim)
        or len(chunks) != tree.n_leaves
        or len(abstracts) != tree.n_nodes - tree.n_leaves
    ):
        raise IndexFormatError(f"{where}: arrays and records disagree in size; rebuild it")
    from psirag.retrieval.bm25 import SparseIndex

    try:
        sparse = SparseIndex.load(reader.path(BM25.name))
    except (OSError, ValueError, KeyError) as exc:
        from psirag.oserrors import of_the_machine

        if isinstance(exc, IndexFormatError) or of_the_machine(exc):
            raise
        raise IndexFormatError(f"{where}: cannot read the BM25 index ({exc})") from exc
    bm25_docs = sparse.n_docs
    if sparse.first_copy.size != len(chunks) or bm25_docs != len(chunks):
        raise IndexFormatError(
            f"{where}: the BM25 index holds {bm25_docs} documents but the index has "
            f"{len(chunks)} chunks; the index is corrupted or mixed, rebuild it"
        )
    phrase_table = _load_phrase_table(reader, where, len(chunks))
    drift = None
    if DRIFT_FILE in reader.files:
        drift = np.asarray(reader.load_array(DRIFT_FILE, mmap=False), dtype=np.int64)
        if drift.shape != (len(abstracts),) or (drift.size and int(drift.min()) < 0):
            raise IndexFormatError(
                f"{where}: {DRIFT_FILE} holds {drift.shape} counts for {len(abstracts)} "
                "abstracts; the index is corrupted or mixed, rebuild it"
            )
    graph = None
    if any(name.startswith(HNSW.name + "/") for name in reader.files):
        from psirag.retrieval.leaf_graph import LeafGraph

        graph = LeafGraph.open(reader.path(HNSW.name), len(chunks), dim)
    sources: dict[str, dict[str, Any]] = {}
    if DOCUMENTS.name in reader.files:
        try:
            for row in reader.iter_jsonl(DOCUMENTS.name):
                sources[str(row["id"])] = {"path": row.get("path"), "sha256": row.get("sha256")}
        except (KeyError, TypeError) as exc:
            raise IndexFormatError(f"{where}: a documents.jsonl record lacks {exc}") from exc
    lineage = m.get("lineage")
    if not isinstance(lineage, dict):
        lineage = fresh_lineage(len(chunks))
    counts = m.get("counts", {})
    return IndexData(
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
            documents=int(counts.get("documents", 0) or 0),
            truncated=int(counts.get("truncated_chunks", 0) or 0),
        ),
        sources=sources,
        lineage={k: int(v) for k, v in lineage.items() if isinstance(v, int)},
        phrase_table=phrase_table,
        abstract_drift=drift,
        leaf_graph=graph,
        origin=None
        if reader.legacy or reader.generation is None
        else SavedOrigin(str(_resolve(reader.root)), reader.generation, tuple(chunks)),
    )


def _load_phrase_table(reader: IndexReader, folder: str | Path, n_chunks: int) -> Any:
    """The saved phrase table (arrays memory-mapped; its counts derive on first use), or None."""
    if PHRASE_WORDS.name not in reader.files:
        return None
    from psirag.abstracts.phrases import ARRAYS, DERIVED_ARRAYS, VOCAB_ARRAYS, PhraseTable

    path = reader.path(PHRASE_WORDS.name)
    try:
        words = json.loads(path.read_text(encoding="utf-8"))
        arrays = {a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in ARRAYS}
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError("words.json is not a list of words")
        stems = None
        if PHRASE_STEMS.name in reader.files:  # saved since the vocabulary is kept
            stems = json.loads(reader.path(PHRASE_STEMS.name).read_text("utf-8"))
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


__all__ = [
    "FILES",
    "MANIFEST_FIELDS",
    "PHRASES_DIR",
    "FormatFile",
    "load_index_data",
    "manifest_body",
    "save_index_data",
]
