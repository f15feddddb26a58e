"""The index's on-disk format: which file of a generation holds each :class:`IndexData` field,
in which dtype, since which format version, and the one place that saves and loads them.

:mod:`psirag.storage` knows generations, pointers, locks and checksums but not what an index
holds; :class:`psirag.index.Index` is a facade and knows no file names. A change to the format
touches this module (and its tests) only. The BM25 folder's and the phrase table's inner files
belong to :class:`~psirag.retrieval.bm25.SparseIndex` and
:class:`~psirag.abstracts.phrases.PhraseTable`, which save and read them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import numpy as np

from psirag._version import __version__
from psirag.config import IndexConfig
from psirag.errors import IndexFormatError
from psirag.index_data import BuildStats, Deferred, IndexData, SavedOrigin, fresh_lineage
from psirag.rows import LazyRows, MappedLines, csr_positions
from psirag.storage import FORMAT_VERSION, IndexReader, IndexWriter, _resolve
from psirag.tree import Tree
from psirag.tree.shape import shape_summary
from psirag.types import Chunk, source_from_dict
from psirag.vector_rows import RowStack

if TYPE_CHECKING:
    from psirag.abstracts.phrases import HeldCounts, PhraseTable
    from psirag.retrieval.leaf_graph import LeafGraph
    from psirag.segments import Kind, Table

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
    until: int | None = None
    """The last format version that has it (None: the current one still does)."""


PHRASES_DIR = "keywords"
DRIFT_FILE = "abstract_drift.npy"
"""Per inner node, the leaves changed under it since its keyword abstract was scored (see
:class:`psirag.living.AbstractDriftRule`); written only when some abstract is waiting. Read
only: since issue 24 a save writes :data:`DRIFT_NODES_FILE`."""
DRIFT_NODES_FILE = "abstract_drift_nodes.npy"
"""The same counts, only the inner nodes whose count is not 0: int64 ``(2, k)``, row 0 the
inner node (``node - n_leaves``), row 1 its count; a few waiting abstracts, where the whole
array was 8 bytes per inner node in every save."""
"""The keyword phrase table's folder (absent in indexes saved before it, or without keyword
abstracts: such an index loads as before and its first update builds the table once)."""

NODE_VECTORS = FormatFile("node_vectors.npy", "node_vectors", "npy", "float32", 1, True, until=2)
PARENT = FormatFile("parent.npy", "tree.parent", "npy", "int64", 1, True, until=2)
LAYER = FormatFile("layer.npy", "tree.layer", "npy", "int32", 1, True, until=2)
CHUNKS = FormatFile("chunks.jsonl", "chunks", "jsonl", None, 1, True, until=2)
"""One line per leaf: ``{"id", **source, "text"}``; a save on top of the generation the chunks
came from copies the lines of the chunks still there."""
ABSTRACTS = FormatFile("abstracts.jsonl", "abstracts", "jsonl", None, 1, True, until=2)
"""One line per inner node: ``{"node", "text"}``."""
DOCUMENTS = FormatFile("documents.jsonl", "sources", "jsonl", None, 2, False, until=2)
"""One line per document read from a file: ``{"id", "path", "sha256"}``."""
FIRST_COPY_FILE = "first_copy.npy"
"""Inside ``bm25/`` up to format 2; in format 3 the table ``first_copy`` (as offsets)."""
DUPLICATE_HASHES = "duplicate_hashes"
"""Format 3 table (rows follow the leaves): each chunk's duplicate-key hash
(:class:`psirag.retrieval.duplicates.DuplicateMap`), so the first add after a load maps its
new texts only; absent in indexes saved before it (their first add maps every text once)."""
DOCUMENT_KEYS = "document_keys"
"""Format 3 table (rows follow the leaves): each chunk's document key
(:mod:`psirag.document_keys`), so an update finds documents without decoding every chunk;
absent in indexes saved before it (their first update makes the keys from the chunks) and in
indexes whose document ids are not all in NFC."""
INNER_NORMS = "inner_norms"
"""Format 5 table whose rows are the ``inner_vectors`` table's (saved with them, row for row:
the same physical rows, the same removed ones): each inner node's float32 sum norm
(:attr:`IndexData.inner_norms`, NaN: not known). Absent in indexes saved before it (their
removals score every re-home candidate exactly; ``psirag compact`` adds it); a save on top of
such an index does not add it (its rows could not follow the vectors' rows), nor does one of
an index without norms."""
BM25 = FormatFile("bm25", "sparse", "folder", None, 1, True)
"""bm25s's files, ``first_copy.npy`` and (since the living index) the term counts."""
PHRASE_WORDS = FormatFile(
    f"{PHRASES_DIR}/words.json", "phrase_table", "json", None, 2, False, until=2
)
"""With ``keywords/<array>.npy`` for each of :data:`psirag.abstracts.phrases.ARRAYS`."""
PHRASE_STEMS = FormatFile(
    f"{PHRASES_DIR}/stems.json", "phrase_table", "json", None, 2, False, until=2
)
"""With ``keywords/<array>.npy`` for each of :data:`psirag.abstracts.phrases.VOCAB_ARRAYS`."""
HNSW = FormatFile("hnsw", "leaf_graph", "folder", None, 2, False)
"""The leaves' HNSW graph (see :mod:`psirag.retrieval.leaf_graph`): its base (usearch's own
file ``graph.usearch`` and its keys ``keys.npy``, hard-linked between generations while the
base is unchanged), the base keys removed since (``dead.npy``) and the keys of the leaves added
since (``delta.npy``, the last leaves; their vectors are the leaf vectors'); the manifest's
``leaf_graph`` entry names the base. Only in indexes past the exact scan's size built or
updated with ``psirag[hnsw]``. Without usearch an index loads without it."""
GRAPH_MANIFEST_KEY = "leaf_graph"
MANIFEST_FIELDS = (
    FormatFile("config", "config", "manifest", None, 1, True),
    FormatFile("embedder.id", "embedder_id", "manifest", None, 1, True),
    FormatFile("build_seconds", "stats.seconds", "manifest", None, 1, False),
    FormatFile("tree_mode_used", "stats.tree_mode", "manifest", None, 2, False),
    FormatFile("counts", "stats.documents, stats.truncated", "manifest", None, 1, False),
    FormatFile("lineage", "lineage", "manifest", None, 2, False),
    FormatFile(
        "shape", "tree (fan-out summary, first roots, root text)", "manifest", None, 3, False
    ),
)
"""Fields kept in the generation's manifest body (see :func:`manifest_body`)."""

INNER_ORDER = FormatFile("tree/inner_order.npy", "tree.parent", "npy", "int32", 3, True, until=4)
"""Per inner node (memory order: by layer), its physical row in the ``inner_*`` tables."""
INNER_PARENT = FormatFile("tree/inner_parent.npy", "tree.parent", "npy", "int32", 3, True, until=4)
"""Per inner node, its parent's inner index (``node - n_leaves``; -1: a root)."""
INNER_LAYER = FormatFile("tree/inner_layer.npy", "tree.layer", "npy", "int32", 3, True, until=4)
INNER_IDS = FormatFile("tree/inner_ids.npy", "inner_ids", "npy", "int32", 4, False, until=4)
"""Per inner node, its stable id (:attr:`IndexData.inner_ids`), then the next id no node has
had (k + 1 entries); absent in indexes saved before it (their ids are the saved rows)."""
SEGMENT_TABLES = FormatFile("seg", "node_vectors, chunks, abstracts, ...", "folder", None, 3, True)
"""Segment files of the manifest's ``tables`` (:mod:`psirag.segments`): ``leaf_vectors``,
``leaf_parent`` (each leaf's parent as a physical row of the inner tables), ``chunks``,
``inner_vectors``, ``inner_abstracts``, ``documents`` and the phrase table's
``keywords/<array>``, ``keywords/words`` and ``keywords/stems``; since format 5 also the
inner nodes' arrays of :data:`INNER_TABLES`."""
INNER_TABLES = {
    "inner_order": INNER_ORDER,
    "inner_parent": INNER_PARENT,
    "inner_layer": INNER_LAYER,
    "inner_ids": INNER_IDS,
}
"""Since format 5 the per-inner-node arrays (in memory order) are tables whose rows follow the
inner nodes, so a save writes the rows an update changed (a one-document add changes a
handful) instead of the whole files of formats 3 and 4 (the values: see those files)."""

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
    SEGMENT_TABLES,
    INNER_ORDER,
    INNER_PARENT,
    INNER_LAYER,
    INNER_IDS,
)
"""Every file of a generation besides its manifest, in any format version (``since`` and
``until`` say which)."""

ROOT_TEXT_CHARS = 200
"""How much of the root's abstract the manifest keeps (what ``psirag inspect`` prints)."""

SAVES_VERSION = FORMAT_VERSION
"""The format version :func:`save_index_data` writes (storage reads it and format 1)."""


# ---------------------------------------------------------------------------- saving
def save_index_data(writer: IndexWriter, data: IndexData, *, compact: bool = False) -> int:
    """Every field of ``data`` into ``writer``'s new generation (format 3), then publish it
    (the generation number). The per-row data is kept in segment tables
    (:mod:`psirag.segments`): what the base generation already holds is hard-linked, and only
    new, changed and removed rows are written. ``compact``: every table is written again as
    one segment (``psirag compact``; a format-2 base is migrated this way on its first save)."""
    from psirag.segments import segment_file, tables_of

    base = writer.base
    base_tables = {} if base is None or base.legacy else tables_of(base.manifest, str(base.folder))
    tables = _TableSaver(writer, base_tables, compact)
    n = data.tree.n_leaves
    leaf_src = _leaf_sources(writer, data) if base_tables else "none"
    vectors_file = None
    if compact or isinstance(leaf_src, str):  # one file in memory order: a load maps it as is
        vectors_file = segment_file("node_vectors", writer.generation, "npy")
        writer.save_array(vectors_file, np.asarray(data.vector_rows()))  # not kept joined
    inner_order = _save_inner(tables, data, vectors_file)
    # a kept leaf is the very chunk loaded from its row, and updates carry its vector with it
    # (only new leaves get vectors): the kept rows are not read back to be compared
    tables.save(
        "leaf_vectors",
        "npy",
        data.vector_rows()[:n],  # an update's parts: only its new rows are read
        src=leaf_src,
        compare=False,
        prewritten=None if vectors_file is None else (vectors_file, 0),
    )
    parent = data.tree.parent
    leaf_parent = np.full(n, -1, dtype=np.int64)
    has = parent[:n] >= 0
    leaf_parent[has] = inner_order[parent[:n][has] - n]
    tables.save("leaf_parent", "npy", leaf_parent, src=leaf_src)
    tables.save("chunks", "jsonl", _ChunkRows(data.chunks), src=leaf_src, compare=False)
    inner_parent = parent[n:]
    ids, next_id = data.stable_ids()
    # row i continues the base's row i: the rows an update changed become a patch
    for name, values in (
        ("inner_order", _small_ints(inner_order)),
        ("inner_parent", _small_ints(np.where(inner_parent >= 0, inner_parent - n, -1))),
        ("inner_layer", np.asarray(data.tree.layer[n:], dtype=np.int32)),
        ("inner_ids", _small_ints(np.append(ids, next_id))),
    ):
        tables.save(name, "npy", values)
    if data.abstract_drift is not None:  # absent: every abstract is current
        drift = np.asarray(data.abstract_drift, dtype=np.int64)
        waiting = np.flatnonzero(drift)
        writer.save_array(DRIFT_NODES_FILE, np.stack([waiting, drift[waiting]]))
    keys = data.leaf_document_keys()
    if keys is not None:  # (the number of documents is the manifest's count)
        # a kept leaf is the chunk loaded from its row: its document's key is the saved one
        tables.save(DOCUMENT_KEYS, "npy", keys[0], src=leaf_src, compare=False)
    # in the order the sources were recorded (the corpus order of the documents they name,
    # but for a source recorded later for a document indexed before): listing the documents
    # in corpus order would decode every chunk, 3.5 s of a one-file `psirag add` at 200k
    docs = [{"id": d, **source} for d, source in data.sources.items()]
    tables.save("documents", "jsonl", docs, src=tables.keyed_sources("documents", docs))
    data.sparse.save(
        writer.path(BM25.name),
        reuse=_keeper(writer, BM25.name),
        compact=compact,
        first_copy=False,
    )
    # each chunk's first copy (itself unless its text repeats an earlier one's), as an offset
    # that a removal elsewhere does not change, in a table that follows the leaves
    first = np.asarray(data.sparse.first_copy, dtype=np.int64)
    tables.save("first_copy", "npy", _small_ints(first - np.arange(first.size)), src=leaf_src)
    dups = data.sparse.duplicates
    if dups is not None and dups.size == n:  # so a load's first add need not map every text
        # a hash of each chunk's own text: a kept leaf's is the saved one (not read back)
        tables.save(DUPLICATE_HASHES, "npy", dups.hashes, src=leaf_src, compare=False)
    if data.phrase_table is not None:
        _save_phrase_table(tables, data.phrase_table, leaf_src)
    graph = data.leaf_graph
    if graph is not None:
        if compact and graph.changes:
            graph = graph.folded()
        _save_graph(writer, graph)
    _link_unchanged(writer)
    body = manifest_body(data)
    body["tables"] = {k: t.to_json() for k, t in tables.written.items()}
    if graph is not None:
        body[GRAPH_MANIFEST_KEY] = graph.manifest_entry()
    generation = writer.commit(body)
    if data.phrase_table is not None:  # what a save on top of this generation may trust
        data.phrase_table.mark_saved(_generation_token(writer.target, generation))
    return generation


def _keeper(writer: IndexWriter, folder: str) -> Callable[[Sequence[str]], bool]:
    """For a part's own save: keep files (named inside ``folder``) from the base generation,
    all of them or, when it lacks one, none (then the part writes them)."""
    base = writer.base

    def keep(names: Sequence[str]) -> bool:
        if base is None or base.legacy:
            return False
        files = base.manifest["files"]
        full = [f"{folder}/{n}" for n in names]
        if not all(f in files for f in full):
            return False
        for f in full:
            writer.keep(f)
        return True

    return keep


def _save_graph(writer: IndexWriter, graph: LeafGraph) -> None:
    """The leaf graph's base, hard-linked from the base generation when that holds the same
    base (an update adds a delta and tombstones, never changes the base), else written whole;
    then its tombstones and delta keys (small)."""
    from psirag.retrieval.leaf_graph import BASE_FILES, DEAD_FILE, DELTA_FILE, GRAPH_FILE, KEYS_FILE

    base = writer.base
    names = [f"{HNSW.name}/{f}" for f in BASE_FILES]
    shared = (
        base is not None
        and not base.legacy
        and all(n in base.files for n in names)
        and saved_graph_base(base.manifest) == graph.base.id
    )
    if shared:
        for name in names:
            writer.keep(name)
    else:
        graph.save_base(
            writer.path(f"{HNSW.name}/{GRAPH_FILE}"), writer.path(f"{HNSW.name}/{KEYS_FILE}")
        )
    if graph.dead.size:
        writer.save_array(f"{HNSW.name}/{DEAD_FILE}", graph.dead)
    if graph.n_delta:
        writer.save_array(f"{HNSW.name}/{DELTA_FILE}", graph.delta_keys)


def saved_graph_base(manifest: dict[str, Any]) -> str | None:
    """The name of the graph base a generation holds: the manifest's, or, for one saved before
    bases had names, its graph file's checksum (None: no graph)."""
    entry = manifest.get(GRAPH_MANIFEST_KEY)
    if isinstance(entry, dict) and isinstance(entry.get("base"), str):
        return str(entry["base"])
    meta = manifest.get("files", {}).get(f"{HNSW.name}/graph.usearch")
    if isinstance(meta, dict) and isinstance(meta.get("sha256"), str):
        return "sha256:" + str(meta["sha256"])
    return None


def _distinct_below(ids: np.ndarray, bound: int) -> bool:
    """Whether ``ids`` (each in ``0 .. bound - 1``) holds no id twice: a mark per id, not a
    sort (a load checks the inner nodes' ids of a 1M-leaf tree)."""
    if bound > 64 * ids.size + (1 << 20):  # sparse ids (or a crafted bound): a sort
        return bool(np.unique(ids).size == ids.size)
    seen = np.zeros(max(bound, 0), dtype=bool)
    seen[ids] = True
    return int(np.count_nonzero(seen)) == ids.size


def _small_ints(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    fits = a.size == 0 or (int(a.max()) < 2**31 and int(a.min()) >= -(2**31))
    return a.astype(np.int32) if fits else a


class _ChunkRows(Sequence[dict[str, Any]]):
    """The chunks as chunks.jsonl rows, encoded only where a save reads them (new rows)."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = chunks

    def __len__(self) -> int:
        return len(self.chunks)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._row(c) for c in self.chunks[i]]
        return self._row(self.chunks[i])

    @staticmethod
    def _row(c: Chunk) -> dict[str, Any]:
        return {"id": c.id, **c.source.to_dict(), "text": c.text}


class _TableSaver:
    """Saves tables on top of the base generation's tables of the same name."""

    def __init__(self, writer: IndexWriter, base: dict[str, Table], compact: bool) -> None:
        self.writer = writer
        self.base = base
        self.compact = compact
        self.written: dict[str, Table] = {}

    def save(
        self,
        name: str,
        kind: Kind,
        rows: Any,
        *,
        src: np.ndarray | Literal["none"] | None = None,
        compare: bool = True,
        prewritten: tuple[str, int] | None = None,
        fresh_rows: Any = None,
    ) -> np.ndarray:
        """Write one table; ``src``: see :func:`psirag.segments.write_table` ("none": no row
        continues a base row). Returns each row's physical row."""
        from psirag.segments import write_table

        old = self.base.get(name)
        reader = self.writer.base
        usable = old is not None and reader is not None and not isinstance(src, str)
        table, physical = write_table(
            self.writer,
            name,
            kind,
            rows,
            base=(old, reader) if usable and old is not None and reader is not None else None,
            src=None if isinstance(src, str) else src,
            compare=compare,
            compact=self.compact,
            prewritten=prewritten,
            fresh_rows=fresh_rows,
            spare=name in GROWABLE_TABLES,
        )
        self.written[name] = table
        return physical

    def delta(
        self,
        name: str,
        *,
        append: np.ndarray | None = None,
        patch: tuple[np.ndarray, np.ndarray] | None = None,
        dead: np.ndarray | None = None,
    ) -> bool:
        """Save ``npy`` table ``name`` as the base's changed by what the caller knows changed
        (:func:`psirag.segments.write_delta`; ``patch``: physical rows and values); False,
        with nothing written, when it should be saved the ordinary way instead."""
        from psirag.segments import write_delta

        old = self.base.get(name)
        reader = self.writer.base
        if self.compact or old is None or reader is None or old.kind != "npy":
            return False
        table = write_delta(
            self.writer,
            reader,
            name,
            old,
            append=append,
            patch_ids=None if patch is None else patch[0],
            patch_values=None if patch is None else patch[1],
            dead=dead,
        )
        if table is None:
            return False
        self.written[name] = table
        return True

    def read(self, name: str, *, physical: bool = False) -> Any:
        """The base generation's rows of table ``name`` (None: it has none)."""
        from psirag.segments import read_logical, read_physical

        old = self.base.get(name)
        reader = self.writer.base
        if old is None or reader is None:
            return None
        where = f"{reader.folder} table {name}"
        return read_physical(reader, old, where) if physical else read_logical(reader, old, where)

    def keyed_sources(self, name: str, rows: list[dict[str, Any]]) -> np.ndarray | Literal["none"]:
        """For rows with an ``id``: the base row of the same id (-1: new)."""
        old = self.read(name)
        if old is None:
            return "none"
        at = {row.get("id"): j for j, row in enumerate(old) if isinstance(row, dict)}
        return np.asarray([at.get(row["id"], -1) for row in rows], dtype=np.int64)


def _leaf_sources(writer: IndexWriter, data: IndexData) -> np.ndarray | Literal["none"]:
    """Per leaf, the base generation's leaf row it continues (-1: a new leaf): the loaded
    chunk objects still there are those rows. "none" when ``data`` was not loaded from (or
    saved as) the base generation."""
    origin = data.origin
    base = writer.base
    if origin is None or base is None or base.legacy or base.generation != origin.generation:
        return "none"
    if str(_resolve(base.root)) != origin.folder:
        return "none"
    return origin.rows_of(data.chunks)


def _fingerprints(vectors: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (equal rows, equal hashes)."""
    rows = np.ascontiguousarray(vectors)
    if rows.shape[0] == 0:
        return np.empty(0, dtype=np.uint64)
    words = rows.view(np.uint8).reshape(rows.shape[0], -1)
    pad = (-words.shape[1]) % 4
    if pad:
        words = np.pad(words, ((0, 0), (0, pad)))
    words32 = words.view(np.uint32)
    weights = np.random.default_rng(24).integers(1, 2**63, words32.shape[1], dtype=np.uint64) | 1
    out = np.empty(rows.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for lo in range(0, rows.shape[0], 4096):
            block = words32[lo : lo + 4096].astype(np.uint64)
            out[lo : lo + 4096] = (block * weights).sum(axis=1, dtype=np.uint64)
    return out


def _save_inner(tables: _TableSaver, data: IndexData, vectors_file: str | None) -> np.ndarray:
    """Save the inner nodes' vectors and abstracts as tables whose rows are addressed by
    content: an inner node whose (vector, abstract) a row of the base holds keeps that row,
    whatever its id now (ids of inner nodes move whenever the tree gains or loses a node);
    a new or changed node gets a new row, and rows no node uses any more are removed. Returns
    each inner node's physical row."""
    n = data.tree.n_leaves
    abstracts = data.abstracts
    k = len(abstracts)
    carried = _carried_inner_rows(tables, data, vectors_file)
    if carried is not None:
        return _save_inner_rows(tables, data, carried)
    vectors = np.ascontiguousarray(data.vector_rows()[n:])
    matched = np.full(k, -1, dtype=np.int64)
    old_vectors = tables.read("inner_vectors", physical=True)
    old_texts = tables.read("inner_abstracts", physical=True)
    base = tables.base.get("inner_vectors")
    texts_base = tables.base.get("inner_abstracts")
    reader = tables.writer.base
    usable = (
        old_vectors is not None
        and old_texts is not None
        and base is not None
        and texts_base is not None
        and reader is not None
        and vectors_file is None
        and texts_base.physical == base.physical
        and old_vectors.dtype == vectors.dtype
        and old_vectors.shape[1:] == vectors.shape[1:]
        and len(old_texts) == old_vectors.shape[0]
    )
    if usable and reader is not None and base is not None and texts_base is not None:
        from psirag.segments import live_rows

        where = f"{reader.folder} table inner_vectors"
        live = live_rows(reader, base, where)
        if not np.array_equal(live, live_rows(reader, texts_base, where)):
            raise IndexFormatError(
                f"{reader.folder}: the inner_vectors and inner_abstracts tables disagree; "
                "the index is corrupted, rebuild it"
            )
        old_fp = _fingerprints(old_vectors[live])
        slots: dict[tuple[int, str], list[int]] = {}
        for j, (fp, p) in enumerate(zip(old_fp.tolist(), live.tolist(), strict=True)):
            slots.setdefault((fp, old_texts[p]), []).append(j)
        new_fp = _fingerprints(vectors).tolist()
        for i, (fp, text) in enumerate(zip(new_fp, abstracts, strict=True)):
            free = slots.get((fp, text))
            if free:
                matched[i] = free.pop(0)
        hit = np.flatnonzero(matched >= 0)
        if hit.size:  # a hash collision must not reuse a different row
            same = np.all(
                vectors[hit].view(np.uint8).reshape(hit.size, -1)
                == np.ascontiguousarray(old_vectors[live[matched[hit]]])
                .view(np.uint8)
                .reshape(hit.size, -1),
                axis=1,
            )
            matched[hit[~same]] = -1
        if data.inner_norms is not None and _norms_follow_vectors(tables.base):
            # a kept row keeps its norm too: a node whose vector and abstract a row holds, but
            # not its norm, gets a new row
            old_norms = np.asarray(tables.read(INNER_NORMS, physical=True), dtype=np.float32)
            hit = np.flatnonzero(matched >= 0)
            mine = np.asarray(data.inner_norms, dtype=np.float32)[hit].view(np.uint32)
            theirs = old_norms[live[matched[hit]]].view(np.uint32)
            matched[hit[mine != theirs]] = -1
        kept = np.flatnonzero(matched >= 0)
        kept = kept[np.argsort(matched[kept], kind="stable")]
        fresh = np.flatnonzero(matched < 0)
        perm = np.concatenate([kept, fresh])
        src: np.ndarray | Literal["none"] = np.concatenate(
            [matched[kept], np.full(fresh.size, -1, dtype=np.int64)]
        )
    else:
        perm = np.arange(k)
        src = "none"
    physical = tables.save(
        "inner_vectors",
        "npy",
        vectors[perm],
        src=src,
        compare=False,
        prewritten=None if vectors_file is None else (vectors_file, n),
    )
    also = tables.save(
        "inner_abstracts", "jsonl", [abstracts[i] for i in perm.tolist()], src=src, compare=False
    )
    if not np.array_equal(physical, also):  # the two tables must keep one row numbering
        raise RuntimeError("inner_vectors and inner_abstracts were saved with different rows")
    _save_norms(tables, data, perm, src, physical)
    order = np.empty(k, dtype=np.int64)
    order[perm] = physical
    return order


def _carried_inner_rows(
    tables: _TableSaver, data: IndexData, vectors_file: str | None
) -> np.ndarray | None:
    """Per inner node, the base's logical row that still holds it (-1: write it), from the
    rows the update carried (:attr:`IndexData.inner_rows`); None when they are not for the
    base generation (then rows are matched by content)."""
    reader = tables.writer.base
    base = tables.base.get("inner_vectors")
    texts_base = tables.base.get("inner_abstracts")
    carried = data.inner_rows
    origin = data.origin
    if (
        carried is None
        or origin is None
        or carried[0] is not origin
        or vectors_file is not None
        or reader is None
        or base is None
        or texts_base is None
        or reader.generation != origin.generation
        or str(_resolve(reader.root)) != origin.folder
        or texts_base.physical != base.physical
        or texts_base.n_dead != base.n_dead
    ):
        return None
    rows = np.asarray(carried[1], dtype=np.int64)
    if rows.shape != (len(data.abstracts),):
        return None
    from psirag.segments import live_rows

    live = live_rows(reader, base, f"{reader.folder} table inner_vectors")
    has = rows >= 0
    at = np.searchsorted(live, rows[has])
    ok = at < live.size
    ok[ok] = live[at[ok]] == rows[has][ok]
    if not bool(ok.all()):  # a row no longer live: these rows are not the base's
        return None
    logical = np.full(rows.size, -1, dtype=np.int64)
    logical[has] = at
    if not _distinct_below(logical[has], live.size):
        return None
    return logical


def _save_inner_rows(tables: _TableSaver, data: IndexData, matched: np.ndarray) -> np.ndarray:
    """:func:`_save_inner` with each node's base row known: kept nodes keep their rows in the
    base's order, new and changed ones are appended."""
    n = data.tree.n_leaves
    vectors = data.vector_rows()[n:]  # as held (an update's overlay): only new rows are read
    abstracts = data.abstracts
    kept = np.flatnonzero(matched >= 0)
    kept = kept[np.argsort(matched[kept], kind="stable")]
    fresh = np.flatnonzero(matched < 0)
    perm = np.concatenate([kept, fresh])
    src = np.concatenate([matched[kept], np.full(fresh.size, -1, dtype=np.int64)])
    # (the reordered vectors are made only where read: an update's save appends its new and
    # changed nodes' rows, not a copy of every inner node's vector)
    picked = _PickedRows(vectors, perm)
    physical = tables.save("inner_vectors", "npy", picked, src=src, compare=False)
    also = tables.save(
        "inner_abstracts",
        "jsonl",
        _Picked(abstracts, perm),
        src=src,
        compare=False,
    )
    if not np.array_equal(physical, also):  # the two tables must keep one row numbering
        raise RuntimeError("inner_vectors and inner_abstracts were saved with different rows")
    _save_norms(tables, data, perm, src, physical)
    order = np.empty(len(abstracts), dtype=np.int64)
    order[perm] = physical
    return order


def _norms_follow_vectors(tables: dict[str, Table]) -> bool:
    """Whether a generation's :data:`INNER_NORMS` table has the ``inner_vectors`` table's rows
    (both saved together since it was first written)."""
    norms, vectors = tables.get(INNER_NORMS), tables.get("inner_vectors")
    return (
        norms is not None
        and vectors is not None
        and norms.kind == "npy"
        and norms.physical == vectors.physical
        and norms.n_dead == vectors.n_dead
        and [n for _, n in norms.segments] == [n for _, n in vectors.segments]
    )


def _save_norms(
    tables: _TableSaver,
    data: IndexData,
    perm: np.ndarray,
    src: np.ndarray | Literal["none"],
    physical: np.ndarray,
) -> None:
    """The inner nodes' sum norms as table :data:`INNER_NORMS`, saved exactly as the
    ``inner_vectors`` table just was (``perm``, ``src``), so that its rows are that table's;
    not saved when ``data`` has none, or when rows are carried over a base whose norms do not
    follow its vectors (an index saved before them), or if the rows came out otherwise."""
    norms = data.inner_norms
    if norms is None:
        return
    if not isinstance(src, str) and not _norms_follow_vectors(tables.base):
        return
    values = _PickedRows(np.ascontiguousarray(norms, dtype=np.float32), perm)
    got = tables.save(INNER_NORMS, "npy", values, src=src, compare=False)
    if not np.array_equal(got, physical):  # not the vectors' rows: a load would misread them
        del tables.written[INNER_NORMS]


class _PickedRows:
    """``rows[order]`` of an array, made only where read (its rows, or whole by
    ``np.asarray``): :func:`psirag.segments.write_table` reads an update's appended rows."""

    def __init__(self, rows: np.ndarray, order: np.ndarray) -> None:
        self.rows, self.order = rows, order
        self.dtype = rows.dtype
        self.shape = (int(order.size), *rows.shape[1:])
        self.ndim = rows.ndim

    def __len__(self) -> int:
        return int(self.order.size)

    def __getitem__(self, i: Any) -> np.ndarray:
        return np.asarray(self.rows[self.order[i]])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = np.asarray(self.rows[self.order])
        return whole if dtype is None else whole.astype(dtype)


class _Picked(Sequence[Any]):
    """``[rows[i] for i in order]``, made only where read (a save reads the appended rows)."""

    def __init__(self, rows: Sequence[Any], order: np.ndarray) -> None:
        self.rows, self.order = rows, order

    def __len__(self) -> int:
        return int(self.order.size)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self.rows[j] for j in self.order[i].tolist()]
        return self.rows[int(self.order[i])]


SORTED_GROUPS: dict[str, tuple[str, ...]] = {"s_key": ("s_key", "s_cnt", "s_pid"), "p_sorted": ()}
"""Phrase-table arrays kept in the order of a unique key (``s_key``'s own values; for
``p_sorted``, ``p_key`` of its values) with their parallel arrays: an update inserts new keys
anywhere in that order, so they are stored with new keys appended and sorted again on load
(a merge of the sorted base segment with the few appended rows)."""


GROWABLE_TABLES = frozenset(
    f"{PHRASES_DIR}/{name}"
    for name in ("p_key", "p_sorted", "p_df", "p_best", "s_key", "s_cnt", "s_pid")
)
"""Phrase-table arrays an add appends to and patches in place: written with room to grow and
loaded copy-on-write (:func:`psirag.segments.growable_rows`), so the first update after a
load copies none of them (at 1M chunks each holds tens of millions of rows)."""


CSR_GROUPS: dict[str, tuple[str, ...]] = {
    "lw_ptr": ("lw",),
    "ls_ptr": ("ls_key", "ls_cnt"),
    "lp_ptr": ("lp_pid",),
}
"""The phrase table's per-leaf lists (row pointers and the arrays they point into). Stored as
each leaf's list length (table ``<ptr>_len``, rows follow the leaves) and the entries (rows
follow their leaf's), so a removed leaf is tombstones and shifts no other row."""


def _save_phrase_table(
    tables: _TableSaver, table: PhraseTable, leaf_src: np.ndarray | Literal["none"]
) -> None:
    """Each array of the phrase table as a table ``keywords/<array>``: per-leaf lists follow
    the leaves (:data:`CSR_GROUPS`), per-phrase and per-word arrays grow at the end (row ``i``
    continues the base's row ``i``), the sorted ones go by key (:data:`SORTED_GROUPS`); the
    word and stem lists likewise."""
    base = tables.writer.base
    # a table that only adds and removals made from the one saved as the base generation:
    # kept leaves' lists, phrase keys, words, stems and word flags are the base's rows as they
    # were, so only new rows are written and the old ones are not read back to be compared
    same = (
        not isinstance(leaf_src, str)
        and base is not None
        and base.generation is not None
        and table.saved_from == _generation_token(base.root, base.generation)
    )
    if same and not isinstance(leaf_src, str) and _save_phrase_delta(tables, table, leaf_src):
        return
    from psirag.abstracts.phrase_names import ARRAYS

    # one array at a time, entry arrays in their pieces: a big table's are not all held at once
    for ptr_name, entries in CSR_GROUPS.items():
        lengths = np.diff(np.asarray(table.saved_array(ptr_name), dtype=np.int64))
        len_table = f"{PHRASES_DIR}/{ptr_name}_len"
        old = tables.read(len_table)
        entry_src = _entry_sources(leaf_src, None if old is None else np.asarray(old), lengths)
        tables.save(len_table, "npy", _small_ints(lengths), src=leaf_src, compare=not same)
        for name in entries:
            tables.save(
                f"{PHRASES_DIR}/{name}",
                "npy",
                table.saved_array(name),
                src=entry_src,
                compare=not same,
            )
    in_groups = {n for group in CSR_GROUPS.values() for n in group} | set(CSR_GROUPS)
    for name in ARRAYS:
        if name not in in_groups:
            tables.save(f"{PHRASES_DIR}/{name}", "npy", table.saved_array(name), compare=not same)
    tables.save(f"{PHRASES_DIR}/words", "jsonl", list(table.words), compare=not same)
    vocab = table.vocab()
    if vocab is None:
        return
    stems, vocab_arrays = vocab
    from psirag.abstracts.phrase_names import HASH_ARRAYS

    if not all(name in vocab_arrays for name in HASH_ARRAYS):
        # a loaded table saved before the hashes, saved whole (a compaction): they are written
        # now, so that no later load makes a dict of every word and stem on its first update
        from psirag.stable_hash import hash64

        vocab_arrays = {
            **vocab_arrays,
            "w_hash": hash64(list(table.words)),
            "s_hash": hash64(list(stems)),
        }
    for name, array in vocab_arrays.items():
        tables.save(f"{PHRASES_DIR}/{name}", "npy", np.asarray(array), compare=not same)
    tables.save(f"{PHRASES_DIR}/stems", "jsonl", list(stems), compare=not same)
    table.restore_saved_counts()  # a compaction's loaded table: its counts are written again
    derived = table.derived_arrays()  # each array made when read: written one by one
    if not derived:
        return
    p_key = np.asarray(table.p_key)
    p_key_base = tables.base.get(f"{PHRASES_DIR}/p_key")
    if same and p_key_base is not None and p_key_base.rows <= p_key.size:
        old_p_key: Any = p_key[: p_key_base.rows]  # phrase keys only grow: the base's prefix
    else:
        old_p_key = tables.read(f"{PHRASES_DIR}/p_key")

    # each sorted table and its fences, then its keys let go before the next is made
    p_sorted = derived["p_sorted"]
    sorted_keys = _keys_of(p_sorted, p_key)
    _save_sorted(
        tables,
        {"p_sorted": p_sorted}.__getitem__,
        ("p_sorted",),
        sorted_keys,
        lambda old: _keys_of(old["p_sorted"], old_p_key),
    )
    del p_sorted
    _save_fences(tables, "p_sorted", sorted_keys)
    del sorted_keys
    group = SORTED_GROUPS["s_key"]
    _save_forms(tables, derived)
    for name in derived:
        if name != "p_sorted" and name not in group:
            tables.save(f"{PHRASES_DIR}/{name}", "npy", derived[name])


def _save_forms(tables: _TableSaver, derived: Mapping[str, np.ndarray]) -> None:
    """The surface forms' sorted table (a whole save) and its fences, their keys made once
    (the first column and the fences' keys) and let go on return."""
    s_key = derived["s_key"]
    _save_sorted(
        tables,
        lambda c: s_key if c == "s_key" else derived[c],
        SORTED_GROUPS["s_key"],
        s_key,
        lambda old: old["s_key"],
    )
    _save_fences(tables, "s_key", s_key)


def _base_fence(tables: _TableSaver, first: str, name: str) -> np.ndarray | None:
    """The base generation's saved fence ``name`` of the first segment of its sorted table
    ``first`` (written with that segment: same generation, as long as a fence of it is),
    read whole; None where it has none that fits."""
    from psirag.abstracts.fence import FENCE_STEP
    from psirag.segments import segment_generation, segment_parts

    reader = tables.writer.base
    sorted_table = tables.base.get(f"{PHRASES_DIR}/{first}")
    fence_table = tables.base.get(f"{PHRASES_DIR}/{name}")
    if reader is None or sorted_table is None or fence_table is None:
        return None
    if fence_table.kind != "npy" or len(fence_table.segments) != 1 or fence_table.patches:
        return None
    head_file, head_rows = sorted_table.segments[0]
    gen = segment_generation(f"{PHRASES_DIR}/{first}", head_file)
    if gen is None or gen != segment_generation(
        f"{PHRASES_DIR}/{name}", fence_table.segments[0][0]
    ):
        return None
    where = f"{reader.folder} table {PHRASES_DIR}/{name}"
    fence = np.array(segment_parts(reader, fence_table, where)[0])
    if fence.dtype != np.int64 or fence.shape != ((head_rows + FENCE_STEP - 1) // FENCE_STEP,):
        return None
    return fence


FENCED: dict[str, tuple[str, ...]] = {"p_sorted": ("p_skey", "p_fence"), "s_key": ("s_fence",)}
"""The fences (:data:`~psirag.abstracts.phrase_names.FENCE_ARRAYS`) of each sorted table."""


def _save_fences(
    tables: _TableSaver,
    first: str,
    sorted_keys: np.ndarray | Callable[[], np.ndarray | None] | None,
) -> None:
    """After the sorted table ``first`` (a key of :data:`FENCED`) is saved: its fences, written
    as one segment from ``sorted_keys()`` (the phrase keys in ``p_sorted``'s order, or
    ``s_key``) when the table was written this generation as one segment in key order; the
    base's kept where its first segment (that they describe) is still the table's first;
    none otherwise (a load then searches as before). One table at a time, so that a whole
    save lets one table's keys go before it makes the next's."""
    from psirag.abstracts.fence import fence_of
    from psirag.segments import is_fresh, keep_table

    reader = tables.writer.base
    names = FENCED[first]
    full = f"{PHRASES_DIR}/{first}"
    written = tables.written.get(full)
    if written is None:
        return
    if is_fresh(written, full, tables.writer.generation):
        keys = sorted_keys() if callable(sorted_keys) else sorted_keys
        if keys is None:
            return
        keys = np.asarray(keys, dtype=np.int64)
        fences = {"p_skey": keys, "p_fence": fence_of(keys), "s_fence": fence_of(keys)}
        for name in names:
            tables.save(f"{PHRASES_DIR}/{name}", "npy", fences[name], src="none")
        return
    old = tables.base.get(full)
    kept = [tables.base.get(f"{PHRASES_DIR}/{name}") for name in names]
    if reader is None or old is None or written.segments[0] != old.segments[0]:
        return
    for name, table in zip(names, kept, strict=True):
        if table is not None:
            tables.written[f"{PHRASES_DIR}/{name}"] = keep_table(tables.writer, reader, table)


def _save_phrase_delta(tables: _TableSaver, table: PhraseTable, leaf_src: np.ndarray) -> bool:
    """:func:`_save_phrase_table` for a table that adds and removals made from the one the base
    generation holds, in O(change): the removed leaves' list entries become tombstones and the
    new leaves' entries an appended segment; the corpus counts are written at the phrases and
    surface forms the updates changed (:attr:`PhraseTable.changed_since_saved`), found in the
    base's tables by id or key, without reading or comparing the others. False, with nothing
    written, when that cannot be done (a base saved without the counts, a table that must be
    written again): then the whole table is saved the ordinary way."""
    from psirag.abstracts.phrase_names import DERIVED_ARRAYS, HASH_ARRAYS
    from psirag.segments import dead_rows, physical_of, values_at

    changes = table.changed_since_saved
    reader = tables.writer.base
    if changes is None or reader is None or tables.compact:
        return False
    vocab = table.vocab()
    held = table.held_counts()
    if vocab is None or held is None:
        return False
    word_counts = held.words()
    stems, vocab_arrays = vocab
    base = tables.base
    names = [
        *(f"{ptr}_len" for ptr in CSR_GROUPS),
        *(e for group in CSR_GROUPS.values() for e in group),
        "p_key",
        "words",
        "stems",
        *vocab_arrays,
        *DERIVED_ARRAYS,
        *word_counts,
    ]
    # (the word and stem hashes may be new: a base saved before them gets them whole)
    if any(f"{PHRASES_DIR}/{name}" not in base for name in names if name not in HASH_ARRAYS):
        return False
    n_p_base = base[f"{PHRASES_DIR}/p_key"].rows
    n_p = int(table.p_key.size)
    if n_p < n_p_base or any(
        base[f"{PHRASES_DIR}/{name}"].rows != n_p_base for name in ("p_sorted", "p_df", "p_best")
    ):
        return False
    m = int(np.count_nonzero(leaf_src >= 0))
    n_base_leaves = base[f"{PHRASES_DIR}/lw_ptr_len"].rows
    kept = leaf_src[:m]
    if (
        bool(np.any(leaf_src[m:] >= 0))
        or (m and (int(kept[0]) < 0 or int(kept[-1]) >= n_base_leaves))
        or (m > 1 and not bool(np.all(np.diff(kept) > 0)))
    ):
        return False
    if m == n_base_leaves:  # every base leaf kept, in order (an add): nothing removed
        removed = np.empty(0, dtype=np.int64)
    else:
        gone = np.ones(n_base_leaves, dtype=bool)
        gone[kept] = False
        removed = np.flatnonzero(gone)
    where = str(reader.folder)

    dtypes: dict[str, np.dtype[Any]] = {}

    def base_dtype(name: str) -> np.dtype[Any]:
        if name not in dtypes:  # (a header read: once per table)
            first = base[f"{PHRASES_DIR}/{name}"].segments[0][0]
            dtypes[name] = np.dtype(reader.load_array(first).dtype)
        return dtypes[name]

    def cast(values: np.ndarray, name: str) -> np.ndarray | None:
        """``values`` in the base table's dtype (None: they do not fit it)."""
        dtype = base_dtype(name)
        values = np.asarray(values)
        if values.size and np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            if int(values.min()) < info.min or int(values.max()) > info.max:
                return None
        return values.astype(dtype, copy=False)

    def delta(
        name: str,
        append: np.ndarray | None = None,
        patch: tuple[np.ndarray, np.ndarray] | None = None,
        dead_logical: np.ndarray | None = None,
    ) -> bool:
        """Write table ``name`` as a delta given in logical rows of the base."""
        full = f"{PHRASES_DIR}/{name}"
        old_dead = dead_rows(reader, base[full], f"{where} table {full}")
        if append is not None:
            got = cast(append, name)
            if got is None:
                return False
            append = got if got.size else None
        if patch is not None:
            values = cast(patch[1], name)
            if values is None:
                return False
            rows = physical_of(patch[0], old_dead)
            # rows an update may have changed: write those whose value did change
            differ = values_at(reader, base[full], rows, f"{where} table {full}") != values
            patch = (rows[differ], values[differ]) if bool(differ.any()) else None
        dead = None if dead_logical is None else physical_of(dead_logical, old_dead)
        return tables.delta(full, append=append, patch=patch, dead=dead)

    # per-leaf lists: the removed leaves' entries go, the new leaves' are appended
    for ptr_name, entries in CSR_GROUPS.items():
        ptr = np.asarray(getattr(table, ptr_name), dtype=np.int64)
        len_table = f"{PHRASES_DIR}/{ptr_name}_len"
        old_lengths: np.ndarray | None = None  # the base's, read once where needed
        if removed.size == 0 and delta(f"{ptr_name}_len", _small_ints(np.diff(ptr[m:]))):
            # an add: the kept leaves' lengths and entries are the base's, the new leaves'
            # appended (no pass over every leaf's length)
            gone_entries = np.empty(0, dtype=np.int64)
        else:
            old_lengths = np.asarray(tables.read(len_table), dtype=np.int64)
            gone_entries = csr_positions(np.concatenate([[0], np.cumsum(old_lengths)]), removed)
            tables.save(len_table, "npy", _small_ints(np.diff(ptr)), src=leaf_src, compare=False)
        for name in entries:
            # the new leaves' entries only (a loaded table's are pieces: not joined)
            appended = np.asarray(getattr(table, name)[int(ptr[m]) :])
            if not delta(name, appended, dead_logical=gone_entries):
                if old_lengths is None:
                    old_lengths = np.asarray(tables.read(len_table), dtype=np.int64)
                src = _entry_sources(leaf_src, old_lengths, np.diff(ptr))
                whole = table.arrays()[name]
                tables.save(f"{PHRASES_DIR}/{name}", "npy", whole, src=src, compare=False)
    # phrase ids only grow: new phrases are appended, changed counts and forms patched
    pids = np.asarray(changes[0], dtype=np.int64)
    old_pids = pids[pids < n_p_base]
    new_pids = np.arange(n_p_base, n_p, dtype=np.int64)
    new_df, new_best = held.phrases_from(n_p_base)
    old_df, old_best = held.phrases_at(old_pids)
    plain = [
        ("p_key", np.asarray(table.p_key[n_p_base:]), None),
        ("p_sorted", new_pids, None),  # a load keeps the appended ids as the tail, by key
        ("p_df", new_df, (old_pids, old_df)),
        ("p_best", new_best, (old_pids, old_best)),
    ]
    for name, append, patch in plain:
        if delta(name, append, patch):
            continue
        if name == "p_sorted":  # saved whole, in the stored order the base has
            small = table.derived_arrays() or {}
            all_keys = np.asarray(table.p_key)
            base_keys = all_keys[:n_p_base]
            _save_sorted(
                tables,
                small.__getitem__,
                ("p_sorted",),
                _keys_of(small["p_sorted"], all_keys),
                lambda old, keys=base_keys: _keys_of(old["p_sorted"], keys),
            )
        elif name == "p_key":
            tables.save(f"{PHRASES_DIR}/p_key", "npy", table.arrays()["p_key"], compare=False)
        else:
            small = table.derived_arrays() or {}
            tables.save(f"{PHRASES_DIR}/{name}", "npy", small[name])
    _save_surface_delta(tables, table, held, np.asarray(changes[1], dtype=np.int64), delta)
    # words, stems and per-word arrays: sized by the vocabulary, saved the ordinary way
    tables.save(f"{PHRASES_DIR}/words", "jsonl", list(table.words), compare=False)
    for name, array in vocab_arrays.items():
        tables.save(f"{PHRASES_DIR}/{name}", "npy", np.asarray(array), compare=False)
    tables.save(f"{PHRASES_DIR}/stems", "jsonl", list(stems), compare=False)
    for name in ("w_rank", "n_ranked", *WORD_ARRAY_NAMES):
        if name in word_counts:
            array = word_counts[name]
            saved = array if name == "n_ranked" else _small_ints(array)
            tables.save(f"{PHRASES_DIR}/{name}", "npy", saved)

    def phrase_keys() -> np.ndarray | None:
        return _keys_of((table.derived_arrays() or {})["p_sorted"], np.asarray(table.p_key))

    _save_fences(tables, "p_sorted", phrase_keys)
    _save_fences(tables, "s_key", lambda: (table.derived_arrays() or {})["s_key"])
    return True


WORD_ARRAY_NAMES = ("w_first", "w_df")


def _keys_of(values: np.ndarray, keys: Any) -> np.ndarray | None:
    """``keys[values]`` (phrase keys of stored phrase ids), None when an id is out of range."""
    keys = np.asarray(keys) if keys is not None else None
    values = np.asarray(values)
    if keys is None or (values.size and (values.min() < 0 or values.max() >= keys.size)):
        return None
    return np.asarray(keys[values])


def _save_surface_delta(
    tables: _TableSaver,
    table: PhraseTable,
    held: HeldCounts,
    keys: np.ndarray,
    delta: Callable[..., bool],
) -> None:
    """The corpus's surface forms (``s_key`` with ``s_cnt`` and ``s_pid``, stored by key
    with new keys appended) changed at ``keys`` only: a form the base has gets its count
    patched (to 0 when it is spent: kept as a row, so a load maps the table as it is, with no
    removed rows to drop), a new one in use is appended, one the table no longer holds is a
    tombstone. Found in the base by key (a search of its sorted first segment and of its
    appended rows) and in the table without sorting it; the ordinary way when not possible."""
    from psirag.segments import dead_rows, logical_of, segment_parts

    reader = tables.writer.base
    assert reader is not None
    group = SORTED_GROUPS["s_key"]
    keys = np.unique(keys)
    held_at, counts, pids = held.forms_at(keys)
    table_name = f"{PHRASES_DIR}/s_key"
    key_table = tables.base[table_name]
    where = f"{reader.folder} table {table_name}"
    physical = None
    if not key_table.patches:
        parts = segment_parts(reader, key_table, where)
        fence = _base_fence(tables, "s_key", "s_fence")
        physical = _live_rows_by_key(parts, dead_rows(reader, key_table, where), keys, fence)
    ok = physical is not None
    if physical is not None:
        in_base = physical >= 0
        kept_dead = dead_rows(reader, key_table, where)
        gone = logical_of(physical[in_base & ~held_at], kept_dead)
        stay = in_base & held_at
        patched = logical_of(physical[stay], kept_dead)
        fresh = held_at & ~in_base & (counts > 0)
        plans = {
            "s_key": (keys[fresh], None),
            "s_cnt": (counts[fresh], (patched, counts[stay])),
            "s_pid": (pids[fresh], None),
        }
        # every column must take its delta, or the group is saved whole
        from psirag.segments import delta_fits

        for name in group:
            append, patch = plans[name]
            column = tables.base[f"{PHRASES_DIR}/{name}"]
            if not delta_fits(
                column,
                n_append=int(append.size),
                n_patch=0 if patch is None else int(patch[0].size),
                n_dead=int(gone.size),
            ):
                ok = False
        if ok:
            for name in group:
                append, patch = plans[name]
                if not delta(name, append, patch, dead_logical=gone):
                    raise RuntimeError(f"the phrase table's {name} delta did not fit after all")
            return
    small = table.derived_arrays() or {}
    _save_sorted(tables, small.__getitem__, group, small["s_key"], lambda old: old["s_key"])


def _live_rows_by_key(
    parts: list[np.ndarray], dead: np.ndarray, keys: np.ndarray, fence: np.ndarray | None = None
) -> np.ndarray | None:
    """The live physical row holding each of ``keys`` in a table stored by key (its first
    segment sorted, the rest appended), or -1; None when a key is live twice (not a table
    stored by key). ``fence``: the saved fence of the first segment (see
    :mod:`psirag.abstracts.fence`), its pages then asked for at once."""
    from psirag.abstracts.fence import fenced_search, fetch

    head = parts[0]
    out = np.full(keys.size, -1, dtype=np.int64)
    if head.shape[0]:
        if fence is not None:
            at = np.minimum(fenced_search(head, fence, keys, "s_key"), head.shape[0] - 1)
        else:
            at = np.minimum(np.searchsorted(head, keys), head.shape[0] - 1)
        hit = fetch(head, at) == keys
        out[hit] = at[hit]
    if dead.size:  # a removed row holds its key no more
        j = np.minimum(np.searchsorted(dead, out), dead.size - 1)
        out[(out >= 0) & (dead[j] == out)] = -1
    if len(parts) > 1:
        tail = np.concatenate([np.asarray(p) for p in parts[1:]])
        rows = head.shape[0] + np.arange(tail.size, dtype=np.int64)
        if dead.size:
            live = ~np.isin(rows, dead, assume_unique=True)
            tail, rows = tail[live], rows[live]
        order = np.argsort(tail, kind="stable")
        ordered = tail[order]
        if ordered.size > 1 and not bool(np.all(np.diff(ordered) > 0)):
            return None
        if ordered.size:
            at = np.minimum(np.searchsorted(ordered, keys), ordered.size - 1)
            hit = ordered[at] == keys
            if bool(np.any(out[hit] >= 0)):
                return None
            out[hit] = rows[order[at[hit]]]
    return out


def _entry_sources(
    leaf_src: np.ndarray | Literal["none"], old_lengths: np.ndarray | None, lengths: np.ndarray
) -> np.ndarray | Literal["none"] | None:
    """The base's entry row that each entry of the per-leaf lists continues (-1: a new leaf's
    entry), from the leaves' ``leaf_src``; None (row ``i`` continues row ``i``) when the
    leaves were only appended, "none" without a base."""
    if isinstance(leaf_src, str) or old_lengths is None or leaf_src.size != lengths.size:
        return "none"
    kept = leaf_src >= 0
    m = int(np.count_nonzero(kept))
    old_lengths = np.asarray(old_lengths, dtype=np.int64)
    if m == old_lengths.size and bool(np.all(leaf_src[:m] == np.arange(m))):
        return None  # leaves appended: entries appended
    if bool(np.any(old_lengths[leaf_src[kept]] != lengths[kept])):
        return None  # a kept leaf's list changed: compare row by row
    old_start = np.concatenate([[0], np.cumsum(old_lengths)])[:-1]
    start = np.concatenate([[0], np.cumsum(lengths)])[:-1]
    leaf_of = np.repeat(np.arange(lengths.size), lengths)
    offset = np.arange(leaf_of.size) - start[leaf_of]
    src_start = np.where(kept, old_start[np.maximum(leaf_src, 0)], -1)
    return np.where(kept[leaf_of], src_start[leaf_of] + offset, -1)


def _save_sorted(
    tables: _TableSaver,
    column: Callable[[str], np.ndarray],
    group: tuple[str, ...],
    keys: np.ndarray | None,
    old_keys_of: Any,
) -> None:
    """Save the arrays ``group`` (``column(name)``, sorted by ``keys``) in stored order: the
    base's rows where they are, new keys appended (see :func:`psirag.segments.sorted_rows`)."""
    from psirag.segments import is_fresh, sorted_rows

    names = [f"{PHRASES_DIR}/{c}" for c in group]
    old_keys = None
    if not tables.compact and all(n in tables.base for n in names):
        old = {c: np.asarray(tables.read(n)) for c, n in zip(group, names, strict=True)}
        if len({a.shape[0] for a in old.values()}) == 1:
            old_keys = old_keys_of(old)
    if old_keys is None:  # no base rows to keep: each column as it is, in key order
        in_order = keys is not None and _increasing(keys)
        fresh_src: Literal["none"] | None = "none" if in_order else None
        for c, n in zip(group, names, strict=True):  # (not all made at once: each when read)
            tables.save(n, "npy", column(c), src=fresh_src)
        return
    head = 0
    if tables.writer.base is not None:
        from psirag.segments import head_rows

        head = head_rows(tables.writer.base, tables.base[names[0]], str(tables.writer.base.folder))
    plan = None if keys is None else sorted_rows(old_keys, keys, head)
    if plan is None:  # keys not unique (or not readable): plain tables
        for c, n in zip(group, names, strict=True):
            tables.save(n, "npy", column(c))
        return
    rows, src = plan
    first = column(group[0])
    tables.save(names[0], "npy", first[rows], src=src, fresh_rows=first)
    fresh = is_fresh(tables.written[names[0]], names[0], tables.writer.generation)
    for c, n in zip(group[1:], names[1:], strict=True):
        if fresh:  # the key's table is one segment in key order: so is each of its columns
            tables.save(n, "npy", column(c), src="none")
        else:
            tables.save(n, "npy", column(c)[rows], src=src)


def _increasing(keys: np.ndarray, block: int = 1 << 22) -> bool:
    """Whether ``keys`` strictly increase, checked a block at a time (a 1M-chunk table's
    phrase keys: a difference of the whole array would hold more than a copy of it)."""
    keys = np.asarray(keys)
    for lo in range(0, max(keys.size - 1, 0), block):
        part = keys[lo : lo + block + 1]
        if not bool(np.all(part[1:] > part[:-1])):
            return False
    return True


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
            "dim": data.dim,
        },
        "counts": {
            "documents": data.document_index.count,  # the documents are not listed
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
        "shape": {**shape_summary(tree), "root_text": _root_text(data)},
    }


def _root_text(data: IndexData) -> str | None:
    """The single root's abstract, cut as ``psirag inspect`` shows it (None for a forest)."""
    roots = data.tree.roots
    return data.node_text(int(roots[0]))[:ROOT_TEXT_CHARS] if roots.size == 1 else None


def _link_unchanged(writer: IndexWriter) -> None:
    """Replace each staged file that is byte-equal to the base generation's by a hard link to
    it (sizes compared first, then sha256), so unchanged files are stored once (files kept
    from the base already are not read)."""
    base = writer.base
    if base is None or base.legacy:
        return
    from psirag.storage import sha256_file

    files = base.files
    for p in sorted(writer.staging.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(writer.staging).as_posix()
        if writer.is_kept(rel):
            continue  # a hard link to the base's file already
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
    from psirag.segments import tables_of

    tables = tables_of(m, f"{reader.folder / 'manifest.json'}")
    if tables:
        node_vectors, tree, chunks, abstracts = _load_core_v3(reader, tables, where)
    else:
        node_vectors, tree, chunks, abstracts = _load_core_v2(reader, where)
    if (
        node_vectors.ndim != 2
        or node_vectors.shape != (tree.n_nodes, dim)
        or len(chunks) != tree.n_leaves
        or len(abstracts) != tree.n_nodes - tree.n_leaves
    ):
        raise IndexFormatError(f"{where}: arrays and records disagree in size; rebuild it")
    from psirag.retrieval.bm25 import SparseIndex

    first_copy = None
    if "first_copy" in tables:
        offsets = np.asarray(_read_table(reader, tables, "first_copy", where), dtype=np.int64)
        first_copy = offsets + np.arange(offsets.size)
        if offsets.ndim != 1 or (first_copy.size and int(first_copy.min()) < 0):
            raise IndexFormatError(f"{where}: the first_copy table is damaged; rebuild the index")
    try:
        sparse = SparseIndex.load(reader.path(BM25.name), first_copy=first_copy)
    except (OSError, ValueError, KeyError) as exc:
        from psirag.oserrors import of_the_machine

        if isinstance(exc, IndexFormatError) or of_the_machine(exc):
            raise
        raise IndexFormatError(f"{where}: cannot read the BM25 index ({exc})") from exc
    if DUPLICATE_HASHES in tables and first_copy is not None:
        from psirag.retrieval.duplicates import DuplicateMap

        hashes = np.asarray(_read_table(reader, tables, DUPLICATE_HASHES, where), dtype=np.int64)
        if hashes.shape != first_copy.shape:
            raise IndexFormatError(
                f"{where}: the {DUPLICATE_HASHES} table holds {hashes.shape} rows for "
                f"{first_copy.size} chunks; the index is corrupted, rebuild it"
            )
        sparse.duplicates = DuplicateMap(first_copy, hashes)
    document_keys = None
    if DOCUMENT_KEYS in tables:  # saved with the manifest's count of documents
        keys = np.asarray(_read_table(reader, tables, DOCUMENT_KEYS, where))
        n_docs = m.get("counts", {}).get("documents")
        if (
            keys.shape != (len(chunks),)
            or keys.dtype != np.uint64
            or not isinstance(n_docs, int)
            or not (min(1, len(chunks)) <= n_docs <= len(chunks))
        ):
            raise IndexFormatError(
                f"{where}: the {DOCUMENT_KEYS} table holds {keys.shape} rows of {keys.dtype} "
                f"for {len(chunks)} chunks and {n_docs!r} documents; the index is corrupted, "
                "rebuild it"
            )
        document_keys = (keys, n_docs)
    bm25_docs = sparse.n_docs
    if sparse.first_copy.size != len(chunks) or bm25_docs != len(chunks):
        raise IndexFormatError(
            f"{where}: the BM25 index holds {bm25_docs} documents but the index has "
            f"{len(chunks)} chunks; the index is corrupted or mixed, rebuild it"
        )
    phrase_table = (
        _saved_phrase_table(reader, tables, where, len(chunks))
        if tables
        else _load_phrase_table(reader, where, len(chunks))
    )
    drift = _saved_drift(reader, len(abstracts), where)
    origin = (
        None
        if reader.legacy or reader.generation is None
        else SavedOrigin(str(_resolve(reader.root)), reader.generation, chunks)
    )
    inner_rows = inner_ids = None
    if origin is not None and tables:
        inner_rows = (origin, saved_inner_order(reader, tables, where))
        inner_ids = _saved_ids(
            reader, tables, inner_rows[1], tables["inner_vectors"].physical, where
        )
    inner_norms = None
    if tables and _norms_follow_vectors(tables):
        order = (
            inner_rows[1] if inner_rows is not None else saved_inner_order(reader, tables, where)
        )
        inner_norms = _saved_norms(reader, tables, order, where)
    graph = None
    if any(name.startswith(HNSW.name + "/") for name in reader.files):
        from psirag.retrieval.leaf_graph import LeafGraph

        graph = LeafGraph.open(
            reader.path(HNSW.name),
            len(chunks),
            dim,
            leaf_vectors=node_vectors,
            base_id=saved_graph_base(m),
        )
    sources: dict[str, dict[str, Any]] = {}
    doc_rows: Any = ()
    if "documents" in tables:
        doc_rows = _read_table(reader, tables, "documents", where)
    elif DOCUMENTS.name in reader.files:
        doc_rows = reader.read_jsonl(DOCUMENTS.name)  # short rows: one parse is faster
    try:
        for row in doc_rows:
            sources[str(row["id"])] = {"path": row.get("path"), "sha256": row.get("sha256")}
    except (KeyError, TypeError) as exc:
        raise IndexFormatError(f"{where}: a documents record lacks {exc}") from exc
    if not isinstance(chunks, LazyRows):
        chunks = tuple(chunks)  # the very tuple IndexData keeps (SavedOrigin's identity)
    lineage = m.get("lineage")
    if not isinstance(lineage, dict):
        lineage = fresh_lineage(len(chunks))
    counts = m.get("counts", {})
    return IndexData(
        config=config,
        chunks=chunks,
        tree=tree,
        node_vectors=node_vectors,
        abstracts=abstracts,
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
        origin=origin,
        inner_rows=inner_rows,
        inner_ids=inner_ids,
        document_keys=document_keys,
        inner_norms=inner_norms,
    )


Core = tuple[np.ndarray, Tree, Sequence[Chunk], Sequence[str]]


def _inner_array(
    reader: IndexReader, tables: dict[str, Table], name: str, where: str | Path
) -> np.ndarray | None:
    """An inner-node array of :data:`INNER_TABLES`: its table (format 5), or its file
    (formats 3 and 4); None when the generation has neither."""
    if name in tables:
        return np.asarray(_read_table(reader, tables, name, where))
    file = INNER_TABLES[name].name
    if file not in reader.files:
        return None
    return np.asarray(reader.load_array(file, mmap=False))


def saved_inner_order(
    reader: IndexReader, tables: dict[str, Table] | None = None, where: str | Path | None = None
) -> np.ndarray:
    """Per inner node, its physical row in the inner tables (``inner_order``) as a generation
    saved it (any format from 3)."""
    from psirag.segments import tables_of

    where = reader.folder if where is None else where
    if tables is None:
        tables = tables_of(reader.manifest, f"{reader.folder / 'manifest.json'}")
    order = _inner_array(reader, tables, "inner_order", where)
    if order is None:
        raise IndexFormatError(
            f"{where}: the manifest lists no inner_order; the index is incomplete, rebuild it"
        )
    return np.asarray(order, dtype=np.int64)


def _saved_ids(
    reader: IndexReader,
    tables: dict[str, Table],
    rows: np.ndarray,
    n_rows: int,
    where: str | Path,
) -> tuple[np.ndarray, int]:
    """The inner nodes' stable ids and the next one: as saved, or for an index saved before
    they were, the rows that hold the nodes (unique, and below the rows' count)."""
    got = _inner_array(reader, tables, "inner_ids", where)
    if got is None:
        return rows, n_rows
    saved = np.asarray(got, dtype=np.int64)
    ids, next_id = saved[:-1], int(saved[-1]) if saved.size else -1
    if (
        saved.shape != (rows.size + 1,)
        or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= next_id))
        or not _distinct_below(ids, next_id)
    ):
        raise IndexFormatError(
            f"{where}: {INNER_IDS.name} does not hold one distinct id per inner node and the "
            "next id; the index is corrupted, rebuild it"
        )
    return ids, next_id


def _saved_norms(
    reader: IndexReader, tables: dict[str, Table], order: np.ndarray, where: str | Path
) -> np.ndarray:
    """Per inner node, its saved sum norm (the :data:`INNER_NORMS` row of its vector's row)."""
    rows = np.asarray(_read_table(reader, tables, INNER_NORMS, where, physical=True))
    if rows.dtype != np.float32 or rows.shape != (tables["inner_vectors"].physical,):
        raise IndexFormatError(
            f"{where}: the {INNER_NORMS} table holds {rows.shape} rows of {rows.dtype} for "
            f"{tables['inner_vectors'].physical} inner rows; the index is corrupted, rebuild it"
        )
    return np.ascontiguousarray(rows[order])


def _saved_drift(reader: IndexReader, n_inner: int, where: str | Path) -> np.ndarray | None:
    """Per inner node, its saved drift count (None: no abstract is waiting)."""
    if DRIFT_NODES_FILE in reader.files:
        nodes = np.asarray(reader.load_array(DRIFT_NODES_FILE, mmap=False), dtype=np.int64)
        ok = nodes.ndim == 2 and nodes.shape[0] == 2
        if ok and nodes.size:
            ok = int(nodes[0].min()) >= 0 and int(nodes[0].max()) < n_inner
            ok = ok and int(nodes[1].min()) >= 0
        if not ok:
            raise IndexFormatError(
                f"{where}: {DRIFT_NODES_FILE} does not hold (node, count) pairs for "
                f"{n_inner} inner nodes; the index is corrupted or mixed, rebuild it"
            )
        drift = np.zeros(n_inner, dtype=np.int64)
        drift[nodes[0]] = nodes[1]
        return drift
    if DRIFT_FILE not in reader.files:
        return None
    drift = np.asarray(reader.load_array(DRIFT_FILE, mmap=False), dtype=np.int64)
    if drift.shape != (n_inner,) or (drift.size and int(drift.min()) < 0):
        raise IndexFormatError(
            f"{where}: {DRIFT_FILE} holds {drift.shape} counts for {n_inner} "
            "abstracts; the index is corrupted or mixed, rebuild it"
        )
    return drift


def _load_core_v2(reader: IndexReader, where: str | Path) -> Core:
    """node_vectors, tree, chunks and abstracts of a format 1 or 2 generation."""
    node_vectors = reader.load_array(NODE_VECTORS.name)
    tree = Tree(
        parent=np.asarray(reader.load_array(PARENT.name, mmap=False), dtype=np.int64),
        layer=np.asarray(reader.load_array(LAYER.name, mmap=False), dtype=np.int32),
    )
    try:
        chunks = [_chunk(row) for row in reader.iter_jsonl(CHUNKS.name)]
        abstracts = [row["text"] for row in reader.iter_jsonl(ABSTRACTS.name)]
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, IndexFormatError):
            raise
        raise IndexFormatError(f"{where}: a chunk or abstract record lacks {exc}") from exc
    return node_vectors, tree, chunks, abstracts


def _chunk(row: dict[str, Any]) -> Chunk:
    return Chunk(row["id"], row["text"], source_from_dict(row))


def _read_table(
    reader: IndexReader,
    tables: dict[str, Table],
    name: str,
    where: str | Path,
    *,
    physical: bool = False,
) -> Any:
    from psirag.segments import read_logical, read_physical

    table = tables.get(name)
    if table is None:
        raise IndexFormatError(
            f"{where}: the manifest lists no table {name}; the index is incomplete, rebuild it"
        )
    label = f"{where} table {name}"
    return read_physical(reader, table, label) if physical else read_logical(reader, table, label)


def _load_core_v3(reader: IndexReader, tables: dict[str, Table], where: str | Path) -> Core:
    """node_vectors, tree, chunks and abstracts of a format-3 generation, assembled from its
    tables: leaf rows in order, inner rows picked by ``inner_order``. Chunks and
    abstracts are :class:`~psirag.rows.LazyRows`: their records are decoded when read."""
    from psirag.segments import mapped_jsonl

    # the checks read shapes only: the rows are read where they are used, below
    leaf_vectors = _table_rows(reader, tables, "leaf_vectors", where, physical=False)
    leaf_parent = np.asarray(_read_table(reader, tables, "leaf_parent", where), dtype=np.int64)
    inner_vectors = _table_rows(reader, tables, "inner_vectors", where, physical=True)
    texts_table = tables.get("inner_abstracts")
    if texts_table is None:
        raise IndexFormatError(f"{where}: the manifest lists no table inner_abstracts; rebuild it")
    inner_texts = mapped_jsonl(reader, texts_table, f"{where} table inner_abstracts")
    order = saved_inner_order(reader, tables, where)
    inner_parent = _inner_array(reader, tables, "inner_parent", where)
    inner_layer = _inner_array(reader, tables, "inner_layer", where)
    if inner_parent is None or inner_layer is None:
        raise IndexFormatError(
            f"{where}: the manifest lists no inner_parent or inner_layer; the index is "
            "incomplete, rebuild it"
        )
    inner_parent = np.asarray(inner_parent, dtype=np.int64)
    inner_layer = np.asarray(inner_layer, dtype=np.int32)
    n, k = leaf_vectors.shape[0], order.size
    n_rows = inner_texts.physical

    def bad(what: str) -> IndexFormatError:
        return IndexFormatError(f"{where}: {what}; the index is corrupted or mixed, rebuild it")

    if (
        leaf_vectors.ndim != 2
        or inner_vectors.ndim != 2
        or inner_vectors.shape[1:] != leaf_vectors.shape[1:]
        or inner_vectors.shape[0] != n_rows
        or leaf_parent.shape != (n,)
        or order.ndim != 1
        or inner_parent.shape != (k,)
        or inner_layer.shape != (k,)
    ):
        raise bad("its tables and tree arrays disagree in size")
    if k and (int(order.min()) < 0 or int(order.max()) >= n_rows or not _distinct(order, n_rows)):
        raise bad("inner_order does not name distinct rows of the inner tables")
    if k and (int(inner_parent.min()) < -1 or int(inner_parent.max()) >= k):
        raise bad("tree/inner_parent.npy names a parent that does not exist")
    slot_of = np.full(n_rows + 1, -1, dtype=np.int64)  # the last: a leaf that is a root
    slot_of[order] = np.arange(k)
    slot_of[n_rows] = -2
    if n and (int(leaf_parent.min()) < -1 or int(leaf_parent.max()) >= n_rows):
        raise bad("a leaf's parent is not a row of the inner tables")
    leaf_parent_mem = slot_of[np.where(leaf_parent >= 0, leaf_parent, n_rows)]
    if bool(np.any(leaf_parent_mem == -1)):
        raise bad("a leaf's parent is a row no inner node uses")
    parent = np.concatenate(
        [
            np.where(leaf_parent_mem >= 0, leaf_parent_mem + n, -1),
            np.where(inner_parent >= 0, inner_parent + n, -1),
        ]
    ).astype(np.int64)
    layer = np.concatenate([np.zeros(n, dtype=np.int32), inner_layer])
    node_vectors: np.ndarray | RowStack | None = _mapped_node_vectors(reader, tables, order, n)
    if node_vectors is None:  # the saved rows' memory maps, read in place: no row copied
        node_vectors = _stacked_node_vectors(reader, tables, order, where)
    if node_vectors is None:  # one copy: the leaves' segments straight into place
        node_vectors = np.empty((n + k, leaf_vectors.shape[1]), dtype=leaf_vectors.dtype)
        leaf_parts = _leaf_vector_parts(reader, tables, where)
        if leaf_parts is None:
            node_vectors[:n] = np.asarray(_read_table(reader, tables, "leaf_vectors", where))
        else:
            np.concatenate(leaf_parts, out=node_vectors[:n])
        inner_rows = _read_table(reader, tables, "inner_vectors", where, physical=True)
        node_vectors[n:] = inner_rows[order]
    chunks = _lazy_chunks(reader, tables, where)
    if len(chunks) != n:
        raise bad(f"the chunks table holds {len(chunks)} rows for {n} leaves")

    def abstract(value: Any) -> str:
        if not isinstance(value, str):
            raise bad("an abstract is not text")
        return value

    abstracts = LazyRows(inner_texts, abstract, order)
    return cast(np.ndarray, node_vectors), Tree(parent=parent, layer=layer), chunks, abstracts


class _Rows:
    """The shape and dtype of rows kept in several segments (what the load's checks read)."""

    def __init__(self, n: int, first: np.ndarray) -> None:
        self.shape = (n, *first.shape[1:])
        self.ndim = first.ndim
        self.dtype = first.dtype


def _table_rows(
    reader: IndexReader, tables: dict[str, Table], name: str, where: str | Path, *, physical: bool
) -> np.ndarray | _Rows:
    """The shape and dtype of an ``npy`` table's rows (``physical``: removed rows counted),
    from its segments' memory maps, each checked against the manifest; a table of another
    kind or of no segment is read whole."""
    from psirag.segments import segment_parts

    table = tables.get(name)
    if table is None or table.kind != "npy" or not table.segments:
        return np.asarray(_read_table(reader, tables, name, where, physical=physical))
    parts = segment_parts(reader, table, f"{where} table {name}")
    return _Rows(table.physical - (0 if physical else table.n_dead), parts[0])


def _leaf_vector_parts(
    reader: IndexReader, tables: dict[str, Table], where: str | Path
) -> list[np.ndarray] | None:
    """The leaf vectors' segments as memory maps when they are several, unpatched and hold no
    removed row (an index after adds): the load copies them once, into the node vectors,
    instead of joining them first. None: read the table as a whole."""
    from psirag.segments import segment_parts

    table = tables.get("leaf_vectors")
    if table is None or table.kind != "npy" or len(table.segments) < 2:
        return None
    if table.patches or table.n_dead:
        return None
    return segment_parts(reader, table, f"{where} table leaf_vectors")


def _lazy_chunks(reader: IndexReader, tables: dict[str, Table], where: str | Path) -> Any:
    """The chunks table as a :class:`~psirag.rows.LazyRows`: a chunk record is decoded when
    its chunk is first read (a search reads its results only)."""
    from psirag.segments import live_rows, mapped_jsonl

    table = tables.get("chunks")
    if table is None:
        raise IndexFormatError(
            f"{where}: the manifest lists no table chunks; the index is incomplete, rebuild it"
        )
    label = f"{where} table chunks"
    source = mapped_jsonl(reader, table, label)

    def chunk(row: Any) -> Chunk:
        try:
            return _chunk(row)
        except (KeyError, TypeError, ValueError) as exc:
            raise IndexFormatError(
                f"{label}: a chunk record lacks {exc}; the index is corrupted, rebuild it"
            ) from exc

    return LazyRows(source, chunk, live_rows(reader, table, label) if table.n_dead else None)


def _distinct(values: np.ndarray, bound: int) -> bool:
    """Whether ``values`` (all in ``0 .. bound - 1``) are distinct (no sort: one pass)."""
    seen = np.zeros(bound, dtype=bool)
    seen[values] = True
    return int(np.count_nonzero(seen)) == values.size


MAX_STACKED_RUNS = 512
"""Most runs of consecutive saved rows that a load reads the node vectors from in place
(:func:`_stacked_node_vectors`); a generation whose rows are more scattered is copied into one
array, as before. Each run is a view, and a row lookup searches the runs' starts."""


def _stacked_node_vectors(
    reader: IndexReader, tables: dict[str, Table], order: np.ndarray, where: str | Path
) -> RowStack | None:
    """The node vectors of a generation that updates wrote in several segments, as views of
    runs of its saved rows (:class:`~psirag.vector_rows.RowStack`): leaves in order without
    their removed rows, then the inner rows ``order`` names. Opening an updated index thus
    copies no vector (a million leaves of MiniLM are 1.5 GB). None: patched rows, or more
    than :data:`MAX_STACKED_RUNS` runs (assembled by a copy instead)."""
    from psirag.segments import live_rows, segment_parts

    leaves, inner = tables["leaf_vectors"], tables["inner_vectors"]
    if leaves.kind != "npy" or inner.kind != "npy" or leaves.patches or inner.patches:
        return None
    leaf_rows = (
        live_rows(reader, leaves, f"{where} table leaf_vectors")
        if leaves.n_dead
        else np.arange(leaves.physical, dtype=np.int64)
    )
    runs: list[np.ndarray] = []
    for name, table, rows in (("leaf_vectors", leaves, leaf_rows), ("inner_vectors", inner, order)):
        got = _runs_of(segment_parts(reader, table, f"{where} table {name}"), rows)
        if got is None or len(runs) + len(got) > MAX_STACKED_RUNS:
            return None
        runs.extend(got)
    if not runs:
        return None
    stacked = RowStack.of(*runs)
    return stacked if isinstance(stacked, RowStack) else None  # one run: one mapped file


def _runs_of(parts: list[np.ndarray], rows: np.ndarray) -> list[np.ndarray] | None:
    """``rows`` (physical row numbers across ``parts`` one after the other) as views of runs
    of consecutive rows within one part; None when they are more than
    :data:`MAX_STACKED_RUNS` runs."""
    if rows.size == 0:
        return []
    starts = np.cumsum([0] + [int(p.shape[0]) for p in parts], dtype=np.int64)
    part = np.searchsorted(starts, rows, side="right") - 1
    breaks = np.flatnonzero((np.diff(rows) != 1) | (np.diff(part) != 0)) + 1
    if breaks.size + 1 > MAX_STACKED_RUNS:
        return None
    views = []
    for a, b in zip(np.r_[0, breaks].tolist(), np.r_[breaks, rows.size].tolist(), strict=True):
        k = int(part[a])
        first = int(rows[a] - starts[k])
        views.append(parts[k][first : first + (b - a)])
    return views


def _mapped_node_vectors(
    reader: IndexReader, tables: dict[str, Table], order: np.ndarray, n: int
) -> np.ndarray | None:
    """The node vectors as one memory map, when a fresh save or a compaction wrote them as one
    file in memory order and no update has changed them since (else None: assemble them)."""
    leaves, inner = tables["leaf_vectors"], tables["inner_vectors"]
    plain = all(len(t.segments) == 1 and not t.patches and not t.n_dead for t in (leaves, inner))
    if not plain or leaves.segments[0][0] != inner.segments[0][0]:
        return None
    if leaves.start != 0 or inner.start != n or not np.array_equal(order, np.arange(order.size)):
        return None
    mapped = reader.load_array(leaves.segments[0][0])
    return mapped if mapped.shape[0] == n + order.size else None


def _saved_phrase_table(
    reader: IndexReader, tables: dict[str, Table], folder: str | Path, n_chunks: int
) -> Deferred[PhraseTable] | None:
    """The phrase table of a format-3 generation, read and assembled when an update first uses
    it (a search never does): its size is checked against the manifest now, and its files are
    mapped now, so the table reads the same bytes after the generation is collected (as the
    memory-mapped arrays do)."""
    if f"{PHRASES_DIR}/words" not in tables:
        return None
    lengths = tables.get(f"{PHRASES_DIR}/lw_ptr_len")
    rows = -1 if lengths is None else lengths.rows
    if rows != n_chunks:
        raise IndexFormatError(
            f"{folder}: the keyword phrase table holds {rows} leaves but the index has "
            f"{n_chunks} chunks; the index is corrupted or mixed, rebuild it"
        )
    mapped = _MappedFiles(reader, {k: t for k, t in tables.items() if k.startswith(PHRASES_DIR)})
    # the table's reading asks a reader for nothing but load_array, iter_jsonl and read_jsonl
    as_reader = cast("IndexReader", mapped)

    token = None if reader.generation is None else _generation_token(reader.root, reader.generation)

    def make() -> PhraseTable:
        table = _load_phrase_table_v3(as_reader, tables, folder, n_chunks)
        assert table is not None  # its words table is listed above
        made = table.get()
        if token is not None:  # what a save on top of this generation may trust
            made.mark_saved(token)
        return made

    return Deferred(make)


class _MappedFiles:
    """The files of some tables of a generation, mapped when made (arrays as memory maps,
    JSON lines as :class:`~psirag.rows.MappedLines`): what :mod:`psirag.segments` reads through
    an :class:`IndexReader`, readable after the generation is gone."""

    def __init__(self, reader: IndexReader, tables: dict[str, Table]) -> None:
        from psirag.segments import line_starts_file

        self.folder = reader.folder
        self.arrays: dict[str, np.ndarray] = {}
        self.private: dict[str, np.ndarray] = {}  # copy-on-write maps, each handed out once
        self.reopen: dict[str, int] = {}  # descriptors of the mapped ones: further such maps
        self.lines: dict[str, MappedLines] = {}
        listed = reader.manifest.get("files", {})
        for name, table in tables.items():
            where = f"{reader.folder} table {name}"
            texts = [(f, n) for f, n in table.segments] + [(v, n) for _, v, n in table.patches]
            arrays = [r for r, _, _ in table.patches] + ([table.dead] if table.dead else [])
            if table.kind == "npy":
                arrays += [f for f, _ in texts]
                texts = []
            for f in arrays:
                self.arrays[f] = reader.load_array(f)
            if name in GROWABLE_TABLES and table.kind == "npy" and table.segments:
                first = table.segments[0][0]  # mapped now: the file may go before it is read
                self.private[first] = got = reader.load_array(first, private=True)
                if isinstance(got, np.memmap):  # open now too, for a second update's map
                    self._keep_open(first, reader.path(first))
            for f, n in texts:
                saved = line_starts_file(f)
                starts = reader.load_array(saved) if saved in listed else None
                self.lines[f] = MappedLines([(reader.path(f), n, starts, f"{where} ({f})")])

    def _keep_open(self, name: str, path: Path) -> None:
        import os
        import weakref

        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError:
            return  # a second update copies the rows instead
        self.reopen[name] = fd
        weakref.finalize(self, os.close, fd)

    def load_array(self, name: str, *, mmap: bool = True, private: bool = False) -> np.ndarray:
        if private:  # writable: a copy-on-write map (of the descriptor kept), else a copy
            got = self.private.pop(name, None)
            if got is None and name in self.reopen:
                got = _private_map(self.reopen[name])
            return got if got is not None else np.array(self.arrays[name])
        array = self.arrays[name]
        return array if mmap else np.array(array)

    def iter_jsonl(self, name: str) -> Any:
        lines = self.lines[name]
        return (lines.value(i) for i in range(lines.physical))

    def read_jsonl(self, name: str) -> list[Any]:
        return self.lines[name].every_value()


def _private_map(fd: int) -> np.ndarray | None:
    """The ``.npy`` file open as ``fd`` mapped copy-on-write (as ``np.load(mmap_mode="c")``):
    another writable view of the saved rows, which no other map's writes reach and which never
    changes the file; the file may have been unlinked since it was opened. None when it cannot
    be mapped (then the caller copies)."""
    import os

    fmt = np.lib.format
    try:
        with os.fdopen(os.dup(fd), "rb") as f:
            f.seek(0)
            version = fmt.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = fmt.read_array_header_2_0(f)
            else:
                return None
            if dtype.hasobject or not shape or 0 in shape:
                return None
            order: Literal["C", "F"] = "F" if fortran else "C"
            start = f.tell()
            return np.memmap(
                cast(Any, f), dtype=dtype, mode="c", shape=shape, order=order, offset=start
            )
    except (OSError, ValueError):
        return None


def _load_phrase_table_v3(
    reader: IndexReader, tables: dict[str, Table], folder: str | Path, n_chunks: int
) -> Deferred[PhraseTable] | None:
    """The phrase table of a format-3 generation (its ``keywords/...`` tables), or None: its
    tables read now, the table made on first use (:func:`_deferred_table`)."""
    words_table = f"{PHRASES_DIR}/words"
    if words_table not in tables:
        return None
    from psirag.abstracts.phrase_names import (
        ARRAYS,
        DERIVED_ARRAYS,
        HASH_ARRAYS,
        VOCAB_ARRAYS,
        WORD_ARRAYS,
    )
    from psirag.abstracts.phrases import entry_pieces, spare_view
    from psirag.segments import (
        dead_rows,
        growable_rows,
        head_rows,
        segment_generation,
        segment_parts,
    )

    def arr(name: str, grown: set[str] | None = None) -> Any:
        """Table ``name``: one an add grows in place mapped copy-on-write (its name then
        joins ``grown``), per-leaf entries as segment pieces, anything else read whole."""
        full = f"{PHRASES_DIR}/{name}"
        table = tables.get(full)
        where = f"{folder} table {full}"
        if table is not None and full in GROWABLE_TABLES:
            got = growable_rows(reader, table, where)
            if got is not None:
                if grown is not None:
                    grown.add(name)
                return spare_view(*got)
        entries = any(name in group for group in CSR_GROUPS.values())
        if entries and table is not None and table.kind == "npy" and not table.patches:
            # per-leaf entries: segments as pieces, removed leaves' rows left out
            parts = segment_parts(reader, table, where)
            return entry_pieces(parts, dead_rows(reader, table, where))
        return np.asarray(_read_table(reader, tables, full, folder))

    def counts() -> tuple[dict[str, Any], dict[str, int] | None]:
        """The saved corpus counts, and where the sorted groups' appended rows (the in-memory
        tails) start when every column of them was mapped (else the groups are sorted again
        here, and None). Called again for a second update from the loaded table: the maps are
        then new copy-on-write maps of the files opened at load (the first add grew the first
        ones in place), or copies where the files were read rather than mapped."""
        names = [*DERIVED_ARRAYS]
        if all(f"{PHRASES_DIR}/{a}" in tables for a in WORD_ARRAYS):
            names += WORD_ARRAYS
        grown: set[str] = set()
        got = {a: arr(a, grown) for a in names}
        if all({g, *cols} <= grown for g, cols in SORTED_GROUPS.items()):
            heads = {
                g: head_rows(reader, tables[full], f"{folder} table {full}")
                for g in SORTED_GROUPS
                for full in [f"{PHRASES_DIR}/{g}"]
            }
            got.update(fences(heads))
            return got, heads
        with_keys = {**got, "p_key": arrays["p_key"]}  # a group with removed rows, read whole
        _in_key_order(reader, tables, with_keys, folder)
        return {a: with_keys[a] for a in got}, None

    def fences(heads: dict[str, int]) -> dict[str, Any]:
        """The saved fences (mapped) of the sorted tables whose first segment, the one they
        were written with, still holds every row of the sorted part (a generation that wrote
        that segment again without them, or removed rows from it, left them out of date:
        not read, the lookups search as before)."""
        out: dict[str, Any] = {}
        for first, names in FENCED.items():
            full = f"{PHRASES_DIR}/{first}"
            table = tables[full]
            kept = [tables.get(f"{PHRASES_DIR}/{name}") for name in names]
            if heads.get(first) != table.segments[0][1]:
                continue
            gen = segment_generation(full, table.segments[0][0])
            if gen is None or any(
                t is None
                or t.kind != "npy"
                or len(t.segments) != 1
                or t.patches
                or t.n_dead
                or t.start
                or segment_generation(f"{PHRASES_DIR}/{name}", t.segments[0][0]) != gen
                for name, t in zip(names, kept, strict=True)
            ):
                continue
            for name, t in zip(names, kept, strict=True):
                assert t is not None
                out[name] = segment_parts(reader, t, f"{folder} table {PHRASES_DIR}/{name}")[0]
        return out

    arrays: dict[str, Any] = {}
    heads: dict[str, int] | None = None
    try:
        words = _read_table(reader, tables, words_table, folder)
        arrays.update({a: arr(a) for a in ARRAYS if a not in CSR_GROUPS})
        for ptr_name in CSR_GROUPS:
            lengths = np.asarray(arr(f"{ptr_name}_len"), dtype=np.int64)
            if lengths.size and int(lengths.min()) < 0:
                raise ValueError(f"{ptr_name}_len holds a negative length")
            arrays[ptr_name] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        stems = None
        if f"{PHRASES_DIR}/stems" in tables:
            stems = _read_table(reader, tables, f"{PHRASES_DIR}/stems", folder)
            arrays.update({a: arr(a) for a in VOCAB_ARRAYS})
            if all(f"{PHRASES_DIR}/{a}" in tables for a in HASH_ARRAYS):
                arrays.update({a: arr(a) for a in HASH_ARRAYS})
            if all(f"{PHRASES_DIR}/{a}" in tables for a in DERIVED_ARRAYS):
                saved, heads = counts()
                arrays.update(saved)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, IndexFormatError):
            raise
        raise IndexFormatError(
            f"{folder}: the keyword phrase table is unreadable ({exc}); rebuild the index"
        ) from exc

    return _deferred_table(
        lambda: (words, stems),
        arrays,
        n_chunks,
        folder,
        heads,
        counts if "p_df" in arrays else None,
    )


def _generation_token(root: Path, generation: int) -> tuple[str, int]:
    """What names one saved generation of one index folder (a phrase table's
    :attr:`~psirag.abstracts.phrases.PhraseTable.saved_from`)."""
    return (str(_resolve(root)), int(generation))


def _in_key_order(
    reader: IndexReader, tables: dict[str, Table], arrays: dict[str, np.ndarray], folder: Any
) -> None:
    """Put the arrays of :data:`SORTED_GROUPS` back in key order (they are stored with new
    keys appended)."""
    from psirag.segments import head_rows, key_order

    p_sorted, p_key = arrays["p_sorted"], arrays["p_key"]
    if p_sorted.size and (int(p_sorted.min()) < 0 or int(p_sorted.max()) >= p_key.size):
        raise ValueError("p_sorted names phrases the table does not have")
    for first, keys in (("p_sorted", p_key[p_sorted]), ("s_key", arrays["s_key"])):
        group = SORTED_GROUPS[first] or (first,)
        if len({arrays[c].shape[0] for c in group}) != 1:
            raise ValueError(f"the arrays {group} differ in length")
        head = head_rows(reader, tables[f"{PHRASES_DIR}/{first}"], str(folder))
        order = key_order(keys, head)
        if order is not None:
            for c in group:
                arrays[c] = arrays[c][order]


def _load_phrase_table(
    reader: IndexReader, folder: str | Path, n_chunks: int
) -> Deferred[PhraseTable] | None:
    """The saved phrase table, or None: its arrays memory-mapped and its word lists read now,
    the table made on first use (:func:`_deferred_table`; its counts derive on first use)."""
    if PHRASE_WORDS.name not in reader.files:
        return None
    from psirag.abstracts.phrase_names import ARRAYS, DERIVED_ARRAYS, VOCAB_ARRAYS

    try:
        words_text = reader.path(PHRASE_WORDS.name).read_bytes()
        arrays = {a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in ARRAYS}
        stems_text = None
        if PHRASE_STEMS.name in reader.files:  # saved since the vocabulary is kept
            stems_text = reader.path(PHRASE_STEMS.name).read_bytes()
            arrays.update({a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in VOCAB_ARRAYS})
            if all(f"{PHRASES_DIR}/{a}.npy" in reader.files for a in DERIVED_ARRAYS):
                arrays.update(
                    {a: reader.load_array(f"{PHRASES_DIR}/{a}.npy") for a in DERIVED_ARRAYS}
                )
    except OSError as exc:
        raise IndexFormatError(
            f"{folder}: the keyword phrase table ({PHRASES_DIR}/) is unreadable ({exc}); "
            "rebuild the index"
        ) from exc

    def word_lists() -> tuple[Any, Any]:
        words = json.loads(words_text.decode("utf-8"))
        if not isinstance(words, list):
            raise ValueError("words.json is not a list of words")
        stems = None if stems_text is None else json.loads(stems_text.decode("utf-8"))
        if stems is not None and not isinstance(stems, list):
            raise ValueError("stems.json is not a list of stems")
        return words, stems

    return _deferred_table(word_lists, arrays, n_chunks, folder)


def _deferred_table(
    word_lists: Callable[[], tuple[Any, Any]],
    arrays: dict[str, np.ndarray],
    n_chunks: int,
    folder: str | Path,
    heads: dict[str, int] | None = None,
    reload: Callable[[], tuple[dict[str, Any], dict[str, int] | None]] | None = None,
) -> Deferred[PhraseTable]:
    """A phrase table made on first use (only updates use one: a search never parses it nor
    imports the keyword code) from what a load read: ``word_lists()`` gives the parsed words
    and stems. A table with a row count other than ``n_chunks`` is refused now; one whose
    contents disagree, when it is made."""
    ptr = arrays.get("lw_ptr")
    if ptr is not None and ptr.ndim == 1 and ptr.shape[0] - 1 != n_chunks:
        raise IndexFormatError(
            f"{folder}: the keyword phrase table holds {ptr.shape[0] - 1} leaves but the index "
            f"has {n_chunks} chunks; the index is corrupted or mixed, rebuild it"
        )

    def make() -> PhraseTable:
        from psirag.abstracts.phrases import PhraseTable

        try:
            words, stems = word_lists()
            if not set(map(type, words)) <= {str}:  # every one, at C speed
                raise ValueError("the word list holds something other than words")
            if stems is not None and not set(map(type, stems)) <= {str}:
                raise ValueError("the stem list holds something other than stems")
            table = PhraseTable.from_arrays(words, arrays, stems, heads=heads, reload=reload)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            if isinstance(exc, IndexFormatError):
                raise
            raise IndexFormatError(
                f"{folder}: the keyword phrase table ({PHRASES_DIR}/) is unreadable ({exc}); "
                "rebuild the index"
            ) from exc
        return _sized(table, n_chunks, folder)

    return Deferred(make)


__all__ = [
    "FILES",
    "MANIFEST_FIELDS",
    "PHRASES_DIR",
    "FormatFile",
    "load_index_data",
    "manifest_body",
    "save_index_data",
]


def _sized(table: PhraseTable, n_chunks: int, folder: str | Path) -> PhraseTable:
    """``table`` if it has one row per chunk (format 2 and 3 loaders alike)."""
    if table.n_leaves != n_chunks:
        raise IndexFormatError(
            f"{folder}: the keyword phrase table holds {table.n_leaves} leaves but the index "
            f"has {n_chunks} chunks; the index is corrupted or mixed, rebuild it"
        )
    return table
