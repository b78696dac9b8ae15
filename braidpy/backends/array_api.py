"""Array-API backend: any namespace array-api-compat knows (array-api-strict, JAX, ...).

States stay on their device. The only host copy is the explicit one in :meth:`pack`
(the wire format carries host bytes), and :meth:`unpack` places the data on the
backend's own device, which the receiving rank chose (``App.array_namespace`` and
``App.array_device``), never the message.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Optional, Sequence

import numpy as np

from .._extras import require
from . import wire
from ._axpby import axpby

__all__ = ["ArrayApiBackend", "for_array", "for_namespace"]


def _compat() -> Any:
    """array-api-compat, imported now (the ``array-api`` extra of braidpy)."""
    return require("array_api_compat", "array-api",
                   "braidpy's default vector operations on non-NumPy arrays")


def _kind(u: Any) -> int:
    """DLPack device type of u (1 = CPU, 2 = CUDA, ...)."""
    get = getattr(u, "__dlpack_device__", None)
    if get is None:
        raise TypeError(f"{type(u).__name__} has no __dlpack_device__, so braidpy cannot tell "
                        f"where its data lives; override bufpack/bufunpack in your App")
    return int(get()[0])


class ArrayApiBackend:
    """The :class:`~braidpy.backends.Backend` of one array-API namespace and device.

    Parameters
    ----------
    xp
        The namespace, as ``array_api_compat.array_namespace`` returns it.
    device
        Where this backend's arrays live; :meth:`unpack` puts received data there.
    device_kind
        The DLPack device type of ``device``; found from a probe array when None.
    """

    def __init__(self, xp: Any, device: Any, device_kind: Optional[int] = None):
        self.xp = xp
        self.device = device
        self._device_kind = device_kind

    @property
    def name(self) -> str:
        return str(getattr(self.xp, "__name__", type(self.xp).__name__))

    @property
    def device_kind(self) -> int:
        if self._device_kind is None:
            self._device_kind = _kind(self.xp.empty((0,), device=self.device))
        return self._device_kind

    def __repr__(self) -> str:
        return f"ArrayApiBackend({self.name}, device={self.device!r})"

    def clone(self, u: Any) -> Any:
        return self.xp.asarray(u, copy=True)

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:  # noqa: A003 - XBraid's name
        """y <- a*x + b*y in place (the NumPy backend's order of operations); correct
        when x is y (overlapping views of one buffer are not detected)."""
        axpby(a, x, b, y, operator.is_, self.clone)

    def norm(self, u: Any) -> float:
        xp = self.xp
        return math.sqrt(float(xp.sum(xp.abs(u) ** 2)))

    def stack(self, us: Sequence[Any]) -> Any:
        return self.xp.stack(list(us))

    def to_host(self, u: Any, kind: Optional[int] = None) -> np.ndarray:
        """u's data in a NumPy array, copied from the device explicitly if need be."""
        if (_kind(u) if kind is None else kind) == wire.CPU:
            return np.from_dlpack(u)  # host memory already: a view, no copy
        array_api_compat = _compat()
        errors = []
        try:  # CuPy -> NumPy, torch -> a CPU tensor, ...
            host = array_api_compat.to_device(u, "cpu")
            return host if isinstance(host, np.ndarray) else np.from_dlpack(host)
        except Exception as exc:  # noqa: BLE001 - try the next way, report both
            errors.append(f"to_device(u, 'cpu'): {exc}")
        try:  # DLPack 1.0 cross-device copy (NumPy >= 2.1)
            return np.from_dlpack(u, device="cpu", copy=True)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"numpy.from_dlpack(u, device='cpu'): {exc}")
        raise TypeError(f"bufpack: cannot copy a {type(u).__name__} on {self.device!r} to host "
                        f"memory ({'; '.join(errors)}); override bufpack/bufunpack in your App")

    def pack(self, u: Any) -> bytes:
        """The wire header (:mod:`braidpy.backends.wire`) followed by u's data."""
        kind = _kind(u)
        return wire.encode(self.to_host(u, kind), kind)

    def unpack(self, buf: Any) -> Any:
        """A new array of this namespace on this backend's device; ValueError for
        anything malformed or for data this backend cannot place."""
        msg = wire.decode_for(buf, self.device_kind, f"{self.name} on {self.device!r}")
        dtype = getattr(self.xp, msg.dtype_name, None)
        if dtype is None:
            raise ValueError(f"braidpy message: dtype {msg.dtype_name} (code {msg.dtype_code}) "
                             f"has no counterpart in {self.name}")
        return self.xp.asarray(wire.to_numpy(msg), dtype=dtype, device=self.device)


def for_array(u: Any) -> ArrayApiBackend:
    """The backend of u's namespace and device (array-api-compat must know u)."""
    array_api_compat = _compat()
    return ArrayApiBackend(array_api_compat.array_namespace(u), array_api_compat.device(u))


def for_namespace(xp: Any, device: Any = None) -> ArrayApiBackend:
    """The backend that builds arrays of namespace ``xp`` on ``device`` (None: xp's
    default device), checked with one empty probe array."""
    try:
        probe = xp.empty((0,)) if device is None else xp.empty((0,), device=device)
        backend = for_array(probe)
    except Exception as exc:  # noqa: BLE001 - re-raised with the option's name
        raise TypeError(f"App.array_namespace must be an array namespace (a module such as "
                        f"array_api_strict, cupy or torch) and App.array_device one of its "
                        f"devices or None; got {xp!r} and {device!r}: "
                        f"{type(exc).__name__}: {exc}") from exc
    backend._device_kind = _kind(probe)
    return backend
