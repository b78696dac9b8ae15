"""Does weighted C-relaxation (Options.crelax_weight, XBraid's braid_SetCRelaxWt) reach
tol 1e-8 on the heat example (examples/ex02_heat1d.py) in fewer iterations and less time
than plain FCF relaxation? Runs each weight side by side in one process, repeats
interleaved, and prints iterations, the mean convergence factor and the solve time
(min and median over the repeats) with its ratio to the unweighted solve.

    python benchmarks/bench_crelax_weight.py
    python benchmarks/bench_crelax_weight.py --weights 1.0 1.3 1.5 --cfactor 8
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import braidpy  # noqa: E402
from _report import min_median, print_table, seconds  # noqa: E402
from examples.ex02_heat1d import Heat1D  # noqa: E402


def solve(args, weight):
    app = Heat1D(nspace=args.nspace)
    clock = time.perf_counter()
    r = braidpy.solve(app, 0.0, args.tstop, args.ntime, cfactor=args.cfactor, nrelax=1,
                      crelax_weight=weight, abs_tol=args.tol, max_iter=100)
    return time.perf_counter() - clock, r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nspace", type=int, default=129)
    p.add_argument("--ntime", type=int, default=4096)
    p.add_argument("--tstop", type=float, default=4 * math.pi)
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--tol", type=float, default=1e-8)
    p.add_argument("--weights", type=float, nargs="+", default=[1.0, 1.3])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    times = {w: [] for w in args.weights}
    results = {}
    for _ in range(args.repeats):  # interleaved: the machine's load hits every weight alike
        for w in args.weights:
            elapsed, results[w] = solve(args, w)
            times[w].append(elapsed)
    base = min_median(times[args.weights[0]])[1]
    rows = []
    for w in args.weights:
        r = results[w]
        factor = (r.residuals[-1] / r.residuals[0]) ** (1 / max(1, len(r.residuals) - 1))
        lo, med = min_median(times[w])
        rows.append([f"{w:g}", r.iterations, f"{r.residuals[-1]:.2e}", f"{factor:.3f}",
                     seconds(lo), seconds(med), f"{med / base:.2f}"])
    print_table(["crelax_weight", "iterations", "last ||r||", "conv. factor", "time min",
                 "time median", "median / w=%g" % args.weights[0]], rows,
                title=f"heat (examples/ex02_heat1d.py): nspace {args.nspace}, ntime "
                      f"{args.ntime}, tstop {args.tstop:g}, cfactor {args.cfactor}, FCF, "
                      f"tol {args.tol:g}, {args.repeats} repeats, 1 rank")


if __name__ == "__main__":
    main()
