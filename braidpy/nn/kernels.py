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
:func:`select_kernels` (what the layers call): an explicit ``backend`` name (or a
:class:`LayerKernels` of the right kind) wins; otherwise the array namespace the layer will
compute in decides: NumPy, or none given, gives "numpy", any other namespace "array-api".

Where a new backend plugs in
----------------------------
A cuDNN convolution backend (the optional compiled module ``braidpy._cuda`` of DESIGN.md
section 9; not built yet) will be a ``LayerKernels("conv", "cudnn", ...)`` whose six
functions call that module, imported lazily the first time the backend is selected. It
takes the place of the ``("conv", "cudnn")`` entry of ``_PLANNED`` below (moving to
``_REGISTRY`` via a loader), and :func:`_default_name` will return "cudnn" for CuPy
namespaces when the module imports. Its batched kernels must give each row bit for bit the
single-interval result, like the two backends here (``tests/test_nn_kernels.py`` checks
every registered backend), which rules out convolution algorithms that cuDNN chooses per
call unless they are pinned. A torch backend would plug in the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

from . import conv, dense
from ._common import _is_numpy

__all__ = ["LayerKernels", "KINDS", "backend_names", "select_kernels"]

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


_REGISTRY: Dict[Tuple[str, str], LayerKernels] = {}


def _register(kernels: LayerKernels) -> LayerKernels:
    _REGISTRY[(kernels.kind, kernels.name)] = kernels
    return kernels


_register(LayerKernels(
    "dense", "numpy", "NumPy, shape checks cached per signature, in-place temporaries",
    dense.dense_forward, dense.dense_adjoint, dense.dense_gradient,
    dense.dense_forward_batched, dense.dense_adjoint_batched, dense.dense_gradient_batched))
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

# Backends that have a name but no implementation yet: selecting one says so.
_PLANNED: Dict[Tuple[str, str], str] = {
    ("conv", "cudnn"): "the cuDNN convolutions of the optional braidpy._cuda module, not "
                       "built yet",
}


def _check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown layer kind {kind!r}; choose one of "
                         f"{', '.join(repr(k) for k in KINDS)}")
    return kind


def backend_names(kind: str) -> Tuple[str, ...]:
    """Names of the kernel backends available for layers of ``kind``, sorted.

    Examples
    --------
    >>> backend_names("conv")
    ('array-api', 'numpy')
    """
    _check_kind(kind)
    return tuple(sorted(name for k, name in _REGISTRY if k == kind))


def _default_name(kind: str, xp: Any) -> str:
    """The backend for layers of ``kind`` computing in the array namespace ``xp``.

    The place where an accelerated backend becomes the default for its arrays (e.g.
    "cudnn" for CuPy conv layers once braidpy._cuda exists).
    """
    if xp is None or _is_numpy(xp):
        return "numpy"
    return "array-api"


def select_kernels(kind: str, backend: Union[str, LayerKernels, None] = None,
                   xp: Any = None) -> LayerKernels:
    """The kernel set a layer of ``kind`` uses.

    Parameters
    ----------
    kind : {"dense", "conv"}
    backend : str or LayerKernels, optional
        A name from :func:`backend_names`, or a kernel set of this kind. None (default):
        chosen from ``xp``.
    xp : array namespace, optional
        The namespace the layer will compute in (e.g. ``numpy``, ``cupy``). None means
        NumPy. Only used when ``backend`` is None.

    Raises
    ------
    ValueError
        If ``kind`` or ``backend`` is unknown (the message names it and the choices), or
        ``backend`` is a kernel set of another kind.

    Examples
    --------
    >>> import numpy as np
    >>> select_kernels("dense", xp=np).name
    'numpy'
    >>> select_kernels("conv", "array-api").summary
    'im2col, one matmul over the whole batch and all intervals'
    >>> select_kernels("conv", "cuda")
    Traceback (most recent call last):
    ...
    ValueError: unknown conv kernel backend 'cuda'; choose one of 'array-api', 'numpy'
    """
    _check_kind(kind)
    if isinstance(backend, LayerKernels):
        if backend.kind != kind:
            raise ValueError(f"kernel backend {backend.name!r} computes {backend.kind} layers, "
                             f"not {kind} layers")
        return backend
    name = _default_name(kind, xp) if backend is None else backend
    found: Optional[LayerKernels] = _REGISTRY.get((kind, name)) if isinstance(name, str) \
        else None
    if found is not None:
        return found
    if isinstance(name, str) and (kind, name) in _PLANNED:
        raise ValueError(f"{kind} kernel backend {name!r} is not available: "
                         f"{_PLANNED[(kind, name)]}")
    choices = ", ".join(repr(n) for n in backend_names(kind))
    raise ValueError(f"unknown {kind} kernel backend {name!r}; choose one of {choices}")
