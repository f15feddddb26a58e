"""Errors psirag raises on purpose. The CLI prints them without a traceback."""

from __future__ import annotations


class PsiragError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class InputError(PsiragError, ValueError):
    """The corpus, a file in it, or an argument cannot be used as given."""


class EmbeddingError(PsiragError):
    """The embedder failed or returned vectors that cannot be indexed (NaN, zero, wrong shape)."""


class IndexFormatError(PsiragError):
    """A folder is not a psirag index, is corrupted, or was written by an incompatible version."""


class EmbedderMismatchError(PsiragError):
    """A query embedder differs from the one the index was built with."""


class ResourceError(PsiragError):
    """The work would need more memory than the machine can give."""


class IndexTargetError(IndexFormatError, InputError):
    """The folder given for an index (``--out``) cannot take one: a file, a folder that is not
    a psirag index, the current folder, or a place that is not writable."""


class IndexLockedError(PsiragError):
    """Another process is writing the index; only one writer at a time."""


class ClusterError(PsiragError):
    """Batch work cannot run on the Ray cluster asked for: Ray is not installed, the cluster
    cannot be reached, or a job failed after its retries."""
