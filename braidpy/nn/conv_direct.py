"""The "cuda-direct" conv backend: braidpy's own direct convolution kernels on CuPy arrays.

A layer-parallel ResNet's conv steps are small (8-16 channels, 3x3 kernels) and MGRIT
batches the k-th step of m intervals, each interval with its own kernel. On an H200,
cuDNN's grouped convolution of that shape ran float64 at a small fraction of the GPU's
rate (docs/benchmarks.md, "On a GPU"); one output element is only C*k*k multiply-adds on
neighbouring inputs. So braidpy._cuda computes a whole step in one pass
(csrc/cuda/conv_direct.hpp): the convolution, bias, activation, step size and residual
update together:

- forward: ``U + h * act(conv(U, K) + b)``, one kernel for all m intervals;
- adjoint: ``G = h * (W * act'(conv(U, K) + b))``, then ``W + conv^T(G, K)``: two kernels;
- parameter gradients: G, then dK and db as fixed-order block reductions: three kernels.

Three kernel families compute these passes, with the same bits (every sum in one
documented order: channel ascending, then dy, dx); which one a shape takes depends on its
shape and dtype only (:func:`kernel_family`): "tiled" (one block per 16x16 tile of a
sample's plane, its C input planes and the whole kernel in shared memory, each thread all
C channels at its position) where C <= 16 and that fits 48 KiB; else "wide" (one block
per tile and group of 16 channels, the input channels streamed through shared memory four
at a time; any C, 7x7 included); else "element" (one thread per output element, every tap
read from global memory; only for grids of 2^31 blocks or more).

The weight gradient dK is a fixed-order reduction: each of its entries sums
``G * U`` over the positions, thread t of 256 the positions t, t + 256, ... in double,
then a tree over the 256 partials. Two kernels compute it with the same bits: "rows" (a
block per row (interval, o, c, dy) of dK) where C < 16, else "grouped" (a block per
interval, dy, 4 output channels and 4, 2 or 1 input channels for k = 1, 3, 5-7: each
thread reads G and U once per position for the whole group, 2.7x to 4x fewer loads). The
choice depends on the shape only (``_core._host_conv.conv_direct_wgrad_family``); the
grouped kernel was written and compiled, but has not yet run on a GPU.

No cuDNN is needed, float64 and float32, odd kernels up to 7x7 (larger ones, and
activations other than braidpy's own tanh, relu and smooth_relu with its default eps,
take the "array-api" kernels).
Every interval's rows are computed by the same element functions whatever m is, so a
batched call equals the single-interval calls bit for bit.

The same element functions run on the host as braidpy._core._host_conv (on NumPy
arrays), which is how tests/test_conv_direct.py checks this module's wiring and the
kernels' arithmetic on a machine without a GPU; tests/test_gpu.py runs the kernels.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from .._core import _host_conv  # type: ignore[attr-defined]  # private submodule, not stubbed
from ._common import _as_steps, _namespace, _shape, cuda_module_problem, no_gpu_reason
from .activations import ActivationLike, get_activation, relu, smooth_relu, tanh
from .conv import check_step, check_steps

__all__ = ["direct_unavailable", "kernel_family", "STEPS", "MAX_KERNEL"]

#: Largest (odd) kernel size of the direct kernels (csrc/cuda/conv_direct.hpp's kConvMaxK).
MAX_KERNEL = 7

#: braidpy._cuda's codes of the activations the direct kernels compute.
_CODES: Dict[Callable[[Any], Any], int] = {tanh: 1, relu: 2, smooth_relu: 3}


def _cuda() -> Any:
    """The module computing the kernels (tests swap in braidpy._core._host_conv)."""
    return importlib.import_module("braidpy._cuda")


def direct_unavailable() -> Optional[str]:
    """Why the "cuda-direct" backend cannot run here, or None when it can: it needs
    braidpy._cuda (compiled with nvcc) and a usable GPU, not cuDNN.

    Examples
    --------
    >>> reason = direct_unavailable()
    >>> reason is None or isinstance(reason, str)
    True
    """
    cuda, why = cuda_module_problem(_cuda)
    return why if cuda is None else no_gpu_reason(cuda)


def kernel_family(U_shape: Tuple[int, ...], K_shape: Tuple[int, ...], dtype: Any) -> str:
    """Which of braidpy._cuda's kernel families computes the direct steps of states of
    shape ``U_shape`` = (m, N, C, H, W) with kernels ``K_shape`` = (m, C, C, k, k) in
    ``dtype`` (float32 or float64): ``"tiled"``, ``"wide"`` or ``"element"``. The
    families give the same bits; the choice depends on these arguments only (the module
    docstring says how). Answered by braidpy._core, the same C++ function as the GPU's
    launchers use, so it needs no GPU.

    Examples
    --------
    >>> kernel_family((4, 32, 8, 28, 28), (4, 8, 8, 3, 3), "float64")
    'tiled'
    >>> kernel_family((4, 32, 64, 28, 28), (4, 64, 64, 5, 5), "float64")
    'wide'
    """
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"kernel_family: dtype must be float32 or float64, got {dt}")
    return str(_host_conv.conv_direct_family(tuple(U_shape), tuple(K_shape), dt.itemsize))


def _code(act: ActivationLike, K: Any) -> Optional[int]:
    """The kernels' activation code, or None where they do not apply (then the
    "array-api" kernels compute the step)."""
    k = _shape(K)[-1]
    if k > MAX_KERNEL:
        return None
    return _CODES.get(get_activation(act).value)


def _im2col() -> Any:
    """The "array-api" kernel set: what computes the steps these kernels do not cover."""
    from .kernels import select_kernels  # (kernels.py imports this module)

    return select_kernels("conv", "array-api")


def _c(x: Any, xp: Any) -> Any:
    return xp.ascontiguousarray(x)


#: Step sizes given as numbers, on their device: (h, dtype, device) -> array of shape (1,).
#: A serial sweep's steps share a handful of sizes; one host-to-device copy each.
_STEP_SIZES: Dict[Tuple[Any, ...], Any] = {}


def _step_size(h: Any, U: Any) -> Any:
    xp = _namespace(U)
    if hasattr(h, "shape"):
        return _as_steps(xp.reshape(h, (1,)), U)
    device = getattr(U, "device", None)
    key = (float(h), str(U.dtype), getattr(device, "id", device))
    try:
        found = _STEP_SIZES.get(key)
    except TypeError:  # a device that cannot be a key
        return _as_steps([h], U)
    if found is None:
        if len(_STEP_SIZES) > 4096:
            _STEP_SIZES.clear()
        found = _STEP_SIZES[key] = _as_steps([h], U)
    return found


def _one(u: Any, K: Any, b: Any, h: Any) -> Tuple[Any, Any, Any, Any]:
    """A single step's operands as a batch of one interval (views, hs on u's device)."""
    xp = _namespace(u)
    U = xp.reshape(u, (1,) + tuple(_shape(u)))
    return (U, xp.reshape(K, (1,) + tuple(_shape(K))), xp.reshape(b, (1, _shape(b)[0])),
            _step_size(h, U))


def _step(U: Any, Ks: Any, bs: Any, hs: Any, code: int) -> Any:
    xp = _namespace(U)
    U, Ks, bs, hs = (_c(x, xp) for x in (U, Ks, bs, hs))
    out = xp.empty(_shape(U), dtype=U.dtype)
    _cuda().conv_direct_step(U, Ks, bs, hs, out, code)
    return out


def _g(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, code: int) -> Tuple[Any, ...]:
    """(W, U, Ks, G) contiguous, G = hs * (W * act'(conv(U, Ks) + bs))."""
    xp = _namespace(U)
    W, U, Ks, bs, hs = (_c(x, xp) for x in (W, U, Ks, bs, hs))
    G = xp.empty(_shape(U), dtype=U.dtype)
    _cuda().conv_direct_g(W, U, Ks, bs, hs, G, code)
    return W, U, Ks, G


def _adjoint_of(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, code: int) -> Any:
    W, U, Ks, G = _g(W, U, Ks, bs, hs, code)
    out = _namespace(U).empty(_shape(U), dtype=U.dtype)
    _cuda().conv_direct_transpose_add(W, G, Ks, out)
    return out


def _gradient_of(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, code: int) -> Tuple[Any, Any]:
    xp = _namespace(U)
    W, U, Ks, G = _g(W, U, Ks, bs, hs, code)
    dK = xp.empty(_shape(Ks), dtype=U.dtype)
    db = xp.empty((_shape(U)[0], _shape(U)[2]), dtype=U.dtype)
    _cuda().conv_direct_param_grads(G, U, dK, db)
    return dK, db


# ---------------------------------------------------------------- the six step kernels


def _forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    check_step("conv_forward", u, K, b)
    code = _code(act, K)
    if code is None:
        return _im2col().forward(u, K, b, h, act)
    return _namespace(u).reshape(_step(*_one(u, K, b, h), code), _shape(u))


def _adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    check_step("conv_adjoint", u, K, b, w)
    code = _code(act, K)
    if code is None:
        return _im2col().adjoint(w, u, K, b, h, act)
    xp = _namespace(u)
    U, Ks, bs, hs = _one(u, K, b, h)
    return xp.reshape(_adjoint_of(xp.reshape(w, _shape(U)), U, Ks, bs, hs, code), _shape(u))


def _gradient(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Tuple[Any, Any]:
    check_step("conv_gradient", u, K, b, w)
    code = _code(act, K)
    if code is None:
        return _im2col().gradient(w, u, K, b, h, act)
    xp = _namespace(u)
    U, Ks, bs, hs = _one(u, K, b, h)
    dK, db = _gradient_of(xp.reshape(w, _shape(U)), U, Ks, bs, hs, code)
    return xp.reshape(dK, _shape(K)), xp.reshape(db, _shape(b))


def _forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_forward_batched", U, Ks, bs, _as_steps(hs, U))
    code = _code(act, Ks)
    if code is None:
        return _im2col().forward_batched(U, Ks, bs, hs, act)
    return _step(U, Ks, bs, hs, code)


def _adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    hs = check_steps("conv_adjoint_batched", U, Ks, bs, _as_steps(hs, U), W)
    code = _code(act, Ks)
    if code is None:
        return _im2col().adjoint_batched(W, U, Ks, bs, hs, act)
    return _adjoint_of(W, U, Ks, bs, hs, code)


def _gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                      act: ActivationLike) -> Tuple[Any, Any]:
    hs = check_steps("conv_gradient_batched", U, Ks, bs, _as_steps(hs, U), W)
    code = _code(act, Ks)
    if code is None:
        return _im2col().gradient_batched(W, U, Ks, bs, hs, act)
    return _gradient_of(W, U, Ks, bs, hs, code)


#: The "cuda-direct" kernel set's functions, for braidpy.nn.kernels.
STEPS = (_forward, _adjoint, _gradient, _forward_batched, _adjoint_batched, _gradient_batched)
