"""Example 8: advection with forward Euler, kept stable on every level by spatial coarsening.

``u_t + u_x = 0`` on ``x in [0, 1]`` with the inflow value ``u(0, t) = 0`` and a smooth
bump as the initial condition, first-order upwind differences in space and forward
Euler in time: ``u_i <- u_i - c (u_i - u_{i-1})`` with the CFL number ``c = dt/dx``.
Forward Euler is stable only for ``c <= 1``. MGRIT's coarse levels step with 2, 4, 8...
times the fine ``dt``: on the same spatial grid their CFL number doubles per level
(0.5, 1, 2, 4 for the default settings) and the coarse levels blow up. Coarsening in
space as well (XBraid's ``braid_SetSpatialCoarsen``/``braid_SetSpatialRefine``, the
``-sc`` option of its drive-burgers-1D) halves ``dx`` with ``dt`` and every level keeps
``c = 0.5``.

The app adds two methods to the contract (docs/quickstart.md, "Spatial coarsening"):
``coarsen(u, status)`` returns the state on the next coarser level (full weighting:
``(u_{2i-1} + 2 u_{2i} + u_{2i+1}) / 4``, the ends injected) and ``refine(e, status)``
a coarse correction on the finer level (linear interpolation). braidpy coarsens the
fine C-point values and residuals when it restricts, and refines the correction
before adding it to the fine C-points; states of each level have their own size.

Run it serially::

    python examples/ex09_advection_spatial.py
    python examples/ex09_advection_spatial.py --no-spatial     # the coarse CFL grows

or with the time grid split over 4 MPI ranks (same iterations, same residuals)::

    mpiexec -n 4 python examples/ex09_advection_spatial.py
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import braidpy
from braidpy.parallel import world

__all__ = ["Advection1D", "main", "sequential_solution"]


class Advection1D(braidpy.App):
    """``u_t + u_x = 0`` on [0, 1], inflow 0 at x = 0, upwind forward Euler.

    A state holds all points of its level's grid, ``nspace + 1`` on the fine level and
    ``n/2 + 1`` on the next coarser one for a level of ``n + 1`` points (``nspace``
    must be a power of two). With ``spatial=False`` the app has no ``coarsen`` and
    ``refine``, and every level uses the fine grid.

    Attributes
    ----------
    seen : dict
        Level -> (dx, dt) of the steps taken there (the CFL number is dt/dx).

    Examples
    --------
    >>> import braidpy
    >>> app = Advection1D(64)
    >>> r = braidpy.solve(app, 0.0, 0.25, 32, max_levels=3, cfactor=2, abs_tol=1e-10)
    >>> [round(dt / dx, 3) for dx, dt in (app.seen[level] for level in range(3))]
    [0.5, 0.5, 0.5]
    >>> r.final.shape
    (65,)
    """

    def __init__(self, nspace: int = 256, spatial: bool = True):
        if isinstance(nspace, bool) or not isinstance(nspace, int) or nspace < 2 or \
                nspace & (nspace - 1):
            raise ValueError(f"nspace must be a power of two >= 2, got {nspace!r}")
        self.nspace = nspace
        self.seen: dict[int, tuple[float, float]] = {}
        if spatial:
            self.coarsen = self._coarsen
            self.refine = self._refine

    def init(self, t: float) -> np.ndarray:
        """The bump ``sin(pi (x - 0.05) / 0.2)**2`` on [0.05, 0.25] at tstart, 0 elsewhere."""
        x = np.linspace(0.0, 1.0, self.nspace + 1)
        if t == self.tstart:
            return np.where((x > 0.05) & (x < 0.25), np.sin(np.pi * (x - 0.05) / 0.2) ** 2, 0.0)
        return np.zeros_like(x)

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """One forward Euler step of the upwind scheme, in place."""
        dx = 1.0 / (u.shape[-1] - 1)
        c = (t1 - t0) / dx
        self.seen[status.level] = (dx, t1 - t0)
        u[..., 1:] -= c * (u[..., 1:] - u[..., :-1])
        u[..., 0] = 0.0

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Rows of U (states of one level) stepped together, as step steps each."""
        for k in range(U.shape[0]):
            self.step(U[k], float(t0s[k]), float(t1s[k]), status)

    def norm(self, u: np.ndarray) -> float:
        """Discrete L2 norm ``sqrt(dx * sum(u**2))`` of the state's own grid."""
        return math.sqrt(float(np.dot(u, u)) / (u.size - 1))

    def _coarsen(self, u: np.ndarray, status: Any) -> np.ndarray:
        """Full weighting onto every second point; the two ends injected."""
        c = u[::2].copy()
        c[1:-1] = 0.25 * u[1:-2:2] + 0.5 * u[2:-1:2] + 0.25 * u[3::2]
        return c

    def _refine(self, e: np.ndarray, status: Any) -> np.ndarray:
        """Linear interpolation: coarse points copied, midpoints averaged."""
        f = np.empty(2 * e.size - 1)
        f[::2] = e
        f[1::2] = 0.5 * (e[:-1] + e[1:])
        return f


def sequential_solution(app: Advection1D, times: np.ndarray) -> np.ndarray:
    """The fine forward Euler solution at the final time, stepped one step at a time."""
    app.tstart = float(times[0])
    u = app.init(float(times[0]))

    class Fine:
        level = 0

    for t0, t1 in zip(times[:-1], times[1:]):
        app.step(u, float(t0), float(t1), Fine)
    return u


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nspace", type=int, default=256, help="space intervals (a power of 2)")
    p.add_argument("--ntime", type=int, default=256, help="time steps")
    p.add_argument("--tstop", type=float, default=0.5, help="final time (CFL = tstop*nspace/ntime)")
    p.add_argument("--max-levels", type=int, default=4)
    p.add_argument("--cfactor", type=int, default=2)
    p.add_argument("--tol", type=float, default=1e-6, help="absolute tolerance")
    p.add_argument("--max-iter", type=int, default=40)
    p.add_argument("--no-spatial", dest="spatial", action="store_false",
                   help="coarsen in time only (every level on the fine spatial grid)")
    p.add_argument("--no-batched", dest="batched", action="store_false",
                   help="step one state per call")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> braidpy.Result:
    """Run the example; returns the :class:`braidpy.Result` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    app = Advection1D(args.nspace, spatial=args.spatial)
    r = braidpy.solve(app, 0.0, args.tstop, args.ntime, comm=comm, batch=args.batched,
                      max_levels=args.max_levels, cfactor=args.cfactor, abs_tol=args.tol,
                      max_iter=args.max_iter, skip=False)
    # Every rank saw every level's steps: gather the CFL numbers on rank 0.
    seen = dict(app.seen) if comm is None else \
        {k: v for part in comm.allgather(app.seen) for k, v in part.items()}
    if rank != 0:
        return r
    print(f"ex08: u_t + u_x = 0, {args.nspace} upwind intervals, {args.ntime} forward Euler "
          f"steps to t = {args.tstop:g}, {size} MPI rank(s), spatial coarsening "
          f"{'on' if args.spatial else 'off'}")
    print(f"  hierarchy: {r.levels} levels, intervals "
          + " > ".join(str(info["n"]) for info in r.level_info))
    print("  CFL dt/dx per level: "
          + ", ".join(f"{seen[lv][1] / seen[lv][0]:.3g}" for lv in sorted(seen)))
    print(f"  iterations: {r.iterations}")
    print("  residual history:")
    for k, norm in zip(r.residual_iterations, r.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    if r.final is not None and np.all(np.isfinite(r.final)):
        u_seq = sequential_solution(Advection1D(args.nspace), r.times)
        print(f"  max |MGRIT - sequential| at t_N = {np.max(np.abs(r.final - u_seq)):.3e}")
    return r


if __name__ == "__main__":
    main()
