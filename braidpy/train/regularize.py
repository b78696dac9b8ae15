"""Regularization of ResNet parameters: Tikhonov and smoothness in layer time.

With layer weights theta_n = (K_n, b_n), step sizes h_n, opening and classifier
parameters, the regularizer is

    R = gamma_tik/2 * sum_n h_n ||theta_n||^2                       (layers, a quadrature
                                                                       of the integral of
                                                                       ||theta(t)||^2)
      + gamma_class/2 * (||W||^2 + ||mu||^2 + ||opening||^2)
      + gamma_ddt/2 * sum_{n=0}^{N-2} ||theta_{n+1} - theta_n||^2 / h_n

following Günther et al. (2020), eq. (2.10) and the time-derivative penalty of their
sec. 2.1; the ddt term couples neighbouring layers, which may live on different ranks
(braidpy's trainers replicate the parameters, so no messages are needed).
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from .._device import placement_of
from ..nn.network import ResNet

__all__ = ["Regularizer"]


class Regularizer:
    """Value and gradient of R for a flat parameter vector of ``net``.

    Examples
    --------
    >>> from braidpy.nn import ResNet
    >>> net = ResNet((2,), 3, width=4, nlayers=5)
    >>> reg = Regularizer(net, tikhonov=1e-3, ddt=1e-2, classifier=1e-4)
    >>> p = net.init_params(seed=1)
    >>> value, grad = reg(p)
    >>> bool(value > 0), grad.shape == p.shape
    (True, True)
    """

    def __init__(self, net: ResNet, tikhonov: float = 0.0, ddt: float = 0.0,
                 classifier: float = 0.0):
        for name, value in (("tikhonov", tikhonov), ("ddt", ddt), ("classifier", classifier)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not np.isfinite(value) or value < 0:
                raise ValueError(f"regularization weight {name} must be a number >= 0, "
                                 f"got {value!r}")
        self.net = net
        self.tikhonov = float(tikhonov)
        self.ddt = float(ddt)
        self.classifier = float(classifier)

    @property
    def active(self) -> bool:
        return bool(self.tikhonov or self.ddt or self.classifier)

    def __call__(self, params: Any) -> Tuple[float, Any]:
        """(R, dR/dparams), the gradient on the parameters' device."""
        net = self.net
        where = placement_of(params)
        grad = where.zeros(net.nparams)
        if not self.active:
            return 0.0, grad
        xp = where.xp
        v, g = net.views(params), net.views(grad)
        h = net.steps if where.is_host else where.from_host(net.steps)
        N = net.nlayers
        value = 0.0
        for name in ("K", "b"):
            theta = v[name]
            ndim = len(theta.shape)
            shape = (N,) + (1,) * (ndim - 1)
            if self.tikhonov:
                sq = xp.sum(theta * theta, axis=tuple(range(1, ndim)))
                value += 0.5 * self.tikhonov * float(h @ sq)
                g[name][...] += self.tikhonov * xp.reshape(h, shape) * theta
            if self.ddt and N > 1:
                diff = theta[1:, ...] - theta[:-1, ...]  # theta_{n+1} - theta_n, n = 0..N-2
                sq = xp.sum(diff * diff, axis=tuple(range(1, ndim)))
                value += 0.5 * self.ddt * float(xp.sum(sq / h[:-1]))
                scaled = self.ddt * diff / xp.reshape(h[:-1], (N - 1,) + shape[1:])
                g[name][1:, ...] += scaled
                g[name][:-1, ...] -= scaled
        if self.classifier:
            for name in ("W", "mu", "open_K", "open_b"):
                if name in v:
                    value += 0.5 * self.classifier * float(xp.sum(v[name] * v[name]))
                    g[name][...] += self.classifier * v[name]
        return value, grad
