"""Example 1: the scalar ODE u' = lambda*u, stepped by backward Euler, solved in time by MGRIT.

The smallest complete braidpy program, in the spirit of XBraid's ex-01. The app
only says how to start (``init``) and how to take one step (``step``); braidpy
supplies the vector operations for NumPy arrays and runs MGRIT over the time
grid, in parallel when launched under MPI.

Run it serially::

    python examples/ex01_scalar_ode.py
    python examples/ex01_scalar_ode.py --lam -2 --cfactor 2 --fmg --plot residuals.png

or with the time grid split over 4 MPI ranks (same iterations, same residuals)::

    mpiexec -n 4 python examples/ex01_scalar_ode.py

The printed errors compare the MGRIT solution at the final time with the
sequential backward-Euler solution (what MGRIT converges to, so this error
follows the tolerance) and with the exact value exp(lambda*T) (the time
discretization error, which MGRIT cannot beat).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

import braidpy
from braidpy.parallel import world

__all__ = ["ScalarODE", "main", "sequential_solution"]


class ScalarODE(braidpy.App):
    """u' = lam * u with u(tstart) = u0, one backward Euler step per call.

    The state is a NumPy array of length one. Backward Euler gives
    ``u1 = u0 / (1 - lam*dt)``; it is stable for every ``dt`` when ``lam <= 0``,
    which matters because MGRIT's coarse levels step with multiples of the fine
    ``dt``.

    Parameters
    ----------
    lam : float, optional
        The rate lambda. Default -1.
    u0 : float, optional
        Initial value. Default 1.

    Examples
    --------
    >>> import braidpy
    >>> r = braidpy.solve(ScalarODE(lam=-1.0), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - (1 + 1 / 64) ** -64) < 1e-12)
    True
    """

    def __init__(self, lam: float = -1.0, u0: float = 1.0):
        self.lam = float(lam)
        self.u0 = float(u0)

    def init(self, t: float) -> np.ndarray:
        """The initial value at tstart, and the initial guess 0 elsewhere."""
        return np.array([self.u0 if t == self.tstart else 0.0])

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """Backward Euler from t0 to t1, in place."""
        denominator = 1.0 - self.lam * (t1 - t0)
        if denominator <= 0.0:
            raise ValueError(
                f"backward Euler needs lam*dt < 1, got lam={self.lam} and dt={t1 - t0} "
                f"(coarse MGRIT levels use large dt: lower --max-levels or --cfactor)"
            )
        u /= denominator


def sequential_solution(app: braidpy.App, times: ArrayLike) -> Any:
    """Step the app through ``times`` one step after another; the value at the last time.

    This is what MGRIT converges to (it solves the same all-at-once system),
    so it is the reference for the MGRIT error.
    """
    grid = np.asarray(times, dtype=float)
    app.tstart, app.tstop, app.ntime = float(grid[0]), float(grid[-1]), grid.size - 1
    u = app.init(app.tstart)
    for t0, t1 in zip(grid[:-1].tolist(), grid[1:].tolist()):
        out = app.step(u, t0, t1, None)
        if out is not None:
            u = out
    return u


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ntime", type=int, default=4096, help="number of fine time steps")
    p.add_argument("--tstop", type=float, default=5.0, help="final time T (tstart is 0)")
    p.add_argument("--lam", type=float, default=-1.0, help="rate lambda in u' = lambda*u")
    p.add_argument("--max-levels", type=int, default=30, help="most MGRIT levels")
    p.add_argument("--cfactor", type=int, default=4, help="coarsening factor")
    p.add_argument("--nrelax", type=int, default=1, help="0 = F-relaxation, 1 = FCF, ...")
    p.add_argument("--fmg", action="store_true", help="F-cycles instead of V-cycles")
    p.add_argument("--tol", type=float, default=1e-10, help="absolute residual tolerance")
    p.add_argument("--max-iter", type=int, default=100, help="most MGRIT iterations")
    p.add_argument("--print-level", type=int, default=0,
                   help="braidpy's own progress output (0 = quiet, 1 = residual per iteration)")
    p.add_argument("--plot", metavar="FILE.png", help="write the residual history plot here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> braidpy.Result:
    """Run the example; returns the :class:`braidpy.Result` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())

    app = ScalarODE(lam=args.lam)
    tstart, tstop = 0.0, args.tstop
    r = braidpy.solve(app, tstart, tstop, args.ntime, comm=comm,
                      max_levels=args.max_levels, cfactor=args.cfactor, nrelax=args.nrelax,
                      fmg=args.fmg, abs_tol=args.tol, max_iter=args.max_iter,
                      print_level=args.print_level)
    if rank != 0:
        return r

    u_seq = sequential_solution(ScalarODE(lam=args.lam), r.times)[0]
    u_mgrit = r.final[0]
    u_exact = app.u0 * math.exp(args.lam * (tstop - tstart))
    print(f"ex01: u' = {args.lam:g} u on [{tstart:g}, {tstop:g}], {args.ntime} backward Euler "
          f"steps, {size} MPI rank(s)")
    print(f"  hierarchy: {r.levels} levels, intervals "
          + " > ".join(str(info["n"]) for info in r.level_info)
          + f"; nrelax {args.nrelax}, {'F' if args.fmg else 'V'}-cycles")
    print(f"  iterations: {r.iterations}")
    print("  residual history:")
    for k, norm in zip(r.residual_iterations, r.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    print(f"  u(T): MGRIT {u_mgrit:.15e}, sequential {u_seq:.15e}, exact {u_exact:.15e}")
    print(f"  |MGRIT - sequential| at t_N = {abs(u_mgrit - u_seq):.3e}")
    print(f"  |MGRIT - exp(lam T)|        = {abs(u_mgrit - u_exact):.3e}  "
          f"(|sequential - exp(lam T)| = {abs(u_seq - u_exact):.3e})")
    print(f"  wall time: {r.timings['total']:.3f} s")
    if args.plot:
        from braidpy.plotting import plot_residuals

        plot_residuals(r, args.plot, labels=[f"{size} rank(s)"], abs_tol=args.tol,
                       title=f"ex01: u' = {args.lam:g} u, {args.ntime} steps, "
                             f"cfactor {args.cfactor}")
        print(f"  wrote {args.plot}")
    return r


if __name__ == "__main__":
    main()
