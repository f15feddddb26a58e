"""``hnsw``: approximate cosine over the leaf vectors, an HNSW graph (hnswlib, ``psirag[ann]``).

The graph is built on first use (hnswlib is imported only then) over one leaf per distinct text,
and kept beside a saved index as ``ann/hnsw-<digest>.bin`` (hnswlib's own binary format, not
pickle; its leaf ids in ``.labels.npy``), where ``<digest>`` hashes the leaf vectors, their ids
and the build parameters: a later load finds it again. After ``psirag add`` (new leaves
appended, old ones unchanged) the saved graph is loaded and only the new leaves are inserted;
after ``psirag remove`` (leaves renumbered) it no longer matches and is rebuilt on first use.
The search breadth ``ef`` is ``SearchConfig.beam`` (at least ``candidates``), as the beam is
the tree's. A document filter ranks the allowed leaves exactly (the ``dense`` list).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import InputError
from psirag.retrieval.dense import Ranked
from psirag.retrieval.lists import ListContext, ListRequest, register_list
from psirag.retrieval.ranking import first_copies

log = logging.getLogger("psirag")

HNSW_M = 16
"""Graph degree (hnswlib's M)."""
HNSW_EF_CONSTRUCTION = 100
"""Candidate list while building; higher is slower and closer to exact."""
FOLDER = "ann"
"""Where a saved index keeps its graphs (beside the generations)."""


def require_hnswlib() -> Any:
    """Import hnswlib, or say which extra provides it."""
    try:
        import hnswlib
    except ImportError as exc:
        raise InputError(
            "the hnsw candidate list needs the hnswlib package, which is not installed: "
            "pip install 'psirag[ann]' (or search with the tree or dense list)"
        ) from exc
    return hnswlib


def graph_digest(vectors: np.ndarray, labels: np.ndarray, m: int, ef_construction: int) -> str:
    """What a saved graph must match: the indexed vectors, their leaf ids, the parameters."""
    h = hashlib.sha256(f"hnsw m={m} efc={ef_construction} {vectors.shape}".encode())
    h.update(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    return h.hexdigest()[:20]


class HnswFlat:
    """An inner-product HNSW graph over unit leaf vectors, labelled by leaf id."""

    def __init__(
        self,
        vectors: np.ndarray,
        labels: np.ndarray,
        *,
        m: int = HNSW_M,
        ef_construction: int = HNSW_EF_CONSTRUCTION,
        folder: Path | None = None,
        threads: int = 1,
    ) -> None:
        hnswlib = require_hnswlib()
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.digest = graph_digest(self.vectors, self.labels, m, ef_construction)
        n, dim = self.vectors.shape
        self.graph = hnswlib.Index(space="ip", dim=dim)
        path = None if folder is None else folder / f"hnsw-{self.digest}.bin"
        if path is not None and path.is_file():
            try:
                self.graph.load_index(str(path), max_elements=max(n, 1))
                if self.graph.get_current_count() == n:
                    self.loaded_from: Path | None = path
                    self.graph.set_num_threads(1)
                    return
            except (RuntimeError, OSError) as exc:
                log.warning("psirag: HNSW graph %s unreadable (%s); rebuilding it", path, exc)
            self.graph = hnswlib.Index(space="ip", dim=dim)
        self.loaded_from = None
        self.extended_from: Path | None = None
        start = 0 if folder is None else self._extend(folder, m, ef_construction)
        if start == 0:
            self.graph.init_index(max_elements=max(n, 1), ef_construction=ef_construction, M=m)
        self.graph.set_num_threads(max(1, threads))
        if n > start:
            self.graph.add_items(self.vectors[start:], self.labels[start:])
        self.graph.set_num_threads(1)
        if path is not None:
            self._save(path)

    def _extend(self, folder: Path, m: int, ef_construction: int) -> int:
        """Load a saved graph over a prefix of these leaves (an index that ``psirag add`` only
        appended to: old leaves keep their ids and vectors) and return how many leaves it
        holds, so that only the new ones are inserted; 0 when there is none."""
        hnswlib = require_hnswlib()
        for graph in sorted(folder.glob("hnsw-*.bin")):
            try:
                old = np.load(graph.with_suffix(".labels.npy"), allow_pickle=False)
            except (OSError, ValueError):
                continue
            size = int(old.size)
            if not 0 < size <= self.labels.size or not np.array_equal(self.labels[:size], old):
                continue
            prefix = graph_digest(self.vectors[:size], old, m, ef_construction)
            if graph.name != f"hnsw-{prefix}.bin":
                continue
            candidate = hnswlib.Index(space="ip", dim=self.vectors.shape[1])
            try:
                candidate.load_index(str(graph), max_elements=max(int(self.labels.size), 1))
            except (RuntimeError, OSError):
                continue
            if candidate.get_current_count() != size:
                continue
            self.graph = candidate
            self.extended_from = graph
            return size
        return 0

    def _save(self, path: Path) -> None:
        """Write the graph atomically and drop older ones; a read-only folder keeps it in
        memory only."""
        try:
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            self.graph.save_index(str(tmp))
            labels = path.with_suffix(".labels.npy")
            tmp_labels = tmp.with_name(tmp.name + ".npy")
            np.save(tmp_labels, self.labels, allow_pickle=False)
            os.replace(tmp_labels, labels)
            os.replace(tmp, path)
            for old in path.parent.glob("hnsw-*"):
                if old not in (path, labels):
                    old.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("psirag: HNSW graph not saved in %s (%s)", path.parent, exc)

    def search(self, vector: np.ndarray, k: int, ef: int) -> Ranked:
        """The ``k`` nearest leaves (approximately), best first, with their cosines."""
        k = min(k, int(self.labels.size))
        if k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        self.graph.set_ef(max(ef, k))
        ids, distances = self.graph.knn_query(
            np.asarray(vector, dtype=np.float32).reshape(1, -1), k=k, num_threads=1
        )
        return ids[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)


class HnswList:
    def __init__(self, context: ListContext) -> None:
        self.context = context
        data = context.data
        leaves = np.flatnonzero(first_copies(data.sparse.first_copy))
        origin = data.origin
        folder = None if origin is None else Path(origin.folder) / FOLDER
        self.index = HnswFlat(data.node_vectors[leaves], leaves, folder=folder)

    def rank(self, request: ListRequest) -> Ranked:
        if request.leaves is not None:  # inside some documents: exact, as the dense list
            return self.context.candidate_list("dense").rank(request)
        return self.index.search(request.vector, request.k, request.config.beam)


register_list("hnsw", HnswList, "approximate cosine, an HNSW graph over the leaves (psirag[ann])")
