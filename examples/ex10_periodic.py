"""Example 10: the periodic steady state of a forced, damped oscillator, found directly.

``x'' + gamma x' + omega0^2 x = F cos(Omega t)`` written as a first-order system for
``u = (x, v)``, stepped by backward Euler over one period ``T = 2 pi / Omega`` of the
forcing. After the transients die out the oscillator follows a ``T``-periodic orbit;
time stepping from some initial condition reaches it only after many periods (about
``1 / gamma`` time units). ``Options(periodic=True)`` (XBraid's ``braid_SetPeriodic``)
asks MGRIT for the solution with ``u(T) = u(0)`` instead: one period of time steps, all
in parallel, no initial condition.

braidpy's periodic grid has point ``ntime`` at ``tstop`` equal to point 0 (bit for bit),
so ``Result.final`` is ``u(T) = u(0)``; ``init`` is a guess everywhere, ``init(tstart)``
included. The script checks MGRIT against the periodic solution of the discrete
problem computed sequentially: ``u_0 = B^N u_0 + g`` solved for ``u_0`` (``B`` the
backward Euler matrix, ``g`` the end of a period stepped from zero), then one period
stepped from it; and it prints the amplitude of ``x`` against the continuous steady
state's ``F / sqrt((omega0^2 - Omega^2)^2 + (gamma Omega)^2)``.

Run it serially::

    python examples/ex10_periodic.py
    python examples/ex10_periodic.py --gamma 0.05 --Omega 1.2

or with the period split over 4 MPI ranks (same iterations, same residuals)::

    mpiexec -n 4 python examples/ex10_periodic.py
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import braidpy
from braidpy.parallel import world

__all__ = ["Oscillator", "main", "periodic_sequential"]


class Oscillator(braidpy.App):
    """``x'' + gamma x' + omega0^2 x = F cos(Omega t)`` as ``u = (x, v)``, backward Euler.

    A step solves ``(I - dt A) u_1 = u_0 + dt f(t_1)`` with ``A = [[0, 1], [-omega0^2,
    -gamma]]`` and ``f(t) = (0, F cos(Omega t))``; the inverse of ``I - dt A`` is kept
    per step size (one per MGRIT level).

    Examples
    --------
    >>> import braidpy, numpy as np
    >>> app = Oscillator()
    >>> r = braidpy.solve(app, 0.0, app.period, 64, periodic=True, abs_tol=1e-12)
    >>> bool(np.array_equal(r.final, r.solution(index=0)))   # u(T) = u(0)
    True
    """

    def __init__(self, omega0: float = 1.0, gamma: float = 0.1, force: float = 1.0,
                 Omega: float = 0.8):
        self.omega0, self.gamma, self.force, self.Omega = omega0, gamma, force, Omega
        self.A = np.array([[0.0, 1.0], [-omega0 ** 2, -gamma]])
        self._inverse: dict[float, np.ndarray] = {}

    @property
    def period(self) -> float:
        return 2 * math.pi / self.Omega

    def init(self, t: float) -> np.ndarray:
        """A guess (periodic problems have no initial condition): at rest."""
        return np.zeros(2)

    def _inv(self, dt: float) -> np.ndarray:
        inv = self._inverse.get(dt)
        if inv is None:
            inv = self._inverse[dt] = np.linalg.inv(np.eye(2) - dt * self.A)
        return inv

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        dt = t1 - t0
        rhs = u + dt * np.array([0.0, self.force * math.cos(self.Omega * t1)])
        u[:] = self._inv(dt) @ rhs

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Rows of U stepped together, each as step steps it."""
        for k in range(U.shape[0]):
            self.step(U[k], float(t0s[k]), float(t1s[k]), status)

    def amplitude(self) -> float:
        """The continuous steady state's amplitude of x."""
        return self.force / math.hypot(self.omega0 ** 2 - self.Omega ** 2,
                                       self.gamma * self.Omega)


def periodic_sequential(app: Oscillator, times: np.ndarray) -> np.ndarray:
    """The discrete periodic orbit (rows: the states at ``times``), by linear algebra and
    sequential stepping."""
    def period(u: np.ndarray, forced: bool) -> list[np.ndarray]:
        out = [u.copy()]
        for t0, t1 in zip(times[:-1], times[1:]):
            dt = float(t1) - float(t0)
            f = app.force * math.cos(app.Omega * float(t1)) if forced else 0.0
            u = app._inv(dt) @ (u + dt * np.array([0.0, f]))
            out.append(u)
        return out

    g = period(np.zeros(2), True)[-1]
    BN = np.column_stack([period(e, False)[-1] for e in np.eye(2)])
    u0 = np.linalg.solve(np.eye(2) - BN, g)
    return np.array(period(u0, True))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ntime", type=int, default=1024,
                   help="time steps per period (cfactor must divide every level's count)")
    p.add_argument("--omega0", type=float, default=1.0, help="natural frequency")
    p.add_argument("--gamma", type=float, default=0.1, help="damping")
    p.add_argument("--force", type=float, default=1.0, help="forcing amplitude F")
    p.add_argument("--Omega", type=float, default=0.8, help="forcing frequency")
    p.add_argument("--max-levels", type=int, default=3)
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--tol", type=float, default=1e-10, help="absolute tolerance")
    p.add_argument("--max-iter", type=int, default=50)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> braidpy.Result:
    """Run the example; returns the :class:`braidpy.Result` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    app = Oscillator(args.omega0, args.gamma, args.force, args.Omega)
    r = braidpy.solve(app, 0.0, app.period, args.ntime, comm=comm, periodic=True,
                      max_levels=args.max_levels, cfactor=args.cfactor, min_coarse=2,
                      abs_tol=args.tol, max_iter=args.max_iter)
    # The orbit gathered on rank 0: every rank's owned points.
    mine = {i: r.solution(index=i) for i in r.owned}
    parts = [mine] if comm is None else comm.gather(mine, root=0)
    if rank != 0:
        return r
    orbit = np.array([v for part in parts for _, v in sorted(part.items())])
    print(f"ex10: periodic forced oscillator, omega0 = {args.omega0:g}, gamma = "
          f"{args.gamma:g}, Omega = {args.Omega:g}, {args.ntime} backward Euler steps per "
          f"period, {size} MPI rank(s)")
    print(f"  hierarchy: {r.levels} levels, intervals "
          + " > ".join(str(info["n"]) for info in r.level_info))
    print(f"  iterations: {r.iterations}")
    print("  residual history:")
    for k, norm in zip(r.residual_iterations, r.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    reference = periodic_sequential(app, r.times)
    print(f"  |u(T) - u(0)| = {np.max(np.abs(orbit[-1] - orbit[0])):.3e}")
    print(f"  max |MGRIT - periodic sequential| over the period = "
          f"{np.max(np.abs(orbit - reference)):.3e}")
    print(f"  amplitude of x: {np.max(np.abs(orbit[:, 0])):.6e} "
          f"(continuous steady state: {app.amplitude():.6e})")
    return r


if __name__ == "__main__":
    main()
