"""Does richardson=True cut ex-06's final error ~100x in as many iterations, at what cost?

XBraid's ex-06 problem (u' = -4u - t + 1 on [0, 0.5], u(0) = 1, guess 0.456, backward
Euler, local order 2), cfactor 2, FCF, skip=False, one rank, plain and with Richardson
alternating round by round (_harness.alternate). Prints per ntime the iterations, the
error at t = 0.5 against the exact solution, and min (median) wall time of each.

    python benchmarks/bench_richardson.py [--ntime 256 1024] [--repeats 5]
"""

import argparse
import math

import numpy as np
from _harness import alternate, host_info, min_median, print_host, print_table, ratio

import braidpy


class Ex06(braidpy.App):  # u' = -4u - t + 1, backward Euler
    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    def step(self, u, t0, t1, status):
        u += (t1 - t0) * (-4.0 * u + 1 - t1) / (1.0 + 4.0 * (t1 - t0))


EXACT = (1.0 / 16.0) * (-4.0 * 0.5 + 11.0 * math.exp(-4.0 * 0.5) + 5.0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print_host(host_info(mpi=False))
    rows = []  # per ntime: iterations, errors, their ratio, wall time
    for n in args.ntime:
        got = {}

        def run(rich, n=n):
            return lambda: got.__setitem__(rich, braidpy.solve(
                Ex06(), 0.0, 0.5, n, cfactor=2, min_coarse=8, skip=False, abs_tol=1e-10,
                richardson=rich, local_order=2))

        timed = alternate({"plain": run(False), "richardson": run(True)}, args.repeats)
        errs = [abs(float(got[k].final[0]) - EXACT) for k in (False, True)]
        lo, med = min_median(timed["richardson"])
        rows.append([n, f"{got[False].iterations} / {got[True].iterations}",
                     f"{errs[0]:.2e}", f"{errs[1]:.2e}", f"{errs[0] / errs[1]:.0f}x",
                     f"{lo * 1e3:.1f} ({med * 1e3:.1f}) ms",
                     ratio(timed["richardson"], timed["plain"])])
    print_table(["ntime", "iterations plain / rich.", "error plain", "error rich.",
                 "error ratio", "rich. wall min (median)", "wall rich. / plain"], rows,
                title=f"ex-06 (backward Euler), cfactor 2, FCF, tol 1e-10, {args.repeats} rounds")


if __name__ == "__main__":
    main()
