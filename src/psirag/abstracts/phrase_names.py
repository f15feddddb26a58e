"""The names of a keyword phrase table's saved arrays, apart from the table's code, so that
loading an index lists them without importing the keyword extraction (a search never makes the
table: :class:`psirag.index_data.Deferred`)."""

from __future__ import annotations

ARRAYS = ("lw_ptr", "lw", "ls_ptr", "ls_key", "ls_cnt", "lp_ptr", "lp_pid", "p_key")
"""The saved arrays of a table (with the word list): everything else is derived from them."""

VOCAB_ARRAYS = ("w_stem", "w_flags")
"""Optional saved arrays (with the stem list): each word's stem id and its flags as bits, so a
loaded table does not stem and test every word of the corpus again on its first update."""

HASH_ARRAYS = ("w_hash", "s_hash")
"""Optional saved arrays (with :data:`VOCAB_ARRAYS`): a 64-bit hash of each word and of each
stem, so a loaded table finds an update's words without making a dict of every word and stem
(indexes saved before them make the dicts on their first update, and save the hashes then)."""

DERIVED_ARRAYS = ("p_sorted", "p_df", "s_key", "s_cnt", "s_pid", "p_best", "w_rank", "n_ranked")
"""Optional saved arrays (with :data:`VOCAB_ARRAYS`): the corpus-level counts the per-leaf
arrays add up to, so the first update after a load does not sort the corpus to derive them."""

WORD_ARRAYS = ("w_first", "w_df")
"""Optional saved arrays (with :data:`DERIVED_ARRAYS`): each word's first leaf and how many
leaves hold it, so a removal after a load re-ranks only the words it moves (indexes saved
before they existed derive them on their first removal)."""

FENCE_ARRAYS = ("p_skey", "p_fence", "s_fence")
"""Optional saved arrays (with :data:`DERIVED_ARRAYS`), written when the sorted parts are
written whole (one fresh segment: a compaction, a first save) and kept by the saves on top
of them while those parts stay as written: ``p_skey``, the phrase keys in ``p_sorted``'s order;
``p_fence`` and ``s_fence``, every :data:`psirag.abstracts.fence.FENCE_STEP`-th key of
``p_skey`` and of ``s_key``. An update's lookups then read one block of sorted keys per key,
all asked for at once, instead of a binary search's page faults one after the other (indexes
saved without them search as before, and gain them on their next compaction)."""

__all__ = [
    "ARRAYS",
    "DERIVED_ARRAYS",
    "FENCE_ARRAYS",
    "HASH_ARRAYS",
    "VOCAB_ARRAYS",
    "WORD_ARRAYS",
]
