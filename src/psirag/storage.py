"""A saved index is a self-describing folder: manifest.json, .npy arrays and JSON lines.

Writes go to a hidden sibling folder that becomes the index by rename only once every file and
the manifest (written last) are on disk, so an interrupted save never leaves a folder that loads
as an index. No pickle anywhere: arrays are plain .npy (``allow_pickle=False``), text is JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from psirag.errors import IndexFormatError

FORMAT_NAME = "psirag-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class IndexWriter:
    """Collects the files of an index in a staging folder, then publishes them atomically."""

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        if self.target.exists() and not self.target.is_dir():
            raise IndexFormatError(
                f"{self.target} exists and is not a folder; choose another --out"
            )
        if (
            self.target.is_dir()
            and any(self.target.iterdir())
            and not (self.target / MANIFEST).is_file()
        ):
            raise IndexFormatError(
                f"{self.target} is a non-empty folder that is not a psirag index; "
                "refusing to replace it. Choose an empty or new folder for --out."
            )
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.staging = self.target.parent / f".{self.target.name}.partial-{uuid.uuid4().hex[:8]}"
        self.staging.mkdir()

    def path(self, name: str) -> Path:
        p = self.staging / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def save_array(self, name: str, array: np.ndarray) -> None:
        np.save(self.path(name), np.ascontiguousarray(array), allow_pickle=False)

    def save_jsonl(self, name: str, rows: Iterable[dict[str, Any]]) -> None:
        with open(self.path(name), "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False))
                fh.write("\n")

    def commit(self, manifest: dict[str, Any]) -> None:
        """Checksum every file, write the manifest last, fsync, and swap the folder in."""
        files: dict[str, dict[str, Any]] = {}
        for p in sorted(self.staging.rglob("*")):
            if p.is_file():
                _fsync_file(p)
                rel = p.relative_to(self.staging).as_posix()
                files[rel] = {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **manifest}
        manifest["files"] = files
        tmp = self.staging / (MANIFEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.staging / MANIFEST)
        _fsync_dir(self.staging)
        old = None
        if self.target.exists():
            old = self.target.parent / f".{self.target.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.target, old)
        os.replace(self.staging, self.target)
        _fsync_dir(self.target.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class IndexReader:
    """Opens a saved index folder, checking it is one and that its files are intact."""

    def __init__(self, folder: Path, *, verify: bool = True) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise IndexFormatError(
                f"{self.folder}: no such index folder (build one with `psirag index`)"
            )
        mpath = self.folder / MANIFEST
        if not mpath.is_file():
            raise IndexFormatError(
                f"{self.folder} is not a psirag index: it has no {MANIFEST}. "
                "Build one with `psirag index PATH --out DIR`."
            )
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexFormatError(f"{mpath} is corrupted ({exc}); rebuild the index") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
            raise IndexFormatError(f"{mpath} does not describe a psirag index; rebuild the index")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            raise IndexFormatError(
                f"{self.folder} uses index format {version}, this psirag reads format "
                f"{FORMAT_VERSION}; rebuild the index with this version"
            )
        self.manifest: dict[str, Any] = manifest
        files = manifest.get("files")
        if not isinstance(files, dict):
            raise IndexFormatError(f"{mpath} lists no files; rebuild the index")
        for name, meta in files.items():
            p = self.folder / name
            if not p.is_file():
                raise IndexFormatError(f"{self.folder}: {name} is missing; rebuild the index")
            if p.stat().st_size != meta.get("bytes"):
                raise IndexFormatError(
                    f"{self.folder}: {name} has {p.stat().st_size} bytes, the manifest says "
                    f"{meta.get('bytes')}; the index is corrupted, rebuild it"
                )
            if verify and sha256_file(p) != meta.get("sha256"):
                raise IndexFormatError(
                    f"{self.folder}: {name} does not match its checksum; the index is corrupted, "
                    "rebuild it"
                )

    def load_array(self, name: str, *, mmap: bool = True) -> np.ndarray:
        try:
            return np.load(self.folder / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise IndexFormatError(f"{self.folder}: cannot read {name} ({exc}); rebuild") from exc

    def iter_jsonl(self, name: str) -> Iterator[dict[str, Any]]:
        path = self.folder / name
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise IndexFormatError(
                        f"{path}: line {number} is not valid JSON; the index is corrupted"
                    ) from exc
