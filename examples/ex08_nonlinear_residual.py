"""Example 8: a nonlinear implicit problem with a user residual (XBraid's ``-res``).

``u_t = u_xx - u**3`` on ``x in [0, pi]`` with ``u = 0`` at both ends and
``u(x, 0) = 2 sin(x)``. Space uses the second-order finite-difference Laplacian ``L`` on
``nspace`` points; time uses backward Euler, whose step solves the nonlinear equations

    A(u_1, u_0) = u_1 - dt (L u_1 - u_1**3) - u_0 = 0

by Newton's method (tridiagonal Jacobians ``I - dt L + 3 dt diag(u_1**2)``).

The app defines ``residual(ustop, r, status)``, which computes ``A(ustop, r)``. With it,
braidpy's FAS uses this residual, and the coarse levels' right-hand side reaches the step
as ``fstop``: the step solves ``A(u_1, u_0) = fstop`` (Newton on the whole equation),
instead of braidpy adding the right-hand side after the step. The step also gets
``ustop``, the value at ``t1`` the solver holds from its last iteration: Newton starts
there, and as MGRIT converges that guess is nearly the answer, so later iterations take
fewer Newton steps. ``--no-guess`` starts Newton from ``u`` instead, for comparison.

Before solving, ``braidpy.testing.check_app`` checks the app, including its residual
rule: ``residual(step(u, fstop=f), u) == f``.

Run it serially::

    python examples/ex08_nonlinear_residual.py

or with the time grid split over 4 MPI ranks (same iterations, same residuals)::

    mpiexec -n 4 python examples/ex08_nonlinear_residual.py
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
from scipy.linalg import solve_banded

import braidpy
from braidpy.parallel import world
from braidpy.testing import check_app

__all__ = ["NonlinearHeat", "main"]


class NonlinearHeat(braidpy.App):
    """``u_t = u_xx - u**3`` on [0, pi], u = 0 at both ends, backward Euler by Newton.

    The state holds the ``nspace - 2`` interior values. Residual norms use the discrete
    L2 norm ``sqrt(h * sum(u**2))``.

    Parameters
    ----------
    nspace : int, optional
        Grid points in x, boundaries included (>= 3). Default 129.
    use_guess : bool, optional
        Start Newton from ``ustop`` (True, default) or from ``u``.

    Attributes
    ----------
    newton_steps : int
        Newton iterations taken by this rank's steps so far.
    steps : int
        Steps taken by this rank so far.

    Examples
    --------
    >>> import braidpy
    >>> app = NonlinearHeat(nspace=17)
    >>> r = braidpy.solve(app, 0.0, 1.0, 32, cfactor=4, abs_tol=1e-10, batch=False)
    >>> r.levels, r.residuals[-1] < 1e-10
    (3, True)
    """

    def __init__(self, nspace: int = 129, use_guess: bool = True):
        if isinstance(nspace, bool) or not isinstance(nspace, (int, np.integer)) or nspace < 3:
            raise ValueError(f"nspace must be an int >= 3, got {nspace!r}")
        self.nspace = int(nspace)
        self.x = np.linspace(0.0, math.pi, self.nspace)
        self.h = math.pi / (self.nspace - 1)
        self.use_guess = use_guess
        self.newton_steps = 0
        self.steps = 0

    # --- the braidpy contract -------------------------------------------------------------

    def init(self, t: float) -> np.ndarray:
        """2 sin(x) at tstart, the initial guess 0 elsewhere."""
        if t == self.tstart:
            return 2.0 * np.sin(self.x[1:-1])
        return np.zeros(self.nspace - 2)

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any,
             fstop: Optional[np.ndarray] = None, ustop: Optional[np.ndarray] = None) -> None:
        """Solve A(w, u) = fstop (0 if None) for w by Newton's method; u <- w."""
        dt = t1 - t0
        b = u.copy() if fstop is None else u + fstop
        w = (ustop if self.use_guess and ustop is not None else u).copy()
        n = w.size
        off = -dt / self.h**2
        ab = np.empty((3, n))
        ab[0, 1:] = off
        ab[2, :-1] = off
        for _ in range(50):  # until the update is at rounding level
            g = w - dt * (self._laplacian(w) - w**3) - b
            ab[1] = 1.0 + 2.0 * dt / self.h**2 + 3.0 * dt * w**2
            delta = solve_banded((1, 1), ab, g)
            w -= delta
            self.newton_steps += 1
            if float(np.max(np.abs(delta))) <= 1e-14 * (1.0 + float(np.max(np.abs(w)))):
                break
        else:
            raise RuntimeError(f"Newton did not converge in the step from t = {t0:g}")
        self.steps += 1
        u[:] = w

    def residual(self, ustop: np.ndarray, r: np.ndarray, status: Any) -> None:
        """r <- A(ustop, r) = ustop - dt (L ustop - ustop**3) - r."""
        dt = status.t1 - status.t0
        r[:] = ustop - dt * (self._laplacian(ustop) - ustop**3) - r

    def norm(self, u: np.ndarray) -> float:
        """Discrete L2 norm sqrt(h * sum(u**2))."""
        return math.sqrt(self.h * float(np.dot(u, u)))

    # --- helpers ----------------------------------------------------------------------------

    def _laplacian(self, u: np.ndarray) -> np.ndarray:
        """(u[i-1] - 2 u[i] + u[i+1]) / h**2 with zero boundary values."""
        out = -2.0 * u
        out[1:] += u[:-1]
        out[:-1] += u[1:]
        return out / self.h**2


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nspace", type=int, default=129, help="grid points in x (default 129)")
    p.add_argument("--ntime", type=int, default=256, help="time steps (default 256)")
    p.add_argument("--tstop", type=float, default=1.0, help="final time (default 1)")
    p.add_argument("--cfactor", type=int, default=4, help="coarsening factor (default 4)")
    p.add_argument("--max-levels", type=int, default=30, help="most levels (default 30)")
    p.add_argument("--tol", type=float, default=1e-9, help="absolute tolerance (default 1e-9)")
    p.add_argument("--no-guess", action="store_true",
                   help="start Newton from u instead of the solver's ustop")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> braidpy.Result:
    """Run the example; returns the :class:`braidpy.Result` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank = 0 if comm is None else comm.Get_rank()
    size = 1 if comm is None else comm.Get_size()

    report = check_app(NonlinearHeat(nspace=args.nspace), 0.0, args.tstop, args.ntime)
    app = NonlinearHeat(nspace=args.nspace, use_guess=not args.no_guess)
    r = braidpy.solve(app, 0.0, args.tstop, args.ntime, comm=comm, cfactor=args.cfactor,
                      max_levels=args.max_levels, abs_tol=args.tol, batch=False)
    steps = np.array([app.newton_steps, app.steps])
    if comm is not None:
        steps = comm.allreduce(steps)
    if rank != 0:
        return r

    seq = NonlinearHeat(nspace=args.nspace)
    u = seq.init(0.0)
    for t0, t1 in zip(r.times[:-1], r.times[1:]):
        seq.step(u, float(t0), float(t1), None)
    print(f"ex08: u_t = u_xx - u^3 on [0, pi], {args.nspace} points in x, {args.ntime} "
          f"backward Euler steps (Newton) on [0, {args.tstop:g}], {size} MPI rank(s)")
    print(f"  {report.headline()}")
    print(f"  hierarchy: {r.levels} levels, intervals "
          + " > ".join(str(info["n"]) for info in r.level_info))
    print(f"  iterations: {r.iterations}")
    print("  residual history:")
    for k, norm in zip(r.residual_iterations, r.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    print(f"  Newton iterations per step: {steps[0] / steps[1]:.2f} "
          f"({'from u' if args.no_guess else 'from ustop'}; sequential stepping: "
          f"{seq.newton_steps / seq.steps:.2f})")
    print(f"  max |MGRIT - sequential| at t_N = {float(np.max(np.abs(r.final - u))):.3e}")
    return r


if __name__ == "__main__":
    main()
