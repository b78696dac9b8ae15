"""What does a call of braidpy.nn's dense kernels cost over the same NumPy operations inline?

The kernels as functions and through a DenseLayer (as ResNet and ResNetApp call them);
m states of shape (1, width 8) stacked, tanh; min over rounds of the mean of 200 calls,
candidates interleaved round by round.

Run: python benchmarks/bench_nn_calls.py [--rows 1 64] [--rounds 40]
"""

from __future__ import annotations

import argparse

import numpy as np

from _harness import alternate, per_call
from braidpy.nn import DenseLayer, dense_adjoint_batched, dense_forward, dense_forward_batched


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 64])
    p.add_argument("--rounds", type=int, default=40)
    a = p.parse_args(argv)
    for m in a.rows:
        measure(m, a.rounds)


def measure(m, rounds):
    """Print the per-call times for m stacked states."""
    rng = np.random.default_rng(0)
    U, W = rng.standard_normal((m, 1, 8)), rng.standard_normal((m, 1, 8))
    Ks, bs = rng.standard_normal((m, 8, 8)), rng.standard_normal((m, 8))
    hs = np.full(m, 1 / 2048)
    u, K, b = U[0], Ks[0], bs[0]
    h3 = hs[:, None, None]
    layer = DenseLayer(8, "tanh")

    def inline_forward():
        z = np.matmul(U, np.swapaxes(Ks, 1, 2))
        z += bs[:, None, :]
        z = np.tanh(z)
        z *= h3
        z += U
        return z

    def inline_adjoint():
        z = np.matmul(U, np.swapaxes(Ks, 1, 2))
        z += bs[:, None, :]
        t = np.tanh(z)
        t *= t
        np.subtract(1, t, out=t)
        t *= W
        t *= h3
        r = np.matmul(t, Ks)
        r += W
        return r

    cands = {
        "dense_forward (one state)": lambda: dense_forward(u, K, b, 0.01, "tanh"),
        "DenseLayer.forward (one state)": lambda: layer.forward(u, K, b, 0.01),
        "dense_forward_batched": lambda: dense_forward_batched(U, Ks, bs, hs, "tanh"),
        "inline forward, batched": inline_forward,
        "dense_adjoint_batched": lambda: dense_adjoint_batched(W, U, Ks, bs, hs, "tanh"),
        "DenseLayer.adjoint_batched": lambda: layer.adjoint_batched(W, U, Ks, bs, hs),
        "inline adjoint, batched": inline_adjoint,
    }
    best = {k: min(v) for k, v in alternate(cands, rounds, lambda f: per_call(f, 200)).items()}
    print(f"m = {m}")
    for name, t in best.items():
        print(f"  {name:30s} {t * 1e6:7.2f} us")


if __name__ == "__main__":
    main()
