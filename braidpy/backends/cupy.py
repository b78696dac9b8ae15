"""Slot for the CUDA/CuPy backend; not implemented yet (issue "GPU I").

What will live here
-------------------
A :class:`~braidpy.backends.Backend` for ``cupy.ndarray`` states built on the optional
compiled module ``braidpy._cuda``:

- device blocks: the core keeps a level's states as one stacked CuPy array on the
  GPU (the CUDA counterpart of the float64 fast paths in
  ``csrc/bindings/array_fast.cpp``), so batched steps and clone/sum/norm run as
  fused kernels without a Python frame per state;
- ``norm`` with the same summation order on every rank count, as the NumPy backend;
- ``pack``/``unpack`` that hand device buffers to CUDA-aware MPI (DLPack or
  ``__cuda_array_interface__``) without staging through host memory, behind the
  same validated header (:mod:`braidpy.backends.wire`, device kind 2 = CUDA);
- a ``show_config()``-like report of what was compiled and which devices were found.

Until then CuPy arrays are served by :mod:`braidpy.backends.array_api` through
array-api-compat's CuPy namespace: correct, with a host copy in ``pack``/``unpack``.
This module does not import CuPy; nothing selects it automatically.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["CupyBackend", "MISSING"]

MISSING = ("braidpy.backends.cupy is an empty slot: the CUDA/CuPy backend needs the "
           "compiled module braidpy._cuda (device blocks, fused clone/sum/norm kernels, "
           "CUDA-aware pack/unpack), which a later issue (\"GPU I\") adds. CuPy arrays work "
           "today through braidpy.backends.array_api (App's defaults pick it).")


class CupyBackend:
    """Placeholder: constructing it raises NotImplementedError naming what is missing."""

    name = "cupy"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _missing()


def _missing() -> NoReturn:
    raise NotImplementedError(MISSING)
