"""One side of bench_vs_pymgrit.py: setup + solve of one problem timed in this process.

Sides: ``braidpy`` (braidpy.problems) and ``pymgrit`` (PyMGRIT 1.0.6's classes, in its
venv), the same problems (docs/problems.md). An untimed warm-up (--count-steps: its step
calls), then --repeats timed solves from scratch; under MPI the slowest rank's time. Rank 0
prints ``RESULT <json>``.
"""

from __future__ import annotations

import argparse
import gc
import importlib

import numpy as np
from _problems import count_levels
from _sidecar import result_line, slowest

#: Arenstorf on [0, 2], both sides with Dormand-Prince 5(4) to solve_ivp's default rtol
#: 1e-3, atol 1e-6 inside every step (PyMGRIT's RK45, braidpy's AdaptiveRK). From the zero
#: guess the first iterates put the satellite next to the earth, and some of braidpy's
#: steps there cannot reach t1 (90 of 8224 at 512 steps; none of PyMGRIT's 3776 failed):
#: on_failure="stop" ends them where they stopped, so the iteration goes on as PyMGRIT's
#: does. PyMGRIT's step ignores solve_ivp's status too, but as it asks for t_eval = (t0,
#: t1) a failed step of its would return its start state instead. The converged iterates
#: have no failed steps: both sides reach the same u(T).
ARENSTORF_TSTOP = 2.0
#: problem -> options of its braidpy app beyond the zero guess
APP_OPTIONS = {"arenstorf": dict(on_failure="stop")}


def heat1d_rhs(x, t):
    return -np.sin(np.pi * x) * (np.sin(t) - np.pi ** 2 * np.cos(t))


def heat2d_rhs(x, y, t):
    return -np.sin(np.pi * x) * np.sin(np.pi * y) * (np.sin(t) - 2 * np.pi ** 2 * np.cos(t))


#: problem -> (braidpy.problems call, PyMGRIT class (module, name), its arguments)
#: with n the time steps and nx the spatial points (PyMGRIT's nx, boundary included).
CASES = {
    "dahlquist": (lambda pb, n, nx: pb.Dahlquist(method="BE", ntime=n),
                  ("dahlquist.dahlquist", "Dahlquist"),
                  lambda nx: dict(method="BE", t_start=0, t_stop=5)),
    "brusselator": (lambda pb, n, nx: pb.Brusselator(ntime=n),
                    ("brusselator.brusselator", "Brusselator"),
                    lambda nx: dict(t_start=0, t_stop=12)),
    "arenstorf": (lambda pb, n, nx: pb.ArenstorfOrbit(method="rk45", rtol=1e-3, atol=1e-6,
                                                      tstop=ARENSTORF_TSTOP, ntime=n),
                  ("arenstorf_orbit.arenstorf_orbit", "ArenstorfOrbit"),
                  lambda nx: dict(t_start=0, t_stop=ARENSTORF_TSTOP)),
    "advection1d": (lambda pb, n, nx: pb.Advection1D(nx=nx, ntime=n),
                    ("advection.advection_1d", "Advection1D"),
                    lambda nx: dict(c=1, x_start=-1, x_end=1, nx=nx, t_start=0, t_stop=2)),
    "heat1d": (lambda pb, n, nx: pb.Heat1D(nx=nx, ntime=n),
               ("heat.heat_1d", "Heat1D"),
               lambda nx: dict(x_start=0, x_end=2, nx=nx, a=1, rhs=heat1d_rhs,
                               init_cond=lambda x: np.sin(np.pi * x), t_start=0, t_stop=2)),
    "heat2d": (lambda pb, n, nx: pb.Heat2D(nx=nx, ny=nx, method="CN", ntime=n),
               ("heat.heat_2d", "Heat2D"),
               lambda nx: dict(x_start=0, x_end=1, y_start=0, y_end=1, nx=nx, ny=nx, a=1,
                               rhs=heat2d_rhs, method="CN", t_start=0, t_stop=1,
                               init_cond=lambda x, y: np.sin(np.pi * x) * np.sin(np.pi * y))),
    "allencahn": (lambda pb, n, nx: pb.AllenCahn(nx=nx, ntime=n),
                  ("allen_cahn.allen_cahn", "AllenCahn"),
                  lambda nx: dict(nx=nx, method="IMPL", t_start=0, t_stop=0.02)),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=["braidpy", "pymgrit"], required=True)
    p.add_argument("--problem", choices=sorted(CASES), required=True)
    p.add_argument("--nsteps", type=int, required=True, help="fine time steps (points - 1)")
    p.add_argument("--nx", type=int, default=65, help="spatial points per direction")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--levels", type=int, required=True, help="levels in the hierarchy")
    p.add_argument("--tol", type=float, required=True, help="absolute tolerance, 2-norm")
    p.add_argument("--skip", action="store_true", help="braidpy: skip=True")
    p.add_argument("--repeats", type=int, default=1, help="timed solves")
    p.add_argument("--warmup-nsteps", type=int, help="steps of the warm-up solve (default: all)")
    p.add_argument("--count-steps", action="store_true", help="count step calls in the warm-up")
    p.add_argument("--mpi", action="store_true", help="braidpy: pass MPI.COMM_WORLD")
    return p.parse_args(argv)


def summed(comm, value: int) -> int:
    return value if comm is None else comm.allreduce(value)


def braidpy_solve(args, comm, nsteps: int, levels: int, count: bool) -> dict:
    """Build a braidpy app and solve; the outcome as a dict (step calls if count)."""
    import braidpy
    import braidpy.problems as pb

    p = CASES[args.problem][0](pb, nsteps, args.nx)
    app = p.app(guess="zeros", **APP_OPTIONS.get(args.problem, {}))
    r = braidpy.solve(app, p.tstart, p.tstop, p.ntime, comm=comm,
                      max_levels=levels, cfactor=args.cfactor, nrelax=1, abs_tol=args.tol,
                      rel_tol=0.0, tnorm=2, skip=args.skip, access_level=0)
    final = p.grid(r.final) if isinstance(p, pb.Heat2D) else r.final  # with the boundary
    return {"iterations": r.iterations, "levels": r.levels,
            "steps": summed(comm, r.counts["step"]) if count else None,
            "residual": r.residuals[-1] if r.residuals else None,
            "final": np.ravel(final).tolist()}


def pymgrit_solve(args, comm, nsteps: int, levels: int, count: bool) -> dict:
    """Build a PyMGRIT hierarchy and solver and solve; the outcome as a dict (step calls
    if count: each level's step wrapped, as Mgrit reads problem.step when constructed)."""
    from pymgrit.core.mgrit import Mgrit
    from pymgrit.core.simple_setup_problem import simple_setup_problem

    _, (module, name), kwargs = CASES[args.problem]
    cls = getattr(importlib.import_module(f"pymgrit.{module}"), name)
    hierarchy = simple_setup_problem(cls(nt=nsteps + 1, **kwargs(args.nx)), level=levels,
                                     coarsening=args.cfactor)
    calls = [0]
    for problem in hierarchy if count else ():
        def counted(*a, _step=problem.step, **kw):
            calls[0] += 1
            return _step(*a, **kw)
        problem.step = counted
    mgrit = Mgrit(problem=hierarchy, tol=args.tol, cf_iter=1, cycle_type="V", weight_c=1.0,
                  nested_iteration=False, max_iter=100, t_norm=2, logging_lvl=30,
                  comm_time=comm)
    info = mgrit.solve()
    last = comm.Get_size() - 1
    final = comm.bcast(mgrit.u[0][-1].get_values() if comm.Get_rank() == last else None,
                       root=last)
    return {"iterations": len(info["conv"]), "levels": len(hierarchy),
            "steps": summed(comm, calls[0]) if count else None,
            "residual": float(info["conv"][-1]), "final": np.ravel(final).tolist()}


def main(argv=None) -> None:
    args = parse_args(argv)
    comm = None
    if args.mpi or args.side != "braidpy":  # PyMGRIT always runs on a communicator
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    solve = braidpy_solve if args.side == "braidpy" else pymgrit_solve
    warm_nsteps = args.warmup_nsteps or args.nsteps
    warm_levels = count_levels(warm_nsteps, args.cfactor, args.levels)
    gc.collect()
    _, warm = slowest(comm, lambda: solve(args, comm, warm_nsteps, warm_levels,
                                          args.count_steps))
    times, outcome = [], {}
    for _ in range(args.repeats):
        gc.collect()
        elapsed, outcome = slowest(comm, lambda: solve(args, comm, args.nsteps, args.levels,
                                                       False))
        times.append(elapsed)
    if comm is None or comm.Get_rank() == 0:
        ranks = 1 if comm is None else comm.Get_size()
        result_line({**outcome, "steps": warm["steps"], "times": times, "ranks": ranks})


if __name__ == "__main__":
    main()
