"""Just enough of the ONNX protobuf format to write a model, so that the default install needs
no ``onnx`` package (25 MB) to write the MiniLM graph: ONNX Runtime reads the bytes.

Protobuf's wire format: each field is a key (field number << 3 | wire type) followed by a
varint (type 0), 4 little-endian bytes (type 5, float) or a length-prefixed payload (type 2,
strings, bytes and nested messages). Field numbers are those of onnx.proto (ModelProto,
GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto); repeated integers are
written unpacked, which every protobuf reader accepts.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

FLOAT = 1
"""TensorProto.DataType values."""
INT64 = 7
_DATA_TYPES = {np.dtype(np.float32): FLOAT, np.dtype(np.int64): INT64}
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7
"""AttributeProto.AttributeType values."""


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 values as two's complement, ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


def _float(field: int, value: float) -> bytes:
    return _varint(field << 3 | 5) + struct.pack("<f", value)


def attribute(name: str, value: int | float | Sequence[int]) -> bytes:
    """An AttributeProto: an int, a float or a list of ints."""
    out = _str(1, name)
    if isinstance(value, int):  # bool included
        return out + _int(3, int(value)) + _int(20, _ATTR_INT)
    if isinstance(value, float):
        return out + _float(2, value) + _int(20, _ATTR_FLOAT)
    return out + b"".join(_int(8, int(v)) for v in value) + _int(20, _ATTR_INTS)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: object) -> bytes:
    """A NodeProto of the default (ai.onnx) domain."""
    out = b"".join(_str(1, i) for i in inputs) + b"".join(_str(2, o) for o in outputs)
    out += _str(4, op_type)
    for key, value in attrs.items():
        out += _bytes(5, attribute(key, value))  # type: ignore[arg-type]
    return out


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto holding ``array`` (float32 or int64) as little-endian raw data."""
    data = np.ascontiguousarray(array)
    try:
        data_type = _DATA_TYPES[data.dtype]
    except KeyError:
        raise TypeError(f"tensor {name!r}: dtype {data.dtype} is not float32 or int64") from None
    out = b"".join(_int(1, int(d)) for d in data.shape) + _int(2, data_type)
    return out + _str(8, name) + _bytes(9, data.astype(data.dtype.newbyteorder("<")).tobytes())


def external_tensor(
    name: str, array: np.ndarray, location: str, offset: int
) -> tuple[bytes, bytes]:
    """A TensorProto whose data lies in the file ``location`` (beside the model) at ``offset``,
    and those little-endian bytes: ONNX Runtime maps such a file into memory instead of copying
    the weights out of the model, when the offset is a multiple of the page size."""
    data = np.ascontiguousarray(array)
    try:
        data_type = _DATA_TYPES[data.dtype]
    except KeyError:
        raise TypeError(f"tensor {name!r}: dtype {data.dtype} is not float32 or int64") from None
    raw = data.astype(data.dtype.newbyteorder("<")).tobytes()
    entries = (("location", location), ("offset", str(offset)), ("length", str(len(raw))))
    out = b"".join(_int(1, int(d)) for d in data.shape) + _int(2, data_type) + _str(8, name)
    out += b"".join(_bytes(13, _str(1, key) + _str(2, value)) for key, value in entries)
    return out + _int(14, 1), raw  # data_location = EXTERNAL


def value_info(name: str, elem_type: int, shape: Sequence[int | str]) -> bytes:
    """A ValueInfoProto: a tensor's name, element type and (symbolic or fixed) shape."""
    dims = b"".join(_bytes(1, _str(2, d) if isinstance(d, str) else _int(1, d)) for d in shape)
    tensor_type = _int(1, elem_type) + _bytes(2, dims)
    return _str(1, name) + _bytes(2, _bytes(1, tensor_type))


def model(
    nodes: Sequence[bytes],
    initializers: Sequence[bytes],
    inputs: Sequence[bytes],
    outputs: Sequence[bytes],
    *,
    graph_name: str,
    opset: int,
    ir_version: int,
    producer: str,
) -> bytes:
    """A serialised ModelProto with one graph."""
    graph = b"".join(_bytes(1, n) for n in nodes) + _str(2, graph_name)
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, v) for v in inputs) + b"".join(_bytes(12, v) for v in outputs)
    opset_id = _str(1, "") + _int(2, opset)
    return _int(1, ir_version) + _str(2, producer) + _bytes(7, graph) + _bytes(8, opset_id)


__all__ = [
    "FLOAT",
    "INT64",
    "attribute",
    "external_tensor",
    "model",
    "node",
    "tensor",
    "value_info",
]
