"""Kernel backends of the residual layers: which code computes a layer's steps.

A residual layer (:class:`braidpy.nn.DenseLayer`, :class:`braidpy.nn.ConvLayer`) needs six
kernels: the forward step u + h * act(K u + b), its state adjoint (the vector-Jacobian
product with respect to u) and its parameter gradient (with respect to K and b), each for
one interval and batched over m intervals (stacked states, one weight row per interval).
A :class:`LayerKernels` holds one such set and the name of its backend. The layer object
picks its set once, when it is built, and calls it directly: the network and the MGRIT app
never ask which kind of layer or which backend they hold.

Backends
--------
``"numpy"`` (the default)
    The public functions :func:`braidpy.nn.dense_forward`, :func:`braidpy.nn.conv_forward`
    and their siblings. On NumPy arrays the dense kernels remember the shape signatures
    that passed their checks and compute on their own temporaries; the conv kernels run
    im2col plus one matmul on cache-sized chunks of the batch, and the batched steps
    interval by interval. Arrays of any other namespace go to the "array-api" kernels.
``"array-api"``
    Plain array-API arithmetic in the namespace of the arguments (NumPy, CuPy,
    array-api-strict, ...); conv as im2col plus one matmul over the whole batch and all
    intervals at once (the right shape for a GPU).

Both give each row of a batched call bit for bit the single-interval result, so MGRIT's
results do not depend on how its steps are batched or on the number of ranks.

Choosing
--------
:func:`choose_kernels` (what the layers call, once per layer object): an explicit
``backend`` name (or a :class:`LayerKernels` of the right kind) wins; then, for conv
layers, the environment variable ``BRAIDPY_CONV_BACKEND``; otherwise the array namespace
the layer will compute in decides: NumPy, or none given, gives "numpy"; CuPy gives
"cuda-direct" for conv layers when braidpy._cuda and a GPU are usable, else "cudnn" when
cuDNN is, else "array-api" (the reason is kept: ``layer.backend_choice``); any other
namespace gives "array-api".
:func:`select_kernels` returns the kernel set alone.

Optional backends
-----------------
``"cudnn"`` (conv only, :mod:`braidpy.nn.conv_backends`)
    cuDNN's convolutions from braidpy's own C++ (``braidpy._cuda``) on CuPy arrays; the
    batched steps are one grouped convolution over the intervals. Listed by
    ``backend_names(kind, optional=True)`` where it can run; naming it elsewhere raises a
    ValueError saying why (no compiled module, no cuDNN, no GPU).
``"cuda-direct"`` (conv only, :mod:`braidpy.nn.conv_direct`; the default on CuPy)
    braidpy's own direct convolution kernels (``braidpy._cuda``, no cuDNN): a step of
    every interval, bias, activation and residual update included, in one kernel. On
    an H200 its batched float64 forward step took a quarter of cuDNN's grouped call.
``"cudnn-streams"`` (conv only)
    The same cuDNN calls, the batched steps interval by interval with one CUDA stream
    per block of intervals (``BRAIDPY_CUDNN_STREAMS``, default 4): the alternative to
    grouped batching; never chosen by default. Its batched rows equal its
    single-interval results to rounding (bit for bit where cuDNN runs the same algorithm
    for both; tests/test_gpu.py checks on a GPU). A torch backend would plug in the same
    way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import conv, conv_backends, conv_direct, dense
from ._common import _is_numpy

__all__ = ["LayerKernels", "KINDS", "backend_names", "choose_kernels", "select_kernels"]

#: The residual layer kinds.
KINDS: Tuple[str, ...] = ("dense", "conv")


@dataclass(frozen=True)
class LayerKernels:
    """The six kernels of one residual layer kind on one backend.

    Each kernel takes the activation (an :class:`braidpy.nn.Activation` or its name) as its
    last argument; the weights are arguments too (they live in the network's flat
    parameter vector), so a kernel set holds no state.

    Attributes
    ----------
    kind : str
        ``"dense"`` or ``"conv"``.
    name : str
        The backend's name, e.g. ``"numpy"`` (what a run header prints).
    summary : str
        One line: how the kernels compute.
    forward : callable
        ``forward(u, K, b, h, act)``: the state after one step.
    adjoint : callable
        ``adjoint(w, u, K, b, h, act)``: the state adjoint of one step.
    gradient : callable
        ``gradient(w, u, K, b, h, act)``: ``(dK, db)`` of one step.
    forward_batched, adjoint_batched, gradient_batched : callable
        The same for m intervals at once: ``(U, Ks, bs, hs, act)`` and
        ``(W, U, Ks, bs, hs, act)``, states stacked along a leading axis.
    adjoint_and_gradient : callable or None
        ``(w, u, K, b, h, act)`` -> ``(w_new, dK, db)``: adjoint and gradient of one step
        in one call, the same bits as the two (serial backprop needs both at every
        layer); None where the backend has no such kernel (the layer calls the two).
    sweeps_take, sweep_forward, sweep_backward : callable or None
        Serial propagation through all layers in one call, where the backend has it:
        ``sweeps_take(u, Ks, bs, act)`` whether the sweeps take states like u;
        ``sweep_forward(S, Ks, bs, hs, act)`` fills S[1:] (N + 1 states) from S[0], or
        steps S (one state) in place to the last; ``sweep_backward(w, S, Ks, bs, hs, act,
        dK, db)`` takes w from w_N to w_0 in place and writes every layer's (dK, db).
        Each returns True, or False having done nothing where it does not take the
        arrays (the layer then steps one call at a time); the same bits as the calls.
    batched_out : bool
        True when ``forward_batched`` and ``adjoint_batched`` take ``out=`` and write
        their result there, ``U`` (``W``) itself included, with no copy: MGRIT's batched
        relaxation then advances its stacked states where they lie
        (:class:`braidpy.nn.ResNetApp`). False: the result is a new array.
    """

    kind: str
    name: str
    summary: str
    forward: Callable[..., Any] = field(repr=False)
    adjoint: Callable[..., Any] = field(repr=False)
    gradient: Callable[..., Any] = field(repr=False)
    forward_batched: Callable[..., Any] = field(repr=False)
    adjoint_batched: Callable[..., Any] = field(repr=False)
    gradient_batched: Callable[..., Any] = field(repr=False)
    adjoint_and_gradient: Optional[Callable[..., Any]] = field(default=None, repr=False)
    batched_out: bool = field(default=False, repr=False)
    sweeps_take: Optional[Callable[..., bool]] = field(default=None, repr=False)
    sweep_forward: Optional[Callable[..., bool]] = field(default=None, repr=False)
    sweep_backward: Optional[Callable[..., bool]] = field(default=None, repr=False)


_REGISTRY: Dict[Tuple[str, str], LayerKernels] = {}


def _register(kernels: LayerKernels) -> LayerKernels:
    _REGISTRY[(kernels.kind, kernels.name)] = kernels
    return kernels


_register(LayerKernels(
    "dense", "numpy", "NumPy, shape checks cached per signature, in-place temporaries",
    dense.dense_forward, dense.dense_adjoint, dense.dense_gradient,
    dense.dense_forward_batched, dense.dense_adjoint_batched, dense.dense_gradient_batched,
    dense.dense_adjoint_and_gradient, batched_out=True,
    sweeps_take=dense.dense_sweeps_take, sweep_forward=dense.dense_sweep_forward,
    sweep_backward=dense.dense_sweep_backward))
_register(LayerKernels(
    "dense", "array-api", "array-API arithmetic in the arguments' namespace",
    dense._api_forward, dense._api_adjoint, dense._api_gradient,
    dense._api_forward_batched, dense._api_adjoint_batched, dense._api_gradient_batched))
_register(LayerKernels(
    "conv", "numpy", "NumPy im2col in cache-sized chunks, batched steps interval by interval",
    conv.conv_forward, conv.conv_adjoint, conv.conv_gradient,
    conv.conv_forward_batched, conv.conv_adjoint_batched, conv.conv_gradient_batched))
_register(LayerKernels(
    "conv", "array-api", "im2col, one matmul over the whole batch and all intervals",
    conv._api_forward, conv._api_adjoint, conv._api_gradient,
    conv._api_forward_batched, conv._api_adjoint_batched, conv._api_gradient_batched))


def _cudnn() -> Tuple[Optional[LayerKernels], str]:
    """The "cudnn" conv kernels where they can run, else (None, why not)."""
    why = conv_backends.cudnn_unavailable()
    if why is not None:
        return None, why
    return LayerKernels("conv", "cudnn", "cuDNN convolutions (braidpy._cuda), batched steps "
                        "as one grouped convolution over the intervals",
                        *conv_backends.STEPS), ""


def _cudnn_streams() -> Tuple[Optional[LayerKernels], str]:
    """The "cudnn-streams" conv kernels where cuDNN can run, else (None, why not)."""
    why = conv_backends.cudnn_unavailable()
    if why is not None:
        return None, why
    return LayerKernels("conv", "cudnn-streams", "cuDNN convolutions (braidpy._cuda), batched "
                        "steps interval by interval, one CUDA stream per block of intervals",
                        *conv_backends.STREAM_STEPS), ""


def _cuda_direct() -> Tuple[Optional[LayerKernels], str]:
    """The "cuda-direct" conv kernels where braidpy._cuda and a GPU are, else (None, why)."""
    why = conv_direct.direct_unavailable()
    if why is not None:
        return None, why
    return LayerKernels("conv", "cuda-direct", "braidpy's direct convolution kernels "
                        "(braidpy._cuda): a step of every interval in one kernel, no cuDNN",
                        *conv_direct.STEPS), ""


def _cuda_fused() -> Tuple[Optional[LayerKernels], str]:
    """The "cuda-fused" dense kernels where braidpy._cuda and a GPU are, else (None, why)."""
    why = dense.fused_unavailable()
    return (None, why) if why else (dense.fused_kernels(), "")


# Backends that exist where their library and device do: (kind, name) -> loader.
_OPTIONAL: Dict[Tuple[str, str], Callable[[], Tuple[Optional[LayerKernels], str]]] = {
    ("conv", "cudnn"): _cudnn,
    ("conv", "cudnn-streams"): _cudnn_streams,
    ("conv", "cuda-direct"): _cuda_direct,
    ("dense", "cuda-fused"): _cuda_fused,
}


def _check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}; choose one of "
                         f"{', '.join(repr(k) for k in KINDS)}")
    return kind


def backend_names(kind: str, optional: bool = False) -> Tuple[str, ...]:
    """Names of the kernel backends for layers of ``kind``, sorted.

    The always-available ones (they run on any array namespace); with ``optional`` also
    the optional backends ("cudnn") that can run here (library and device found).

    Examples
    --------
    >>> backend_names("conv")
    ('array-api', 'numpy')
    >>> set(backend_names("conv", optional=True)) >= {"array-api", "numpy"}
    True
    """
    _check_kind(kind)
    names = {name for k, name in _REGISTRY if k == kind}
    if optional:
        names |= {name for (k, name), load in _OPTIONAL.items()
                  if k == kind and load()[0] is not None}
    return tuple(sorted(names))


def _default_name(kind: str, xp: Any) -> Tuple[str, str]:
    """The backend for layers of ``kind`` computing in the namespace ``xp``, and why."""
    if xp is None or _is_numpy(xp):
        return "numpy", "the default for NumPy"
    if kind == "conv" and conv_backends.is_cupy(xp):
        # braidpy's direct kernels beat cuDNN's grouped convolution on the GPU benchmark
        # (bench_gpu.py --conv, docs/benchmarks.md): the default wherever braidpy._cuda has a GPU
        _, why_not_direct = _cuda_direct()
        if not why_not_direct:
            return "cuda-direct", "the default for CuPy: braidpy._cuda and a GPU are usable"
        _, why_not = _cudnn()
        if not why_not:
            return "cudnn", "the default for CuPy without braidpy's direct kernels"
        return "array-api", f"cuDNN not used ({why_not}); im2col on CuPy instead"
    if kind == "dense" and conv_backends.is_cupy(xp):
        # cuBLAS products and one fused kernel per step where braidpy._cuda has a GPU
        # (BRAIDPY_DENSE_BACKEND=array-api keeps the array-API arithmetic)
        return dense.gpu_choice()
    return "array-api", "the default for a non-NumPy namespace"


def _by_name(kind: str, name: Any) -> LayerKernels:
    found: Optional[LayerKernels] = _REGISTRY.get((kind, name)) if isinstance(name, str) \
        else None
    if found is not None:
        return found
    if isinstance(name, str) and (kind, name) in _OPTIONAL:
        kernels, why = _OPTIONAL[(kind, name)]()
        if kernels is None:
            raise ValueError(f"{kind} kernel backend {name!r} is not available: {why}")
        return kernels
    known = sorted({n for k, n in _REGISTRY if k == kind} |
                   {n for k, n in _OPTIONAL if k == kind})
    choices = ", ".join(repr(n) for n in known)
    raise ValueError(f"unknown {kind} kernel backend {name!r}; choose one of {choices}")


def choose_kernels(kind: str, backend: Union[str, LayerKernels, None] = None,
                   xp: Any = None) -> Tuple[LayerKernels, str]:
    """The kernel set a layer of ``kind`` uses, and why it was chosen (one line).

    Arguments as in :func:`select_kernels`; for conv layers with ``backend`` None the
    environment variable ``BRAIDPY_CONV_BACKEND`` names the backend before the
    namespace's default does.

    Examples
    --------
    >>> import numpy as np
    >>> kernels, why = choose_kernels("dense", xp=np)
    >>> kernels.name, why
    ('numpy', 'the default for NumPy')
    """
    _check_kind(kind)
    if isinstance(backend, LayerKernels):
        if backend.kind != kind:
            raise ValueError(f"kernel backend {backend.name!r} computes {backend.kind} layers, "
                             f"not {kind} layers")
        return backend, "given as a kernel set"
    if backend is not None:
        return _by_name(kind, backend), "chosen by the backend argument"
    named = conv_backends.env_backend() if kind == "conv" else None
    if named is not None:
        try:
            return _by_name(kind, named), f"chosen by {conv_backends.ENV}={named}"
        except ValueError as exc:
            raise ValueError(f"{conv_backends.ENV}={named!r}: {exc}") from None
    name, why = _default_name(kind, xp)
    return _by_name(kind, name), why


def select_kernels(kind: str, backend: Union[str, LayerKernels, None] = None,
                   xp: Any = None) -> LayerKernels:
    """The kernel set a layer of ``kind`` uses (:func:`choose_kernels` without the why).

    Parameters
    ----------
    kind : {"dense", "conv"}
    backend : str or LayerKernels, optional
        A name from :func:`backend_names` (or "cudnn"), or a kernel set of this kind.
        None (default): ``BRAIDPY_CONV_BACKEND`` for conv layers, else chosen from ``xp``.
    xp : array namespace, optional
        The namespace the layer will compute in (e.g. ``numpy``, ``cupy``). None means
        NumPy. Only used when ``backend`` is None.

    Raises
    ------
    ValueError
        If ``kind`` or ``backend`` is unknown (the message names it and the choices),
        ``backend`` is a kernel set of another kind, or names an optional backend that
        cannot run here (the message says why).

    Examples
    --------
    >>> import numpy as np
    >>> select_kernels("dense", xp=np).name
    'numpy'
    >>> select_kernels("conv", "array-api").summary
    'im2col, one matmul over the whole batch and all intervals'
    >>> select_kernels("conv", "cuda")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown conv kernel backend 'cuda'; choose one of 'array-api', 'cuda-direct', ...
    """
    return choose_kernels(kind, backend, xp)[0]
