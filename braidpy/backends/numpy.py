"""NumPy backend: App's default vector operations for ``numpy.ndarray`` states.

These are the Python twins of the compiled fast paths (csrc/bindings/array_fast.cpp),
which run App's defaults for float64 arrays without a Python frame; both round
identically, so a solve gives bitwise the same values either way.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from . import wire
from ._axpby import axpby

__all__ = ["NumpyBackend", "BACKEND", "clone", "sum", "norm", "stack", "pack", "unpack"]


def clone(u: np.ndarray) -> np.ndarray:
    """An independent C-order copy."""
    return u.copy()


def _overlaps(x: Any, y: np.ndarray) -> bool:
    return x is y or (isinstance(x, np.ndarray) and np.may_share_memory(x, y))


def sum(a: float, x: Any, b: float, y: np.ndarray) -> None:  # noqa: A001 - XBraid's name
    """y <- a*x + b*y in place; correct when x is y (or overlaps it)."""
    axpby(a, x, b, y, _overlaps, clone)


def norm(u: np.ndarray) -> float:
    """Euclidean norm ``sqrt(sum |u_i|^2)``, the same rounding as XBraid's examples."""
    if u.size == 1:
        v = u.reshape(()).item()
        return math.sqrt((v * v.conjugate()).real if isinstance(v, complex) else v * v)
    flat = u.reshape(-1)
    return math.sqrt(float(np.vdot(flat, flat).real))


def stack(us: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays stacked along a new leading axis."""
    return np.stack(us)


def pack(u: np.ndarray) -> bytes:
    """The wire header (:mod:`braidpy.backends.wire`) followed by u's data."""
    return wire.encode(u, wire.CPU)


def unpack(buf: Any) -> np.ndarray:
    """A new NumPy array from a message; ValueError for anything malformed."""
    msg = wire.decode(buf)
    if msg.device_kind != wire.CPU:
        raise ValueError(
            f"braidpy message: the sender's array lived on a "
            f"{wire.DEVICE_KINDS[msg.device_kind]} device (device kind {msg.device_kind}), "
            f"but this rank's backend (numpy) places arrays in CPU memory; give your App "
            f"class the array_namespace (and array_device) of its states so that every rank "
            f"builds the same kind of array")
    return wire.to_numpy(msg)


class NumpyBackend:
    """The :class:`~braidpy.backends.Backend` for ``numpy.ndarray`` (host memory)."""

    name = "numpy"
    device = "cpu"
    device_kind = wire.CPU
    clone = staticmethod(clone)
    sum = staticmethod(sum)
    norm = staticmethod(norm)
    stack = staticmethod(stack)
    pack = staticmethod(pack)
    unpack = staticmethod(unpack)

    def __repr__(self) -> str:
        return "NumpyBackend()"


BACKEND = NumpyBackend()
