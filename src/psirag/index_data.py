"""What an index is, as one immutable value: the build pipeline makes it, storage saves and loads
it, retrievers read it, and an update makes a new one instead of changing it in place (so a
reader holding the old value keeps a consistent view)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

import numpy as np

from psirag.config import IndexConfig
from psirag.rows import LazyRows, PickedRows, identities, match_identities
from psirag.tree.model import Tree
from psirag.types import Chunk
from psirag.vector_rows import RowStack

if TYPE_CHECKING:  # a runtime import would cycle through psirag.retrieval
    from psirag.abstracts.phrases import PhraseTable
    from psirag.document_keys import DocumentIndex
    from psirag.retrieval.bm25 import SparseIndex
    from psirag.retrieval.leaf_graph import LeafGraph


@dataclass(frozen=True)
class BuildStats:
    """What building an index cost, as the manifest reports it."""

    seconds: dict[str, float] = field(default_factory=dict)
    truncated: int = 0
    documents: int = 0
    llm: dict[str, Any] = field(default_factory=dict)
    """Counts from LLM abstraction: calls paid and cached, tokens, inputs cut to fit."""
    tree_mode: str | None = None
    """The tree mode the build ran in (``exact`` or ``knn``; ``exact+knn`` for a forest whose
    trees differ under ``auto``); None for an index saved before it was recorded."""


@dataclass(frozen=True, eq=False)
class SavedOrigin:
    """Where an index's chunks were loaded from: folder, generation, and the chunk objects
    read from its chunk rows, in order (a later value's chunks that are these very objects
    are those rows, unchanged: a save on top of that generation keeps them and writes only
    the new ones)."""

    folder: str
    generation: int
    chunks: Sequence[Chunk]
    """A :class:`~psirag.rows.LazyRows` for a format-3 load: its rows are known by position,
    decoded or not (:meth:`rows_of`)."""

    def rows_of(self, chunks: Sequence[Chunk]) -> np.ndarray:
        """Per chunk of ``chunks``, the loaded row it is (-1: none, a new chunk): the very
        object read from that row, or, for a sequence made from the loaded one, the same row.
        Decodes no row that was not read."""
        if isinstance(self.chunks, LazyRows):
            return self.chunks.positions_of(chunks)
        loaded = identities(self.chunks)  # vectorised: a dict of every chunk cost ~1 s at 200k
        return match_identities(identities(chunks), loaded, np.arange(loaded.size))

    def prefix(self, chunks: Sequence[Chunk]) -> int:
        """How many leading ``chunks`` are the loaded ones, in order."""
        k = 0
        for mine, loaded in zip(chunks, self.chunks, strict=False):
            if mine is not loaded:
                break
            k += 1
        return k


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Deferred(Generic[T_co]):
    """A value made on first use from what a load has already read into memory or mapped (so
    making it opens no file: the generation it came from may be gone by then). Made once, under
    a lock; an error is raised again at the next use."""

    def __init__(self, make: Callable[[], T_co]) -> None:
        self._make: Callable[[], T_co] | None = make
        self._value: T_co | None = None
        self._lock = threading.Lock()

    @property
    def made(self) -> bool:
        return self._make is None

    def get(self) -> T_co:
        with self._lock:
            if self._make is not None:
                self._value = self._make()
                self._make = None
        return cast(T_co, self._value)  # made above


class _JoinedOnRead:
    """:attr:`IndexData.node_vectors`: it may be given a :class:`~psirag.vector_rows.RowStack`
    (an update's leaf and inner rows, kept apart so that the update copies none of them);
    reading the field joins the parts into one array once (a full copy) and keeps it.
    :meth:`IndexData.vector_rows` gives what the field holds, joined or not."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    def __get__(self, obj: object | None, owner: type | None = None) -> np.ndarray:
        if obj is None:
            raise AttributeError("node_vectors has no default")  # a required field
        value = obj.__dict__[self._slot]
        if isinstance(value, RowStack):
            joined = np.asarray(value)
            joined.flags.writeable = False
            obj.__dict__[self._slot] = value = joined
        return cast(np.ndarray, value)

    def __set__(self, obj: object, value: np.ndarray | RowStack) -> None:
        obj.__dict__[self._slot] = value

    def held(self, obj: object) -> np.ndarray | RowStack:
        return cast("np.ndarray | RowStack", obj.__dict__[self._slot])


class _MadeOnRead(Generic[T]):
    """An :class:`IndexData` field that may be given a :class:`Deferred`: reading the field
    makes the value (once) and gives it. Its default is None."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> None: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T | None:
        if obj is None:
            return None  # the field's default, as dataclasses reads it from the class
        value = obj.__dict__.get(self._slot)
        if isinstance(value, Deferred):
            value = value.get()
            obj.__dict__[self._slot] = value
        return cast(T, value)

    def __set__(self, obj: object, value: T | Deferred[T]) -> None:
        obj.__dict__[self._slot] = value

    def held(self, obj: object) -> T | Deferred[T]:
        """What the field holds, a :class:`Deferred` not made."""
        return cast("T | Deferred[T]", obj.__dict__.get(self._slot))


LAST_NUMBER = "last_number"
"""The lineage's highest numbered document id (``"17"``) the index has held (-1: none), so
that a new text whose numbered id is taken gets the next free number without a list of every
id; it never goes down (a removed number is not given again). Indexes saved before it lack it:
the first update that needs it lists the ids once and keeps the count."""


def numbered_id(doc_id: str) -> int | None:
    """The number a document id is (``"17"``: ASCII digits only), else None."""
    return int(doc_id) if doc_id.isascii() and doc_id.isdecimal() else None


def last_number(doc_ids: Iterable[str]) -> int:
    """The highest numbered id of ``doc_ids`` (-1: none is a number)."""
    return max((n for d in doc_ids if (n := numbered_id(d)) is not None), default=-1)


def fresh_lineage(n_leaves: int, doc_ids: Iterable[str] | None = None) -> dict[str, int]:
    """The lineage of a full build: nothing added or removed since (with ``doc_ids``, the
    documents' highest numbered id, :data:`LAST_NUMBER`)."""
    lineage = {"built_leaves": n_leaves, "added": 0, "removed": 0, "updates": 0}
    if doc_ids is not None:
        lineage[LAST_NUMBER] = last_number(doc_ids)
    return lineage


def _read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view (a memory map stays one), leaving the caller's array writable."""
    view = array.view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class IndexData:
    """Chunks (the leaves), the tree over them, one routing vector per node, the abstracts of
    the inner nodes, the BM25 index, the embedder's id and the build's stats.

    Node ``u < tree.n_leaves`` is leaf ``chunks[u]``; inner node ``u`` has the abstract
    ``abstracts[u - tree.n_leaves]``. Derived views (the document list, the document of each
    leaf) are computed once, on first use; they read every chunk, so a search does not use
    them (a loaded index's chunks are decoded as they are read).
    """

    config: IndexConfig
    chunks: Sequence[Chunk]
    """A tuple, or for an index loaded from format 3 a :class:`~psirag.rows.LazyRows` that
    decodes a chunk's record when it is first read."""
    tree: Tree
    node_vectors: np.ndarray
    """One row per node (leaves first); given a :class:`~psirag.vector_rows.RowStack` (what
    an update makes), reading it joins the rows into one array: a search and an update read
    :meth:`vector_rows` instead, which does not."""
    abstracts: Sequence[str]
    sparse: SparseIndex
    embedder_id: str
    stats: BuildStats = field(default_factory=BuildStats)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per document id: ``{"path", "sha256"}`` of the file it came from (absent for a text
    given directly): what ``psirag sync`` compares with the files on disk."""
    lineage: dict[str, int] = field(default_factory=dict)
    """Since the last full build: ``built_leaves`` (the leaves it had), leaves ``added`` and
    ``removed`` by updates, and the number of ``updates`` (the drift rule reads it)."""
    phrase_table: _MadeOnRead[PhraseTable | None] = _MadeOnRead()
    """The keyword abstracts' per-leaf phrase data (``abstracts="keywords"``), kept so an
    update extracts phrases from its new leaves only; None: recomputed when first needed. A
    load gives it as a :class:`Deferred` (only an update reads it, so a search never parses
    it); reading the field makes it."""
    origin: SavedOrigin | None = None
    """The saved generation these chunks were loaded from (carried through updates), so a save
    on top of it keeps the rows of the chunks still there instead of writing them again."""
    abstract_drift: np.ndarray | None = None
    """Per inner node (``abstracts`` order): leaves that entered or left its subtree since its
    keyword abstract was last scored (what :class:`psirag.living.AbstractDriftRule` bounds);
    None: every abstract is as scored for its current leaves (a build)."""
    leaf_graph: LeafGraph | None = None
    inner_rows: tuple[SavedOrigin, np.ndarray] | None = None
    """Per inner node (``abstracts`` order), the physical row of ``origin``'s inner tables that
    still holds its vector and abstract (-1: new or changed since), as loading and updates
    carry it; a save on top of that generation keeps those rows without reading them back.
    Valid only while its first item is ``origin`` (None: the save matches rows by content)."""
    inner_ids: tuple[np.ndarray, int] | None = None
    """Stable ids of the inner nodes: per inner node (``abstracts`` order) its id, and the next
    id no node has had. An update keeps the id of every node it leaves as it was (same leaves,
    abstract and vector) and gives new and changed nodes new ids past every earlier one (tree
    ids, which are positions, move whenever a leaf is appended). A load gives the saved rows
    (a save appends new nodes' rows in the same order, so ids survive a save and a load until
    a compaction renumbers the rows); None: ``0 .. k-1`` (a build), see :meth:`stable_ids`."""
    """An HNSW graph over the leaf vectors (``psirag[hnsw]``): the dense list at scale, built
    with an index of more than :data:`psirag.config.EXACT_DENSE_LEAVES` leaves when usearch is
    installed, changed by every update and saved in the generation; None: none (the tree
    search ranks in its place)."""
    document_keys: tuple[np.ndarray, int] | None = None
    """Per leaf, the 64-bit key of its document id (:mod:`psirag.document_keys`), and the
    number of documents, as a load or an update gives them, so that an update finds documents
    without decoding every chunk; None: made from the chunks when first asked
    (:attr:`document_index`)."""
    inner_norms: np.ndarray | None = None
    """Per inner node (``abstracts`` order), float32: the norm of the float32 leaf sum its
    routing vector was normalised by (``routing="leaf_mean"``; NaN: not known), made and
    carried exactly with the vector (a waiting abstract's stale vector keeps its stale norm,
    as :attr:`abstract_drift` says), so that a removal's re-home rules out candidates by
    their stored vectors with a proven margin (:class:`psirag.tree.update.RehomeHint`; kept
    only while no leaf is longer than its ``LEAF_NORM_MAX``, checked where leaves enter);
    None: none known (an index saved before them, or another routing)."""

    def __post_init__(self) -> None:
        if not isinstance(self.chunks, LazyRows):
            object.__setattr__(self, "chunks", tuple(self.chunks))
        if not isinstance(self.abstracts, (LazyRows, PickedRows)):
            object.__setattr__(self, "abstracts", tuple(self.abstracts))
        rows = self.vector_rows()
        rows = rows.read_only() if isinstance(rows, RowStack) else _read_only(rows)
        object.__setattr__(self, "node_vectors", rows)
        tree = self.tree
        drift = self.abstract_drift
        if drift is not None and drift.shape != (tree.n_nodes - tree.n_leaves,):
            raise ValueError(
                f"abstract drift of {drift.shape} for {tree.n_nodes - tree.n_leaves} inner nodes"
            )
        ids = self.inner_ids
        if ids is not None and (
            ids[0].shape != (tree.n_nodes - tree.n_leaves,)
            or (ids[0].size and ids[0].max() >= ids[1])
        ):
            raise ValueError(f"inner ids of {ids[0].shape} (next {ids[1]}) do not fit the tree")
        norms = self.inner_norms
        if norms is not None:
            if norms.shape != (tree.n_nodes - tree.n_leaves,):
                raise ValueError(
                    f"inner norms of {norms.shape} for {tree.n_nodes - tree.n_leaves} inner nodes"
                )
            object.__setattr__(self, "inner_norms", _read_only(norms))  # an update copies them
        keys = self.document_keys
        if keys is not None and (keys[0].shape != (tree.n_leaves,) or keys[1] > tree.n_leaves):
            raise ValueError(
                f"document keys of {keys[0].shape} ({keys[1]} documents) for {tree.n_leaves} leaves"
            )
        graph = self.leaf_graph
        if graph is not None and graph.n_leaves != tree.n_leaves:
            raise ValueError(f"an HNSW graph of {graph.n_leaves} leaves for {tree.n_leaves}")
        shape = self.vector_rows().shape
        if (
            len(shape) != 2
            or shape[0] != tree.n_nodes
            or len(self.chunks) != tree.n_leaves
            or len(self.abstracts) != tree.n_nodes - tree.n_leaves
        ):
            raise ValueError(
                f"index data disagree in size: {len(self.chunks)} chunks, "
                f"{len(self.abstracts)} abstracts, node vectors {shape}, "
                f"a tree of {tree.n_leaves} leaves and {tree.n_nodes} nodes"
            )

    def stable_ids(self) -> tuple[np.ndarray, int]:
        """:attr:`inner_ids`, or for a value without them ``0 .. k-1`` and ``k``."""
        if self.inner_ids is not None:
            return self.inner_ids
        k = self.tree.n_nodes - self.tree.n_leaves
        return np.arange(k, dtype=np.int64), k

    @property
    def n_leaves(self) -> int:
        return self.tree.n_leaves

    @property
    def dim(self) -> int:
        return int(self.vector_rows().shape[1])

    def vector_rows(self) -> np.ndarray:
        """:attr:`node_vectors` as the value holds them: one array, or after an update a
        :class:`~psirag.vector_rows.RowStack` that reads like one (rows by index, slices,
        ``np.take``) without joining its parts. Typed as an array for its readers: give it
        to nothing that converts it whole (``np.asarray``), which copies every row."""
        return cast(np.ndarray, IndexData.__dict__["node_vectors"].held(self))

    @cached_property
    def documents(self) -> tuple[str, ...]:
        """Document ids in corpus order (the first chunk of each)."""
        return tuple(dict.fromkeys(c.source.document for c in self.chunks))

    def first_documents(self, k: int) -> list[str]:
        """The first ``k`` document ids in corpus order, reading chunks only until they are
        found (a message's examples: not the whole list of :attr:`documents`)."""
        if "documents" in self.__dict__:
            return list(self.documents[:k])
        out: dict[str, None] = {}
        for i in range(len(self.chunks)):
            if len(out) >= k:
                break
            out.setdefault(self.chunks[i].source.document, None)
        return list(out)

    @cached_property
    def document_index(self) -> DocumentIndex:
        """The documents' questions an update asks (count, membership, leaves of a document),
        answered from :attr:`document_keys` without decoding chunks; without them the keys
        are made from the chunks here (an index saved before them decodes every chunk once,
        and its next save keeps them), or, for stored ids not in NFC, from the document list."""
        from psirag.document_keys import KeyedDocuments, ListedDocuments, keys_of

        keys = self.document_keys if self.document_keys is not None else keys_of(self.chunks)
        if keys is None:
            return ListedDocuments(self)
        return KeyedDocuments(keys[0], keys[1], self.chunks)

    def leaf_document_keys(self) -> tuple[np.ndarray, int] | None:
        """Per leaf, its document's key, and the number of documents (what a save keeps);
        None: the stored ids are not all in NFC, so the index has none."""
        from psirag.document_keys import KeyedDocuments

        found = self.document_index
        return (found.keys, found.count) if isinstance(found, KeyedDocuments) else None

    @cached_property
    def leaf_documents(self) -> np.ndarray:
        """The document id of every leaf (an object array, for masks by ``np.isin``)."""
        return np.array([c.source.document for c in self.chunks], dtype=object)

    def node_text(self, node: int) -> str:
        n = self.tree.n_leaves
        return self.chunks[node].text if node < n else self.abstracts[node - n]

    def replace(self, **changes: Any) -> IndexData:
        """A new value with some fields changed (derived views are recomputed); a phrase
        table not made yet is carried over as it is."""
        if "phrase_table" not in changes:
            changes["phrase_table"] = IndexData.__dict__["phrase_table"].held(self)
        if {"tree", "node_vectors", "abstracts"} & set(changes):
            changes.setdefault("inner_rows", None)  # the carried rows may not hold them now
            changes.setdefault("inner_ids", None)
        if {"tree", "node_vectors"} & set(changes):
            changes.setdefault("inner_norms", None)  # they were the old vectors' norms
        if "chunks" in changes:
            changes.setdefault("document_keys", None)  # made again from the new chunks
        if "node_vectors" not in changes:  # as held: not joined by the copy
            changes["node_vectors"] = self.vector_rows()
        return replace(self, **changes)


def _join_on_read() -> None:
    """Make :attr:`IndexData.node_vectors` a :class:`_JoinedOnRead` (set after the dataclass
    is made, so that the field stays a required one of type ``np.ndarray``)."""
    joined = _JoinedOnRead()
    joined.__set_name__(IndexData, "node_vectors")
    IndexData.node_vectors = joined  # type: ignore[assignment]


_join_on_read()


__all__ = [
    "LAST_NUMBER",
    "BuildStats",
    "Deferred",
    "IndexData",
    "SavedOrigin",
    "fresh_lineage",
    "last_number",
    "numbered_id",
]
