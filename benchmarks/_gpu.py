"""The GPU benchmarks' shared pieces: the array module (CuPy on a GPU, else NumPy and why),
synchronization, PyTorch on CUDA, and bench_gpu.py's dense ResNet app and loops."""

from __future__ import annotations

import importlib
import warnings

import numpy as np

import braidpy

from _harness import best  # noqa: F401 - the GPU scripts' timer

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


def torch_cuda():
    """torch, if it imports and sees a GPU (else None and a printed reason)."""
    try:
        torch = importlib.import_module("torch")
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        return torch
    except Exception as exc:  # noqa: BLE001 - the reference is optional
        print(f"  (no PyTorch GPU reference: {type(exc).__name__}: {exc})")
        return None


def weights(xp, n):
    k = np.arange(n * WIDTH * WIDTH, dtype=np.float64).reshape(n, WIDTH, WIDTH)
    K = 0.5 * np.sin(0.37 * k) / np.sqrt(WIDTH)
    b = 0.1 * np.cos(0.11 * np.arange(n * WIDTH)).reshape(n, WIDTH)
    return xp.asarray(K), xp.asarray(b)


class ResNet(braidpy.App):
    def __init__(self, xp, K, b, u0):
        self.xp, self.K, self.b, self.u0 = xp, K, b, u0

    def init(self, t):
        return self.u0.copy() if t == self.tstart else self.xp.zeros_like(self.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        u += (t1 - t0) * self.xp.tanh(u @ self.K[n].T + self.b[n])

    def step_stacked(self, U, t0s, t1s, status):
        s = status.fine_slice
        U += self._steps(t1s - t0s) * self.xp.tanh(U @ self.K[s].transpose(0, 2, 1)
                                                   + self.b[s][:, None, :])

    def _steps(self, hs):
        """hs as an (m, 1, 1) device array, copied to the device once per distinct set."""
        cache = self.__dict__.setdefault("_hs", {})
        key = hs.tobytes()
        if key not in cache:
            cache[key] = self.xp.asarray(hs).reshape(-1, 1, 1)
        return cache[key]


def serial(xp, K, b, u0, n):
    u, h = u0.copy(), TSTOP / n
    for k in range(n):
        u += h * xp.tanh(u @ K[k].T + b[k])
    sync(xp)
    return u


def mgrit(xp, K, b, u0, n, levels=2, cfactor=CFACTOR, **stop):
    """braidpy.solve of the ResNet; ``stop``: max_iter 2 and abs_tol 0 unless given."""
    stop = {"max_iter": 2, "abs_tol": 0.0, **stop}
    r = braidpy.solve(ResNet(xp, K, b, u0), 0.0, TSTOP, n, max_levels=levels, cfactor=cfactor,
                      nrelax=0, access_level=0, **stop)
    sync(xp)
    return r


_TORCH_NETS = {}


def _torch_residual_fwd_bwd(torch, key, kshape, scale, ushape, layer):
    """u <- u + h tanh(layer(u, K_n, b_n)) over kshape[0] layers, then backward of
    |u|^2 (weights and input made once per key, fixed seed)."""
    n = kshape[0]
    if key not in _TORCH_NETS:
        gen = torch.Generator().manual_seed(7)
        K = (torch.randn(kshape, generator=gen, dtype=torch.float64) / scale).cuda()
        b = torch.zeros(n, kshape[1], dtype=torch.float64, device="cuda", requires_grad=True)
        u0 = torch.randn(ushape, generator=gen, dtype=torch.float64).cuda()
        _TORCH_NETS[key] = (K.requires_grad_(), b, u0)
    K, b, u0 = _TORCH_NETS[key]
    h = TSTOP / n
    K.grad = b.grad = None
    u = u0
    for k in range(n):
        u = u + h * torch.tanh(layer(u, K[k], b[k]))
    (u * u).sum().backward()
    torch.cuda.synchronize()
