"""Keyword abstracts (SPEC 1.6): phrases that describe a node and set it apart, fast."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import Stemmer

from psirag.abstracts import format_abstract, keyword_abstracts
from psirag.abstracts.keywords import STOPWORDS
from psirag.tree.model import Tree

FOOTBALL = [
    "Real Madrid\nReal Madrid is a professional football club based in Madrid. The football club "
    "plays its home matches at the Santiago Bernabéu stadium. It has a long history.",
    "FC Barcelona\nFC Barcelona is a professional football club founded in 1899. The club won "
    "the Champions League title and plays at the Camp Nou stadium. It has a long history.",
    "Manchester United\nManchester United is a professional football club that plays in the "
    "Premier League. The football club won the Champions League title at Old Trafford stadium. "
    "It has a long history.",
    "Juventus\nJuventus is a professional football club from Turin. The club plays in Serie A "
    "and won the Champions League title. It has a long history.",
    "Bayern Munich\nBayern Munich is a professional football club from Munich. The football club "
    "plays at the Allianz Arena stadium and won the Champions League title. It has a long history.",
    "Ajax\nAjax is a professional football club from Amsterdam. The football club plays at the "
    "Johan Cruyff Arena stadium. It has a long history.",
]
VOLCANOES = [
    "Mount Etna\nMount Etna is an active stratovolcano in Sicily. Its lava flows and volcanic "
    "eruptions are frequent. It has a long history.",
    "Mount Vesuvius\nMount Vesuvius is an active stratovolcano near Naples. Volcanic eruptions "
    "buried Pompeii under volcanic ash. It has a long history.",
    "Mauna Loa\nMauna Loa is an active shield volcano in Hawaii. Its lava flows reach the "
    "ocean during volcanic eruptions. It has a long history.",
    "Krakatoa\nKrakatoa is a volcanic island in Indonesia. The volcanic eruptions of 1883 "
    "spread volcanic ash around the world. It has a long history.",
    "Mount Fuji\nMount Fuji is an active stratovolcano in Japan. Lava flows shaped its "
    "cone, and volcanic ash fell on Tokyo. It has a long history.",
    "Eyjafjallajökull\nEyjafjallajökull is a volcano in Iceland. Volcanic eruptions in 2010 sent "
    "volcanic ash over Europe and closed airports. It has a long history.",
]
TEXTS = FOOTBALL + VOLCANOES
N = len(TEXTS)
FOOTBALL_NODE, VOLCANO_NODE, ROOT = N, N + 1, N + 2

_stem = Stemmer.Stemmer("english").stemWord


def two_topic_tree() -> Tree:
    """Football leaves under one node, volcano leaves under its sibling, one root above."""
    parent = np.array([FOOTBALL_NODE] * 6 + [VOLCANO_NODE] * 6 + [ROOT, ROOT, -1])
    layer = np.array([0] * N + [1, 1, 2])
    return Tree(parent=parent, layer=layer)


def flat_tree(n_leaves: int) -> Tree:
    """All leaves under a single root."""
    return Tree(parent=np.array([n_leaves] * n_leaves + [-1]), layer=np.array([0] * n_leaves + [1]))


def occurs(phrase: str, texts: list[str]) -> bool:
    """Whether the phrase's words occur (as stems, in order) in one of the texts."""
    want = [_stem(w.lower()) for w in phrase.split()]
    for text in texts:
        words = [_stem(w.lower()) for w in re.findall(r"[^\W_]+(?:['\-][^\W_]+)*", text)]
        if any(words[i : i + len(want)] == want for i in range(len(words))):
            return True
    return False


def assert_no_duplicates(phrases: list[str]) -> None:
    lowered = [p.lower() for p in phrases]
    assert len(set(lowered)) == len(lowered), phrases
    stemmed = [tuple(_stem(w) for w in p.split()) for p in lowered]
    assert len(set(stemmed)) == len(stemmed), phrases
    in_multi = {w for s in stemmed if len(s) > 1 for w in s}
    for s in stemmed:
        if len(s) == 1:
            assert s[0] not in in_multi, (s, phrases)
    for short in stemmed:  # nor a phrase repeated inside a longer one
        for long in stemmed:
            if len(short) < len(long):
                runs = [long[i : i + len(short)] for i in range(len(long) - len(short) + 1)]
                assert short not in runs, (short, long, phrases)


def test_sibling_topics_get_their_own_phrases() -> None:
    out = keyword_abstracts(TEXTS, two_topic_tree())
    assert len(out) == 3
    for node, own, other in (
        (FOOTBALL_NODE, FOOTBALL, VOLCANOES),
        (VOLCANO_NODE, VOLCANOES, FOOTBALL),
    ):
        phrases = out[node - N]
        assert phrases, node
        for p in phrases:
            assert occurs(p, own), (p, phrases)
            assert not (occurs(p, other) and not occurs(p, own)), (p, phrases)
        # the shared "long history" must not appear above the topic's own themes
        shared = [i for i, p in enumerate(phrases) if occurs(p, own) and occurs(p, other)]
        distinctive = [i for i, p in enumerate(phrases) if not occurs(p, other)]
        assert distinctive
        assert not shared or min(shared) > min(distinctive), phrases
    football = [p.lower() for p in out[FOOTBALL_NODE - N]]
    volcano = [p.lower() for p in out[VOLCANO_NODE - N]]
    assert "professional football club" in football or "football club" in football
    assert "volcanic eruptions" in volcano
    assert "volcanic ash" in volcano


def test_distinctive_themes_rank_above_shared_words() -> None:
    out = keyword_abstracts(TEXTS, two_topic_tree())
    for node, theme in ((FOOTBALL_NODE, "stadium"), (VOLCANO_NODE, "volcanic ash")):
        phrases = [p.lower() for p in out[node - N]]
        assert theme in phrases, phrases
        for shared in ("long history", "history"):
            if shared in phrases:
                assert phrases.index(shared) > phrases.index(theme), phrases


COOKING = [
    f"{dish}\n{dish} is a dish made with fresh herbs and olive oil. The recipe needs a hot oven."
    for dish in ("Ratatouille", "Moussaka", "Lasagne", "Paella", "Risotto", "Bouillabaisse")
] + [
    f"{dish}\n{dish} is a dish cooked with garlic and olive oil in a hot oven."
    for dish in ("Tagine", "Cassoulet", "Gratin", "Frittata", "Focaccia", "Biryani")
]


def test_distinctiveness_is_against_the_siblings() -> None:
    # football and volcano siblings share "long history"; the cooking subtree never says it
    texts = TEXTS + COOKING
    n = len(texts)
    sports, volcano, nature, cooking, root = n, n + 1, n + 2, n + 3, n + 4
    parent = np.array(
        [sports] * 6 + [volcano] * 6 + [cooking] * 12 + [nature, nature, root, root, -1]
    )
    layer = np.array([0] * n + [1, 1, 2, 2, 3])
    tree = Tree(parent=parent, layer=layer)
    for max_phrases in (5, 8):
        out = keyword_abstracts(texts, tree, max_phrases=max_phrases)
        for node in (sports, volcano):
            words = {w for p in out[node - n] for w in p.lower().split()}
            assert not words & {"long", "history"}, out[node - n]
        # what the two siblings share is what sets their parent apart from the cooking side
        assert "long history" in [p.lower() for p in out[nature - n]], out[nature - n]
        assert "olive oil" in [p.lower() for p in out[cooking - n]], out[cooking - n]


def test_broad_themes_come_before_specific_entities() -> None:
    phrases = keyword_abstracts(TEXTS, two_topic_tree())[FOOTBALL_NODE - N]
    lowered = [p.lower() for p in phrases]
    broad = next(i for i, p in enumerate(lowered) if "football club" in p)
    entities = [i for i, p in enumerate(phrases) if p in ("Santiago Bernabéu", "Camp Nou", "Turin")]
    assert entities, phrases
    assert all(i > broad for i in entities), phrases
    # and the shown form keeps the corpus' capitalisation
    assert "Champions League" in phrases or "Champions League title" in phrases


def test_phrases_over_single_words() -> None:
    for max_phrases in (20, 10, 7):
        out = keyword_abstracts(TEXTS, two_topic_tree(), max_phrases=max_phrases)
        for phrases in out:
            multi = sum(" " in p for p in phrases)
            assert multi >= len(phrases) / 2, phrases


def test_phrases_over_single_words_when_duplicates_thin_them_out() -> None:
    # one long name gives many overlapping multi-word candidates but few distinct phrases;
    # the single words around it must not outnumber the phrases that survive
    text = (
        "Alpha Beta Gamma Delta Epsilon Zeta Eta Theta. Red, green, blue, cyan, magenta, "
        "yellow, black, white, orange, purple, violet, indigo, brown, silver, golden."
    )
    phrases = keyword_abstracts([text, text], flat_tree(2))[0]
    multi = sum(" " in p for p in phrases)
    assert multi >= 2
    assert multi >= len(phrases) / 2, phrases
    assert_no_duplicates(phrases)


def test_no_duplicates_and_limit() -> None:
    texts = [
        "Film\nThe film was a great film. Films and filming: the Film Festival showed films.",
        "Films\nA film festival is a festival of films. FILM FESTIVAL prizes go to a film.",
        "Cinema\nThe cinema shows a film every night; film critics visit the film festival.",
        *TEXTS,
    ]
    tree = Tree(
        parent=np.array([len(texts)] * 3 + [len(texts) + 1] * N + [-1, -1]),
        layer=np.array([0] * len(texts) + [1, 1]),
    )
    for max_phrases in (20, 5, 1):
        for phrases in keyword_abstracts(texts, tree, max_phrases=max_phrases):
            assert 0 < len(phrases) <= max_phrases
            assert_no_duplicates(phrases)
    phrases = keyword_abstracts(texts, tree)[0]
    lowered = [p.lower() for p in phrases]
    assert sum(p in ("film", "films") for p in lowered) <= 1
    assert "film festival" in lowered
    assert "film" not in lowered  # contained in the chosen "film festival"


def test_candidates_are_clean_phrases() -> None:
    for phrases in keyword_abstracts(TEXTS, two_topic_tree()):
        for p in phrases:
            words = p.split()
            assert 1 <= len(words) <= 3
            assert words[0].lower() not in STOPWORDS and words[-1].lower() not in STOPWORDS
            assert words[0][0].isalpha() and words[-1][0].isalpha(), p
            assert not re.search(r"[.,;:()!?\"]", p), p


def test_stopwords_inside_phrases_only_in_names() -> None:
    texts = [
        "Sudden Fear\nSudden Fear is a thriller starring Joan Crawford and Jack Palance. "
        "A collector of dirty money appears. The Bank of England paid.",
        "Queen Bee\nQueen Bee is a drama starring Joan Crawford and Barry Sullivan. "
        "A collector of dirty money appears. The Bank of England paid. It's Free, they're here.",
    ]
    phrases = [p.lower() for p in keyword_abstracts(texts, flat_tree(2))[0]]
    assert not [p for p in phrases if p.startswith(("it's", "they're"))], phrases
    assert "bank of england" in phrases
    assert "joan crawford" in phrases
    assert "crawford and jack" not in phrases
    assert "collector of dirty" not in phrases
    assert any("dirty money" in p for p in phrases)


def test_every_node_gets_phrases() -> None:
    out = keyword_abstracts(TEXTS, two_topic_tree())
    assert all(out), out
    root = [p.lower() for p in out[ROOT - N]]
    assert any("history" in p for p in root), root  # the theme all leaves share


def test_forest_roots_compare_with_the_corpus() -> None:
    # two separate trees: no common root
    parent = np.array([FOOTBALL_NODE] * 6 + [VOLCANO_NODE] * 6 + [-1, -1])
    layer = np.array([0] * N + [1, 1])
    tree = Tree(parent=parent, layer=layer)
    assert tree.roots.size == 2
    out = keyword_abstracts(TEXTS, tree)
    assert len(out) == 2
    football, volcano = out
    assert football and volcano
    assert all(occurs(p, FOOTBALL) for p in football)
    assert all(occurs(p, VOLCANOES) for p in volcano)
    assert "volcanic ash" in [p.lower() for p in volcano]


def test_forest_roots_are_set_apart_from_each_other() -> None:
    # three separate trees; football and volcano leaves share "long history", cooking does not
    texts = TEXTS + COOKING
    n = len(texts)
    parent = np.array([n] * 6 + [n + 1] * 6 + [n + 2] * 12 + [-1, -1, -1])
    tree = Tree(parent=parent, layer=np.array([0] * n + [1, 1, 1]))
    for max_phrases in (4, 6, 10):
        football, volcano, cooking = keyword_abstracts(texts, tree, max_phrases=max_phrases)
        for phrases in (football, volcano):
            words = {w for p in phrases for w in p.lower().split()}
            assert not words & {"long", "history"}, phrases
        assert "olive oil" in [p.lower() for p in cooking]


def test_identical_leaves() -> None:
    text = "Mount Etna\nMount Etna is an active stratovolcano in Sicily with frequent lava flows."
    out = keyword_abstracts([text] * 4, flat_tree(4))
    assert len(out) == 1
    phrases = [p.lower() for p in out[0]]
    assert phrases and len(phrases) <= 20
    assert "mount etna" in phrases
    assert_no_duplicates(out[0])
    # identical leaves under one child of a larger tree
    texts = [text] * 3 + VOLCANOES
    tree = Tree(
        parent=np.array([9] * 3 + [10] * 6 + [11, 11, -1]), layer=np.array([0] * 9 + [1, 1, 2])
    )
    assert all(keyword_abstracts(texts, tree))


def test_leaves_without_letters_give_empty_lists() -> None:
    numbers = ["123 456", "!!! --- ???", "", "1999, 2000. (42)"]
    assert keyword_abstracts(numbers, flat_tree(4)) == [[]]
    # a node of such leaves next to a node with words
    texts = numbers + FOOTBALL
    tree = Tree(
        parent=np.array([10] * 4 + [11] * 6 + [12, 12, -1]), layer=np.array([0] * 10 + [1, 1, 2])
    )
    out = keyword_abstracts(texts, tree)
    assert out[0] == []
    assert out[1] and out[2]


def test_deterministic() -> None:
    tree = two_topic_tree()
    first = keyword_abstracts(TEXTS, tree)
    assert keyword_abstracts(list(TEXTS), two_topic_tree()) == first
    assert keyword_abstracts(TEXTS, tree) == first


def test_trivial_inputs_and_errors() -> None:
    single = Tree(parent=np.array([-1]), layer=np.array([0]))
    assert keyword_abstracts(["only a leaf"], single) == []
    with pytest.raises(ValueError):
        keyword_abstracts(TEXTS[:3], two_topic_tree())
    with pytest.raises(ValueError):
        keyword_abstracts(TEXTS, two_topic_tree(), max_phrases=0)


def test_format_abstract() -> None:
    assert format_abstract(["volcanic ash", "Mount Etna"]) == "volcanic ash, Mount Etna"
    assert format_abstract([]) == ""


# --- speed on a real corpus -------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "2wikimultihopqa" / "corpus.json"


def hashed_embeddings(texts: list[str], dim: int = 256, seed: int = 0) -> np.ndarray:
    """Cheap stand-in embeddings (TF-IDF times a random projection), enough to shape a tree."""
    vocab: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for i, text in enumerate(texts):
        for w in re.findall(r"[a-z]{3,}", text.lower()):
            rows.append(i)
            cols.append(vocab.setdefault(w, len(vocab)))
    x = sp.csr_matrix(
        (np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), len(vocab))
    )
    x.sum_duplicates()
    x.data = np.log1p(x.data)
    df = np.bincount(x.indices, minlength=len(vocab))
    x = x @ sp.diags(np.log(len(texts) / df).astype(np.float32))
    proj = np.random.default_rng(seed).standard_normal((len(vocab), dim)).astype(np.float32)
    e = np.asarray(x @ proj)
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-9)


@pytest.mark.slow
@pytest.mark.skipif(not CORPUS.exists(), reason="2Wiki corpus not available")
def test_2wiki_speed() -> None:
    from psirag.tree import build_tree

    records = json.loads(CORPUS.read_text())
    texts = [r["title"] + "\n" + r["text"] for r in records]
    tree = build_tree(hashed_embeddings(texts), max_children=40)
    start = time.perf_counter()
    out = keyword_abstracts(texts, tree)
    elapsed = time.perf_counter() - start
    print(f"\n2Wiki: {tree.n_nodes - tree.n_leaves} abstract nodes in {elapsed:.1f} s")
    assert elapsed < 30
    assert len(out) == tree.n_nodes - tree.n_leaves
    assert all(0 < len(p) <= 20 for p in out)
    for phrases in out:
        assert_no_duplicates(phrases)


def test_repeated_word_phrases_do_not_crash() -> None:
    """A text of one repeated word yields sub-phrases that repeat; selection must cope."""
    texts = ["word " * 40, "word " * 35, "other " * 10 + "word " * 5]
    tree = Tree(parent=np.array([3, 3, 4, 4, -1]), layer=np.array([0, 0, 0, 1, 2]))
    phrases = keyword_abstracts(texts, tree)
    assert len(phrases) == 2
    for node in phrases:
        assert len({p.lower() for p in node}) == len(node)


def _random_corpus(rng: np.random.Generator, n: int) -> list[str]:
    """Passages of a few topics' pseudo-words, some capitalised names, some stopwords."""
    topics = [[f"t{t}w{i}" for i in range(12)] for t in range(4)]
    names = ["Mount Etna", "Five Little Peppers", "Arena", "Nova Scotia", "Red River"]
    common = ["the", "of", "river", "stone", "play", "music"]
    out = []
    for _ in range(n):
        topic = topics[int(rng.integers(len(topics)))]
        words = [
            str(rng.choice(topic)) if rng.random() < 0.6 else str(rng.choice(common))
            for _ in range(int(rng.integers(3, 14)))
        ]
        if rng.random() < 0.4:
            words.insert(int(rng.integers(len(words) + 1)), str(rng.choice(names)))
        out.append(" ".join(words))
    return out


def _one_process_then_two(
    monkeypatch: pytest.MonkeyPatch, texts: list[str], tree: Tree
) -> list[list[str]]:
    """Tiny product blocks (many spans), the abstracts scored in one process, then the
    settings that make the next ``keyword_abstracts`` score in two on any machine."""
    import psirag.abstracts.keywords as kw

    monkeypatch.setattr(kw, "_PRODUCT_BUDGET", 40)
    monkeypatch.setenv("PSIRAG_PARALLEL_ABSTRACTS", "0")
    one = kw.keyword_abstracts(texts, tree, max_phrases=8)
    monkeypatch.setenv("PSIRAG_PARALLEL_ABSTRACTS", "1")
    monkeypatch.setattr(kw, "PARALLEL_MIN_NODES", 1)
    monkeypatch.setattr(kw.os, "cpu_count", lambda: 2)
    return one


def _random_tree(rng: np.random.Generator, n: int) -> Tree:
    """Leaves in random groups, groups in random groups, under one root or several."""
    parent: list[int] = []
    layer = [0] * n
    level = list(range(n))
    depth = 0
    while len(level) > 1 and depth < 3:
        depth += 1
        groups: list[list[int]] = []
        order = rng.permutation(len(level)).tolist()
        at = 0
        while at < len(order):
            size = int(rng.integers(1, 6))
            groups.append([level[i] for i in order[at : at + size]])
            at += size
        nxt = []
        for g in groups:
            node = len(layer)
            layer.append(depth)
            nxt.append(node)
            for child in g:
                while len(parent) <= child:
                    parent.append(-1)
                parent[child] = node
        level = nxt
    while len(parent) < len(layer):
        parent.append(-1)
    return Tree(parent=np.array(parent), layer=np.array(layer))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [None, 64])
def test_single_leaf_phrases_read_from_their_leaves_match_the_full_product(
    seed: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phrases of one leaf skip the node x phrase products (count 1 wherever the leaf is, so
    only the lowest columns of each ranked list are scored): the
    abstracts are exactly those of the products over every column (also when nodes are scored
    a slice at a time, ``chunk``)."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 160))
    texts = _random_corpus(rng, n)
    tree = _random_tree(rng, n)
    if chunk is not None:
        monkeypatch.setattr(kw, "_SCORE_CHUNK", chunk)
    max_phrases = int(rng.integers(3, 12))
    split = kw.keyword_abstracts(texts, tree, max_phrases=max_phrases)
    real_split = kw._split_leaf_phrases
    seen: list[int] = []

    def no_split(phrases: object) -> tuple[object, object]:
        _multi, single = real_split(phrases)  # type: ignore[arg-type]
        seen.append(single.pid.size)
        everything = kw._LeafPhrases(phrases.lp_ptr, phrases.lp_pid)  # type: ignore[attr-defined]
        return everything, kw._LeafPhrases(np.zeros_like(single.ptr), single.pid[:0])

    monkeypatch.setattr(kw, "_split_leaf_phrases", no_split)
    full = kw.keyword_abstracts(texts, tree, max_phrases=max_phrases)
    assert seen and seen[0] > 0  # the corpus has single-leaf phrases to split out
    assert split == full
    assert sum(len(p) for p in split) > 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("budget", [None, 5])
def test_single_leaf_candidates_found_a_layer_at_a_time_match_the_full_product(
    seed: int, budget: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each node's single-leaf candidates are kept from its children's, not read from every
    leaf below: with a candidate pool of one or two phrases per ranked list (so that most are
    dropped on the way up; also a few entries reduced at a time, ``budget``), the abstracts
    are exactly those of the products over every column."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(40, 160))
    # with words of one leaf each, some capitalised, most phrases are single-leaf ones; in
    # the odd seeds' corpora, the lowest columns of a node are its first leaf's first word
    if seed % 2:
        shared = ["river", "stone music", "Mount Etna", "play"]
        texts = [f"w{i}a, {shared[int(rng.integers(4))]}, Q{i}b x{i}c, y{i}d" for i in range(n)]
    else:
        texts = [f"{t}, w{i}a, Q{i}b x{i}c y{i}d" for i, t in enumerate(_random_corpus(rng, n))]
    tree = _random_tree(rng, n)
    monkeypatch.setattr(kw, "CANDIDATE_POOL", 1)
    if budget is not None:
        monkeypatch.setattr(kw, "_TOPS_BUDGET", budget)
    max_phrases = int(rng.integers(1, 3))
    split = kw.keyword_abstracts(texts, tree, max_phrases=max_phrases)
    real_split = kw._split_leaf_phrases
    real_tops = kw._SingleTops.build
    kept: list[int] = []

    def counted(*args: object) -> object:
        tops = real_tops(*args)  # type: ignore[arg-type]
        kept.append(int(sum(c.size for c in tops.codes)))
        return tops

    def no_split(phrases: object) -> tuple[object, object]:
        _multi, single = real_split(phrases)  # type: ignore[arg-type]
        everything = kw._LeafPhrases(phrases.lp_ptr, phrases.lp_pid)  # type: ignore[attr-defined]
        return everything, kw._LeafPhrases(np.zeros_like(single.ptr), single.pid[:0])

    monkeypatch.setattr(kw._SingleTops, "build", counted)
    kw.keyword_abstracts(texts, tree, max_phrases=max_phrases)
    monkeypatch.setattr(kw, "_split_leaf_phrases", no_split)
    full = kw.keyword_abstracts(texts, tree, max_phrases=max_phrases)
    assert split == full
    assert sum(len(p) for p in split) > 0
    # the pool is small: far fewer candidates kept than the nodes' single-leaf phrases
    assert kept and kept[0] > 0


def test_lowest_codes_keep_each_rows_lowest_of_every_list() -> None:
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(3)
    n_rows, k = 40, 3
    row = np.sort(rng.integers(0, n_rows, size=600))
    cols = rng.permutation(5000)[:600]  # distinct columns
    flags = rng.integers(0, 4, size=600)
    code = (cols << 2 | flags).astype(np.int32)
    order = rng.permutation(600)  # any order in, by row and column out
    kept, counts = kw._lowest_codes(row[order], code[order], n_rows, k)
    want: list[int] = []
    for r in range(n_rows):
        mine = np.sort(code[row == r])
        sel = set(mine[:k].tolist())
        for bit in (2, 1):
            sel |= set(mine[(mine & bit) != 0][:k].tolist())
        want += sorted(sel)
        assert counts[r] == len(sel)
    assert kept.tolist() == want


@pytest.mark.parametrize("seed", range(4))
def test_products_over_compact_columns_give_the_abstracts_of_every_column(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node x phrase products run over the phrases of two or more leaves only, renumbered:
    their rows read back as phrase ids give the abstracts of products over every phrase id."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(40, 160))
    texts = _random_corpus(rng, n)
    tree = _random_tree(rng, n)
    real = kw._compact_columns
    sizes: list[tuple[int, int]] = []

    def checked(phrases: object, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids, cols = real(phrases, pids)  # type: ignore[arg-type]
        assert np.array_equal(ids[cols], pids)
        sizes.append((ids.size, phrases.key.size))  # type: ignore[attr-defined]
        return ids, cols

    monkeypatch.setattr(kw, "_compact_columns", checked)
    compact = kw.keyword_abstracts(texts, tree, max_phrases=8)
    assert sizes and sizes[0][0] < sizes[0][1]  # fewer columns than phrases

    def every(phrases: object, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(phrases.key.size), pids  # type: ignore[attr-defined]

    monkeypatch.setattr(kw, "_compact_columns", every)
    assert compact == kw.keyword_abstracts(texts, tree, max_phrases=8)
    assert sum(len(p) for p in compact) > 0


@pytest.mark.parametrize("seed", range(3))
def test_abstracts_scored_by_two_processes_are_the_abstracts_of_one(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big build's nodes are scored by this process and a forked child, each taking the next
    block: with blocks forced small (many of them, parents' rows split across blocks), the
    abstracts are those of one process, in node order, and the child scored some of them."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(300 + seed)
    n = int(rng.integers(80, 200))
    texts = _random_corpus(rng, n)
    tree = _random_tree(rng, n)
    one = _one_process_then_two(monkeypatch, texts, tree)
    spans: list[int] = []
    real = kw._in_two_processes

    def counted(score: Any, blocks: list[tuple[int, int]], bar: Any) -> dict[int, list[str]]:
        spans.append(len(blocks))
        done = real(score, blocks, bar)
        return done

    monkeypatch.setattr(kw, "_in_two_processes", counted)
    two = kw.keyword_abstracts(texts, tree, max_phrases=8)
    assert spans and spans[0] > 2
    assert two == one and sum(len(p) for p in one) > 0


def test_the_spans_a_failed_child_took_are_scored_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forked child scores its spans but fails to write them: the parent scores the spans
    the child took, and the abstracts are still complete and equal."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(7)
    texts = _random_corpus(rng, 150)
    tree = _random_tree(rng, 150)
    one = _one_process_then_two(monkeypatch, texts, tree)

    class BrokenJson:
        load = staticmethod(json.load)

        @staticmethod
        def dump(*args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

    monkeypatch.setattr(kw, "json", BrokenJson)
    parent = os.getpid()
    scored: list[int] = []  # spans scored in this (the parent) process, per call
    real = kw._in_two_processes

    def observed(score: Any, blocks: list[tuple[int, int]], bar: Any) -> dict[int, list[str]]:
        def slow_here(spans: Any, bar: Any) -> dict[int, list[str]]:
            if os.getpid() != parent:
                return score(spans, bar)
            time.sleep(0.3)  # the child takes spans meanwhile
            spans = list(spans)
            scored.append(len(spans))
            return score(spans, bar)

        return real(slow_here, blocks, bar)

    monkeypatch.setattr(kw, "_in_two_processes", observed)
    assert kw.keyword_abstracts(texts, tree, max_phrases=8) == one
    assert len(scored) == 2 and scored[1] > 0  # the second call: the child's spans


@pytest.mark.parametrize("seed", range(3))
def test_a_root_row_without_its_id_array_gives_the_abstracts_of_the_array(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node over every leaf (a single tree's root) reads the corpus's counts, its ids 0 .. n-1
    made a slice at a time; as a parent, its counts of the product rows' phrases go into the
    scratch row by compact column: its children's and its own phrases are those read through a
    real array of every id, in the products' path and in an update's (no scratch row), and
    every node's phrases are an update's of every node."""
    import psirag.abstracts.keywords as kw

    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(60, 160))
    texts = _random_corpus(rng, n)
    forest = _random_tree(rng, n)
    tops = np.flatnonzero(forest.parent < 0)  # under one root: a node over every leaf
    root = forest.parent.size
    parent = np.append(forest.parent, -1)
    parent[tops] = root
    tree = Tree(parent=parent, layer=np.append(forest.layer, forest.layer.max() + 1))
    roots_children = np.flatnonzero(tree.parent == root).tolist()
    assert roots_children  # the root is read as a parent row
    real = kw._every_row
    lazy_rows: list[bool] = []

    def seen(global_df: np.ndarray) -> tuple[object, np.ndarray]:
        ids, counts = real(global_df)
        lazy_rows.append(isinstance(ids, kw._AllIds))
        return ids, counts

    monkeypatch.setattr(kw, "_every_row", seen)
    lazy = kw.keyword_abstracts(texts, tree, max_phrases=8)
    few = kw.keyword_abstracts(texts, tree, max_phrases=8, nodes=[root, *roots_children])
    assert lazy_rows == [True, True]

    def array(global_df: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        every = np.flatnonzero(global_df > 0).astype(np.int32)
        return every, global_df[every]

    monkeypatch.setattr(kw, "_every_row", array)
    assert lazy == kw.keyword_abstracts(texts, tree, max_phrases=8)
    assert few == kw.keyword_abstracts(texts, tree, max_phrases=8, nodes=[root, *roots_children])
    assert few == [lazy[u - n] for u in [root, *roots_children]]
    assert sum(len(p) for p in lazy) > 0
    inner = list(range(n, tree.parent.size))
    assert lazy == kw.keyword_abstracts(texts, tree, max_phrases=8, nodes=inner)
