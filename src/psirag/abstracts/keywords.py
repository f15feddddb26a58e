"""LLM-free keyword abstracts: key phrases per abstract node, scored like c-TF-IDF (SPEC 1.6).

Every abstract node gets up to ``max_phrases`` phrases that describe its leaves and set it apart
from its siblings (a root: from the rest of the corpus). Following the order the paper's keyword
prompt asks for (App. C.3), broad themes shared by many of the node's leaves come first and
specific entities (capitalised phrases of lower coverage) after.

Speed matters (a few thousand nodes over thousands of leaves in seconds), so the work is done in
bulk: each leaf is tokenised once, every 1-3 word n-gram becomes a column of ONE sparse
leaf x phrase presence matrix, node x phrase leaf counts come from a single sparse product with
the tree's leaf membership, and each node's scores are vectorised numpy over its sparse row.
Python only walks the few dozen best candidates of a node to remove duplicates.

Phrases are keyed by their stemmed lowercase words, so "film", "Film" and "films" are one
candidate (with pooled counts) shown in its most frequent surface form.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from psirag.abstracts.phrase_model import MAX_NGRAM, STOPWORDS, PhraseInfo, Phrases, ids_below
from psirag.heap import give_back_freed_memory
from psirag.retrieval.ranking import top_k
from psirag.tree.model import Tree, gather_ranges

if TYPE_CHECKING:
    import scipy.sparse as sp

    from psirag.abstracts.phrases import PhraseTable

__all__ = ["STOPWORDS", "format_abstract", "keyword_abstracts"]

DIST_POWER = 2.0
"""Exponent of the distinctiveness term: 2 makes a phrase shared evenly with the siblings
weigh a quarter of one found only under this node."""

CANDIDATE_POOL = 8
"""Each node ranks ``CANDIDATE_POOL * max_phrases`` candidates per list before deduplication."""

BROAD_SHARE = 0.5
"""Share of the slots reserved first for broad themes; specific entities fill the rest."""

FRAGMENT_RATIO = 0.6
"""A phrase replaces a chosen word or phrase inside it when it holds at least this share of the
shorter one's leaves in the node; otherwise the longer one is the duplicate."""

NAME_RATIO = 0.25
"""The same for a name and a single word in it: "Mount Etna" replaces "Mount" when the node has
at most four "Mount ..." per "Mount Etna", "American Film Institute" never replaces "American"."""

THEME_MIN_COVERAGE = 0.5
"""An entity covering at least this share of a node's leaves is shown among the broad themes."""

_SCORE_CHUNK = 1 << 20
"""A node with more phrases than this is scored a slice at a time, each slice keeping only its
candidates for the ranked lists: a near-root node of a 1M-leaf corpus holds tens of millions
of phrases, and a dozen float arrays of that length were the build's peak memory."""

_MEMO_KEEP = 1 << 17
"""Phrases a build's per-phrase memos (:func:`_forget`) may hold from one block to the next
(a few tens of MB): a parent, scored in a later block, offers many of its children's."""

_PRODUCT_BUDGET = 1 << 24
"""Phrase entries (leaf rows summed) of the node rows one sparse product makes: the node x
phrase counts of a whole tree repeat each leaf's phrases once per ancestor."""


def format_abstract(phrases: Iterable[str]) -> str:
    """One line of text, comma-separated, as the paper's keyword prompt formats its output."""
    return ", ".join(phrases)


class _LeafRows(NamedTuple):
    """Some nodes' leaves as CSR rows: what an update reads of the membership matrix."""

    indptr: np.ndarray
    indices: np.ndarray


def keyword_abstracts(
    leaf_texts: Sequence[str],
    tree: Tree,
    *,
    max_phrases: int = 20,
    progress: bool = False,
    nodes: Sequence[int] | None = None,
    table: PhraseTable | None = None,
) -> list[list[str]]:
    """Key phrases of every abstract node, in node id order (nodes ``n_leaves .. n_nodes - 1``),
    or of the abstract ``nodes`` given, in their order (what an index update refreshes: a node's
    phrases are the same whichever other nodes are computed with it).

    Each list holds at most ``max_phrases`` distinct phrases: broad themes first, specific
    entities after; at least half of them multi-word when the node has enough multi-word
    candidates. A node whose leaves hold no word with a letter gets an empty list.

    ``table``: the corpus's :class:`~psirag.abstracts.phrases.PhraseTable` when the caller
    keeps one (an index update does), so the leaves are not tokenised again; the result is the
    same as without it.
    """
    if max_phrases < 1:
        raise ValueError(f"max_phrases must be positive, got {max_phrases}")
    n_leaves = tree.n_leaves
    if len(leaf_texts) != n_leaves:
        raise ValueError(f"{len(leaf_texts)} leaf texts for a tree with {n_leaves} leaves")
    if nodes is None:
        targets = np.arange(n_leaves, tree.n_nodes, dtype=np.int64)
        rows = targets
    else:
        targets = np.asarray(nodes, dtype=np.int64).reshape(-1)
        if targets.size and (targets.min() < n_leaves or targets.max() >= tree.n_nodes):
            raise ValueError(f"nodes must be abstract nodes, {n_leaves} .. {tree.n_nodes - 1}")
        # a node's scores read its own leaf counts and its parent's
        parents = tree.parent[targets]
        rows = np.unique(np.concatenate([targets, parents[parents >= 0]]))
    if targets.size == 0:
        return []
    if table is None:
        from psirag.abstracts.phrases import PhraseTable

        table = PhraseTable.build(leaf_texts)
    elif table.n_leaves != n_leaves:
        raise ValueError(f"a phrase table of {table.n_leaves} leaves for {n_leaves} leaves")
    # a few nodes read what their phrases need; every node reads the corpus's layout
    phrases = table.phrases() if nodes is None else table.phrase_view()
    if nodes is None:
        give_back_freed_memory()  # the layout's temporaries, before the products
    if not phrases.lazy and phrases.pid_of.size == 0:
        return [[] for _ in range(targets.size)]

    row_of = {u: i for i, u in enumerate(rows.tolist())}
    whole_tree = tree.leaf_membership[n_leaves:] if nodes is None else None
    membership: Any = (
        _LeafRows(*tree.membership_rows(rows))  # an update: the rows alone, no scipy matrix
        if whole_tree is None
        else whole_tree.astype(np.int32)
    )
    # node x phrase leaf counts, columns by persistent phrase id (unsorted within a row: a
    # parent's counts are read through a dense scratch row, ties break by column id); a node
    # over every leaf (a single tree's root) has the corpus's counts, no product needed
    leaf_counts = np.diff(membership.indptr)  # a membership row marks each leaf once
    global_df = phrases.df
    whole = leaf_counts == n_leaves
    col_of = phrases.col_of
    # children grouped under each parent, so the parent's row is scattered once
    order = np.argsort(tree.parent[targets], kind="stable")
    ordered = targets[order]
    tops: _SingleTops | None = None
    parallel = False
    if nodes is None:  # every node: sparse products, a block of parent groups at a time
        import scipy.sparse as sp  # here: an update's few nodes need no sparse product

        # only phrases of two or more leaves go through the products: one of a single leaf has
        # count 1 in every node over that leaf (and in its parent), so it is read from the
        # leaf's row; a phrase that is not a column is never scored and is left out
        multi, single = _split_leaf_phrases(phrases)
        # each node's single-leaf phrases that can be picked, found a layer at a time
        tops = _SingleTops.build(tree, single, phrases, CANDIDATE_POOL * max_phrases)
        del single
        # scoring reads the split rows from here on: a big table's own rows go out of memory
        moved = table.spill_leaf_phrases()
        if moved is not None:
            phrases = moved
            give_back_freed_memory()
        # two processes take blocks of a quarter the size: finer, so they finish together
        parallel = _scored_in_two_processes(int(targets.size))
        budget = _PRODUCT_BUDGET // PARALLEL_BLOCK_SPLIT if parallel else _PRODUCT_BUDGET
        blocks = _product_blocks(tree, ordered, row_of, membership, whole, multi.ptr, budget)
        # the products' columns: only the phrases of two or more leaves, renumbered in phrase
        # id order (a product keeps a few arrays as long as its columns: of every phrase, at
        # 1M leaves, they were the stage's peak); its rows are read back as phrase ids
        multi_ids, multi_cols = _compact_columns(phrases, multi.pid)
        leaf_pid = sp.csr_matrix(
            (np.ones(multi_cols.size, dtype=np.int8), multi_cols, multi.ptr),
            shape=(n_leaves, multi_ids.size),
        )
        del multi, multi_cols
        sub_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    else:  # a few nodes (an update): each from its own leaves' rows, no corpus-wide matrix
        blocks = [ordered.size]
        part = np.flatnonzero(~whole)
        sub_rows = {
            int(a): phrases.node_counts(
                membership.indices[membership.indptr[a] : membership.indptr[a + 1]]
            )
            for a in part.tolist()
        }
    every_rows: list[tuple[Any, np.ndarray]] = []
    if whole.any():
        every_rows.append(_every_row(global_df))
    block: dict[int, int] = {}
    # indptr, pids, counts, and the pids as compact columns (what the scratch row reads)
    node_df: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def node_row(a: int) -> tuple[Any, np.ndarray]:
        if whole[a]:
            return every_rows[0]
        if nodes is not None:
            return sub_rows[a]
        assert node_df is not None
        b = block[a]
        indptr, ids, counts, _ = node_df
        lo, hi = indptr[b], indptr[b + 1]
        return ids[lo:hi], counts[lo:hi]

    def node_cols(a: int) -> np.ndarray:
        """A product row's phrases as compact columns (``multi_ids`` positions)."""
        assert node_df is not None
        b = block[a]
        indptr, _, _, compact = node_df
        return compact[indptr[b] : indptr[b + 1]]

    # the parent's counts of a build's product rows, by compact column: those rows hold only
    # the phrases of two or more leaves (a few % of the corpus's), and a node over every leaf
    # reads the corpus's counts, not this row
    scratch = np.zeros(multi_ids.size, dtype=np.int32) if nodes is None else None
    every_multi = global_df[multi_ids] if scratch is not None and whole.any() else global_df[:0]
    # what a product row's phrases score with, by compact column, made once
    idf_multi = multi_words = None
    if scratch is not None:
        idf_multi = np.log((1.0 + n_leaves) / (1.0 + global_df[multi_ids])) + 1.0
        multi_words = phrases.words[multi_ids] > 1
    every_col = scratch is None or bool((col_of[multi_ids] >= 0).all())
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=int(targets.size), desc="keyword abstracts", unit="node")

    def score_blocks(spans: Iterable[tuple[int, int]], bar: Any) -> dict[int, list[str]]:
        """The phrases of the nodes ``ordered[start:stop]`` of each span (whole blocks)."""
        nonlocal block, node_df
        done: dict[int, list[str]] = {}
        current = -2
        parent_pids: Any = np.empty(0, dtype=np.int64)
        parent_cols: np.ndarray | slice = np.empty(0, dtype=np.int64)  # in ``scratch``
        with _collector_paused():  # many small objects; a full pass over a big heap is slow
            for start, stop in spans:
                chunk = ordered[start:stop].tolist()
                if nodes is None:
                    needed = _block_rows(tree, chunk, row_of, whole)
                    block = {a: i for i, a in enumerate(needed.tolist())}
                    # the block before's parent row is not read again: let its products go, and
                    # the per-phrase memos its nodes filled (a 1M-leaf build offers millions)
                    _forget(phrases, _MEMO_KEEP)
                    give_back_freed_memory()
                    if scratch is not None:
                        scratch[parent_cols] = 0
                    current, parent_pids = -2, np.empty(0, dtype=np.int64)
                    parent_cols = np.empty(0, dtype=np.int64)
                    node_df = None
                    product = (membership[needed] @ leaf_pid).tocsr()
                    ids = multi_ids[product.indices]
                    node_df = (product.indptr, ids, product.data, product.indices)
                    del product, ids
                for u in chunk:
                    p = int(tree.parent[u])
                    if p != current:
                        if scratch is not None:
                            scratch[parent_cols] = 0
                            parent_cols = np.empty(0, dtype=np.int64)
                        if p >= 0:
                            r_p = int(row_of[p])
                            parent_pids, pdata = node_row(r_p)
                            if scratch is not None and whole[r_p]:
                                parent_cols = slice(None)
                                scratch[parent_cols] = every_multi
                            elif scratch is not None:
                                parent_cols = node_cols(r_p)
                                scratch[parent_cols] = pdata
                        else:
                            parent_pids = np.empty(0, dtype=np.int64)
                        current = p
                    r_u = int(row_of[u])
                    pids, data = node_row(r_u)
                    # a product row's compact columns (scratch's positions); a node over every
                    # leaf has a parent over every leaf too (or none): it reads the corpus's
                    u_cols = node_cols(r_u) if scratch is not None and not whole[r_u] else None
                    n_u = float(leaf_counts[r_u])
                    if bar is not None:
                        bar.update(1)
                    # a root compares with the rest of the corpus (nothing, for a single tree)
                    n_p = float(leaf_counts[row_of[p]]) if p >= 0 else float(n_leaves)
                    # the node's phrases: the product's row (a slice at a time), then the
                    # single-leaf phrases of its leaves that can be picked
                    segments: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = []
                    segments += [
                        (
                            pids[lo : lo + _SCORE_CHUNK],
                            data[lo : lo + _SCORE_CHUNK],
                            None if u_cols is None else u_cols[lo : lo + _SCORE_CHUNK],
                        )
                        for lo in range(0, pids.size, _SCORE_CHUNK)
                    ]
                    n_total = pids.size
                    n_multi = 0
                    if tops is not None and not whole[r_u]:
                        # the single-leaf phrases of its leaves: each is held by one leaf here
                        # and in the parent (or the corpus), every one scores the same and ties
                        # go to the lower column, so only the lowest columns of each ranked
                        # list can be picked (:class:`_SingleTops`)
                        code = tops.row(u)
                        if code.size:
                            segments.append((code, None, None))
                        n_total += int(tops.n_all[u])
                        n_multi += int(tops.n_multi[u])
                    if not segments:
                        segments.append((pids, data, u_cols))
                    parts = []
                    for c_pids, c_data, c_compact in segments:
                        if c_data is None:  # single-leaf phrases (column codes), all columns
                            cols = c_pids >> 2
                            c_pids = phrases.pid_of[cols]
                            df_u = np.ones(c_pids.size, dtype=np.float64)
                            df_p = np.ones(c_pids.size, dtype=global_df.dtype)
                        elif c_compact is not None:  # a product row
                            assert idf_multi is not None and multi_words is not None
                            cols = col_of[c_pids]
                            if not every_col:  # (a build's products hold only columns)
                                kept = cols >= 0
                                c_pids, cols = c_pids[kept], cols[kept]
                                c_data, c_compact = c_data[kept], c_compact[kept]
                            df_u = c_data.astype(np.float64)
                            if p >= 0:
                                assert scratch is not None
                                df_p = scratch[c_compact]
                            else:
                                df_p = global_df[c_pids]
                            n_multi += int(np.count_nonzero(multi_words[c_compact]))
                            idf_u = idf_multi[c_compact]
                        else:
                            cols = col_of[c_pids]
                            kept = cols >= 0
                            c_pids, cols = c_pids[kept], cols[kept]
                            df_u = c_data[kept].astype(np.float64)
                            if p >= 0:
                                # a parent's row holds every phrase of its child's (sorted when read
                                # per node)
                                if whole[r_u]:
                                    df_p = global_df[c_pids]
                                else:
                                    df_p = pdata[parent_pids.searchsorted(c_pids)]
                            else:
                                df_p = global_df[c_pids]
                            n_multi += int(np.count_nonzero(phrases.words[c_pids] > 1))
                        if c_compact is None:
                            idf_u = np.log((1.0 + n_leaves) / (1.0 + global_df[c_pids])) + 1.0
                        arrays = (c_pids, cols, df_u, df_p, idf_u)
                        if n_total > _SCORE_CHUNK and c_pids.size:  # a big node: keep candidates
                            at = _candidates(phrases, arrays, n_u, n_p, max_phrases)
                            arrays = tuple(a[at] for a in arrays)
                        parts.append(arrays)
                    node = tuple(np.concatenate(a) for a in zip(*parts, strict=True))
                    if node[0].size == 0 or n_u == 0:
                        done[u] = []
                        continue
                    c_pids, cols, df_u, df_p, idf_u = node
                    done[u] = _node_phrases(
                        phrases,
                        c_pids,
                        cols,
                        df_u,
                        n_u,
                        df_p,
                        n_p,
                        idf_u,
                        max_phrases,
                        n_multi=n_multi,
                    )
        return done

    spans = list(zip([0, *blocks[:-1]], blocks, strict=True))
    if nodes is None and len(spans) > 1 and parallel:
        done = _in_two_processes(score_blocks, spans, bar)
    else:
        done = score_blocks(spans, bar)
    node_df = None
    _forget(phrases)
    if bar is not None:
        bar.close()
    return [done[u] for u in targets.tolist()]


PARALLEL_MIN_NODES = 20_000
"""A build's keyword abstracts of at least this many nodes are scored by two processes (this
one and a forked child, each taking the next block of nodes), on a machine of two or more
cores where ``os.fork`` exists; ``PSIRAG_PARALLEL_ABSTRACTS=0`` turns it off."""


PARALLEL_BLOCK_SPLIT = 4
"""Blocks scored by two processes hold this fraction of :data:`_PRODUCT_BUDGET` entries."""


def _scored_in_two_processes(n_nodes: int) -> bool:
    return (
        n_nodes >= PARALLEL_MIN_NODES
        and hasattr(os, "fork")
        and sys.platform.startswith("linux")
        and (os.cpu_count() or 1) >= 2
        and os.environ.get("PSIRAG_PARALLEL_ABSTRACTS", "1") != "0"
    )


def _in_two_processes(
    score: Callable[[Iterable[tuple[int, int]], Any], dict[int, list[str]]],
    spans: list[tuple[int, int]],
    bar: Any,
) -> dict[int, list[str]]:
    """``score`` over every span, by this process and a forked child, each taking the next
    span not taken yet (a shared counter), so the two finish together however the machine's
    other work is spread. A node's phrases depend only on its block's rows (each block makes
    its own), so the result is the one process's. The child writes its nodes' phrases to a
    temporary file (JSON) and exits; the spans of a child that fails are scored here."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("q", 0)

    mine: list[int] = []  # the spans this process took (the child took the others)

    def taken() -> Iterator[tuple[int, int]]:
        while True:
            with counter.get_lock():
                i = int(counter.value)
                counter.value = i + 1
            if i >= len(spans):
                return
            mine.append(i)
            yield spans[i]

    fd, path = tempfile.mkstemp(prefix="psirag-abstracts-", suffix=".json")
    os.close(fd)
    try:
        pid = os.fork()
        if pid == 0:  # the child: score, write, leave without running the parent's exit code
            code = 1
            try:
                got = score(taken(), None)
                with open(path, "w", encoding="utf-8") as fh:
                    json.dump([[u, phrases] for u, phrases in got.items()], fh)
                code = 0
            finally:
                os._exit(code)
        done = score(taken(), bar)
        _, status = os.waitpid(pid, 0)
        if status == 0:
            with open(path, encoding="utf-8") as fh:
                child = {int(u): phrases for u, phrases in json.load(fh)}
            if bar is not None:
                bar.update(len(child))
            done.update(child)
        else:  # the child's spans are scored here
            took = set(mine)
            done.update(score([sp for i, sp in enumerate(spans) if i not in took], bar))
        return done
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


class _LeafPhrases:
    """Some of each leaf's phrases, CSR by leaf (``ptr``: n_leaves + 1, ``pid``)."""

    def __init__(self, ptr: np.ndarray, pid: np.ndarray) -> None:
        self.ptr = ptr
        self.pid = pid


@dataclass
class _SingleTops:
    """Per node, the single-leaf phrases of its leaves that can enter its ranked lists, as
    column codes (``col << 2 | entity << 1 | multi-word``), with how many single-leaf phrases
    (and multi-word ones) its leaves hold in all.

    A single-leaf phrase scores the same in every node over its leaf (count 1 there and in the
    parent), so only the lowest columns of a node's ones (of all of them, of the entities, of
    the multi-word ones: :data:`CANDIDATE_POOL` ``* max_phrases`` each) can be picked. Those of
    a node are among those of its children, so they are found a layer at a time from the
    children's (a few hundred each), not from every leaf below: the phrases a node near the
    root would read grow with the corpus."""

    layer: np.ndarray
    start: np.ndarray
    length: np.ndarray
    codes: list[np.ndarray]
    n_all: np.ndarray
    n_multi: np.ndarray

    @classmethod
    def build(cls, tree: Tree, single: _LeafPhrases, phrases: Phrases, k: int) -> _SingleTops:
        """From each leaf's single-leaf phrases (``single``), for every node of ``tree``."""
        n_leaves, n_nodes = tree.n_leaves, tree.n_nodes
        layer = np.asarray(tree.layer, dtype=np.int64)
        code_type = np.int32 if 4 * (int(phrases.pid_of.size) + 1) < 2**31 else np.int64
        # the leaves' rows as codes (a node's rows are in the buffer of its layer)
        leaf_code = np.empty(single.pid.size, dtype=code_type)
        for lo in range(0, single.pid.size, _TOPS_BUDGET):
            pids = single.pid[lo : lo + _TOPS_BUDGET]
            code = phrases.col_of[pids].astype(code_type) << 2
            code |= phrases.entity[pids].astype(code_type) << 1
            code |= (phrases.words[pids] > 1).astype(code_type)
            leaf_code[lo : lo + pids.size] = code
            del pids, code
        start = np.zeros(n_nodes, dtype=np.int64)
        length = np.zeros(n_nodes, dtype=np.int64)
        start[:n_leaves] = single.ptr[:-1]
        length[:n_leaves] = np.diff(single.ptr)
        n_all = np.zeros(n_nodes, dtype=np.int64)
        n_multi = np.zeros(n_nodes, dtype=np.int64)
        n_all[:n_leaves] = length[:n_leaves]
        multi_seen = np.zeros(leaf_code.size + 1, dtype=np.int64)
        np.cumsum(np.bitwise_and(leaf_code, 1), out=multi_seen[1:])
        n_multi[:n_leaves] = multi_seen[single.ptr[1:]] - multi_seen[single.ptr[:-1]]
        del multi_seen
        codes: list[np.ndarray] = [leaf_code]
        offsets, children = tree.children_table
        by_layer = np.argsort(layer[n_leaves:], kind="stable") + n_leaves
        bounds = np.searchsorted(layer[by_layer], np.arange(1, int(layer.max(initial=0)) + 2))
        for lv in range(1, int(layer.max(initial=0)) + 1):
            nodes = by_layer[bounds[lv - 1] : bounds[lv]]
            # each node's children, node by node (a node's are after its parent's in layers)
            kid_ptr = np.concatenate(([0], np.cumsum(offsets[nodes + 1] - offsets[nodes])))
            kids = gather_ranges(children, offsets[nodes], offsets[nodes + 1])
            if kids.size and int(layer[kids].max()) >= lv:
                raise ValueError("tree.layer: a node is not above its children")
            n_all[nodes] = _group_sums(n_all[kids], kid_ptr)
            n_multi[nodes] = _group_sums(n_multi[kids], kid_ptr)
            node_len = _group_sums(length[kids], kid_ptr)
            ends = np.cumsum(node_len)
            parts: list[np.ndarray] = []
            used = 0
            a = 0
            while a < nodes.size:  # a chunk of nodes at a time (bounds the temporaries)
                base = int(ends[a - 1]) if a else 0
                b = max(a + 1, int(np.searchsorted(ends, base + _TOPS_BUDGET, side="right")))
                ka, kb = int(kid_ptr[a]), int(kid_ptr[b])
                sub = kids[ka:kb]
                row_of_kid = np.repeat(np.arange(b - a), np.diff(kid_ptr[a : b + 1]))
                rows, got = [], []
                for kl in np.unique(layer[sub]).tolist():  # the children's rows, by layer
                    at = np.flatnonzero(layer[sub] == kl)
                    lens = length[sub[at]]
                    got.append(gather_ranges(codes[kl], start[sub[at]], start[sub[at]] + lens))
                    rows.append(np.repeat(row_of_kid[at], lens))
                row = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
                code = np.concatenate(got) if got else np.empty(0, dtype=code_type)
                kept, kept_len = _lowest_codes(row, code, b - a, k)
                start[nodes[a:b]] = used + np.concatenate(([0], np.cumsum(kept_len)[:-1]))
                length[nodes[a:b]] = kept_len
                used += kept.size
                parts.append(kept)
                a = b
            codes.append(np.concatenate(parts) if parts else np.empty(0, dtype=code_type))
        codes[0] = np.empty(0, dtype=code_type)  # the leaves' rows are not read again
        return cls(layer, start, length, codes, n_all, n_multi)

    def row(self, node: int) -> np.ndarray:
        """The node's codes (its columns ascending)."""
        s = int(self.start[node])
        return self.codes[int(self.layer[node])][s : s + int(self.length[node])]


_TOPS_BUDGET = 1 << 20
"""Entries :meth:`_SingleTops.build` reads at a time: bounds its temporaries (a few arrays of
8 bytes an entry, about 60 MiB in all)."""


def _lowest_codes(
    row: np.ndarray, code: np.ndarray, n_rows: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Of each row's codes, those among the ``k`` lowest columns of the row, of its entities
    or of its multi-word phrases (a union; by row, ascending), and how many each row keeps."""
    if code.size == 0:
        return code, np.zeros(n_rows, dtype=np.int64)
    span = int(code.max()) + 1
    key = np.sort(row.astype(np.int64) * span + code)
    row = key // span
    code = (key - row * span).astype(code.dtype)
    del key
    counts = np.bincount(row, minlength=n_rows)
    first = np.concatenate(([0], np.cumsum(counts)))
    start = first[row]
    keep = np.arange(code.size) - start < k
    for bit in (2, 1):
        flag = (code & bit) != 0
        seen = np.concatenate(([0], np.cumsum(flag)))
        keep |= flag & (seen[1:] - seen[start] <= k)
    return code[keep], np.bincount(row[keep], minlength=n_rows)


def _group_sums(values: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Sums of ``values[ptr[i]:ptr[i + 1]]`` for each i (0 for an empty group)."""
    total = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    out: np.ndarray = total[ptr[1:]] - total[ptr[:-1]]
    return out


_SPLIT_LEAVES = 1 << 16
"""Leaves split at a time by :func:`_split_leaf_phrases` (bounds its temporaries)."""


def _split_leaf_phrases(phrases: Phrases) -> tuple[_LeafPhrases, _LeafPhrases]:
    """Each leaf's column phrases (``col_of >= 0``) split in two: those two or more leaves hold,
    and those of this leaf alone (``df == 1``). Phrases that are not columns are left out."""
    lp_ptr, lp_pid = phrases.lp_ptr, phrases.lp_pid
    n = lp_ptr.size - 1
    multi_pid: list[np.ndarray] = []
    single_pid: list[np.ndarray] = []
    multi_len: list[np.ndarray] = []
    single_len: list[np.ndarray] = []
    for a in range(0, n, _SPLIT_LEAVES):
        b = min(n, a + _SPLIT_LEAVES)
        lo, hi = int(lp_ptr[a]), int(lp_ptr[b])
        pids = ids_below(lp_pid[lo:hi], phrases.key.size, "lp_pid")
        kept = phrases.col_of[pids] >= 0
        one = phrases.df[pids] == 1
        is_multi = kept & ~one
        is_single = kept & one
        multi_pid.append(pids[is_multi])
        single_pid.append(pids[is_single])
        # per-leaf counts: prefix sums read at the leaves' row bounds
        bounds = lp_ptr[a : b + 1] - lo
        for mask, lens in ((is_multi, multi_len), (is_single, single_len)):
            prefix = np.concatenate(([0], np.cumsum(mask, dtype=np.int64)))
            lens.append(np.diff(prefix[bounds]))

    def rows(pids: list[np.ndarray], lens: list[np.ndarray]) -> _LeafPhrases:
        ptr = np.zeros(n + 1, dtype=lp_ptr.dtype)
        if lens:
            np.cumsum(np.concatenate(lens), out=ptr[1:])
        pid = np.concatenate(pids) if pids else lp_pid[:0].copy()
        return _LeafPhrases(ptr, pid)

    return rows(multi_pid, multi_len), rows(single_pid, single_len)


def _compact_columns(phrases: Phrases, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The phrases ``pids`` holds, ascending (compact column -> phrase id), and ``pids`` as
    compact columns (the same order as phrase ids)."""
    used = np.zeros(phrases.key.size, dtype=bool)
    used[pids] = True
    id_type = np.int32 if used.size < 2**31 else np.int64
    ids = np.flatnonzero(used).astype(id_type)
    compact: np.ndarray = np.cumsum(used, dtype=id_type)
    del used
    np.subtract(compact, 1, out=compact)
    return ids, compact[pids]


def _product_blocks(
    tree: Tree,
    ordered: np.ndarray,
    row_of: dict[int, int],
    membership: sp.csr_matrix,
    whole: np.ndarray,
    lp_ptr: np.ndarray,
    budget: int = _PRODUCT_BUDGET,
) -> list[int]:
    """Ends (in ``ordered``, nodes grouped by parent) of blocks whose rows and parents' rows
    hold about ``budget`` leaf phrase entries each. A parent group past that is
    split (each part makes the parent's row again): near the root of a 1M-leaf tree one group
    is most of the corpus's entries, and a product sizes its output by all of them."""
    lp_len = np.diff(lp_ptr).astype(np.int64)
    row_cost = np.where(whole, 0, membership @ lp_len)
    if ordered.size == 0:
        return []
    par = tree.parent[ordered].tolist()
    cost = row_cost[[row_of[u] for u in ordered.tolist()]].tolist()
    parent_cost = [int(row_cost[row_of[p]]) if p >= 0 else 0 for p in par]
    blocks: list[int] = []
    used = 0
    current = -2
    for at, (p, c, pc) in enumerate(zip(par, cost, parent_cost, strict=True)):
        add = c + (pc if p != current else 0)
        if used and used + add > budget:
            blocks.append(at)
            used, add = 0, c + pc
        used += add
        current = p
    blocks.append(ordered.size)
    return blocks


def _every_row(global_df: np.ndarray) -> tuple[np.ndarray | _AllIds, np.ndarray]:
    """The phrase ids and counts of a node over every leaf: the corpus's present phrases.
    After a fresh build every phrase is present, so the counts are ``global_df`` itself and
    the ids :class:`_AllIds` (tens of millions of phrases at 1M leaves: no array of them)."""
    id_type = np.int32 if global_df.size < 2**31 else np.int64
    if global_df.size and bool((global_df > 0).all()):
        return _AllIds(global_df.size, id_type), global_df
    every = np.flatnonzero(global_df > 0).astype(id_type)
    return every, global_df[every]


class _AllIds:
    """The phrase ids ``0 .. size - 1`` of a node's row without the array (one id per phrase
    of the corpus, alive through all of scoring: 200 MiB at 1M leaves): a slice of it is made
    when read (``ids[lo:hi]``), and an id's position in it is the id itself."""

    __slots__ = ("dtype", "size")

    def __init__(self, size: int, dtype: Any) -> None:
        self.size = size
        self.dtype = np.dtype(dtype)

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.size)
        return np.arange(start, stop, step, dtype=self.dtype)

    def searchsorted(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids)


def _block_rows(
    tree: Tree, chunk: list[int], row_of: dict[int, int], whole: np.ndarray
) -> np.ndarray:
    """The rows a block reads: its nodes' and their parents' (not a node over every leaf)."""
    nodes = np.asarray(chunk, dtype=np.int64)
    parents = tree.parent[nodes]
    wanted = np.concatenate([nodes, parents[parents >= 0]])
    rows = np.unique(np.fromiter((row_of[int(a)] for a in wanted), dtype=np.int64))
    return rows[~whole[rows]]


def _candidates(
    phrases: Phrases,
    arrays: tuple[np.ndarray, ...],
    n_u: float,
    n_p: float,
    max_phrases: int,
) -> np.ndarray:
    """Positions in a slice of a node's phrases of those that can be picked: the union of the
    slice's best of every ranked list :func:`_node_phrases` reads (the best of a list over the
    node are among the best of their own slice)."""
    pids, cols, df_u, df_p, idf = arrays
    _, _, theme, specific = _scores(df_u, n_u, df_p, n_p, idf)
    pool = CANDIDATE_POOL * max_phrases
    multi = phrases.words[pids] > 1
    shared = df_u >= min(2.0, n_u)
    lists = (
        _top(theme, np.flatnonzero(shared), cols, pool),
        _top(specific, np.flatnonzero(phrases.entity[pids]), cols, pool),
        _top(theme, None, cols, pool),
        _top(theme, np.flatnonzero(multi), cols, pool),
    )
    return np.unique(np.concatenate(lists))


def _scores(
    df_u: np.ndarray, n_u: float, df_p: np.ndarray, n_p: float, idf: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Coverage, distinctiveness, theme and specific scores of a node's phrases."""
    cov = df_u / n_u
    n_rest = n_p - n_u
    cov_rest = (df_p - df_u) / n_rest if n_rest > 0 else np.zeros_like(cov)
    dist = (cov / (cov + cov_rest)) ** DIST_POWER
    weight = idf * dist
    theme = cov * weight
    specific = np.sqrt(cov) * weight
    return cov, dist, theme, specific


def _forget(phrases: Phrases, keep: int = 0) -> None:
    """Drop the per-phrase memos scoring filled (what the duplicate rules read, shown
    texts) once they hold more than ``keep`` phrases: they only save time while nodes share
    phrases (siblings, a parent and its children), and would otherwise live as long as the
    index."""
    info = phrases.__dict__.get("info")
    if info is not None and len(info) > keep:
        del phrases.__dict__["info"]
    if len(phrases._surface) > keep:
        phrases._surface.clear()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while nodes are scored: the picker makes many small
    dicts and tuples (no cycles), and each allocation burst can set off a full collection that
    walks every object of the process (a loaded index holds millions) for more time than the
    scoring itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _node_phrases(
    phrases: Phrases,
    pids: np.ndarray,
    cols: np.ndarray,
    df_u: np.ndarray,
    n_u: float,
    df_p: np.ndarray,
    n_p: float,
    idf: np.ndarray,
    max_phrases: int,
    *,
    n_multi: int | None = None,
) -> list[str]:
    """Score one node's phrases (vectorised) and pick a deduplicated, ordered list.

    ``pids``: the node's phrases; ``cols``: their columns (score ties go to the lower one);
    ``n_multi``: how many of the node's phrases are multi-word, when ``pids`` holds only its
    candidates (:func:`_candidates`)."""
    cov, dist, theme, specific = _scores(df_u, n_u, df_p, n_p, idf)
    multi = phrases.words[pids] > 1

    pool = CANDIDATE_POOL * max_phrases
    shared = df_u >= min(2.0, n_u)  # a theme is shared by at least two of the node's leaves
    # the three lists ranked by theme score: of a node of a few hundred phrases, one sort
    # filtered three ways (the same lists as three top-k selections); a list is ranked only
    # when the picker still has room when it comes to it (it takes nothing from it otherwise)
    positive = np.flatnonzero(theme > 0)
    by_theme = (
        positive[np.lexsort((cols[positive], -theme[positive]))]
        if positive.size <= _SORT_ALL
        else None
    )

    def theme_top(among: np.ndarray | None) -> np.ndarray:
        if by_theme is None:
            return _top(theme, None if among is None else np.flatnonzero(among), cols, pool)
        return by_theme[:pool] if among is None else by_theme[among[by_theme]][:pool]

    theme_at = theme_top(shared)
    specific_at = _top(specific, np.flatnonzero(phrases.entity[pids]), cols, pool)
    if n_multi is None:
        n_multi = int(np.count_nonzero(multi))
    need_multi = min(n_multi, math.ceil(max_phrases / 2))
    picker = _Picker(phrases.info, df_u, max_phrases, need_multi)
    n_broad = math.ceil(max_phrases * BROAD_SHARE)
    words = phrases.words
    theme_order = _order(pids, theme_at, words)
    picker.take(theme_order, broad=True, limit=n_broad)
    picker.take(_order(pids, specific_at, words), broad=False, limit=max_phrases)
    picker.take(theme_order, broad=True, limit=max_phrases)
    if len(picker.chosen) < max_phrases:
        picker.take(_order(pids, theme_top(multi), words), broad=False, limit=max_phrases)
    if len(picker.chosen) < max_phrases:
        picker.take(_order(pids, theme_top(None), words), broad=False, limit=max_phrases)
    picker.trim_single_words()

    # broad themes first (coverage, discounted by how much the siblings share them), then the
    # specific entities in the order they were picked
    chosen = list(picker.chosen.items())
    at = np.array([picker.pos[pid] for pid, _ in chosen], dtype=np.int64)
    breadth = (cov[at] * dist[at]).tolist()
    df = df_u[at].tolist()
    broad: list[tuple[float, int, int]] = []
    specific_part: list[int] = []
    for rank, (pid, is_broad) in enumerate(chosen):
        if is_broad or (n_u > 1 and df[rank] >= THEME_MIN_COVERAGE * n_u):
            broad.append((-breadth[rank], rank, pid))
        else:
            specific_part.append(pid)
    broad.sort()
    ordered = [pid for _, _, pid in broad] + specific_part
    return [phrases.pid_text(pid) for pid in ordered]


_SORT_ALL = 768
"""A node with at most this many positive theme scores ranks them by one full sort (past it,
two top-k selections cost less than the sort)."""


def _order(pids: np.ndarray, at: np.ndarray, words: np.ndarray) -> list[tuple[int, int, int]]:
    """A ranked list for the picker: (phrase id, position in the node's arrays, words)."""
    p = pids[at]
    return list(zip(p.tolist(), at.tolist(), words[p].tolist(), strict=True))


def _top(scores: np.ndarray, among: np.ndarray | None, cols: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best positive scores (of the positions ``among``; None: all), best
    first; ties to the lower column (deterministic, the order a fresh extraction gives)."""
    positive = np.flatnonzero(scores > 0) if among is None else among[scores[among] > 0]
    return positive[top_k(scores[positive], k, cols[positive])]


class _Picker:
    """Greedy selection with the duplicate rules and the multi-word quota of SPEC 1.6.

    Duplicates: the same stems (case and inflection variants are one key already); a single word
    or a phrase inside a chosen phrase; two trigram windows of one longer name. A phrase that
    contains a chosen word or phrase replaces it when the shorter one occurs mostly inside it (a
    fragment: "Five Little" of "Five Little Peppers"; "ash" of "volcanic ash"), and is skipped
    otherwise ("stadium" stays, "Arena stadium" adds little).

    Multi-word stems are packed int keys, a bigram's key in the same layout as a trigram's
    first or last two stems (so "inside a chosen trigram" is one lookup). Content stems keep
    their -1 padding: no stem is -1, so a pad never matches.
    """

    def __init__(self, info: PhraseInfo, df: np.ndarray, max_phrases: int, need_multi: int) -> None:
        self.info = info
        self.node_df = df
        self.df: dict[int, float] = {}  # leaves holding each offered phrase
        self.pos: dict[int, int] = {}  # position of each offered phrase in the node's arrays
        self.max = max_phrases
        self.need_multi = need_multi
        self.chosen: dict[int, bool] = {}  # pid -> picked as a broad theme; insertion ordered
        self.uni: dict[int, int] = {}  # chosen single-word stem -> pid
        self.multi: dict[int, int] = {}  # chosen multi-word stems (packed) -> pid
        # counts over the chosen multi-word phrases, so an eviction can undo its entries
        self.inside: dict[int, int] = {}  # the two word pairs of chosen trigrams
        self.content: dict[int, int] = {}  # content stems of chosen phrases
        self.heads: dict[int, int] = {}  # first two stems of chosen trigrams
        self.tails: dict[int, int] = {}  # last two stems of chosen trigrams

    def _index(self, pid: int, delta: int) -> None:
        n, _, _, head, tail, content, _ = self.info[pid]
        table = self.content
        for key in content:
            count = table.get(key, 0) + delta
            if count:
                table[key] = count
            else:
                del table[key]
        if n == MAX_NGRAM:
            inside, heads, tails = self.inside, self.heads, self.tails
            for table, key in ((inside, head), (inside, tail), (heads, head), (tails, tail)):
                count = table.get(key, 0) + delta
                if count:
                    table[key] = count
                else:
                    del table[key]

    def trim_single_words(self) -> None:
        """With enough multi-word candidates, at least half the phrases must be multi-word: when
        duplicates removed too many of them, drop the last-chosen single words."""
        if self.need_multi < math.ceil(self.max / 2):
            return  # the node has few multi-word candidates: single words may fill the list
        excess = len(self.uni) - len(self.multi)
        for pid in reversed(list(self.chosen)):
            if excess <= 0:
                break
            if pid in self.uni.values():
                del self.chosen[pid]
                excess -= 1
        self.uni = {s: p for s, p in self.uni.items() if p in self.chosen}

    def take(self, order: list[tuple[int, int, int]], *, broad: bool, limit: int) -> None:
        limit = min(limit, self.max)
        chosen, uni, pos, df, node_df = self.chosen, self.uni, self.pos, self.df, self.node_df
        room = self.max - self.need_multi
        offer = self._offer
        for pid, at, n in order:
            if len(chosen) >= limit:
                return
            if pid in chosen:
                continue
            if n == 1 and len(uni) >= room:
                continue  # keep room for the multi-word phrases (what _offer would say)
            if pid not in pos:
                pos[pid] = at
                df[pid] = float(node_df[at])
            offer(pid, broad)

    def _offer(self, pid: int, broad: bool) -> None:
        n, key, first, head, tail, content, entity = self.info[pid]
        uni = self.uni
        if n == 1:
            if first in self.content or first in uni:
                return
            if len(uni) >= self.max - self.need_multi:
                return  # keep room for the multi-word phrases
            uni[first] = pid
            self.chosen[pid] = broad
            return
        multi = self.multi
        contained: list[int] = []
        if n == 2:
            if key in self.inside:
                return
        else:
            if head in self.tails or tail in self.heads:
                return
            if head in multi:
                contained.append(multi[head])
            if tail != head and tail in multi:  # "word word word" has one pair twice
                contained.append(multi[tail])
        # the chosen single words among its content stems (each once)
        words: list[int] = []
        if uni:
            for s in content:
                if s in uni and uni[s] not in words:
                    words.append(uni[s])
        df = self.df[pid]
        seen = self.df
        for c in contained:
            if df < FRAGMENT_RATIO * seen[c]:
                return
        word_ratio = NAME_RATIO if entity else FRAGMENT_RATIO
        for c in words:
            if df < word_ratio * seen[c]:
                return
        for c in contained:
            del self.chosen[c]
            del self.multi[self.info[c][1]]
            self._index(c, -1)
        for c in words:
            del self.chosen[c]
            del self.uni[self.info[c][2]]
        self.multi[key] = pid
        self.chosen[pid] = broad
        self._index(pid, +1)
