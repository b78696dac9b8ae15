"""Example 2: the 1D heat equation with implicit Euler and sparse LU, solved in time by MGRIT.

Builds on example 1 with a real spatial problem, in the spirit of XBraid's
ex-02: ``u_t = u_xx + f`` on ``x in [0, pi]`` with ``u = 0`` at both ends and
the forcing ``f = sin(x) (cos(t) - sin(t))`` chosen so that the exact solution
is ``u(x, t) = sin(x) cos(t)``. Space uses the second-order finite-difference
Laplacian on ``nspace`` points; time uses backward Euler, one sparse
tridiagonal solve per step.

MGRIT's coarse levels step with ``cfactor``, ``cfactor**2``, ... times the fine
step, so the app keeps one sparse LU factorization per distinct ``dt`` and
reuses it: a whole solve factorizes only about as many matrices as there are
levels.

The default MGRIT settings (cfactor 16, F-relaxation) suit this strongly
damped problem: a solve takes about as many iterations (7) as with cfactor 4
and FCF relaxation, but steps over each fine interval about 8 times instead
of 20.

The app also has a batched step (``step_stacked``, docs/batching.md): when
braidpy advances many intervals at once, their states are solved together,
by multi-right-hand-side LU solves (per distinct ``dt``) instead of one solve
per state. Each row comes out bit for bit as the one-state ``step`` computes
it, so ``--batched`` (the default) and ``--no-batched`` print the same
iterations, residuals and errors; the batched run is faster.

Run it serially::

    python examples/ex02_heat1d.py
    python examples/ex02_heat1d.py --plot-solution heat.png --plot-residuals res.png

or with the time grid split over 4 MPI ranks (same iterations, same residuals)::

    mpiexec -n 4 python examples/ex02_heat1d.py

``--no-batched`` makes braidpy call ``step`` once per state (for comparison).

``--refinet TOL`` refines the time grid where it is too coarse, as XBraid's ex-02
``-refinet`` does: braidpy keeps a Richardson estimate of the local error at every fine
point (``est_error=True``, ``local_order=2`` for backward Euler), and from the first
iteration that has them each fine step asks for its interval to be split into
``ceil(sqrt(estimate / TOL))`` equal steps (``status.set_rfactor``; backward Euler's
local error shrinks with dt**2). braidpy then rebuilds the fine grid and goes on
iterating on it (``refine=True``), until no step asks for more or the grid has
``--max-tpoints`` intervals::

    python examples/ex02_heat1d.py --nspace 33 --ntime 16 --cfactor 2 --nrelax 1 --refinet 1e-3

The printed errors compare the MGRIT solution on the whole space-time grid
with the sequential implicit-Euler solution (what MGRIT converges to) and with
the exact solution (the discretization error).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import ArrayLike

import braidpy
from braidpy.parallel import world

__all__ = ["Heat1D", "RefiningHeat1D", "exact_solution", "main", "sequential_solution"]


def exact_solution(x: np.ndarray, t: float) -> np.ndarray:
    """u(x, t) = sin(x) cos(t)."""
    return np.sin(x) * math.cos(t)


class Heat1D(braidpy.App):
    """``u_t = u_xx + sin(x)(cos t - sin t)`` on [0, pi], u = 0 at x = 0 and x = pi.

    The state holds the ``nspace - 2`` interior values (the boundary values are
    zero); ``x`` holds all ``nspace`` grid points. One step solves
    ``(I - dt A) u1 = u0 + dt f(t1)``, where ``A`` is the tridiagonal
    ``(1, -2, 1) / h**2`` Laplacian; ``step_stacked`` takes such steps for many
    states at once. Residual norms use the discrete L2 norm
    ``sqrt(h * sum(u**2))``, so tolerances mean the same on every spatial grid.

    Parameters
    ----------
    nspace : int, optional
        Grid points in x, boundaries included (>= 3). Default 513.

    Attributes
    ----------
    x : numpy.ndarray
        All grid points, ``linspace(0, pi, nspace)``.
    h : float
        Grid spacing.
    factorizations : dict
        The cached sparse LU factorizations, keyed by (rounded) step size.

    Examples
    --------
    >>> import braidpy
    >>> app = Heat1D(nspace=33)
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-10)
    >>> r.levels, len(app.factorizations) <= r.levels + 1
    (3, True)
    >>> u = app.with_boundary(r.final)
    >>> bool(np.max(np.abs(u - exact_solution(app.x, 1.0))) < 1e-2)
    True
    """

    def __init__(self, nspace: int = 513):
        if isinstance(nspace, bool) or not isinstance(nspace, (int, np.integer)) or nspace < 3:
            raise ValueError(f"nspace must be an int >= 3, got {nspace!r}")
        self.nspace = int(nspace)
        self.x = np.linspace(0.0, math.pi, self.nspace)
        self.h = math.pi / (self.nspace - 1)
        n = self.nspace - 2
        main_diag = np.full(n, -2.0 / self.h**2)
        off_diag = np.full(n - 1, 1.0 / self.h**2)
        self.A = sp.diags([off_diag, main_diag, off_diag], [-1, 0, 1], format="csc")
        self._identity = sp.identity(n, format="csc")
        self._sin_x = np.sin(self.x[1:-1])
        self.factorizations: dict[float, Any] = {}
        # Right-hand sides per SuperLU call in step_stacked. SuperLU sweeps all of
        # them once per column of L and U, so a block of at most 128 KB stays in
        # cache; and from about 100 right-hand sides on, its BLAS calls start
        # OpenBLAS's threads, which cost far more than they save on blocks this
        # small (up to 20x slower on a busy 2-core machine).
        self._rhs_per_solve = min(32, max(1, 16384 // n))

    # --- the braidpy contract -------------------------------------------------------------

    def init(self, t: float) -> np.ndarray:
        """The initial condition sin(x) at tstart, the initial guess 0 elsewhere."""
        if t == self.tstart:
            return exact_solution(self.x[1:-1], t)
        return np.zeros(self.nspace - 2)

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """One backward Euler step from t0 to t1, in place."""
        dt, lu = self._factorization(t1 - t0)
        rhs = u + dt * self.forcing(t1)
        u[:] = lu.solve(rhs)

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Row k of ``U`` one backward Euler step from t0s[k] to t1s[k], in place.

        Rows are grouped by step size (on one level they share it, up to the
        round-off that ``_factorization`` absorbs) and each group is solved by
        its cached LU factorization, up to 32 right-hand sides per call.
        Right-hand sides and solves are those of :meth:`step`, row by row, so
        the results are bitwise equal to ``step`` on each row.
        """
        if len(U) == 1:  # nothing to share: skip the grouping's overhead
            self.step(U[0], float(t0s[0]), float(t1s[0]), status)
            return
        for dt, lu, rows in self._groups(t0s, t1s):
            factors = self._forcing_factors(t1s[rows])
            # A few rows at a time, so that each block stays in cache from the
            # right-hand side to the write-back.
            for start in range(0, rows.size, self._rhs_per_solve):
                part = slice(start, start + self._rhs_per_solve)
                # rhs = u + dt * f(t1) per row: the elementwise operations of step()
                rhs = np.multiply.outer(factors[part], self._sin_x)
                rhs *= dt
                rhs += U[rows[part]]
                # rhs.T is Fortran-ordered, (nspace - 2, rows): each right-hand side
                # one contiguous column, as SuperLU takes them.
                U[rows[part]] = lu.solve(rhs.T).T

    def norm(self, u: np.ndarray) -> float:
        """Discrete L2 norm sqrt(h * sum(u**2))."""
        return math.sqrt(self.h * float(np.dot(u, u)))

    # --- helpers ----------------------------------------------------------------------------

    def forcing(self, t: float) -> np.ndarray:
        """f(x, t) = -sin(x) sin(t) + sin(x) cos(t) at the interior points."""
        return self._sin_x * (math.cos(t) - math.sin(t))

    def _forcing_factors(self, t1s: np.ndarray) -> np.ndarray:
        """cos(t) - sin(t) for each t in t1s, with the math module as in forcing().

        NumPy's vectorized cos and sin need not round as the math module does
        (they have SIMD code paths of their own); one differing bit would make the
        batched rows differ from step()'s. The loop costs about 0.1 us a row.
        """
        return np.array([math.cos(t) - math.sin(t) for t in t1s.tolist()])

    def _groups(self, t0s: np.ndarray, t1s: np.ndarray):
        """(dt, LU, row indices) for each distinct rounded step size among the rows."""
        steps = t1s - t0s
        if (steps == steps[0]).all():  # one step size exactly: skip the sort below
            dt, lu = self._factorization(float(steps[0]))
            return [(dt, lu, np.arange(steps.size))]
        sizes, which = np.unique(steps, return_inverse=True)
        keyed: dict[float, tuple[Any, list[int]]] = {}
        for j, size in enumerate(sizes.tolist()):
            dt, lu = self._factorization(size)
            keyed.setdefault(dt, (lu, []))[1].append(j)
        if len(keyed) == 1:  # sizes that differ by round-off only: one group
            [(dt, (lu, _))] = keyed.items()
            return [(dt, lu, np.arange(t0s.size))]
        return [(dt, lu, np.flatnonzero(np.isin(which, js))) for dt, (lu, js) in keyed.items()]

    def with_boundary(self, u: np.ndarray) -> np.ndarray:
        """The state with its two (zero) boundary values added: all nspace points."""
        return np.concatenate(([0.0], np.asarray(u), [0.0]))

    def _factorization(self, dt: float):
        """(dt used, LU of I - dt*A), factorized once per distinct step size.

        ``t1 - t0`` carries round-off from the time grid, so steps that are
        meant to be equal differ in their last bits. The size is rounded to 12
        significant digits first and that rounded ``dt`` is used for the whole
        step, which keeps a step a function of (t0, t1) alone: every rank,
        and the sequential reference, take exactly the same steps.
        """
        key = float(f"{dt:.11e}")
        lu = self.factorizations.get(key)
        if lu is None:
            matrix = (self._identity - key * self.A).tocsc()
            # Tridiagonal: the natural ordering has no fill-in.
            lu = spla.splu(matrix, permc_spec="NATURAL")
            self.factorizations[key] = lu
        return key, lu


class RefiningHeat1D(Heat1D):
    """:class:`Heat1D` whose fine steps ask for temporal refinement (XBraid's ex-02
    ``-refinet``): a step whose end point carries the error estimate ``e`` asks for its
    interval to be split into ``ceil(sqrt(e / error_tol))`` steps (1 before the first
    estimates exist). Solve it with ``refine=True, est_error=True, local_order=2``.

    Parameters
    ----------
    nspace : int, optional
        As for :class:`Heat1D`.
    error_tol : float
        The local error each step should end up below (in the app's norm).

    Examples
    --------
    >>> app = RefiningHeat1D(nspace=17, error_tol=1e-3)
    >>> r = braidpy.solve(app, 0.0, 1.0, 8, cfactor=2, nrelax=1, abs_tol=1e-8,
    ...                   refine=True, est_error=True, local_order=2)
    >>> r.refinements > 0 and len(r.times) - 1 > 8
    True
    """

    def __init__(self, nspace: int = 513, *, error_tol: float):
        super().__init__(nspace)
        if isinstance(error_tol, bool) or not isinstance(error_tol, (int, float)) \
                or not error_tol > 0:
            raise ValueError(f"error_tol must be a float > 0, got {error_tol!r}")
        self.error_tol = float(error_tol)

    def rfactor(self, estimate: float | None) -> int:
        """The split a step with this end-point estimate asks for (None: no estimate)."""
        if estimate is None:
            return 1
        return max(1, math.ceil(math.sqrt(estimate / self.error_tol)))

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        super().step(u, t0, t1, status)
        if status is not None and status.level == 0:
            status.set_rfactor(self.rfactor(status.error_estimate()))

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        super().step_stacked(U, t0s, t1s, status)
        if status is None or status.level != 0:
            return
        if len(U) == 1:  # Heat1D.step_stacked took step(), which asked already
            return
        est, start = status.error_estimates(), status.owned(0).start
        for k, i in enumerate(status.fine_indices.tolist()):  # the estimate at each end
            status.set_rfactor(self.rfactor(None if est is None else float(est[i + 1 - start])),
                               row=k)


def sequential_solution(app: Heat1D, times: ArrayLike) -> np.ndarray:
    """Step the app through ``times`` one step after another; all states, one row per time.

    This is what MGRIT converges to (the same all-at-once system), so it is the
    reference for the MGRIT error. Rows hold all ``nspace`` points.
    """
    grid = np.asarray(times, dtype=float)
    app.tstart, app.tstop, app.ntime = float(grid[0]), float(grid[-1]), grid.size - 1
    U = np.empty((grid.size, app.nspace))
    u = app.init(app.tstart)
    U[0] = app.with_boundary(u)
    for i, (t0, t1) in enumerate(zip(grid[:-1].tolist(), grid[1:].tolist()), start=1):
        app.step(u, t0, t1, None)
        U[i] = app.with_boundary(u)
    return U


def gather_solution(app: Heat1D, r: braidpy.Result, comm: Any | None) -> np.ndarray | None:
    """The whole space-time solution on rank 0 (None elsewhere), one row per fine time.

    Each rank holds the fine time points ``r.owned``; they are collected with
    ``comm.gather`` and put in order on rank 0.
    """
    mine = (r.owned.start, np.array([app.with_boundary(r.solution(index=i)) for i in r.owned]))
    pieces = [mine] if comm is None else comm.gather(mine, root=0)
    if pieces is None:
        return None
    U = np.empty((len(r.times), app.nspace))
    for start, rows in pieces:
        U[start:start + len(rows)] = rows
    return U


def describe_stepping(r: braidpy.Result) -> str:
    """Which stepping path the solve took, with rank 0's call counts."""
    c = r.counts
    if c["step_batch"]:
        return (f"batched (step_stacked): {c['step_batch']} calls for {c['step_batch_items']} "
                f"states, plus {c['step']} single step calls, on rank 0")
    return f"unbatched: {c['step']} single step calls on rank 0"


def mgrit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``braidpy.solve`` that the command line sets."""
    options = dict(max_levels=args.max_levels, cfactor=args.cfactor, nrelax=args.nrelax,
                   crelax_weight=args.crelax_weight, fmg=args.fmg, abs_tol=args.tol,
                   max_iter=args.max_iter, print_level=args.print_level, batch=args.batched)
    if args.refinet is not None:
        options.update(refine=True, est_error=True, local_order=2,
                       tpoints_cutoff=args.max_tpoints)
    return options


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nspace", type=int, default=513, help="grid points in x, boundaries included")
    p.add_argument("--ntime", type=int, default=1024, help="number of fine time steps")
    p.add_argument("--tstop", type=float, default=math.pi,
                   help="final time T (tstart is 0); by T = pi the solution turns from sin(x) "
                        "to -sin(x)")
    p.add_argument("--max-levels", type=int, default=30, help="most MGRIT levels")
    # cfactor 16 with F-relaxation: MGRIT on one rank took 3.4-4.3x the time of
    # sequential stepping (N 16384, nspace 1025, batched), against 10-12x for cfactor
    # 4 with FCF; this diffusive problem converges in as many iterations either way
    # (docs/batching.md, benchmarks/bench_solver.py heat).
    p.add_argument("--cfactor", type=int, default=16, help="coarsening factor")
    p.add_argument("--nrelax", type=int, default=0, help="0 = F-relaxation, 1 = FCF, ...")
    p.add_argument("--crelax-weight", type=float, default=1.0,
                   help="C-relaxation weight w (with --nrelax >= 1): C-points become "
                        "(1-w) u + w Phi(u); about 1.3 speeds up FCF on this problem "
                        "(benchmarks/bench_solver.py crelax)")
    p.add_argument("--fmg", action="store_true", help="F-cycles instead of V-cycles")
    p.add_argument("--tol", type=float, default=1e-8,
                   help="absolute tolerance on the residual (discrete L2 norm in space)")
    p.add_argument("--max-iter", type=int, default=100, help="most MGRIT iterations")
    p.add_argument("--batched", action=argparse.BooleanOptionalAction, default=True,
                   help="let braidpy step many intervals at once (step_stacked: one "
                        "multi-right-hand-side solve per step size); --no-batched: one "
                        "step call per state")
    p.add_argument("--refinet", type=float, metavar="TOL",
                   help="temporal refinement by Richardson error estimates (XBraid's ex-02 "
                        "-refinet): each fine step asks to be split into "
                        "ceil(sqrt(estimate / TOL)) steps")
    p.add_argument("--max-tpoints", type=int, default=10000,
                   help="with --refinet: no more refinement once the grid has this many "
                        "intervals (XBraid's ex-02 uses 10000)")
    p.add_argument("--print-level", type=int, default=0,
                   help="braidpy's own progress output (0 = quiet, 1 = residual per iteration)")
    p.add_argument("--plot-solution", metavar="FILE.png",
                   help="write the space-time solution plot here")
    p.add_argument("--plot-residuals", metavar="FILE.png",
                   help="write the residual history plot here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> braidpy.Result:
    """Run the example; returns the :class:`braidpy.Result` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    size = 1 if comm is None else comm.Get_size()

    app = Heat1D(nspace=args.nspace) if args.refinet is None else \
        RefiningHeat1D(nspace=args.nspace, error_tol=args.refinet)
    tstart, tstop = 0.0, args.tstop
    r = braidpy.solve(app, tstart, tstop, args.ntime, comm=comm, **mgrit_options(args))
    U = gather_solution(app, r, comm)
    if U is None:  # not rank 0
        return r

    clock = time.perf_counter()
    U_seq = sequential_solution(Heat1D(nspace=args.nspace), r.times)
    seq_time = time.perf_counter() - clock
    U_exact = np.sin(app.x)[None, :] * np.cos(r.times)[:, None]

    print(f"ex02: 1D heat equation on [0, pi], {args.nspace} points in x, {args.ntime} "
          f"implicit Euler steps on [{tstart:g}, {tstop:g}], {size} MPI rank(s)")
    print(f"  hierarchy: {r.levels} levels, intervals "
          + " > ".join(str(info["n"]) for info in r.level_info)
          + f"; nrelax {args.nrelax}"
          + (f", C-relaxation weight {args.crelax_weight:g}" if args.crelax_weight != 1.0 else "")
          + f", {'F' if args.fmg else 'V'}-cycles")
    if args.refinet is not None:
        print(f"  temporal refinement (--refinet {args.refinet:g}): {r.refinements} "
              f"rebuild(s), {args.ntime} -> {len(r.times) - 1} steps, dt from "
              f"{np.min(np.diff(r.times)):.3e} to {np.max(np.diff(r.times)):.3e}")
    print(f"  stepping: {describe_stepping(r)}")
    print(f"  iterations: {r.iterations}")
    print("  residual history:")
    for k, norm in zip(r.residual_iterations, r.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    dts = sorted(app.factorizations)
    print(f"  sparse LU factorizations on rank 0: {len(dts)} (one per distinct dt: "
          + (", ".join(f"{dt:.4g}" for dt in dts) if len(dts) <= 8 else
             f"{dts[0]:.4g} ... {dts[-1]:.4g}") + ")")
    print(f"  max |MGRIT - sequential| over space-time = {np.max(np.abs(U - U_seq)):.3e}")
    print(f"  max |MGRIT - exact|      over space-time = {np.max(np.abs(U - U_exact)):.3e}  "
          f"(sequential: {np.max(np.abs(U_seq - U_exact)):.3e})")
    print(f"  max |MGRIT - exact| at t_N               = "
          f"{np.max(np.abs(app.with_boundary(r.final) - U_exact[-1])):.3e}")
    print(f"  wall time: MGRIT {r.timings['total']:.3f} s, sequential stepping on rank 0 "
          f"{seq_time:.3f} s")
    if args.plot_solution:
        from braidpy.plotting import plot_solution_1d

        plot_solution_1d(app.x, r.times, U, args.plot_solution,
                         title=f"ex02: u_t = u_xx + f, MGRIT solution ({size} rank(s))")
        print(f"  wrote {args.plot_solution}")
    if args.plot_residuals:
        from braidpy.plotting import plot_residuals

        plot_residuals(r, args.plot_residuals, labels=[f"{size} rank(s)"], abs_tol=args.tol,
                       title=f"ex02: heat equation, {args.nspace} x {args.ntime}, "
                             f"cfactor {args.cfactor}")
        print(f"  wrote {args.plot_residuals}")
    return r


if __name__ == "__main__":
    main()
