"""The fixed binary header in front of every array braidpy packs for another rank.

A message is a header of ``8 + 8*ndim`` bytes followed by the raw data; every integer
is little-endian:

======  =========  ==========================================================
offset  size       field
======  =========  ==========================================================
0       4          magic ``b"BRPY"``
4       1 (u8)     version, 1
5       1 (u8)     dtype code, from :data:`DTYPES` (e.g. 12 = float64)
6       1 (u8)     device kind of the sender's array, a DLPack device type
                   from :data:`DEVICE_KINDS` (1 = CPU, 2 = CUDA, ...)
7       1 (u8)     ndim, 0 to :data:`MAX_NDIM`
8       8 * ndim   shape, one int64 per axis, each >= 0
8+8*nd  rest       payload: exactly prod(shape) * itemsize bytes, C order,
                   little-endian
======  =========  ==========================================================

No module name, type name or pickle is on the wire, and :func:`decode` neither imports
nor chooses code: the receiving rank's backend decides what array to build. Every
field is validated; a violation raises ``ValueError("braidpy message: ...")`` naming
the field and the bad value. The codes never change meaning; new ones may be added.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

__all__ = ["MAGIC", "VERSION", "MAX_NDIM", "DTYPES", "DEVICE_KINDS", "CPU", "CUDA", "Message",
           "dtype_code", "wire_dtype", "header", "encode", "decode", "decode_for", "to_numpy"]

MAGIC = b"BRPY"
VERSION = 1
MAX_NDIM = 32  # NumPy 1.x's limit (NumPy 2 allows 64): every supported NumPy can build it
_FIXED = struct.Struct("<4sBBBB")  # magic, version, dtype code, device kind, ndim

#: dtype code -> dtype name (the array-API name; NumPy's too). Never renumbered.
DTYPES: dict[int, str] = {
    1: "bool",
    2: "int8", 3: "int16", 4: "int32", 5: "int64",
    6: "uint8", 7: "uint16", 8: "uint32", 9: "uint64",
    10: "float16", 11: "float32", 12: "float64",
    13: "complex64", 14: "complex128",
}

#: device kind -> name: DLPack's ``DLDeviceType`` values (``__dlpack_device__()[0]``).
DEVICE_KINDS: dict[int, str] = {
    1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
    10: "ROCm", 11: "ROCm host", 12: "ext_dev", 13: "CUDA managed", 14: "oneAPI",
    15: "WebGPU", 16: "Hexagon", 17: "MAIA",
}
CPU = 1
CUDA = 2

# Little-endian dtype per code, and the code of each dtype without its byte order
# ("f8", "c16", "b1", ...: int64 and longlong, say, are one dtype here).
_WIRE_DTYPE: dict[int, np.dtype] = {c: np.dtype(n).newbyteorder("<") for c, n in DTYPES.items()}
_CODE: dict[str, int] = {dt.str[1:]: c for c, dt in _WIRE_DTYPE.items()}
_CODE_OF_DTYPE: dict[np.dtype, int] = {}  # cache of dtype_code
_SHAPE = [struct.Struct(f"<{n}q") for n in range(MAX_NDIM + 1)]
_MAX_BYTES = int(np.iinfo(np.intp).max)


class Message(NamedTuple):
    """A decoded, validated message: what :func:`to_numpy` and the backends build from."""

    dtype_code: int
    device_kind: int
    shape: tuple[int, ...]
    payload: memoryview  # exactly prod(shape) * itemsize bytes

    @property
    def dtype_name(self) -> str:
        return DTYPES[self.dtype_code]


def _fail(what: str) -> ValueError:
    return ValueError(f"braidpy message: {what}")


def dtype_code(dtype) -> int:
    """The wire code of a NumPy dtype; TypeError (naming the table) if it has none."""
    dt = np.dtype(dtype)
    code = _CODE_OF_DTYPE.get(dt)
    if code is not None:
        return code
    code = _CODE.get(dt.str[1:])  # structured, datetime, object, ... dtypes: not found
    if code is not None:
        _CODE_OF_DTYPE[dt] = code
        return code
    raise TypeError(f"bufpack: arrays of dtype {dt} cannot be sent between ranks; the "
                    f"wire format carries {', '.join(DTYPES.values())} (override "
                    f"bufpack/bufunpack in your App for other types)")


def wire_dtype(dtype) -> np.dtype:
    """The dtype a message's payload has for arrays of ``dtype``: the same type,
    little-endian (TypeError, as :func:`dtype_code`, for a dtype outside the table)."""
    return _WIRE_DTYPE[dtype_code(dtype)]


def header(dtype, shape: tuple[int, ...], device_kind: int = CPU) -> bytes:
    """The ``8 + 8*ndim`` header bytes of a message carrying an array of ``dtype`` and
    ``shape`` that lived on a device of kind ``device_kind``; the payload follows it."""
    code = dtype_code(dtype)
    if device_kind not in DEVICE_KINDS:
        raise ValueError(f"bufpack: unknown device kind {device_kind}")
    ndim = len(shape)
    if ndim > MAX_NDIM:
        raise ValueError(f"bufpack: arrays of {ndim} dimensions cannot be sent; the "
                         f"wire format carries at most {MAX_NDIM}")
    return _FIXED.pack(MAGIC, VERSION, code, device_kind, ndim) + _SHAPE[ndim].pack(*shape)


def encode(host: np.ndarray, device_kind: int = CPU) -> bytes:
    """Header + C-order little-endian data of a host array, in one new buffer.

    ``device_kind`` records where the sender's array lived (before it was copied to
    host memory for the message).
    """
    head = header(host.dtype, host.shape, device_kind)
    wire = _WIRE_DTYPE[dtype_code(host.dtype)]
    if host.dtype == wire and host.flags.c_contiguous:  # the common case: one copy
        return b"".join((head, host.reshape(-1).view(np.uint8).data))
    # Strided or byte-swapped: C order and little-endian first (0-d stays 0-d).
    return b"".join((head, host.astype(wire, copy=False).tobytes(order="C")))


def decode(buf) -> Message:
    """Validate a message's header and length; never imports or runs anything else."""
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1 or not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    elif mv.format != "B":
        mv = mv.cast("B")
    n = len(mv)
    if n < _FIXED.size:
        raise _fail(f"truncated header: {n} bytes, the fixed part needs {_FIXED.size}")
    magic, version, code, kind, ndim = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC:
        raise _fail(f"bad magic {magic!r} (expected {MAGIC!r}): not a braidpy array message")
    if version != VERSION:
        raise _fail(f"unsupported version {version} (this braidpy reads version {VERSION})")
    if code not in DTYPES:
        raise _fail(f"unknown dtype code {code}")
    if kind not in DEVICE_KINDS:
        raise _fail(f"unknown device kind {kind}")
    if ndim > MAX_NDIM:
        raise _fail(f"ndim {ndim} exceeds the limit {MAX_NDIM}")
    head = _FIXED.size + 8 * ndim
    if n < head:
        raise _fail(f"truncated header: ndim {ndim} needs {head} header bytes, the message "
                    f"has {n}")
    shape = _SHAPE[ndim].unpack_from(mv, _FIXED.size)
    for axis, d in enumerate(shape):
        if d < 0:
            raise _fail(f"negative dimension {d} (axis {axis})")
    itemsize = _WIRE_DTYPE[code].itemsize
    extent = itemsize  # what NumPy's own size check multiplies (zero axes skipped)
    size = 1
    for d in shape:
        extent *= max(d, 1)
        size *= d
    if extent > _MAX_BYTES:
        raise _fail(f"shape {shape} is too large for an array of {DTYPES[code]}")
    if n - head != size * itemsize:
        raise _fail(f"payload length {n - head} bytes does not match shape {shape} of "
                    f"{DTYPES[code]} ({size * itemsize} bytes)")
    return Message(code, kind, shape, mv[head:])


def decode_for(buf, device_kind: int, receiver: str) -> Message:
    """:func:`decode`, then refuse a message whose sender's array lived on another kind
    of device than ``device_kind``, where the receiving backend (described by
    ``receiver``, e.g. ``"cupy on <CUDA Device 0>"``) places arrays."""
    msg = decode(buf)
    if msg.device_kind != device_kind:
        raise _fail(
            f"the sender's array lived on a {DEVICE_KINDS[msg.device_kind]} device (device "
            f"kind {msg.device_kind}), but this rank's backend ({receiver}) places arrays on "
            f"{DEVICE_KINDS.get(device_kind, device_kind)}; give your App class the "
            f"array_namespace and array_device of its states so that every rank builds the "
            f"same kind of array")
    return msg


def to_numpy(msg: Message) -> np.ndarray:
    """A new, writable, C-contiguous NumPy array (native byte order) of a message."""
    wire = _WIRE_DTYPE[msg.dtype_code]
    view = np.frombuffer(msg.payload, dtype=wire).reshape(msg.shape)
    return view.copy() if wire.isnative else view.astype(wire.newbyteorder("="))
