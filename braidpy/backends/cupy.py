"""CUDA arrays: what the compiled core's device paths need from Python, and the slot
for a full CuPy backend (issue "GPU I").

What exists
-----------
For CuPy float64/float32 states and App's default clone/sum/norm, ``braidpy._core``
runs the kernels of the optional module ``braidpy._cuda`` (csrc/bindings/device_path.cpp):
a sweep's states are rows of one device block, sums and copies are kernels on the
array's stream, the residual norms of one evaluation are one kernel and one small copy
back. It reaches the arrays through ``__cuda_array_interface__`` and allocates blocks
with :func:`new_array`; CuPy itself is imported only for a CuPy array's block.

What will live here
-------------------
A :class:`~braidpy.backends.Backend` for ``cupy.ndarray`` states:

- ``pack``/``unpack`` that hand device buffers to CUDA-aware MPI (DLPack or
  ``__cuda_array_interface__``) without staging through host memory, behind the
  same validated header (:mod:`braidpy.backends.wire`, device kind 2 = CUDA).

Until then CuPy arrays' other operations (stack, pack, unpack, and clone/sum/norm when
``braidpy._cuda`` is absent) are served by :mod:`braidpy.backends.array_api` through
array-api-compat's CuPy namespace: correct, with a host copy in ``pack``/``unpack``.
Nothing selects :class:`CupyBackend` automatically.
"""

from __future__ import annotations

import importlib
from typing import Any, NoReturn, Tuple

__all__ = ["CupyBackend", "MISSING", "new_array"]

MISSING = ("braidpy.backends.cupy's CupyBackend is an empty slot: CUDA-aware pack/unpack "
           "on top of the compiled module braidpy._cuda (whose device blocks and "
           "clone/sum/norm kernels the core uses already) is left for a later part of issue "
           "\"GPU I\". CuPy arrays work today through braidpy.backends.array_api (App's "
           "defaults pick it).")


class CupyBackend:
    """Placeholder: constructing it raises NotImplementedError naming what is missing."""

    name = "cupy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _missing()


def _missing() -> NoReturn:
    raise NotImplementedError(MISSING)


def new_array(like: Any, shape: Tuple[int, ...]) -> Any:
    """An uninitialised array of ``like``'s kind and dtype on its device, of ``shape``:
    ``cupy.empty`` for CuPy arrays (its memory pool, current device), else the array's
    ``__array_namespace__().empty``. The compiled core's device blocks come from here.
    """
    top = type(like).__module__.partition(".")[0]
    if top == "cupy":
        xp: Any = importlib.import_module("cupy")
    elif hasattr(like, "__array_namespace__"):
        xp = like.__array_namespace__()
    else:
        raise TypeError(f"braidpy cannot allocate an array like {type(like).__qualname__}: it "
                        f"is not a CuPy array and has no __array_namespace__")
    return xp.empty(tuple(shape), dtype=like.dtype)
