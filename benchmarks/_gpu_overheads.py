"""bench_gpu.py --overheads: where does the host time of braidpy's small-state GPU runs go?

1. per-call host costs on CuPy (us): an in-place add of 8 numbers (a launch),
   ``__cuda_array_interface__``, ``cupy.empty``, a no-op Python method call;
2. the core's clone / sum / norm on the device paths: 2 MGRIT iterations of the N = 4096
   ResNet with no-op steps, per operation, against NumPy states;
3. braidpy.nn's dense layer calls against the same operations inline;
4. the pieces of the grouped cuDNN conv step (pack, grouped convolution, unpack + bias,
   activation, step size, residual update, and the fused epilogue), float32 and float64,
   with PyTorch's bare grouped conv (no TF32) for reference.

Without a GPU it says so and times 2 and 3 on NumPy.
"""

from __future__ import annotations

import time

import numpy as np

import braidpy
from _gpu import BATCH, CFACTOR, TSTOP, WIDTH, ResNet, sync, torch_cuda


def per_call_us(xp, fn, calls):
    """Host microseconds per call of fn (min of 3 loops of ``calls``, synchronized)."""
    best = float("inf")
    for _ in range(3):
        sync(xp)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(xp)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def host_costs(xp, calls):
    x, y = xp.ones((1, WIDTH)), xp.ones((1, WIDTH))

    class Noop:
        def call(self):
            return None

    from braidpy.backends.cupy import new_array
    noop = Noop()
    rows = {"CuPy y += x (8 numbers, one launch)": lambda: y.__iadd__(x),
            "x.__cuda_array_interface__": lambda: x.__cuda_array_interface__,
            "cupy.empty((1, 8))": lambda: xp.empty((1, WIDTH)),
            "braidpy.backends.cupy.new_array": lambda: new_array(x, (1, WIDTH)),
            "no-op Python method call": noop.call}
    print("per-call host cost, microseconds:")
    for name, fn in rows.items():
        print(f"  {name:45s} {per_call_us(xp, fn, calls):8.2f}", flush=True)


class NoopSteps(ResNet):
    """The bench's ResNet with steps that do nothing: only the core's work is left."""

    def step(self, u, t0, t1, status):
        return None

    def step_stacked(self, U, t0s, t1s, status):
        return None


def core_ops(xp, n=4096):
    """Per-operation cost of the core's clone/sum/norm on xp's states (no-op steps)."""
    def run(mod):
        K = mod.zeros((1, WIDTH, WIDTH))
        u0 = mod.ones((1, WIDTH))
        app = NoopSteps(mod, K, K[0], u0)
        best = None
        for _ in range(3):
            start = time.perf_counter()
            r = braidpy.solve(app, 0.0, TSTOP, n, max_levels=2, cfactor=CFACTOR, nrelax=0,
                              access_level=0, max_iter=2, abs_tol=0.0, timings=True)
            sync(mod)
            wall = time.perf_counter() - start
            if best is None or wall < best[0]:
                best = (wall, r)
        wall, r = best
        c, t = r.counts, r.timings
        callbacks = sum(v for k, v in t.items() if k not in ("total", "communication"))
        ops = c["clone"] + c["sum"] + c["norm"]
        return wall, callbacks, ops, c

    print(f"the core's vector operations, 2 MGRIT iterations, N={n}, cf {CFACTOR}, no-op steps:")
    for name, mod in (("NumPy", np), ("CuPy", xp)) if xp is not np else (("NumPy", np),):
        wall, cb, ops, c = run(mod)
        print(f"  {name}: {wall * 1e3:.2f} ms, of which callbacks {cb * 1e3:.2f} ms; "
              f"{ops} operations (clone {c['clone']}, sum {c['sum']}, norm {c['norm']}) "
              f"+ {c['step'] + c['step_batch']} step calls: "
              f"{(wall - cb) / ops * 1e6:.2f} us per operation", flush=True)


def layer_calls(xp, calls):
    """braidpy.nn's dense layer calls (the array-API path on a device) against the same
    operations written inline with xp: what the layer adds per call. (braidpy calibrate
    --device cuda measured 0.27-0.63 ms of fixed cost per dense:8 call on an H200, several
    times bench_gpu.py's inline serial step; it times the default activation,
    smooth_relu, which is 11 array-API operations against tanh's one: see
    docs/performance.md.)"""
    from braidpy.nn import DenseLayer

    rng = np.random.default_rng(2)
    layer, smooth = DenseLayer(WIDTH, "tanh"), DenseLayer(WIDTH, "smooth_relu")
    m = 64
    U = xp.asarray(rng.standard_normal((m, 1, WIDTH)))
    W = xp.asarray(rng.standard_normal((m, 1, WIDTH)))
    Ks = xp.asarray(rng.standard_normal((m, WIDTH, WIDTH)) / WIDTH)
    bs = xp.asarray(rng.standard_normal((m, WIDTH)))
    hs = xp.asarray(np.full(m, 1 / 2048))
    u, K, b = U[0], Ks[0], bs[0]
    h3 = xp.reshape(hs, (m, 1, 1))
    rows = {"DenseLayer.forward, one state": lambda: layer.forward(u, K, b, 0.01),
            "the same, smooth_relu (calibrate's default)":
            lambda: smooth.forward(u, K, b, 0.01),
            "inline u + h tanh(u K^T + b), one state":
            lambda: u + 0.01 * xp.tanh(u @ K.T + b),
            f"DenseLayer.forward_batched, {m} states":
            lambda: layer.forward_batched(U, Ks, bs, hs),
            f"inline forward, {m} states":
            lambda: U + h3 * xp.tanh(U @ xp.swapaxes(Ks, 1, 2) + bs[:, None, :]),
            f"DenseLayer.adjoint_batched, {m} states":
            lambda: layer.adjoint_batched(W, U, Ks, bs, hs),
            f"DenseLayer.gradient_batched, {m} states":
            lambda: layer.gradient_batched(W, U, Ks, bs, hs)}
    print("braidpy.nn dense layer calls (width 8, tanh unless named), microseconds per call:")
    for name, fn in rows.items():
        fn()
        print(f"  {name:45s} {per_call_us(xp, fn, calls):8.2f}", flush=True)


def conv_split(xp, calls):
    from braidpy.nn import conv_backends as cb

    why = cb.cudnn_unavailable()
    if why is not None:
        print(f"conv split: needs cuDNN: {why}")
        return
    torch = torch_cuda()
    for dtype in ("float32", "float64"):
        rows = _conv_pieces(xp, dtype, torch)
        print(f"conv step pieces, {M} intervals, batch {BATCH}, {C} channels, {H}x{H}, "
              f"{dtype} (ms per call):")
        for name, fn in rows.items():
            fn()
            print(f"  {name:45s} {per_call_us(xp, fn, max(calls // 100, 10)) / 1e3:8.3f}",
                  flush=True)
        if torch is not None:
            torch.backends.cudnn.allow_tf32 = True


M, C, H = 64, 8, 28  # intervals, channels, image side of the conv pieces


def _conv_pieces(xp, dtype, torch):
    """{name: call} for the pieces of one grouped cuDNN forward step in ``dtype``."""
    from braidpy.nn import ConvLayer
    from braidpy.nn import conv_backends as cb
    from braidpy.nn.activations import get_activation

    act = get_activation("tanh")
    layer = ConvLayer(C, 3, "tanh", backend="cudnn")
    rng = np.random.default_rng(1)
    U = xp.asarray(rng.standard_normal((M, BATCH, C, H, H)), dtype=dtype)
    Ks = xp.asarray(rng.standard_normal((M, C, C, 3, 3)) / 9, dtype=dtype)
    bs = xp.asarray(0.1 * rng.standard_normal((M, C)), dtype=dtype)
    hs = xp.asarray(np.full(M, 1.0 / M), dtype=dtype)
    X = cb.pack_intervals(U)
    Kg = xp.reshape(Ks, (M * C, C, 3, 3))  # the grouped filter (a view)
    Y = cb.conv2d_cudnn(X, Kg, M)
    Z = cb.unpack_intervals(Y, M) + xp.reshape(bs, (M, 1, C, 1, 1))
    A = act.value(Z)
    S = xp.reshape(hs, (M, 1, 1, 1, 1)) * A
    rows = {"pack_intervals (transposing copy)":
            lambda: xp.ascontiguousarray(cb.pack_intervals(U)),
            "grouped cudnn conv (incl. workspace, output)": lambda: cb.conv2d_cudnn(X, Kg, M),
            "unpack + bias": lambda: cb.unpack_intervals(Y, M) + xp.reshape(bs, (M, 1, C, 1, 1)),
            "tanh": lambda: act.value(Z),
            "h * tanh": lambda: xp.reshape(hs, (M, 1, 1, 1, 1)) * A,
            "U + h tanh": lambda: U + S,
            "fused epilogue (the four above in one kernel)":
            lambda: cb.fused_epilogue(U, Y, bs, hs, act),
            "whole forward_batched (cudnn)": lambda: layer.forward_batched(U, Ks, bs, hs)}
    if torch is not None:
        tX, tK = torch.as_tensor(X, device="cuda"), torch.as_tensor(Kg, device="cuda")

        def torch_conv():
            torch.backends.cudnn.allow_tf32 = False
            return torch.nn.functional.conv2d(tX, tK, padding=1, groups=M)
        rows["PyTorch grouped conv2d alone (no TF32)"] = torch_conv
    return rows


def overheads(xp, calls):
    """The four parts above (2 and 3 only, on NumPy, without a GPU)."""
    if xp is not np:
        host_costs(xp, calls)
    core_ops(xp)
    layer_calls(xp, calls)
    if xp is not np:
        conv_split(xp, calls)
