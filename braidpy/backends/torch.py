"""PyTorch backend: App's default vector operations for ``torch.Tensor`` states.

States stay torch tensors on their own device and dtype. Host memory is touched only
where a message needs it: :meth:`TorchBackend.pack` views a CPU tensor's data through
DLPack (no copy) and copies other devices' tensors to a contiguous CPU buffer once;
:meth:`TorchBackend.unpack` wraps the received bytes without a copy on the CPU (one
copy to another device). Every message carries the fixed ``BRPY`` header of
:mod:`braidpy.backends.wire`, which the receiver validates field by field.

This module never imports torch itself: :func:`for_array` is reached only for an
object that is already a torch tensor, and :func:`for_namespace` receives the module.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import wire

__all__ = ["TorchBackend", "for_array", "for_namespace", "is_tensor"]

# torch dtype name -> wire dtype name (the same names, except bool).
_WIRE_NAMES = {"bool": "bool", "int8": "int8", "int16": "int16", "int32": "int32",
               "int64": "int64", "uint8": "uint8", "float16": "float16",
               "float32": "float32", "float64": "float64", "complex64": "complex64",
               "complex128": "complex128"}


def is_tensor(u: Any) -> bool:
    """True for a torch tensor, without importing torch (it must be loaded already)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(u, torch.Tensor)


def _overlaps(x: Any, y: Any) -> bool:
    """Whether writing y can change x (same tensor, or views of one storage)."""
    if x is y:
        return True
    try:
        return bool(x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr())
    except (AttributeError, RuntimeError):
        return False


class TorchBackend:
    """The :class:`~braidpy.backends.Backend` of torch tensors on one device.

    Parameters
    ----------
    torch : module
        The torch module (passed in so that this module never imports it).
    device : torch.device or str
        Where this backend's tensors live; :meth:`unpack` puts received data there.
    """

    name = "torch"

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = torch.device(device)
        self.device_kind = _kind_of_device(self.device)

    def __repr__(self) -> str:
        return f"TorchBackend(device={str(self.device)!r})"

    def clone(self, u: Any) -> Any:
        """An independent contiguous copy on u's device (no autograd history)."""
        return u.detach().clone(memory_format=self.torch.contiguous_format)

    def sum(self, a: float, x: Any, b: float, y: Any) -> None:  # noqa: A003 - XBraid's name
        """y <- a*x + b*y in place, in the NumPy backend's order of operations; correct
        when x is y or shares its storage."""
        from ._axpby import axpby

        axpby(a, x, b, y, _overlaps, self.clone)

    def norm(self, u: Any) -> float:
        """Euclidean norm, accumulated in u's dtype."""
        return float(self.torch.linalg.vector_norm(u))

    def stack(self, us: Sequence[Any]) -> Any:
        return self.torch.stack(list(us))

    def to_host(self, u: Any) -> np.ndarray:
        """u's data as a C-contiguous NumPy array: a DLPack view of a contiguous CPU
        tensor, one copy otherwise."""
        t = u.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()
        if t.dtype == self.torch.bool:
            return t.numpy()
        return np.from_dlpack(t)

    def pack(self, u: Any) -> bytes:
        """The wire header (device kind of u's device) followed by u's data."""
        if not is_tensor(u):
            raise TypeError(f"bufpack: expected a torch tensor, got {type(u).__name__}")
        if str(u.dtype).replace("torch.", "") not in _WIRE_NAMES:
            raise TypeError(f"bufpack: torch tensors of dtype {u.dtype} cannot be sent between "
                            f"ranks; the wire format carries {', '.join(wire.DTYPES.values())}")
        return wire.encode(self.to_host(u), _kind_of_device(u.device))

    def unpack(self, buf: Any) -> Any:
        """A new tensor on this backend's device; ValueError for anything malformed."""
        msg = wire.decode(buf)
        if msg.device_kind != self.device_kind:
            raise ValueError(
                f"braidpy message: the sender's tensor lived on a "
                f"{wire.DEVICE_KINDS[msg.device_kind]} device (device kind {msg.device_kind}), "
                f"but this rank builds torch tensors on {self.device} (device kind "
                f"{self.device_kind}); put every rank's states on the same kind of device")
        dtype = getattr(self.torch, msg.dtype_name, None)
        if dtype is None or msg.dtype_name.startswith("uint") and msg.dtype_name != "uint8":
            raise ValueError(f"braidpy message: dtype {msg.dtype_name} has no torch counterpart "
                             f"here")
        host = self.torch.from_numpy(wire.to_numpy(msg))  # shares the new array's memory
        return host if self.device.type == "cpu" else host.to(self.device)


def _kind_of_device(device: Any) -> int:
    """DLPack device type of a torch device (1 = CPU, 2 = CUDA, ...)."""
    kinds = {"cpu": wire.CPU, "cuda": 2, "mps": 8, "xpu": 14}
    kind = kinds.get(device.type)
    if kind is None:
        raise TypeError(f"braidpy cannot send torch tensors on {device.type} devices")
    return kind


_CACHE: dict = {}


def for_array(u: Any) -> TorchBackend:
    """The backend of a tensor's device (one object per device)."""
    import sys

    device = u.device
    backend = _CACHE.get(device)
    if backend is None:
        backend = _CACHE[device] = TorchBackend(sys.modules["torch"], device)
    return backend


def for_namespace(torch: Any, device: Optional[Any] = None) -> TorchBackend:
    """The backend that builds tensors on ``device`` (None: the CPU)."""
    dev = torch.device("cpu" if device is None else device)
    backend = _CACHE.get(dev)
    if backend is None:
        backend = _CACHE[dev] = TorchBackend(torch, dev)
    return backend
