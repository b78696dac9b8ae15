"""Does weighted C-relaxation (crelax_weight 1.3) reach 1e-8 on ex02's heat equation in fewer iterations and less time than plain FCF?

Each weight solves examples/ex02_heat1d.py's problem (Heat1D, batched step) with cfactor
4 and FCF relaxation (Options.crelax_weight, XBraid's braid_SetCRelaxWt), one rank; the
weights alternate round by round (_harness.alternate), so that the machine's drift falls
on all alike. Prints iterations, last residual, mean convergence factor, min and median
wall and CPU time (this process's; it leaves out waits for a core on a shared machine),
and each one's ratio to the first weight's, min (median).

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
from _harness import (alternate, host_info, min_median, print_host, print_table,  # noqa: E402
                      ratio, seconds)
from examples.ex02_heat1d import Heat1D  # noqa: E402


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

    results, cpu = {}, {w: [] for w in args.weights}

    def solve(w):
        def run():
            start = time.process_time()
            results[w] = braidpy.solve(Heat1D(nspace=args.nspace), 0.0, args.tstop,
                                       args.ntime, cfactor=args.cfactor, nrelax=1,
                                       crelax_weight=w, abs_tol=args.tol, max_iter=100)
            cpu[w].append(time.process_time() - start)
        return run

    timed = alternate({w: solve(w) for w in args.weights}, args.repeats)
    print_host(host_info(mpi=False))
    rows = []
    for w in args.weights:
        r = results[w]
        factor = (r.residuals[-1] / r.residuals[0]) ** (1 / max(1, len(r.residuals) - 1))
        lo, med = min_median(timed[w])
        rows.append([f"{w:g}", r.iterations, f"{r.residuals[-1]:.2e}", f"{factor:.3f}",
                     f"{seconds(lo)} ({seconds(med)})", ratio(timed[w], timed[args.weights[0]]),
                     ratio(cpu[w], cpu[args.weights[0]])])
    print_table(["crelax_weight", "iterations", "last ||r||", "conv. factor",
                 "wall min (median)", f"wall / w={args.weights[0]:g}",
                 f"CPU / w={args.weights[0]:g}"], rows,
                title=f"heat (examples/ex02_heat1d.py): nspace {args.nspace}, ntime "
                      f"{args.ntime}, tstop {args.tstop:g}, cfactor {args.cfactor}, FCF, "
                      f"tol {args.tol:g}, {args.repeats} rounds, 1 rank")


if __name__ == "__main__":
    main()
