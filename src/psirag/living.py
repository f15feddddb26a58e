"""The living index: add and remove documents without a rebuild (SPEC 4, paper App. G).

An update runs the build pipeline's stages on what changed only: new chunks are chunked and
embedded, the tree is changed by :mod:`psirag.tree.update`, and only the inner nodes whose
subtree changed (the dirty ancestors) get new routing vectors and abstracts, parents after
children, each exactly what a full recompute over the new tree gives that node, except that a
big node's keyword abstract may wait until enough of its leaves changed
(:class:`AbstractDriftRule`, a stated bound). Every other node keeps its abstract and vector
(a clean node's keyword abstract is not re-scored against the new corpus-wide counts: that
drift is what the rebuild rule bounds). What the corpus-wide
parts need is kept per leaf, so an update works on its own chunks only: the keyword phrase
table (:mod:`psirag.abstracts.phrases`) extracts phrases from the new leaves and adds or
subtracts their counts, and BM25's counts (document frequencies, chunk count, total length)
are adjusted by the changed chunks only, their postings kept in segments with tombstones; idf
is applied at query time, so the scores are those a fresh build gives. The result is a new immutable
:class:`IndexData`; the old value stays valid for readers holding it.

Document ids stay unique across everything added: a new document whose id is taken by a
different document is renamed (``notes.txt`` from another folder becomes ``b/notes.txt``'s
file name plus a number, a JSON record ``3`` of a second file ``b.json:3``); one with the
same id and the same text is already there and is skipped (reported, no duplicate).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np

from psirag.embed import Embedder
from psirag.errors import EmbedderMismatchError, IndexFormatError, InputError
from psirag.index_data import LAST_NUMBER, IndexData, last_number, numbered_id
from psirag.ingest import Document
from psirag.pipeline import (
    Corpus,
    chunk_documents,
    document_sources,
    embed_chunks,
    leaf_graph,
    load_corpus,
    long_leaves,
    routing_rows,
    sparse_index,
    write_abstracts,
)
from psirag.retrieval.leaf_graph import usearch_available
from psirag.rows import LazyRows, PickedRows
from psirag.tree import Tree, build_tree
from psirag.tree.build import renumber_order, reorder, resolve_tree_mode
from psirag.tree.model import carried_leaf_counts
from psirag.tree.update import (
    InsertRule,
    RebuildRule,
    RehomeHint,
    TreeUpdate,
    insert_leaves,
    remove_leaves,
)
from psirag.types import Chunk
from psirag.vector_rows import RowOverlay, RowStack, without_rows
from psirag.vector_rows import appended as appended_rows

if TYPE_CHECKING:
    from psirag.abstracts.phrases import PhraseTable
    from psirag.document_keys import DocumentIndex
    from psirag.retrieval.bm25 import Postings
    from psirag.retrieval.duplicates import DuplicateMap
    from psirag.retrieval.leaf_graph import LeafGraph
    from psirag.storage import IndexReader, IndexStore

__all__ = [
    "EXACT_ABSTRACTS",
    "AbstractDriftRule",
    "Compaction",
    "SavedUpdate",
    "UpdateSummary",
    "add_documents",
    "compact_saved",
    "document_digests",
    "drift_report",
    "rehearse_update",
    "remove_documents",
    "update_saved",
]


@dataclass
class UpdateSummary:
    """What an update changed and what it cost (the CLI prints it; ``to_dict`` is its JSON)."""

    added: list[str] = field(default_factory=list)
    """Document ids added (after renaming)."""
    removed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Documents not added because the same document (id and text) is already indexed."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Given id -> the id it got, for new documents whose id was taken by another document."""
    chunks_added: int = 0
    chunks_removed: int = 0
    nodes_refreshed: int = 0
    """Inner nodes whose abstract and routing vector were recomputed."""
    abstracts_waiting: int = 0
    """Changed inner nodes whose keyword abstract the drift rule let stay (vector refreshed)."""
    tree: dict[str, int] = field(default_factory=dict)
    """How the tree changed (chunks by insert path, subtrees grafted, nodes re-homed, splits)."""
    llm_calls: int = 0
    llm_cached: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    full_rebuild: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed) or self.full_rebuild

    def merge(self, other: UpdateSummary) -> UpdateSummary:
        """Two updates as one (a sync is a remove then an add)."""
        out = UpdateSummary(
            added=self.added + other.added,
            removed=self.removed + other.removed,
            skipped=self.skipped + other.skipped,
            renamed={**self.renamed, **other.renamed},
            chunks_added=self.chunks_added + other.chunks_added,
            chunks_removed=self.chunks_removed + other.chunks_removed,
            nodes_refreshed=self.nodes_refreshed + other.nodes_refreshed,
            abstracts_waiting=self.abstracts_waiting + other.abstracts_waiting,
            llm_calls=self.llm_calls + other.llm_calls,
            llm_cached=self.llm_cached + other.llm_cached,
            full_rebuild=self.full_rebuild or other.full_rebuild,
        )
        for counts in (self.tree, other.tree):
            for k, n in counts.items():
                out.tree[k] = out.tree.get(k, 0) + n
        for seconds in (self.seconds, other.seconds):
            for k, t in seconds.items():
                out.seconds[k] = out.seconds.get(k, 0.0) + t
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents_added": len(self.added),
            "documents_removed": len(self.removed),
            "documents_skipped": len(self.skipped),
            "added": self.added[:100],
            "removed": self.removed[:100],
            "skipped": self.skipped[:100],
            "renamed": dict(list(self.renamed.items())[:100]),
            "chunks_added": self.chunks_added,
            "chunks_removed": self.chunks_removed,
            "nodes_refreshed": self.nodes_refreshed,
            "abstracts_waiting": self.abstracts_waiting,
            "tree": dict(self.tree),
            "llm_calls": self.llm_calls,
            "llm_cached": self.llm_cached,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "full_rebuild": self.full_rebuild,
        }


@dataclass(frozen=True)
class AbstractDriftRule:
    """When an update may leave a changed node's keyword abstract as it is (issue 24).

    A keyword abstract of a node over most of the corpus is scored from every leaf under it:
    refreshing the root's after each one-document add cost 14.7 of 18.8 s at 200k chunks.
    Every inner node counts the leaves that entered or left its subtree since its abstract was
    last scored (its drift). A dirty node of at least ``min_leaves`` leaves keeps its abstract
    and its routing vector while that count is at most ``share`` of its leaves; past it, or
    for a smaller node, both are computed again at once, exactly as a full recompute over the
    current tree gives.

    Bound: every keyword abstract and routing vector is the exact one its node had when its
    leaf set differed from today's by at most ``max(share * leaves, 0)`` leaves for nodes of
    ``min_leaves`` or more, and by none for smaller ones (a clean node's abstract is not
    rescored for the corpus-wide counts either; the rebuild rule bounds that). Rescoring a big
    node costs in proportion to its leaves and happens once per ``share`` of them changed, so
    its cost per changed leaf is constant (at 1M chunks, the leaf means of the root and its
    children took 0.36 s of each one-document add). ``share=0`` recomputes every dirty node
    (the exact behaviour). LLM abstracts are always rescored (they are paid per call, not per
    leaf).
    """

    share: float = 0.02
    min_leaves: int = 2000

    def __post_init__(self) -> None:
        if not (0.0 <= self.share < 1.0) or self.min_leaves < 1:
            raise ValueError(
                f"abstract drift rule needs 0 <= share < 1 and min_leaves >= 1, got {self}"
            )

    def may_wait(self, drift: np.ndarray, leaves: np.ndarray) -> np.ndarray:
        """Per node: whether its abstract may stay as it is."""
        return (leaves >= self.min_leaves) & (drift <= self.share * leaves)


EXACT_ABSTRACTS = AbstractDriftRule(share=0.0)
"""Rescore every changed node's abstract at once."""


def _changed_leaves(
    old: Tree,
    new: Tree,
    node_map: np.ndarray,
    nodes: np.ndarray,
    olds: np.ndarray,
    moved: np.ndarray | None = None,
) -> np.ndarray:
    """For each new-tree node ``nodes[i]`` that was old node ``olds[i]``: how many leaves
    entered or left its subtree (the size of the two leaf sets' symmetric difference).

    With ``moved`` (:attr:`TreeUpdate.moved`), from the few leaves that can have moved: see
    :func:`_moved_leaves_count`. Without it, per layer, from each leaf's ancestor there
    (:attr:`Tree.leaf_ancestors`): a leaf is in both sets when its old ancestor maps to its new
    one. Array passes, no sparse membership of either tree."""
    out = np.zeros(nodes.size, dtype=np.int64)
    if nodes.size == 0:
        return out
    if moved is not None:
        return _moved_leaves_count(old, new, node_map, nodes, moved)
    leaf_map = node_map[: old.n_leaves]
    kept = leaf_map >= 0
    moved_to = leaf_map[kept]
    old_anc, new_anc = old.leaf_ancestors, new.leaf_ancestors
    layers = np.asarray(new.layer[nodes], dtype=np.int64)
    for lv in np.unique(layers).tolist():
        before = old_anc[lv - 1] if lv <= old_anc.shape[0] else np.full(old.n_leaves, -1)
        now = new_anc[lv - 1] if lv <= new_anc.shape[0] else np.full(new.n_leaves, -1)
        count_old = np.bincount(before[before >= 0], minlength=old.n_nodes)
        count_new = np.bincount(now[now >= 0], minlength=new.n_nodes)
        was_under = before[kept]
        mapped = np.where(was_under >= 0, node_map[np.maximum(was_under, 0)], -1)
        is_under = now[moved_to]
        both = (mapped >= 0) & (mapped == is_under)
        common = np.bincount(is_under[both], minlength=new.n_nodes)
        here = layers == lv
        u, v = nodes[here], olds[here]
        out[here] = count_new[u] + count_old[v] - 2 * common[u]
    return out


def _moved_leaves_count(
    old: Tree, new: Tree, node_map: np.ndarray, nodes: np.ndarray, moved: np.ndarray
) -> np.ndarray:
    """:func:`_changed_leaves` from the nodes an update moved, in time proportional to the change.

    A leaf that is not new and none of whose new ancestors is new or moved has every ancestor
    it had. So only the leaves under a moved node (in the new tree: they may have entered a
    node; under its old self in the old tree: they may have left one) and the removed leaves
    can count, and of those only the ones under a moved node with a counted node above it.
    For each such leaf, its old ancestors (mapped to new ids) and its new ones, a few steps up
    each tree."""
    counted = np.zeros(nodes.size, dtype=np.int64)
    wanted = set(nodes.tolist())
    n_old, n_new = old.n_leaves, new.n_leaves
    gone = np.flatnonzero(node_map[:n_old] < 0)  # removed leaves, ascending
    # a new leaf's old id: kept leaves keep their order
    skip = gone - np.arange(gone.size)

    def old_leaf(leaves: np.ndarray) -> np.ndarray:
        out = leaves + np.searchsorted(skip, leaves, side="right")
        return np.where(leaves < n_old - gone.size, out, -1)

    inner_map = node_map[n_old:]
    back = np.full(new.n_nodes - n_new, -1, dtype=np.int64)  # new abstract id -> old id
    has = inner_map >= 0
    back[inner_map[has] - n_new] = n_old + np.flatnonzero(has)

    def above(tree: Tree, u: int, mapping: np.ndarray | None) -> bool:
        """Whether a counted node is above ``u`` (old tree: ``mapping`` to new ids)."""
        u = int(tree.parent[u])
        while u >= 0:
            if (int(mapping[u]) if mapping is not None else u) in wanted:
                return True
            u = int(tree.parent[u])
        return False

    now_side: list[np.ndarray] = [np.empty(0, dtype=np.int64)]
    old_side: list[np.ndarray] = [gone]
    for x in moved.tolist():
        if above(new, x, None):
            now_side.append(new.leaves_below(x))
        o = int(old_leaf(np.asarray([x]))[0]) if x < n_new else int(back[x - n_new])
        if o >= 0 and above(old, o, node_map):
            old_side.append(old.leaves_below(o))
    from_old = np.unique(np.concatenate(old_side))
    kept_old = from_old[node_map[from_old] >= 0]
    now_leaves = np.unique(np.concatenate([*now_side, node_map[kept_old]]))
    # every candidate as its old leaf (-1: new) and its new leaf (-1: removed)
    as_old = np.concatenate([old_leaf(now_leaves), from_old[node_map[from_old] < 0]])
    as_new = np.concatenate([now_leaves, np.full(as_old.size - now_leaves.size, -1)])
    layers = np.asarray(new.layer[nodes], dtype=np.int64)
    for lv in range(1, int(layers.max(initial=0)) + 1):
        has = as_old >= 0
        as_old[has] = old.parent[as_old[has]]
        has = as_new >= 0
        as_new[has] = new.parent[as_new[has]]
        here = np.flatnonzero(layers == lv)
        if here.size == 0:
            continue
        mapped = np.where(as_old >= 0, node_map[np.maximum(as_old, 0)], -1)
        for i in here.tolist():
            u = int(nodes[i])
            counted[i] = int(np.count_nonzero((mapped == u) != (as_new == u)))
    return counted


# ------------------------------------------------------------------ documents


def _digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


def document_digests(chunks: Sequence[Chunk]) -> dict[str, str]:
    """Per document id, a hash of its chunk texts in order: the same document gives the same
    digest whenever it is chunked with the same settings."""
    by_doc: dict[str, list[str]] = {}
    for c in chunks:
        by_doc.setdefault(c.source.document, []).append(c.text)
    return {d: _digest(texts) for d, texts in by_doc.items()}


def _free_id(wanted: str, doc: Document, taken: _Taken) -> str:
    """A new id for a document whose id is taken: a record of another file gets that file's
    name in front, a text given directly the next free number (past every number the index
    has held: :data:`~psirag.index_data.LAST_NUMBER`, no list of the ids), then ``#2``,
    ``#3``..."""
    if doc.path is None and (k := numbered_id(wanted)) is not None:
        return str(max(k, taken.last_number()) + 1)
    base = wanted
    if doc.path is not None and doc.is_record:
        base = f"{Path(doc.path).name}:{wanted}"
        if base not in taken:
            return base
    k = 2
    while f"{base}#{k}" in taken:
        k += 1
    return f"{base}#{k}"


# ------------------------------------------------------------------ carrying per-node data


@dataclass
class _State:
    """An index's per-node data while an update changes the tree: stale entries are marked
    ``dirty`` (ids of this tree) and recomputed once at the end."""

    tree: Tree
    chunks: Sequence[Chunk]
    """The leaves' chunks: the loaded rows (not decoded) with new chunks after them."""
    leaf_vectors: np.ndarray
    """The leaves' vectors: the loaded ones (a memory map), and after an add a
    :class:`~psirag.vector_rows.RowStack` of those and the appended rows (a buffer with spare
    rows): an add copies none of the loaded ones."""
    abstracts: Sequence[str]
    """The inner nodes' abstracts: after :meth:`apply`, a :class:`PickedRows` over the
    loaded ones (not read) with the changed nodes' own texts."""
    inner: np.ndarray
    """The inner nodes' vectors (node ``n_leaves + i`` is row ``i``); the loaded ones are read
    only, and may be a :class:`~psirag.vector_rows.RowStack` of the saved rows. :meth:`apply`
    and :meth:`refresh` make a :class:`~psirag.vector_rows.RowOverlay` over them: only new and
    changed rows are written."""
    dirty: np.ndarray
    phrases: PhraseTable | None = None
    """Keyword abstracts' phrase table of ``chunks`` (None: built at refresh)."""
    terms: Postings | None = None
    """BM25 counts of ``chunks`` (None: counted at refresh)."""
    drift: np.ndarray | None = None
    """Per node of ``tree``: leaves changed under it since its abstract was scored."""
    fresh: np.ndarray | None = None
    """Nodes that must get an abstract now (new nodes: nothing to keep)."""
    seconds: dict[str, float] = field(default_factory=dict)
    duplicates: DuplicateMap | None = None
    """BM25's duplicate map of the leading ``chunks`` while no leaf was removed (None: made
    again over every chunk at refresh)."""
    removed: bool = False
    """Whether leaves were removed (the corpus-wide "nothing to index" check runs again)."""
    rows: np.ndarray | None = None
    """Per node of ``tree``, the saved origin's inner row that still holds it unchanged (-1:
    a leaf, or new or changed since; see :attr:`IndexData.inner_rows`); None: not known."""
    ids: np.ndarray | None = None
    """Per node of ``tree``, its stable id (:attr:`IndexData.inner_ids`; -1: a leaf, or new
    or changed since: it gets a new id at the end)."""
    next_id: int = 0
    norms: np.ndarray | None = None
    """Per inner node, the sum norm of its routing vector (:attr:`IndexData.inner_norms`,
    carried and refreshed with the vector; None: not known)."""

    @classmethod
    def of(cls, data: IndexData) -> _State:
        n = data.tree.n_leaves
        keywords = data.config.abstracts == "keywords"
        inner_ids, next_id = data.stable_ids()
        rows = data.vector_rows()  # not joined: an update's leaf and inner rows stay apart
        return cls(
            data.tree,
            data.chunks,
            _float32_rows(rows[:n]),
            data.abstracts,
            _float32_rows(rows[n:]),  # read only, not joined: apply makes an overlay
            np.empty(0, dtype=np.int64),
            data.phrase_table if keywords else None,
            _postings(data),
            np.concatenate(
                [
                    np.zeros(n, dtype=np.int64),
                    np.zeros(data.tree.n_nodes - n, dtype=np.int64)
                    if data.abstract_drift is None
                    else np.asarray(data.abstract_drift, dtype=np.int64),
                ]
            ),
            np.empty(0, dtype=np.int64),
            duplicates=data.sparse.duplicates,
            rows=_inner_rows(data),
            ids=np.concatenate([np.full(n, -1, dtype=np.int64), inner_ids]),
            next_id=next_id,
            norms=None if data.config.routing != "leaf_mean" else data.inner_norms,
        )

    @property
    def vectors(self) -> np.ndarray:
        """Every node's vector, leaves then inner nodes, as one :class:`RowStack` (not
        joined)."""
        return cast(np.ndarray, RowStack.of(self.leaf_vectors, self.inner))

    def rehome_hint(self) -> RehomeHint | None:
        """What lets a removal's re-home rule out candidates by their stored vectors (None:
        no norms known); waiting and new nodes' vectors are stale."""
        if self.norms is None:
            return None
        assert self.drift is not None and self.fresh is not None
        stale = np.union1d(np.flatnonzero(self.drift > 0), self.fresh).astype(np.int64)
        return RehomeHint(self.inner, self.norms, stale)

    def _timed(self, key: str, t0: float) -> None:
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0

    def keep_leaves(self, keep: np.ndarray) -> None:
        """The per-leaf phrase table and term counts without the leaves not in ``keep``."""
        kept_all = bool(keep.all()) if keep.dtype == bool else keep.size == self.tree.n_leaves
        if not kept_all:  # positions move: the map of the kept texts, from their key hashes
            mask = keep if keep.dtype == bool else np.isin(np.arange(self.tree.n_leaves), keep)
            t0 = time.perf_counter()
            self.duplicates = None if self.duplicates is None else self.duplicates.kept(mask)
            self._timed("bm25", t0)
            self.removed = True
        t0 = time.perf_counter()
        if self.phrases is not None:
            self.phrases = self.phrases.remove(keep)
        self._timed("abstracts", t0)
        t0 = time.perf_counter()
        if self.terms is not None:
            self.terms = self.terms.remove(keep)
        self._timed("bm25", t0)

    def append_leaves(self, texts: list[str]) -> None:
        """The per-leaf phrase table and term counts with new leaves at the end."""
        t0 = time.perf_counter()
        if self.phrases is not None:
            self.phrases = self.phrases.add(texts)
        self._timed("abstracts", t0)
        t0 = time.perf_counter()
        if self.terms is not None:
            self.terms = self.terms.add(texts)
        self._timed("bm25", t0)

    def apply(
        self,
        update: TreeUpdate,
        chunks: Sequence[Chunk],
        leaf_vectors: np.ndarray,
        appended: np.ndarray | None = None,
    ) -> None:
        """Move to ``update.tree``: every node's abstract and vector taken over from its old
        node (``node_map``); new and changed nodes, and the old dirty ones, marked dirty.
        The leaves' vectors are ``leaf_vectors`` then ``appended`` (appended to a buffer: the
        leaves' rows are not copied); the inner nodes' rows an overlay over the old ones (kept
        rows are not copied either)."""
        tree = update.tree
        n_old, n_new = self.tree.n_leaves, tree.n_leaves
        counts = carried_leaf_counts(self.tree, tree, update.node_map, update.dirty)
        if counts is not None:  # the drift rule reads them: no pass over the subtrees
            tree.__dict__["leaf_counts"] = counts
        leaves = _float32_rows(leaf_vectors)
        if appended is not None:
            leaves = cast(np.ndarray, appended_rows(leaves, appended))
        if leaves.shape[0] != n_new:
            raise ValueError(f"{leaves.shape[0]} leaf vectors for a tree of {n_new} leaves")
        old_inner = np.arange(n_old, self.tree.n_nodes)
        target = update.node_map[old_inner]
        keep = target >= n_new
        pick = np.full(tree.n_nodes - n_new, -1, dtype=np.int64)  # new nodes: "" for now
        pick[target[keep] - n_new] = old_inner[keep] - n_old
        abstracts = PickedRows(self.abstracts, pick, {}, "")
        inner = _moved_rows(self.inner, pick)
        carried = update.node_map[self.dirty] if self.dirty.size else self.dirty
        carried = carried[carried >= n_new]
        assert self.drift is not None and self.fresh is not None
        drift = np.zeros(tree.n_nodes, dtype=np.int64)
        drift[target[keep]] = self.drift[old_inner[keep]]
        fresh = update.node_map[self.fresh] if self.fresh.size else self.fresh
        was = np.full(tree.n_nodes, -1, dtype=np.int64)
        was[target[keep]] = old_inner[keep]
        dirty = np.asarray(update.dirty, dtype=np.int64)
        kept = dirty[was[dirty] >= 0]
        drift[kept] += _changed_leaves(
            self.tree, tree, update.node_map, kept, was[kept], update.moved
        )
        self.fresh = np.union1d(fresh[fresh >= n_new], dirty[was[dirty] < 0]).astype(np.int64)
        if self.rows is not None:  # a node keeps its saved row until refresh changes it
            rows = np.full(tree.n_nodes, -1, dtype=np.int64)
            rows[target[keep]] = self.rows[old_inner[keep]]
            self.rows = rows
        if self.ids is not None:  # and its id (new nodes have none yet)
            ids = np.full(tree.n_nodes, -1, dtype=np.int64)
            ids[target[keep]] = self.ids[old_inner[keep]]
            self.ids = ids
        if self.norms is not None:  # with its vector (new nodes: none until refresh)
            norms = np.full(tree.n_nodes - n_new, np.nan, dtype=np.float32)
            norms[target[keep] - n_new] = self.norms[old_inner[keep] - n_old]
            self.norms = norms
        self.drift = drift
        self.tree, self.chunks, self.leaf_vectors = tree, chunks, leaves
        self.abstracts, self.inner = abstracts, inner
        self.dirty = np.union1d(update.dirty, carried).astype(np.int64)

    def inner_ids(self) -> tuple[np.ndarray, int] | None:
        """The inner nodes' stable ids after the update: kept ones as they were, new and
        changed ones numbered on from ``next_id`` in node order."""
        if self.ids is None:
            return None
        ids = self.ids[self.tree.n_leaves :].copy()
        new = np.flatnonzero(ids < 0)
        ids[new] = self.next_id + np.arange(new.size)
        return ids, self.next_id + int(new.size)

    def refresh(
        self,
        config: Any,
        embedder: Embedder | None,
        llm: Any,
        summary: UpdateSummary,
        progress: bool,
        rule: AbstractDriftRule = AbstractDriftRule(),
    ) -> Any:
        """Recompute the abstracts and routing vectors of the dirty nodes (parents after
        children), each exactly as a full recompute over this tree; rescore BM25 from the
        term counts."""
        tree = self.tree
        n = tree.n_leaves
        # Only the dirty nodes: a clean node's keyword abstract also reads corpus-wide counts
        # (idf) and its parent's, which any update shifts a little; refreshing the siblings of
        # every dirty node too tripled the refreshed nodes on 2Wiki for that drift.
        assert self.drift is not None and self.fresh is not None
        refresh = self.dirty
        waiting = np.empty(0, dtype=np.int64)
        if config.abstracts == "keywords" and refresh.size and rule.share > 0:
            leaves = tree.leaf_counts[refresh]
            wait = rule.may_wait(self.drift[refresh], leaves) & ~np.isin(refresh, self.fresh)
            waiting, refresh = refresh[wait], refresh[~wait]
        leaf_texts = _LeafTexts(self.chunks)
        t0 = time.perf_counter()
        if config.abstracts == "keywords" and self.phrases is None:
            from psirag.abstracts.phrases import PhraseTable

            self.phrases = PhraseTable.build(leaf_texts)  # an index saved without one
        if refresh.size:
            written = write_abstracts(
                tree,
                leaf_texts,
                config,
                nodes=refresh.tolist(),
                current=self.abstracts,
                llm=llm,
                progress=progress,
                table=self.phrases,
            )
            own = {u - n: text for u, text in zip(refresh.tolist(), written.texts, strict=True)}
            self.abstracts = _with_texts(self.abstracts, own)
            summary.llm_calls += int(written.llm.get("calls", 0) or 0)
            summary.llm_cached += int(written.llm.get("cached", 0) or 0)
        summary.seconds["abstracts"] = time.perf_counter() - t0 + self.seconds.get("abstracts", 0.0)
        self.drift[refresh] = 0
        self.fresh = np.empty(0, dtype=np.int64)
        # routing vectors of the rescored nodes; a waiting node keeps its vector with its
        # abstract (a leaf mean over most of the corpus costs a pass over it per update)
        vectors_of = np.asarray(refresh, dtype=np.int64)
        if self.rows is not None:  # their saved rows no longer hold them
            self.rows[vectors_of] = -1
        if self.ids is not None:  # nor are they the nodes those ids named
            self.ids[vectors_of] = -1
        t0 = time.perf_counter()
        if vectors_of.size:
            if int(vectors_of.min()) < n:
                raise ValueError("refresh recomputes inner nodes only")
            rows, norms = routing_rows(
                tree, self.leaf_vectors, self.abstracts, config, embedder, nodes=vectors_of.tolist()
            )
            # the changed rows only: the others stay where they are (the loaded rows)
            over = RowOverlay.over(self.inner).with_rows(vectors_of - n, rows)
            self.inner = cast(np.ndarray, over)
            # (an index without norms gets none here: only a build or a compaction, which
            # check every leaf against the bound's length, starts them)
            if norms is not None and self.norms is not None:
                if not self.norms.flags.writeable:
                    self.norms = np.array(self.norms)
                self.norms[vectors_of - n] = norms
        summary.seconds["routing"] = time.perf_counter() - t0
        summary.nodes_refreshed = int(refresh.size)
        summary.abstracts_waiting = int(waiting.size)
        t0 = time.perf_counter()
        from psirag.retrieval.bm25 import Postings, SparseIndex, TermCounts, check_indexable

        if self.terms is None:  # an index saved without term counts
            counts = TermCounts.of(leaf_texts)
            self.terms = Postings.of_counts(counts, k1=config.bm25_k1, b=config.bm25_b)
        if self.removed and self.duplicates is not None:  # what a removal left must be indexable
            check_indexable(leaf_texts)
        sparse = SparseIndex.from_postings(self.terms, leaf_texts, appended_to=self.duplicates)
        summary.seconds["bm25"] = time.perf_counter() - t0 + self.seconds.get("bm25", 0.0)
        return sparse


def _moved_rows(rows: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """The inner nodes' rows after an update: row ``i`` is row ``pick[i]`` of ``rows`` (-1: a
    new node, zeros until refresh). A :class:`~psirag.vector_rows.RowOverlay` over the
    loaded rows: the update copies an ``int64`` per row and writes the new rows only, not
    every kept vector (issue 24). Once the overlay holds more rows of its own than it names,
    its rows are joined into one array (a copy that many updates' changes pay for)."""
    over = RowOverlay.over(rows)
    new = np.flatnonzero(pick < 0)
    index = pick.copy()
    index[new] = -1 - np.arange(new.size, dtype=np.int64)
    moved = over.moved(index, np.zeros((new.size, over.shape[1]), dtype=over.dtype))
    if moved.own_rows > max(_JOIN_OWN_ROWS, moved.shape[0]):
        return np.asarray(moved)
    return cast(np.ndarray, moved)


_JOIN_OWN_ROWS = 1 << 16
"""Own rows an inner nodes' overlay keeps at least before they are joined (see
:func:`_moved_rows`)."""


def _float32_rows(rows: np.ndarray) -> np.ndarray:
    """``rows`` as float32: as they are (a :class:`RowStack` too, not joined) when they are."""
    return rows if rows.dtype == np.float32 else np.asarray(rows, dtype=np.float32)


def _inner_rows(data: IndexData) -> np.ndarray | None:
    """Per node, the saved row that holds it (:attr:`IndexData.inner_rows`, -1 for leaves);
    None when ``data`` carries none for its origin."""
    carried = data.inner_rows
    n = data.tree.n_leaves
    if carried is None or data.origin is None or carried[0] is not data.origin:
        return None
    if carried[1].shape != (data.tree.n_nodes - n,):
        return None
    return np.concatenate([np.full(n, -1, dtype=np.int64), np.asarray(carried[1], np.int64)])


class _LeafTexts(Sequence[str]):
    """The leaves' texts, read where used: an add's refresh reads its new leaves' texts only
    (the duplicate map, the phrase table and the BM25 counts keep the rest), so it need not
    touch every chunk."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self._chunks = chunks

    def __len__(self) -> int:
        return len(self._chunks)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [c.text for c in self._chunks[i]]
        return self._chunks[i].text


def rehearse_update(
    data: IndexData,
    busy: Callable[[], bool],
    *,
    leaves: int,
    trees: int,
    node_leaves: int,
) -> dict[str, Any]:
    """Make, and drop, what a one-document add of ``leaves`` chunks makes, reading ``data`` only:
    ``trees`` tree insertions of copies of indexed leaves' vectors (each kept until the last is
    made) and the keyword abstracts of one leaf's ancestors of at most ``node_leaves`` leaves,
    stopping between steps when ``busy()``. What a server's writer thread runs after its start
    (:mod:`psirag.server.rehearsal`), so that its first add finds its heap grown. Returns
    ``tree_s`` and ``abstracts_s`` (None: not done), ``nodes`` scored and ``stopped``."""
    out: dict[str, Any] = {"tree_s": None, "abstracts_s": None, "nodes": 0, "stopped": False}
    if busy():
        out["stopped"] = True
        return out
    tree, config = data.tree, data.config
    if not config.tree_per_document and tree.roots.size == 1:
        t0 = time.perf_counter()
        state = _State.of(data)
        vectors = np.asarray(state.leaf_vectors[np.arange(leaves)], dtype=np.float32)
        graph = data.leaf_graph
        points = None if graph is None else graph.nearest(vectors, state.leaf_vectors)
        # the first tree kept meanwhile: a server's second add makes its tree while the
        # first add's is served, so the heap it finds must hold two
        kept = [
            insert_leaves(
                state.tree,
                state.leaf_vectors,
                vectors,
                max_children=config.max_children,
                node_vectors=state.vectors,
                stale=state.fresh,
                nearest=points,
            )
            for _ in range(trees)
        ]
        del state, kept
        out["tree_s"] = round(time.perf_counter() - t0, 3)
    table = data.phrase_table
    if config.abstracts != "keywords" or table is None:
        return out
    from psirag.abstracts.keywords import keyword_abstracts

    t0 = time.perf_counter()
    texts = _LeafTexts(data.chunks)
    counts = tree.leaf_counts
    path = []
    u = int(tree.parent[tree.n_leaves // 2])
    while u >= 0:
        if counts[u] <= node_leaves:
            path.append(u)
        u = int(tree.parent[u])
    for u in path:
        if busy():
            out["stopped"] = True
            break
        keyword_abstracts(texts, tree, max_phrases=config.max_keywords, nodes=[u], table=table)
        out["nodes"] += 1
    out["abstracts_s"] = round(time.perf_counter() - t0, 3)
    return out


def _postings(data: IndexData) -> Postings | None:
    """The BM25 counts an update adjusts: the index's own, or made from the term counts an
    index saved before them kept (None: the chunks are tokenised at refresh)."""
    sparse = data.sparse
    if sparse.postings is not None:
        return sparse.postings
    counts = sparse.counts
    if counts is None:
        return None
    from psirag.retrieval.bm25 import Postings

    return Postings.of_counts(counts, k1=data.config.bm25_k1, b=data.config.bm25_b)


def _lineage(
    data: IndexData, added: int, removed: int, number: int | None = None
) -> dict[str, int]:
    """``data``'s lineage after one more update; ``number``: the highest numbered id now
    known (None: the one ``data`` kept, if any)."""
    old = dict(data.lineage) or {"built_leaves": data.tree.n_leaves}
    lineage = {
        "built_leaves": int(old.get("built_leaves", data.tree.n_leaves)),
        "added": int(old.get("added", 0)) + added,
        "removed": int(old.get("removed", 0)) + removed,
        "updates": int(old.get("updates", 0)) + 1,
    }
    if number is None:
        number = old.get(LAST_NUMBER)
    if number is not None:
        lineage[LAST_NUMBER] = int(number)
    return lineage


def _kept_number(data: IndexData) -> dict[str, int]:
    """The lineage's :data:`LAST_NUMBER` of ``data``, if it has one (a rebuild keeps it)."""
    number = data.lineage.get(LAST_NUMBER)
    return {} if number is None else {LAST_NUMBER: int(number)}


def drift_report(data: IndexData, rule: RebuildRule | None = None) -> dict[str, Any]:
    """Updates since the last full build and whether the rebuild rule says one is due."""
    return drift_of_lineage(data.lineage, data.tree.n_leaves, rule)


def drift_of_lineage(
    lineage: Mapping[str, Any], n_leaves: int, rule: RebuildRule | None = None
) -> dict[str, Any]:
    """:func:`drift_report` from a manifest's ``lineage`` and leaf count (no index loaded)."""
    rule = rule or RebuildRule()
    lin = dict(lineage) or {"built_leaves": n_leaves}
    built = int(lin.get("built_leaves", n_leaves))
    added, removed = int(lin.get("added", 0)), int(lin.get("removed", 0))
    return {
        "built_leaves": built,
        "leaves_added": added,
        "leaves_removed": removed,
        "updates": int(lin.get("updates", 0)),
        "churn": round(rule.churn(built, added, removed), 4),
        "max_churn": rule.max_churn,
        "rebuild_due": rule.due(built, added, removed),
    }


# ------------------------------------------------------------------ tree per document


def _append_trees(
    tree: Tree, vectors: np.ndarray, groups: list[np.ndarray], config: Any
) -> TreeUpdate:
    """A tree-per-document forest with one new tree per group of new leaves (rows of
    ``vectors``, numbered after the old leaves): the builder's tree of each group, appended."""
    n_old = tree.n_leaves
    parents = [tree.parent[:n_old]]
    layers = [tree.layer[:n_old]]
    inner_p = [tree.parent[n_old:]]
    inner_l = [tree.layer[n_old:]]
    # ids while building: old leaves, new leaves, old inner, then each new tree's inner nodes
    m = sum(g.size for g in groups)
    n_all = n_old + m
    inner_start = n_all + (tree.n_nodes - n_old)
    remap_old = np.concatenate([np.arange(n_old), np.arange(n_all, n_all + tree.n_nodes - n_old)])
    parents[0] = np.where(parents[0] >= 0, remap_old[np.maximum(parents[0], 0)], -1)
    inner_p[0] = np.where(inner_p[0] >= 0, remap_old[np.maximum(inner_p[0], 0)], -1)
    new_leaf_parent = np.full(m, -1, dtype=np.int64)
    new_leaf_layer = np.zeros(m, dtype=np.int32)
    extra_p: list[np.ndarray] = []
    extra_l: list[np.ndarray] = []
    start = inner_start
    for g in groups:
        mode = resolve_tree_mode(config.tree_mode, int(g.size))
        sub = build_tree(
            vectors[g - n_old],
            max_children=config.max_children,
            mode=mode,
            neighbors=config.tree_neighbors,
        )
        k = sub.n_leaves
        ids = np.concatenate([g, np.arange(start, start + sub.n_nodes - k)])
        sp = np.where(sub.parent >= 0, ids[np.maximum(sub.parent, 0)], -1)
        new_leaf_parent[g - n_old] = sp[:k]
        extra_p.append(sp[k:])
        extra_l.append(sub.layer[k:])
        start += sub.n_nodes - k
    parent = np.concatenate([parents[0], new_leaf_parent, inner_p[0], *extra_p]).astype(np.int64)
    layer = np.concatenate([layers[0], new_leaf_layer, inner_l[0], *extra_l]).astype(np.int64)
    order = renumber_order(layer, n_all)
    new_tree = reorder(parent, layer, order)
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    node_map = position[remap_old]
    mapped = set(node_map.tolist())
    dirty = np.array([u for u in range(n_all, new_tree.n_nodes) if u not in mapped], dtype=np.int64)
    return TreeUpdate(
        tree=new_tree,
        node_map=node_map.astype(np.int64),
        dirty=dirty,
        new_leaves=np.arange(n_old, n_all, dtype=np.int64),
        counts={"trees_added": len(groups)},
    )


# ------------------------------------------------------------------ add and remove


def add_documents(
    data: IndexData,
    corpus: Corpus,
    embedder: Embedder,
    **options: Any,
) -> tuple[IndexData, UpdateSummary]:
    """``data`` with the documents of ``corpus`` added (see the module docstring)."""
    return update_documents(data, [], corpus, embedder, **options)


def remove_documents(
    data: IndexData,
    doc_ids: Sequence[str],
    embedder: Embedder | None,
    *,
    llm: Any = None,
    progress: bool = False,
    drift_rule: AbstractDriftRule | None = None,
) -> tuple[IndexData, UpdateSummary]:
    """``data`` without the documents ``doc_ids`` (every one must be in the index)."""
    if isinstance(doc_ids, str):
        doc_ids = [doc_ids]
    if not list(doc_ids):
        raise InputError("no document id given to remove; name at least one (--doc ID)")
    return update_documents(
        data, doc_ids, None, embedder, llm=llm, progress=progress, drift_rule=drift_rule
    )


def update_documents(
    data: IndexData,
    remove: Sequence[str],
    corpus: Corpus | None,
    embedder: Embedder | None,
    *,
    texts: bool = False,
    llm: Any = None,
    progress: bool = False,
    on_bad_file: str = "fail",
    rule: InsertRule = "auto",
    report: Any = None,
    drift_rule: AbstractDriftRule | None = None,
) -> tuple[IndexData, UpdateSummary]:
    """Remove the documents ``remove``, then add those of ``corpus`` (a re-indexed file is
    both), changing the tree twice but refreshing the dirty nodes and BM25 once.
    ``drift_rule``: which changed keyword abstracts may wait (default
    :class:`AbstractDriftRule`; :data:`EXACT_ABSTRACTS` rescores them all)."""
    config = data.config
    if corpus is not None and embedder is not None and embedder.id != data.embedder_id:
        raise EmbedderMismatchError(
            f"this index was built with embedder {data.embedder_id!r}, the documents to add "
            f"would be embedded with {embedder.id!r}; vectors of two models cannot share a "
            f"tree. Add with the index's own embedder ({config.embedder!r}) or rebuild."
        )
    from psirag.ids import some

    # the documents' questions are answered from per-leaf keys: no chunk is decoded but those
    # of the documents asked about
    directory = data.document_index
    wanted, missing = directory.match(remove) if remove else ([], [])
    n_known = directory.count
    if missing:
        sample = ", ".join(repr(d) for d in _first_documents(data.chunks, 5))
        raise InputError(
            f"unknown document id(s) [{some(missing)}]: this index holds {n_known:,} documents "
            f"(e.g. {sample}); `psirag inspect DIR --json` lists the counts, nothing was removed"
        )
    if wanted and len(wanted) >= n_known:
        raise InputError(
            f"removing all {n_known:,} documents would leave an empty index; nothing was "
            "removed (build a new index instead)"
        )
    summary = UpdateSummary()
    documents: list[Document] = []
    sources = dict(data.sources)
    if corpus is not None:
        t0 = time.perf_counter()
        documents = load_corpus(corpus, texts=texts, on_bad_file=on_bad_file, report=report)
        summary.seconds["chunking"] = time.perf_counter() - t0
    state = _State.of(data)
    graph = data.leaf_graph if data.leaf_graph is not None and usearch_available() else None
    if wanted:
        t0 = time.perf_counter()
        gone = directory.leaves_of(wanted)
        leaf_ids = np.flatnonzero(gone)
        update = remove_leaves(
            state.tree,
            leaf_ids,
            state.leaf_vectors,
            max_children=config.max_children,
            check_vectors=False,
            hint=state.rehome_hint(),
        )
        keep = np.flatnonzero(~gone)
        # the kept leaves' vectors as views of their runs: none copied
        kept_vectors = cast(np.ndarray, without_rows(state.leaf_vectors, leaf_ids))
        state.apply(update, _kept(state.chunks, keep), kept_vectors)
        summary.seconds["tree"] = time.perf_counter() - t0
        state.keep_leaves(~gone)  # timed as abstracts and bm25
        if graph is not None:  # tombstones, so that the insertion below can search the graph
            graph = graph.updated(~gone, None, fold=False)
        summary.tree = dict(update.counts)
        summary.removed = wanted
        summary.chunks_removed = int(leaf_ids.size)
        for d in wanted:
            sources.pop(d, None)
    new_chunks: list[Chunk] = []
    truncated = 0
    number: int | None = None  # the highest numbered id, when _admit knows it
    if documents:
        t0 = time.perf_counter()
        left = _Left(directory, wanted)  # the documents indexed and not removed
        documents, number = _admit(data, sources, documents, summary, left)
        new_chunks = chunk_documents(documents, config, progress=progress) if documents else []
        summary.seconds["chunking"] = summary.seconds.get("chunking", 0.0) + (
            time.perf_counter() - t0
        )
    if new_chunks:
        if embedder is None:
            raise InputError("adding documents needs an embedder")
        clash = _known_chunk_ids(data.chunks, _Left(directory, wanted), new_chunks)
        if clash:  # cannot happen with unique document ids; a guard for hand-made Documents
            raise InputError(
                f"chunk id {clash[0]} is already in the index; give the document a new id"
            )
        t0 = time.perf_counter()
        embedded = embed_chunks(new_chunks, embedder, progress=progress)
        truncated = embedded.truncated
        if state.norms is not None and long_leaves(embedded.vectors):
            state.norms = None  # RehomeHint's bound counts on short leaves
        summary.seconds["embedding"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        n_old = state.tree.n_leaves
        if config.tree_per_document:
            doc_of = np.array([c.source.document for c in new_chunks], dtype=object)
            groups = [n_old + np.flatnonzero(doc_of == d) for d in dict.fromkeys(doc_of.tolist())]
            update = _append_trees(state.tree, embedded.vectors, groups, config)
        else:
            # the insertion point through the HNSW graph where there is one, else by descent
            # over the stored routing vectors (new nodes of a removal in this same update have
            # none yet: they are `fresh`)
            points = None if graph is None else graph.nearest(embedded.vectors, state.leaf_vectors)
            update = insert_leaves(
                state.tree,
                state.leaf_vectors,
                embedded.vectors,
                max_children=config.max_children,
                rule=rule,
                mode=resolve_tree_mode(config.tree_mode, len(new_chunks)),
                neighbors=config.tree_neighbors,
                node_vectors=state.vectors,
                stale=state.fresh,
                nearest=points,
            )
        # insert_leaves keeps the old leaf ids and appends the new ones in input order
        state.apply(
            update,
            _appended(state.chunks, new_chunks),
            state.leaf_vectors,
            appended=np.asarray(embedded.vectors, dtype=np.float32),
        )
        summary.seconds["tree"] = summary.seconds.get("tree", 0.0) + time.perf_counter() - t0
        state.append_leaves([c.text for c in new_chunks])  # timed as abstracts and bm25
        for k, v in update.counts.items():
            summary.tree[k] = summary.tree.get(k, 0) + v
        sources.update(document_sources(documents, new_chunks))
        summary.added = [d.id for d in documents]
        summary.chunks_added = len(new_chunks)
    if not wanted and not new_chunks:
        return data, summary
    sparse = state.refresh(
        config, embedder, llm, summary, progress, drift_rule or AbstractDriftRule()
    )
    t0 = time.perf_counter()
    graph = _updated_graph(graph, embedded.vectors if new_chunks else None, state.leaf_vectors)
    if graph is not None:
        summary.seconds["hnsw"] = time.perf_counter() - t0
    assert state.drift is not None
    inner_drift = state.drift[state.tree.n_leaves :]
    n_docs = n_known - len(wanted) + len(documents)
    stats = replace(data.stats, documents=n_docs, truncated=data.stats.truncated + truncated)
    keys = _updated_keys(directory, None if not wanted else ~gone, len(wanted), new_chunks)
    new = IndexData(
        config=config,
        chunks=state.chunks,
        tree=state.tree,
        node_vectors=state.vectors,
        abstracts=state.abstracts,
        sparse=sparse,
        embedder_id=data.embedder_id,
        stats=stats,
        sources=sources,
        lineage=_lineage(data, len(new_chunks), summary.chunks_removed, number),
        phrase_table=state.phrases,
        origin=data.origin,
        abstract_drift=inner_drift if inner_drift.any() else None,
        leaf_graph=graph,
        inner_rows=None
        if state.rows is None or data.origin is None
        else (data.origin, state.rows[state.tree.n_leaves :]),
        inner_ids=state.inner_ids(),
        document_keys=keys,
        inner_norms=state.norms,
    )
    if "documents" in data.__dict__:  # listed already: the kept ones keep their order and
        # the new ones come after them, so the list is not made again from every chunk
        near = None  # where the removed leaves began: the documents' positions are near
        if wanted:
            runs = np.flatnonzero(np.diff(leaf_ids) != 1) + 1
            scale = len(data.documents) / max(data.tree.n_leaves, 1)
            near = leaf_ids[np.concatenate(([0], runs))] * scale
        kept_ids = _without_ids(data.documents, wanted, near)
        new.__dict__["documents"] = kept_ids + tuple(
            dict.fromkeys(c.source.document for c in new_chunks)
        )
    return new, summary


_FEW_REMOVED = 8
"""Removed documents up to which :func:`_without_ids` finds each one's position."""


def _without_ids(
    ids: tuple[str, ...], gone: Sequence[str], near: np.ndarray | None = None
) -> tuple[str, ...]:
    """``ids`` without those in ``gone``, in order. A few removed: each one's position found
    and the rest joined by slices (8 ms at 200k documents: the new tuple's references), not
    a Python test per document (about 50 ms); looked for first around the positions ``near``
    suggests (where the removed leaves began, scaled to documents: exact with a chunk per
    document), then by a scan of all (25 ms at 200k)."""
    if not gone:
        return ids
    hints = [] if near is None else [int(p) for p in near[:_FEW_REMOVED].tolist()]

    def position(d: str) -> int:
        for p in hints:
            for w in (64, 4096):
                try:
                    return ids.index(d, max(0, p - w), p + w + 1)
                except ValueError:
                    pass
        return ids.index(d)

    if len(gone) <= _FEW_REMOVED:
        try:
            at = sorted({position(d) for d in gone})
        except ValueError:  # not listed: the filter below says what stays
            at = None
        if at is not None:
            out: tuple[str, ...] = ids[: at[0]]
            for a, b in zip(at, [*at[1:], len(ids)], strict=True):
                out += ids[a + 1 : b]
            return out
    drop = set(gone)
    return tuple(d for d in ids if d not in drop)


def _updated_graph(
    graph: LeafGraph | None, new_vectors: np.ndarray | None, leaf_vectors: np.ndarray
) -> LeafGraph | None:
    """The leaves' HNSW graph after an update: ``graph`` (the old one, removed leaves already
    tombstoned) with the new leaves in its delta, folded into a new base when the changes are
    due (:func:`psirag.retrieval.leaf_graph.fold_limit`), or, for an index without one that
    is now past the exact scan's size, a new one when usearch is installed."""
    if graph is not None:
        return graph.updated(None, new_vectors)
    return leaf_graph(leaf_vectors)


def _admit(
    data: IndexData,
    sources: dict[str, dict[str, Any]],
    documents: list[Document],
    summary: UpdateSummary,
    indexed: _Left,
) -> tuple[list[Document], int | None]:
    """Skip documents already indexed, refuse a changed file given to ``add``, rename new
    documents whose id another document holds. ``indexed``: the documents of ``data`` that
    stay. Also returns the highest numbered id with the admitted ones (None: ``data``'s
    lineage does not know it and no rename needed it)."""
    chunks, config = data.chunks, data.config
    # digests only of the indexed documents a new one shares an id with (hashing every chunk
    # of the corpus cost more than the rest of a small add's chunking)
    asked = indexed.present([d.id for d in documents])
    mine = np.flatnonzero(indexed.leaves_of(sorted(asked))).tolist() if asked else []
    existing = document_digests([chunks[i] for i in mine]) if asked else {}
    held = data.lineage.get(LAST_NUMBER)
    taken = _Taken(indexed, {d.id for d in documents}, None if held is None else int(held))
    out: list[Document] = []
    kept: set[str] = set()
    for doc in documents:
        if doc.id in existing:
            mine_digest = document_digests(chunk_documents([doc], config)).get(doc.id)
            if mine_digest == existing[doc.id]:
                summary.skipped.append(doc.id)
                if doc.path is not None and doc.id not in sources:
                    sources[doc.id] = {"path": doc.path, "sha256": doc.sha256}
                continue
            known = sources.get(doc.id, {})
            if doc.path is not None and known.get("path") == doc.path:
                raise InputError(
                    f"{doc.path}: document {doc.id!r} is already indexed with other content "
                    "(the file changed since); re-index it with `psirag sync`, or remove it "
                    "first (`psirag remove DIR --doc ID`)"
                )
        if doc.id in asked or doc.id in kept:
            new_id = _free_id(doc.id, doc, taken)
            summary.renamed[doc.id] = new_id
            doc = replace(doc, id=new_id)
        taken.add(doc.id)
        kept.add(doc.id)
        out.append(doc)
    return out, taken.last


class _Left:
    """The documents an update keeps: indexed (``directory``) and not ``removed``."""

    def __init__(self, directory: DocumentIndex, removed: Sequence[str]) -> None:
        self.directory = directory
        self.removed = set(removed)

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        """Those of ``doc_ids`` that are kept (one pass over the keys for all of them)."""
        return self.directory.present([d for d in doc_ids if d not in self.removed])

    def __contains__(self, doc_id: object) -> bool:
        return doc_id not in self.removed and doc_id in self.directory

    def leaves_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        return self.directory.leaves_of([d for d in doc_ids if d not in self.removed])

    def every_id(self) -> set[str]:
        return self.directory.every_id() - self.removed


class _Taken:
    """Ids a renamed document may not get: the kept documents' and the new ones' so far, and
    every number up to the highest numbered id the index has held."""

    def __init__(self, indexed: _Left, new: set[str], last: int | None = None) -> None:
        self.indexed = indexed
        self.new = new
        self.last = last
        """The highest numbered id of the index and the new ids (None: not known yet)."""

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.new or doc_id in self.indexed

    def add(self, doc_id: str) -> None:
        self.new.add(doc_id)
        number = numbered_id(doc_id)
        if number is not None and self.last is not None:
            self.last = max(self.last, number)

    def last_number(self) -> int:
        """:attr:`last`; for an index saved before the lineage kept it, found once from every
        indexed id (the update then keeps it)."""
        if self.last is None:
            self.last = last_number(self.indexed.every_id() | self.new)
        return self.last


def _known_chunk_ids(chunks: Sequence[Chunk], left: _Left, new_chunks: list[Chunk]) -> list[str]:
    """Ids of ``new_chunks`` that a kept chunk already has. A chunk id hashes its document id
    and text, so only the chunks of a kept document of the same id can have it: those are
    read, not every chunk (``_admit`` renames such documents: a guard for hand-made ones)."""
    docs = list(dict.fromkeys(c.source.document for c in new_chunks))
    known = {chunks[i].id for i in np.flatnonzero(left.leaves_of(docs)).tolist()}
    return [c.id for c in new_chunks if c.id in known]


def _first_documents(chunks: Sequence[Chunk], k: int) -> list[str]:
    """The first ``k`` document ids in corpus order (for a message), reading few chunks."""
    out: dict[str, None] = {}
    for i in range(len(chunks)):
        out.setdefault(chunks[i].source.document, None)
        if len(out) >= k:
            break
    return list(out)


def _with_texts(abstracts: Sequence[str], texts: dict[int, str]) -> PickedRows[str]:
    """``abstracts`` with the items ``texts`` (position -> text) replaced, none read."""
    if isinstance(abstracts, PickedRows):
        return PickedRows(abstracts.base, abstracts.pick, {**abstracts.own, **texts}, "")
    return PickedRows(abstracts, np.arange(len(abstracts)), texts, "")


def _kept(chunks: Sequence[Chunk], keep: np.ndarray) -> Sequence[Chunk]:
    """The chunks at positions ``keep`` (ascending), a loaded sequence's rows not read."""
    if isinstance(chunks, LazyRows):
        return chunks.take(keep)
    return tuple(chunks[i] for i in keep.tolist())


def _appended(chunks: Sequence[Chunk], new: Sequence[Chunk]) -> Sequence[Chunk]:
    """``chunks`` then ``new``, a loaded sequence's rows not read."""
    if isinstance(chunks, LazyRows):
        return chunks + new
    return tuple(chunks) + tuple(new)


def _updated_keys(
    directory: DocumentIndex, keep: np.ndarray | None, removed: int, new_chunks: Sequence[Chunk]
) -> tuple[np.ndarray, int] | None:
    """The document keys after an update: the kept leaves' (``keep``: a mask; None: all),
    then the new chunks'; with the count less ``removed`` documents plus the new ones; None
    where the index has none."""
    from psirag.document_keys import KeyedDocuments, keys_of

    if not isinstance(directory, KeyedDocuments):
        return None
    keys = directory.keys if keep is None else directory.keys[keep]
    count = directory.count - removed
    if new_chunks:
        added = keys_of(new_chunks)
        if added is None:
            return None
        keys = np.concatenate([keys, added[0]])
        count += added[1]
    return keys, count


# ------------------------------------------------------------------ full rebuilds


def rebuild_data(
    data: IndexData, embedder: Embedder | None, *, llm: Any = None, progress: bool = False
) -> tuple[IndexData, UpdateSummary]:
    """A fresh tree, abstracts, routing and BM25 over the index's chunks and their stored leaf
    embeddings: what a full build of the same documents gives (chunking is per document and
    deterministic), without re-embedding. Resets the drift lineage."""
    from psirag.pipeline import build_chunk_tree

    summary = UpdateSummary(full_rebuild=True)
    config = data.config
    n = data.tree.n_leaves
    leaf_vectors = np.asarray(data.vector_rows()[:n], dtype=np.float32)
    chunks = list(data.chunks)
    t0 = time.perf_counter()
    built = build_chunk_tree(leaf_vectors, chunks, config, progress=progress)
    summary.seconds["tree"] = time.perf_counter() - t0
    leaf_texts = [c.text for c in chunks]
    t0 = time.perf_counter()
    abstracts = write_abstracts(built.tree, leaf_texts, config, llm=llm, progress=progress)
    summary.seconds["abstracts"] = time.perf_counter() - t0
    summary.llm_calls = int(abstracts.llm.get("calls", 0) or 0)
    summary.llm_cached = int(abstracts.llm.get("cached", 0) or 0)
    t0 = time.perf_counter()
    vectors, norms = routing_rows(built.tree, leaf_vectors, abstracts.texts, config, embedder)
    if norms is not None and long_leaves(leaf_vectors):
        norms = None
    summary.seconds["routing"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sparse = sparse_index(leaf_texts, config)
    summary.seconds["bm25"] = time.perf_counter() - t0
    summary.nodes_refreshed = built.tree.n_nodes - n
    from psirag.pipeline import fresh_lineage

    new = IndexData(
        config=config,
        chunks=tuple(chunks),
        tree=built.tree,
        node_vectors=vectors,
        abstracts=tuple(abstracts.texts),
        sparse=sparse,
        embedder_id=data.embedder_id,
        stats=replace(data.stats, tree_mode=built.mode, llm=abstracts.llm),
        sources=dict(data.sources),
        lineage={**fresh_lineage(n), **_kept_number(data)},
        phrase_table=abstracts.table,
        origin=data.origin,
        leaf_graph=data.leaf_graph or leaf_graph(leaf_vectors),  # same leaves, same graph
        inner_norms=norms,
    )
    return new, summary


def rebuild_from_files(
    data: IndexData,
    files: Sequence[Any],
    embedder: Embedder,
    *,
    llm: Any = None,
    progress: bool = False,
) -> tuple[IndexData, UpdateSummary]:
    """A full build of ``files`` (paths or documents) with the index's config (a sync that
    replaces everything)."""
    from psirag.pipeline import build_index_data

    new, _ = build_index_data(
        list(files), data.config, embedder=embedder, llm=llm, progress=progress
    )
    summary = UpdateSummary(
        added=list(new.documents),
        removed=list(data.documents),
        chunks_added=len(new.chunks),
        chunks_removed=len(data.chunks),
        nodes_refreshed=new.tree.n_nodes - new.tree.n_leaves,
        llm_calls=int(new.stats.llm.get("calls", 0) or 0),
        llm_cached=int(new.stats.llm.get("cached", 0) or 0),
        seconds=dict(new.stats.seconds),
        full_rebuild=True,
    )
    return new, summary


Change = Callable[[IndexData], tuple[IndexData, UpdateSummary]]
"""One update of an index's data: the new value and what changed (nothing: no new generation)."""


@dataclass(frozen=True, eq=False)
class SavedUpdate:
    """What :func:`update_saved` did: the data now on disk (or, unchanged, the data read),
    the change's summary, the generation it published (None: nothing changed, nothing
    written) and whether the folder was in format 1 before (a save migrates it to format 2)."""

    data: IndexData
    summary: UpdateSummary
    generation: int | None
    from_legacy: bool
    save_seconds: float = 0.0
    loaded: bool = True
    """Whether the generation on disk was read (False: the caller's ``base`` was it)."""


def update_saved(
    folder: str | Path,
    change: Change,
    *,
    save: bool = True,
    base: IndexData | None = None,
    wait: float = 0.0,
    collect_later: bool = False,
) -> SavedUpdate:
    """The one update path of a saved index: take the writer lock, load the generation on
    disk, ``change`` it, save the result as the next generation and publish it. Every writer
    (the CLI, the server, :meth:`psirag.Index.update_saved`) goes through here, so a write
    always builds on what is on disk and never loses another writer's change. An exception
    anywhere (in ``change`` too), a change that changes nothing or ``save=False`` (a dry
    run) leaves the published index as it was. ``wait``: seconds to wait for another
    writer's lock before :class:`~psirag.errors.IndexLockedError`. ``collect_later``: delete the
    generations the save retires on a background thread (:meth:`IndexStore.gc`), as a server
    does, so that the request does not wait for it.

    ``base``: data the caller holds in memory (a server's served index). When, under the
    lock, it is the very generation on disk (same folder and generation number), it is
    changed directly and nothing is read; when another process published meanwhile, the
    disk generation is loaded as usual. The saved result names the generation it became
    (:attr:`IndexData.origin`), so it can be the ``base`` of the next update."""
    from psirag.oserrors import saving
    from psirag.storage import IndexWriter
    from psirag.storage_format import load_index_data, save_index_data

    store = _writable_store(folder)
    with IndexWriter(store, wait=wait, collect_later=collect_later) as writer:
        on_disk = writer.base
        from_legacy = on_disk is not None and on_disk.legacy
        loaded = not _is_generation(base, on_disk)
        if base is not None and not loaded:
            data = base
        else:
            data = store.read(
                lambda reader: load_index_data(reader, folder),
                generation=on_disk.generation if on_disk is not None else None,
            )
        new, summary = change(data)
        if not (save and summary.changed):
            return SavedUpdate(data, summary, None, from_legacy, loaded=loaded)
        t0 = time.perf_counter()
        with saving(writer.target, had_index=on_disk is not None):
            generation = save_index_data(writer, new)
        new = as_saved(new, store.folder, generation)
        return SavedUpdate(
            new, summary, generation, from_legacy, time.perf_counter() - t0, loaded=loaded
        )


def as_saved(data: IndexData, folder: str | Path, generation: int) -> IndexData:
    """``data`` as the generation ``generation`` of ``folder`` that it was just saved as: it
    names its origin and the rows that now hold its inner nodes, so the next save on top
    writes only what changes after it (without them every later save wrote everything)."""
    from psirag.index_data import SavedOrigin
    from psirag.storage import IndexStore, _resolve
    from psirag.storage_format import saved_inner_order

    origin = SavedOrigin(str(_resolve(Path(folder))), generation, data.chunks)
    rows = IndexStore(folder).read(saved_inner_order, generation=generation)
    # the vectors as held: dataclasses.replace would read (join) node_vectors
    vectors = data.vector_rows()
    return replace(data, origin=origin, inner_rows=(origin, rows), node_vectors=vectors)


def _writable_store(folder: str | Path) -> IndexStore:
    """The store of an index that an update may write (a clear error for anything else)."""
    from psirag.storage import IndexReader, IndexStore

    store = IndexStore(folder)
    state = store.state()
    if state not in ("index", "legacy"):
        if state in ("missing", "empty", "pending"):
            raise IndexFormatError(
                f"{folder} holds no index; build one first with `psirag index PATH --out {folder}`"
            )
        if state in ("newer", "badversion"):
            IndexReader(folder)  # raises the exact words for that format_version (formats.py)
        raise IndexFormatError(f"{folder} is not a psirag index; build one with `psirag index`")
    return store


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_saved` did."""

    generation: int
    seconds: float
    bytes_before: int
    """Bytes of the generation it started from (every file it lists)."""
    bytes_after: int


def with_sum_norms(data: IndexData) -> IndexData:
    """``data`` with the sum norm of every inner node whose vector is its leaf mean now
    (:attr:`IndexData.inner_norms`): what an index saved before them gets when compacted (a
    pass over the leaves under those nodes, as a build's routing step). A waiting abstract's
    node keeps none (its vector was made for other leaves); another routing has none."""
    tree = data.tree
    n, k = tree.n_leaves, tree.n_nodes - tree.n_leaves
    if data.config.routing != "leaf_mean" or long_leaves(data.vector_rows()[:n]):
        return data
    norms = data.inner_norms
    missing = np.arange(k) if norms is None else np.flatnonzero(np.isnan(norms))
    if data.abstract_drift is not None:
        missing = missing[np.asarray(data.abstract_drift)[missing] == 0]
    if missing.size == 0:
        return data
    # most nodes (an index saved before the norms): the build's product over the whole
    # membership matrix, not a membership row made per node
    nodes = None if 2 * missing.size > k else (n + missing).tolist()
    _, got = routing_rows(
        tree, data.vector_rows()[:n], data.abstracts, data.config, None, nodes=nodes
    )
    assert got is not None
    if nodes is None:
        got = got[missing]
    out = np.full(k, np.nan, dtype=np.float32) if norms is None else np.array(norms)
    out[missing] = got
    return data.replace(inner_norms=out)


def compact_saved(folder: str | Path, *, wait: float = 0.0) -> Compaction:
    """Write the saved index again as a new generation whose tables are each one segment:
    patches applied, removed rows dropped, appended segments merged (``psirag compact``; saves
    also do it on their own for a table whose changes outgrow :data:`psirag.segments.
    COMPACT_FRACTION`). A format 1 or 2 index is migrated to the current format. Garbage
    collection then drops the files no kept generation uses. The same lock, publish and crash
    safety as every update (:func:`update_saved`)."""
    from psirag.oserrors import saving
    from psirag.storage import IndexWriter
    from psirag.storage_format import load_index_data, save_index_data

    store = _writable_store(folder)
    t0 = time.perf_counter()
    with IndexWriter(store, wait=wait) as writer:
        on_disk = writer.base
        if on_disk is None:
            raise IndexFormatError(f"{folder} holds no index to compact")
        before = sum(int(meta.get("bytes", 0)) for meta in on_disk.files.values())
        data = store.read(
            lambda reader: load_index_data(reader, folder), generation=on_disk.generation
        )
        data = with_sum_norms(data)
        with saving(writer.target, had_index=True):
            generation = save_index_data(writer, data, compact=True)
    after = store.read(
        lambda reader: sum(int(meta.get("bytes", 0)) for meta in reader.files.values()),
        generation=generation,
    )
    return Compaction(generation, time.perf_counter() - t0, before, after)


def _is_generation(data: IndexData | None, on_disk: IndexReader | None) -> bool:
    """Whether ``data`` was loaded from (or saved as) the generation ``on_disk`` reads."""
    from psirag.storage import _resolve

    if data is None or on_disk is None or on_disk.legacy or data.origin is None:
        return False
    origin = data.origin
    return origin.generation == on_disk.generation and origin.folder == str(_resolve(on_disk.root))
