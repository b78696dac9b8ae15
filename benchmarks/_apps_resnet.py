"""Deep, narrow dense ResNet for bench_batched.py, as a braidpy app and as plain NumPy loops.

u_{n+1} = u_n + h tanh(u_n K_n^T + b_n), state (batch, width), T = 2, h = 2/N, weights
per layer K_n = Kbar + sigma G_n / sqrt(width) (Kbar antisymmetric x 1.5 - 0.1 I),
b_n = bbar + 0.1 g_n; J = |u_N - y|^2 / 2.
"""

from __future__ import annotations

import numpy as np

import braidpy

TSTOP = 2.0


class ResNetWeights:
    """Per-layer weights, input batch and target."""

    def __init__(self, ntime: int, width: int = 8, batch: int = 1, sigma: float = 0.5,
                 seed: int = 20241121):
        rng = np.random.default_rng(seed + ntime)
        a = rng.standard_normal((width, width)) / np.sqrt(width)
        kbar = 1.5 * (a - a.T) - 0.1 * np.eye(width)
        self.K = kbar + sigma * rng.standard_normal((ntime, width, width)) / np.sqrt(width)
        self.b = 0.3 * rng.standard_normal(width) + 0.1 * rng.standard_normal((ntime, width))
        self.u0 = rng.standard_normal((batch, width))
        self.target = rng.standard_normal((batch, width))
        self.ntime = ntime

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.K += scale * rng.standard_normal(self.K.shape)
        self.b += scale * rng.standard_normal(self.b.shape)


def _transposed(K):
    return np.ascontiguousarray(np.swapaxes(K, 1, 2))


def _rows(A, status):
    """A's rows for the batch: a strided view when the indices are evenly spaced."""
    sl = status.fine_slice
    return A[sl] if sl is not None else A[status.fine_indices]


class ResNet(braidpy.App):
    """The network as a braidpy app: the layer math inline and in place (the operations of
    serial_forward), the weights taken as strided views; batched and adjoint callbacks."""

    def __init__(self, weights: ResNetWeights):
        self.w, self.KT = weights, _transposed(weights.K)

    def init(self, t):
        return self.w.u0.copy() if t == self.tstart else np.zeros_like(self.w.u0)

    def step(self, u, t0, t1, status):
        z = np.matmul(u, self.KT[status.fine_index])
        z += self.w.b[status.fine_index]
        np.tanh(z, out=z)
        z *= t1 - t0
        u += z

    def step_stacked(self, U, t0s, t1s, status):
        z = np.matmul(U, _rows(self.KT, status))
        z += _rows(self.w.b, status)[:, None, :]
        np.tanh(z, out=z)
        z *= (t1s - t0s)[:, None, None]
        U += z

    def _g(self, W, U, KT, b, h):
        """h (w * tanh'(u K^T + b)): the pre-activation adjoint (stacked or not)."""
        t = np.tanh(np.matmul(U, KT) + b)
        return h * (W * (1.0 - t * t))

    def step_adjoint(self, w, u, t0, t1, status):
        n = status.fine_index
        w += self._g(w, u, self.KT[n], self.w.b[n], t1 - t0) @ self.w.K[n]

    def step_adjoint_batch(self, W, U, t0s, t1s, status):
        g = self._g(W, U, _rows(self.KT, status), _rows(self.w.b, status)[:, None, :],
                    (t1s - t0s)[:, None, None])
        W += np.matmul(g, _rows(self.w.K, status))

    def step_gradient(self, w, u, t0, t1, status):
        n = status.fine_index
        g = self._g(w, u, self.KT[n], self.w.b[n], t1 - t0)
        return g.T @ u, g.sum(axis=0)

    def step_gradient_batch(self, W, U, t0s, t1s, status):
        g = self._g(W, U, _rows(self.KT, status), _rows(self.w.b, status)[:, None, :],
                    (t1s - t0s)[:, None, None])
        return list(zip(np.matmul(np.swapaxes(g, 1, 2), U), g.sum(axis=1)))

    def terminal_objective(self, u):
        return 0.5 * float(np.sum((u - self.w.target) ** 2))

    def terminal_gradient(self, u):
        return u - self.w.target


def nn_resnet(w: ResNetWeights):
    """The same network as braidpy.nn objects: (ResNet, params, X, C). Replicate opening
    (u_0 = X, width features), layers K_n, b_n and T as above, a cross-entropy classifier
    over ``width`` classes on u_N (random W, mu = 0)."""
    from braidpy.nn import ResNet as NNResNet

    batch, width = w.u0.shape
    net = NNResNet((width,), width, width=width, nlayers=w.ntime, tstop=TSTOP,
                   activation="tanh", opening="replicate")
    params = np.zeros(net.nparams)
    v = net.views(params)
    v["K"][...], v["b"][...] = w.K, w.b
    v["W"][...] = np.random.default_rng(7).standard_normal((width, width)) / np.sqrt(width)
    return net, params, w.u0.copy(), np.eye(width)[np.arange(batch) % width]


def serial_forward(w: ResNetWeights, keep: bool = False):
    """A plain NumPy loop over the layers (the baseline): u_N; ``keep``: the step sizes
    and every state u_0 ... u_N."""
    h = np.diff((np.arange(w.ntime + 1) / w.ntime) * TSTOP).tolist()
    KT, u = _transposed(w.K), w.u0.copy()
    us = [u]
    for n in range(w.ntime):
        u = u + h[n] * np.tanh(u @ KT[n] + w.b[n])
        if keep:
            us.append(u)
    return (h, us, KT) if keep else u


def serial_gradient(w: ResNetWeights):
    """Forward sweep keeping the states, then backpropagation: (J, dK, db)."""
    h, us, KT = serial_forward(w, keep=True)
    a = us[-1] - w.target
    J = 0.5 * float(np.sum(a ** 2))
    dK, db = np.empty_like(w.K), np.empty_like(w.b)
    for n in range(w.ntime - 1, -1, -1):
        t = np.tanh(us[n] @ KT[n] + w.b[n])
        g = h[n] * (a * (1.0 - t * t))
        dK[n], db[n] = g.T @ us[n], g.sum(axis=0)
        a = a + g @ w.K[n]
    return J, dK, db
