"""One side of bench_vs_pymgrit.py: times setup + solve of one problem in this process.

Run by the driver, never by hand (though it works by hand):

    python _worker.py --side braidpy --problem heat --nsteps 1024 --levels 5 ...
    mpiexec -n 2 python _worker.py --side pymgrit --mpi ...

Sides: ``braidpy`` (current environment), ``pymgrit`` (our ArrayVector apps in
the PyMGRIT virtualenv) and ``pymgrit-builtin`` (PyMGRIT's own float-valued
Dahlquist class, for reference). First one untimed warm-up solve with
``--warmup-nsteps`` steps (default: the full problem), which also counts step
calls (summed over ranks) with ``--count-steps``; then ``--repeats`` timed
solves. A timed solve builds the app, the hierarchy and the solver and
solves; under MPI its time is the maximum over ranks between two barriers.
The garbage collector runs before each solve. Rank 0 prints one line
``RESULT <json>`` with the times and the solver's outcome.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import numpy as np
from _problems import (
    DAHLQUIST_TSTART,
    DAHLQUIST_TSTOP,
    HEAT_TSTART,
    HEAT_TSTOP,
    HeatOperator,
    count_levels,
)

INTERVALS = {"dahlquist": (DAHLQUIST_TSTART, DAHLQUIST_TSTOP), "heat": (HEAT_TSTART, HEAT_TSTOP)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=["braidpy", "pymgrit", "pymgrit-builtin"], required=True)
    p.add_argument("--problem", choices=sorted(INTERVALS), required=True)
    p.add_argument("--nsteps", type=int, required=True, help="fine time steps (points - 1)")
    p.add_argument("--nx", type=int, default=1000, help="heat: interior spatial points")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--levels", type=int, required=True, help="levels in the hierarchy")
    p.add_argument("--tol", type=float, required=True, help="absolute tolerance, 2-norm")
    p.add_argument("--no-skip", action="store_true", help="braidpy: skip=False")
    p.add_argument("--repeats", type=int, default=1, help="timed solves")
    p.add_argument("--warmup-nsteps", type=int, help="steps of the warm-up solve (default: all)")
    p.add_argument("--count-steps", action="store_true", help="count step calls in the warm-up")
    p.add_argument("--mpi", action="store_true", help="braidpy: pass MPI.COMM_WORLD")
    return p.parse_args(argv)


def total_over_ranks(comm, value: int) -> int:
    return value if comm is None else comm.allreduce(value)


def braidpy_solve(args, comm, nsteps: int, levels: int, count: bool) -> dict:
    """Build a braidpy app and solve; the outcome as a dict (step calls if count)."""
    from _apps_braidpy import Dahlquist, Heat

    import braidpy

    t0, t1 = INTERVALS[args.problem]
    if args.problem == "dahlquist":
        app = Dahlquist()
    else:
        app = Heat(HeatOperator(args.nx, (t1 - t0) / nsteps))
    r = braidpy.solve(app, t0, t1, nsteps, comm=comm, max_levels=levels,
                      cfactor=args.cfactor, nrelax=1, abs_tol=args.tol, rel_tol=0.0,
                      tnorm=2, skip=not args.no_skip, access_level=0)
    return {"iterations": r.iterations, "levels": r.levels,
            "steps": total_over_ranks(comm, r.counts["step"]) if count else None,
            "residual": r.residuals[-1] if r.residuals else None,
            "final_norm": float(np.linalg.norm(r.final))}


def count_steps(hierarchy) -> list:
    """Wrap each level's step to count calls; returns the one-element counter."""
    calls = [0]
    for problem in hierarchy:
        def counted(*a, _step=problem.step, **kw):
            calls[0] += 1
            return _step(*a, **kw)
        problem.step = counted  # Mgrit reads problem.step when it is constructed
    return calls


def pymgrit_app(args, nsteps: int):
    t0, t1 = INTERVALS[args.problem]
    grid = {"t_start": t0, "t_stop": t1, "nt": nsteps + 1}
    if args.side == "pymgrit-builtin":
        from pymgrit.dahlquist.dahlquist import Dahlquist as BuiltinDahlquist

        return BuiltinDahlquist(constant_lambda=-1, method="BE", **grid)
    from _apps_pymgrit import Dahlquist, Heat

    if args.problem == "dahlquist":
        return Dahlquist(**grid)
    return Heat(HeatOperator(args.nx, (t1 - t0) / nsteps), **grid)


def pymgrit_solve(args, comm, nsteps: int, levels: int, count: bool) -> dict:
    """Build a PyMGRIT hierarchy and solver and solve; the outcome as a dict (step calls
    if count)."""
    from pymgrit.core.mgrit import Mgrit
    from pymgrit.core.simple_setup_problem import simple_setup_problem

    hierarchy = simple_setup_problem(pymgrit_app(args, nsteps), level=levels,
                                     coarsening=args.cfactor)
    calls = count_steps(hierarchy) if count else None
    mgrit = Mgrit(problem=hierarchy, tol=args.tol, cf_iter=1, cycle_type="V", weight_c=1.0,
                  nested_iteration=False, max_iter=100, t_norm=2, logging_lvl=30,
                  comm_time=comm)
    info = mgrit.solve()
    last = comm.Get_size() - 1
    final = mgrit.u[0][-1].get_values() if comm.Get_rank() == last else None
    final = comm.bcast(final, root=last)
    return {"iterations": len(info["conv"]), "levels": len(hierarchy),
            "steps": total_over_ranks(comm, calls[0]) if count else None,
            "residual": float(info["conv"][-1]), "final_norm": float(np.linalg.norm(final))}


def timed(solve, comm, *solve_args) -> tuple[float, dict]:
    """(seconds, outcome) of one solve; under MPI the slowest rank's seconds."""
    gc.collect()
    if comm is not None:
        comm.Barrier()
    start = time.perf_counter()
    outcome = solve(*solve_args)
    elapsed = time.perf_counter() - start
    if comm is not None:
        from mpi4py import MPI

        elapsed = comm.allreduce(elapsed, op=MPI.MAX)
    return elapsed, outcome


def main(argv=None) -> None:
    args = parse_args(argv)
    comm = None
    if args.mpi or args.side != "braidpy":  # PyMGRIT always runs on a communicator
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    solve = braidpy_solve if args.side == "braidpy" else pymgrit_solve
    warm_nsteps = args.warmup_nsteps or args.nsteps
    warm_levels = count_levels(warm_nsteps, args.cfactor, args.levels)
    _, warm = timed(solve, comm, args, comm, warm_nsteps, warm_levels, args.count_steps)
    times, outcome = [], {}
    for _ in range(args.repeats):
        elapsed, outcome = timed(solve, comm, args, comm, args.nsteps, args.levels, False)
        times.append(elapsed)
    if comm is None or comm.Get_rank() == 0:
        ranks = 1 if comm is None else comm.Get_size()
        result = {**outcome, "steps": warm["steps"], "times": times, "ranks": ranks}
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
