"""Does Delta correction cut MGRIT's iterations on chaotic problems?

Lorenz (forward Euler, XBraid's ex-07 settings: 3 levels, cfactor 2, F-relaxation,
absolute tolerance 1e-6, no skip) over a long horizon, with ``delta_rank`` 0 (plain
FAS) and 3 (the basis propagated by ``I + h J(u)``, ``lyapunov_estimate``). Goal: Delta
needs at most half of plain FAS's iterations to the tolerance. Then
examples/ex13_ks_delta.py's Kuramoto-Sivashinsky solve, plain FAS against Delta with
``--ks-rank`` (8) vectors. Goal: Delta converges where plain FAS stalls.

    OMP_NUM_THREADS=1 python benchmarks/bench_delta.py [--lyapunov-times 4 8] [--ks-rank 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _harness import print_table

import braidpy
from braidpy.problems import KuramotoSivashinskySpectral

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for examples/
from examples.ex12_lorenz_delta import LYAPUNOV_TIME, LorenzDelta  # noqa: E402
from examples.ex13_ks_delta import SpectralKSDelta  # noqa: E402


def run(lyapunov_times: float, steps_per_time: int, rank: int, max_iter: int):
    """(iterations, converged, last residual, seconds) of one Lorenz solve."""
    ntime = int(round(lyapunov_times * steps_per_time))
    extra = dict(delta_rank=rank, lyapunov_estimate=True) if rank else {}
    start = time.perf_counter()
    r = braidpy.solve(LorenzDelta(), 0.0, lyapunov_times * LYAPUNOV_TIME, ntime,
                      max_levels=3, cfactor=2, nrelax=0, skip=False, abs_tol=1e-6,
                      max_iter=max_iter, **extra)
    return r.iterations, r.converged, r.residuals[-1], time.perf_counter() - start


def run_ks(rank: int):
    """The same for examples/ex13_ks_delta.py's default solve (30 iterations at most)."""
    p = KuramotoSivashinskySpectral(lyapunov_times=16.0, ntime=4096)
    extra = dict(delta_rank=rank, lyapunov_estimate=True) if rank else {}
    start = time.perf_counter()
    r = braidpy.solve(SpectralKSDelta(p), p.tstart, p.tstop, p.ntime, max_levels=3,
                      cfactor=4, nrelax=1, tnorm=2, abs_tol=1e-8, max_iter=30, **extra)
    return r.iterations, r.converged, r.residuals[-1], time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lyapunov-times", type=float, nargs="+", default=[4.0, 8.0],
                    help="horizons in Lyapunov times ln(10)/0.9")
    ap.add_argument("--steps-per-time", type=int, default=512,
                    help="forward Euler steps per Lyapunov time (ex-07: 512)")
    ap.add_argument("--rank", type=int, default=3, help="Delta's basis vectors")
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--ks-rank", type=int, default=8,
                    help="Kuramoto-Sivashinsky's basis vectors (0: skip that case)")
    args = ap.parse_args()
    rows, ratios = [], []
    for lt in args.lyapunov_times:
        plain = run(lt, args.steps_per_time, 0, args.max_iter)
        delta = run(lt, args.steps_per_time, args.rank, args.max_iter)
        # Plain FAS not converged in max_iter: its count is a lower bound, so the ratio
        # is an upper bound ("<=").
        ratio = delta[0] / plain[0]
        ratios.append((ratio, delta[1]))
        rows.append([f"{lt:g}", int(round(lt * args.steps_per_time)),
                     f"{plain[0]}" if plain[1] else f">= {plain[0]} (not converged)",
                     f"{delta[0]}" if delta[1] else f"{delta[0]} (not converged)",
                     f"{ratio:.2f}" if plain[1] else f"<= {ratio:.2f}",
                     f"{plain[3]:.2f} s", f"{delta[3]:.2f} s"])
        print(*rows[-1], flush=True)
    print()
    print_table(["Lyapunov times", "steps", "iters rank 0", f"iters rank {args.rank}",
                 "ratio", "time rank 0", f"time rank {args.rank}"], rows,
                title="Lorenz, forward Euler, 3 levels, cf 2, F-relaxation, to 1e-6")
    worst = max(r for r, _ in ratios)
    met = worst <= 0.5 and all(ok for _, ok in ratios)
    print(f"largest ratio {worst:.2f} (goal <= 0.50): {'met' if met else 'NOT met'}")
    if args.ks_rank:
        plain, delta = run_ks(0), run_ks(args.ks_rank)
        print()
        print_table(["delta_rank", "iterations", "converged", "last residual", "time"],
                    [[k, it, ok, f"{res:.2e}", f"{sec:.1f} s"]
                     for k, (it, ok, res, sec) in ((0, plain), (args.ks_rank, delta))],
                    title="Kuramoto-Sivashinsky (ETDRK4, 64 modes), 4096 steps over 16 "
                          "Lyapunov times, 3 levels, cf 4, FCF, to 1e-8, at most 30")
        print(f"Kuramoto-Sivashinsky: plain FAS {'converged' if plain[1] else 'stalled'}, "
              f"Delta {'converged' if delta[1] else 'did not converge'}")


if __name__ == "__main__":
    main()
