"""Default vector operations for NumPy arrays and array-API/DLPack arrays."""

from __future__ import annotations

import importlib
import math
import struct

import numpy as np

__all__ = ["is_array", "stack", "array_clone", "array_sum", "array_norm", "array_pack",
           "array_unpack"]

_HEADER = struct.Struct("<H")


def is_array(u) -> bool:
    """True for (mutable) NumPy arrays and arrays exposing the array API or DLPack."""
    if isinstance(u, np.generic):  # NumPy scalars cannot be updated in place
        return False
    return isinstance(u, np.ndarray) or hasattr(u, "__array_namespace__") or hasattr(
        u, "__dlpack__"
    )


def _check(u, what: str):
    if isinstance(u, np.generic):
        raise TypeError(
            f"{what}: got the NumPy scalar {u!r}, which cannot be updated in place; "
            f"use a 1-element array (np.array([value])) as the state"
        )
    if not is_array(u):
        raise TypeError(
            f"{what}: the default vector operations need an array (NumPy, CuPy, or any array "
            f"with __array_namespace__/__dlpack__), got {type(u).__name__}; override "
            f"clone/sum/norm/bufpack/bufunpack in your App for other vector types"
        )


def stack(us):
    """The arrays us stacked along a new leading axis, in their own namespace."""
    u = us[0]
    if isinstance(u, np.ndarray):
        return np.stack(us)
    _check(u, "step_batch")
    if hasattr(u, "__array_namespace__"):
        return u.__array_namespace__().stack(list(us))
    return importlib.import_module(_library(u)).stack(list(us))


def array_clone(u):
    if isinstance(u, np.ndarray):
        return u.copy()
    _check(u, "clone")
    for name in ("copy", "clone"):  # CuPy/NumPy-likes; torch-like tensors
        if hasattr(u, name):
            return getattr(u, name)()
    return u.__array_namespace__().asarray(u, copy=True)


def array_sum(a: float, x, b: float, y) -> None:
    """y <- a*x + b*y in place; correct when x is y (or overlaps it)."""
    if not isinstance(y, np.ndarray):
        _check(y, "sum")
    if b == 1.0:
        if a == 0.0:
            return
        if a == 1.0:
            y += x
        elif a == -1.0:
            y -= x
        else:
            y += a * x
        return
    if a == 0.0:
        y *= b
        return
    ax = x if a == 1.0 else a * x
    if ax is x and _shares_memory(x, y):
        ax = x.copy()
    y *= b
    y += ax


def _shares_memory(x, y) -> bool:
    if x is y:
        return True
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return bool(np.may_share_memory(x, y))
    return False


def array_norm(u) -> float:
    """Euclidean norm sqrt(sum |u_i|^2), the same rounding as XBraid's examples."""
    if isinstance(u, np.ndarray):
        if u.size == 1:
            v = u.reshape(()).item()
            return math.sqrt((v * v.conjugate()).real if isinstance(v, complex) else v * v)
        flat = u.reshape(-1)
        return math.sqrt(float(np.vdot(flat, flat).real))
    _check(u, "norm")
    if hasattr(u, "__array_namespace__"):
        xp = u.__array_namespace__()
        return math.sqrt(float(xp.sum(xp.abs(u) ** 2)))
    return math.sqrt(float(abs(u * u.conj()).sum()))  # DLPack-only, torch-like


def _to_host(u) -> np.ndarray:
    if isinstance(u, np.ndarray):
        return u
    if hasattr(u, "get"):  # CuPy and friends
        return u.get()
    return np.from_dlpack(u)


def _library(u) -> str:
    """Name of the module whose asarray rebuilds u's type (numpy, cupy, torch, ...)."""
    if isinstance(u, np.ndarray):
        return "numpy"
    if hasattr(u, "__array_namespace__"):
        return u.__array_namespace__().__name__
    return type(u).__module__.split(".")[0]


def array_pack(u) -> bytes:
    """Library, dtype, shape and data in one contiguous buffer."""
    host = _to_host(u)
    if not host.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d into 1-d)
        host = host.copy(order="C")
    shape = ",".join(map(str, host.shape))
    head = f"{_library(u)};{host.dtype.str};{shape}".encode("ascii")
    return _HEADER.pack(len(head)) + head + host.tobytes()


def array_unpack(buf):
    """Inverse of array_pack: an array of the packed library (on its default device)."""
    mv = memoryview(buf).cast("B")
    (nhead,) = _HEADER.unpack(mv[: _HEADER.size])
    head = bytes(mv[_HEADER.size : _HEADER.size + nhead]).decode("ascii")
    library, dtype, shape = head.split(";")
    dims = tuple(int(s) for s in shape.split(",")) if shape else ()
    data = np.frombuffer(mv[_HEADER.size + nhead :], dtype=np.dtype(dtype)).reshape(dims).copy()
    if library == "numpy":
        return data
    return importlib.import_module(library).asarray(data)
