"""How close does batched MGRIT at one rank come to sequential stepping with the same
integrator on braidpy.problems' implicit linear problems (goal: within 2.5x)?

Problems: Heat1D (nx 1001), Heat2D (65 x 65), Advection1D (nx 513), backward Euler,
--ntime steps each. Sequential: a fresh app, ``init`` and ``ntime`` ``step`` calls.
MGRIT: ``braidpy.solve`` of a fresh app (batched: its ``step_stacked``), cfactor 16,
FCF-relaxation, 2 levels, abs_tol 1e-8, access_level 0. The two alternate round by round
(_harness.alternate); prints iterations, the final states' difference and the min
(median) wall ratio MGRIT / sequential.

    python benchmarks/bench_problems_serial.py [--ntime 256] [--repeats 3]
"""

import argparse

import numpy as np
from _harness import alternate, host_info, print_host, print_table, ratio

import braidpy
from braidpy.problems import Advection1D, Heat1D, Heat2D

PROBLEMS = {"heat 1D": lambda n: Heat1D(nx=1001, ntime=n),
            "heat 2D": lambda n: Heat2D(nx=65, ny=65, ntime=n),
            "advection 1D": lambda n: Advection1D(nx=513, ntime=n)}
MGRIT = dict(cfactor=16, nrelax=1, max_levels=2, abs_tol=1e-8, access_level=0)


def sequential(problem):
    app = problem.app()
    t = problem.times
    u = app.init(t[0])
    for k in range(problem.ntime):
        out = app.step(u, t[k], t[k + 1], None)
        u = u if out is None else out
    return u


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print_host(host_info(mpi=False))
    rows = []
    for name, make in PROBLEMS.items():
        problem, got = make(args.ntime), {}
        timed = alternate({
            "sequential": lambda: got.__setitem__("seq", sequential(problem)),
            "mgrit": lambda: got.__setitem__("mgrit", problem.solve(**MGRIT)),
        }, args.repeats)
        diff = float(np.max(np.abs(np.asarray(got["mgrit"].final) - got["seq"])))
        rows.append([name, got["mgrit"].iterations, f"{diff:.1e}",
                     ratio(timed["mgrit"], timed["sequential"])])
    print_table(["problem", "MGRIT iterations", "max |MGRIT - sequential|",
                 "wall MGRIT / sequential"], rows,
                title=f"backward Euler, {args.ntime} steps, cfactor 16, FCF, 2 levels, "
                      f"tol 1e-8, {args.repeats} rounds")


if __name__ == "__main__":
    main()
