"""Array backends: the vector operations behind App's defaults, one module per array family.

==================  ===========================================================
module              arrays
==================  ===========================================================
``numpy``           ``numpy.ndarray`` (the compiled core's fast paths mirror it)
``array_api``       anything array-api-compat knows: objects with
                    ``__array_namespace__`` (array-api-strict, ...), and JAX,
                    Dask through its wrappers (CuPy and torch have their own)
``torch``           ``torch.Tensor`` (picked for tensors once torch is loaded;
                    this package never imports torch itself)
``cupy``            ``cupy.ndarray`` (picked for CuPy arrays once CuPy is loaded;
                    rank messages through pinned host blocks)
``wire``            the fixed binary header every packed array carries
==================  ===========================================================

:func:`backend_for` picks the backend of a local array; :func:`backend_for_namespace`
the backend a rank builds received arrays with (``App.array_namespace``). Optional
libraries (array-api-compat and the array libraries themselves) are imported only
when an array needs them.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from . import wire
from .numpy import BACKEND as NUMPY
from .numpy import NumpyBackend

__all__ = ["Backend", "NUMPY", "NumpyBackend", "backend_for", "backend_for_namespace", "stack",
           "wire"]


@runtime_checkable
class Backend(Protocol):
    """What an array backend supplies (XBraid's vector routines plus stacking and wire I/O).

    ``name`` names the array family (``"numpy"``, a namespace's module name); ``device``
    is where its arrays live (``"cpu"`` for NumPy), ``device_kind`` that device's DLPack
    device type (1 = CPU, 2 = CUDA, ...: :data:`wire.DEVICE_KINDS`).
    """

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> Any: ...

    @property
    def device_kind(self) -> int: ...

    def clone(self, u: Any) -> Any:
        """An independent copy of u, on u's device."""

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:
        """y <- a*x + b*y in place; x may be y."""

    def norm(self, u: Any) -> float:
        """Euclidean norm ``sqrt(sum |u_i|^2)``."""

    def stack(self, us: Sequence[Any]) -> Any:
        """The states stacked along a new leading axis, on their device."""

    def pack(self, u: Any) -> Any:
        """u as one bytes-like message: the :mod:`wire` header, then host bytes."""

    def unpack(self, buf: Any) -> Any:
        """A new array on this backend's device from a message; ValueError if malformed."""


def _not_an_array(u: Any, what: str) -> TypeError:
    if isinstance(u, np.generic):
        return TypeError(
            f"{what}: got the NumPy scalar {u!r}, which cannot be updated in place; "
            f"use a 1-element array (np.array([value])) as the state")
    return TypeError(
        f"{what}: the default vector operations need an array (NumPy, or any array "
        f"array-api-compat supports: objects with __array_namespace__, CuPy, PyTorch, ...), "
        f"got {type(u).__module__}.{type(u).__qualname__}; override "
        f"clone/sum/norm/bufpack/bufunpack in your App for other vector types")


def backend_for(u: Any, what: str = "braidpy") -> Backend:
    """The backend of a local array ``u``: NumPy for ``numpy.ndarray``, CuPy's for
    ``cupy.ndarray``, torch's for tensors, the array-API backend (on u's namespace and
    device) for other arrays array-api-compat knows; a
    TypeError naming u's type and ``what`` (the calling operation) otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> backend_for(np.zeros(3)).name
    'numpy'
    >>> backend_for([1.0, 2.0], "clone")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: clone: the default vector operations need an array ...
    """
    if isinstance(u, np.ndarray):
        return NUMPY
    if isinstance(u, np.generic):  # NumPy scalars have __array_namespace__ but are immutable
        raise _not_an_array(u, what)
    from . import torch as torch_backend  # imports no torch: looks in sys.modules

    if torch_backend.is_tensor(u):
        return torch_backend.for_array(u)
    from . import cupy as cupy_backend  # imports no CuPy: looks in sys.modules

    if cupy_backend.is_cupy_array(u):
        return cupy_backend.for_array(u)
    from . import array_api

    try:
        compat = array_api._compat()
    except ImportError:  # without the array-api extra: say so only if u is an array at all
        if hasattr(u, "__array_namespace__") or hasattr(u, "__dlpack__"):
            raise
        raise _not_an_array(u, what) from None
    if not compat.is_array_api_obj(u):
        raise _not_an_array(u, what)

    return array_api.for_array(u)


def backend_for_namespace(xp: Any = None, device: Any = None) -> Backend:
    """The backend that builds arrays of namespace ``xp`` on ``device``: NumPy for
    ``xp=None`` or NumPy; CuPy's for CuPy (or array-api-compat's CuPy wrapper), torch's
    for torch; otherwise the array-API backend (``device=None``: the namespace's default
    device).

    Examples
    --------
    >>> backend_for_namespace(None) is NUMPY
    True
    """
    if xp is None or xp is np:
        if device not in (None, "cpu"):
            raise ValueError(f"App.array_device: NumPy arrays live on 'cpu', got {device!r}")
        return NUMPY
    if getattr(xp, "__name__", None) == "array_api_compat.numpy":
        return backend_for_namespace(None, device)
    if getattr(xp, "__name__", None) in ("torch", "array_api_compat.torch"):
        import sys

        from . import torch as torch_backend

        return torch_backend.for_namespace(sys.modules["torch"], device)
    if getattr(xp, "__name__", None) in ("cupy", "array_api_compat.cupy"):
        from . import cupy as cupy_backend

        return cupy_backend.for_namespace(device)
    from . import array_api

    return array_api.for_namespace(xp, device)


def stack(us: Sequence[Any]) -> Any:
    """The states ``us`` stacked along a new leading axis by their backend."""
    return backend_for(us[0], "step_batch").stack(us)
