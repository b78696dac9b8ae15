"""The GPU benchmarks' shared pieces: the array module (CuPy on a GPU, else NumPy and why),
synchronization, PyTorch, timers, and bench_gpu.py's dense ResNet app and loops."""

from __future__ import annotations

import importlib
import warnings

import numpy as np

import braidpy

from _harness import best

WIDTH, BATCH, TSTOP, CFACTOR = 8, 32, 2.0, 64


def array_module():
    """(xp, description): CuPy with a working device, else NumPy and why."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp = importlib.import_module("cupy")
            if cp.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
            float(cp.arange(2.0).sum())
        return cp, f"CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name']}"
    except Exception as exc:  # noqa: BLE001 - any failure means "no GPU here"
        return np, f"no GPU found ({type(exc).__name__}: {exc}); running the NumPy path"


def sync(xp):
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def free(xp):
    """CuPy's cached blocks back to the device."""
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def torch_for(device):
    """(torch, None) where PyTorch imports and sees the device, else (None, why)."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # noqa: BLE001 - a broken install counts as missing
        return None, f"PyTorch is not installed ({type(exc).__name__}: {exc})"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() False)"
    return torch, None


def torch_cuda():
    """torch, if it imports and sees a GPU (else None and a printed reason)."""
    torch, why = torch_for("cuda")
    if why:
        print(f"  (no PyTorch GPU reference: {why})")
    return torch


def timed(xp, fn, repeats):
    """Min seconds of fn over repeats, synchronized, after a warm-up call."""
    fn()
    sync(xp)
    return best(fn, repeats, sync=lambda: sync(xp))


def per_call(xp, fn, calls, repeats=3):
    """Seconds per call of fn: min of ``repeats`` loops of ``calls``, synchronized."""
    def loop():
        for _ in range(calls):
            fn()
    sync(xp)
    return best(loop, repeats, sync=lambda: sync(xp)) / calls


def weights(xp, n):
    k = np.arange(n * WIDTH * WIDTH, dtype=np.float64).reshape(n, WIDTH, WIDTH)
    K = 0.5 * np.sin(0.37 * k) / np.sqrt(WIDTH)
    b = 0.1 * np.cos(0.11 * np.arange(n * WIDTH)).reshape(n, WIDTH)
    return xp.asarray(K), xp.asarray(b)


class ResNet(braidpy.App):
    """u <- u + h tanh(u K_n^T + b_n), one state per time point; a stacked step per call."""

    def __init__(self, xp, K, b, u0):
        self.xp, self.K, self.b, self.u0, self._hs = xp, K, b, u0, {}

    def init(self, t):
        return self.u0.copy() if t == self.tstart else self.xp.zeros_like(self.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        u += (t1 - t0) * self.xp.tanh(u @ self.K[n].T + self.b[n])

    def step_stacked(self, U, t0s, t1s, status):
        s, hs = status.fine_slice, t1s - t0s
        if hs.tobytes() not in self._hs:  # the step sizes copied to the device once
            self._hs[hs.tobytes()] = self.xp.asarray(hs).reshape(-1, 1, 1)
        U += self._hs[hs.tobytes()] * self.xp.tanh(U @ self.K[s].transpose(0, 2, 1)
                                                   + self.b[s][:, None, :])


def serial(xp, K, b, u0, n):
    u, h = u0.copy(), TSTOP / n
    for k in range(n):
        u += h * xp.tanh(u @ K[k].T + b[k])
    sync(xp)
    return u


def mgrit(xp, K, b, u0, n, levels=2, cfactor=CFACTOR, app=ResNet, **stop):
    """braidpy.solve of the ResNet (or ``app``); max_iter 2 and abs_tol 0 unless given."""
    r = braidpy.solve(app(xp, K, b, u0), 0.0, TSTOP, n, max_levels=levels, cfactor=cfactor,
                      nrelax=0, access_level=0, **{"max_iter": 2, "abs_tol": 0.0, **stop})
    sync(xp)
    return r


def gradient_times(xp, net, X, C, cfactors, repeats):
    """({"serial": s, cf: s, ...}, solver(cf)): seconds of net.loss_and_gradient (serial
    fwd+bwd) and, per cfactor, of a new one-shot (2, 2) GradientSolver's gradient (2
    levels, F-relaxation, set-up included); each warmed up, min over repeats."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNetApp

    params = net.init_params(seed=7)
    app = ResNetApp(net, params, X, C)

    def solver(cf):
        return GradientSolver(app, 0.0, net.tstop, net.nlayers, oneshot=(2, 2),
                              primal=dict(max_levels=2, cfactor=cf, nrelax=0))

    t = {"serial": timed(xp, lambda: net.loss_and_gradient(params, X, C), repeats)}
    t.update({cf: timed(xp, lambda: solver(cf).evaluate(), repeats) for cf in cfactors})
    return t, solver


_TORCH_NETS: dict = {}


def torch_fwd_bwd(torch, key, kshape, scale, ushape, layer):
    """PyTorch autograd, float64 on the GPU: u <- u + h tanh(layer(u, K_n, b_n)) over
    kshape[0] layers, then backward of |u|^2 (weights and input made once per key)."""
    n = kshape[0]
    if key not in _TORCH_NETS:
        gen = torch.Generator().manual_seed(7)
        K = (torch.randn(kshape, generator=gen, dtype=torch.float64) / scale).cuda()
        b = torch.zeros(n, kshape[1], dtype=torch.float64, device="cuda", requires_grad=True)
        u0 = torch.randn(ushape, generator=gen, dtype=torch.float64).cuda()
        _TORCH_NETS[key] = (K.requires_grad_(), b, u0)
    K, b, u = _TORCH_NETS[key]
    K.grad = b.grad = None
    for k in range(n):
        u = u + TSTOP / n * torch.tanh(layer(u, K[k], b[k]))
    (u * u).sum().backward()
    torch.cuda.synchronize()
