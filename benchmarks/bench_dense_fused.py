"""Dense residual steps on the CPU: the compiled elementwise pass vs NumPy temporaries.

braidpy.nn's dense kernels compute the product u @ K^T with NumPy (BLAS) and finish the
step in one compiled pass over it (braidpy._core._host_dense: bias, activation, *h, +u;
or act', *w, *h for the adjoint and gradient). The reference here is the same step
written as NumPy operations on full-size arrays (what the kernels did before, with
braidpy.nn.activations' smooth_relu / relu making their own temporaries). Both give the
same bits (checked before timing).

Per call, min over rounds of the mean of --calls calls, the two candidates interleaved
round by round (the machine may be shared). Shapes: one interval (batch, 8) and m
stacked intervals (m, batch, 8), as serial backprop and MGRIT's batched relaxation call
them.

Run: python benchmarks/bench_dense_fused.py [--batch 5000 1000] [--stacked 16]
     [--activations smooth_relu relu] [--rounds 15] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import timeit

import numpy as np

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

    def adjoint():
        r = np.matmul(slope(), Ks)
        r += W
        return r

    def gradient():
        g = slope()
        return np.matmul(np.swapaxes(g, -1, -2), U), np.sum(g, axis=-2)

    return {"forward": forward, "adjoint": adjoint, "gradient": gradient}


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


def same_bits(x, y):
    xs, ys = (x, y) if isinstance(x, tuple) else ((x,), (y,))
    return all(np.array_equal(a, b) for a, b in zip(xs, ys))


def measure(act, m, batch, rounds, calls, rng):
    """Rows {kernel: (unfused s, fused s)} for one shape."""
    args = operands(m, batch, rng)
    ref, new = unfused(act, *args), fused(act, *args)
    rows = {}
    for kernel in ("forward", "adjoint", "gradient"):
        if not same_bits(ref[kernel](), new[kernel]()):
            raise SystemExit(f"{act} {kernel}: the fused kernel's bits differ")
        best = [float("inf"), float("inf")]
        for _ in range(rounds):
            for i, f in enumerate((ref[kernel], new[kernel])):
                best[i] = min(best[i], timeit.timeit(f, number=calls) / calls)
        rows[kernel] = tuple(best)
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
    print(f"{'activation':<12} {'shape':<16} {'kernel':<9} {'NumPy us':>10} {'fused us':>10} "
          f"{'speedup':>8}")
    for act in a.activations:
        for batch in a.batch:
            for m in [0] + [k for k in a.stacked if k > 0]:
                shape = f"({batch}, {WIDTH})" if m == 0 else f"({m}, {batch}, {WIDTH})"
                for kernel, (t_ref, t_new) in measure(act, m, batch, a.rounds, a.calls,
                                                      rng).items():
                    print(f"{act:<12} {shape:<16} {kernel:<9} {t_ref * 1e6:>10.1f} "
                          f"{t_new * 1e6:>10.1f} {t_ref / t_new:>7.2f}x")
                    out.append({"activation": act, "m": m, "batch": batch, "kernel": kernel,
                                "numpy_s": t_ref, "fused_s": t_new})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
