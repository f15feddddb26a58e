"""The candidate lists a search fuses, by name: a registry, as ``eval/methods.py`` has for the
evaluated methods.

A list ranks leaves for one query. Each lives in its own module of this package and registers
itself there with :func:`register_list`; every module here is imported the first time a list is
looked up, so a new list (an HNSW index, a reranker's first stage) is one new module and nothing
else. A :class:`~psirag.config.SearchConfig` names the lists it fuses (``lists``, or the
``use_tree``/``use_dense``/``use_bm25`` flags for the three built-ins), in fusion order::

    from psirag.retrieval.lists import ListRequest, register_list

    class Mine:
        def __init__(self, context): self.data = context.data   # built once per index
        def rank(self, request: ListRequest): ...   # -> (leaf ids best first, scores)

    register_list("mine", Mine, "what it ranks by")

Built-ins: ``tree`` (Algorithm 2, or the exact scan that stands in for it on small indexes),
``dense`` (exact flat cosine), ``bm25`` and ``hnsw`` (approximate cosine, ``psirag[hnsw]``).
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from psirag.errors import InputError
from psirag.retrieval.dense import Ranked

if TYPE_CHECKING:
    from psirag.config import SearchConfig
    from psirag.index_data import IndexData


@dataclass(frozen=True)
class ListRequest:
    """One query as a list sees it."""

    vector: np.ndarray
    """The query embedding (unit length, the index's dimension)."""
    query: str
    """The query text (what BM25 reads)."""
    config: SearchConfig
    leaves: np.ndarray | None
    """Boolean mask of the leaves the search may return (a document filter); None: all."""
    nodes: np.ndarray | None
    """Boolean mask of the tree nodes holding an allowed leaf; None: all."""

    @property
    def k(self) -> int:
        """How deep each list goes before fusion (``config.candidates``)."""
        return self.config.candidates


class CandidateList(Protocol):
    """A built list: ranks leaves for a request, at most ``request.k`` of them, one leaf per
    distinct text (the index's ``first_copy`` among allowed leaves), best first."""

    def rank(self, request: ListRequest) -> Ranked: ...


class ListContext(Protocol):
    """What a list is built from: the index, and the other lists built over it (built once and
    shared by every retriever over that index)."""

    @property
    def data(self) -> IndexData: ...

    def candidate_list(self, name: str) -> CandidateList: ...


ListFactory = Callable[[ListContext], CandidateList]


@dataclass(frozen=True)
class ListSpec:
    name: str
    factory: ListFactory
    description: str


LISTS: dict[str, ListSpec] = {}
"""Every registered list by name (filled as this package's modules are imported)."""

_loaded = False
_loading = threading.RLock()


def register_list(name: str, factory: ListFactory, description: str = "") -> None:
    """Make ``name`` a list that a SearchConfig can ask for; ``factory(context)`` builds it on
    first use. A name is registered once (a second module taking it is a bug)."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"list names are letters, digits, - and _, got {name!r}")
    if name in LISTS and LISTS[name].factory is not factory:
        raise ValueError(f"candidate list {name!r} is already registered")
    LISTS[name] = ListSpec(name, factory, description)


def _load_builtins() -> None:
    """Import this package's list modules once. Under a lock, and marked loaded only after,
    so that a thread asking while another imports waits instead of seeing a part of them."""
    global _loaded
    if _loaded:
        return
    with _loading:
        if _loaded:
            return
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _loaded = True


def known_lists() -> dict[str, str]:
    """Registered list names -> descriptions."""
    _load_builtins()
    return {name: spec.description for name, spec in sorted(LISTS.items())}


def list_spec(name: str) -> ListSpec:
    """The list called ``name``; an unknown name fails with the known ones."""
    _load_builtins()
    if name not in LISTS:
        raise InputError(
            f"unknown candidate list {name!r}; known lists: {', '.join(sorted(LISTS))}"
        )
    return LISTS[name]


def check_lists(names: Any) -> tuple[str, ...]:
    """``names`` as a tuple of registered list names (a comma-separated string is accepted),
    or a clear error."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = tuple(names)
    for name in names:
        list_spec(name)
    return names


__all__ = [
    "LISTS",
    "CandidateList",
    "ListContext",
    "ListFactory",
    "ListRequest",
    "ListSpec",
    "Ranked",
    "check_lists",
    "known_lists",
    "list_spec",
    "register_list",
]
