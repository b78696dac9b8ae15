"""A ResNet's layer-time propagation as a braidpy app, with the adjoint callbacks.

:class:`ResNetApp` wraps a :class:`braidpy.nn.ResNet`, a flat parameter vector and one
batch of data. The MGRIT state at layer time t_n is the whole batch's state u_n
(batch x width, or batch x channels x H x W). Step n uses layer n's weights; on coarse
levels the step from coarse point t_n to t_{n+s} reuses the fine layer n with the
coarse step size t_{n+s} - t_n (Günther et al. 2020, sec. 3). The opening layer runs in
``init`` at t = 0, so only the rank owning the first layer evaluates it; the
classifier runs in the terminal callbacks, so only the rank owning the last layer does.
Every step callback hands the layer's weights to the network's layer object
(:attr:`braidpy.nn.ResNet.layer`), which owns the kernels; the app does not know whether
the layers are dense or convolutional.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from .._app import App
from .._device import placement_of
from ._common import _namespace, _on_device_of
from .layers import classifier_gradient, classifier_loss
from .network import ResNet

__all__ = ["ResNetApp"]

#: Distinct sets of batched step sizes kept on the device per app (a two-level
#: hierarchy uses a handful; the cache is emptied when full).
_STEP_CACHE_SIZE = 256


class ResNetApp(App):
    """MGRIT app of a ResNet for one batch (X, C) and parameters ``params``.

    ``params`` is held by reference: updating it in place (as the optimizers of
    :mod:`braidpy.train` do) changes the network seen by the next solve. Call
    :meth:`set_batch` to switch data.

    After a gradient evaluation the rank owning the last layer holds the classifier's
    gradient in :attr:`classifier_grad` ({"W": ..., "mu": ...}).

    Warm-start guesses for a cold solve (used to resume training exactly) can be put in
    :attr:`guess` and :attr:`adjoint_guesses` ({fine index: array}).

    :attr:`slope_cache` is the layer's :class:`braidpy.nn.dense.SlopeCache` (dense layers
    on the NumPy kernels; else None): the adjoint keeps the activation's slopes at its
    first visit of a layer and reads them at the others, forgotten in
    :meth:`primal_solved`.
    """

    def __init__(self, net: ResNet, params: Any, X: Any, C: Any = None):
        self.net = net
        # The layer object (DenseLayer, ConvLayer, or a subclass app's wrapper of one).
        self.layer: Any = net.layer
        self.params = params
        where = placement_of(params)
        if not where.is_host:  # states received from other ranks are built there too
            self.array_namespace, self.array_device = where.xp, where.device
        self._views = net.views(params)
        self._u0: Any = None  # the opening's output, once computed
        # The activation's slopes kept over one gradient's adjoint, where the layer
        # offers it (braidpy.nn.dense.SlopeCache; reset by primal_solved).
        make_cache = getattr(self.layer, "slope_cache", None)
        self.slope_cache: Any = make_cache(net.nlayers) if callable(make_cache) else None
        self.set_batch(X, C)
        self._index = dict(zip(net.times.tolist(), range(len(net.times))))  # float keys
        self.classifier_grad: Dict[str, Any] = {}
        self.guesses: Dict[int, Any] = {}
        self.adjoint_guesses: Dict[int, Any] = {}

    def set_batch(self, X: Any, C: Any = None) -> None:
        """Use data X (and one-hot labels C) from the next solve on."""
        self.net.check_data(X, C)
        self.X, self.C = X, C
        self._u0 = None
        self.primal_solved()

    def initial_state(self) -> Any:
        """u_0 = opening(X) for the current parameters (a new array)."""
        return self.net.open(self.params, self.X)

    def opening_gradient(self, w0: Any) -> Dict[str, Any]:
        """{name: gradient} of the opening's parameters for the adjoint w0 = dJ/du_0 of
        the current batch (see :meth:`braidpy.nn.ResNet.opening_gradient`)."""
        return self.net.opening_gradient(self.params, self.X, w0)

    def classifier_state(self, u: Any) -> Any:
        """The state the classifier reads for the final state ``u``: ``u`` itself (an
        app whose states are parts of the image joins them here)."""
        return u

    # ------------------------------------------------------------- primal
    def init(self, t: float) -> Any:
        n = self._index.get(float(t))
        if n == 0:
            self._u0 = self.initial_state()
            return self.clone(self._u0)
        if n in self.guesses:
            return self.clone(self.guesses[n])
        # Before any solve the opening output is the best cheap guess of every state.
        if self._u0 is None:
            self._u0 = self.initial_state()
        return self.clone(self._u0)

    def step(self, u: Any, t0: float, t1: float, status: Any) -> Any:
        n = status.fine_index
        v = self._views
        return self.layer.forward(u, v["K"][n, ...], v["b"][n, ...], t1 - t0)

    def step_stacked(self, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        """Batched relaxation (docs/batching.md): row k is step status.fine_indices[k].
        Layers that can (``batched_out``) advance U where it lies: returned as itself,
        the core has nothing to copy back."""
        return self._forward(U, U, t0s, t1s, status)

    def step_stacked_into(self, U: Any, out: Any, t0s: Any, t1s: Any, status: Any) -> None:
        """step_stacked out of place (docs/batching.md): the steps of U's rows written
        into out, U unchanged (directly where the layer can, ``batched_out``; else
        copied). A sweep then starts from its C-points where they lie, and one that
        keeps every state (the final sweep of a training solve) has them written where
        they are kept."""
        r = self._forward(U, out, t0s, t1s, status)
        if r is not out:
            out[...] = r

    def _forward(self, U: Any, out: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        """The layer's batched forward steps of U's rows: written into ``out`` where the
        layer writes without a copy (``batched_out``; out returned), else a new array."""
        v, sl = self._views, status.fine_slice
        args = (U, v["K"][sl, ...], v["b"][sl, ...], self._steps(t0s, t1s, U))
        if getattr(self.layer, "batched_out", False):
            return self.layer.forward_batched(*args, out=out)
        return self.layer.forward_batched(*args)

    def _steps(self, t0s: Any, t1s: Any, U: Any) -> Any:
        hs = t1s - t0s  # the same float64 subtraction as t1 - t0 in step()
        if isinstance(U, np.ndarray):
            return hs
        # On a device (e.g. CuPy) the step sizes go there once per distinct set: every
        # sweep repeats the same few, and a host-to-device copy per batched call costs
        # more than the call's kernels on a narrow network.
        key = (hs.tobytes(), str(U.dtype), str(getattr(U, "device", "")))
        cache = self.__dict__.setdefault("_device_steps", {})
        if key not in cache:
            if len(cache) >= _STEP_CACHE_SIZE:
                cache.clear()
            cache[key] = _on_device_of(U, hs, _namespace(U))
        return cache[key]

    # ------------------------------------------------------------ adjoint
    def primal_solved(self) -> None:
        """Called by braidpy.adjoint on every rank when it evaluates the objective of a
        primal solve, before any adjoint step (and by set_batch): the primal states are
        new, so the kept slopes are forgotten."""
        if self.slope_cache is not None:
            self.slope_cache.reset()

    def step_adjoint_batch(self, W: Any, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        """The adjoints W of the steps status.fine_indices, advanced in place where the
        layer can (``batched_out``; W is returned), else as a new array. Layers with a
        slope cache keep the activation's slopes at the first visit of a layer and read
        them at the others (the same bits, without the product U K^T)."""
        return self._adjoint(W, U, W, t0s, t1s, status)

    def step_adjoint_batch_into(self, W: Any, U: Any, out: Any, t0s: Any, t1s: Any,
                                status: Any) -> None:
        """step_adjoint_batch out of place (braidpy.adjoint): the adjoint steps of W's
        rows written into out, W unchanged (directly where the layer can, else copied)."""
        r = self._adjoint(W, U, out, t0s, t1s, status)
        if r is not out:
            out[...] = r

    def _adjoint(self, W: Any, U: Any, out: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        """The batched adjoint steps of W's rows: into ``out`` where the slope cache or
        the layer writes without a copy (out returned), else a new array."""
        v, sl = self._views, status.fine_slice
        Ks, bs, hs = v["K"][sl, ...], v["b"][sl, ...], self._steps(t0s, t1s, U)
        if self.slope_cache is not None:
            done = self.slope_cache.adjoint(W, U, Ks, bs, hs, sl,
                                            out=None if out is W else out)
            if done is not None:
                return done
        if getattr(self.layer, "batched_out", False):
            return self.layer.adjoint_batched(W, U, Ks, bs, hs, out=out)
        return self.layer.adjoint_batched(W, U, Ks, bs, hs)

    def step_gradient_batch(self, W: Any, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        v, sl = self._views, status.fine_slice
        Ks, bs, hs = v["K"][sl, ...], v["b"][sl, ...], self._steps(t0s, t1s, U)
        cache = self.slope_cache
        kept = None if cache is None else cache.gradient(W, U, Ks, bs, hs, sl)
        dKs, dbs = kept if kept is not None else self.layer.gradient_batched(W, U, Ks, bs, hs)
        return [(dKs[k, ...], dbs[k, ...]) for k in range(dKs.shape[0])]

    def step_adjoint(self, w: Any, u: Any, t0: float, t1: float, status: Any) -> Any:
        n = status.fine_index
        v = self._views
        K, b = v["K"][n, ...], v["b"][n, ...]
        if self.slope_cache is not None:  # the coarsest level's sequential steps
            done = self.slope_cache.adjoint_one(w, u, K, b, t1 - t0, n)
            if done is not None:
                return done
        return self.layer.adjoint(w, u, K, b, t1 - t0)

    def step_gradient(self, w: Any, u: Any, t0: float, t1: float, status: Any) -> Any:
        n = status.fine_index
        v = self._views
        return self.layer.gradient(w, u, v["K"][n, ...], v["b"][n, ...], t1 - t0)

    def terminal_objective(self, u: Any) -> float:
        v = self._views
        return float(classifier_loss(u, self.C, v["W"], v["mu"]))

    def terminal_gradient(self, u: Any) -> Any:
        v = self._views
        _, du, dW, dmu = classifier_gradient(u, self.C, v["W"], v["mu"])
        self.classifier_grad = {"W": dW, "mu": dmu}
        return du

    def adjoint_guess(self, n: int) -> Optional[Any]:
        """Guess of the adjoint w_n on a cold adjoint solve (None: zero)."""
        g = self.adjoint_guesses.get(n)
        return None if g is None else self.clone(g)
