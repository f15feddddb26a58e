"""A BERT sentence encoder (MiniLM) as an ONNX graph, written from its safetensors weights.

No torch, no ``onnx`` package and no download: the weights are read with numpy from the model
folder's ``model.safetensors`` (an 8-byte little-endian header length, a JSON header naming each
array's dtype, shape and byte range, then the raw little-endian arrays), and the graph is
serialised by :mod:`psirag.embed.onnx_proto`: embeddings, the encoder layers, mean pooling over
the attention mask and L2 normalisation, i.e. the model's three sentence-transformers modules
(Transformer, Pooling with mean tokens, Normalize) in one graph. Each operation mirrors what
transformers' ``BertModel`` computes in float32, so the vectors equal the torch path's
(tests/test_embed_onnx.py).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

from psirag.embed import onnx_proto as proto
from psirag.errors import InputError

OPSET = 17
"""LayerNormalization is an ONNX operator from opset 17 on."""
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "embedding"

_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
}
_MAX_HEADER = 100 * 1024 * 1024


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every array of a ``.safetensors`` file, as numpy arrays (float ones as float32)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the model weights {path}: {exc}") from exc
    if len(data) < 8:
        raise InputError(f"{path} is not a safetensors file (shorter than its header)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise InputError(f"{path} is not a safetensors file (header length {size} out of range)")
    try:
        header = json.loads(data[8 : 8 + size])
    except ValueError as exc:
        raise InputError(f"{path}: unreadable safetensors header ({exc})") from exc
    if not isinstance(header, dict):
        raise InputError(f"{path}: the safetensors header is not a JSON object")
    body = memoryview(data)[8 + size :]
    arrays: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _DTYPES[info["dtype"]]
            shape = [int(d) for d in info["shape"]]
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: tensor {name!r} has no dtype this reader knows") from exc
        count = math.prod(shape)
        if not 0 <= start <= end <= len(body) or end - start != count * dtype.itemsize:
            raise InputError(f"{path}: tensor {name!r} points outside the file")
        arr = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
        arrays[name] = arr.astype(np.float32) if arr.dtype.kind == "f" else arr.copy()
    return arrays


def _bert_config(folder: Path) -> dict[str, Any]:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {folder / 'config.json'}: {exc}") from exc
    if (
        config.get("model_type") != "bert"
        or config.get("hidden_act") != "gelu"
        or config.get("position_embedding_type", "absolute") != "absolute"
    ):
        raise InputError(
            f"the ONNX graph supports BERT models with gelu and absolute positions (MiniLM), "
            f"not the model in {folder} (model_type {config.get('model_type')!r}); "
            "use its torch path (pip install 'psirag[torch]')"
        )
    return config


def _pooling_is_mean(folder: Path) -> bool:
    """True when the sentence-transformers modules are Transformer, mean Pooling, Normalize."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
        pooling = next(m for m in modules if m["type"].endswith("Pooling"))
        cfg = json.loads((folder / pooling["path"] / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return False
    others = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v]
    return kinds == ["Transformer", "Pooling", "Normalize"] and others == [
        "pooling_mode_mean_tokens"
    ]


EXTERNAL_MIN_BYTES = 1024
"""Weights at least this large go to the weights file of :func:`build_bert_encoder_external`."""
EXTERNAL_ALIGN = 65536
"""Their offsets there: a multiple of every page size (and of Windows' allocation granularity),
which ONNX Runtime needs to map the file instead of reading it."""


class _Graph:
    """Collects serialised nodes and weights; node outputs are named by a counter. With
    ``external`` (a file name), large weights are collected in :attr:`blob` instead, each at an
    aligned offset, for a file of that name beside the model."""

    def __init__(self, external: str | None = None) -> None:
        self.nodes: list[bytes] = []
        self.inits: list[bytes] = []
        self.external = external
        self.blob = bytearray()
        self._n = 0

    def const(self, name: str, value: np.ndarray) -> str:
        if self.external is None or value.nbytes < EXTERNAL_MIN_BYTES:
            self.inits.append(proto.tensor(name, value))
            return name
        self.blob += bytes(-len(self.blob) % EXTERNAL_ALIGN)
        tensor, raw = proto.external_tensor(name, value, self.external, len(self.blob))
        self.inits.append(tensor)
        self.blob += raw
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        self._n += 1
        out = f"{kind.lower()}_{self._n}"
        self.nodes.append(proto.node(kind, inputs, [out], **attrs))
        return out


def build_bert_encoder(folder: Path) -> bytes:
    """The serialised ONNX model: (input_ids, attention_mask, token_type_ids) -> unit rows."""
    return _build(Path(folder), _Graph())


def build_bert_encoder_external(folder: Path, weights_name: str) -> tuple[bytes, bytes]:
    """The model of :func:`build_bert_encoder` with its large weights in a second file, named
    ``weights_name`` and kept beside it: (the model, that file's bytes). The same graph and the
    same weights, so the same vectors; ONNX Runtime maps the weights file into memory, which
    makes a session in about a third of the CPU time (no 90 MB copied and paged in) and lets
    processes share those pages."""
    g = _Graph(weights_name)
    return _build(Path(folder), g), bytes(g.blob)


def _build(folder: Path, g: _Graph) -> bytes:
    config = _bert_config(folder)
    if not _pooling_is_mean(folder):
        raise InputError(
            f"the ONNX graph supports mean pooling then normalisation (MiniLM); {folder}'s "
            "modules.json says otherwise: use its torch path (pip install 'psirag[torch]')"
        )
    weights = read_safetensors(folder / "model.safetensors")
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""

    def w(name: str) -> np.ndarray:
        try:
            return weights[prefix + name]
        except KeyError:
            raise InputError(
                f"{folder / 'model.safetensors'} has no tensor {prefix + name!r}"
            ) from None

    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))

    def layer_norm(x: str, name: str) -> str:
        scale = g.const(f"{name}.weight", w(f"{name}.weight"))
        bias = g.const(f"{name}.bias", w(f"{name}.bias"))
        return g.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)

    def linear(x: str, name: str) -> str:
        # torch's Linear keeps (out, in); x @ W.T + b
        weight = g.const(f"{name}.weight", w(f"{name}.weight").T)
        bias = g.const(f"{name}.bias", w(f"{name}.bias"))
        return g.op("Add", g.op("MatMul", x, weight), bias)

    # embeddings: word + position + token type, then layer norm
    words = g.op(
        "Gather", g.const("word_embeddings", w("embeddings.word_embeddings.weight")), "input_ids"
    )
    # positions 0..seq-1: the first seq rows of the table (a 1-D slice end, as ORT wants)
    seq = g.op("Shape", "input_ids", start=1, end=2)
    zero = g.const("zero_1d", np.array([0], dtype=np.int64))
    pos_table = g.const("position_embeddings", w("embeddings.position_embeddings.weight"))
    types_table = g.const("token_type_embeddings", w("embeddings.token_type_embeddings.weight"))
    x = g.op(
        "Add",
        g.op("Add", words, g.op("Slice", pos_table, zero, seq, zero)),
        g.op("Gather", types_table, "token_type_ids"),
    )
    x = layer_norm(x, "embeddings.LayerNorm")

    # additive attention bias: 0 for tokens, the float32 minimum for padding (as transformers)
    mask = g.op("Cast", "attention_mask", to=proto.FLOAT)
    f_one = g.const("one_f32", np.array(1.0, dtype=np.float32))
    f_min = g.const("min_f32", np.array(np.finfo(np.float32).min, dtype=np.float32))
    bias = g.op("Mul", g.op("Sub", f_one, mask), f_min)
    bias = g.op("Unsqueeze", bias, g.const("axes_1_2", np.array([1, 2], dtype=np.int64)))
    split_shape = g.const("split_heads", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_shape = g.const("merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.const("attention_scale", np.array(1.0 / math.sqrt(head_dim), dtype=np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))

    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"

        def heads_of(t: str) -> str:
            return g.op("Transpose", g.op("Reshape", t, split_shape), perm=[0, 2, 1, 3])

        q = heads_of(linear(x, f"{p}.attention.self.query"))
        k = heads_of(linear(x, f"{p}.attention.self.key"))
        v = heads_of(linear(x, f"{p}.attention.self.value"))
        scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), scale)
        probs = g.op("Softmax", g.op("Add", scores, bias), axis=-1)
        ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", ctx, merge_shape)
        attn = linear(ctx, f"{p}.attention.output.dense")
        x = layer_norm(g.op("Add", attn, x), f"{p}.attention.output.LayerNorm")
        inner = linear(x, f"{p}.intermediate.dense")
        # exact (erf) GELU, as transformers' "gelu"
        gelu = g.op(
            "Mul",
            g.op("Mul", inner, half),
            g.op("Add", g.op("Erf", g.op("Div", inner, sqrt2)), f_one),
        )
        out = linear(gelu, f"{p}.output.dense")
        x = layer_norm(g.op("Add", out, x), f"{p}.output.LayerNorm")

    # mean pooling over the attention mask, then L2 normalisation (sentence-transformers)
    mask3 = g.op("Unsqueeze", mask, g.const("axis_2", np.array([2], dtype=np.int64)))
    summed = g.op(
        "ReduceSum",
        g.op("Mul", x, mask3),
        g.const("axis_1", np.array([1], dtype=np.int64)),
        keepdims=0,
    )
    counts = g.op("ReduceSum", mask, g.const("axis_1b", np.array([1], dtype=np.int64)), keepdims=1)
    counts = g.op("Max", counts, g.const("tiny_count", np.array(1e-9, dtype=np.float32)))
    pooled = g.op("Div", summed, counts)
    norm = g.op("ReduceL2", pooled, axes=[1], keepdims=1)  # axes an attribute until opset 18
    norm = g.op("Max", norm, g.const("tiny_norm", np.array(1e-12, dtype=np.float32)))
    g.nodes.append(proto.node("Div", [pooled, norm], [OUTPUT]))
    return proto.model(
        g.nodes,
        g.inits,
        [proto.value_info(name, proto.INT64, ["batch", "seq"]) for name in INPUTS],
        [proto.value_info(OUTPUT, proto.FLOAT, ["batch", hidden])],
        graph_name="psirag_bert_encoder",
        opset=OPSET,
        ir_version=8,  # readable by onnxruntime 1.17 and later
        producer="psirag",
    )


__all__ = [
    "INPUTS",
    "OUTPUT",
    "build_bert_encoder",
    "build_bert_encoder_external",
    "read_safetensors",
]
