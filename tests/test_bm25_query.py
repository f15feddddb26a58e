"""BM25 at query time without bm25s: psirag's tokenizer gives ``bm25s.tokenize``'s tokens, and
scores read from an index saved in bm25s's layout equal ``bm25s.BM25.get_scores`` bit for bit,
on random corpora and on the saved indexes in the repository. bm25s itself is the reference
here (it stays installed: it writes an index saved in its layout again)."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import bm25s
import numpy as np
import pytest
import Stemmer
from bm25s.stopwords import STOPWORDS_EN as BM25S_STOPWORDS

from psirag.index_data import Deferred
from psirag.retrieval.bm25 import STOPWORDS_EN, SavedScores, SparseIndex, TermCounts, _tokenize

SAVED = [
    Path(__file__).parent / "fixtures" / "minilm_index" / "index",
    Path(__file__).parent / "data" / "index_format_v2",
]
"""Indexes in the repository saved with bm25s's own files."""

WORDS = [
    "the", "The", "THE", "a", "an", "of", "to", "is", "was", "will", "with", "this",  # stop
    "running", "runs", "ran", "runner", "Mount", "Etna", "volcano", "volcanoes", "lava",
    "film", "films", "filming", "director", "directed", "Polish-Russian", "War", "war",
    "café", "cafe\u0301", "naïve", "Straße", "STRASSE", "İstanbul", "über", "Ærø",
    "x", "y", "1", "42", "1990s", "3D", "e-mail", "O'Neil", "don't", "foo_bar", "__init__",
    "日本語", "東京", "москва", "Москва", "ελληνικά", "عربى", "हिन्दी", "\u00a0", "\t", "\n",
    "—", "…", "🙂", "a🙂b", "\x00", "ǅemal", "ﬁnance", "①②", "٣٤", "x²", "Ⅻ",
]  # fmt: skip
"""Words of the random texts: stopwords in three cases, inflections the stemmer folds,
composed and decomposed accents, case folds that change length, scripts without case,
digits, underscores, single letters, emoji, NUL, ligatures and other Unicode digits."""


def _texts(rng: random.Random, n: int) -> list[str]:
    seps = [" ", " ", " ", ", ", ". ", "-", "/", "\n", "  "]
    out = []
    for _ in range(n):
        k = rng.randint(0, 14)
        out.append("".join(rng.choice(WORDS) + rng.choice(seps) for _ in range(k)))
    return out


def _bm25s_tokens(texts: list[str]) -> list[list[str]]:
    """bm25s's tokens, as psirag asked bm25s for them before: of the NFC text."""
    texts = [unicodedata.normalize("NFC", t) for t in texts]
    stemmer = Stemmer.Stemmer("english")
    tokens: list[list[str]] = bm25s.tokenize(
        texts, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )
    return tokens


def test_the_stopwords_are_bm25s_english_list() -> None:
    assert frozenset(BM25S_STOPWORDS) == STOPWORDS_EN


@pytest.mark.parametrize("seed", range(6))
def test_tokens_equal_bm25s_tokenize(seed: int) -> None:
    rng = random.Random(seed)
    texts = _texts(rng, 200)
    assert _tokenize(texts) == _bm25s_tokens(texts)
    assert _tokenize(texts, progress=True) == _tokenize(texts)
    for text in texts[:40]:  # one text at a time, as a query is tokenised
        assert _tokenize([text]) == _bm25s_tokens([text])


def _native_saved(texts: list[str], folder: Path) -> bm25s.BM25:
    """bm25s's own build of ``texts``, saved into ``folder`` and loaded back by bm25s."""
    r = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    r.index(_bm25s_tokens(texts), show_progress=False)
    r.save(str(folder), show_progress=False)
    return bm25s.BM25.load(str(folder), mmap=True, show_progress=False)


def _reference(r: bm25s.BM25, query: str, n: int) -> np.ndarray:
    """What SparseIndex.scores gave through bm25s before: tokens in the vocabulary, scored."""
    terms = [t for t in _bm25s_tokens([query])[0] if t in r.vocab_dict]
    if not terms:
        return np.zeros(n, dtype=np.float32)
    return np.asarray(r.get_scores(terms), dtype=np.float32)


@pytest.mark.parametrize("seed", range(5))
def test_saved_bm25s_scores_equal_bm25s_on_random_corpora(seed: int, tmp_path: Path) -> None:
    rng = random.Random(100 + seed)
    texts = [t + " lava" for t in _texts(rng, rng.randint(5, 300))]  # never an empty vocabulary
    native = _native_saved(texts, tmp_path)
    first = np.arange(len(texts))
    ours = SparseIndex.load(tmp_path, first_copy=first)
    assert isinstance(ours.retriever, SavedScores) and ours.n_docs == len(texts)
    queries = [*_texts(rng, 30), texts[0], texts[-1] + " " + texts[-1], "lava lava lava", ""]
    for q in queries:
        a, b = ours.scores(q), _reference(native, q, len(texts))
        assert a.dtype == b.dtype == np.float32
        assert np.array_equal(a, b), q
    # a bm25s.BM25 in memory, given to the constructor, scores the same
    held = SparseIndex(native, first)
    for q in queries[:10]:
        assert np.array_equal(held.scores(q), ours.scores(q)), q


@pytest.mark.parametrize("folder", SAVED, ids=lambda p: p.parent.name)
def test_saved_indexes_score_as_bm25s_did(folder: Path) -> None:
    from psirag.storage import IndexStore

    store = IndexStore(folder)
    gen = store.generations()[-1]
    bm25_dir = store.generations_dir / f"{gen:06d}" / "bm25"
    native = bm25s.BM25.load(str(bm25_dir), mmap=True, show_progress=False)
    n = int(native.scores["num_docs"])
    ours = SparseIndex.load(bm25_dir, first_copy=np.arange(n))
    chunks = (bm25_dir.parent / "chunks.jsonl").read_text("utf-8").splitlines()
    rng = random.Random(7)
    queries = [*(line[:200] for line in chunks), *_texts(rng, 50), "volcano in Italy"]
    hits = 0
    for q in queries:
        a, b = ours.scores(q), _reference(native, q, n)
        assert np.array_equal(a, b), q
        hits += int(a.max() > 0)
    assert hits > len(chunks)  # the queries did match


def test_term_counts_give_bm25s_precomputed_scores() -> None:
    rng = random.Random(3)
    texts = [t + " film" for t in _texts(rng, 120)]
    saved = TermCounts.of(texts).retriever(k1=1.5, b=0.75)
    native = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    native.index(_bm25s_tokens(texts), show_progress=False)
    assert saved.vocab.keys() | {""} == native.vocab_dict.keys()  # ids are numbered otherwise
    for term, i in native.vocab_dict.items():
        if term:  # bm25s's empty token has no column
            got = saved.scores([saved.vocab[term]])
            assert np.array_equal(got, native.get_scores_from_ids([i])), term


def test_a_saved_bm25s_index_is_written_again_as_bm25s_reads_it(tmp_path: Path) -> None:
    rng = random.Random(5)
    texts = [t + " etna" for t in _texts(rng, 50)]
    _native_saved(texts, tmp_path / "a")
    ours = SparseIndex.load(tmp_path / "a", first_copy=np.arange(len(texts)))
    ours.save(tmp_path / "b")
    again = bm25s.BM25.load(str(tmp_path / "b"), show_progress=False)
    for q in ("etna lava", texts[3], texts[9]):
        assert np.array_equal(_reference(again, q, len(texts)), ours.scores(q))


def test_damaged_bm25s_arrays_are_refused(tmp_path: Path) -> None:
    texts = ["lava flows", "etna erupts", "film director"]
    _native_saved(texts, tmp_path)
    np.save(tmp_path / "data.csc.index.npy", np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="disagree"):
        SavedScores.load(tmp_path)


def test_loading_an_index_defers_its_phrase_table(tmp_path: Path) -> None:
    """The phrase table (only updates use it) is made on first read, equal to the eager one, and
    survives ``replace`` without being made."""
    from psirag.abstracts.phrases import PhraseTable
    from psirag.index import Index

    folder = tmp_path / "ix"
    shutil.copytree(SAVED[0], folder)
    data = Index.load(folder).data
    held = data.__dict__["_phrase_table"]
    assert isinstance(held, Deferred) and not held.made
    other = data.replace(lineage=dict(data.lineage))
    assert other.__dict__["_phrase_table"] is held and not held.made
    table = other.phrase_table
    assert isinstance(table, PhraseTable) and held.made and data.phrase_table is table
    assert table.n_leaves == data.n_leaves


def test_a_damaged_phrase_table_is_reported_when_first_used(tmp_path: Path) -> None:
    from psirag.errors import IndexFormatError
    from psirag.index import Index

    folder = tmp_path / "ix"
    shutil.copytree(SAVED[0], folder)
    words = next(folder.glob("generations/*/keywords/words.json"))
    size = words.stat().st_size
    words.write_text("{" + " " * (size - 2) + "}")  # same size: passes the size check at load
    data = Index.load(folder).data
    with pytest.raises(IndexFormatError, match="phrase table"):
        _ = data.phrase_table


def test_a_search_imports_neither_bm25s_nor_scipy() -> None:
    code = (
        "import sys\n"
        "from psirag.index import Index\n"
        f"ix = Index.load({str(SAVED[0])!r})\n"
        "ix.sparse.search('volcano in Italy', k=3)\n"
        "print(sorted(m for m in ('bm25s', 'scipy', 'psirag.abstracts.phrases') "
        "if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_term_counts_count_the_query_tokens_of_each_chunk() -> None:
    """A build numbers each distinct word's stem once (TermCounts.append): its counts must be
    the tokens a query gets from the same text, including words that share a stem, stopwords,
    case, NFC and chunks with no indexable word."""
    from collections import Counter

    from psirag.retrieval.bm25 import TermCounts, _tokenize

    texts = [
        "Running runners run; the runner RUNS.",
        "Caf\u00e9 and cafe\u0301 are one word, a is a stopword",
        "",
        "x y z",
        "connection connected connecting connects",
        "running again, Running twice",
    ]
    first = TermCounts.of(texts[:3])
    counts = first.append(texts[3:])
    name_of = {i: t for t, i in counts.vocab.items()}
    for row, tokens in enumerate(_tokenize(texts)):
        a, b = int(counts.doc_ptr[row]), int(counts.doc_ptr[row + 1])
        got = {
            name_of[int(t)]: int(f) for t, f in zip(counts.terms[a:b], counts.tf[a:b], strict=True)
        }
        assert got == dict(Counter(tokens)), texts[row]
    # the first batch's ids are kept; the second's new stems come after them, in sorted order
    assert all(counts.vocab[t] == i for t, i in first.vocab.items())
    later = [t for t, i in sorted(counts.vocab.items(), key=lambda x: x[1]) if t not in first.vocab]
    assert later == sorted(later) and len(later) > 0


def test_a_loaded_vocabulary_finds_terms_by_hash_as_a_dict_does_collisions_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TermIds (a loaded BM25 vocabulary) answers a batch as a dict of its terms does: on the
    first lookup by one pass over the hashes, on later ones (queries) through the hashes
    sorted once; terms whose hashes collide are told apart by their strings (a hash of the
    length here, so that most terms collide)."""
    from psirag.retrieval import bm25

    monkeypatch.setattr(bm25, "_hash64", lambda keys: np.array([len(k) for k in keys], np.int64))
    rng = random.Random(7)
    words = {"".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(400)}
    terms = sorted(words)
    ids = bm25.TermIds(terms, bm25._hash64(terms))
    index = {t: i for i, t in enumerate(terms)}
    batches = [
        [terms[9], terms[300], terms[5], "zzzz", terms[0], terms[9]],
        [terms[300]],
        [rng.choice(terms) for _ in range(50)] + ["nope", terms[5], "toolongword"],
        ["nope"],
    ]
    for batch in batches * 2:
        assert ids.lookup(batch).tolist() == [index.get(t, -1) for t in batch]
    assert ids._sorted is not None  # later lookups went through the sorted hashes
    grown = ids.with_new(["zzzz", "zzzy"])
    n = len(terms)
    assert grown.lookup(["zzzy", terms[300], "zzzz"]).tolist() == [n + 1, 300, n]
    assert dict(grown) == {**index, "zzzz": n, "zzzy": n + 1}
