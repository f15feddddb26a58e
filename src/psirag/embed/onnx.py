"""MiniLM through ONNX Runtime: the same vectors as the torch path, without torch.

The ONNX graph is written once from the installed model folder's weights (``model.safetensors``,
read with numpy) by :mod:`psirag.embed.bert_graph`: the BERT encoder, mean pooling over the
attention mask and L2 normalisation, i.e. the model's three sentence-transformers modules in one
graph. Texts are tokenised by the ``tokenizers`` library from the folder's ``tokenizer.json``,
truncated at the model's ``max_seq_length`` (256 word pieces for MiniLM) as sentence-transformers
does. So the default install needs neither torch nor transformers, and no download.

The file is cached in the user cache folder (``$PSIRAG_CACHE`` or ``$XDG_CACHE_HOME/psirag``,
default ``~/.cache/psirag``), not beside the model: a file inside the model folder would change
its fingerprint, and so the embedder id of every existing index. Writes go to a temporary file in
the same folder and are renamed into place, so a crash or two processes writing at once never
leave a half-written model; a ``.sha256`` file beside it is checked on load (a full hash when the
file's size, time or inode changed since the last check), and a file that does not match
(damaged, or cut short) is written again.

Embedder id: fp32 vectors agree with torch's to about 1e-7 (minimum cosine >= 0.99999 over all
2Wiki passages and questions, BENCHMARKS.md), so ``minilm-onnx`` has the torch embedder's id and
indexes built with either serve queries from the other. The int8 variant (dynamic quantisation of
the linear layers) moves vectors by about 1% (mean cosine 0.99 on 2Wiki passages), so it gets its
own id.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from psirag.embed.base import (
    LengthSortedEmbedder,
    model_fingerprint,
    model_name_from_path,
    psirag_cache_dir,
)
from psirag.errors import EmbeddingError, InputError

ONNX_INSTALL_HINT = "pip install 'onnxruntime>=1.17' 'tokenizers>=0.15'"
"""Both are default dependencies of psirag (the ``onnx`` package is not: ``psirag[onnx]``, for
the int8 variant only)."""
Precision = Literal["fp32", "int8"]
_EXPORT_VERSION = 4
"""Bumped when the exported graph changes, so that older cached files are not reused (4: the
fp32 weights in a file beside the graph, :func:`weights_path`)."""
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_PAD_ID = 0


def require_onnxruntime() -> Any:
    """Import onnxruntime, or say which extra provides it (a psirag error: no traceback)."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise InputError(
            "the ONNX embedder needs onnxruntime (a psirag dependency), which does not import: "
            f"{ONNX_INSTALL_HINT} (or the torch path: pip install 'psirag[torch]', "
            "--embedder minilm-torch)"
        ) from exc
    return onnxruntime


def cache_dir() -> Path:
    """Where exported models live: ``$PSIRAG_CACHE``, else ``$XDG_CACHE_HOME/psirag``."""
    return psirag_cache_dir()


def onnx_path(folder: Path, precision: Precision = "fp32") -> Path:
    """The cached ONNX file for a model folder: named by its name, fingerprint and precision."""
    name = model_name_from_path(folder)
    tag = f"{name}-{model_fingerprint(folder)}-v{_EXPORT_VERSION}-{precision}.onnx"
    return cache_dir() / "onnx" / tag


def weights_path(target: Path) -> Path:
    """The weights file beside a cached fp32 graph (``<graph>.weights``): the graph names it,
    and ONNX Runtime maps it into memory. The int8 graph holds its own weights."""
    return target.with_name(target.name + ".weights")


def _companions(target: Path) -> list[Path]:
    """The files a cached graph needs besides itself."""
    return [weights_path(target)] if target.name.endswith("-fp32.onnx") else []


def _atomic_target(path: Path) -> tuple[Path, Any]:
    """A temporary file beside ``path`` (same file system, so ``os.replace`` is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache may be shared between users
    return Path(tmp), None


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _file_digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _checked_path(target: Path) -> Path:
    return target.with_name(target.name + ".checked")


def _stamp(target: Path, digest: str) -> str:
    """What :func:`cached_model_ok` last saw match: the file's size, modification time and
    inode with the digest it matched."""
    st = target.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino} {digest}"


def cached_model_ok(target: Path) -> bool:
    """True when ``target`` and its weights file (fp32) exist and match the SHA-256 recorded
    beside each (:func:`_file_ok`)."""
    return all(_file_ok(path) for path in (target, *_companions(target)))


def _file_ok(target: Path) -> bool:
    """True when ``target`` exists and matches the SHA-256 recorded beside it.

    Hashing the 90 MB file costs about 0.1 s of CPU on every start, so once it matched, its size,
    modification time and inode are noted beside it (``.checked``) and the hash is computed again
    only when one of them changes (a file cut short, rewritten or replaced)."""
    try:
        expected = _digest_path(target).read_text(encoding="ascii").strip()
        if not expected:
            return False
        checked = _checked_path(target)
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if checked.read_text(encoding="ascii").strip() == _stamp(target, expected):
                return True
        if _file_digest(target) != expected:
            return False
        with contextlib.suppress(OSError):  # a read-only cache only costs the hash next time
            tmp, _ = _atomic_target(checked)
            try:
                tmp.write_text(_stamp(target, expected) + "\n", encoding="ascii")
                os.replace(tmp, checked)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        return True
    except (OSError, UnicodeDecodeError):
        return False


def _write_atomic(target: Path, data: bytes | None = None, source: Path | None = None) -> None:
    """Put ``data`` (or the file ``source``) at ``target`` by rename, then its digest beside it."""
    tmp, _ = _atomic_target(target)
    try:
        if source is not None:
            os.replace(source, tmp)
        else:
            tmp.write_bytes(data or b"")
        digest = _file_digest(tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    side = _digest_path(target)
    tmp, _ = _atomic_target(side)
    try:
        tmp.write_text(digest + "\n", encoding="ascii")
        os.replace(tmp, side)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def export_onnx(folder: Path, precision: Precision = "fp32") -> Path:
    """The cached ONNX file for ``folder``, writing (and quantising) it first if missing or if it
    does not match its recorded hash. The int8 variant needs the ``onnx`` package
    (``psirag[onnx]``) for ONNX Runtime's quantiser; fp32 needs neither it nor torch."""
    target = onnx_path(folder, precision)
    if cached_model_ok(target):
        return target
    if target.exists():
        print(
            f"psirag: note: {target} does not match its recorded hash; writing it again",
            file=sys.stderr,
            flush=True,
        )
    if precision == "int8":
        source = export_onnx(folder, "fp32")
        tmp, _ = _atomic_target(target)
        try:
            try:
                from onnxruntime.quantization import QuantType, quantize_dynamic
            except ImportError as exc:
                raise InputError(
                    "minilm-onnx-int8 needs the onnx package for ONNX Runtime's quantiser: "
                    "pip install 'psirag[onnx]' (plain minilm does not)"
                ) from exc

            # per-channel int8 weights of the matrix products only: quantising the embedding
            # tables too (the default) moved vectors to a mean cosine of 0.95, this keeps 0.99
            quantize_dynamic(
                str(source),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul"],
            )
            _write_atomic(target, source=tmp)
        except InputError:
            raise
        except Exception as exc:
            raise EmbeddingError(f"quantising {source} to int8 failed: {exc}") from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return target
    probe, _ = _atomic_target(target)  # first: an unwritable cache fails before the weights load
    probe.unlink()
    from psirag.embed.bert_graph import build_bert_encoder_external

    weights = weights_path(target)
    graph, blob = build_bert_encoder_external(folder, weights.name)
    try:  # the weights first: a graph is never there without them (both are deterministic)
        _write_atomic(weights, blob)
        _write_atomic(target, graph)
    except OSError as exc:
        raise EmbeddingError(f"writing the ONNX graph to {target} failed: {exc}") from exc
    return target


class _BackgroundCheck:
    """:func:`cached_model_ok` run in a thread; :meth:`result` waits for it."""

    def __init__(self, target: Path) -> None:
        self._ok = False
        self._thread = threading.Thread(target=self._run, args=(target,), daemon=True)
        self._thread.start()

    def _run(self, target: Path) -> None:
        self._ok = cached_model_ok(target)

    def result(self) -> bool:
        self._thread.join()
        return self._ok


def _open_session(ort: Any, model_file: Path, options: Any) -> Any:
    try:
        return ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own errors: a damaged or foreign file
        raise EmbeddingError(
            f"ONNX Runtime cannot load {model_file} ({exc}); delete it to write it again"
        ) from exc


class OnnxEmbedder(LengthSortedEmbedder):
    """A BERT sentence-transformers model (MiniLM) run by ONNX Runtime on CPU."""

    backend_label = " (ONNX)"

    def __init__(
        self,
        folder: Path,
        *,
        batch_size: int = 8,
        precision: Precision = "fp32",
        threads: int | None = None,
        spinning: bool = False,
        name: str | None = None,
        spec: str | None = None,
        torch_id: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        ort = require_onnxruntime()
        self.path = Path(folder)
        self.precision = precision
        self.batch_size = batch_size
        self.max_tokens: int | None = _max_seq_length(self.path)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: no shape-merge chatter on stderr
        # idle worker threads sleep instead of spinning (``spinning``, ONNX Runtime's default,
        # for comparison): on 2 shared cores the spinning thread took CPU from the one
        # computing, and a served query cost 1.7x the CPU (BENCHMARKS.md)
        options.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if spinning else "0"
        )
        model_file = onnx_path(self.path, precision)
        # a cached file's hash is checked while the tokenizer and the session load (hashlib and
        # ONNX Runtime release the GIL); a mismatch writes the file again and reloads
        check = _BackgroundCheck(model_file) if _digest_path(model_file).is_file() else None
        self._tokenizer = _load_tokenizer(self.path, self.max_tokens)
        if check is None:
            model_file = export_onnx(self.path, precision)
        session = None
        with contextlib.suppress(Exception):
            session = _open_session(ort, model_file, options) if check is not None else None
        if check is not None and not check.result():
            model_file, session = export_onnx(self.path, precision), None
        self._session = session or _open_session(ort, model_file, options)
        self._dim = int(self._session.get_outputs()[0].shape[1])
        base_id = torch_id or f"st:{name or model_name_from_path(self.path)}@" + model_fingerprint(
            self.path
        )
        self.id = base_id if precision == "fp32" else f"{base_id}+onnx-int8"
        self.spec = spec or f"onnx:{self.path}"
        self.last_truncated = 0

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"OnnxEmbedder(id={self.id!r}, dim={self.dim}, precision={self.precision!r})"

    def token_lengths(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return np.asarray([len(e.ids) for e in encodings], dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        ids, types = [], []
        limit = self.max_tokens
        for e in self._tokenizer.encode_batch(texts, add_special_tokens=True):
            row, kinds = e.ids, e.type_ids
            if limit is not None and len(row) > limit:
                # what transformers' truncation gives: [CLS] + the first limit-2 pieces + [SEP]
                row = row[: limit - 1] + row[-1:]
                kinds = kinds[: limit - 1] + kinds[-1:]
            ids.append(row)
            types.append(kinds)
        width = max(len(r) for r in ids)
        feeds = {name: np.full((len(ids), width), _PAD_ID, dtype=np.int64) for name in _INPUTS}
        feeds["attention_mask"][:] = 0
        for i, (row, kinds) in enumerate(zip(ids, types, strict=True)):
            feeds["input_ids"][i, : len(row)] = row
            feeds["token_type_ids"][i, : len(kinds)] = kinds
            feeds["attention_mask"][i, : len(row)] = 1
        return np.asarray(self._session.run(None, feeds)[0])


def _load_tokenizer(folder: Path, max_tokens: int | None) -> Any:
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer`` that neither truncates nor
    pads: MiniLM's file asks for both at 128, sentence-transformers truncates at
    ``max_seq_length`` (256) and pads to the batch's longest, which :meth:`encode_batch` does.
    One tokenizer, never reconfigured, so it is safe to share between threads."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise InputError(
            "the ONNX embedder needs the tokenizers package (a psirag dependency): "
            "pip install 'tokenizers>=0.15'"
        ) from exc
    path = folder / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises plain Exceptions for a bad file
        raise InputError(f"cannot read the tokenizer {path}: {exc}") from exc
    tokenizer.no_truncation()
    tokenizer.no_padding()
    empty = tokenizer.encode("", add_special_tokens=True).ids
    if len(empty) != 2 or (max_tokens is not None and max_tokens < 2):
        raise InputError(
            f"{path}: the ONNX embedder expects a BERT tokenizer that wraps a text in one token "
            f"before and one after (got {len(empty)} for an empty text)"
        )
    return tokenizer


def _max_seq_length(folder: Path) -> int | None:
    """sentence-transformers' ``max_seq_length`` (256 for MiniLM), which truncates inputs."""
    try:
        data = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        return int(data["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = [
    "ONNX_INSTALL_HINT",
    "OnnxEmbedder",
    "cache_dir",
    "cached_model_ok",
    "export_onnx",
    "onnx_path",
    "weights_path",
]
