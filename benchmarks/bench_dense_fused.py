"""How much do braidpy.nn's one-pass dense kernels save on the CPU over NumPy temporaries
and over BLAS's product followed by the compiled elementwise pass?

Dense residual steps of width up to 32 (relu, smooth_relu): the one-pass kernels
(braidpy._core._host_dense.dense_rows_*), the same step as NumPy operations on full-size
arrays, and NumPy's product + dense_step_finish / dense_slope; checked to agree to
rounding first. Per call, min over rounds of the mean of --calls calls, candidates
interleaved round by round; "speedup": BLAS+pass over fused. Shapes: one interval
(batch, 8) and m stacked intervals (m, batch, 8).

Run: python benchmarks/bench_dense_fused.py [--batch 5000 1000] [--stacked 16]
     [--activations smooth_relu relu] [--rounds 15] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from _harness import alternate, per_call
from braidpy._core import _host_dense  # type: ignore[attr-defined]  # private submodule
from braidpy.nn import (dense_adjoint, dense_adjoint_batched, dense_forward,
                        dense_forward_batched, dense_gradient, dense_gradient_batched,
                        get_activation)

WIDTH = 8


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


def measure(act, m, batch, rounds, calls, rng):
    """Rows {kernel: (unfused s, product + pass s, fused s)} for one shape."""
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, nargs="+", default=[5000, 1000])
    p.add_argument("--stacked", type=int, nargs="+", default=[16],
                   help="interval counts m of the stacked rows (0 leaves them out)")
    p.add_argument("--activations", nargs="+", default=["smooth_relu", "relu"])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    rng = np.random.default_rng(20261128)
    out = []
    print(f"{'activation':<12} {'shape':<16} {'kernel':<9} {'NumPy us':>10} {'BLAS+pass':>10} "
          f"{'fused us':>10} {'speedup':>8}")
    for act in a.activations:
        for batch in a.batch:
            for m in [0] + [k for k in a.stacked if k > 0]:
                shape = f"({batch}, {WIDTH})" if m == 0 else f"({m}, {batch}, {WIDTH})"
                for kernel, (t_ref, t_pass, t_new) in measure(act, m, batch, a.rounds, a.calls,
                                                              rng).items():
                    print(f"{act:<12} {shape:<16} {kernel:<9} {t_ref * 1e6:>10.1f} "
                          f"{t_pass * 1e6:>10.1f} {t_new * 1e6:>10.1f} "
                          f"{t_pass / t_new:>7.2f}x")
                    out.append({"activation": act, "m": m, "batch": batch, "kernel": kernel,
                                "numpy_s": t_ref, "blas_pass_s": t_pass, "fused_s": t_new})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
