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

__all__ = ["ARRAYS", "DERIVED_ARRAYS", "HASH_ARRAYS", "VOCAB_ARRAYS", "WORD_ARRAYS"]
