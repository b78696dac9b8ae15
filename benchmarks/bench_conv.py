"""What does a call of braidpy.nn's conv kernels cost on the CPU, single and batched (and
against an older conv.py)?

conv_forward / conv_adjoint / conv_gradient (one interval) and the ``*_batched`` versions
for m = 1, 4, 16 intervals (Ks = K[slice], as ResNetApp passes them), tanh, float64, for
(batch, C, H, W, k) = (1438, 8, 8, 8, 3), (100, 8, 8, 8, 3), (32, 8, 28, 28, 3),
(32, 8, 28, 28, 5). Min over repeats, ms per call and per interval. ``--baseline FILE``
(e.g. ``git show HEAD~1:braidpy/nn/conv.py > /tmp/conv_old.py``) times that version in
the same run: speed-up new / old.

Run: python benchmarks/bench_conv.py [--repeats R] [--ms 1,4,16] [--baseline FILE]
"""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np

import braidpy.nn.conv as conv_new
from _harness import best

SHAPES = [((1438, 8, 8, 8), 3), ((100, 8, 8, 8), 3), ((32, 8, 28, 28), 3),
          ((32, 8, 28, 28), 5)]
ACT = "tanh"


def _load(path: str):
    """conv.py at path, imported as a module of braidpy.nn (for its relative imports)."""
    spec = importlib.util.spec_from_file_location("braidpy.nn._bench_conv_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _data(shape, k, m, seed=0):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    Kall = rng.standard_normal((m + 2, c, c, k, k)) / (k * np.sqrt(c))
    ball = 0.1 * rng.standard_normal((m + 2, c))
    U = rng.standard_normal((m,) + shape)
    Wt = rng.standard_normal((m,) + shape)
    hs = np.full(m, 0.1)
    return U, Kall[1:m + 1], ball[1:m + 1], hs, Wt


def _cases(mod, shape, k, ms):
    """(label, m, thunk) for the single calls and the batched calls."""
    U, Ks, bs, hs, Wt = _data(shape, k, 1)
    u, K, b, w = U[0], Ks[0], bs[0], Wt[0]
    out = [("forward", 1, lambda: mod.conv_forward(u, K, b, 0.1, ACT)),
           ("adjoint", 1, lambda: mod.conv_adjoint(w, u, K, b, 0.1, ACT)),
           ("gradient", 1, lambda: mod.conv_gradient(w, u, K, b, 0.1, ACT))]
    for m in ms:
        U, Ks, bs, hs, Wt = _data(shape, k, m)
        out += [
            (f"forward_batched m={m}", m,
             lambda U=U, Ks=Ks, bs=bs, hs=hs: mod.conv_forward_batched(U, Ks, bs, hs, ACT)),
            (f"adjoint_batched m={m}", m,
             lambda U=U, Ks=Ks, bs=bs, hs=hs, Wt=Wt:
             mod.conv_adjoint_batched(Wt, U, Ks, bs, hs, ACT)),
            (f"gradient_batched m={m}", m,
             lambda U=U, Ks=Ks, bs=bs, hs=hs, Wt=Wt:
             mod.conv_gradient_batched(Wt, U, Ks, bs, hs, ACT)),
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--budget", type=float, default=3.0,
                    help="stop repeating a case after this many seconds")
    ap.add_argument("--ms", default="1,4,16", help="interval counts of the batched calls")
    ap.add_argument("--baseline", default=None, help="another conv.py to time alongside")
    ap.add_argument("--shapes", default=None,
                    help="indices into the shape list to run, e.g. 0,2 (default all)")
    args = ap.parse_args()
    ms = [int(s) for s in args.ms.split(",") if s]
    mods = [("new", conv_new)]
    if args.baseline:
        mods.insert(0, ("old", _load(args.baseline)))
    shapes = SHAPES if args.shapes is None else [SHAPES[int(i)] for i in args.shapes.split(",")]
    print(f"numpy {np.__version__}, float64, act {ACT}; ms per call (per interval)")
    for shape, k in shapes:
        print(f"\nshape {shape}, k = {k}")
        head = f"{'call':<24}" + "".join(f"{name:>24}" for name, _ in mods)
        if len(mods) == 2:
            head += f"{'speed-up':>10}"
        print(head)
        rows = {}
        for _name, mod in mods:
            for label, m, fn in _cases(mod, shape, k, ms):
                fn()  # warm-up
                rows.setdefault(label, []).append(
                    (best(fn, args.repeats, budget=args.budget), m))
        for label, vals in rows.items():
            line = f"{label:<24}"
            for t, m in vals:
                cell = f"{1e3 * t:9.2f}" + (f" ({1e3 * t / m:8.2f})" if m > 1 or "m=" in label
                                            else " " * 11)
                line += f"{cell:>24}"
            if len(vals) == 2:
                line += f"{vals[0][0] / vals[1][0]:9.1f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
