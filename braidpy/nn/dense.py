"""Dense ResNet layer as a forward Euler step: forward, state adjoint and parameter gradient.

One step of layer time from t0 to t0 + h maps the state u (batch, width) to

    z = u @ K.T + b,        u_new = u + h * act(z),

so K (width, width) acts on each row vector of u and b (width,) is broadcast over the
batch. For an adjoint w (batch, width) and g = h * w * act'(z), the vector-Jacobian
products are

    (dPhi/du)^T w = w + g @ K,        (dPhi/dK)^T w = g.T @ u,        (dPhi/db)^T w = sum_batch g,

which is what braidpy's adjoint contract (``step_adjoint``/``step_gradient``) asks for;
see Günther et al., "Layer-parallel training of deep residual neural networks", SIAM J.
Math. Data Sci. 2 (2020), eqs. (2.11)-(2.18). The ``*_batched`` variants apply m
independent steps at once along a leading "interval" axis with batched matmuls; the forward
step and the state adjoint can write their result over their input (``out=U``, ``out=W``).
NumPy arrays of layers up to :data:`ROWS_MAX_WIDTH` wide with relu or smooth_relu take
compiled one-pass kernels (product included, single and stacked alike); wider ones
BLAS's product and a compiled pass after it (stacked: in cache-sized chunks of
intervals, :mod:`braidpy.nn._dense_chunks`).

All functions are pure and written against the array namespace of their inputs
(``u.__array_namespace__()``, NumPy otherwise), so NumPy and CuPy arrays both work. The
public functions are the "numpy" kernels of :mod:`braidpy.nn.kernels`: NumPy arrays take a
fast path (shape checks remembered per shape signature, arithmetic on the kernel's own
temporaries), CuPy arrays the fused GPU kernels where braidpy._cuda can run them (cuBLAS's
product, then one kernel for the rest of the step; :func:`gpu_choice` says which code runs,
``BRAIDPY_DENSE_BACKEND=array-api`` forces the array-API arithmetic), any other array the
"array-api" kernels (``_api_*``), which are plain array-API arithmetic.
:class:`braidpy.nn.DenseLayer` holds one of these sets (:func:`fused_kernels`: the GPU one).
"""

from __future__ import annotations

import importlib
import numbers
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from .._core import _host_dense  # type: ignore[attr-defined]  # private submodule, not stubbed
from . import _dense_chunks
from ._common import (_as_steps, _expect, _mT, _namespace, _same, _shape, cuda_module_problem,
                      no_gpu_reason)
from .activations import _BUILTIN, Activation, ActivationLike, get_activation
from .conv_backends import is_cupy

_HAS_MT = hasattr(np.ndarray, "mT")  # NumPy >= 2
_BUILTIN_IDS = frozenset(id(a) for a in _BUILTIN)  # activations returning new arrays
_TANH = get_activation("tanh")  # computed in place on the kernel's own temporaries
# The activations the compiled elementwise pass takes (csrc/bindings/host_dense.cpp),
# by the codes of csrc/cuda/kernels.hpp. Not tanh: NumPy's vectorized tanh in place
# beat the pass's scalar std::tanh 2.5x at 5000 x 8.
_FUSED_CODES = {id(get_activation("relu")): 2, id(get_activation("smooth_relu")): 3}

__all__ = ["dense_forward", "dense_adjoint", "dense_gradient", "dense_adjoint_and_gradient",
           "dense_forward_batched", "dense_adjoint_batched", "dense_gradient_batched",
           "dense_sweeps_take", "dense_sweep_forward", "dense_sweep_backward", "ENV",
           "fused_unavailable", "gpu_choice", "fused_kernels"]


def _check_single(fn: str, u: Any, K: Any, b: Any, w: Any = None) -> None:
    su = _shape(u)
    if len(su) != 2:
        raise ValueError(f"{fn}: u must be 2-D (batch, width), got shape {su}")
    width = su[1]
    _expect(fn, "K", K, (width, width), "width, width", "u", su)
    _expect(fn, "b", b, (width,), "width,", "u", su)
    _same(fn, "w", w, "u", su)


def _check_batched(fn: str, U: Any, Ks: Any, bs: Any, hs: Any, W: Any = None) -> None:
    sU = _shape(U)
    if len(sU) != 3:
        raise ValueError(f"{fn}: U must be 3-D (m, batch, width), got shape {sU}")
    m, width = sU[0], sU[2]
    _expect(fn, "Ks", Ks, (m, width, width), "m, width, width", "U", sU)
    _expect(fn, "bs", bs, (m, width), "m, width", "U", sU)
    _expect(fn, "hs", hs, (m,), "m,", "U", sU)
    _same(fn, "W", W, "U", sU)


# ------------------------------------------------------------------ fast path
# The kernels are called once per layer step (or per step position of a batched
# relaxation), often on tiny arrays, so their argument checks must cost little next
# to the maths. For NumPy arrays the checks depend only on the shapes, so each shape
# signature that passed them is remembered and later calls with it skip them. Bad
# input never enters the cache: it always takes the full checks and raises the same
# ValueErrors. When all arrays have one float dtype the arithmetic reuses the
# kernel's own temporaries: the same elementwise operations on the same operands
# (a * b == b * a and a + b == b + a bit for bit), without a new array for each.
_ND = np.ndarray
_F64, _F32 = np.dtype(np.float64), np.dtype(np.float32)
_SIG_MAX = 1024
_seen_single: Dict[tuple, bool] = {}
_seen_batched: Dict[tuple, bool] = {}


def _one_float(dt: Any, *others: Any) -> bool:
    """All of others have dtype dt, which is float64 or float32 (by equality, not
    identity: an unpickled array, e.g. a state received from another rank, has its own
    descriptor object, and must take the same kernels as a local one, or the bits would
    depend on the rank count)."""
    if dt != _F64 and dt != _F32:
        return False
    for x in others:
        if x is not None and x.dtype != dt:
            return False
    return True


def _check_single_np(fn: str, u: Any, K: Any, b: Any, w: Any = None) -> None:
    """_check_single for NumPy arrays, remembering the shapes that passed."""
    key = (u.shape, K.shape, b.shape, None if w is None else w.shape)
    if key not in _seen_single:
        _check_single(fn, u, K, b, w)
        if len(_seen_single) >= _SIG_MAX:
            _seen_single.clear()
        _seen_single[key] = True


def _check_batched_np(fn: str, U: Any, Ks: Any, bs: Any, hs: Any, W: Any = None) -> None:
    """_check_batched for NumPy arrays, remembering the shapes that passed."""
    key = (U.shape, Ks.shape, bs.shape, hs.shape, None if W is None else W.shape)
    if key not in _seen_batched:
        _check_batched(fn, U, Ks, bs, hs, W)
        if len(_seen_batched) >= _SIG_MAX:
            _seen_batched.clear()
        _seen_batched[key] = True


def _np_steps(hs: Any, U: Any) -> Any:
    """_as_steps for a NumPy U."""
    if hs.__class__ is not _ND or hs.dtype != U.dtype:
        hs = np.asarray(hs, dtype=U.dtype)
    return hs


def _fused_code(a: Activation, x: Any) -> int:
    """The compiled pass's code for activation a when it can read the states x in place
    (C-contiguous; one float dtype, checked by the caller). Else 0: the NumPy path."""
    code = _FUSED_CODES.get(id(a), 0)
    return code if code and x.flags.c_contiguous else 0


def _small(x: Any) -> Any:
    """A bias or step-size array as the compiled pass reads it (C-contiguous): coarse
    levels see every cf-th layer's bias, a strided view; copying it costs m * width."""
    return x if x.__class__ is not _ND or x.flags.c_contiguous else np.ascontiguousarray(x)


def _transposed(K: Any) -> Any:
    """K^T (of each of a stack of K), copied to a C-contiguous array (m * width**2
    numbers): NumPy's stacked matmul on the transposed view skips BLAS and took 7x as
    long at (16, 5000, 8); rows come out bit for bit the same in stacked and single
    calls either way."""
    return np.ascontiguousarray(K.mT if _HAS_MT else np.swapaxes(K, -1, -2))


def _np_product(u: Any, K: Any) -> Any:
    """z = u @ K^T (also batched over a leading axis), a new C-contiguous array."""
    return np.matmul(u, _transposed(K))


def _chunked(X: Any, out: Any, *others: Any) -> bool:
    """Whether a stacked call over X (C-contiguous, fused activation: checked by the
    caller) goes through _dense_chunks: more rows than one chunk, and out absent, X
    itself, or a C-contiguous array sharing no memory with X or the others (its
    chunks receive products before X's rows are read)."""
    if X.shape[0] <= _dense_chunks.chunk_rows(X):
        return False
    if out is None or out is X:
        return True
    return out.flags.c_contiguous and not any(np.may_share_memory(out, y)
                                              for y in (X,) + others)


def _add_bias(z: Any, b: Any, h: Any) -> Any:
    """z += b in place (b (m, width) over a stacked z's rows); returns h shaped to
    broadcast over z: the NumPy path of _np_scaled_slope and _np_step."""
    if z.ndim == 3:
        z += b[:, None, :]
        return h[:, None, None]
    z += b
    return h


def _np_scaled_slope(w: Any, u: Any, K: Any, b: Any, h: Any, a: Activation) -> Any:
    """_scaled_slope for NumPy arrays of one float dtype, on its own temporaries
    (h: a scalar, or the step sizes shaped (m,) for a 3-D u). The builtin activations
    take the compiled pass: act', *w, *h on each element in one sweep."""
    z = _np_product(u, K)
    code = _fused_code(a, w)
    if code:
        _host_dense.dense_slope(z, w, _small(b), _small(h), code)
        return z
    h = _add_bias(z, b, h)
    if a is _TANH:  # tanh_derivative's operations, in place: 1 - t * t
        d = np.tanh(z, out=z)
        np.multiply(d, d, out=d)
        np.subtract(1, d, out=d)
    else:
        d = a.derivative(z)
    if id(a) not in _BUILTIN_IDS:
        return h * (w * d)
    d *= w
    d *= h
    return d


def _np_step(u: Any, K: Any, b: Any, h: Any, a: Activation, out: Any = None) -> Any:
    """The forward step u + h * act(u @ K^T + b) for NumPy arrays of one float dtype
    (h as in _np_scaled_slope), on its own temporaries; written into ``out`` when given
    (u itself included: the compiled pass then updates u where it lies, no copy)."""
    z = _np_product(u, K)
    code = _fused_code(a, u)
    if code:
        if out is u:
            _host_dense.dense_step_update(z, u, _small(b), _small(h), code)
            return u
        _host_dense.dense_step_finish(z, u, _small(b), _small(h), code)
        return _into(out, z)
    h = _add_bias(z, b, h)
    v = np.tanh(z, out=z) if a is _TANH else a.value(z)
    if id(a) in _BUILTIN_IDS:
        v *= h
        if out is u:  # u + v, the same bits as v + u
            u += v
            return u
        v += u
        return _into(out, v)
    return _into(out, u + h * v)


# Layers of width up to ROWS_MAX_WIDTH with relu or smooth_relu take the compiled
# one-pass kernels (braidpy._core._host_dense.dense_rows_*, csrc/bindings/dense_rows.hpp):
# the product u K^T in a fixed order (k ascending, one rounding per operation), bias,
# activation and update per sample row, the adjoint's second product and the gradient's
# sums (rows ascending) in the same pass. BLAS's product of (5000, 8) by (8, 8) cost more
# than the rest of the step, and writing it out a second pass. Single and stacked calls,
# so serial backprop and MGRIT, run the same kernels: the same bits at every rank count.
# Wider layers keep BLAS's product (and _dense_chunks for stacked calls).

#: The widest dense layer the one-pass kernels take (csrc/bindings/dense_rows.hpp).
ROWS_MAX_WIDTH = 32


def _rows_code(a: Activation, x: Any) -> int:
    """The one-pass kernels' activation code for a NumPy state x (one float dtype,
    checked by the caller), or 0: x's layer is wider than ROWS_MAX_WIDTH, or the
    activation is not relu or smooth_relu."""
    code = _FUSED_CODES.get(id(a), 0)
    return code if code and x.shape[-1] <= ROWS_MAX_WIDTH else 0


def _c(x: Any) -> Any:
    """x C-contiguous, copied when it is not (the kernels read rows in place)."""
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _whole_states(x: Any) -> bool:
    """Whether the one-pass kernels read the states x in place: C-contiguous, or a 3-D
    stack of C-contiguous states at any distance apart (a strided view such as every
    cf-th state of a stored trajectory, which the adjoint's batched steps get)."""
    if x.flags.c_contiguous:
        return True
    if x.ndim != 3:
        return False
    item, (_, rows, width), (s0, s1, s2) = x.itemsize, x.shape, x.strides
    return ((width <= 1 or s2 == item) and (rows <= 1 or s1 == width * item)
            and s0 % item == 0)


def _s(x: Any) -> Any:
    """States x as the one-pass kernels take them, copied only when they must be."""
    return x if _whole_states(x) else np.ascontiguousarray(x)


def _rows_target(out: Any, own: Any, *others: Any) -> Any:
    """Where a one-pass kernel writes the result that replaces ``own`` (U forward, W
    backward): own itself (out is own, whole states: each row is read before it is
    written), out when it is C-contiguous and shares no memory with the inputs, else a
    new array (copied into out afterwards)."""
    if out is own and _whole_states(own):
        return own
    if (out is not None and out is not own and out.flags.c_contiguous
            and not any(np.may_share_memory(out, y) for y in (own,) + others)):
        return out
    return np.empty(own.shape, own.dtype)


def _rows_step(u: Any, K: Any, b: Any, h: Any, code: int, out: Any = None) -> Any:
    """u + h * act(u @ K^T + b) by the one-pass kernel, single or stacked, into out
    (u itself included) when given."""
    target = _rows_target(out, u, K, b)
    _host_dense.dense_rows_step(_s(u), _c(K), _c(b), _small(h), code, target)
    return target if out is None or target is out else _into(out, target)


def _rows_adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, code: int,
                  out: Any = None) -> Any:
    """w + (h w act'(u @ K^T + b)) @ K by the one-pass kernel, into out (w itself
    included) when given."""
    target = _rows_target(out, w, u, K, b)
    _host_dense.dense_rows_adjoint(_s(w), _s(u), _c(K), _c(b), _small(h), code, target)
    return target if out is None or target is out else _into(out, target)


def _rows_gradient(w: Any, u: Any, K: Any, b: Any, h: Any, code: int) -> Tuple[Any, Any]:
    """(g^T @ u, g summed over the rows), g = h w act'(u @ K^T + b): the one-pass kernel."""
    return _host_dense.dense_rows_gradient(_s(w), _s(u), _c(K), _c(b), _small(h), code)


def _rows_adjoint_and_gradient(w: Any, u: Any, K: Any, b: Any, h: Any,
                               code: int) -> Tuple[Any, Any, Any]:
    """(_rows_adjoint, *_rows_gradient) in one pass: g formed once per row."""
    r = np.empty(w.shape, w.dtype)
    dK, db = _host_dense.dense_rows_adjoint_gradient(_s(w), _s(u), _c(K), _c(b), _small(h),
                                                     code, r)
    return r, dK, db


def _plain_step(u: Any, h: Any) -> bool:
    """Whether a single step's h is a plain number for the fast path: for float64 any
    real Python or NumPy float (a float subclass) or int; for float32 a Python float or
    int only (a NumPy float64 would promote NumPy's result to float64)."""
    if u.dtype == _F64:
        return isinstance(h, (float, int))
    return h.__class__ is float or h.__class__ is int


def _into(out: Any, r: Any) -> Any:
    """r, or r copied into out (when given) and out."""
    if out is None:
        return r
    out[...] = r
    return out


def _np_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, a: Activation,
                        out: Any) -> Any:
    """W + (h W act'(z)) @ Ks for NumPy arrays of one float dtype, into out when given
    (W itself included: W += the product, the same bits as product + W, no copy)."""
    r = np.matmul(_np_scaled_slope(W, U, Ks, bs, hs, a), Ks)
    if out is W:
        W += r
        return W
    r += W
    return _into(out, r)


def _check_out(fn: str, out: Any, ref: str, x: Any) -> None:
    """out (when given) must be a writable NumPy array of x's shape and dtype."""
    if out is None:
        return
    if out.__class__ is not _ND or out.shape != x.shape or out.dtype != x.dtype:
        raise ValueError(f"{fn}: out must be a NumPy array of {ref}'s shape {x.shape} and "
                         f"dtype {x.dtype}, got {type(out).__name__} of shape "
                         f"{_shape(out)} and dtype {getattr(out, 'dtype', None)}")
    if not out.flags.writeable:
        raise ValueError(f"{fn}: out is read-only")


def _pre(u: Any, K: Any, b: Any, xp: Any) -> Any:
    """z = u @ K^T + b (also batched over a leading axis, with b[:, None, :])."""
    z = xp.matmul(u, _mT(K, xp))
    if u.ndim == 3:
        return z + b[:, None, :]
    return z + b


def _scaled_slope(w: Any, u: Any, K: Any, b: Any, h: Any, act: Activation, xp: Any) -> Any:
    """g = h * w * act'(z), the adjoint pulled back through the activation."""
    return h * (w * act.derivative(_pre(u, K, b, xp)))


def _steps(hs: Any, xp: Any) -> Any:
    """hs shaped (m, 1, 1) for broadcasting over (m, batch, width)."""
    return xp.reshape(hs, (hs.shape[0], 1, 1))


# ------------------------------------------------------------------ array-API kernels
# The kernels of the "array-api" backend (braidpy.nn.kernels): plain array-API arithmetic
# in the namespace of the arguments, NumPy included. The public functions below (the
# "numpy" backend) hand every non-NumPy array to them.


def _api_forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`dense_forward` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_forward", u, K, b)
    xp = _namespace(u)
    return u + h * a.value(_pre(u, K, b, xp))


def _api_adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`dense_adjoint` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_adjoint", u, K, b, w)
    xp = _namespace(u)
    return w + xp.matmul(_scaled_slope(w, u, K, b, h, a, xp), K)


def _api_gradient(w: Any, u: Any, K: Any, b: Any, h: Any,
                  act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`dense_gradient` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_gradient", u, K, b, w)
    xp = _namespace(u)
    g = _scaled_slope(w, u, K, b, h, a, xp)
    return xp.matmul(_mT(g, xp), u), xp.sum(g, axis=0)


def _api_forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike) -> Any:
    """:func:`dense_forward_batched` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_forward_batched", U, Ks, bs, hs)
    xp = _namespace(U)
    return U + _steps(hs, xp) * a.value(_pre(U, Ks, bs, xp))


def _api_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                         act: ActivationLike) -> Any:
    """:func:`dense_adjoint_batched` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_adjoint_batched", U, Ks, bs, hs, W)
    xp = _namespace(U)
    return W + xp.matmul(_scaled_slope(W, U, Ks, bs, _steps(hs, xp), a, xp), Ks)


def _api_gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                          act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`dense_gradient_batched` in array-API arithmetic."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_gradient_batched", U, Ks, bs, hs, W)
    xp = _namespace(U)
    g = _scaled_slope(W, U, Ks, bs, _steps(hs, xp), a, xp)
    return xp.matmul(_mT(g, xp), U), xp.sum(g, axis=1)


# ------------------------------------------------------------------ fused GPU kernels
# The product stays on cuBLAS (the namespace's matmul); after it ONE kernel of
# braidpy._cuda finishes the step in place (bias, activation, step size and residual
# update), or forms g = act'(z + b) * w * h for the adjoint and the gradient, whose
# products and sums follow: two launches for a forward step where the array-API code
# makes about eleven with smooth_relu. The element functions are the host fast path's
# (csrc/cuda/kernels.hpp). The code is written against the arrays' namespace, so the host
# tests drive it on NumPy arrays with _core._host_dense in place of braidpy._cuda; CuPy
# arrays reach it through the dispatch below (or a layer's "cuda-fused" kernel set).

#: The environment variable naming the code of dense steps on CuPy arrays: "cuda-fused"
#: (braidpy._cuda's fused kernels; the default where they can run) or "array-api" (plain
#: array-API arithmetic, for comparison).
ENV = "BRAIDPY_DENSE_BACKEND"
_GPU_NAMES = ("cuda-fused", "array-api")
#: braidpy._cuda's codes of the activations its dense kernels compute (kernels.hpp).
_GPU_CODES = {id(_TANH): 1, **_FUSED_CODES}
_GPU_DTYPES = frozenset(("float64", "float32"))


def _cuda() -> Any:
    """The module computing the fused kernels (tests swap in host twins)."""
    return importlib.import_module("braidpy._cuda")


def fused_unavailable() -> Optional[str]:
    """Why the fused dense GPU kernels cannot run here, or None when they can: they need
    braidpy._cuda (compiled with nvcc, recently enough to have them) and a usable GPU.

    Examples
    --------
    >>> reason = fused_unavailable()
    >>> reason is None or isinstance(reason, str)
    True
    """
    cuda, why = cuda_module_problem(_cuda)
    if cuda is None:
        return why
    if not hasattr(cuda, "dense_step"):
        return "braidpy._cuda predates the fused dense kernels (rebuild it)"
    return no_gpu_reason(cuda)


#: gpu_choice()'s answers by the value of ENV: the probe runs once per process and value.
_CHOICES: Dict[str, Tuple[str, str]] = {}


def gpu_choice() -> Tuple[str, str]:
    """Which code computes dense steps on CuPy arrays, and why (one line).

    ``"cuda-fused"`` (braidpy._cuda's fused kernels: the default where they can run) or
    ``"array-api"`` (plain array-API arithmetic: forced by ``BRAIDPY_DENSE_BACKEND=
    array-api``, or the fused kernels cannot run, and the reason says why).

    Raises
    ------
    ValueError
        If ``BRAIDPY_DENSE_BACKEND`` names another code, or names "cuda-fused" where it
        cannot run (the message says why).

    Examples
    --------
    >>> name, why = gpu_choice() if ENV not in os.environ else ("array-api", "")
    >>> name in ("cuda-fused", "array-api")
    True
    """
    named = os.environ.get(ENV, "").strip()
    found = _CHOICES.get(named)
    if found is not None:
        return found
    if named and named not in _GPU_NAMES:
        raise ValueError(f"{ENV}={named!r}: choose one of "
                         f"{', '.join(repr(n) for n in _GPU_NAMES)}")
    why = None if named == "array-api" else fused_unavailable()
    if named == "array-api":
        found = ("array-api", f"chosen by {ENV}=array-api")
    elif why is None:
        found = ("cuda-fused", f"chosen by {ENV}=cuda-fused" if named else
                 "the default for CuPy: braidpy._cuda and a GPU are usable")
    elif named:
        raise ValueError(f"{ENV}={named!r}: the fused dense kernels cannot run here: {why}")
    else:
        found = ("array-api", f"fused dense kernels not used ({why}); array-API "
                              f"arithmetic on CuPy instead")
    _CHOICES[named] = found
    return found


def _fused_here(x: Any) -> bool:
    """Whether the (non-NumPy) array x takes the fused GPU kernels: a CuPy array where
    :func:`gpu_choice` says so."""
    return is_cupy(_namespace(x)) and gpu_choice()[0] == "cuda-fused"


def _gpu_code(a: Activation, *xs: Any) -> int:
    """The kernels' activation code when they apply (braidpy's own tanh, relu or
    smooth_relu; all arrays float64, or all float32), else 0: the array-API code."""
    code = _GPU_CODES.get(id(a), 0)
    dt = str(xs[0].dtype)
    if not code or dt not in _GPU_DTYPES or any(str(x.dtype) != dt for x in xs[1:]):
        return 0
    return code


def _finish(slope: bool, Z: Any, X: Any, b: Any, h: Any, code: int, into_x: bool,
            xp: Any) -> Any:
    """One kernel over the product Z (rows, width) or (m, rows, width): the step
    X + h * act(Z + b) (X = U), or with slope (act'(Z + b) * X) * h (X = W), written over
    Z and Z returned, or with into_x over X (then C-contiguous: the caller checks, and
    returns X). h: a number, an array (m,) for a 3-D Z, or one value for a 2-D Z."""
    X, b = xp.ascontiguousarray(X), xp.ascontiguousarray(b)
    Zk, out = Z, X if into_x else Z
    if Z.ndim == 2 and not isinstance(h, numbers.Real):  # an array: as one interval
        one = (1,) + tuple(_shape(Z))
        Zk, X, out = xp.reshape(Z, one), xp.reshape(X, one), xp.reshape(out, one)
        b = xp.reshape(b, (1, _shape(b)[0]))
        h = _as_steps(_namespace(h).reshape(h, (1,)), Zk)
    elif Z.ndim == 2:
        h = float(h)
    else:
        h = xp.ascontiguousarray(h)
    cuda = _cuda()
    (cuda.dense_slope if slope else cuda.dense_step)(Zk, X, b, h, out, code)
    return Z


def _gpu_slope(w: Any, u: Any, K: Any, b: Any, h: Any, code: int, xp: Any) -> Any:
    """g = (act'(u K^T + b) * w) * h: the product, then one kernel over it."""
    return _finish(True, xp.matmul(u, _mT(K, xp)), w, b, h, code, False, xp)


def _gpu_into(out: Any, r: Any, ref: str, x: Any, fn: str) -> Any:
    """r, or r copied into out (checked: x's shape and dtype) and out."""
    if out is None or out is r:
        return r
    if _shape(out) != _shape(x) or str(getattr(out, "dtype", None)) != str(x.dtype):
        raise ValueError(f"{fn}: out must have {ref}'s shape {_shape(x)} and dtype {x.dtype}, "
                         f"got shape {_shape(out)} and dtype {getattr(out, 'dtype', None)}")
    out[...] = r
    return out


def _gpu_forward(u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`dense_forward` by the fused kernels (the array-API code where they do not
    apply)."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_forward", u, K, b)
    code = _gpu_code(a, u, K, b)
    if not code:
        return _api_forward(u, K, b, h, a)
    xp = _namespace(u)
    return _finish(False, xp.matmul(u, _mT(K, xp)), u, b, h, code, False, xp)


def _gpu_adjoint(w: Any, u: Any, K: Any, b: Any, h: Any, act: ActivationLike) -> Any:
    """:func:`dense_adjoint` by the fused kernels."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_adjoint", u, K, b, w)
    code = _gpu_code(a, u, K, b, w)
    if not code:
        return _api_adjoint(w, u, K, b, h, a)
    xp = _namespace(u)
    r = xp.matmul(_gpu_slope(w, u, K, b, h, code, xp), K)
    r += w
    return r


def _gpu_gradient(w: Any, u: Any, K: Any, b: Any, h: Any,
                  act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`dense_gradient` by the fused kernels."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_gradient", u, K, b, w)
    code = _gpu_code(a, u, K, b, w)
    if not code:
        return _api_gradient(w, u, K, b, h, a)
    xp = _namespace(u)
    g = _gpu_slope(w, u, K, b, h, code, xp)
    return xp.matmul(_mT(g, xp), u), xp.sum(g, axis=0)


def _gpu_adjoint_and_gradient(w: Any, u: Any, K: Any, b: Any, h: Any,
                              act: ActivationLike) -> Tuple[Any, Any, Any]:
    """:func:`dense_adjoint_and_gradient` by the fused kernels: g formed once."""
    a = act if act.__class__ is Activation else get_activation(act)
    _check_single("dense_adjoint_and_gradient", u, K, b, w)
    code = _gpu_code(a, u, K, b, w)
    if not code:
        dK, db = _api_gradient(w, u, K, b, h, a)
        return _api_adjoint(w, u, K, b, h, a), dK, db
    xp = _namespace(u)
    g = _gpu_slope(w, u, K, b, h, code, xp)
    r = xp.matmul(g, K)
    r += w
    return r, xp.matmul(_mT(g, xp), u), xp.sum(g, axis=0)


def _gpu_forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike,
                         out: Any = None) -> Any:
    """:func:`dense_forward_batched` by the fused kernels; ``out=U`` (C-contiguous)
    advances U where it lies, with no copy."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_forward_batched", U, Ks, bs, hs)
    code = _gpu_code(a, U, Ks, bs)
    if not code:
        return _gpu_into(out, _api_forward_batched(U, Ks, bs, hs, a), "U", U,
                         "dense_forward_batched")
    xp = _namespace(U)
    Z = xp.matmul(U, _mT(Ks, xp))
    if out is U and U.flags.c_contiguous:
        _finish(False, Z, U, bs, hs, code, True, xp)
        return U
    return _gpu_into(out, _finish(False, Z, U, bs, hs, code, False, xp), "U", U,
                     "dense_forward_batched")


def _gpu_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike,
                         out: Any = None) -> Any:
    """:func:`dense_adjoint_batched` by the fused kernels; ``out=W`` adds into W."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_adjoint_batched", U, Ks, bs, hs, W)
    code = _gpu_code(a, U, Ks, bs, W)
    if not code:
        return _gpu_into(out, _api_adjoint_batched(W, U, Ks, bs, hs, a), "W", W,
                         "dense_adjoint_batched")
    xp = _namespace(U)
    r = xp.matmul(_gpu_slope(W, U, Ks, bs, hs, code, xp), Ks)
    if out is W:  # W + r, the same bits as r + W
        W += r
        return W
    r += W
    return _gpu_into(out, r, "W", W, "dense_adjoint_batched")


def _gpu_gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                          act: ActivationLike) -> Tuple[Any, Any]:
    """:func:`dense_gradient_batched` by the fused kernels."""
    a = act if act.__class__ is Activation else get_activation(act)
    hs = _as_steps(hs, U)
    _check_batched("dense_gradient_batched", U, Ks, bs, hs, W)
    code = _gpu_code(a, U, Ks, bs, W)
    if not code:
        return _api_gradient_batched(W, U, Ks, bs, hs, a)
    xp = _namespace(U)
    G = _gpu_slope(W, U, Ks, bs, hs, code, xp)
    return xp.matmul(_mT(G, xp), U), xp.sum(G, axis=1)


#: The fused kernels' six step functions (single and batched forward, adjoint, gradient),
#: in braidpy.nn.kernels' order, for a "cuda-fused" kernel set; see fused_kernels().
GPU_STEPS = (_gpu_forward, _gpu_adjoint, _gpu_gradient, _gpu_forward_batched,
             _gpu_adjoint_batched, _gpu_gradient_batched)


def fused_kernels() -> Any:
    """The fused GPU kernels as a :class:`braidpy.nn.LayerKernels` set named
    ``"cuda-fused"``, for a layer's ``backend=`` argument (CuPy arrays; what they do not
    cover, e.g. a user's activation, runs as array-API arithmetic).

    Examples
    --------
    >>> k = fused_kernels()
    >>> k.kind, k.name, k.batched_out
    ('dense', 'cuda-fused', True)
    """
    from .kernels import LayerKernels  # (kernels.py imports this module)

    return LayerKernels("dense", "cuda-fused", "cuBLAS products and one fused braidpy._cuda "
                        "kernel per step (bias, activation, update)", *GPU_STEPS,
                        adjoint_and_gradient=_gpu_adjoint_and_gradient, batched_out=True)


# ------------------------------------------------------------------ the numpy kernels
# The public functions: NumPy arrays take the fast path above, any other array the
# array-API kernels. They are the "numpy" backend of braidpy.nn.kernels.

def dense_forward(u: Any, K: Any, b: Any, h: float, act: ActivationLike) -> Any:
    """One dense ResNet step: u + h * act(u @ K.T + b), as a new array.

    Parameters
    ----------
    u : array, shape (batch, width)
        State at t0.
    K : array, shape (width, width)
        Weights; ``K`` acts on each row vector of ``u``.
    b : array, shape (width,)
        Bias.
    h : float
        Step size t1 - t0.
    act : str or Activation
        Activation, by name (see :func:`braidpy.nn.get_activation`) or object.

    Returns
    -------
    array, shape (batch, width)

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, -1.0]])
    >>> dense_forward(u, np.eye(2), np.zeros(2), 0.5, "relu").tolist()
    [[1.5, -1.0]]
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if u.__class__ is _ND and K.__class__ is _ND and b.__class__ is _ND:
        _check_single_np("dense_forward", u, K, b)
        if _one_float(u.dtype, K, b) and _plain_step(u, h):
            code = _rows_code(a, u)
            if code:
                return _rows_step(u, K, b, h, code)
            if u.dtype == _F64:
                return _np_step(u, K, b, h, a)
        return u + h * a.value(_pre(u, K, b, np))
    return (_gpu_forward if _fused_here(u) else _api_forward)(u, K, b, h, a)


def dense_adjoint(w: Any, u: Any, K: Any, b: Any, h: float, act: ActivationLike) -> Any:
    """State adjoint of one dense step: (dPhi/du)(u)^T w = w + (h w act'(z)) @ K, a new array.

    ``u`` is the primal state at t0 and ``z = u @ K.T + b``; other arguments as in
    :func:`dense_forward`. ``w`` has the shape of ``u``.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, -1.0]])
    >>> dense_adjoint(np.ones((1, 2)), u, np.eye(2), np.zeros(2), 0.5, "relu").tolist()
    [[1.5, 1.0]]
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if u.__class__ is _ND and K.__class__ is _ND and b.__class__ is _ND and w.__class__ is _ND:
        _check_single_np("dense_adjoint", u, K, b, w)
        code = _rows_code(a, u)
        if code and _one_float(u.dtype, K, b, w) and _plain_step(u, h):
            return _rows_adjoint(w, u, K, b, h, code)
        if u.dtype == _F64 and _one_float(_F64, K, b, w) and isinstance(h, (float, int)):
            g = _np_scaled_slope(w, u, K, b, h, a)
            r = np.matmul(g, K)
            r += w
            return r
        return w + np.matmul(_scaled_slope(w, u, K, b, h, a, np), K)
    return (_gpu_adjoint if _fused_here(u) else _api_adjoint)(w, u, K, b, h, a)


def dense_gradient(w: Any, u: Any, K: Any, b: Any, h: float,
                   act: ActivationLike) -> Tuple[Any, Any]:
    """Parameter gradient of one dense step: ((dPhi/dK)^T w, (dPhi/db)^T w).

    With g = h * w * act'(u @ K.T + b): dK = g.T @ u (width, width), db = g summed
    over the batch (width,). Arguments as in :func:`dense_adjoint`.

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, -1.0]])
    >>> dK, db = dense_gradient(np.ones((1, 2)), u, np.eye(2), np.zeros(2), 0.5, "relu")
    >>> dK.tolist(), db.tolist()
    ([[0.5, -0.5], [0.0, 0.0]], [0.5, 0.0])
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if u.__class__ is _ND and K.__class__ is _ND and b.__class__ is _ND and w.__class__ is _ND:
        _check_single_np("dense_gradient", u, K, b, w)
        code = _rows_code(a, u)
        if code and _one_float(u.dtype, K, b, w) and _plain_step(u, h):
            return _rows_gradient(w, u, K, b, h, code)
        if u.dtype == _F64 and _one_float(_F64, K, b, w) and isinstance(h, (float, int)):
            g = _np_scaled_slope(w, u, K, b, h, a)
        else:
            g = _scaled_slope(w, u, K, b, h, a, np)
        return np.matmul(_mT(g, np), u), np.sum(g, axis=0)
    return (_gpu_gradient if _fused_here(u) else _api_gradient)(w, u, K, b, h, a)


def dense_adjoint_and_gradient(w: Any, u: Any, K: Any, b: Any, h: float,
                               act: ActivationLike) -> Tuple[Any, Any, Any]:
    """:func:`dense_adjoint` and :func:`dense_gradient` of one step together: (w_new, dK,
    db), the same bits as the two calls, with g = h * w * act'(z) computed once (serial
    backprop needs both at every layer).

    Examples
    --------
    >>> import numpy as np
    >>> u = np.array([[1.0, -1.0]])
    >>> w, dK, db = dense_adjoint_and_gradient(np.ones((1, 2)), u, np.eye(2), np.zeros(2),
    ...                                        0.5, "relu")
    >>> w.tolist(), db.tolist()
    ([[1.5, 1.0]], [0.5, 0.0])
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if (u.__class__ is _ND and K.__class__ is _ND and b.__class__ is _ND and w.__class__ is _ND
            and _one_float(u.dtype, K, b, w) and _plain_step(u, h)):
        _check_single_np("dense_adjoint_and_gradient", u, K, b, w)
        code = _rows_code(a, u)
        if code:
            return _rows_adjoint_and_gradient(w, u, K, b, h, code)
    if (u.__class__ is _ND and K.__class__ is _ND and b.__class__ is _ND and w.__class__ is _ND
            and u.dtype == _F64 and _one_float(_F64, K, b, w) and isinstance(h, (float, int))):
        g = _np_scaled_slope(w, u, K, b, h, a)
        r = np.matmul(g, K)
        r += w
        return r, np.matmul(_mT(g, np), u), np.sum(g, axis=0)
    if u.__class__ is not _ND and _fused_here(u):
        return _gpu_adjoint_and_gradient(w, u, K, b, h, a)
    dK, db = dense_gradient(w, u, K, b, h, a)
    return dense_adjoint(w, u, K, b, h, a), dK, db


# ------------------------------------------------------------------ whole serial sweeps
# Serial propagation through all layers in one compiled call (dense_rows_sweep_*): each
# layer the job of one single-step call, so the same bits, without the Python between
# the calls (about 3 us a layer, a third of a layer's cost at 320 samples).

def _sweep_code(x: Any, Ks: Any, bs: Any, a: Activation, *others: Any) -> int:
    """The one-pass kernels' activation code where a sweep takes states like x with these
    weights (NumPy arrays of one float dtype, width and activation the kernels have),
    else 0; the layout of the arrays written is the caller's to check."""
    if not (x.__class__ is _ND and Ks.__class__ is _ND and bs.__class__ is _ND
            and all(y.__class__ is _ND for y in others)):
        return 0
    return _rows_code(a, x) if _one_float(x.dtype, Ks, bs, *others) else 0


def _written(*xs: Any) -> bool:
    """Whether every x is C-contiguous and writable (a sweep writes it in place)."""
    return all(x.flags.c_contiguous and x.flags.writeable for x in xs)


def dense_sweeps_take(u: Any, Ks: Any, bs: Any, act: ActivationLike) -> bool:
    """Whether :func:`dense_sweep_forward` and :func:`dense_sweep_backward` take states
    like u (a block of them allocated by the caller) with these weights."""
    a = act if act.__class__ is Activation else get_activation(act)
    return bool(_sweep_code(u, Ks, bs, a))


def dense_sweep_forward(S: Any, Ks: Any, bs: Any, hs: Sequence[float],
                        act: ActivationLike) -> bool:
    """Serial forward sweep through N dense layers in one call, where the one-pass kernels
    take the arrays: ``S[n + 1] = dense_forward(S[n], Ks[n], bs[n], hs[n])`` for S of
    shape (N + 1, batch, width) from S[0], or, for S (batch, width), in place to the last
    state; the same bits as the N calls. Returns True; False, with nothing done, where
    the kernels do not take them (not NumPy float64 or float32 alike, S not C-contiguous
    and writable, wider than 32, another activation): step layer by layer then.

    >>> import numpy as np
    >>> S = np.zeros((3, 1, 2)); S[0] = [[1.0, -1.0]]
    >>> dense_sweep_forward(S, np.stack([np.eye(2)] * 2), np.zeros((2, 2)), [0.5, 0.5], "relu")
    True
    >>> S[2].tolist()
    [[2.25, -1.0]]
    """
    a = act if act.__class__ is Activation else get_activation(act)
    code = _sweep_code(S, Ks, bs, a)
    if not (code and _written(S)):
        return False
    _host_dense.dense_rows_sweep_forward(S, _c(Ks), _c(bs), np.asarray(hs, S.dtype), code)
    return True


def dense_sweep_backward(w: Any, S: Any, Ks: Any, bs: Any, hs: Sequence[float],
                         act: ActivationLike, dK: Any, db: Any) -> bool:
    """Serial backward sweep in one call, where the one-pass kernels take the arrays: for
    n = N - 1 down to 0, ``w, dK[n], db[n] = dense_adjoint_and_gradient(w, S[n], Ks[n],
    bs[n], hs[n])``, w (batch, width) updated in place from w_N to w_0, dK (N, width,
    width) and db (N, width) written; the same bits as the N calls. S holds at least N
    states (a forward sweep's N + 1). True, or False with nothing done (as
    :func:`dense_sweep_forward`; dK and db C-contiguous and writable too)."""
    a = act if act.__class__ is Activation else get_activation(act)
    code = _sweep_code(w, Ks, bs, a, S, dK, db)
    if not (code and S.flags.c_contiguous and _written(w, dK, db)):
        return False
    _host_dense.dense_rows_sweep_backward(w, S, _c(Ks), _c(bs), np.asarray(hs, w.dtype), code,
                                          dK, db)
    return True


def dense_forward_batched(U: Any, Ks: Any, bs: Any, hs: Any, act: ActivationLike,
                          out: Any = None) -> Any:
    """m independent dense steps at once: U[i] + hs[i] * act(U[i] @ Ks[i].T + bs[i]).

    Parameters
    ----------
    U : array, shape (m, batch, width)
        States at the start of each of m intervals.
    Ks : array, shape (m, width, width)
    bs : array, shape (m, width)
    hs : array, shape (m,)
        Step sizes.
    act : str or Activation
    out : array, optional
        Where to write the result (shape and dtype of ``U``); may be ``U`` itself, which
        a NumPy ``U`` then advances in place with no copy (MGRIT's batched relaxation
        steps its block so); other arrays get the new result copied in.

    Returns
    -------
    array, shape (m, batch, width); equal to :func:`dense_forward` interval by interval
    (``out`` when given).

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 2))
    >>> Ks, bs = np.stack([np.eye(2), -np.eye(2)]), np.zeros((2, 2))
    >>> dense_forward_batched(U, Ks, bs, np.array([0.5, 0.5]), "relu").tolist()
    [[[1.5, 1.5]], [[1.0, 1.0]]]
    >>> r = dense_forward_batched(U, Ks, bs, np.array([0.5, 0.5]), "relu", out=U)
    >>> r is U, U.tolist()
    (True, [[[1.5, 1.5]], [[1.0, 1.0]]])
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if U.__class__ is _ND and Ks.__class__ is _ND and bs.__class__ is _ND:
        hs = _np_steps(hs, U)
        _check_batched_np("dense_forward_batched", U, Ks, bs, hs)
        if out is not U:
            _check_out("dense_forward_batched", out, "U", U)
        elif not U.flags.writeable:
            raise ValueError("dense_forward_batched: out is U, which is read-only")
        if _one_float(U.dtype, Ks, bs):
            code = _rows_code(a, U)
            if code:
                return _rows_step(U, Ks, bs, hs, code, out)
            code = _fused_code(a, U)
            if code and _chunked(U, out):
                return _dense_chunks.step(U, _transposed(Ks), _small(bs), _small(hs), code,
                                          out)
            return _np_step(U, Ks, bs, hs, a, out)
        return _into(out, U + _steps(hs, np) * a.value(_pre(U, Ks, bs, np)))
    if _fused_here(U):
        return _gpu_forward_batched(U, Ks, bs, hs, a, out)
    return _into(out, _api_forward_batched(U, Ks, bs, hs, a))


def dense_adjoint_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                          act: ActivationLike, out: Any = None) -> Any:
    """m independent state adjoints at once; :func:`dense_adjoint` interval by interval.

    ``W`` has the shape (m, batch, width) of ``U``; see :func:`dense_forward_batched`.
    ``out`` (optional): where to write the result, ``W`` itself included (a NumPy ``W``
    then advances in place, with no copy); the result is returned.

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 2))
    >>> Ks, bs = np.stack([np.eye(2), -np.eye(2)]), np.zeros((2, 2))
    >>> dense_adjoint_batched(U, U, Ks, bs, np.array([0.5, 0.5]), "relu").tolist()
    [[[1.5, 1.5]], [[1.0, 1.0]]]
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if U.__class__ is _ND and Ks.__class__ is _ND and bs.__class__ is _ND and W.__class__ is _ND:
        hs = _np_steps(hs, U)
        _check_batched_np("dense_adjoint_batched", U, Ks, bs, hs, W)
        if out is not W:
            _check_out("dense_adjoint_batched", out, "W", W)
        elif not W.flags.writeable:
            raise ValueError("dense_adjoint_batched: out is W, which is read-only")
        if _one_float(U.dtype, Ks, bs, W):
            code = _rows_code(a, U)
            if code:
                return _rows_adjoint(W, U, Ks, bs, hs, code, out)
            code = _fused_code(a, W)
            if code and _chunked(W, out, U):
                return _dense_chunks.adjoint(W, U, _transposed(Ks), Ks, _small(bs),
                                             _small(hs), code, out)
            return _np_adjoint_batched(W, U, Ks, bs, hs, a, out)
        return _into(out, W + np.matmul(_scaled_slope(W, U, Ks, bs, _steps(hs, np), a, np),
                                        Ks))
    if _fused_here(U):
        return _gpu_adjoint_batched(W, U, Ks, bs, hs, a, out)
    return _into(out, _api_adjoint_batched(W, U, Ks, bs, hs, a))


def dense_gradient_batched(W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                           act: ActivationLike) -> Tuple[Any, Any]:
    """m independent parameter gradients at once: (dKs (m, width, width), dbs (m, width)).

    Interval by interval equal to :func:`dense_gradient`; arguments as in
    :func:`dense_adjoint_batched`.

    Examples
    --------
    >>> import numpy as np
    >>> U = np.ones((2, 1, 2))
    >>> Ks, bs = np.stack([np.eye(2), -np.eye(2)]), np.zeros((2, 2))
    >>> dKs, dbs = dense_gradient_batched(U, U, Ks, bs, np.array([0.5, 0.5]), "relu")
    >>> dKs.shape, dbs.tolist()
    ((2, 2, 2), [[0.5, 0.5], [0.0, 0.0]])
    """
    a = act if act.__class__ is Activation else get_activation(act)
    if U.__class__ is _ND and Ks.__class__ is _ND and bs.__class__ is _ND and W.__class__ is _ND:
        hs = _np_steps(hs, U)
        _check_batched_np("dense_gradient_batched", U, Ks, bs, hs, W)
        if _one_float(U.dtype, Ks, bs, W):
            code = _rows_code(a, U)
            if code:
                return _rows_gradient(W, U, Ks, bs, hs, code)
            code = _fused_code(a, W)
            if code and _chunked(W, None):
                return _dense_chunks.gradient(W, U, _transposed(Ks), _small(bs), _small(hs),
                                              code)
            g = _np_scaled_slope(W, U, Ks, bs, hs, a)
        else:
            g = _scaled_slope(W, U, Ks, bs, _steps(hs, np), a, np)
        return np.matmul(_mT(g, np), U), np.sum(g, axis=1)
    if _fused_here(U):
        return _gpu_gradient_batched(W, U, Ks, bs, hs, a)
    return _api_gradient_batched(W, U, Ks, bs, hs, a)


# ------------------------------------------------------------ kept slopes
#: The most bytes a SlopeCache keeps (one state per layer): above it, no slopes are kept.
SLOPE_CACHE_BYTES = 256 * 2 ** 20


class SlopeCache:
    """The activation's slopes act'(u_n K_n^T + b_n) of every layer n of one gradient,
    kept from the first adjoint step through layer n to the parameter gradients.

    MGRIT's adjoint visits each layer several times per gradient with the primal states
    and the weights fixed (one-shot (1, 2) with F-relaxation: about 7 times, counting
    the relaxations, the restrictions, the coarse grid, the final sweep and the
    parameter gradient), and every visit formed the product u K^T again: the compiled
    one-pass kernels are compute-bound (a (64, 5000, 8) adjoint 4.1 ms, a copy of the
    same bytes 0.9 ms). The first visit keeps the slopes (``dense_rows_adjoint_keep``),
    the others read them (``dense_rows_adjoint_given``, ``dense_rows_gradient_given``:
    about 40 % less time per call, the same bits: g = (act'(z + b) w) h either way).

    For dense layers of the one-pass kernels (width <= 32, relu or smooth_relu) on NumPy
    states of one float dtype, batched calls only, while the slopes of all layers fit in
    ``limit`` bytes; :meth:`adjoint` and :meth:`gradient` return None where they do not
    apply (the caller takes the plain kernels). :meth:`reset` before each gradient's
    adjoint (:class:`braidpy.nn.ResNetApp` does it in ``primal_solved``): the slopes are
    those of the primal states of the last primal solve.
    """

    def __init__(self, activation: ActivationLike, nlayers: int,
                 limit: int = SLOPE_CACHE_BYTES):
        self.activation = get_activation(activation)
        self.nlayers = int(nlayers)
        self.limit = int(limit)
        self._D: Optional[np.ndarray] = None
        self._known = np.zeros(self.nlayers, dtype=bool)
        #: Calls that kept slopes and calls that read them (for tests and benchmarks).
        self.kept = self.given = 0

    @staticmethod
    def takes(activation: ActivationLike) -> bool:
        """Whether the one-pass kernels, and so kept slopes, serve ``activation``."""
        return id(get_activation(activation)) in _FUSED_CODES

    def reset(self) -> None:
        """Forget every slope (a new gradient: new primal states or weights)."""
        self._known[:] = False

    def _slopes(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any) -> Tuple[int, Any]:
        """(kernel code, the slope array D) when the kept slopes apply to this call, else
        (0, None); D is allocated (or replaced) for U's state shape and dtype."""
        if not (U.__class__ is _ND and W.__class__ is _ND and Ks.__class__ is _ND
                and bs.__class__ is _ND and U.ndim in (2, 3)
                and _one_float(U.dtype, Ks, bs, W)):
            return 0, None
        code = _rows_code(self.activation, U)
        if not code:
            return 0, None
        shape = (self.nlayers,) + U.shape[U.ndim - 2:]
        D = self._D
        if D is None or D.shape != shape or D.dtype != U.dtype:
            if self.nlayers * shape[1] * shape[2] * U.itemsize > self.limit:
                return 0, None
            D = self._D = np.empty(shape, U.dtype)
            self._known[:] = False
        return code, D

    def adjoint(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any, sl: slice,
                out: Any = None) -> Optional[Any]:
        """dense_adjoint_batched(W, U, Ks, bs, hs, activation, out=out) for the layers
        ``sl`` (the steps of U's rows): into ``out`` (W unchanged), or without it W
        advanced in place; returned. None when the kept slopes do not apply (nothing
        done)."""
        target = W if out is None else out
        code, D = self._slopes(W, U, Ks, bs, hs)
        if not code or U.ndim != 3 or sl.__class__ is not slice \
                or not target.flags.writeable or not _whole_states(target) \
                or (out is not None and (out.__class__ is not _ND or out.shape != W.shape
                                         or out.dtype != W.dtype
                                         or np.may_share_memory(out, W))):
            return None
        hs = _np_steps(hs, U)
        _check_batched_np("dense_adjoint_batched", U, Ks, bs, hs, W)
        self._adjoint_call((_s(W), _s(U), _c(Ks), _c(bs), _small(hs), code, target, D[sl]),
                           sl)
        return target

    def adjoint_one(self, w: Any, u: Any, K: Any, b: Any, h: Any, n: int) -> Optional[Any]:
        """dense_adjoint(w, u, K, b, h, activation) of layer n alone (the sequential
        solve of the coarsest level), into w, which is returned; None when the kept
        slopes do not apply (nothing done)."""
        if u.__class__ is not _ND or u.ndim != 2 or not _plain_step(u, h):
            return None
        code, D = self._slopes(w, u, K, b, h)
        if not code or not w.flags.writeable or not w.flags.c_contiguous:
            return None
        _check_single_np("dense_adjoint", u, K, b, w)
        self._adjoint_call((w, _s(u), _c(K), _c(b), h, code, w, D[n]), n)
        return w

    def _adjoint_call(self, args: Tuple[Any, ...], layers: Any) -> None:
        """The adjoint kernel for ``layers`` (a slice or one index): reading their slopes
        where all are kept, else keeping them (a first visit of some of these layers)."""
        if self._known[layers].all():
            _host_dense.dense_rows_adjoint_given(*args)
            self.given += 1
        else:
            _host_dense.dense_rows_adjoint_keep(*args)
            self._known[layers] = True
            self.kept += 1

    def gradient(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                 sl: slice) -> Optional[Tuple[Any, Any]]:
        """dense_gradient_batched(W, U, Ks, bs, hs, activation) for the layers ``sl``
        from their kept slopes; None when they are not all kept."""
        code, D = self._slopes(W, U, Ks, bs, hs)
        if not code or U.ndim != 3 or sl.__class__ is not slice or not self._known[sl].all():
            return None
        hs = _np_steps(hs, U)
        _check_batched_np("dense_gradient_batched", U, Ks, bs, hs, W)
        self.given += 1
        return _host_dense.dense_rows_gradient_given(_s(W), _s(U), _c(Ks), _c(bs),
                                                     _small(hs), code, D[sl])
