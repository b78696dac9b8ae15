"""Do layer-parallel MGRIT's iteration counts stay the same as the Peaks ResNet gets deeper?
(Günther et al. 2020, Fig. 4)

One network in layer time (width 8, T = 5, weights constant on 16 blocks) with N = 256 ...
2048 layers; state and adjoint MGRIT solves, cold, to a 1e-5 relative drop. Goal: the
iterations differ by at most 1.

    python benchmarks/bench_depth.py [--batch 5000] [--layers 256 512 1024 2048]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _harness import print_table

from braidpy import data
from braidpy.adjoint import GradientSolver
from braidpy.nn import ResNet, ResNetApp

BLOCKS = 16


def continuous_params(N: int, seed: int, scale: float) -> tuple[ResNet, np.ndarray]:
    """N-layer discretization of one fixed theta(t)."""
    coarse = ResNet((2,), 5, width=8, nlayers=BLOCKS, tstop=5.0, activation="smooth_relu")
    pc = coarse.init_params(seed=seed, scale=scale)
    net = ResNet((2,), 5, width=8, nlayers=N, tstop=5.0, activation="smooth_relu")
    p = np.zeros(net.nparams)
    v, vc = net.views(p), coarse.views(pc)
    block = (np.arange(N) * BLOCKS) // N  # layer n lies in block n * 16 // N
    for name in ("K", "b", "open_K", "open_b", "W", "mu"):
        v[name][...] = vc[name][block] if name in ("K", "b") else vc[name]
    return net, p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--layers", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--scale", type=float, default=1.0, help="weight scale (1: ~unit norm)")
    ap.add_argument("--cfactor", type=int, default=4)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    X, C = data.peaks(args.batch, seed=11)
    rows = []
    for N in args.layers:
        net, p = continuous_params(N, args.seed, args.scale)
        for levels, label in ((2, "2-level"), (30, "multilevel")):
            opts = dict(cfactor=args.cfactor, max_levels=levels, abs_tol=0.0, rel_tol=1e-5,
                        max_iter=100)
            start = time.perf_counter()
            g = GradientSolver(ResNetApp(net, p, X, C), 0.0, net.tstop, N, primal=opts).evaluate()
            rows.append([N, label, g.primal.levels, g.primal.iterations, g.adjoint.iterations,
                         f"{time.perf_counter() - start:.2f} s"])
            print(*rows[-1], flush=True)
    print()
    print_table(["N", "hierarchy", "levels", "state iters", "adjoint iters", "time"], rows,
                title=f"MGRIT iterations to a 1e-5 relative drop (batch {args.batch}, "
                      f"cf {args.cfactor})")
    for label in ("2-level", "multilevel"):
        its = [(r[3], r[4]) for r in rows if r[1] == label]
        spread = max(max(a for a, _ in its) - min(a for a, _ in its),
                     max(b for _, b in its) - min(b for _, b in its))
        print(f"{label}: largest difference over N = {spread} iteration(s) (goal <= 1)")


if __name__ == "__main__":
    main()
