"""Collectives on device arrays: directly with a CUDA-aware MPI, else through pinned host memory.

The MPI of the ``mpi`` extra (the PyPI mpich wheel) is not CUDA-aware, so device arrays
are copied into page-locked ("pinned") host buffers, reduced there, and copied back. When
mpi4py reports a CUDA-aware MPI (``MPI.Query_cuda_support()``, mpi4py >= 4), CUDA arrays
go to MPI directly (mpi4py reads them through DLPack / ``__cuda_array_interface__``).
NumPy arrays take :mod:`braidpy.parallel.collectives` unchanged; CuPy is never imported
here unless a CUDA array is passed.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

import numpy as np

from ..backends import wire
from .collectives import allreduce_sum
from .comm import mpi, rank_size

__all__ = ["allreduce_sum_anywhere", "cuda_aware_mpi"]

_CUDA = 2  # DLPack device type of CUDA memory (wire.DEVICE_KINDS)


@functools.lru_cache(maxsize=None)
def cuda_aware_mpi() -> bool:
    """Whether the MPI under mpi4py takes CUDA device buffers (False when it cannot say)."""
    query = getattr(mpi(), "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:  # noqa: BLE001 - an MPI without the MPIX extension
        return False


def _kind(a: Any) -> int:
    get = getattr(a, "__dlpack_device__", None)
    return int(get()[0]) if get is not None else wire.CPU


# Pinned host buffers by (dtype, size), reused across calls (one allreduce per gradient).
_pinned: Dict[Tuple[str, int], np.ndarray] = {}


def _pinned_buffer(dtype: np.dtype, size: int) -> np.ndarray:
    key = (dtype.str, size)
    buf = _pinned.get(key)
    if buf is None:
        import cupy  # a CUDA array was passed: CuPy is there

        mem = cupy.cuda.alloc_pinned_memory(max(size * dtype.itemsize, 1))
        buf = np.frombuffer(mem, dtype=dtype, count=size)
        _pinned[key] = buf
    return buf


def allreduce_sum_anywhere(comm: Any, local: Any) -> Any:
    """Elementwise float64 sum over the ranks of an array on any device, returned on
    that device (``local`` itself when serial)."""
    if isinstance(local, np.ndarray) or rank_size(comm)[1] == 1:
        return allreduce_sum(comm, local)
    from .._device import placement_of

    where = placement_of(local)
    if _kind(local) == _CUDA:
        import cupy

        if cuda_aware_mpi():
            out = cupy.empty_like(local)
            cupy.cuda.get_current_stream().synchronize()  # the data MPI reads is ready
            comm.Allreduce(local, out, op=mpi().SUM)
            return out
        send = _pinned_buffer(np.dtype(np.float64), int(local.size))
        local.get(out=send)  # device -> pinned host, synchronous
        return where.from_host(allreduce_sum(comm, send))
    # Other devices (array-api-strict's in the tests): an explicit host round trip.
    return where.from_host(allreduce_sum(comm, where.to_host(local)))
