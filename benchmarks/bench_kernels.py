"""What does a call of braidpy.nn's layer kernels cost on the CPU, against the same
arithmetic written in NumPy? Per call, candidates alternated round by round (A/B/A/B):
  calls: the dense kernels (functions, DenseLayer) vs NumPy inline, m stacked (1, 8), tanh.
  fused: one-pass dense kernels vs NumPy temporaries vs NumPy's product + the compiled
    elementwise pass, relu and smooth_relu, (batch, 8) and (m, batch, 8), checked first.
  conv: the conv kernels and their ``*_batched`` forms (m = 1, 4, 16), tanh, four shapes.

Run: python benchmarks/bench_kernels.py [--tables calls fused conv] [--rows 1 64]
     [--batch 5000 1000] [--stacked 16] [--json FILE]
"""

from __future__ import annotations

import argparse

import numpy as np

import braidpy.nn as nn
import braidpy.nn.conv as conv
from _harness import alternate, best, dump_json, per_call, print_table
from braidpy._core import _host_dense  # type: ignore[attr-defined]  # private submodule

WIDTH = 8
KINDS = ("forward", "adjoint", "gradient")
CONV_SHAPES = [((1438, 8, 8, 8), 3), ((100, 8, 8, 8), 3), ((32, 8, 28, 28), 3),
               ((32, 8, 28, 28), 5)]


def kernel(mod, prefix, kind, batched, U, Ks, bs, hs, W, act):
    """A thunk calling mod's {prefix}_{kind}[_batched] (forward: no W)."""
    fn = getattr(mod, f"{prefix}_{kind}{'_batched' if batched else ''}")
    args = (U, Ks, bs, hs, act) if kind == "forward" else (W, U, Ks, bs, hs, act)
    return lambda: fn(*args)


def numpy_kernels(act, U, Ks, bs, hs, W, product_then_pass=False):
    """The three kernels as NumPy operations on full-size temporaries, or (with
    product_then_pass) NumPy's product then the compiled elementwise pass."""
    a, stacked = nn.get_activation(act), U.ndim == 3
    bias, h = (bs[:, None, :], hs[:, None, None]) if stacked else (bs, hs)
    KT = np.ascontiguousarray(np.swapaxes(Ks, -1, -2)) if product_then_pass else \
        np.swapaxes(Ks, -1, -2)
    code = {"relu": 2, "smooth_relu": 3}.get(act)

    def forward():
        z = np.matmul(U, KT)
        if product_then_pass:
            _host_dense.dense_step_finish(z, U, bs, hs, code)
            return z
        z += bias
        v = a.value(z)
        v *= h
        v += U
        return v

    def slope():
        z = np.matmul(U, KT)
        if product_then_pass:
            _host_dense.dense_slope(z, W, bs, hs, code)
            return z
        z += bias
        d = a.derivative(z)
        d *= W
        d *= h
        return d

    def adjoint():
        r = np.matmul(slope(), Ks)
        r += W
        return r

    def gradient():
        g = slope()
        return np.matmul(np.swapaxes(g, -1, -2), U), np.sum(g, axis=-2)

    return dict(forward=forward, adjoint=adjoint, gradient=gradient)


def operands(m, batch, rng, width=WIDTH):
    """(U, Ks, bs, hs, W): one layer (m = 0) or m stacked layers."""
    lead = () if m == 0 else (m,)
    U, W = rng.standard_normal(lead + (batch, width)), rng.standard_normal(lead + (batch, width))
    Ks = 0.3 * rng.standard_normal(lead + (width, width))
    return U, Ks, 0.1 * rng.standard_normal(lead + (width,)), (
        1 / 128 if m == 0 else np.full(m, 1 / 128)), W


def calls_table(m, rounds):
    """Per-call times of the dense kernels for m stacked states of shape (1, 8)."""
    rng = np.random.default_rng(0)
    U, W = rng.standard_normal((m, 1, 8)), rng.standard_normal((m, 1, 8))
    Ks, bs, hs = rng.standard_normal((m, 8, 8)), rng.standard_normal((m, 8)), np.full(m, 1 / 2048)
    layer, inline = nn.DenseLayer(8, "tanh"), numpy_kernels("tanh", U, Ks, bs, hs, W)
    got = alternate({
        "dense_forward (one state)": lambda: nn.dense_forward(U[0], Ks[0], bs[0], 0.01, "tanh"),
        "DenseLayer.forward (one state)": lambda: layer.forward(U[0], Ks[0], bs[0], 0.01),
        "dense_forward_batched": kernel(nn, "dense", "forward", True, U, Ks, bs, hs, W, "tanh"),
        "inline forward, batched": inline["forward"],
        "dense_adjoint_batched": kernel(nn, "dense", "adjoint", True, U, Ks, bs, hs, W, "tanh"),
        "DenseLayer.adjoint_batched": lambda: layer.adjoint_batched(W, U, Ks, bs, hs),
        "inline adjoint, batched": inline["adjoint"],
    }, rounds, lambda f: per_call(f, 200))
    print_table(["call", "us"], [(k, f"{min(v) * 1e6:.2f}") for k, v in got.items()],
                title=f"m = {m}")


def close(x, y):
    xs, ys = (x, y) if isinstance(x, tuple) else ((x,), (y,))
    return all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(xs, ys))


def fused_table(a):
    rng = np.random.default_rng(20261128)
    out, table = [], []
    for act in a.activations:
        for batch in a.batch:
            for m in [0] + [k for k in a.stacked if k > 0]:
                args = operands(m, batch, rng)
                cands = (numpy_kernels(act, *args), numpy_kernels(act, *args, True),
                         {k: kernel(nn, "dense", k, m > 0, *args, act) for k in KINDS})
                shape = f"({batch}, {WIDTH})" if m == 0 else f"({m}, {batch}, {WIDTH})"
                for k in KINDS:
                    ref = cands[0][k]()
                    if not all(close(ref, c[k]()) for c in cands[1:]):
                        raise SystemExit(f"{act} {k}: the kernels disagree beyond rounding")
                    got = alternate({i: c[k] for i, c in enumerate(cands)}, a.rounds,
                                    lambda f: per_call(f, a.calls))
                    t_ref, t_pass, t_new = (min(got[i]) for i in range(3))
                    table.append([act, shape, k, f"{t_ref * 1e6:.1f}", f"{t_pass * 1e6:.1f}",
                                  f"{t_new * 1e6:.1f}", f"{t_pass / t_new:.2f}x"])
                    out.append({"activation": act, "m": m, "batch": batch, "kernel": k,
                                "numpy_s": t_ref, "blas_pass_s": t_pass, "fused_s": t_new})
    print_table(["activation", "shape", "kernel", "NumPy us", "BLAS+pass", "fused us",
                 "speedup"], table)
    return out


def conv_table(a):
    for shape, k in CONV_SHAPES:
        rows = []
        for m in [0] + a.ms:
            rng, n = np.random.default_rng(0), max(m, 1)
            Kall = rng.standard_normal((n + 2, shape[1], shape[1], k, k))
            ball = 0.1 * rng.standard_normal((n + 2, shape[1]))
            U, W = (rng.standard_normal((n,) + shape) for _ in range(2))
            K, b = Kall[1:-1] / (k * np.sqrt(shape[1])), ball[1:-1]
            args = (U, K, b, np.full(m, 0.1), W) if m else (U[0], K[0], b[0], 0.1, W[0])
            for kind in KINDS:
                fn = kernel(conv, "conv", kind, m > 0, *args, "tanh")
                fn()  # warm-up
                t = best(fn, a.repeats, budget=a.budget)
                rows.append([f"{kind}_batched m={m}" if m else kind,
                             f"{1e3 * t:.2f}" + (f" ({1e3 * t / m:.2f})" if m else "")])
        print_table(["call", "ms"], rows,
                    title=f"shape {shape}, k = {k}: ms per call (per interval), tanh")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", nargs="+", choices=("calls", "fused", "conv"),
                   default=["calls", "fused", "conv"])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="calls: m")
    p.add_argument("--rounds", type=int, default=None,
                   help="calls, fused: A/B rounds (default 40, 15)")
    p.add_argument("--batch", type=int, nargs="+", default=[5000, 1000], help="fused")
    p.add_argument("--stacked", type=int, nargs="+", default=[16],
                   help="fused: interval counts m of the stacked rows (0 leaves them out)")
    p.add_argument("--activations", nargs="+", default=["smooth_relu", "relu"], help="fused")
    p.add_argument("--calls", type=int, default=20, help="fused: calls per round")
    p.add_argument("--repeats", type=int, default=5, help="conv")
    p.add_argument("--budget", type=float, default=3.0,
                   help="conv: stop repeating a case after this many seconds")
    p.add_argument("--ms", type=lambda s: [int(x) for x in s.split(",") if x], default="1,4,16",
                   help="conv: interval counts of the batched calls")
    p.add_argument("--json", metavar="FILE", help="fused: the rows as JSON")
    a = p.parse_args(argv)
    print(f"numpy {np.__version__}, float64")
    if "calls" in a.tables:
        for m in a.rows:
            calls_table(m, a.rounds or 40)
    if "fused" in a.tables:
        a.rounds = a.rounds or 15
        dump_json(a.json, {"rows": fused_table(a)})
    if "conv" in a.tables:
        conv_table(a)


if __name__ == "__main__":
    main()
