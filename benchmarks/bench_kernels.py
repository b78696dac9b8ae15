"""What does a call of braidpy.nn's layer kernels cost on the CPU, against the same
arithmetic written in NumPy?

Three tables (``--tables``), per call, candidates interleaved round by round (A/B/A/B):

- calls: the dense kernels as functions and through a DenseLayer (as ResNet and
  ResNetApp call them) vs the same NumPy operations inline; m states (``--rows``) of
  shape (1, 8) stacked, tanh; min over ``--rounds`` of the mean of 200 calls.
- fused: the one-pass dense kernels (braidpy._core._host_dense.dense_rows_*) vs NumPy on
  full-size temporaries vs NumPy's product + the compiled elementwise pass
  (dense_step_finish / dense_slope), width 8, relu and smooth_relu, checked to agree to
  rounding first; shapes (batch, 8) and (m, batch, 8); "speedup": BLAS+pass over fused.
- conv: conv_forward / conv_adjoint / conv_gradient (one interval) and the ``*_batched``
  versions for m = 1, 4, 16 intervals, tanh, float64, (batch, C, H, W, k) = (1438, 8, 8,
  8, 3), (100, 8, 8, 8, 3), (32, 8, 28, 28, 3), (32, 8, 28, 28, 5); min over --repeats,
  ms per call and per interval. ``--baseline FILE`` (e.g. ``git show
  HEAD~1:braidpy/nn/conv.py > /tmp/conv_old.py``) times that conv.py too: old / new.

Run: python benchmarks/bench_kernels.py [--tables calls fused conv] [--rows 1 64]
     [--batch 5000 1000] [--stacked 16] [--baseline FILE] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np

import braidpy.nn.conv as conv_new
from _harness import alternate, best, dump_json, per_call, print_table
from braidpy._core import _host_dense  # type: ignore[attr-defined]  # private submodule
from braidpy.nn import (DenseLayer, dense_adjoint, dense_adjoint_batched, dense_forward,
                        dense_forward_batched, dense_gradient, dense_gradient_batched,
                        get_activation)

WIDTH = 8
CONV_SHAPES = [((1438, 8, 8, 8), 3), ((100, 8, 8, 8), 3), ((32, 8, 28, 28), 3),
               ((32, 8, 28, 28), 5)]


# ------------------------------------------------------------------ calls: dense per call


def calls_table(m, rounds):
    """Per-call times of the dense kernels for m stacked states of shape (1, 8)."""
    rng = np.random.default_rng(0)
    U, W = rng.standard_normal((m, 1, 8)), rng.standard_normal((m, 1, 8))
    Ks, bs = rng.standard_normal((m, 8, 8)), rng.standard_normal((m, 8))
    hs = np.full(m, 1 / 2048)
    layer = DenseLayer(8, "tanh")
    numpy = unfused("tanh", U, Ks, bs, hs, W)
    cands = {
        "dense_forward (one state)": lambda: dense_forward(U[0], Ks[0], bs[0], 0.01, "tanh"),
        "DenseLayer.forward (one state)": lambda: layer.forward(U[0], Ks[0], bs[0], 0.01),
        "dense_forward_batched": lambda: dense_forward_batched(U, Ks, bs, hs, "tanh"),
        "inline forward, batched": numpy["forward"],
        "dense_adjoint_batched": lambda: dense_adjoint_batched(W, U, Ks, bs, hs, "tanh"),
        "DenseLayer.adjoint_batched": lambda: layer.adjoint_batched(W, U, Ks, bs, hs),
        "inline adjoint, batched": numpy["adjoint"],
    }
    got = alternate(cands, rounds, lambda f: per_call(f, 200))
    print_table(["call", "us"], [(k, f"{min(v) * 1e6:.2f}") for k, v in got.items()],
                title=f"m = {m}")


# ------------------------------------------------------------------ fused: one pass vs NumPy


def unfused(act, U, Ks, bs, hs, W):
    """The three kernels as NumPy operations on full-size temporaries."""
    a = get_activation(act)
    stacked = U.ndim == 3
    bias = bs[:, None, :] if stacked else bs
    h = hs[:, None, None] if stacked else hs

    def pre():
        z = np.matmul(U, np.swapaxes(Ks, -1, -2))
        z += bias
        return z

    def forward():
        v = a.value(pre())
        v *= h
        v += U
        return v

    def slope():
        d = a.derivative(pre())
        d *= W
        d *= h
        return d

    return {"forward": forward, **backward_from(slope, U, Ks, W)}


def backward_from(slope, U, Ks, W):
    """The adjoint w + g K and the gradient (g^T u, sum g) from ``slope()`` = g, as
    NumPy operations (both references share them)."""

    def adjoint():
        r = np.matmul(slope(), Ks)
        r += W
        return r

    def gradient():
        g = slope()
        return np.matmul(np.swapaxes(g, -1, -2), U), np.sum(g, axis=-2)

    return {"adjoint": adjoint, "gradient": gradient}


def blas_then_pass(act, U, Ks, bs, hs, W):
    """NumPy's product, then the compiled elementwise pass over it."""
    code = {"relu": 2, "smooth_relu": 3}[act]
    KT = np.ascontiguousarray(np.swapaxes(Ks, -1, -2))

    def forward():
        z = np.matmul(U, KT)
        _host_dense.dense_step_finish(z, U, bs, hs, code)
        return z

    def slope():
        z = np.matmul(U, KT)
        _host_dense.dense_slope(z, W, bs, hs, code)
        return z

    return {"forward": forward, **backward_from(slope, U, Ks, W)}


def fused(act, U, Ks, bs, hs, W):
    """braidpy.nn's kernels (the compiled pass)."""
    if U.ndim == 3:
        return {"forward": lambda: dense_forward_batched(U, Ks, bs, hs, act),
                "adjoint": lambda: dense_adjoint_batched(W, U, Ks, bs, hs, act),
                "gradient": lambda: dense_gradient_batched(W, U, Ks, bs, hs, act)}
    return {"forward": lambda: dense_forward(U, Ks, bs, hs, act),
            "adjoint": lambda: dense_adjoint(W, U, Ks, bs, hs, act),
            "gradient": lambda: dense_gradient(W, U, Ks, bs, hs, act)}


def operands(m, batch, rng):
    shape = (batch, WIDTH) if m == 0 else (m, batch, WIDTH)
    kshape = (WIDTH, WIDTH) if m == 0 else (m, WIDTH, WIDTH)
    U, W = rng.standard_normal(shape), rng.standard_normal(shape)
    Ks = 0.3 * rng.standard_normal(kshape)
    bs = 0.1 * rng.standard_normal(kshape[:-1])
    hs = 1 / 128 if m == 0 else np.full(m, 1 / 128)
    return U, Ks, bs, hs, W


def close(x, y):
    xs, ys = (x, y) if isinstance(x, tuple) else ((x,), (y,))
    return all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(xs, ys))


def fused_rows(act, m, batch, rounds, calls, rng):
    """{kernel: (unfused s, product + pass s, fused s)} for one shape."""
    args = operands(m, batch, rng)
    cands = unfused(act, *args), blas_then_pass(act, *args), fused(act, *args)
    rows = {}
    for kernel in ("forward", "adjoint", "gradient"):
        ref = cands[0][kernel]()
        if not all(close(ref, c[kernel]()) for c in cands[1:]):
            raise SystemExit(f"{act} {kernel}: the kernels disagree beyond rounding")
        got = alternate({i: c[kernel] for i, c in enumerate(cands)}, rounds,
                        lambda f: per_call(f, calls))
        rows[kernel] = tuple(min(got[i]) for i in range(len(cands)))
    return rows


def fused_table(a):
    rng = np.random.default_rng(20261128)
    out, table = [], []
    for act in a.activations:
        for batch in a.batch:
            for m in [0] + [k for k in a.stacked if k > 0]:
                shape = f"({batch}, {WIDTH})" if m == 0 else f"({m}, {batch}, {WIDTH})"
                for kernel, (t_ref, t_pass, t_new) in fused_rows(
                        act, m, batch, a.rounds, a.calls, rng).items():
                    table.append([act, shape, kernel, f"{t_ref * 1e6:.1f}",
                                  f"{t_pass * 1e6:.1f}", f"{t_new * 1e6:.1f}",
                                  f"{t_pass / t_new:.2f}x"])
                    out.append({"activation": act, "m": m, "batch": batch, "kernel": kernel,
                                "numpy_s": t_ref, "blas_pass_s": t_pass, "fused_s": t_new})
    print_table(["activation", "shape", "kernel", "NumPy us", "BLAS+pass", "fused us",
                 "speedup"], table)
    return out


# ------------------------------------------------------------------ conv


def _load(path: str):
    """conv.py at path, imported as a module of braidpy.nn (for its relative imports)."""
    spec = importlib.util.spec_from_file_location("braidpy.nn._bench_conv_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _conv_data(shape, k, m, seed=0):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    Kall = rng.standard_normal((m + 2, c, c, k, k)) / (k * np.sqrt(c))
    ball = 0.1 * rng.standard_normal((m + 2, c))
    U = rng.standard_normal((m,) + shape)
    Wt = rng.standard_normal((m,) + shape)
    hs = np.full(m, 0.1)
    return U, Kall[1:m + 1], ball[1:m + 1], hs, Wt


def _conv_cases(mod, shape, k, ms):
    """(label, m, thunk) for the single calls and the batched calls."""
    U, Ks, bs, hs, Wt = _conv_data(shape, k, 1)
    u, K, b, w = U[0], Ks[0], bs[0], Wt[0]
    out = [("forward", 1, lambda: mod.conv_forward(u, K, b, 0.1, "tanh")),
           ("adjoint", 1, lambda: mod.conv_adjoint(w, u, K, b, 0.1, "tanh")),
           ("gradient", 1, lambda: mod.conv_gradient(w, u, K, b, 0.1, "tanh"))]
    for m in ms:
        U, Ks, bs, hs, Wt = _conv_data(shape, k, m)
        for kind, call in (("forward", lambda U, Ks, bs, hs, Wt:
                            mod.conv_forward_batched(U, Ks, bs, hs, "tanh")),
                           ("adjoint", lambda U, Ks, bs, hs, Wt:
                            mod.conv_adjoint_batched(Wt, U, Ks, bs, hs, "tanh")),
                           ("gradient", lambda U, Ks, bs, hs, Wt:
                            mod.conv_gradient_batched(Wt, U, Ks, bs, hs, "tanh"))):
            out.append((f"{kind}_batched m={m}", m,
                        lambda c=call, a=(U, Ks, bs, hs, Wt): c(*a)))
    return out


def conv_table(a):
    mods = [("new", conv_new)]
    if a.baseline:
        mods.insert(0, ("old", _load(a.baseline)))
    shapes = CONV_SHAPES if a.shapes is None else [CONV_SHAPES[int(i)]
                                                   for i in a.shapes.split(",")]
    for shape, k in shapes:
        rows = {}
        for _name, mod in mods:
            for label, m, fn in _conv_cases(mod, shape, k, a.ms):
                fn()  # warm-up
                t = best(fn, a.repeats, budget=a.budget)
                rows.setdefault(label, [label]).append(
                    f"{1e3 * t:.2f}" + (f" ({1e3 * t / m:.2f})" if "m=" in label else ""))
                rows[label].append(t)
        table = [[r[0]] + r[1::2] + ([f"{r[2] / r[4]:.1f}x"] if len(mods) == 2 else [])
                 for r in rows.values()]
        print_table(["call"] + [n for n, _ in mods] + (["speed-up"] if len(mods) == 2 else []),
                    table, title=f"shape {shape}, k = {k}: ms per call (per interval), tanh")


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
    p.add_argument("--baseline", help="conv: another conv.py to time alongside")
    p.add_argument("--shapes", help="conv: indices into the shape list, e.g. 0,2 (default all)")
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
