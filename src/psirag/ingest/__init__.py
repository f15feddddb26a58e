"""Ingestion: read a corpus (files, folders, JSON records, strings) and cut it into leaves."""

from __future__ import annotations

from psirag.ingest.chunking import chunk_spans, count_tokens, sentence_spans
from psirag.ingest.loaders import (
    SUFFIXES,
    Document,
    chunk_id,
    documents_from_strings,
    load_documents,
    make_chunks,
)

__all__ = [
    "SUFFIXES",
    "Document",
    "chunk_id",
    "chunk_spans",
    "count_tokens",
    "documents_from_strings",
    "load_documents",
    "make_chunks",
    "sentence_spans",
]
