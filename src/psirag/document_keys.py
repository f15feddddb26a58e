"""Which leaves belong to which document, without decoding chunk records (issue 24).

Why: an update asks "is document X indexed?", "which leaves are X's?" and "how many documents
are there?". Answered from the chunks, each question decoded every chunk record of a loaded
index (the first add after a load at 1M chunks spent most of its time there). Here every leaf
carries a 64-bit key of its document id (:func:`document_key`), saved with the index; the
questions are array passes over the keys, and only the few leaves whose key matches are
decoded, to confirm the document id itself, so a hash collision never gives a wrong answer.

Keys are made only for indexes whose stored ids are all in NFC (every id a current psirag
stores is); an older index holding another form answers from its chunks, as before
(:class:`ListedDocuments`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from psirag.ids import nfc
from psirag.types import Chunk

if TYPE_CHECKING:
    from psirag.index_data import IndexData


def document_key(doc_id: str) -> int:
    """A 64-bit key of a stored document id (equal ids, equal keys)."""
    digest = hashlib.blake2b(doc_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def keys_of(chunks: Iterable[Chunk]) -> tuple[np.ndarray, int] | None:
    """Per chunk, its document's key (uint64), and the number of documents; None when a
    document id is not in NFC (the keys could not find it by its NFC form, as
    :func:`psirag.ids.match` does)."""
    out: list[int] = []
    seen: set[str] = set()
    last: str | None = None
    key = 0
    for c in chunks:
        doc = c.source.document
        if doc != last:  # a document's chunks are consecutive: hash each id once
            if nfc(doc) != doc:
                return None
            last, key = doc, document_key(doc)
            seen.add(doc)
        out.append(key)
    return np.asarray(out, dtype=np.uint64), len(seen)


class DocumentIndex(Protocol):
    """The document questions an update asks of an index's leaves."""

    @property
    def count(self) -> int:
        """How many documents have leaves (``len(IndexData.documents)``)."""
        ...

    def match(self, given: Iterable[str]) -> tuple[list[str], list[str]]:
        """As :func:`psirag.ids.match` over the index's documents."""
        ...

    def __contains__(self, doc_id: object) -> bool: ...

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        """Those of ``doc_ids`` that are stored (one pass for all of them)."""
        ...

    def leaves_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        """A mask over the leaves: those of the stored documents ``doc_ids``."""
        ...

    def every_id(self) -> set[str]:
        """Every document id (lists them all: only for a rare question)."""
        ...


class KeyedDocuments:
    """:class:`DocumentIndex` from per-leaf document keys and the chunks they describe (read
    only where a key matches)."""

    def __init__(self, keys: np.ndarray, count: int, chunks: Sequence[Chunk]) -> None:
        """``count``: the number of documents, kept beside the keys (two documents may share
        a key, so the keys alone cannot count them)."""
        self.keys = np.asarray(keys, dtype=np.uint64)
        self.count = count
        self.chunks = chunks

    def _leaves_by_id(self, doc_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Per id of ``doc_ids`` that is stored, its leaves (ascending); one pass over the
        keys, then the matching leaves' chunks read to drop another document sharing a key."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return {}
        qkeys = np.asarray([document_key(d) for d in wanted], dtype=np.uint64)
        if len(wanted) == 1:
            hits = np.flatnonzero(self.keys == qkeys[0])
        else:
            hits = np.flatnonzero(np.isin(self.keys, qkeys))
        out: dict[str, list[int]] = {}
        want = set(wanted)
        for leaf in hits.tolist():
            doc = self.chunks[leaf].source.document
            if doc in want:
                out.setdefault(doc, []).append(leaf)
        return {d: np.asarray(v, dtype=np.int64) for d, v in out.items()}

    def match(self, given: Iterable[str]) -> tuple[list[str], list[str]]:
        raw = [str(g) for g in given]
        present = self._leaves_by_id([nfc(g) for g in raw])
        found: list[str] = []
        missing: list[str] = []
        for g in raw:
            stored = nfc(g)
            if stored not in present:
                missing.append(g)
            elif stored not in found:
                found.append(stored)
        return found, missing

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and doc_id in self._leaves_by_id([doc_id])

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        return set(self._leaves_by_id(doc_ids))

    def leaves_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        mask = np.zeros(self.keys.size, dtype=bool)
        for leaves in self._leaves_by_id(doc_ids).values():
            mask[leaves] = True
        return mask

    def every_id(self) -> set[str]:
        return {c.source.document for c in self.chunks}

    def first_leaves(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Each document's first leaf and its number of leaves, in corpus order, from the
        keys alone; None when the keys cannot say (two documents share a key, or a document's
        leaves are not one run), so that the caller reads the chunks instead."""
        keys = self.keys
        if keys.size == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], np.flatnonzero(keys[1:] != keys[:-1]) + 1))
        if starts.size != self.count or np.unique(keys).size != self.count:
            return None
        sizes = np.diff(np.append(starts, keys.size))
        return starts.astype(np.int64), sizes.astype(np.int64)


def document_rows(data: IndexData) -> list[tuple[str, str, int]]:
    """``(id, title, chunks)`` of every document, in corpus order: one chunk read per document
    where the keys tell the documents apart, else one pass over every chunk."""
    found = data.document_index
    runs = found.first_leaves() if isinstance(found, KeyedDocuments) else None
    if runs is not None:
        chunks = data.chunks
        out = []
        for leaf, size in zip(runs[0].tolist(), runs[1].tolist(), strict=True):
            source = chunks[leaf].source
            out.append((source.document, source.title, size))
        return out
    rows: dict[str, list[Any]] = {}
    for chunk in data.chunks:
        row = rows.get(chunk.source.document)
        if row is None:
            rows[chunk.source.document] = row = [chunk.source.title, 0]
        row[1] += 1
    return [(doc, title, n) for doc, (title, n) in rows.items()]


class ListedDocuments:
    """:class:`DocumentIndex` from the document list (what an index without keys uses)."""

    def __init__(self, data: IndexData) -> None:
        self.data = data
        self._ids: set[str] | None = None

    @property
    def count(self) -> int:
        return len(self.data.documents)

    def match(self, given: Iterable[str]) -> tuple[list[str], list[str]]:
        from psirag.ids import match

        return match(given, self.data.documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.every_id()

    def present(self, doc_ids: Sequence[str]) -> set[str]:
        return set(doc_ids) & self.every_id()

    def leaves_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        return np.isin(self.data.leaf_documents, np.array(list(doc_ids), dtype=object))

    def every_id(self) -> set[str]:
        if self._ids is None:
            self._ids = set(self.data.documents)
        return self._ids


__all__ = [
    "DocumentIndex",
    "KeyedDocuments",
    "ListedDocuments",
    "document_key",
    "document_rows",
    "keys_of",
]
