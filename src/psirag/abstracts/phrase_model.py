"""What the phrase table (:mod:`psirag.abstracts.phrases`) and the keyword scorer
(:mod:`psirag.abstracts.keywords`) share: the tokeniser's rules (stopwords, joiners, segments),
the packing of three stem ids into one int64 key, and :class:`Phrases`, the table's view that
the scorer reads. Kept apart so that neither module imports the other's internals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from psirag.abstracts.fence import will_need_rows

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "JOINERS",
    "MAX_NGRAM",
    "MAX_PACKED",
    "PACK_BITS",
    "ROMAN_RE",
    "SEGMENT_RE",
    "SPACED_HYPHEN_RE",
    "STOPWORDS",
    "PhraseInfo",
    "Phrases",
    "ids_below",
    "is_stopword",
    "unpack_keys",
]

MAX_NGRAM = 3
"""Longest phrase, in words."""

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
SEGMENT_RE = re.compile(rf"(?:{_TOKEN})(?:[ \t]+(?:{_TOKEN}))*")

SPACED_HYPHEN_RE = re.compile(r"(?<=\w)- (?=\w)")  # "Metro- Goldwyn- Mayer" in Wikipedia dumps

ROMAN_RE = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")

PACK_BITS = 21  # token ids packed three to an int64 key
MAX_PACKED = 1 << PACK_BITS


@dataclass(frozen=True, eq=False)
class Phrases:
    """The corpus's phrases as :func:`~psirag.abstracts.keywords.keyword_abstracts` scores them.

    Phrases are read by their persistent id (``pid``) in per-phrase arrays; ``col_of`` gives
    a kept phrase's column, its rank in the order a fresh extraction numbers phrases (what
    breaks score ties), -1 for a phrase that is not kept or not present. The by-column views
    (:attr:`leaf_phrase`, :attr:`stems`, ...) are what a test compares across tables.
    """

    lp_ptr: np.ndarray  # n_leaves + 1: CSR rows of lp_pid
    lp_pid: np.ndarray  # the distinct phrases of each leaf, leaf by leaf
    col_of: np.ndarray  # n_pids: column of a kept phrase, -1 otherwise
    pid_of: np.ndarray  # n_columns: the phrase of each column
    df: np.ndarray  # n_pids: leaves holding each phrase (int32)
    key: np.ndarray  # n_pids: packed stem ids, the phrase's identity
    is_stop: np.ndarray  # per surface token id, bool: a stopword
    surface_ids: np.ndarray  # n_pids x 3 surface token ids of the shown form (-1 pad)
    words: np.ndarray  # n_pids: number of words
    entity: np.ndarray  # n_pids, bool: every content word capitalised
    vocab: list[str]  # surface token id -> string
    lazy: bool = False
    """True: the per-phrase fields are computed when read by phrase id (``a[pids]``; an update's
    view, :meth:`PhraseTable.phrase_view`); ``pid_of`` and the by-column views are not there."""
    _surface: dict[int, str] = field(default_factory=dict)

    def text(self, col: int) -> str:
        """A column's phrase as shown: its most frequent surface form."""
        return self.pid_text(int(self.pid_of[col]))

    def pid_text(self, pid: int) -> str:
        cached = self._surface.get(pid)
        if cached is None:
            cached = " ".join(self.vocab[t] for t in self.surface_ids[pid].tolist() if t >= 0)
            self._surface[pid] = cached
        return cached

    @cached_property
    def leaf_pid(self) -> sp.csr_matrix:
        """n_leaves x n_pids, 0/1 int32: the phrases each leaf holds (made on first use: an
        update reads the rows of its few nodes' leaves instead)."""
        import scipy.sparse as sp  # here: an update never makes it

        pids = ids_below(self.lp_pid, self.key.size, "lp_pid")  # every row: read whole
        return sp.csr_matrix(
            (np.ones(pids.size, dtype=np.int32), pids, self.lp_ptr),
            shape=(self.lp_ptr.size - 1, self.key.size),
        )

    def node_counts(self, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The phrases of a set of leaves, ascending, with how many of the leaves hold each
        (what a row of ``membership @ leaf_pid`` holds), read from those leaves' rows only."""
        starts, ends = self.lp_ptr[leaves], self.lp_ptr[leaves + 1]
        lengths = ends - starts
        total = int(lengths.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        shift = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        # the leaves' rows asked for at once where the entries are one mapped file (a cold
        # page cache would otherwise read the device's read-ahead window around each leaf)
        will_need_rows(self.lp_pid, starts, ends)
        pids = self.lp_pid[np.arange(total) + shift]
        # the ids are checked on what is made of them (no pass of their own over a big node's)
        if total * 8 > self.key.size:  # most of the corpus: a dense count is cheaper
            try:
                counts = np.bincount(pids, minlength=self.key.size)
            except ValueError:  # a negative id
                counts = pids[:0]
            if counts.size != self.key.size:  # an id past the phrases, or a negative one
                ids_below(pids, self.key.size, "lp_pid")  # raises
            at = np.flatnonzero(counts)
            return at, counts[at].astype(np.float64)
        at, counts = np.unique(pids, return_counts=True)
        ids_below(at[[0, -1]], self.key.size, "lp_pid")  # ascending: the ends say
        return at.astype(np.int64), counts.astype(np.float64)

    @cached_property
    def stem_ids(self) -> np.ndarray:
        """n_pids x 3 stem ids (-1 pad), unpacked from :attr:`key` on first use (the scorer
        reads a phrase's own, :class:`PhraseInfo`)."""
        return unpack_keys(self.key).astype(np.int32)

    @cached_property
    def content_ids(self) -> np.ndarray:
        """n_pids x 3: the stems of the shown form's words that are not stopwords, else -1."""
        stop = np.append(self.is_stop, True)[self.surface_ids]
        return np.where(stop, -1, self.stem_ids).astype(np.int32)

    @cached_property
    def info(self) -> PhraseInfo:
        """Per-phrase data of the duplicate rules, filled as nodes are scored."""
        return PhraseInfo(self)

    @cached_property
    def leaf_phrase(self) -> sp.csr_matrix:
        """The leaf x column presence matrix."""
        import scipy.sparse as sp

        cols = self.col_of[self.leaf_pid.indices]
        inside = cols >= 0
        rows = np.repeat(np.arange(self.leaf_pid.shape[0]), np.diff(self.leaf_pid.indptr))
        m = sp.csr_matrix(
            (np.ones(int(inside.sum()), dtype=np.int32), (rows[inside], cols[inside])),
            shape=(self.leaf_pid.shape[0], self.pid_of.size),
        )
        return m

    @property
    def surface_tokens(self) -> np.ndarray:
        return self.surface_ids[self.pid_of]

    @property
    def stems(self) -> list[tuple[int, ...]]:
        return [tuple(t for t in r if t >= 0) for r in self.stem_ids[self.pid_of].tolist()]

    @property
    def content(self) -> list[tuple[int, ...]]:
        return [tuple(t for t in r if t >= 0) for r in self.content_ids[self.pid_of].tolist()]

    @property
    def n_words(self) -> np.ndarray:
        return self.words[self.pid_of]

    @property
    def is_entity(self) -> np.ndarray:
        return self.entity[self.pid_of]


class PhraseInfo(dict[int, tuple[Any, ...]]):
    """What the duplicate rules read of a phrase, by phrase id, made on first use (a node
    offers a few dozen phrases, many shared with its siblings and parent): its word count,
    packed stems, first stem, packed first and last two stems, content stems (-1 padded) and
    entity flag."""

    def __init__(self, phrases: Phrases) -> None:
        super().__init__()
        self.phrases = phrases

    def __missing__(self, pid: int) -> tuple[Any, ...]:
        ph = self.phrases
        key = int(ph.key[pid])
        mask = (1 << PACK_BITS) - 1
        shift = 2 * PACK_BITS
        # unrolled (a build calls this for millions of phrases): the three packed stems, and
        # each as content where its surface word is there and not a stopword
        s0 = ((key >> shift) & mask) - 1
        s1 = ((key >> PACK_BITS) & mask) - 1
        s2 = (key & mask) - 1
        t0, t1, t2 = ph.surface_ids[pid].tolist()
        stop = ph.is_stop
        content = [
            s0 if t0 >= 0 and not stop[t0] else -1,
            s1 if t1 >= 0 and not stop[t1] else -1,
            s2 if t2 >= 0 and not stop[t2] else -1,
        ]
        got = (
            3 - (s1 < 0) - (s2 < 0),
            key,
            s0,
            ((s0 + 1) << shift) | ((s1 + 1) << PACK_BITS),
            ((s1 + 1) << shift) | ((s2 + 1) << PACK_BITS),
            content,
            bool(ph.entity[pid]),
        )
        self[pid] = got
        return got


def ids_below(ids: Any, high: int, name: str) -> np.ndarray:
    """``ids`` (entries read from a saved per-leaf array) as an array, checked to lie in
    ``[0, high)``. A load reads sample rows of these arrays only (a pass over a 1M-chunk
    corpus's hundreds of MB at every load would cost what an update saves), so every reader
    checks the rows it reads: an id of a damaged or crafted file is an
    :class:`~psirag.errors.IndexFormatError` naming the array, never a count or a phrase of
    the wrong id (a negative id would index from the end)."""
    a = np.asarray(ids)
    if a.size and (int(a.min()) < 0 or int(a.max()) >= high):
        from psirag.errors import IndexFormatError

        raise IndexFormatError(
            "the saved keyword phrase table is inconsistent "
            f"({name} holds an id outside 0..{high - 1}); rebuild the index"
        )
    return a


def is_stopword(word: str) -> bool:
    """A stopword, a single character, or a contraction of one ("it's", "they're", "don't")."""
    if word in STOPWORDS or len(word) == 1:
        return True
    base, apostrophe, clitic = word.partition("'")
    if not apostrophe:
        return False
    return (clitic == "t" and base.endswith("n")) or (base in STOPWORDS and clitic in _CLITICS)


def unpack_keys(packed: np.ndarray) -> np.ndarray:
    """Split int64 keys of three packed ids (1-based, 0 = none) into an n x 3 array, -1 pad."""
    mask = (1 << PACK_BITS) - 1
    cols = [((packed >> (PACK_BITS * (MAX_NGRAM - 1 - j))) & mask) - 1 for j in range(MAX_NGRAM)]
    return np.stack(cols, axis=1) if packed.size else np.empty((0, MAX_NGRAM), dtype=np.int64)
