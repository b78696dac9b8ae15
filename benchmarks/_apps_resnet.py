"""Deep, narrow dense ResNet for bench_batched.py (braidpy.nn's dense kernels).

u_{n+1} = u_n + h tanh(u_n K_n^T + b_n), state (batch, width), its own weights per
layer (a coarse step from t_n uses layer n's weights with the coarse step size),
"trained-like" scale: K_n = Kbar + sigma G_n / sqrt(width) with Kbar a random
antisymmetric matrix (scaled 1.5) minus 0.1 I, sigma 0.5; b_n = bbar + 0.1 g_n;
layer time T = 2, so h = 2/N. J = |u_N - y|^2 / 2.
"""

from __future__ import annotations

import numpy as np

import braidpy
from braidpy.nn import (dense_adjoint, dense_adjoint_batched, dense_forward,
                        dense_forward_batched, dense_gradient, dense_gradient_batched)

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


def _rows(A, status):
    """A's rows for the batch: a strided view when the indices are evenly spaced."""
    sl = status.fine_slice
    return A[sl] if sl is not None else A[status.fine_indices]


class ResNet(braidpy.App):
    """The network as a braidpy app: step, step_stacked and the adjoint callbacks.

    kernel="lean": the layer math written inline against the array namespace (the
    same operations as serial_forward, in place, weights taken as strided views);
    kernel="nn": braidpy.nn's dense_forward(_batched) / dense_adjoint(_batched) /
    dense_gradient(_batched), which validate their arguments on every call.
    batched=False drops the batched hooks (the same app, one step per call).
    """

    def __init__(self, weights: ResNetWeights, batched: bool = True, kernel: str = "lean"):
        self.w = weights
        self.K, self.b = weights.K, weights.b
        self.KT = np.ascontiguousarray(np.swapaxes(weights.K, 1, 2))
        self.nn = kernel == "nn"
        if not batched:
            self.step_stacked = self.step_adjoint_batch = self.step_gradient_batch = None

    def init(self, t):
        return self.w.u0.copy() if t == self.tstart else np.zeros_like(self.w.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        if self.nn:
            return dense_forward(u, self.K[n], self.b[n], t1 - t0, "tanh")
        xp = np if type(u) is np.ndarray else u.__array_namespace__()
        z = xp.matmul(u, self.KT[n])
        z += self.b[n]
        z = xp.tanh(z, out=z) if xp is np else xp.tanh(z)
        z *= t1 - t0
        u += z
        return None

    def step_stacked(self, U, t0s, t1s, status):
        if self.nn:
            n = status.fine_indices
            return dense_forward_batched(U, self.K[n], self.b[n], t1s - t0s, "tanh")
        xp = np if type(U) is np.ndarray else U.__array_namespace__()
        z = xp.matmul(U, _rows(self.KT, status))
        z += _rows(self.b, status)[:, None, :]
        z = xp.tanh(z, out=z) if xp is np else xp.tanh(z)
        z *= (t1s - t0s)[:, None, None]
        U += z
        return None

    def step_adjoint(self, w, u, t0, t1, status):
        n = status.fine_index
        if self.nn:
            return dense_adjoint(w, u, self.K[n], self.b[n], t1 - t0, "tanh")
        t = np.tanh(u @ self.KT[n] + self.b[n])
        g = (t1 - t0) * (w * (1.0 - t * t))
        w += g @ self.K[n]
        return None

    def step_adjoint_batch(self, W, U, t0s, t1s, status):
        if self.nn:
            n = status.fine_indices
            return dense_adjoint_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh")
        t = np.tanh(np.matmul(U, _rows(self.KT, status)) + _rows(self.b, status)[:, None, :])
        g = (t1s - t0s)[:, None, None] * (W * (1.0 - t * t))
        W += np.matmul(g, _rows(self.K, status))
        return None

    def step_gradient(self, w, u, t0, t1, status):
        n = status.fine_index
        if self.nn:
            return dense_gradient(w, u, self.K[n], self.b[n], t1 - t0, "tanh")
        t = np.tanh(u @ self.KT[n] + self.b[n])
        g = (t1 - t0) * (w * (1.0 - t * t))
        return g.T @ u, g.sum(axis=0)

    def step_gradient_batch(self, W, U, t0s, t1s, status):
        if self.nn:
            n = status.fine_indices
            dK, db = dense_gradient_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh")
        else:
            t = np.tanh(np.matmul(U, _rows(self.KT, status)) + _rows(self.b, status)[:, None, :])
            g = (t1s - t0s)[:, None, None] * (W * (1.0 - t * t))
            dK, db = np.matmul(np.swapaxes(g, 1, 2), U), g.sum(axis=1)
        return list(zip(dK, db))

    def terminal_objective(self, u):
        return 0.5 * float(np.sum((u - self.w.target) ** 2))

    def terminal_gradient(self, u):
        return u - self.w.target


def nn_resnet(w: ResNetWeights):
    """The same network as braidpy.nn objects: (ResNet, params, X, C).

    Replicate opening (u_0 = X, width features), layers K_n, b_n and T as above,
    a cross-entropy classifier over `width` classes on u_N (random W, mu = 0).
    """
    from braidpy.nn import ResNet as NNResNet

    batch, width = w.u0.shape
    net = NNResNet((width,), width, width=width, nlayers=w.ntime, tstop=TSTOP, activation="tanh",
                   opening="replicate")
    params = np.zeros(net.nparams)
    v = net.views(params)
    v["K"][...], v["b"][...] = w.K, w.b
    v["W"][...] = np.random.default_rng(7).standard_normal((width, width)) / np.sqrt(width)
    C = np.eye(width)[np.arange(batch) % width]
    return net, params, w.u0.copy(), C


def serial_forward(w: ResNetWeights) -> np.ndarray:
    """Plain NumPy loop over the layers (the baseline): the output u_N."""
    N = w.ntime
    t = (np.arange(N + 1) / N) * TSTOP
    h = np.diff(t).tolist()
    KT, b = np.ascontiguousarray(np.swapaxes(w.K, 1, 2)), w.b
    u = w.u0.copy()
    for n in range(N):
        u = u + h[n] * np.tanh(u @ KT[n] + b[n])
    return u


def serial_gradient(w: ResNetWeights):
    """Forward sweep keeping the states, then backpropagation: (J, dK, db)."""
    N = w.ntime
    t = (np.arange(N + 1) / N) * TSTOP
    h = np.diff(t).tolist()
    K, b = w.K, w.b
    KT = np.ascontiguousarray(np.swapaxes(K, 1, 2))
    us = [w.u0.copy()]
    u = us[0]
    for n in range(N):
        u = u + h[n] * np.tanh(u @ KT[n] + b[n])
        us.append(u)
    J = 0.5 * float(np.sum((u - w.target) ** 2))
    a = u - w.target
    dK = np.empty_like(K)
    db = np.empty_like(b)
    for n in range(N - 1, -1, -1):
        t = np.tanh(us[n] @ KT[n] + b[n])
        g = h[n] * (a * (1.0 - t * t))
        dK[n] = g.T @ us[n]
        db[n] = g.sum(axis=0)
        a = a + g @ K[n]
    return J, dK, db
