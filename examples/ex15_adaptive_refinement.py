"""Example 15: adaptive temporal refinement driven by Richardson error estimates, stiff ODE.

The Prothero-Robinson problem u' = lam (u - g(t)) + g'(t), g(t) = sin(t), u(0) = 1,
has the exact solution u(t) = sin(t) + exp(lam t): a boundary layer of width 1/|lam|
at t = 0, then the smooth sin(t). Backward Euler on a uniform grid with |lam| dt >> 1
stays stable but smears the layer, and its largest error sits there. With
``est_error=True`` MGRIT estimates each fine interval's local error by comparing the
fine and coarse solutions at C-points (Richardson, local order 2 for backward Euler);
the step reads it with ``status.error_estimate()`` and, where it exceeds both an
absolute tolerance and a fraction of the largest estimate on the grid (XBraid's ex-06
``-refinet`` rule, which uses the fraction 0.02 alone), asks with
``status.set_rfactor(2)`` for its interval to be halved. MGRIT then rebuilds the fine
grid and goes on: the points go into the layer.

The example solves three times and prints, for each, the grid size, the iterations, the
largest error at the grid points against the exact solution and the error at T: a
uniform coarse grid, the adaptive run (the grid size after each refinement too), and a
uniform grid with as many intervals as the adaptive run ended with. Spreading those
points evenly makes the largest error worse than on the coarse grid: it sits at the
first step, where backward Euler's damping 1/(1 + |lam| dt) is farthest from
exp(-|lam| dt) when |lam| dt is near 1.

Run it serially or over 2 MPI ranks (the same grids, iterations and errors)::

    python examples/ex15_adaptive_refinement.py
    mpiexec -n 2 python examples/ex15_adaptive_refinement.py
    python examples/ex15_adaptive_refinement.py --tol 1e-5 --max-refinements 16
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import braidpy
from braidpy.parallel import world

__all__ = ["ProtheroRobinson", "AdaptiveProtheroRobinson", "exact", "main"]


def exact(t: Any, lam: float) -> Any:
    """The exact solution sin(t) + exp(lam t) (u(0) = 1)."""
    return np.sin(t) + np.exp(lam * np.asarray(t, dtype=float))


class ProtheroRobinson(braidpy.App):
    """u' = lam (u - sin t) + cos t, u(0) = 1; one backward Euler step per call:
    ``u1 = (u0 - dt lam sin t1 + dt cos t1) / (1 - dt lam)``, stable for every dt."""

    def __init__(self, lam: float = -1.0e3):
        if lam >= 0:
            raise ValueError(f"lam must be negative (a stiff decay), got {lam}")
        self.lam = float(lam)

        self.max_error = 0.0

    def init(self, t: float) -> np.ndarray:
        """u(0) = 1 at tstart, the guess 0 elsewhere."""
        return np.array([1.0 if t == self.tstart else 0.0])

    def access(self, u: np.ndarray, status: Any) -> None:
        """At the end: the largest |u_i - u(t_i)| over the grid points this rank holds."""
        if status.done:
            self.max_error = max(self.max_error, abs(float(u[0]) - float(exact(status.t,
                                                                                self.lam))))

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        dt = t1 - t0
        u[0] = (u[0] + dt * (math.cos(t1) - self.lam * math.sin(t1))) / (1.0 - dt * self.lam)


class AdaptiveProtheroRobinson(ProtheroRobinson):
    """The same steps; a fine step from iteration 2 on whose error estimate exceeds both
    ``tol`` and ``fraction`` times the largest estimate of the whole grid (kept by the
    sync, reduced over the ranks) asks for its interval to be halved.

    From iteration 2: the estimates need one cycle to exist, and they are wiped by each
    refinement (XBraid's ex-06 guards its rule the same way)."""

    def __init__(self, lam: float = -1.0e3, tol: float = 1e-4, fraction: float = 0.02,
                 comm: Any = None, report: bool = False):
        super().__init__(lam)
        self.tol, self.fraction, self.comm, self.report = float(tol), float(fraction), comm, report
        self.max_estimate = -1.0
        self.sizes: list[int] = []

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        super().step(u, t0, t1, status)
        if status is None or status.level > 0 or status.iteration <= 1:
            return
        est = status.error_estimate()
        if est is not None and est > self.tol and est > self.fraction * self.max_estimate:
            status.set_rfactor(2)

    def sync(self, status: Any) -> None:
        if status.phase not in ("cycle", "refine"):
            return
        est = status.error_estimates()
        mine = max([-1.0] + ([] if est is None else est.tolist()))
        if self.comm is None:
            self.max_estimate = mine
        else:
            from mpi4py import MPI

            self.max_estimate = self.comm.allreduce(mine, op=MPI.MAX)
        if status.phase == "refine":
            self.sizes.append(status.ntime)
            if self.report:
                print(f"    refinement {status.nrefine}: {status.ntime} intervals", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--ntime", type=int, default=64, help="intervals of the coarse grid")
    p.add_argument("--tstop", type=float, default=2.0, help="final time T (tstart is 0)")
    p.add_argument("--lam", type=float, default=-1.0e3, help="stiffness lam < 0")
    p.add_argument("--tol", type=float, default=1e-4,
                   help="refine where the error estimate exceeds this")
    p.add_argument("--fraction", type=float, default=0.02,
                   help="... and this fraction of the largest estimate")
    p.add_argument("--max-refinements", type=int, default=12, help="most grid rebuilds")
    p.add_argument("--tpoints-cutoff", type=int, default=4096,
                   help="no rebuild once the grid has this many intervals")
    p.add_argument("--cfactor", type=int, default=2, help="coarsening factor")
    p.add_argument("--max-levels", type=int, default=30, help="most MGRIT levels")
    p.add_argument("--abs-tol", type=float, default=1e-10, help="residual tolerance")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, braidpy.Result]:
    """Run the three solves; returns their Results (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    say = print if rank == 0 else (lambda *a, **k: None)
    common = dict(comm=comm, cfactor=args.cfactor, max_levels=args.max_levels,
                  abs_tol=args.abs_tol, max_iter=100, skip=False)

    def error(r: braidpy.Result, app: ProtheroRobinson) -> float:
        """max |u_i - u(t_i)| over all grid points (every rank's access, reduced)."""
        if comm is None:
            return app.max_error
        from mpi4py import MPI

        return comm.allreduce(app.max_error, op=MPI.MAX)

    def line(name: str, r: braidpy.Result, err: float) -> None:
        at_t = abs(float(r.final[0]) - float(exact(args.tstop, args.lam)))
        say(f"  {name}: {len(r.times) - 1} intervals, {r.iterations} iterations, "
            f"max error {err:.3e}, error at T {at_t:.3e}")

    say(f"ex15: u' = {args.lam:g} (u - sin t) + cos t, u(0) = 1 on [0, {args.tstop:g}], "
        f"backward Euler, {size} MPI rank(s)")

    coarse_app = ProtheroRobinson(args.lam)
    coarse = braidpy.solve(coarse_app, 0.0, args.tstop, args.ntime, **common)
    coarse_err = error(coarse, coarse_app)
    line("uniform coarse", coarse, coarse_err)

    say(f"  adaptive (est_error, local order 2; refine where estimate > {args.tol:g} and "
        f"> {args.fraction:g} x max):")
    app = AdaptiveProtheroRobinson(args.lam, args.tol, args.fraction, comm, report=rank == 0)
    adaptive = braidpy.solve(app, 0.0, args.tstop, args.ntime, refine=True,
                             est_error=True, local_order=2,
                             max_refinements=args.max_refinements,
                             tpoints_cutoff=args.tpoints_cutoff, **common)
    adaptive_err = error(adaptive, app)
    times = np.asarray(adaptive.times, dtype=float)
    dts = np.diff(times)
    line("adaptive", adaptive, adaptive_err)
    say(f"    refinements: {adaptive.refinements}; smallest dt {dts.min():.3e}, "
        f"largest dt {dts.max():.3e}; {int(np.sum(times <= 10.0 / abs(args.lam))) - 1} "
        f"intervals in the layer t <= 10/|lam|")

    n = len(times) - 1
    same_app = ProtheroRobinson(args.lam)
    same = braidpy.solve(same_app, 0.0, args.tstop, n, **common)
    same_err = error(same, same_app)
    line("uniform, same size", same, same_err)
    say(f"  adaptive / uniform same-size error: {adaptive_err / same_err:.3e}")
    return dict(coarse=coarse, adaptive=adaptive, uniform=same)


if __name__ == "__main__":
    main()
