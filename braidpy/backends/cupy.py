"""CuPy backend: App's default vector operations and rank messages for ``cupy.ndarray`` states.

What the compiled core does itself
----------------------------------
For CuPy float64/float32 states and App's default clone/sum/norm, ``braidpy._core``
runs the kernels of the optional module ``braidpy._cuda`` (csrc/bindings/device_path.cpp):
a sweep's states are rows of one device block, sums and copies are kernels on the
array's stream, the residual norms of one evaluation are one kernel and one small copy
back. It reaches the arrays through ``__cuda_array_interface__`` and allocates blocks
with :func:`new_array`; CuPy itself is imported only for a CuPy array's block.

What this backend does
----------------------
:class:`CupyBackend` serves everything else for CuPy arrays
(:func:`braidpy.backends.backend_for` picks it for a ``cupy.ndarray``;
``App.array_namespace = cupy`` makes the receiving rank use it): clone/sum/norm when
``braidpy._cuda`` is absent, stack, and the rank messages.

- :meth:`CupyBackend.pack` writes the :mod:`~braidpy.backends.wire` header (device kind
  2 = CUDA) and copies the state from the device straight into a **pinned** (page-locked)
  host block, one DMA copy on the current stream, synchronised before it returns. The
  message is a NumPy ``uint8`` view of that block. Blocks come from a free list keyed by
  size (:class:`PinnedBlocks`); a block goes back to the list only when its message is
  garbage-collected, and ``TimeComm.post`` holds each message until its ``Isend``
  completes, so a block an MPI send may still read is never written again.
- :meth:`CupyBackend.unpack` validates the header exactly as the array-API backend does
  (:func:`braidpy.backends.wire.decode_for`: a CPU sender's message is refused) and
  copies the payload into a new array on this backend's device, on its current stream.

CUDA-aware MPI
--------------
The messages of the compiled core travel as bytes through
:class:`braidpy.parallel.timecomm.TimeComm`, so they take the pinned host path even where
``braidpy.parallel.staging.cuda_aware_mpi()`` is True. With a CUDA-aware MPI the header
could go as a small host message and the payload as the device array itself (mpi4py
reads ``__cuda_array_interface__``), after a ``synchronize`` of the current stream;
that needs a two-part message in TimeComm and a device receive buffer, and is left
until it can be tested on a GPU. Gradient allreduces already go to a CUDA-aware MPI
directly (:mod:`braidpy.parallel.staging`).

Nothing here imports CuPy at import time: it is imported by the first CuPy state's
backend (where CuPy is loaded already) or by ``backend_for_namespace(cupy)``.
"""

from __future__ import annotations

import importlib
import math
import sys
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import wire
from ._axpby import axpby

__all__ = ["CupyBackend", "PinnedBlocks", "for_array", "for_namespace", "is_cupy_array",
           "new_array"]


def _cupy() -> Any:
    """The CuPy module (imported now if need be)."""
    return sys.modules.get("cupy") or importlib.import_module("cupy")


def is_cupy_array(u: Any) -> bool:
    """True for a ``cupy.ndarray``, without importing CuPy (it must be loaded already)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(u, cupy.ndarray)


class PinnedBlocks:
    """Pinned host blocks for messages, on a free list keyed by size in bytes.

    :meth:`message` hands out a block as a NumPy ``uint8`` array of exactly ``nbytes``;
    the block returns to the free list when that array (and every view of it, such as
    the memoryview an ``Isend`` holds) has been garbage-collected, never earlier. At
    most ``keep`` free blocks of one size are kept; further ones go back to CuPy.

    Parameters
    ----------
    alloc
        ``nbytes -> buffer`` of page-locked memory (``cupy.cuda.alloc_pinned_memory``).
    keep
        Free blocks kept per size.

    Examples
    --------
    >>> import gc
    >>> blocks = PinnedBlocks(bytearray)  # any allocator of writable buffers
    >>> a, b = blocks.message(16), blocks.message(16)  # two live messages: two blocks
    >>> blocks.allocated, np.shares_memory(a, b)
    (2, False)
    >>> del a; _ = gc.collect()
    >>> c = blocks.message(16)  # reuses the block a held
    >>> blocks.allocated, blocks.free_blocks()
    (2, 0)
    """

    def __init__(self, alloc: Any, keep: int = 64):
        self._alloc = alloc
        self._keep = keep
        self._free: Dict[int, List[Any]] = {}
        self.allocated = 0  # blocks taken from the allocator so far (tests, diagnostics)

    def message(self, nbytes: int) -> np.ndarray:
        """A ``uint8`` array of ``nbytes`` over a pinned block no live message uses."""
        free = self._free.get(nbytes)
        if free:
            block = free.pop()
        else:
            block = self._alloc(max(nbytes, 1))
            self.allocated += 1
        out = np.frombuffer(block, dtype=np.uint8, count=nbytes)
        weakref.finalize(out, self._release, nbytes, block)
        return out

    def _release(self, nbytes: int, block: Any) -> None:
        free = self._free.setdefault(nbytes, [])
        if len(free) < self._keep:
            free.append(block)

    def free_blocks(self) -> int:
        """How many blocks wait on the free list."""
        return sum(len(v) for v in self._free.values())


def _overlaps(x: Any, y: Any) -> bool:
    if x is y:
        return True
    cupy = _cupy()
    return bool(isinstance(x, cupy.ndarray) and cupy.may_share_memory(x, y))


class CupyBackend:
    """The :class:`~braidpy.backends.Backend` of CuPy arrays on one CUDA device.

    Parameters
    ----------
    device : cupy.cuda.Device
        Where :meth:`unpack` puts received arrays (one backend object per device:
        :func:`for_array`, :func:`for_namespace`).
    blocks : PinnedBlocks, optional
        The pinned blocks :meth:`pack` writes messages into (None: a free list over
        ``cupy.cuda.alloc_pinned_memory``, made at the first pack).
    """

    name = "cupy"
    device_kind = wire.CUDA

    def __init__(self, device: Any, blocks: Optional[PinnedBlocks] = None):
        self.device = device
        self._blocks = blocks

    @property
    def blocks(self) -> PinnedBlocks:
        """The free list of pinned blocks behind this backend's messages."""
        if self._blocks is None:
            self._blocks = PinnedBlocks(_cupy().cuda.alloc_pinned_memory)
        return self._blocks

    def __repr__(self) -> str:
        return f"CupyBackend(device={self.device!r})"

    def clone(self, u: Any) -> Any:
        """An independent C-order copy on u's device."""
        return u.copy()

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:  # noqa: A003 - XBraid's name
        """y <- a*x + b*y in place, the NumPy backend's order of operations; correct when
        x is y or overlaps it."""
        axpby(a, x, b, y, _overlaps, self.clone)

    def norm(self, u: Any) -> float:
        """Euclidean norm (one reduction on the device, one scalar back)."""
        cupy = _cupy()
        flat = u.reshape(-1)
        return math.sqrt(float(cupy.vdot(flat, flat).real))

    def stack(self, us: Sequence[Any]) -> Any:
        return _cupy().stack(list(us))

    def pack(self, u: Any) -> np.ndarray:
        """The wire header (device kind CUDA) and u's data, in a pinned host block."""
        if not is_cupy_array(u):
            raise TypeError(f"bufpack: expected a cupy.ndarray, got {type(u).__name__}")
        head = wire.header(u.dtype, tuple(u.shape), wire.CUDA)
        dtype = wire.wire_dtype(u.dtype)
        if np.dtype(u.dtype) != dtype:  # a big-endian host: byte-swap on the host
            return np.frombuffer(wire.encode(u.get(), wire.CUDA), dtype=np.uint8)
        out = self.blocks.message(len(head) + u.size * dtype.itemsize)
        out[:len(head)] = np.frombuffer(head, dtype=np.uint8)
        if u.size:
            data = out[len(head):].view(dtype).reshape(u.shape)
            src = u if u.flags.c_contiguous else u.copy(order="C")
            src.get(out=data)  # device -> pinned host on the current stream, synchronised
        return out

    def unpack(self, buf: Any) -> Any:
        """A new CuPy array on this backend's device (its current stream); ValueError
        for anything malformed or for a sender whose array was not on a CUDA device."""
        msg = wire.decode_for(buf, wire.CUDA, f"cupy on {self.device!r}")
        host = np.frombuffer(msg.payload, dtype=wire.wire_dtype(msg.dtype_name))
        host = host.reshape(msg.shape).astype(host.dtype.newbyteorder("="), copy=False)
        cupy = _cupy()
        with self.device:
            out = cupy.empty(msg.shape, dtype=host.dtype)
            out.set(host)
        return out


# One backend per device, keyed by the device's type as well as its number: a device of
# another CuPy (a test's stand-in) never gets a backend built around the first one's.
_CACHE: Dict[Tuple[type, int], CupyBackend] = {}


def _backend(device: Any) -> CupyBackend:
    key = (type(device), int(device.id))
    backend = _CACHE.get(key)
    if backend is None:
        backend = _CACHE[key] = CupyBackend(device)
    return backend


def for_array(u: Any) -> CupyBackend:
    """The backend of a CuPy array's device (one object per device)."""
    return _backend(u.device)


def for_namespace(device: Any = None) -> CupyBackend:
    """The backend that builds CuPy arrays on ``device``: a ``cupy.cuda.Device``, a
    device number, or None for the current device."""
    cuda = _cupy().cuda
    if device is None:
        dev = cuda.Device()
    elif isinstance(device, cuda.Device):
        dev = device
    elif isinstance(device, int) or (isinstance(device, str)
                                     and device.removeprefix("cuda:").isdigit()):
        dev = cuda.Device(int(str(device).removeprefix("cuda:")))
    else:
        raise TypeError(f"App.array_device for CuPy must be a cupy.cuda.Device, a device "
                        f"number or None; got {device!r}")
    return _backend(dev)


def can_allocate_like(like: Any) -> bool:
    """Whether :func:`new_array` can allocate like ``like``: a CuPy array (its type's
    module is CuPy's), or any array with ``__array_namespace__``. The compiled core asks
    once per type before it takes a device path (PyTorch's CUDA tensors: no)."""
    return _is_cupy_type(type(like)) or hasattr(like, "__array_namespace__")


def _is_cupy_type(cls: type) -> bool:
    return str(getattr(cls, "__module__", "")).partition(".")[0] == "cupy"


def new_array(like: Any, shape: Tuple[int, ...]) -> Any:
    """An uninitialised array of ``like``'s kind and dtype on its device, of ``shape``:
    ``cupy.empty`` for CuPy arrays (its memory pool, current device), else the array's
    ``__array_namespace__().empty``. The compiled core's device blocks come from here.
    """
    if _is_cupy_type(type(like)):
        xp: Any = importlib.import_module("cupy")
    elif hasattr(like, "__array_namespace__"):
        xp = like.__array_namespace__()
    else:
        raise TypeError(f"braidpy cannot allocate an array like {type(like).__qualname__}: it "
                        f"is not a CuPy array and has no __array_namespace__")
    return xp.empty(tuple(shape), dtype=like.dtype)
