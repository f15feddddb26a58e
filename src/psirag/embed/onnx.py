"""MiniLM through ONNX Runtime: the same vectors as the torch path, computed faster on CPU.

The ONNX graph is exported once from the installed sentence-transformers folder with torch (which
the default install has): the BERT encoder, mean pooling over the attention mask and L2
normalisation, i.e. the model's three sentence-transformers modules in one graph. The encoder's
forward is written out here from the model's own layers (embeddings, linear maps, layer norms)
rather than traced through transformers' forward, whose attention-mask helpers trace into
shape-specific constants. The file is cached in the user cache folder (``$PSIRAG_CACHE`` or
``$XDG_CACHE_HOME/psirag``, default ``~/.cache/psirag``), not beside the model: a file inside the
model folder would change its fingerprint, and so the embedder id of every existing index.
Writes go to a temporary file in the same folder and are renamed into place, so a crash or two
processes exporting at once never leave a half-written model.

Embedder id: fp32 vectors agree with torch's to about 1e-6 (tests/test_embed_onnx.py checks a
cosine >= 0.999999 on a sample), so ``minilm-onnx`` has the torch embedder's id and indexes built
with either serve queries from the other. The int8 variant (dynamic quantisation of the linear
layers) moves vectors by about 1% (mean cosine 0.99 on 2Wiki passages), so it gets its own id.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from psirag.embed.base import LengthSortedEmbedder, model_fingerprint, model_name_from_path
from psirag.errors import EmbeddingError, InputError

ONNX_INSTALL_HINT = "pip install 'onnxruntime>=1.17' 'onnx>=1.15'"
"""Both are default dependencies of psirag; the ``psirag[onnx]`` extra is kept empty."""
Precision = Literal["fp32", "int8"]
_EXPORT_VERSION = 2
"""Bumped when the exported graph changes, so that older cached files are not reused."""
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def require_onnxruntime() -> Any:
    """Import onnxruntime, or say which extra provides it (a psirag error: no traceback)."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise InputError(
            "the ONNX embedder needs onnxruntime (a psirag dependency), which does not import: "
            f"{ONNX_INSTALL_HINT} (or use the torch path: --embedder minilm-torch)"
        ) from exc
    return onnxruntime


def cache_dir() -> Path:
    """Where exported models live: ``$PSIRAG_CACHE``, else ``$XDG_CACHE_HOME/psirag``."""
    root = os.environ.get("PSIRAG_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "psirag"


def onnx_path(folder: Path, precision: Precision = "fp32") -> Path:
    """The cached ONNX file for a model folder: named by its name, fingerprint and precision."""
    name = model_name_from_path(folder)
    tag = f"{name}-{model_fingerprint(folder)}-v{_EXPORT_VERSION}-{precision}.onnx"
    return cache_dir() / "onnx" / tag


def _encoder_module(folder: Path) -> Any:
    """A torch module: (input_ids, attention_mask, token_type_ids) -> unit mean-pooled rows."""
    import torch
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
    config = bert.config
    if config.model_type != "bert" or config.hidden_act != "gelu":
        raise InputError(
            f"the ONNX export supports BERT models with gelu (MiniLM), not {config.model_type!r}"
        )
    heads = int(config.num_attention_heads)
    head_dim = int(config.hidden_size) // heads

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            emb = self.bert.embeddings
            seq = input_ids.shape[1]
            positions = torch.arange(seq, dtype=torch.long, device=input_ids.device)
            x = (
                emb.word_embeddings(input_ids)
                + emb.position_embeddings(positions)[None, :, :]
                + emb.token_type_embeddings(token_type_ids)
            )
            x = emb.LayerNorm(x)
            mask = attention_mask.to(x.dtype)
            bias = (1.0 - mask)[:, None, None, :] * torch.finfo(x.dtype).min
            batch = x.shape[0]
            for layer in self.bert.encoder.layer:
                att = layer.attention.self

                def split(t: Any) -> Any:
                    return t.view(batch, seq, heads, head_dim).transpose(1, 2)

                q, k, v = split(att.query(x)), split(att.key(x)), split(att.value(x))
                scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim) + bias
                ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, -1)
                out = layer.attention.output
                x = out.LayerNorm(out.dense(ctx) + x)
                hidden = torch.nn.functional.gelu(layer.intermediate.dense(x))
                x = layer.output.LayerNorm(layer.output.dense(hidden) + x)
            pooled = (x * mask[:, :, None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return Encoder().eval()


def _atomic_target(path: Path) -> tuple[Path, Any]:
    """A temporary file beside ``path`` (same file system, so ``os.replace`` is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache may be shared between users
    return Path(tmp), None


def export_onnx(folder: Path, precision: Precision = "fp32") -> Path:
    """The cached ONNX file for ``folder``, exporting (and quantising) it first if missing."""
    target = onnx_path(folder, precision)
    if target.is_file():
        return target
    if precision == "int8":
        source = export_onnx(folder, "fp32")
        tmp, _ = _atomic_target(target)
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            # per-channel int8 weights of the matrix products only: quantising the embedding
            # tables too (the default) moved vectors to a mean cosine of 0.95, this keeps 0.99
            quantize_dynamic(
                str(source),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul"],
            )
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return target
    import torch

    tmp, _ = _atomic_target(target)  # first: an unwritable cache fails before the model loads
    try:
        module = _encoder_module(folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    example = {
        "input_ids": torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
        "token_type_ids": torch.zeros(2, 4, dtype=torch.long),
    }
    axes = {**{k: {0: "batch", 1: "seq"} for k in _INPUTS}, "embedding": {0: "batch"}}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                tuple(example[k] for k in _INPUTS),
                str(tmp),
                input_names=list(_INPUTS),
                output_names=["embedding"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        os.replace(tmp, target)
    except InputError:
        raise
    except Exception as exc:
        raise EmbeddingError(f"exporting {folder} to ONNX failed: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


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
        name: str | None = None,
        spec: str | None = None,
        torch_id: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        ort = require_onnxruntime()
        from transformers import AutoTokenizer

        self.path = Path(folder)
        self.precision = precision
        self.batch_size = batch_size
        model_file = export_onnx(self.path, precision)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self._session = ort.InferenceSession(
                str(model_file), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own errors: a damaged or foreign file
            raise EmbeddingError(
                f"ONNX Runtime cannot load {model_file} ({exc}); delete it to export it again"
            ) from exc
        self._tokenizer = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
        self.max_tokens: int | None = _max_seq_length(self.path)
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
        ids = self._tokenizer(
            list(texts), add_special_tokens=True, truncation=False, verbose=False
        )["input_ids"]
        return np.asarray([len(x) for x in ids], dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        limit = self.max_tokens
        enc = self._tokenizer(
            texts,
            padding=True,
            truncation=limit is not None,
            max_length=limit,
            return_tensors="np",
        )
        feeds = {k: np.asarray(enc[k], dtype=np.int64) for k in _INPUTS if k in enc}
        if "token_type_ids" not in feeds:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        return np.asarray(self._session.run(None, feeds)[0])


def _max_seq_length(folder: Path) -> int | None:
    """sentence-transformers' ``max_seq_length`` (256 for MiniLM), which truncates inputs."""
    import json

    try:
        data = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8"))
        return int(data["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


__all__ = ["ONNX_INSTALL_HINT", "OnnxEmbedder", "cache_dir", "export_onnx", "onnx_path"]
