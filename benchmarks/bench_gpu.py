"""GPU skeleton: MGRIT vs the serial layer loop for a deep narrow ResNet, on CuPy if it can.

Network: N = 4096 layers u <- u + h tanh(u K_n^T + b_n), width 8, batch 32, T = 2, its own
weights per layer (a fixed deterministic pattern, no seed). Serial: a loop over the
layers. braidpy: braidpy.solve with cfactor 64, 2 levels, F-relaxation, max_iter 2 and
abs_tol 0 (the forward of one-shot training), batched (step_stacked: one batched matmul
per step position). Timings are min over repeats of build + solve, synchronized.

Where CuPy or a GPU is missing it says so and runs the same comparison with NumPy, so
that the script itself is exercised everywhere; its GPU numbers have not been taken
yet (README, "GPU status").

Conv (--conv): the k-th step of m intervals of a conv ResNet (MNIST size, 8 channels,
batch 32, 3x3, tanh), four ways: cuDNN as ONE grouped convolution over the intervals
(the "cudnn" backend's batched step), cuDNN interval by interval on one stream, cuDNN
interval by interval with the intervals split over S CUDA streams (one per block of
layers, seed paper 000), and the array-API im2col path; plus PyTorch's grouped conv2d
when torch imports. Needs CuPy, a GPU and cuDNN; otherwise it says which is missing.

Run: python benchmarks/bench_gpu.py [--layers N] [--repeats R] [--conv [--intervals M]]
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
import warnings

import numpy as np

import braidpy

WIDTH, BATCH, TSTOP = 8, 32, 2.0


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
        h = self.xp.asarray(t1s - t0s).reshape(-1, 1, 1)
        U += h * self.xp.tanh(U @ self.K[s].transpose(0, 2, 1) + self.b[s][:, None, :])


def sync(xp):
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def serial(xp, K, b, u0, n):
    u, h = u0.copy(), TSTOP / n
    for k in range(n):
        u += h * xp.tanh(u @ K[k].T + b[k])
    sync(xp)
    return u


def mgrit(xp, K, b, u0, n):
    r = braidpy.solve(ResNet(xp, K, b, u0), 0.0, TSTOP, n, max_levels=2, cfactor=64, nrelax=0,
                      max_iter=2, abs_tol=0.0, access_level=0)
    sync(xp)
    return r


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def conv_steps(xp, args):
    """Grouped vs per-interval vs streams per layer block vs im2col (see the docstring)."""
    from braidpy.nn import ConvLayer
    from braidpy.nn.conv_backends import STREAMS_ENV, cudnn_unavailable

    why = cudnn_unavailable() if xp is not np else "no GPU"
    if why is not None:
        print(f"conv: the cuDNN comparison needs CuPy, a GPU and cuDNN: {why}")
        return
    m, C, H = args.intervals, 8, 28
    rng = np.random.default_rng(20261125)
    U = xp.asarray(rng.standard_normal((m, BATCH, C, H, H)))
    Ks = xp.asarray(rng.standard_normal((m, C, C, 3, 3)) / 9)
    bs = xp.asarray(0.1 * rng.standard_normal((m, C)))
    hs = xp.asarray(np.full(m, 1.0 / m))
    os.environ[STREAMS_ENV] = str(args.streams)
    cudnn, im2col = ConvLayer(C, 3, "tanh", backend="cudnn"), ConvLayer(C, 3, "tanh",
                                                                         backend="array-api")
    streams = ConvLayer(C, 3, "tanh", backend="cudnn-streams")

    def per_interval():
        return [cudnn.forward(U[i], Ks[i], bs[i], hs[i]) for i in range(m)]

    cases = {"cuDNN grouped (1 call)": lambda: cudnn.forward_batched(U, Ks, bs, hs),
             "cuDNN per interval": per_interval,
             f"cuDNN per interval, {args.streams} streams": lambda: streams.forward_batched(
                 U, Ks, bs, hs),
             "array-API im2col": lambda: im2col.forward_batched(U, Ks, bs, hs)}
    try:
        torch = importlib.import_module("torch")
        tU = torch.as_tensor(U.transpose(1, 0, 2, 3, 4).reshape(BATCH, m * C, H, H),
                             device="cuda")
        tK = torch.as_tensor(Ks.reshape(m * C, C, 3, 3), device="cuda")
        cases["PyTorch grouped conv2d (conv only)"] = lambda: torch.nn.functional.conv2d(
            tU, tK, padding=1, groups=m)
    except Exception as exc:  # noqa: BLE001 - the reference is optional
        print(f"conv: no PyTorch reference ({type(exc).__name__}: {exc})")

    def timed(fn):
        fn()  # plans, algorithms and pools warmed
        sync(xp)
        return best(lambda: (fn(), sync(xp)), args.repeats)

    times = {name: timed(fn) for name, fn in cases.items()}
    base = times["cuDNN grouped (1 call)"]
    print(f"conv step of {m} intervals, batch {BATCH}, {C} channels, {H}x{H}, 3x3, float64:")
    for name, t in times.items():
        print(f"  {name:40s} {t * 1e3:9.3f} ms  ({t / base:.2f}x grouped)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--conv", action="store_true", help="the cuDNN conv step comparison")
    p.add_argument("--intervals", type=int, default=64, help="--conv: intervals m")
    p.add_argument("--streams", type=int, default=4, help="--conv: streams (layer blocks)")
    args = p.parse_args(argv)
    xp, where = array_module()
    info = braidpy.cuda_info()
    print(f"{where}\nbraidpy._cuda compiled: {info['compiled']}, devices: {info['devices']}, "
          f"cuDNN: {info['cudnn']}")
    if args.conv:
        conv_steps(xp, args)
        return
    n = args.layers
    K, b = weights(xp, n)
    u0 = xp.asarray(np.cos(np.arange(BATCH * WIDTH)).reshape(BATCH, WIDTH))
    t_serial = best(lambda: serial(xp, K, b, u0, n), args.repeats)
    t_mgrit = best(lambda: mgrit(xp, K, b, u0, n), args.repeats)
    print(f"N={n} width {WIDTH} batch {BATCH}: serial {t_serial * 1e3:.1f} ms, MGRIT 2 iterations "
          f"{t_mgrit * 1e3:.1f} ms, serial / MGRIT {t_serial / t_mgrit:.2f}x")


if __name__ == "__main__":
    main()
