"""Where a network's numbers live: an array namespace and one of its devices (``device=``).

A :class:`Placement` is what ``ResNet(..., device=...)`` and ``braidpy train --device``
resolve to. NumPy on the host is the default; ``"cuda"`` (or ``"cuda:N"``) is CuPy through
array-api-compat, imported only then (the ``gpu`` extra); any other array-API namespace
and one of its devices can be given as ``xp=`` and ``device=`` (the tests run the device
path on array-api-strict's ``Device("device1")``, whose arrays refuse conversion to NumPy).

Device code computes in the placement's namespace and hands back Python scalars only;
the two host copies are explicit and named: :meth:`Placement.from_host` (data,
initial parameters, a loaded checkpoint) and :meth:`Placement.to_host` (checkpoints).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ._extras import require

__all__ = ["Placement", "HOST", "placement", "placement_of", "namespace", "vector_norm"]

_CUDA = re.compile(r"cuda(?::(\d+))?")


def _compat() -> Any:
    return require("array_api_compat", "array-api", "braidpy on non-NumPy arrays")


def namespace(a: Any) -> Any:
    """The array namespace of ``a``: NumPy for ``numpy.ndarray``, else array-api-compat's
    (the array's own where it is standard, a wrapper for CuPy and PyTorch)."""
    if isinstance(a, np.ndarray):
        return np
    return _compat().array_namespace(a)


def vector_norm(a: Any) -> float:
    """Euclidean norm of a 1-D array as a Python float (NumPy: ``numpy.linalg.norm``)."""
    if isinstance(a, np.ndarray):
        return float(np.linalg.norm(a))
    return float(namespace(a).linalg.vector_norm(a))


class Placement:
    """An array namespace and one of its devices: where parameters, states, gradients
    and optimizer state live.

    Parameters
    ----------
    xp : module
        The array namespace (``numpy`` for the host).
    device : object
        One of ``xp``'s devices (``"cpu"`` for NumPy).
    name : str
        How run headers print it (``"cpu"``, ``"cuda:0"``, ...).

    Examples
    --------
    >>> HOST.is_host, HOST.name
    (True, 'cpu')
    >>> HOST.from_host([1, 2]).dtype
    dtype('float64')
    """

    def __init__(self, xp: Any, device: Any, name: str):
        self.xp = xp
        self.device = device
        self.name = name

    @property
    def is_host(self) -> bool:
        """True for NumPy arrays in host memory."""
        return self.xp is np

    def __repr__(self) -> str:
        return f"Placement({self.name!r})"

    def synchronize(self) -> None:
        """Wait until the work queued on this device is done (CuPy: the device's
        ``synchronize``; devices without one, the host included, run synchronously
        as far as Python can tell). For timing device work by wall clock."""
        sync = getattr(self.device, "synchronize", None)
        if callable(sync):
            sync()

    def zeros(self, shape: Any, dtype: Any = None) -> Any:
        """float64 (or ``dtype``) zeros on this device."""
        if self.is_host:
            return np.zeros(shape, dtype=np.float64 if dtype is None else dtype)
        xp = self.xp
        return xp.zeros(shape, dtype=xp.float64 if dtype is None else dtype, device=self.device)

    def from_host(self, a: Any, dtype: Any = "float64") -> Any:
        """A new array on this device with the data of ``a`` (a NumPy array, list or
        number; an array already on this device is copied). ``dtype`` by name or None
        (keep a's)."""
        if self.is_host:
            return np.array(a, dtype=dtype, copy=True)
        xp = self.xp
        dt = None if dtype is None else getattr(xp, str(np.dtype(dtype)))
        if isinstance(a, np.ndarray) or not hasattr(a, "shape"):
            a = np.asarray(a, dtype=dtype)  # host data: NumPy converts it, the device copies
        return xp.asarray(a, dtype=dt, device=self.device, copy=True)

    def to_host(self, a: Any) -> np.ndarray:
        """A new NumPy array with the data of ``a``: the explicit device-to-host copy."""
        if isinstance(a, np.ndarray):
            return a.copy()
        from .backends.array_api import for_array

        return np.array(for_array(a).to_host(a), copy=True)

    def copy(self, a: Any) -> Any:
        """An independent copy of ``a`` on its device."""
        if isinstance(a, np.ndarray):
            return a.copy()
        return namespace(a).asarray(a, copy=True)

    def tree_to_host(self, obj: Any) -> Any:
        """``obj`` with every non-NumPy array in it (dicts, lists, tuples) copied to the host."""
        if isinstance(obj, dict):
            return {k: self.tree_to_host(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.tree_to_host(v) for v in obj)
        if _is_device_array(obj):
            return self.to_host(obj)
        return obj

    def tree_from_host(self, obj: Any) -> Any:
        """``obj`` with every NumPy array in it (dicts, lists, tuples) copied to this device."""
        if self.is_host:
            return obj
        if isinstance(obj, dict):
            return {k: self.tree_from_host(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.tree_from_host(v) for v in obj)
        if isinstance(obj, np.ndarray) and obj.dtype.kind in "fc":
            return self.from_host(obj, dtype=None)
        return obj


def _is_device_array(a: Any) -> bool:
    return not isinstance(a, (np.ndarray, np.generic)) and (
        hasattr(a, "__array_namespace__") or hasattr(a, "__dlpack__"))


#: NumPy arrays in host memory: the default placement.
HOST = Placement(np, "cpu", "cpu")


def _cuda(index: int) -> Placement:
    what = "--device cuda (braidpy on CUDA GPUs)"
    cupy = require("cupy", "gpu", what)
    compat = require("array_api_compat", "gpu", what)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError without a driver or GPU
        raise RuntimeError(f"--device cuda: CuPy finds no usable CUDA device ({exc})") from exc
    if not 0 <= index < count:
        raise ValueError(f"device 'cuda:{index}' does not exist: CuPy sees {count} CUDA "
                         f"device(s)")
    return Placement(compat.array_namespace(cupy.empty(0)), cupy.cuda.Device(index),
                     f"cuda:{index}")


def placement(device: Any = None, xp: Any = None) -> Placement:
    """The :class:`Placement` a ``device=`` (and ``xp=``) argument names.

    ``device``: None or ``"cpu"`` (NumPy, the default), ``"cuda"`` or ``"cuda:N"`` (CuPy;
    needs ``pip install -e '.[gpu]'``), a :class:`Placement`, or, with ``xp`` an array
    namespace, one of its devices (None: its default device).

    Examples
    --------
    >>> placement().name, placement("cpu") is HOST
    ('cpu', True)
    >>> placement("tpu")
    Traceback (most recent call last):
    ...
    ValueError: unknown device 'tpu'; choose 'cpu', 'cuda' or 'cuda:N' (or pass xp= an \
array namespace and device= one of its devices)
    """
    if isinstance(device, Placement):
        return device
    if xp is None or xp is np or getattr(xp, "__name__", "") == "array_api_compat.numpy":
        if device is None or device == "cpu":
            return HOST
        m = _CUDA.fullmatch(device) if isinstance(device, str) else None
        if m is not None and xp is None:
            return _cuda(int(m.group(1) or 0))
        raise ValueError(f"unknown device {device!r}; choose 'cpu', 'cuda' or 'cuda:N' (or "
                         f"pass xp= an array namespace and device= one of its devices)")
    try:
        probe = xp.empty((0,)) if device is None else xp.empty((0,), device=device)
        xp = _compat().array_namespace(probe)
        device = _compat().device(probe)
    except ImportError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised naming both arguments
        raise ValueError(f"xp= must be an array namespace and device= one of its devices "
                         f"(or None); got {xp!r} and {device!r}: {type(exc).__name__}: "
                         f"{exc}") from exc
    return Placement(xp, device, f"{getattr(xp, '__name__', xp)}:{device}")


def placement_of(a: Any) -> Placement:
    """The placement of an array (:data:`HOST` for NumPy)."""
    if isinstance(a, np.ndarray):
        return HOST
    compat = _compat()
    return placement(compat.device(a), compat.array_namespace(a))

