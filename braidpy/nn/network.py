"""A residual network in layer time: architecture, parameter layout and serial reference.

:class:`ResNet` describes the network of Günther et al., "Layer-parallel training of deep
residual neural networks" (SIAM J. Math. Data Sci. 2, 2020), eqs. (2.10)-(2.13):

    u_0 = opening(y),    u_{n+1} = u_n + h_n * act(K_n u_n + b_n)  (n = 0..N-1),
    loss = mean cross entropy of softmax(W u_N + mu) against the labels c.

The layer-time grid is braidpy's (XBraid's) uniform grid on [0, tstop] with N steps, so
the serial reference here and the MGRIT app (:class:`braidpy.nn.ResNetApp`) use the
very same step sizes. All trainable numbers live in one flat float vector (``params``);
:meth:`ResNet.views` cuts it into named arrays without copying, so an optimizer works
on the flat vector and every layer sees the update.

Layer kinds: ``"dense"`` (state batch x width, K width x width) and ``"conv"`` (state
batch x channels x H x W, K channels x channels x k x k, zero padding). The residual
layers are one :class:`braidpy.nn.DenseLayer` or :class:`braidpy.nn.ConvLayer` object
(:attr:`ResNet.layer`), which owns the kernels; the network only calls it.
Opening kinds: ``"dense"`` (L width x nf, for feature vectors), ``"conv"`` (for images),
``"replicate"`` and ``"zero-pad"`` (no parameters).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._device import HOST, Placement, placement, placement_of
from .._renamed import renamed_arguments, renamed_attribute
from ._common import _concat, _namespace
from .activations import get_activation
from .layers import (classifier_gradient, classifier_loss, classifier_predict,
                     classifier_probabilities, classifier_sums, conv_opening,
                     conv_opening_gradient, dense_opening, dense_opening_gradient,
                     replicate_opening, zero_pad_opening)
from .residual import BackendLike, ConvLayer, DenseLayer, _positive_int

__all__ = ["ResNet", "OPENINGS", "EVALUATION_STATE_BYTES", "SWEEP_WORKSPACE_MAX_BYTES"]

OPENINGS = ("dense", "conv", "replicate", "zero-pad")

#: Evaluation (validation, ``braidpy evaluate``, ``braidpy predict``) runs in batches whose
#: state (batch x state size, float64) stays within this many bytes, one sample at least:
#: 32 MiB, e.g. 668 samples of an MNIST network of 8 channels (8 x 28 x 28 numbers each),
#: 16384 of the digits preset's 4 x 8 x 8, 524288 of a Peaks width 8. A forward pass holds
#: a few such states (and, on the array-API conv path, im2col columns of k * k states), so
#: its memory stays bounded whatever the number of samples.
EVALUATION_STATE_BYTES = 32 << 20

#: The largest block of states (N + 1 of them) a ResNet keeps between serial gradients
#: for its next one: a fresh block costs a page fault per 4 KiB written (about 7 % of a
#: Peaks 1024 gradient at 5000 samples); larger ones are allocated per gradient.
SWEEP_WORKSPACE_MAX_BYTES = 1 << 30


def _shares(u: Any, *others: Any) -> bool:
    """Whether the host array u may share memory with any of others (True for a state
    that is not a NumPy array: only host arrays are stepped in place)."""
    if u.__class__ is not np.ndarray:
        return True
    return any(isinstance(x, np.ndarray) and np.may_share_memory(u, x) for x in others)


class ResNet:
    """Architecture of a layer-time ResNet and the layout of its parameter vector.

    Parameters
    ----------
    input_shape : tuple of int
        Shape of one input sample: ``(nf,)`` for feature vectors (dense network) or
        ``(Cin, H, W)`` for images (convolutional network).
    nclasses : int
        Number of classes of the softmax classifier.
    width : int
        Network width q (dense) or number of channels (conv).
    nlayers : int
        Number of residual layers N (time steps).
    tstop : float, default 5.0
        Final layer time (the paper's T; XBraid's and :func:`braidpy.solve`'s ``tstop``);
        the step size is h = tstop / N. The old keyword ``T`` still works, with a
        DeprecationWarning.
    activation : str, default "smooth_relu"
        Activation of the residual layers (see :func:`braidpy.nn.activation_names`).
    opening : str, default "dense" for feature vectors, "conv" for images
        One of ``"dense"``, ``"conv"``, ``"replicate"``, ``"zero-pad"``.
    opening_activation : bool, default True
        Apply the activation after a learned (dense/conv) opening layer, as the paper
        does for Peaks.
    kernel : int, default 3
        Odd convolution kernel size (conv networks only).
    backend : str or LayerKernels, optional
        Kernel backend of the residual layers (see :func:`braidpy.nn.backend_names`);
        None (default): chosen from ``xp``. Reported by :attr:`backend`.
    xp : array namespace, optional
        The namespace the layers will compute in, for the default backend; None means
        NumPy (or the namespace ``device`` names). Alone it only picks the kernels.
    device : str or device, optional
        Where parameters, states and gradients live: None or ``"cpu"`` (NumPy, the
        default), ``"cuda"`` / ``"cuda:N"`` (CuPy, ``pip install -e '.[gpu]'``), or one
        of ``xp``'s devices. :meth:`init_params` returns its parameters there, and
        :class:`braidpy.train.Trainer` keeps data, parameters, gradients and optimizer
        state there (:attr:`placement`).

    Examples
    --------
    >>> net = ResNet((2,), 5, width=8, nlayers=4, tstop=1.0, activation="smooth_relu")
    >>> net.nparams                               # 8*2+8 + 4*(64+8) + 5*8+5
    357
    >>> p = net.init_params(seed=0)
    >>> sorted(net.views(p))
    ['K', 'W', 'b', 'mu', 'open_K', 'open_b']
    >>> X = np.zeros((3, 2)); C = np.eye(5)[:3]
    >>> loss, grad = net.loss_and_gradient(p, X, C)
    >>> grad.shape == p.shape
    True
    >>> net.layer, net.backend
    (<DenseLayer dense 8, smooth_relu, backend 'numpy'>, 'numpy')
    """

    T = renamed_attribute("T", "tstop")

    @renamed_arguments({"T": "tstop"})
    def __init__(self, input_shape: Sequence[int], nclasses: int, *, width: int, nlayers: int,
                 tstop: float = 5.0, activation: str = "smooth_relu", opening: Optional[str] = None,
                 opening_activation: bool = True, kernel: int = 3,
                 backend: BackendLike = None, xp: Any = None, device: Any = None):
        # xp alone only picks the kernels (as before devices); device places the numbers.
        self.placement: Placement = HOST if device is None else placement(device, xp)
        if not self.placement.is_host:
            xp = self.placement.xp
        shape = tuple(int(s) for s in input_shape)
        if len(shape) not in (1, 3) or any(s < 1 for s in shape):
            raise ValueError(f"input_shape must be (features,) or (channels, H, W) with "
                             f"positive sizes, got {tuple(input_shape)!r}")
        self.input_shape = shape
        self.kind = "dense" if len(shape) == 1 else "conv"
        self.nclasses = _positive_int("nclasses", nclasses)
        self.width = _positive_int("width", width)
        self.nlayers = _positive_int("nlayers", nlayers)
        if isinstance(tstop, bool) or not isinstance(tstop, (int, float, np.floating)) or \
                not np.isfinite(tstop) or tstop <= 0:
            raise ValueError(f"tstop must be a positive number, got {tstop!r}")
        #: Final layer time: the layers step through [0, tstop].
        self.tstop = float(tstop)
        self.activation = get_activation(activation)
        self.activation_name = activation if isinstance(activation, str) else self.activation.name
        self.kernel = _positive_int("kernel", kernel)
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (zero padding keeps the image size), "
                             f"got {kernel}")
        if opening is None:
            opening = "dense" if self.kind == "dense" else "conv"
        if opening not in OPENINGS:
            raise ValueError(f"unknown opening {opening!r}; choose one of {', '.join(OPENINGS)}")
        if (opening, self.kind) in (("dense", "conv"), ("conv", "dense")):
            raise ValueError(f"opening {opening!r} does not fit a {self.kind} network with "
                             f"input shape {shape}")
        nin = shape[0]
        if opening in ("replicate", "zero-pad") and nin > self.width:
            what = "features" if self.kind == "dense" else "input channels"
            raise ValueError(f"opening {opening!r} needs {what} ({nin}) <= width ({self.width})")
        self.opening = opening
        self.opening_activation = bool(opening_activation)
        self.layer: Union[DenseLayer, ConvLayer]
        if self.kind == "dense":
            self.layer = DenseLayer(self.width, self.activation, backend=backend, xp=xp)
        else:
            self.layer = ConvLayer(self.width, self.kernel, self.activation, backend=backend,
                                   xp=xp)
        # Grid of braidpy.Core / XBraid: t_i = (i / N) * tstop.
        i = np.arange(self.nlayers + 1, dtype=np.float64)
        self.times = (i / self.nlayers) * self.tstop
        self.steps = np.diff(self.times)
        self._layout = self._make_layout()
        # (name, shape, start, stop) of each block in the flat vector
        self._spans: List[Tuple[str, Tuple[int, ...], int, int]] = []
        for name, shape in self._layout:
            start = self._spans[-1][3] if self._spans else 0
            self._spans.append((name, shape, start, start + math.prod(shape)))
        # The flat buffer of the serial gradient's block of states, kept for the next
        # one (see _sweep_block); taken out while in use, so a concurrent call makes
        # its own.
        self._sweep_workspace: Any = None
        # (parameters, u_0, buffer): the buffer holds their forward states (loss with
        # keep_states), until someone takes it.
        self._kept_forward: Optional[Tuple[Any, Any, Any]] = None
        #: Forward sweeps loss_and_gradient skipped, its point's states kept by loss.
        self.forward_sweeps_reused = 0
        self.nparams = self._spans[-1][3]

    # ------------------------------------------------------------------ layout
    @property
    def backend(self) -> str:
        """Name of the residual layers' kernel backend (e.g. ``"numpy"``), for run headers."""
        return self.layer.backend

    @property
    def state_shape(self) -> Tuple[int, ...]:
        """Shape of one sample's state (without the batch axis)."""
        return self.layer.state_shape(self.input_shape)

    @property
    def features(self) -> int:
        """Number of state entries per sample seen by the classifier."""
        return int(np.prod(self.state_shape))

    def _make_layout(self) -> List[Tuple[str, Tuple[int, ...]]]:
        q, N, k = self.width, self.nlayers, self.kernel
        layout: List[Tuple[str, Tuple[int, ...]]] = []
        if self.opening == "dense":
            layout += [("open_K", (q, self.input_shape[0])), ("open_b", (q,))]
        elif self.opening == "conv":
            layout += [("open_K", (q, self.input_shape[0], k, k)), ("open_b", (q,))]
        layout += [("K", (N,) + self.layer.weight_shape), ("b", (N,) + self.layer.bias_shape)]
        layout += [("W", (self.nclasses, self.features)), ("mu", (self.nclasses,))]
        return layout

    def views(self, params: Any) -> Dict[str, Any]:
        """Named views into the flat parameter vector (no copies)."""
        if getattr(params, "shape", None) != (self.nparams,):
            raise ValueError(f"params must be a flat vector of {self.nparams} entries, got "
                             f"shape {getattr(params, 'shape', None)}")
        if isinstance(params, np.ndarray):  # called several times a step: no lookups
            return {name: params[lo:hi].reshape(shape) for name, shape, lo, hi in self._spans}
        reshape = _namespace(params).reshape
        return {name: reshape(params[lo:hi], shape) for name, shape, lo, hi in self._spans}

    def slices(self) -> Dict[str, slice]:
        """Where each named block lives in the flat vector."""
        return {name: slice(lo, hi) for name, _, lo, hi in self._spans}

    def init_params(self, seed: Optional[int] = None, scale: float = 1.0) -> Any:
        """Random parameters: layer weights ~ N(0, 1/fan_in) * scale, biases zero.

        The classifier and a learned opening get the same fan-in scaling; with
        ``scale`` the residual layers can be made weaker or stronger. Drawn on the host
        (the same numbers on every device) and returned on :attr:`placement`.
        """
        rng = np.random.default_rng(seed)
        p = np.zeros(self.nparams)
        v = self.views(p)
        if "open_K" in v:
            fan = int(np.prod(v["open_K"].shape[1:]))
            v["open_K"][...] = rng.standard_normal(v["open_K"].shape) / np.sqrt(fan)
        fan = self.layer.fan_in
        v["K"][...] = scale * rng.standard_normal(v["K"].shape) / np.sqrt(fan)
        v["W"][...] = rng.standard_normal(v["W"].shape) / np.sqrt(self.features)
        return p if self.placement is HOST else self.placement.from_host(p)

    # ------------------------------------------------------------------ pieces
    def check_data(self, X: Any, C: Any = None) -> None:
        """Raise ValueError if X (and labels C) do not fit this network."""
        shape = tuple(getattr(X, "shape", ()))
        if shape[1:] != self.input_shape:
            raise ValueError(f"data samples have shape {shape[1:]} but the network expects "
                             f"input_shape {self.input_shape}")
        if C is not None:
            cs = tuple(getattr(C, "shape", ()))
            if cs != (shape[0], self.nclasses):
                raise ValueError(f"labels have shape {cs} but must be one-hot "
                                 f"({shape[0]}, nclasses={self.nclasses})")

    def open(self, params: Any, X: Any) -> Any:
        """u_0 = opening(X)."""
        v = self.views(params)
        act = self.activation if self.opening_activation else None
        if self.opening == "dense":
            return dense_opening(X, v["open_K"], v["open_b"], act)
        if self.opening == "conv":
            return conv_opening(X, v["open_K"], v["open_b"], act)
        if self.opening == "replicate":
            return replicate_opening(X, self.width)
        return zero_pad_opening(X, self.width)

    def opening_gradient(self, params: Any, X: Any, w0: Any) -> Dict[str, Any]:
        """{name: gradient} of the opening parameters for the adjoint w0 = dJ/du_0."""
        v = self.views(params)
        act = self.activation if self.opening_activation else None
        if self.opening == "dense":
            dK, db = dense_opening_gradient(w0, X, v["open_K"], v["open_b"], act)
        elif self.opening == "conv":
            dK, db = conv_opening_gradient(w0, X, v["open_K"], v["open_b"], act)
        else:
            return {}
        return {"open_K": dK, "open_b": db}

    # The residual layer's kernels under their older names (``self.layer`` owns them).
    def layer_forward(self, u: Any, K: Any, b: Any, h: float) -> Any:
        """``self.layer.forward``: one step of a residual layer."""
        return self.layer.forward(u, K, b, h)

    def layer_adjoint(self, w: Any, u: Any, K: Any, b: Any, h: float) -> Any:
        """``self.layer.adjoint``: the state adjoint of one step."""
        return self.layer.adjoint(w, u, K, b, h)

    def layer_gradient(self, w: Any, u: Any, K: Any, b: Any, h: float) -> Tuple[Any, Any]:
        """``self.layer.gradient``: the parameter gradient of one step."""
        return self.layer.gradient(w, u, K, b, h)

    def layers_forward_batched(self, U: Any, Ks: Any, bs: Any, hs: Any) -> Any:
        """``self.layer.forward_batched``: m steps at once."""
        return self.layer.forward_batched(U, Ks, bs, hs)

    def layers_adjoint_batched(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any) -> Any:
        """``self.layer.adjoint_batched``: m state adjoints at once."""
        return self.layer.adjoint_batched(W, U, Ks, bs, hs)

    def layers_gradient_batched(self, W: Any, U: Any, Ks: Any, bs: Any,
                                hs: Any) -> Tuple[Any, Any]:
        """``self.layer.gradient_batched``: m parameter gradients at once."""
        return self.layer.gradient_batched(W, U, Ks, bs, hs)

    # ------------------------------------------------------- serial reference
    def forward(self, params: Any, X: Any, keep: bool = False):
        """Serial forward sweep: u_N, or the list [u_0, ..., u_N] with keep=True."""
        v = self.views(params)
        u = self.open(params, X)
        hs = self.steps.tolist()  # Python floats: no NumPy scalar meets a device array
        if keep:
            return self._forward_states(v, u, hs)
        # One call where the layer has it, in place on u_0 when that is an array of the
        # opening's own (not X or the parameters).
        if not _shares(u, X, params) and self.layer.sweep_forward(u, v["K"], v["b"], hs):
            return u
        step = self.layer.forward
        for n in range(self.nlayers):
            u = step(u, v["K"][n, ...], v["b"][n, ...], hs[n])
        return u

    def loss(self, params: Any, X: Any, C: Any, *, keep_states: bool = False) -> float:
        """Mean cross-entropy loss of the serial forward sweep.

        ``keep_states``: sweep into the serial gradient's block of states and keep it,
        so that a :meth:`loss_and_gradient` at the same parameters and inputs next
        skips its forward sweep (a line search's last trial is the point of the next
        gradient). The same loss, bit for bit; where the layer has no compiled sweeps
        or the block would not be kept, the plain sweep."""
        v = self.views(params)
        if keep_states:
            kept = self._loss_keeping_states(params, X, C, v)
            if kept is not None:
                return kept
        return float(classifier_loss(self.forward(params, X), C, v["W"], v["mu"]))

    def _loss_keeping_states(self, params: Any, X: Any, C: Any, v: Dict[str, Any]
                             ) -> Optional[float]:
        """The loss by the forward sweep into the kept block, remembering the parameters
        and inputs it holds the states of; None where it cannot be kept."""
        u0 = self.open(params, X)
        if not isinstance(params, np.ndarray) or not self.layer.sweeps(u0, v["K"], v["b"]) \
                or (self.nlayers + 1) * u0.nbytes > SWEEP_WORKSPACE_MAX_BYTES:
            return None
        block = self._sweep_block(u0)
        try:
            if not self.layer.sweep_forward(block, v["K"], v["b"], self.steps.tolist()):
                return None
            loss = float(classifier_loss(block[-1], C, v["W"], v["mu"]))
            # The states follow from the parameters and u_0 (X only through u_0, which
            # is smaller than X where the opening reduces it).
            self._kept_forward = (params.copy(), u0.copy(), block.base)
        finally:
            self._keep_sweep_block(block)
        return loss

    def loss_and_gradient(self, params: Any, X: Any, C: Any) -> Tuple[float, Any]:
        """Loss and its gradient (on the parameters' device) by serial forward and
        backward propagation (the reference that layer-parallel training must reproduce)."""
        v = self.views(params)
        hs = self.steps.tolist()
        u0 = self.open(params, X)
        kept, self._kept_forward = self._kept_forward, None
        block: Optional[np.ndarray] = \
            self._sweep_block(u0) if self.layer.sweeps(u0, v["K"], v["b"]) else None
        try:
            # Both sweeps in one call each where the layer has them (the same bits as
            # the loops below), the states in one block kept for the next gradient; the
            # forward one not at all where the block holds this point's states already
            # (loss(keep_states=True) at these parameters and inputs).
            reused = block is not None and self._holds_states(kept, block, params, u0)
            self.forward_sweeps_reused += int(reused)
            swept = block is not None and (
                reused or self.layer.sweep_forward(block, v["K"], v["b"], hs))
            states: Any = block if swept else self._forward_states(v, u0, hs)
            loss, w, dW, dmu = classifier_gradient(states[-1], C, v["W"], v["mu"])
            grad = placement_of(params).zeros(self.nparams)
            g = self.views(grad)
            g["W"][...], g["mu"][...] = dW, dmu
            if swept:
                w = np.array(w, dtype=states.dtype, order="C")  # its own, written in place
                swept = self.layer.sweep_backward(w, block, v["K"], v["b"], hs, g["K"],
                                                  g["b"])
            if not swept:
                layer = self.layer
                for n in range(self.nlayers - 1, -1, -1):
                    K, b, h = v["K"][n, ...], v["b"][n, ...], hs[n]
                    w, dK, db = layer.adjoint_and_gradient(w, states[n], K, b, h)
                    g["K"][n, ...], g["b"][n, ...] = dK, db
        finally:
            self._keep_sweep_block(block)
        for name, value in self.opening_gradient(params, X, w).items():
            g[name][...] = value
        return float(loss), grad

    @staticmethod
    def _holds_states(kept: Any, block: Any, params: Any, u0: Any) -> bool:
        """Whether ``block`` is the buffer ``kept`` (from :meth:`loss` with
        keep_states) says holds the forward states of these parameters from u_0."""
        return kept is not None and block.base is kept[2] and \
            kept[0].shape == params.shape and np.array_equal(kept[0], params) and \
            kept[1].shape == u0.shape and np.array_equal(kept[1], u0)

    def _forward_states(self, v: Dict[str, Any], u: Any, hs: List[float]) -> List[Any]:
        """[u_0, ..., u_N] layer by layer from u_0 = u."""
        states = [u]
        step = self.layer.forward
        for n in range(self.nlayers):
            u = step(u, v["K"][n, ...], v["b"][n, ...], hs[n])
            states.append(u)
        return states

    def _sweep_block(self, u0: Any) -> np.ndarray:
        """A C-contiguous block of N + 1 states of u0's shape and dtype holding u0 first:
        in the buffer kept from the last gradient where it is large enough (batches
        of a few sizes, as the quality checks' blocks are, share one), else a new one."""
        shape = (self.nlayers + 1,) + u0.shape
        need = math.prod(shape)
        buffer, self._sweep_workspace = self._sweep_workspace, None
        self._kept_forward = None  # whoever takes the buffer overwrites its states
        if buffer is None or buffer.size < need or buffer.dtype != u0.dtype:
            buffer = np.empty(need, u0.dtype)
        block = buffer[:need].reshape(shape)
        block[0] = u0
        return block

    def _keep_sweep_block(self, block: Any) -> None:
        """Keep the serial gradient's buffer (flat) for the next one, if small enough."""
        if block is None:
            return
        buffer = block if block.base is None else block.base
        if buffer.nbytes <= SWEEP_WORKSPACE_MAX_BYTES:
            self._sweep_workspace = buffer

    # ------------------------------------------------------- batched evaluation
    def evaluation_batch(self, batch_size: Optional[int] = None) -> int:
        """Samples per evaluation batch: ``batch_size`` (an int >= 1), or None for the
        default, as many as keep one state within :data:`EVALUATION_STATE_BYTES`.

        >>> ResNet((2,), 5, width=8, nlayers=4).evaluation_batch()
        524288
        >>> ResNet((2,), 5, width=8, nlayers=4).evaluation_batch(0)
        Traceback (most recent call last):
        ...
        ValueError: batch_size must be an int >= 1 (or None: the default), got 0
        """
        if batch_size is None:
            return max(1, EVALUATION_STATE_BYTES // (8 * self.features))
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1 (or None: the default), "
                             f"got {batch_size!r}")
        return int(batch_size)

    def evaluation_batches(self, samples: int, batch_size: Optional[int] = None
                           ) -> List[slice]:
        """The consecutive slices of ``samples`` samples that evaluation takes in turn
        (the last one shorter where the size does not divide; one empty slice for no
        samples, so that the result keeps its shape).

        >>> ResNet((2,), 5, width=8, nlayers=4).evaluation_batches(5, 2)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
        """
        size = self.evaluation_batch(batch_size)
        return [slice(start, min(start + size, samples))
                for start in range(0, samples, size)] or [slice(0, 0)]

    def _batch_of(self, params: Any, X: Any, rows: slice) -> Any:
        """Rows of X on the parameters' device: a device array is sliced there; host data
        for device parameters are copied batch by batch (device memory stays bounded)."""
        part = X[rows.start:rows.stop, ...]
        if isinstance(part, np.ndarray) and not isinstance(params, np.ndarray):
            return placement_of(params).from_host(part, dtype=None)
        return part

    def _final_states(self, params: Any, X: Any, batch_size: Optional[int]):
        """(rows, u_N of those rows) batch by batch: the serial forward sweep of each."""
        for rows in self.evaluation_batches(int(X.shape[0]), batch_size):
            yield rows, self.forward(params, self._batch_of(params, X, rows))

    def evaluate(self, params: Any, X: Any, C: Any, batch_size: Optional[int] = None
                 ) -> Tuple[float, float]:
        """(mean cross-entropy loss, accuracy) of the serial forward sweep, batch by batch
        (:meth:`evaluation_batches`) on the parameters' device: one forward pass per
        batch, the loss sums and correct counts added up there, and two numbers copied
        back at the end. X and C may be on the host (copied a batch at a time).

        The accuracy is exact; the loss is the sum of the batches' sums divided by the
        samples, which may differ from :meth:`loss`'s one sum in the last bits (relative
        1e-12 is ample for millions of samples).
        """
        n, v = _samples("evaluate", X), self.views(params)
        loss: Any = 0.0
        correct: Any = 0
        for rows, u in self._final_states(params, X, batch_size):
            s, k = classifier_sums(u, self._batch_of(params, C, rows), v["W"], v["mu"])
            loss, correct = loss + s, correct + k
        return float(loss) / n, int(correct) / n

    def predict(self, params: Any, X: Any, batch_size: Optional[int] = None) -> Any:
        """Predicted class indices by the serial forward sweep, batch by batch (see
        :meth:`evaluate`); one integer array on the parameters' device."""
        v = self.views(params)
        parts = [classifier_predict(u, v["W"], v["mu"])
                 for _, u in self._final_states(params, X, batch_size)]
        return parts[0] if len(parts) == 1 else _concat(parts, 0, _namespace(parts[0]))

    def probabilities(self, params: Any, X: Any, batch_size: Optional[int] = None) -> Any:
        """Softmax class probabilities (samples x nclasses) by the serial forward sweep,
        batch by batch (see :meth:`evaluate`), on the parameters' device."""
        v = self.views(params)
        parts = [classifier_probabilities(u, v["W"], v["mu"])
                 for _, u in self._final_states(params, X, batch_size)]
        return parts[0] if len(parts) == 1 else _concat(parts, 0, _namespace(parts[0]))

    def accuracy(self, params: Any, X: Any, C: Any, batch_size: Optional[int] = None
                 ) -> float:
        """Fraction of samples classified correctly (serial forward sweep), batch by batch
        (see :meth:`evaluate`): the counts are added up on the device, one number comes
        back."""
        n, v = _samples("accuracy", X), self.views(params)
        correct: Any = 0
        for rows, u in self._final_states(params, X, batch_size):
            _, k = classifier_sums(u, self._batch_of(params, C, rows), v["W"], v["mu"],
                                   loss=False)
            correct = correct + k
        return int(correct) / n

    def describe(self) -> str:
        """One line: the architecture in words."""
        return (f"ResNet: {self.opening} opening -> {self.nlayers} x {self.layer.describe()} "
                f"({self.activation_name}, tstop={self.tstop:g}) -> softmax {self.nclasses}; "
                f"{self.nparams} parameters")


def _samples(what: str, X: Any) -> int:
    """The number of samples in X, which a mean over them needs to be at least one."""
    n = int(X.shape[0])
    if n == 0:
        raise ValueError(f"{what}: no samples (X has shape {tuple(X.shape)})")
    return n
