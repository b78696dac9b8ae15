"""A NumPy-backed stand-in for the few parts of CuPy that braidpy.backends.cupy uses, for
host tests (test_backends.py puts it into sys.modules as ``cupy``).

Its arrays wrap a NumPy array but are no ``numpy.ndarray`` and refuse ``__array__`` (as
CuPy's do), so only the explicit copies (``get``, ``set``, ``asarray`` of host data)
move data between "device" and host. ``cuda.alloc_pinned_memory`` hands out
bytearray-backed blocks and records them; ``ndarray.get(out=)`` records where it wrote.
"""

from __future__ import annotations

import types

import numpy as np

float32, float64 = np.float32, np.float64


class Device:
    """A CUDA device number; a context manager that makes it current."""

    _stack = [0]

    def __init__(self, id=None):
        self.id = Device._stack[-1] if id is None else int(id)

    def __enter__(self):
        Device._stack.append(self.id)
        return self

    def __exit__(self, *exc):
        Device._stack.pop()

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


class PinnedMemoryPointer(bytearray):
    """A page-locked block, as far as this stand-in knows."""


pinned_allocations = []  # every block alloc_pinned_memory handed out
gets = []  # (address, nbytes) of the out= array of every ndarray.get(out=...)
sets = []  # (device id made current, host array) of every ndarray.set


def alloc_pinned_memory(nbytes):
    block = PinnedMemoryPointer(nbytes)
    pinned_allocations.append(block)
    return block


class _Stream:
    synchronized = 0

    def synchronize(self):
        _Stream.synchronized += 1


cuda = types.SimpleNamespace(Device=Device, alloc_pinned_memory=alloc_pinned_memory,
                             get_current_stream=_Stream, PinnedMemoryPointer=PinnedMemoryPointer)


class ndarray:  # noqa: N801 - CuPy's name
    """Device array stand-in: a NumPy array plus the device it was made on."""

    def __init__(self, a, device_id=None):
        self._a = a
        self._device_id = Device._stack[-1] if device_id is None else device_id

    # where the data lives and what it is
    @property
    def device(self):
        return Device(self._device_id)

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    ndim = property(lambda self: self._a.ndim)
    flags = property(lambda self: self._a.flags)
    real = property(lambda self: ndarray(self._a.real, self._device_id))

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (fake CuPy)")

    def __float__(self):
        return float(self._a)

    # explicit copies
    def get(self, stream=None, order="C", out=None):
        if out is None:
            return self._a.copy()
        if not isinstance(out, np.ndarray) or out.shape != self.shape or \
                out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError("fake cupy: get(out=) needs a C-contiguous numpy array of the "
                             "same shape and dtype")
        gets.append((out.ctypes.data, out.nbytes))
        out[...] = self._a
        return out

    def set(self, arr, stream=None):
        if not isinstance(arr, np.ndarray) or arr.shape != self.shape:
            raise ValueError("fake cupy: set needs a numpy array of the same shape")
        sets.append((Device._stack[-1], arr))
        self._a[...] = arr

    def copy(self, order="C"):
        return ndarray(self._a.copy(order=order), self._device_id)

    def reshape(self, *shape):
        return ndarray(self._a.reshape(*shape), self._device_id)

    def __getitem__(self, key):
        return ndarray(self._a[key], self._device_id)

    def __setitem__(self, key, value):
        self._a[key] = value._a if isinstance(value, ndarray) else value

    # the in-place arithmetic of App's sum
    def _same_device(self, other):
        if isinstance(other, ndarray):
            if other._device_id != self._device_id:
                raise ValueError("fake cupy: arrays on different devices")
            return other._a
        if isinstance(other, np.ndarray):
            raise TypeError("fake cupy: a NumPy array in a device operation")
        return other

    def __iadd__(self, other):
        self._a += self._same_device(other)
        return self

    def __isub__(self, other):
        self._a -= self._same_device(other)
        return self

    def __imul__(self, other):
        self._a *= self._same_device(other)
        return self

    def __mul__(self, other):
        return ndarray(self._a * self._same_device(other), self._device_id)

    __rmul__ = __mul__

    def __itruediv__(self, other):
        self._a /= self._same_device(other)
        return self

    def __add__(self, other):
        return ndarray(self._a + self._same_device(other), self._device_id)

    __radd__ = __add__

    def __repr__(self):
        return f"fake_cupy.ndarray({self._a!r}, device={self._device_id})"


def empty(shape, dtype=float64):
    return ndarray(np.empty(shape, dtype=dtype))


def asarray(a, dtype=None):
    if isinstance(a, ndarray):
        return a if dtype is None or a.dtype == dtype else ndarray(a._a.astype(dtype))
    return ndarray(np.array(a, dtype=dtype, copy=True))


def stack(arrays):
    return ndarray(np.stack([a._a for a in arrays]), arrays[0]._device_id)


def vdot(a, b):
    return ndarray(np.asarray(np.vdot(a._a, b._a)), a._device_id)


def may_share_memory(a, b):
    return isinstance(b, ndarray) and np.may_share_memory(a._a, b._a)


def array_equal(a, b):
    return np.array_equal(a._a, b._a)


def host(a):
    """The stand-in array's data (test helper; real CuPy: ``a.get()``)."""
    return a._a
