"""Residual layers as objects: :class:`DenseLayer` and :class:`ConvLayer`.

A residual layer is one forward Euler step of layer time, u_new = u + h * act(K u + b),
with K a matrix (dense) or a convolution (conv). The layer object knows its shapes and its
activation and owns the kernels that compute the step, its state adjoint and its
parameter gradient, single and batched over intervals; which kernels is decided once, when
the object is built (see :mod:`braidpy.nn.kernels`). The weights are arguments of every
call: they live in the network's flat parameter vector, and the batched calls take strided
views of the stacked weights of consecutive layers (``K[sl]``, ``b[sl]``).

:class:`braidpy.nn.ResNet` holds one layer object for all its residual layers and calls
it; so does :class:`braidpy.nn.ResNetApp`, step by step, on every MGRIT level.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple, Union

import numpy as np

from .activations import Activation, ActivationLike, get_activation
from .kernels import LayerKernels, choose_kernels

__all__ = ["DenseLayer", "ConvLayer"]

BackendLike = Union[str, LayerKernels, None]


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class _Layer:
    """What DenseLayer and ConvLayer share: the activation, the kernels and the calls."""

    kind = ""

    def __init__(self, width: int, activation: ActivationLike, backend: BackendLike,
                 xp: Any) -> None:
        self.width = width
        self.activation: Activation = get_activation(activation)
        self.kernels: LayerKernels
        self.kernels, self._choice = choose_kernels(self.kind, backend, xp)
        k = self.kernels
        # The kernels as plain attributes: one lookup per call.
        self._forward, self._adjoint, self._gradient = k.forward, k.adjoint, k.gradient
        self._forward_batched = k.forward_batched
        self._adjoint_batched = k.adjoint_batched
        self._gradient_batched = k.gradient_batched
        self._adjoint_and_gradient = k.adjoint_and_gradient
        #: Whether forward_batched / adjoint_batched write ``out`` (U / W itself
        #: included) with no copy (the kernels' ``batched_out``).
        self.batched_out: bool = k.batched_out
        self._sweeps_take = k.sweeps_take
        self._sweep_forward, self._sweep_backward = k.sweep_forward, k.sweep_backward

    @property
    def backend(self) -> str:
        """Name of the kernel backend, e.g. ``"numpy"``."""
        return self.kernels.name

    @property
    def backend_choice(self) -> str:
        """Why this backend: the argument, ``BRAIDPY_CONV_BACKEND``, or the namespace's
        default (and, where cuDNN was not used on CuPy, why not)."""
        return self._choice

    @property
    def bias_shape(self) -> Tuple[int, ...]:
        """Shape of one layer's bias b."""
        return (self.width,)

    # ------------------------------------------------------------ one interval
    def forward(self, u: Any, K: Any, b: Any, h: Any) -> Any:
        """One step from t0 to t0 + h: u + h * act(K u + b), a new array."""
        return self._forward(u, K, b, h, self.activation)

    def adjoint(self, w: Any, u: Any, K: Any, b: Any, h: Any) -> Any:
        """State adjoint of one step at the primal state u: (dPhi/du)^T w, a new array."""
        return self._adjoint(w, u, K, b, h, self.activation)

    def gradient(self, w: Any, u: Any, K: Any, b: Any, h: Any) -> Tuple[Any, Any]:
        """Parameter gradient of one step: ((dPhi/dK)^T w, (dPhi/db)^T w)."""
        return self._gradient(w, u, K, b, h, self.activation)

    def adjoint_and_gradient(self, w: Any, u: Any, K: Any, b: Any,
                             h: Any) -> Tuple[Any, Any, Any]:
        """(state adjoint, dK, db) of one step: :meth:`adjoint` and :meth:`gradient` in one
        call, one pass over act' where the kernels offer it."""
        if self._adjoint_and_gradient is not None:
            return self._adjoint_and_gradient(w, u, K, b, h, self.activation)
        dK, db = self.gradient(w, u, K, b, h)
        return self.adjoint(w, u, K, b, h), dK, db

    # ------------------------------------------------------------ serial sweeps
    def sweeps(self, u: Any, Ks: Any, bs: Any) -> bool:
        """Whether :meth:`sweep_forward` and :meth:`sweep_backward` take states like u
        with these weights (one call for all layers); else step one layer at a time."""
        f = self._sweeps_take
        return f is not None and f(u, Ks, bs, self.activation)

    def sweep_forward(self, S: Any, Ks: Any, bs: Any, hs: Sequence[float]) -> bool:
        """Serial propagation through len(hs) layers in one call where the kernels have
        it (the kernels' ``sweep_forward``): S[n + 1] = forward(S[n], Ks[n], bs[n],
        hs[n]) for S (N + 1 states) from S[0], or S (one state) in place to the last.
        True; False, with nothing done, where they do not (step one layer at a time)."""
        f = self._sweep_forward
        return f is not None and f(S, Ks, bs, hs, self.activation)

    def sweep_backward(self, w: Any, S: Any, Ks: Any, bs: Any, hs: Sequence[float],
                       dK: Any, db: Any) -> bool:
        """The backward sweep in one call where the kernels have it: w from w_N to w_0
        in place, (dK[n], db[n]) of every layer written (:meth:`adjoint_and_gradient`
        layer by layer, n descending). True, or False with nothing done."""
        f = self._sweep_backward
        return f is not None and f(w, S, Ks, bs, hs, self.activation, dK, db)

    # ------------------------------------------------------------ m intervals at once
    def forward_batched(self, U: Any, Ks: Any, bs: Any, hs: Any, out: Any = None) -> Any:
        """m steps at once, row i with Ks[i], bs[i], hs[i]; row by row equal to forward.

        With ``out`` (an array of U's shape, U itself included) the result is written
        there and ``out`` returned: without a copy where :attr:`batched_out` is True,
        else copied from a new array."""
        if out is None:
            return self._forward_batched(U, Ks, bs, hs, self.activation)
        if self.batched_out:
            return self._forward_batched(U, Ks, bs, hs, self.activation, out=out)
        out[...] = self._forward_batched(U, Ks, bs, hs, self.activation)
        return out

    def adjoint_batched(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any,
                        out: Any = None) -> Any:
        """m state adjoints at once; row by row equal to :meth:`adjoint`. ``out`` (W
        itself included) as in :meth:`forward_batched`."""
        if out is None:
            return self._adjoint_batched(W, U, Ks, bs, hs, self.activation)
        if self.batched_out:
            return self._adjoint_batched(W, U, Ks, bs, hs, self.activation, out=out)
        out[...] = self._adjoint_batched(W, U, Ks, bs, hs, self.activation)
        return out

    def gradient_batched(self, W: Any, U: Any, Ks: Any, bs: Any,
                         hs: Any) -> Tuple[Any, Any]:
        """m parameter gradients at once: (dKs, dbs), row by row equal to :meth:`gradient`."""
        return self._gradient_batched(W, U, Ks, bs, hs, self.activation)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.describe()}, {self.activation.name}, "
                f"backend {self.backend!r}>")

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


class DenseLayer(_Layer):
    """Dense residual layer: u (batch, width) -> u + h * act(u @ K.T + b).

    K has shape (width, width), b (width,). The kernels are those of
    :func:`braidpy.nn.dense_forward` and its siblings (backend "numpy") or their
    array-API versions ("array-api"); see :mod:`braidpy.nn.kernels`.

    Parameters
    ----------
    width : int
        Number of features of the state.
    activation : str or Activation, default "tanh"
    backend : str or LayerKernels, optional
        Kernel backend by name (see :func:`braidpy.nn.backend_names`); None (default):
        chosen from ``xp``.
    xp : array namespace, optional
        The namespace the layer will compute in; None means NumPy.

    Raises
    ------
    ValueError
        If width is not a positive integer, or the activation or backend is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> layer = DenseLayer(2, "relu")
    >>> layer.backend
    'numpy'
    >>> layer.forward(np.array([[1.0, -1.0]]), np.eye(2), np.zeros(2), 0.5).tolist()
    [[1.5, -1.0]]
    >>> DenseLayer(2, backend="array-api")
    <DenseLayer dense 2, tanh, backend 'array-api'>
    """

    kind = "dense"

    def __init__(self, width: int, activation: ActivationLike = "tanh", *,
                 backend: BackendLike = None, xp: Any = None) -> None:
        super().__init__(_positive_int("width", width), activation, backend, xp)

    @property
    def weight_shape(self) -> Tuple[int, ...]:
        """Shape of one layer's weights K: (width, width)."""
        return (self.width, self.width)

    @property
    def fan_in(self) -> int:
        """Inputs feeding each output: width."""
        return self.width

    def state_shape(self, input_shape: Sequence[int]) -> Tuple[int, ...]:
        """Shape of one sample's state, for samples of ``input_shape``: (width,)."""
        return (self.width,)

    def describe(self) -> str:
        """A few words: ``"dense 8"``."""
        return f"dense {self.width}"

    def slope_cache(self, nlayers: int) -> Any:
        """A :class:`braidpy.nn.dense.SlopeCache` for ``nlayers`` layers of this layer's
        activation (the NumPy kernels, relu or smooth_relu), which MGRIT's adjoint uses
        to skip the product u K^T after its first visit of a layer; None otherwise."""
        from .dense import SlopeCache  # the dense kernels' own module
        if self.backend != "numpy" or not SlopeCache.takes(self.activation):
            return None
        return SlopeCache(self.activation, nlayers)


class ConvLayer(_Layer):
    """Convolutional residual layer: u (batch, C, H, W) -> u + h * act(conv2d(u, K) + b).

    K has shape (C, C, k, k) with k odd ("same" zero padding), b (C,). The kernels are
    those of :func:`braidpy.nn.conv_forward` and its siblings (backend "numpy": im2col on
    cache-sized chunks) or the array-API versions ("array-api": one im2col matmul for the
    whole batch and all intervals); see :mod:`braidpy.nn.kernels`.

    Parameters
    ----------
    channels : int
        Number of channels C of the state.
    kernel : int, default 3
        Odd kernel size k.
    activation : str or Activation, default "tanh"
    backend : str or LayerKernels, optional
        Kernel backend by name (see :func:`braidpy.nn.backend_names`); None (default):
        chosen from ``xp``.
    xp : array namespace, optional
        The namespace the layer will compute in; None means NumPy.

    Raises
    ------
    ValueError
        If channels or kernel is not a positive integer, kernel is even, or the
        activation or backend is unknown.

    Examples
    --------
    >>> import numpy as np
    >>> layer = ConvLayer(1, kernel=3, activation="relu")
    >>> K = np.zeros(layer.weight_shape); K[0, 0, 1, 1] = 1.0    # identity kernel
    >>> layer.forward(np.array([[[[1.0, -1.0]]]]), K, np.zeros(1), 0.5).tolist()
    [[[[1.5, -1.0]]]]
    >>> layer.state_shape((1, 28, 28)), layer.kernels.name
    ((1, 28, 28), 'numpy')
    """

    kind = "conv"

    def __init__(self, channels: int, kernel: int = 3, activation: ActivationLike = "tanh", *,
                 backend: BackendLike = None, xp: Any = None) -> None:
        k = _positive_int("kernel", kernel)
        if k % 2 == 0:
            raise ValueError(f"kernel must be odd (zero padding keeps the image size), "
                             f"got {kernel}")
        self.kernel = k
        super().__init__(_positive_int("channels", channels), activation, backend, xp)

    @property
    def channels(self) -> int:
        """Number of channels C (the layer's width)."""
        return self.width

    @property
    def weight_shape(self) -> Tuple[int, ...]:
        """Shape of one layer's kernel K: (C, C, k, k)."""
        return (self.width, self.width, self.kernel, self.kernel)

    @property
    def fan_in(self) -> int:
        """Inputs feeding each output: C * k * k."""
        return self.width * self.kernel ** 2

    def state_shape(self, input_shape: Sequence[int]) -> Tuple[int, ...]:
        """Shape of one sample's state for images of ``input_shape`` (Cin, H, W): (C, H, W)."""
        return (self.width,) + tuple(int(s) for s in input_shape[1:])

    def describe(self) -> str:
        """A few words: ``"conv 8ch 3x3"``."""
        return f"conv {self.width}ch {self.kernel}x{self.kernel}"
