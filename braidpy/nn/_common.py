"""Array-namespace helpers and shape checks shared by the braidpy.nn kernels.

Everything here is written against the array API (``x.__array_namespace__()``), with the
few NumPy spellings that predate it (``concatenate``, ``transpose``) as fallbacks, so the
kernels run on NumPy, CuPy and array-api-strict arrays alike.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np


def _namespace(x: Any) -> Any:
    """The array namespace of ``x``: ``x.__array_namespace__()``, array-api-compat's
    wrapper for arrays without one (older CuPy, PyTorch), NumPy otherwise."""
    if x.__class__ is np.ndarray:  # the common case, without a lookup and a call
        return np
    get = getattr(x, "__array_namespace__", None)
    if get is not None:
        return get()
    if hasattr(x, "__dlpack__") and not isinstance(x, (np.ndarray, np.generic)):
        from .._device import namespace

        return namespace(x)
    return np


def _is_numpy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "numpy"


def _shape(x: Any) -> Tuple[int, ...]:
    return tuple(getattr(x, "shape", ()))


def _mT(x: Any, xp: Any) -> Any:
    """Transpose of the last two axes."""
    mt = getattr(x, "mT", None)
    if mt is not None:
        return mt
    return xp.swapaxes(x, -1, -2)


def _expect(fn: str, name: str, x: Any, want: tuple, dims: str, ref: str,
            ref_shape: tuple) -> None:
    """Raise if x's shape is not `want` (dims names the axes in the message)."""
    got = _shape(x)
    if got != want:
        raise ValueError(f"{fn}: {name} has shape {got} but {ref} has shape {ref_shape}; "
                         f"{name} must be ({dims}) = {want}")


def _same(fn: str, name: str, x: Any, ref: str, ref_shape: tuple) -> None:
    if x is not None and _shape(x) != ref_shape:
        raise ValueError(f"{fn}: {name} has shape {_shape(x)} but {ref} has shape {ref_shape}; "
                         f"they must be equal")


def _as_steps(hs: Any, U: Any) -> Any:
    """hs as an array of U's namespace, dtype and device (lists and host arrays are
    copied to U's device)."""
    xp = _namespace(U)
    # (no "getattr(hs, 'dtype', None) != U.dtype": NumPy dtypes compare equal to None)
    if _namespace(hs) is not xp or not hasattr(hs, "dtype") or hs.dtype != U.dtype:
        hs = _on_device_of(U, hs, xp)
    return hs


def _on_device_of(U: Any, a: Any, xp: Any) -> Any:
    """Host numbers ``a`` (a list or NumPy array) as an array of U's dtype on U's device."""
    if xp is np:
        return np.asarray(a, dtype=U.dtype)
    try:
        return xp.asarray(a, dtype=U.dtype, device=U.device)
    except TypeError:  # e.g. CuPy's own namespace: no device keyword, the current device
        return xp.asarray(a, dtype=U.dtype)


def _concat(arrays: list, axis: int, xp: Any) -> Any:
    """xp.concat (array API), or xp.concatenate where the namespace predates it."""
    fn = getattr(xp, "concat", None)
    if fn is None:
        fn = xp.concatenate
    return fn(arrays, axis=axis)


def _permute(x: Any, axes: tuple, xp: Any) -> Any:
    """xp.permute_dims (array API), or xp.transpose where the namespace predates it."""
    fn = getattr(xp, "permute_dims", None)
    if fn is None:
        fn = xp.transpose
    return fn(x, axes)


def _zeros_along(x: Any, axis: int, n: int, xp: Any) -> Any:
    """Zeros shaped like x but with n entries along axis (negative), on x's device."""
    s = _shape(x)
    one = x[(Ellipsis, slice(0, 1)) + (slice(None),) * (-1 - axis)]
    return xp.broadcast_to(xp.zeros_like(one), s[:axis] + (n,) + s[len(s) + axis + 1:])


def _zeros(shape: tuple, like: Any, xp: Any) -> Any:
    """Zeros of the given shape with like's dtype, on like's device."""
    try:
        return xp.zeros(shape, dtype=like.dtype, device=like.device)
    except TypeError:  # e.g. CuPy: no device keyword, the current device is like's
        return xp.zeros(shape, dtype=like.dtype)


def cuda_module_problem(load: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
    """(braidpy._cuda as ``load`` imports it, None), or (None, why it is missing)."""
    try:
        return load(), None
    except ImportError as exc:
        return None, f"braidpy._cuda was not compiled ({exc})"


def no_gpu_reason(cuda: Any) -> Optional[str]:
    """Why braidpy._cuda ``cuda`` sees no usable GPU, or None when it sees one."""
    found = cuda.info()
    return None if found["devices"] >= 1 else f"no usable GPU ({found['error']})"
