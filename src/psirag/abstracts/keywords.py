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

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import scipy.sparse as sp

from psirag.retrieval.ranking import top_k
from psirag.tree.model import Tree

if TYPE_CHECKING:
    from psirag.abstracts.phrases import PhraseTable

__all__ = ["STOPWORDS", "format_abstract", "keyword_abstracts"]

MAX_NGRAM = 3
"""Longest phrase, in words."""

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

# English function words (and a few discourse adverbs) that may not start or end a phrase; also
# month names (dates say little about a topic) and the "may refer to" of disambiguation pages.
# They may sit inside a trigram ("Bank of England").
_STOPWORD_TEXT = """
    a about above across after again against all almost along also although always am among an
    and another any anyone anything are around as at be became because become becomes been before
    being below beside besides between both but by can cannot could did do does doing done down
    during each either else etc even ever every few for from further had has have having he her
    here hers herself him himself his how however i if in including into is it its itself just
    least less many may me might more most much must my myself neither no nor not now of off often
    on once one only onto or other others otherwise our ours ourselves out over own per perhaps
    quite rather same shall she should since so some such than that the their theirs them
    themselves then there thereby therefore these they this those though through throughout thus
    to together too toward towards under unless until up upon us very via was we well were what
    whatever when whenever where whereas whether which while who whom whose why will with within
    without would yet you your yours yourself yourselves s t d ll m re ve
    january february march april june july august september october november december
    refer refers referred
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_CLITICS = frozenset(("s", "re", "ve", "ll", "d", "m"))

_JOINER_TEXT = "a an at by for from in of on the to upon with"
JOINERS: frozenset[str] = frozenset(_JOINER_TEXT.split())
"""Stopwords allowed inside a trigram, and only in a name ("Bank of England", "Man on Fire"):
other inner stopwords mostly glue two phrases ("Crawford and Jack", "collector of dirty")."""

_TOKEN = r"(?:[^\W\d_]\.){2,}|[^\W_]+(?:['’\-][^\W_]+)*"
# A segment is a run of tokens separated by spaces only: any punctuation or line break ends it,
# so no phrase crosses a sentence, a clause boundary or a title line.
_SEGMENT_RE = re.compile(rf"(?:{_TOKEN})(?:[ \t]+(?:{_TOKEN}))*")

_SPACED_HYPHEN_RE = re.compile(r"(?<=\w)- (?=\w)")  # "Metro- Goldwyn- Mayer" in Wikipedia dumps

_ROMAN_RE = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")

_BITS = 21  # token ids packed three to an int64 key
_MAX_PACKED = 1 << _BITS


class _ByPhrase(Protocol):
    """Per-phrase tuples of stem ids, read by phrase id."""

    def __getitem__(self, pid: int, /) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class _Phrases:
    """The phrase vocabulary and the leaf x phrase presence matrix of a corpus."""

    leaf_phrase: sp.csr_matrix  # n_leaves x n_phrases, 0/1 int32
    surface_tokens: np.ndarray  # n_phrases x 3 surface token ids (-1 pad)
    stems: _ByPhrase  # per phrase: stems of its words (its identity)
    content: _ByPhrase  # per phrase: stems of its words that are not stopwords
    n_words: np.ndarray  # n_phrases
    is_entity: np.ndarray  # n_phrases, bool: every content word capitalised
    vocab: list[str]  # surface token id -> string
    _surface: dict[int, str] = field(default_factory=dict)

    def text(self, pid: int) -> str:
        """The phrase as shown: its most frequent surface form."""
        cached = self._surface.get(pid)
        if cached is None:
            cached = " ".join(self.vocab[t] for t in self.surface_tokens[pid].tolist() if t >= 0)
            self._surface[pid] = cached
        return cached


def format_abstract(phrases: Iterable[str]) -> str:
    """One line of text, comma-separated, as the paper's keyword prompt formats its output."""
    return ", ".join(phrases)


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
    phrases = table.phrases()
    if phrases.leaf_phrase.shape[1] == 0:
        return [[] for _ in range(targets.size)]

    leaf_phrase = phrases.leaf_phrase
    row_of = np.full(tree.n_nodes, -1, dtype=np.int64)
    row_of[rows] = np.arange(rows.size)
    if nodes is None:
        membership = tree.leaf_membership[n_leaves:].astype(np.int32)
    else:
        membership = tree.leaf_membership[rows].astype(np.int32)
    node_df = (membership @ leaf_phrase).tocsr()
    node_df.sort_indices()
    global_df = np.asarray(leaf_phrase.sum(axis=0)).ravel().astype(np.float64)
    idf = np.log((1.0 + n_leaves) / (1.0 + global_df)) + 1.0
    is_multi = phrases.n_words > 1
    leaf_counts = tree.leaf_counts

    todo: Iterable[int] = targets.tolist()
    if progress:
        from tqdm import tqdm

        todo = tqdm(todo, desc="keyword abstracts", unit="node")
    out: list[list[str]] = []
    for u in todo:
        a = int(row_of[u])
        lo, hi = node_df.indptr[a], node_df.indptr[a + 1]
        cols = node_df.indices[lo:hi]
        df_u = node_df.data[lo:hi].astype(np.float64)
        n_u = float(leaf_counts[u])
        if cols.size == 0 or n_u == 0:
            out.append([])
            continue
        p = int(tree.parent[u])
        if p >= 0:
            pa = int(row_of[p])
            plo, phi = node_df.indptr[pa], node_df.indptr[pa + 1]
            pos = np.searchsorted(node_df.indices[plo:phi], cols)
            df_p = node_df.data[plo:phi][pos].astype(np.float64)
            n_p = float(leaf_counts[p])
        else:  # a root: compare with the rest of the corpus (nothing, for a single tree)
            df_p = global_df[cols]
            n_p = float(n_leaves)
        out.append(_node_phrases(phrases, cols, df_u, n_u, df_p, n_p, idf, is_multi, max_phrases))
    return out


def _node_phrases(
    phrases: _Phrases,
    cols: np.ndarray,
    df_u: np.ndarray,
    n_u: float,
    df_p: np.ndarray,
    n_p: float,
    idf: np.ndarray,
    is_multi: np.ndarray,
    max_phrases: int,
) -> list[str]:
    """Score one node's phrases (vectorised) and pick a deduplicated, ordered list."""
    cov = df_u / n_u
    n_rest = n_p - n_u
    cov_rest = (df_p - df_u) / n_rest if n_rest > 0 else np.zeros_like(cov)
    dist = (cov / (cov + cov_rest)) ** DIST_POWER
    weight = idf[cols] * dist
    theme = cov * weight
    specific = np.sqrt(cov) * weight
    entity = phrases.is_entity[cols]

    pool = CANDIDATE_POOL * max_phrases
    shared = df_u >= min(2.0, n_u)  # a theme is shared by at least two of the node's leaves
    theme_at = _top(np.where(shared, theme, -1.0), pool)
    specific_at = _top(np.where(entity, specific, -1.0), pool)
    fill_at = _top(theme, pool)
    multi_at = _top(np.where(is_multi[cols], theme, -1.0), pool)
    seen = np.concatenate((theme_at, specific_at, fill_at, multi_at))
    df = dict(zip(cols[seen].tolist(), df_u[seen].tolist(), strict=True))
    theme_order = cols[theme_at].tolist()
    specific_order = cols[specific_at].tolist()
    fill_order = cols[fill_at].tolist()
    multi_order = cols[multi_at].tolist()

    n_multi = int(np.count_nonzero(is_multi[cols]))
    need_multi = min(n_multi, math.ceil(max_phrases / 2))
    picker = _Picker(phrases, max_phrases, need_multi, df)
    n_broad = math.ceil(max_phrases * BROAD_SHARE)
    picker.take(theme_order, broad=True, limit=n_broad)
    picker.take(specific_order, broad=False, limit=max_phrases)
    picker.take(theme_order, broad=True, limit=max_phrases)
    picker.take(multi_order, broad=False, limit=max_phrases)
    picker.take(fill_order, broad=False, limit=max_phrases)
    picker.trim_single_words()

    # broad themes first (coverage, discounted by how much the siblings share them), then the
    # specific entities in the order they were picked
    breadth = dict(zip(cols[seen].tolist(), (cov * dist)[seen].tolist(), strict=True))
    broad: list[tuple[float, int, int]] = []
    specific_part: list[int] = []
    for rank, (pid, is_broad) in enumerate(picker.chosen.items()):
        if is_broad or (n_u > 1 and df[pid] >= THEME_MIN_COVERAGE * n_u):
            broad.append((-breadth[pid], rank, pid))
        else:
            specific_part.append(pid)
    broad.sort()
    ordered = [pid for _, _, pid in broad] + specific_part
    return [phrases.text(pid) for pid in ordered]


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best positive scores, best first; ties by position (deterministic)."""
    positive = np.flatnonzero(scores > 0)
    return positive[top_k(scores[positive], k, positive)]


class _Picker:
    """Greedy selection with the duplicate rules and the multi-word quota of SPEC 1.6.

    Duplicates: the same stems (case and inflection variants are one key already); a single word
    or a phrase inside a chosen phrase; two trigram windows of one longer name. A phrase that
    contains a chosen word or phrase replaces it when the shorter one occurs mostly inside it (a
    fragment: "Five Little" of "Five Little Peppers"; "ash" of "volcanic ash"), and is skipped
    otherwise ("stadium" stays, "Arena stadium" adds little).
    """

    def __init__(
        self, phrases: _Phrases, max_phrases: int, need_multi: int, df: dict[int, float]
    ) -> None:
        self.phrases = phrases
        self.max = max_phrases
        self.need_multi = need_multi
        self.df = df
        self.chosen: dict[int, bool] = {}  # pid -> picked as a broad theme; insertion ordered
        self.uni: dict[int, int] = {}  # chosen single-word stem -> pid
        self.multi: dict[tuple[int, ...], int] = {}  # chosen multi-word stems -> pid
        # counts over the chosen multi-word phrases, so an eviction can undo its entries
        self.inside: dict[tuple[int, ...], int] = {}  # contiguous runs of chosen phrases
        self.content: dict[int, int] = {}  # content stems of chosen phrases
        self.heads: dict[tuple[int, ...], int] = {}  # first two stems of chosen trigrams
        self.tails: dict[tuple[int, ...], int] = {}  # last two stems of chosen trigrams

    def _index(self, pid: int, delta: int) -> None:
        stems = self.phrases.stems[pid]
        n = len(stems)
        keys: list[tuple[dict[Any, int], Any]] = [
            (self.inside, stems[i : i + k]) for k in range(2, n) for i in range(n - k + 1)
        ]
        keys += [(self.content, s) for s in self.phrases.content[pid]]
        if n == MAX_NGRAM:
            keys += [(self.heads, stems[:2]), (self.tails, stems[1:])]
        for table, key in keys:
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

    def take(self, order: list[int], *, broad: bool, limit: int) -> None:
        limit = min(limit, self.max)
        for pid in order:
            if len(self.chosen) >= limit:
                return
            if pid not in self.chosen:
                self._offer(pid, broad)

    def _offer(self, pid: int, broad: bool) -> None:
        stems = self.phrases.stems[pid]
        n = len(stems)
        if n == 1:
            s = stems[0]
            if s in self.content or s in self.uni:
                return
            if len(self.uni) >= self.max - self.need_multi:
                return  # keep room for the multi-word phrases
            self.uni[s] = pid
            self.chosen[pid] = broad
            return
        if stems in self.inside:
            return
        if n == MAX_NGRAM and (stems[:2] in self.tails or stems[1:] in self.heads):
            return
        # dict.fromkeys: a repeated word ("word word word") repeats its sub-phrases
        shorter = dict.fromkeys(stems[i : i + k] for k in range(2, n) for i in range(n - k + 1))
        contained = [self.multi[r] for r in shorter if r in self.multi]
        words = [self.uni[s] for s in dict.fromkeys(self.phrases.content[pid]) if s in self.uni]
        df = self.df[pid]
        if any(df < FRAGMENT_RATIO * self.df[c] for c in contained):
            return
        word_ratio = NAME_RATIO if self.phrases.is_entity[pid] else FRAGMENT_RATIO
        if any(df < word_ratio * self.df[c] for c in words):
            return
        for c in contained:
            del self.chosen[c]
            del self.multi[self.phrases.stems[c]]
            self._index(c, -1)
        for c in words:
            del self.chosen[c]
            del self.uni[self.phrases.stems[c][0]]
        self.multi[stems] = pid
        self.chosen[pid] = broad
        self._index(pid, +1)


def _is_stopword(word: str) -> bool:
    """A stopword, a single character, or a contraction of one ("it's", "they're", "don't")."""
    if word in STOPWORDS or len(word) == 1:
        return True
    base, apostrophe, clitic = word.partition("'")
    if not apostrophe:
        return False
    return (clitic == "t" and base.endswith("n")) or (base in STOPWORDS and clitic in _CLITICS)


def _unpack(packed: np.ndarray) -> np.ndarray:
    """Split int64 keys of three packed ids (1-based, 0 = none) into an n x 3 array, -1 pad."""
    mask = (1 << _BITS) - 1
    cols = [((packed >> (_BITS * (MAX_NGRAM - 1 - j))) & mask) - 1 for j in range(MAX_NGRAM)]
    return np.stack(cols, axis=1) if packed.size else np.empty((0, MAX_NGRAM), dtype=np.int64)
