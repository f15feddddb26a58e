"""Every bad input we tried, through the real ``psirag`` CLI, and the table in docs/bad-inputs.md.

``CASES`` is the single source: each case makes its files, runs ``psirag.cli.main(argv)`` in its
own folder, and states the exit code, the error class and a fragment of the message it expects.
``test_case`` checks each one (and that no traceback is printed); ``test_table_is_current``
renders docs/bad-inputs.md from the outcomes actually observed and fails when the file differs,
so the table cannot drift from the code. Rewrite it with::

    python -m pytest tests/test_bad_inputs.py --update-bad-inputs

To add a case, append a :class:`Case` to ``CASES``: ``files`` to write, ``links`` to make,
``index=True`` for a small valid index in ``index/`` (built with the test HashEmbedder, so
commands that embed a query cannot use it), ``setup`` to spoil things further.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import TOPICS, HashEmbedder

import psirag.cli
import psirag.cli.living_cmds
from psirag.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs.md"
USAGE = "usage (argparse)"
"""The error column of a value refused while the command line is parsed."""
NONE = "none"
"""The error column of a command that ran (a warning may still be printed)."""

WORDS = "Mount Etna is an active volcano on the east coast of Sicily."
OTHER = "Trains run on steel rails between the stations of the valley."
OK_RECORD = json.dumps({"title": "Etna", "text": WORDS})


@dataclass(frozen=True)
class Case:
    """One bad input: what it is, how to make it, what the CLI must answer."""

    name: str
    bad_input: str
    """The table's first column: the input, in words."""
    argv: tuple[str, ...]
    exit_code: int
    error: str
    """The class of the error the CLI reported (``InputError``, ...), ``USAGE`` or ``NONE``."""
    message: str
    """A fragment the stderr must contain."""
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    links: Mapping[str, str] = field(default_factory=dict)
    """Symbolic links to make: name -> target."""
    index: bool = False
    setup: Callable[[Path], None] | None = None
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    """Applied around the command only (e.g. an operating-system error at the write layer)."""
    after: Callable[[Path], str] | None = None
    """Checked after the command: a note for the table, starting with ``NOT`` when the check
    failed (``test_case`` fails then)."""


CASES: list[Case] = [
    # --- the corpus ----------------------------------------------------------------------------
    Case(
        "stopwords",
        "a corpus of stopwords only",
        ("index", "stop.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "no word that search can use",
        files={"stop.txt": "The and of it is a an to, and the of.\n"},
    ),
    Case(
        "single-letters",
        "a corpus of single letters",
        ("index", "letters.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "no word that search can use",
        files={"letters.txt": "a b c d e f x y z\n"},
    ),
    Case(
        "nul-bytes",
        "a corpus of NUL bytes",
        ("index", "nul.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "no word that search can use",
        files={"nul.txt": b"\x00" * 64},
    ),
    Case(
        "emoji",
        "a corpus of emoji",
        ("index", "emoji.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "no word that search can use",
        files={"emoji.txt": "\U0001f30b\U0001f525 \U0001f35e \u2728\n"},
    ),
    Case(
        "symlink-loop",
        "a symbolic link loop between two files",
        ("index", "corpus", "--out", "out", "-q"),
        2,
        "InputError",
        "corpus/a.txt: a symbolic link loop",
        links={"corpus/a.txt": "b.txt", "corpus/b.txt": "a.txt"},
    ),
    Case(
        "symlink-loop-skip",
        "a symbolic link loop, with --skip-bad-files",
        ("index", "corpus", "--out", "out", "-q", "--skip-bad-files"),
        2,
        "InputError",
        "the corpus is empty: corpus holds no text to index (2 bad file(s)",
        links={"corpus/a.txt": "b.txt", "corpus/b.txt": "a.txt"},
    ),
    Case(
        "symlink-loop-given",
        "a symbolic link loop named on the command line",
        ("index", "a.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "a.txt: a symbolic link to nothing",
        links={"a.txt": "b.txt", "b.txt": "a.txt"},
    ),
    Case(
        "ray-unreachable",
        "--ray at an address where no Ray cluster listens",
        ("index", "corpus", "--out", "out", "-q", "--ray", "127.0.0.1:1"),
        2,
        "ClusterError",
        "cannot reach the Ray cluster at 127.0.0.1:1",
        files={"corpus/a.txt": WORDS},
    ),
    Case(
        "json-surrogate",
        "a lone surrogate (\\ud800) in JSON text",
        ("index", "records.json", "--out", "out", "-q"),
        2,
        "InputError",
        "records.json, record 0 (counting from 0): 'text' holds a lone surrogate (U+D800",
        files={"records.json": '[{"title": "x", "text": "bad \\ud800 text"}]'},
    ),
    Case(
        "jsonl-surrogate-title",
        "a lone surrogate in a JSONL title",
        ("index", "records.jsonl", "--out", "out", "-q"),
        2,
        "InputError",
        "records.jsonl, line 1: 'title' holds a lone surrogate (U+DC00",
        files={"records.jsonl": '{"title": "\\udc00", "text": "volcano text"}\n'},
    ),
    Case(
        "jsonl-broken-line",
        "a JSONL file with one broken line",
        ("index", "records.jsonl", "--out", "out", "-q"),
        2,
        "InputError",
        "records.jsonl: malformed JSON on line 2, column 11",
        files={"records.jsonl": f'{OK_RECORD}\n{{"title": "broken\n{OK_RECORD}\n'},
    ),
    Case(
        "jsonl-broken-line-skip",
        "a JSONL file with one broken line, with --skip-bad-files (the other lines are indexed)",
        ("index", "records.jsonl", "--out", "out", "-q", "--skip-bad-files", "--json"),
        0,
        NONE,
        "records.jsonl: malformed JSON on line 2, column 11: Unterminated string starting at; "
        "fix the line; skipped",
        files={"records.jsonl": f'{OK_RECORD}\n{{"title": "broken\n{OK_RECORD}\n'},
    ),
    Case(
        "not-utf8",
        "a text file that is not UTF-8",
        ("index", "latin1.txt", "--out", "out", "-q"),
        2,
        "InputError",
        "latin1.txt: not UTF-8 text (invalid byte at offset 3)",
        files={"latin1.txt": "caf\u00e9 \u00e9t\u00e9".encode("latin-1")},
    ),
    Case(
        "missing-path",
        "a corpus path that does not exist",
        ("index", "nowhere", "--out", "out", "-q"),
        2,
        "InputError",
        "nowhere: no such file or folder",
    ),
    Case(
        "unsupported-file",
        "a file of an unsupported type",
        ("index", "slides.pptx", "--out", "out", "-q"),
        2,
        "InputError",
        "slides.pptx: unsupported file type '.pptx'",
        files={"slides.pptx": b"PK\x03\x04"},
    ),
    Case(
        "damaged-pdf",
        "a damaged PDF (a header and nothing else)",
        ("index", "slides.pdf", "--out", "out", "-q"),
        2,
        "InputError",
        "slides.pdf: not a readable PDF",
        files={"slides.pdf": b"%PDF-1.4"},
    ),
    # --- numbers on the command line -------------------------------------------------------------
    Case(
        "batch-size",
        "index --batch-size -1",
        ("index", "a.txt", "--out", "out", "--batch-size", "-1"),
        2,
        USAGE,
        "argument --batch-size: must be a positive whole number, got -1",
        files={"a.txt": WORDS},
    ),
    Case(
        "chunk-tokens",
        "index --chunk-tokens 4",
        ("index", "a.txt", "--out", "out", "-q", "--chunk-tokens", "4"),
        2,
        "InputError",
        "chunk_tokens must be at least 8, got 4",
        files={"a.txt": WORDS},
    ),
    Case(
        "ask-max-tokens",
        "ask --max-tokens 0",
        ("ask", "index", "q?", "--max-tokens", "0"),
        2,
        USAGE,
        "argument --max-tokens: must be a positive whole number, got 0",
    ),
    Case(
        "ask-max-retrievals",
        "ask --max-retrievals -1",
        ("ask", "index", "q?", "--max-retrievals", "-1"),
        2,
        USAGE,
        "argument --max-retrievals: must be 0 or more, got -1",
    ),
    Case(
        "ask-max-answer-chars",
        "ask --max-answer-chars 0",
        ("ask", "index", "q?", "--max-answer-chars", "0"),
        2,
        USAGE,
        "argument --max-answer-chars: must be a positive whole number, got 0",
    ),
    Case(
        "summarize-top-k",
        "summarize --top-k 0",
        ("summarize", "index", "--top-k", "0"),
        2,
        USAGE,
        "argument --top-k: must be a positive whole number, got 0",
    ),
    Case(
        "search-k",
        "search -k 0",
        ("search", "index", "volcano", "-k", "0"),
        2,
        USAGE,
        "argument -k: must be a positive whole number, got 0",
    ),
    Case(
        "search-k-word",
        "search -k ten",
        ("search", "index", "volcano", "-k", "ten"),
        2,
        USAGE,
        "argument -k: expected a whole number, got 'ten'",
    ),
    Case(
        "inspect-node-negative",
        "inspect --node -1",
        ("inspect", "index", "--node", "-1"),
        2,
        USAGE,
        "argument --node: must be 0 or more, got -1",
    ),
    # --- text on the command line ----------------------------------------------------------------
    Case(
        "query-byte",
        "a search query holding the raw byte 0xff (not UTF-8)",
        ("search", "index", "volcano \udcff lava"),
        2,
        USAGE,
        "argument query: holds a byte 0xff at character 8 that is not UTF-8 text",
    ),
    Case(
        "question-byte",
        "an ask question holding the raw byte 0xfe",
        ("ask", "index", "\udcfewhere?"),
        2,
        USAGE,
        "argument question: holds a byte 0xfe at character 0 that is not UTF-8 text",
    ),
    Case(
        "empty-question",
        "an empty question",
        ("ask", "index", "   ", "--llm", "openai:http://127.0.0.1:9/v1#m"),
        2,
        "InputError",
        "the question is empty",
        index=True,
    ),
    # --- indexes ---------------------------------------------------------------------------------
    Case(
        "not-an-index",
        "search a folder that is not an index",
        ("search", "folder", "volcano"),
        2,
        "IndexFormatError",
        "folder is not a psirag index: it has no manifest.json",
        files={"folder/notes.txt": WORDS},
    ),
    Case(
        "out-foreign-folder",
        "--out a project folder whose manifest.json is not an index's (it is left as it was)",
        ("index", "a.txt", "--out", "w", "-q"),
        2,
        "IndexTargetError",
        "w is a folder that is not a psirag index",
        files={"a.txt": WORDS, "w/manifest.json": '{"name":"pwa"}', "w/src/app.js": "code\n"},
    ),
    Case(
        "out-file",
        "--out an existing file",
        ("index", "a.txt", "--out", "notes.txt", "-q"),
        2,
        "IndexTargetError",
        "notes.txt exists and is not a folder",
        files={"a.txt": WORDS, "notes.txt": "keep me\n"},
    ),
    Case(
        "out-dot",
        "--out . (the folder holding the inputs)",
        ("index", "a.txt", "--out", ".", "-q"),
        2,
        "IndexTargetError",
        "contains the input a.txt",
        files={"a.txt": WORDS},
    ),
    Case(
        "manifest-no-files",
        'an index whose manifest says "files": {}',
        ("inspect", "index"),
        2,
        "IndexFormatError",
        "lists no files",
        index=True,
        setup=lambda folder: _flat_manifest(folder / "index", {}),
    ),
    Case(
        "manifest-outside",
        "an index whose manifest names a file outside it (../../etc/hostname)",
        ("inspect", "index"),
        2,
        "IndexFormatError",
        "points outside the index folder",
        index=True,
        setup=lambda folder: _flat_manifest(
            folder / "index", {"../../etc/hostname": {"bytes": 1, "sha256": "0" * 64}}
        ),
    ),
    Case(
        "missing-chunks",
        "an index whose chunk segment is missing",
        ("inspect", "index"),
        2,
        "IndexFormatError",
        "seg/chunks.000001.jsonl is missing",
        index=True,
        setup=lambda folder: next((folder / "index").rglob("chunks.000001.jsonl")).unlink(),
    ),
    Case(
        "node-out-of-range",
        "inspect --node past the last node",
        ("inspect", "index", "--node", "100000"),
        2,
        "InputError",
        "node 100000 does not exist",
        index=True,
    ),
    # --- updating an index (psirag add / remove / sync) ---------------------------------------
    Case(
        "remove-unknown-id",
        "psirag remove of a document id the index does not hold (nothing changes)",
        ("remove", "lx", "--doc", "nope", "-q"),
        2,
        "InputError",
        "unknown document id(s) ['nope']",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _living(folder, ["docs"]),
    ),
    Case(
        "add-already-there",
        "psirag add of a document that is already indexed (reported, no duplicate)",
        ("add", "lx", "docs/a.txt", "-q"),
        0,
        NONE,
        "already indexed, skipped: a.txt",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _living(folder, ["docs"]),
    ),
    Case(
        "add-json-same-numbering",
        "psirag add of a second JSON file whose records are numbered like the first's",
        ("add", "lx", "b.json", "-q"),
        0,
        NONE,
        "id '0' is taken by another document: added as 'b.json:0'",
        files={
            "a.json": json.dumps([{"idx": 0, "title": "Etna", "text": WORDS}]),
            "b.json": json.dumps([{"idx": 0, "title": "Rails", "text": OTHER}]),
        },
        setup=lambda folder: _living(folder, ["a.json"]),
    ),
    Case(
        "add-other-embedder",
        "psirag add with an embedder other than the index's (nothing changes)",
        ("add", "lx", "new.txt", "--embedder", "test:hash32", "-q"),
        2,
        "EmbedderMismatchError",
        "new text must be embedded by the index's own model",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER, "new.txt": OTHER + " Freight."},
        setup=lambda folder: _living(folder, ["docs"]),
    ),
    Case(
        "sync-removes-everything",
        "psirag sync to a folder holding none of the index's files (nothing changes)",
        ("sync", "lx", "elsewhere", "-q"),
        2,
        "InputError",
        "pass --allow-remove-all",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER, "elsewhere/c.txt": OTHER + " Ice."},
        setup=lambda folder: _living(folder, ["docs"]),
    ),
    Case(
        "add-tree-per-document",
        "psirag add to a --tree-per-document index (adds one tree per new document)",
        ("add", "lx", "new.txt", "-q"),
        0,
        NONE,
        "tree-per-document index: 1 new tree(s)",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER, "new.txt": OTHER + " Freight."},
        setup=lambda folder: _living(folder, ["docs"], tree_per_document=True),
    ),
    Case(
        "add-format-1",
        "psirag add to an index saved in format 1 (migrated: the update writes format 2)",
        ("add", "lx", "new.txt", "-q"),
        0,
        NONE,
        "written in format 2",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER, "new.txt": OTHER + " Freight."},
        setup=lambda folder: _living(folder, ["docs"], format1=True),
    ),
    Case(
        "add-format-unknown",
        "psirag add to an index whose manifest names an unknown format version (0)",
        ("add", "lx", "new.txt", "-q"),
        2,
        "IndexFormatError",
        "gives format_version 0; psirag index formats are 1, 2, 3, 4 and 5",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER, "new.txt": OTHER + " Freight."},
        setup=lambda folder: _living(folder, ["docs"], format_version=0),
    ),
    # --- exact words for a format_version (issue 26) ------------------------------------------
    Case(
        "format-version-string",
        'search an index whose format_version is the string "2"',
        ("search", "lx", "volcano"),
        2,
        "IndexFormatError",
        'gives format_version "2", which is not a whole number',
        files={"docs/a.txt": WORDS},
        setup=lambda folder: _living(folder, ["docs"], format_version="2"),
    ),
    Case(
        "format-version-true",
        "inspect an index whose format_version is true (once read as format 1)",
        ("inspect", "lx"),
        2,
        "IndexFormatError",
        "gives format_version true, which is not a whole number",
        files={"docs/a.txt": WORDS},
        setup=lambda folder: _living(folder, ["docs"], format_version=True),
    ),
    Case(
        "format-version-true-out",
        "index --out a folder whose format_version is true (it is left as it was)",
        ("index", "docs", "--out", "lx", "-q"),
        2,
        "IndexTargetError",
        "psirag will not write over it: choose another folder (--out)",
        files={"docs/a.txt": WORDS},
        setup=lambda folder: _living(folder, ["docs"], format_version=True),
    ),
    Case(
        "format-version-newer",
        "add to an index in a newer format (6)",
        ("add", "lx", "docs/a.txt", "-q"),
        2,
        "IndexFormatError",
        "it is in index format 6, newer than this psirag reads (formats 1, 2, 3, 4 and 5); "
        "upgrade psirag",
        files={"docs/a.txt": WORDS},
        setup=lambda folder: _living(folder, ["docs"], format_version=6),
    ),
    # --- an index is never its own input (issue 26) -------------------------------------------
    Case(
        "out-inside-input",
        "--out inside an input folder (the index would read itself on every later run)",
        ("index", "docs", "--out", "docs/idx", "-q"),
        2,
        "IndexTargetError",
        "--out docs/idx is inside the input folder docs",
        files={"docs/a.txt": WORDS},
    ),
    Case(
        "sync-skips-index-folder",
        "an index folder inside the folder being synced (skipped, with a note)",
        ("sync", "docs/lx", "docs", "-q"),
        0,
        NONE,
        "docs: skipped lx, a psirag index folder",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _living_inside(folder, "docs"),
    ),
    # --- the machine says no (issue 26): one line, exit 2, the index as it was ----------------
    *[
        Case(
            f"os-{name}",
            f"{what} while psirag add writes the next generation (simulated at the write layer; "
            "tests/test_oserrors.py makes it happen for real)",
            ("add", "lx", "new.txt", "-q"),
            2,
            error,
            fragment,
            files={"docs/a.txt": WORDS, "new.txt": OTHER},
            setup=lambda folder: _living(folder, ["docs"]),
            patch=lambda patch, exc=exc: _fail_array_writes(patch, exc),
        )
        for name, what, exc, error, fragment in [
            (
                "disk-full",
                "the disk fills up (numpy's short write: 121344 requested and 15328 written)",
                OSError("121344 requested and 15328 written"),
                "SaveError",
                "lx: the disk is full (No space left on device)",
            ),
            (
                "read-only",
                "the file system turns read-only",
                OSError(errno.EROFS, os.strerror(errno.EROFS), "node_vectors.npy"),
                "SaveError",
                "lx: writing node_vectors.npy: the file system is read-only",
            ),
            (
                "permission",
                "permission to write is denied",
                PermissionError(errno.EACCES, os.strerror(errno.EACCES), "node_vectors.npy"),
                "SaveError",
                "lx: writing node_vectors.npy: permission denied",
            ),
            (
                "open-files",
                "too many files are open",
                OSError(errno.EMFILE, os.strerror(errno.EMFILE), "node_vectors.npy"),
                "SaveError",
                "too many open files",
            ),
        ]
    ],
    # --- an index's manifest names no endpoint psirag calls unconfirmed (issue 26) ----------
    Case(
        "trust-add",
        "psirag add to an index whose manifest names an embedding endpoint nobody confirmed",
        ("add", "lx", "new.txt", "-q"),
        2,
        "InputError",
        "names the embedding endpoint http://127.0.0.1:9/v1",
        files={"docs/a.txt": WORDS, "new.txt": OTHER},
        setup=lambda folder: _planted(folder, embedder=PLANTED),
    ),
    Case(
        "trust-sync",
        "psirag sync of an index whose manifest names an embedding endpoint nobody confirmed",
        ("sync", "lx", "docs", "new.txt", "-q"),
        2,
        "InputError",
        "or allow this one with PSIRAG_ALLOW_ENDPOINTS=127.0.0.1:9",
        files={"docs/a.txt": WORDS, "new.txt": OTHER},
        setup=lambda folder: _planted(folder, embedder=PLANTED),
    ),
    Case(
        "trust-remove-llm",
        "psirag remove on an llm-summary index whose manifest names an LLM nobody confirmed",
        ("remove", "lx", "--doc", "a.txt", "-q"),
        2,
        "InputError",
        "manifest.json (config.llm) names the LLM endpoint http://127.0.0.1:9/v1",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _planted(folder, llm=PLANTED),
    ),
    # --- psirag deletes only what it made; one naming rule; one Unicode form (issue 26) -------
    Case(
        "look-alike-survives",
        "psirag add beside a user's folder .lx.old-2024 (older than 15 minutes; once deleted)",
        ("add", "lx", "new.txt", "-q"),
        0,
        NONE,
        "",
        files={"docs/a.txt": WORDS, "new.txt": OTHER, ".lx.old-2024/notes.txt": "mine"},
        setup=lambda folder: (_living(folder, ["docs"]), os.utime(folder / ".lx.old-2024", (0, 0))),
        after=lambda folder: (
            ".lx.old-2024/notes.txt kept"
            if (folder / ".lx.old-2024" / "notes.txt").is_file()
            else "NOT kept: .lx.old-2024/notes.txt was deleted"
        ),
    ),
    Case(
        "sync-symlink-name",
        "psirag sync of a folder holding a symbolic link (named by the link, as index names it)",
        ("sync", "lx", "docs", "-q"),
        0,
        NONE,
        "",
        files={"docs/a.txt": WORDS, "elsewhere/target.txt": OTHER},
        links={"docs/link.txt": "../elsewhere/target.txt"},
        setup=lambda folder: _living(folder, ["docs/a.txt"]),
        after=lambda folder: _documents_note(folder, {"a.txt", "link.txt"}),
    ),
    Case(
        "remove-nfd-id",
        "psirag remove --doc with an id typed decomposed (e + U+0301) for a composed one",
        ("remove", "lx", "--doc", "re\u0301sume\u0301.txt", "-q"),
        0,
        NONE,
        "",
        files={"docs/r\u00e9sum\u00e9.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _living(folder, ["docs"]),
        after=lambda folder: _documents_note(folder, {"b.txt"}),
    ),
    Case(
        "remove-many-unknown",
        "psirag remove of 25 unknown document ids (the error lists 10 and a count)",
        ("remove", "lx", "--doc", *[f"nope-{i}" for i in range(25)], "-q"),
        2,
        "InputError",
        "'nope-9' and 15 more",
        files={"docs/a.txt": WORDS, "docs/b.txt": OTHER},
        setup=lambda folder: _living(folder, ["docs"]),
    ),
    Case(
        "path-too-long",
        "an --out name longer than the file system allows (256 characters)",
        ("index", "a.txt", "--out", "x" * 256, "-q"),
        2,
        "OSError",
        "the path is too long for the file system",
        files={"a.txt": WORDS},
    ),
]


def _fail_array_writes(patch: pytest.MonkeyPatch, exc: OSError) -> None:
    """Every array write of a save raises ``exc`` (as numpy's would)."""
    from psirag import storage

    def fail(*args: object, **kwargs: object) -> None:
        raise exc

    patch.setattr(storage.np, "save", fail)


def _living(
    folder: Path,
    inputs: list[str],
    *,
    tree_per_document: bool = False,
    format1: bool = False,
    format_version: object = None,
) -> None:
    """An index in ``lx/`` over ``inputs`` whose embedder spec the CLI loads as the test
    HashEmbedder (see ``run_case``), so ``psirag add`` can embed new text."""
    from psirag import Index
    from psirag.config import IndexConfig

    config = IndexConfig(embedder="test:hash", tree_per_document=tree_per_document)
    with contextlib.chdir(folder):
        index = Index.build(inputs, config, embedder=HashEmbedder())
    target = folder / "lx"
    if format1:
        from support.corpora import write_format1

        write_format1(index, target)
        return
    index.save(target)
    if format_version is not None:
        pointer = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
        pointer["format_version"] = format_version
        (target / "manifest.json").write_text(json.dumps(pointer), encoding="utf-8")


PLANTED = "openai:http://127.0.0.1:9/v1#m"
"""An endpoint a crafted manifest names (nothing listens on port 9; nothing may be sent)."""


def _planted(folder: Path, *, embedder: str | None = None, llm: str | None = None) -> None:
    """An index in ``lx/`` whose manifest was rewritten to name ``embedder`` / ``llm`` (with
    llm-summary abstracts), in the generation's manifest and the pointer, hash made to match."""
    import hashlib

    _living(folder, ["docs"])

    def planted(manifest: dict[str, object]) -> dict[str, object]:
        config = manifest["config"]
        assert isinstance(config, dict)
        if embedder:
            spec = manifest["embedder"]
            assert isinstance(spec, dict)
            spec["spec"] = config["embedder"] = embedder
        if llm:
            config["llm"], config["abstracts"] = llm, "llm-summary"
        return manifest

    index = folder / "lx"
    pointer = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    generation = index / "generations" / f"{pointer['generation']:06d}" / "manifest.json"
    raw = json.dumps(planted(json.loads(generation.read_text(encoding="utf-8")))).encode()
    generation.write_bytes(raw)
    pointer = planted(pointer)
    pointer["manifest_sha256"] = hashlib.sha256(raw).hexdigest()
    (index / "manifest.json").write_text(json.dumps(pointer), encoding="utf-8")


def _documents_note(folder: Path, expected: set[str]) -> str:
    """The documents of ``lx/`` for the table, or ``NOT ...`` when they differ from ``expected``."""
    from psirag import Index

    got = set(Index.load(folder / "lx", embedder=HashEmbedder()).documents)
    listed = ", ".join(sorted(got))
    return f"documents: {listed}" if got == expected else f"NOT {sorted(expected)}: {listed}"


def _living_inside(folder: Path, docs: str) -> None:
    """An index over ``docs`` that then lives in ``docs/lx`` (inside its own input)."""
    _living(folder, [docs])
    (folder / "lx").rename(folder / docs / "lx")


def _test_embedder(spec: str, batch_size: int | None = None, http: object = None) -> object:
    """What ``psirag add`` loads in these cases: ``test:hash`` is the index's HashEmbedder,
    ``test:hash32`` another one."""
    if spec == "test:hash":
        return HashEmbedder()
    if spec == "test:hash32":
        return HashEmbedder(dim=32)
    raise AssertionError(f"a bad-input case asked for the embedder {spec!r}")


def _flat_manifest(index: Path, files: dict[str, dict[str, object]]) -> None:
    """Turn ``index`` into a format-1 (flat) folder whose manifest lists ``files``."""
    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    manifest.update(format_version=1, files=files)
    shutil.rmtree(index)
    index.mkdir()
    (index / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


# --- running the cases ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    error: str
    stderr: str
    stdout: str = ""
    changed: bool | None = None
    """Whether the case's index ``lx/`` changed (None: the case has none)."""
    after: str = ""
    """The note of the case's ``after`` check."""

    @property
    def message(self) -> str:
        """The line the table shows: the last line of stderr, and the ``after`` note."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else ""
        return f"{last} [{self.after}]" if self.after else last


@pytest.fixture(scope="session")
def valid_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from psirag import Index

    folder = tmp_path_factory.mktemp("valid") / "index"
    texts = [" ".join(lines) for lines in TOPICS.values()]
    Index.build(texts, texts=True, embedder=HashEmbedder()).save(folder)
    return folder


def run_case(case: Case, folder: Path, valid_index: Callable[[], Path]) -> Outcome:
    """Make the case's files in ``folder`` and run the CLI there, capturing what it prints and
    the class of the error it reported."""
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    for name, target in case.links.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, folder / name)
    if case.index:
        shutil.copytree(valid_index(), folder / "index")
    if case.setup is not None:
        case.setup(folder)
    before = _snapshot(folder / "lx")

    reported: list[str] = []
    original = psirag.cli._eprint

    def spy(*parts: object) -> None:
        # main() prints a psirag error from inside its except block, where the error is current.
        error = sys.exc_info()[0]
        if error is not None:
            reported.append(error.__name__)
        original(*parts)

    err, out = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.chdir(folder):
        patch.setattr(psirag.cli, "_eprint", spy)
        patch.setattr(psirag.cli.living_cmds, "load_embedder_for", _test_embedder)
        patch.delenv("PSIRAG_LLM", raising=False)
        if case.patch is not None:
            case.patch(patch)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(list(case.argv))
                error = reported[-1] if reported else NONE
            except SystemExit as exc:  # argparse refused a value
                code = exc.code if isinstance(exc.code, int) else 2
                error = USAGE
    return Outcome(
        code,
        error,
        err.getvalue().replace(str(folder), "."),
        out.getvalue().replace(str(folder), "."),
        None if before is None else before != _snapshot(folder / "lx"),
        case.after(folder) if case.after is not None else "",
    )


def _snapshot(index: Path) -> dict[str, bytes] | None:
    """Every file of an index folder with its bytes (None: no such folder), to tell that a
    refused update changed nothing."""
    if not index.is_dir():
        return None
    return {
        p.relative_to(index).as_posix(): p.read_bytes()
        for p in sorted(index.rglob("*"))
        if p.is_file() and p.name != "lock"
    }


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Outcome]]:
    """Every case run once; the per-case tests and the table read the same outcomes."""
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names), "case names must be unique"
    done: dict[str, Outcome] = {}

    def index() -> Path:
        return request.getfixturevalue("valid_index")

    for case in CASES:
        done[case.name] = run_case(case, tmp_path_factory.mktemp(case.name), index)
    yield done


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(case: Case, outcomes: dict[str, Outcome]) -> None:
    got = outcomes[case.name]
    assert "Traceback" not in got.stderr, got.stderr
    assert (got.exit_code, got.error) == (case.exit_code, case.error), got.stderr
    assert case.message in got.stderr, got.stderr
    if case.error not in (USAGE, NONE):
        assert got.message.startswith("psirag: error: "), got.stderr  # one clean line
    if case.exit_code != 0 and got.changed is not None:
        assert not got.changed, "a refused update changed the index"
    assert not got.after.startswith("NOT"), got.after


def test_jsonl_skip_keeps_the_other_lines(outcomes: dict[str, Outcome]) -> None:
    """The broken line alone is skipped: both good lines are indexed."""
    got = outcomes["jsonl-broken-line-skip"]
    assert got.exit_code == 0
    assert "skipped" in got.message and "line 2" in got.message
    assert json.loads(got.stdout)["documents"] == 2


# --- the table ------------------------------------------------------------------------------------


def _show(argument: str) -> str:
    """An argument as a shell would take it, with a non-UTF-8 byte written as ``\\xff``."""
    return shlex.quote(
        argument.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(outcomes: Mapping[str, Outcome]) -> str:
    lines = [
        "# Bad inputs and what they get",
        "",
        "Generated by `tests/test_bad_inputs.py` from the outcomes the tests observe; do not edit.",
        "Regenerate with `python -m pytest tests/test_bad_inputs.py --update-bad-inputs`.",
        "",
        "Each command runs in a folder holding the bad input (and, where the command needs one, a",
        "valid index in `index/`). Exit status 2 is a refused input; the message is the last line",
        "the command printed on stderr. No case prints a traceback.",
        "",
        "| bad input | command | exit | error | message |",
        "|---|---|---|---|---|",
    ]
    for case in CASES:
        got = outcomes[case.name]
        command = "psirag " + " ".join(_show(a) for a in case.argv)
        lines.append(
            f"| {_cell(case.bad_input)} | `{_cell(command)}` | {got.exit_code} | {got.error} "
            f"| {_cell(got.message)} |"
        )
    return "\n".join(lines) + "\n"


def test_table_is_current(outcomes: dict[str, Outcome], request: pytest.FixtureRequest) -> None:
    table = render_table(outcomes)
    if request.config.getoption("--update-bad-inputs"):
        DOC.parent.mkdir(parents=True, exist_ok=True)
        temporary = DOC.with_name(DOC.name + ".tmp")
        temporary.write_text(table, encoding="utf-8")
        temporary.replace(DOC)
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert current == table, (
        "docs/bad-inputs.md is out of date: run "
        "`python -m pytest tests/test_bad_inputs.py --update-bad-inputs`"
    )
