"""Example 3: parameter estimation for the 1D heat equation with adjoint MGRIT and L-BFGS-B.

Builds on example 2 with gradients, in the spirit of XBraid's ex-04 (optimal
control with the adjoint). The model is ``u_t = kappa u_xx + c(t) b(x)`` on
``x in [0, pi]`` with ``u = 0`` at both ends, ``u(x, 0) = sin(x) + sin(3x)/2``
and a fixed source profile ``b(x) = exp(-20 (x - 2)**2)``. The unknowns are
the diffusion coefficient ``kappa`` and the source amplitude ``c(t)``,
piecewise constant on ``--blocks`` blocks of time steps. Time uses backward
Euler, ``u_{n+1} = S (u_n + dt c b)`` with ``S = (I - dt kappa L)^-1``.

Synthetic data ``d_i`` come from sequential stepping with the true parameters
(plus ``--noise`` times Gaussian noise). The fit minimizes

    J = sum_{i=1..N} dt/2 ||u_i - d_i||^2  +  alpha/2 ||c||^2

(discrete L2 norm in space) with ``scipy.optimize.minimize(method="L-BFGS-B")``.
Each evaluation of ``J`` and its gradient is one primal and one adjoint MGRIT
solve by a single :class:`braidpy.adjoint.GradientSolver`, warm-started from
the previous evaluation; the regularisation term is added outside braidpy.

Run it serially::

    python examples/ex03_parameter_estimation.py
    python examples/ex03_parameter_estimation.py --check-gradient --noise 0.01

or with the time grid split over MPI ranks (every rank runs the same optimizer
iterations on the same objective and gradient; rank 0 prints)::

    mpiexec -n 4 python examples/ex03_parameter_estimation.py
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.optimize
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from numpy.typing import ArrayLike

import braidpy
from braidpy.adjoint import GradientSolver
from braidpy.parallel import world

__all__ = ["Fit", "HeatParameters", "check_gradient", "fit", "main",
           "synthetic_data", "true_parameters"]

TSTOP = 1.0


class HeatParameters(braidpy.App):
    """``u_t = kappa u_xx + c(t) b(x)`` on [0, pi], u = 0 at both ends, fitted to data.

    The state holds the ``nspace - 2`` interior values. One step is
    ``u1 = S (u0 + dt c_k b)``, ``S = (I - dt kappa L)^-1``, where ``L`` is the
    tridiagonal ``(1, -2, 1) / h**2`` Laplacian and ``c_k`` the amplitude of
    the block ``k`` holding the step. The parameter vector is
    ``theta = (kappa, c_0, ..., c_{B-1})``; :meth:`step_gradient` returns
    ``(dPhi/dtheta)^T w`` as a length ``1 + B`` array. The objective is the
    running term ``dt/2 ||u_i - d_i||^2`` for ``i = 1..N`` (no terminal term),
    with the discrete L2 norm ``||v||^2 = h sum(v**2)``, which is also the
    residual norm MGRIT uses.

    Parameters
    ----------
    nspace : int
        Grid points in x, boundaries included (>= 4).
    ntime : int
        Fine time steps on [0, 1] (>= blocks).
    blocks : int
        Number of blocks of time steps on which ``c`` is constant.

    Attributes
    ----------
    kappa : float
        The current diffusion coefficient.
    c : numpy.ndarray
        The current amplitudes, one per block.
    data : numpy.ndarray or None
        The observations, one row per fine time point (row 0 is unused).
    factorizations : dict
        Sparse LU factorizations of ``I - dt kappa L`` for the current kappa,
        keyed by (rounded) step size.

    Examples
    --------
    >>> app = HeatParameters(nspace=17, ntime=32, blocks=4)
    >>> app.set_parameters(*true_parameters(4))
    >>> app.data = synthetic_data(app)
    >>> app.set_parameters(1.0, np.zeros(4))
    >>> solver = GradientSolver(app, 0.0, 1.0, 32, primal=dict(cfactor=4, abs_tol=1e-12))
    >>> g = solver.evaluate()
    >>> grad = g.total()
    >>> grad.shape, bool(g.objective > 0), bool(grad[0] != 0)
    ((5,), True, True)
    """

    def __init__(self, nspace: int, ntime: int, blocks: int):
        for name, value, least in (("nspace", nspace, 4), ("ntime", ntime, 1),
                                   ("blocks", blocks, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if blocks > ntime:
            raise ValueError(f"blocks ({blocks}) must not exceed ntime ({ntime})")
        self.nspace, self.nsteps, self.blocks = int(nspace), int(ntime), int(blocks)
        self.x = np.linspace(0.0, math.pi, self.nspace)
        self.h = math.pi / (self.nspace - 1)
        self.dt = TSTOP / self.nsteps
        n = self.nspace - 2
        off = np.full(n - 1, 1.0 / self.h**2)
        self.L = sp.diags([off, np.full(n, -2.0 / self.h**2), off], [-1, 0, 1], format="csc")
        self._identity = sp.identity(n, format="csc")
        xi = self.x[1:-1]
        self.u0 = np.sin(xi) + 0.5 * np.sin(3.0 * xi)
        self.b = np.exp(-20.0 * (xi - 2.0) ** 2)
        self.kappa = 1.0
        self.c = np.zeros(self.blocks)
        self.data: np.ndarray | None = None
        self.factorizations: dict[float, Any] = {}

    # --- parameters -----------------------------------------------------------------------

    def set_parameters(self, kappa: float, c: ArrayLike) -> None:
        """Use kappa and the block amplitudes c from now on (drops stale factorizations)."""
        c = np.array(c, dtype=np.float64)
        if c.shape != (self.blocks,):
            raise ValueError(f"c must have {self.blocks} entries, got shape {c.shape}")
        if not float(kappa) > 0.0:
            raise ValueError(f"kappa must be positive, got {kappa!r}")
        if float(kappa) != self.kappa:
            self.factorizations.clear()
        self.kappa, self.c = float(kappa), c

    def block(self, fine_index: int) -> int:
        """The block of the step that starts at fine time index ``fine_index``."""
        return min(int(fine_index) * self.blocks // self.nsteps, self.blocks - 1)

    # --- the braidpy contract -------------------------------------------------------------

    def init(self, t: float) -> np.ndarray:
        """The initial condition at tstart, the initial guess 0 elsewhere."""
        if t == self.tstart:
            return self.u0.copy()
        return np.zeros(self.nspace - 2)

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """``u <- S (u + dt c_k b)``; on coarse levels, k is the block of t0's fine index."""
        dt, lu = self._factorization(t1 - t0)
        u[:] = lu.solve(u + dt * self.c[self.block(status.fine_index)] * self.b)

    def norm(self, u: np.ndarray) -> float:
        """Discrete L2 norm sqrt(h * sum(u**2))."""
        return math.sqrt(self.h * float(np.dot(u, u)))

    # --- the adjoint contract (braidpy.adjoint) -------------------------------------------

    def step_adjoint(self, w: np.ndarray, u: np.ndarray, t0: float, t1: float,
                     status: Any) -> None:
        """``w <- (dPhi/du)^T w = S w`` (S is symmetric), in place."""
        _, lu = self._factorization(t1 - t0)
        w[:] = lu.solve(w)

    def step_gradient(self, w: np.ndarray, u: np.ndarray, t0: float, t1: float,
                      status: Any) -> np.ndarray:
        """``(dPhi/dtheta)^T w``: ``dt (L Phi).(S w)`` for kappa, ``dt b.(S w)`` for c_k."""
        dt, lu = self._factorization(t1 - t0)
        phi = lu.solve(u + dt * self.c[self.block(status.fine_index)] * self.b)
        sw = lu.solve(w)
        g = np.zeros(1 + self.blocks)
        g[0] = dt * float((self.L @ phi) @ sw)
        g[1 + self.block(status.fine_index)] = dt * float(self.b @ sw)
        return g

    def terminal_objective(self, u: np.ndarray) -> float:
        """No terminal term (the last misfit is a running term)."""
        return 0.0

    def terminal_gradient(self, u: np.ndarray) -> np.ndarray:
        """Zero."""
        return np.zeros_like(u)

    def running_objective(self, u: np.ndarray, t: float, status: Any) -> float:
        """``dt/2 ||u_i - d_i||^2`` at fine index i = status.index."""
        return self.misfit_term(u, status.index)

    def running_gradient(self, u: np.ndarray, t: float, status: Any) -> np.ndarray | None:
        """``dt h (u_i - d_i)``, the Euclidean gradient of the running term."""
        if status.index == 0:
            return None
        return self.dt * self.h * (u - self._data(status.index))

    # --- helpers ----------------------------------------------------------------------------

    def simulate(self) -> np.ndarray:
        """Sequential backward Euler on the fine grid: all states, one row per time."""
        U = np.empty((self.nsteps + 1, self.nspace - 2))
        U[0] = self.u0
        for n in range(self.nsteps):
            # The same (t0, t1) as braidpy's grid, so the same rounded dt.
            t0, t1 = TSTOP * n / self.nsteps, TSTOP * (n + 1) / self.nsteps
            dt, lu = self._factorization(t1 - t0)
            U[n + 1] = lu.solve(U[n] + dt * self.c[self.block(n)] * self.b)
        return U

    def misfit_term(self, u: np.ndarray, index: int) -> float:
        """``dt/2 ||u - d_index||^2``; 0 at index 0 (the initial state is not fitted)."""
        if index == 0:
            return 0.0
        r = u - self._data(index)
        return 0.5 * self.dt * self.h * float(r @ r)

    def misfit(self) -> float:
        """The data term of J by sequential stepping (for finite differences)."""
        U = self.simulate()
        total = 0.0
        for i in range(self.nsteps + 1):
            total += self.misfit_term(U[i], i)
        return total

    def _data_all(self) -> np.ndarray:
        if self.data is None:
            raise RuntimeError("set app.data (for instance to synthetic_data(app)) first")
        return self.data

    def _data(self, index: int) -> np.ndarray:
        return self._data_all()[index]

    def _factorization(self, dt: float):
        """(dt used, LU of I - dt*kappa*L), one per distinct rounded step size.

        ``t1 - t0`` differs between equal steps in its last bits; rounding it
        to 12 significant digits, and using that dt for the whole step, keeps
        a step a function of (t0, t1) alone on every rank and in
        :meth:`simulate`.
        """
        key = float(f"{dt:.11e}")
        lu = self.factorizations.get(key)
        if lu is None:
            matrix = (self._identity - (key * self.kappa) * self.L).tocsc()
            lu = spla.splu(matrix, permc_spec="NATURAL")  # tridiagonal: no fill-in
            self.factorizations[key] = lu
        return key, lu


def true_parameters(blocks: int) -> tuple[float, np.ndarray]:
    """kappa = 0.7 and c(t) = 2 + sin(2 pi t) at the block midpoints."""
    mid = (np.arange(blocks) + 0.5) / blocks * TSTOP
    return 0.7, 2.0 + np.sin(2.0 * math.pi * mid)


def synthetic_data(app: HeatParameters, noise: float = 0.0, seed: int = 2718) -> np.ndarray:
    """States of the app's current parameters plus ``noise * max|u|`` Gaussian noise.

    The same on every rank (sequential stepping, a fixed seed).
    """
    U = app.simulate()
    if noise > 0.0:
        rng = np.random.default_rng(seed)
        U = U + noise * float(np.max(np.abs(U))) * rng.standard_normal(U.shape)
    return U


class Fit:
    """J and its gradient for scipy.optimize, one GradientSolver reused across calls.

    The optimizer's unknowns are ``z = theta / scale`` (see :func:`fit`);
    ``fun(z)`` returns ``(J, dJ/dz)``. ``records`` keeps, per evaluation,
    theta, J, dJ/dtheta and the MGRIT iteration counts of the primal and
    adjoint solves.
    """

    def __init__(self, app: HeatParameters, solver: GradientSolver, alpha: float,
                 scale: ArrayLike | None = None):
        self.app, self.solver, self.alpha = app, solver, float(alpha)
        self.scale = np.ones(1 + app.blocks) if scale is None else np.asarray(scale, float)
        self.records: list[dict[str, Any]] = []

    def objective(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """(J, dJ/dtheta) at theta: one primal and one adjoint MGRIT solve, warm-started."""
        theta = np.array(theta, dtype=np.float64)
        c = theta[1:]
        self.app.set_parameters(theta[0], c)
        g = self.solver.evaluate()
        # Both sums are added in time order by braidpy: the same bits on any rank count.
        J = g.objective + 0.5 * self.alpha * float(c @ c)
        grad = g.total()
        grad[1:] += self.alpha * c
        self.records.append(dict(theta=theta, J=J, grad=grad.copy(),
                                 primal=g.primal.iterations, adjoint=g.adjoint.iterations))
        return J, grad

    def fun(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        """(J, dJ/dz) at theta = z * scale."""
        J, grad = self.objective(np.asarray(z) * self.scale)
        return J, grad * self.scale

    def record(self, z: np.ndarray) -> dict[str, Any] | None:
        """The latest evaluation at exactly theta = z * scale, if any."""
        theta = np.asarray(z) * self.scale
        for rec in reversed(self.records):
            if np.array_equal(rec["theta"], theta):
                return rec
        return None


def fit(app: HeatParameters, solver: GradientSolver, theta0: ArrayLike, *, alpha: float,
        maxiter: int, gtol: float = 1e-7, report: Any = None
        ) -> tuple[np.ndarray, scipy.optimize.OptimizeResult, Fit]:
    """Minimize J with L-BFGS-B from theta0; returns (theta, scipy's result, the Fit).

    L-BFGS-B is not scale invariant, and the Gauss-Newton Hessian of J has
    a diagonal entry for kappa some hundreds of times larger than those of
    the block amplitudes (condition number about 1e4 with the default
    sizes). So the optimizer works on kappa and the impulse of each block,
    ``c_k T / B`` (the source injected during the block): the condition
    number drops to about 2e2 and L-BFGS-B needs about a third of the
    iterations. kappa is bounded below by 1e-3. ``gtol`` bounds the largest
    gradient entry in these variables at convergence. ``report(k, record)``
    is called after optimizer iteration k.
    """
    theta0 = np.asarray(theta0, dtype=np.float64)
    scale = np.concatenate(([1.0], np.full(app.blocks, app.blocks / TSTOP)))
    problem = Fit(app, solver, alpha, scale)
    iteration = [0]

    def callback(intermediate_result: scipy.optimize.OptimizeResult) -> None:
        iteration[0] += 1
        if report is not None:
            report(iteration[0], problem.record(intermediate_result.x))

    bounds = [(1e-3, None)] + [(None, None)] * app.blocks
    res = scipy.optimize.minimize(problem.fun, theta0 / scale, jac=True, method="L-BFGS-B",
                                  bounds=bounds, callback=callback,
                                  options=dict(maxiter=maxiter, ftol=1e-15, gtol=gtol))
    return res.x * scale, res, problem


def check_gradient(app: HeatParameters, solver: GradientSolver, theta: np.ndarray,
                   alpha: float, block: int, eps: float = 1e-5) -> list[tuple[str, float, float]]:
    """(name, braidpy gradient, central difference of J) for kappa and c[block].

    The differences step the model sequentially; app parameters end at theta.
    """
    _, grad = Fit(app, solver, alpha).objective(theta)

    def J(th: np.ndarray) -> float:
        app.set_parameters(th[0], th[1:])
        return app.misfit() + 0.5 * alpha * float(th[1:] @ th[1:])

    rows = []
    for name, j in (("kappa", 0), (f"c[{block}]", 1 + block)):
        e = np.zeros_like(theta)
        e[j] = eps
        fd = (J(theta + e) - J(theta - e)) / (2.0 * eps)
        rows.append((name, float(grad[j]), fd))
    app.set_parameters(theta[0], theta[1:])
    return rows


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of this example."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nspace", type=int, default=65, help="grid points in x, boundaries included")
    p.add_argument("--ntime", type=int, default=128, help="fine time steps on [0, 1]")
    p.add_argument("--blocks", type=int, default=8,
                   help="blocks of time steps on which c(t) is constant")
    p.add_argument("--noise", type=float, default=0.0,
                   help="Gaussian noise on the data, relative to max |u|")
    p.add_argument("--seed", type=int, default=2718, help="seed of the noise")
    p.add_argument("--alpha", type=float, default=1e-8, help="Tikhonov weight on c")
    p.add_argument("--tol", type=float, default=1e-8,
                   help="MGRIT absolute tolerance of the primal solve (discrete L2 norm)")
    p.add_argument("--adjoint-tol", type=float, default=None,
                   help="MGRIT absolute tolerance of the adjoint solve; None means tol * 1e-3 "
                        "(the adjoint is driven by dt h (u_i - d_i), far smaller than u)")
    p.add_argument("--cfactor", type=int, default=4, help="coarsening factor")
    p.add_argument("--max-levels", type=int, default=30, help="most MGRIT levels")
    p.add_argument("--maxiter", type=int, default=60, help="most L-BFGS-B iterations")
    p.add_argument("--gtol", type=float, default=1e-7,
                   help="L-BFGS-B stops when no gradient entry (in its scaled unknowns) exceeds "
                        "this")
    p.add_argument("--oneshot", type=int, nargs=2, metavar=("M1", "M2"),
                   help="run exactly M1 primal and M2 adjoint MGRIT iterations per evaluation "
                        "(inexact gradients) instead of solving to tolerance")
    p.add_argument("--check-gradient", action="store_true",
                   help="compare the adjoint gradient with central finite differences first")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the example; returns the fitted and true parameters (on every rank)."""
    args = parse_args(argv)
    comm = world()
    size = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()

    def say(*text: Any) -> None:
        if rank == 0:
            print(*text, flush=True)

    app = HeatParameters(args.nspace, args.ntime, args.blocks)
    kappa_true, c_true = true_parameters(args.blocks)
    app.set_parameters(kappa_true, c_true)
    app.data = synthetic_data(app, args.noise, args.seed)
    theta_true = np.concatenate(([kappa_true], c_true))
    theta0 = np.concatenate(([1.0], np.zeros(args.blocks)))
    app.set_parameters(theta0[0], theta0[1:])

    adjoint_tol = args.tol * 1e-3 if args.adjoint_tol is None else args.adjoint_tol
    mgrit = dict(cfactor=args.cfactor, max_levels=args.max_levels)
    solver = GradientSolver(app, 0.0, TSTOP, args.ntime, comm=comm,
                            primal=dict(mgrit, abs_tol=args.tol),
                            adjoint=dict(mgrit, abs_tol=adjoint_tol),
                            oneshot=None if args.oneshot is None else tuple(args.oneshot))

    say(f"ex03: estimate kappa and c(t) in u_t = kappa u_xx + c(t) b(x) on [0, pi], "
        f"{args.nspace} points in x, {args.ntime} implicit Euler steps on [0, {TSTOP:g}], "
        f"{args.blocks} blocks of c, {size} MPI rank(s)")
    say(f"  data: noise {args.noise:g}; alpha {args.alpha:g}; MGRIT: "
        + (f"one-shot, {args.oneshot[0]} primal + {args.oneshot[1]} adjoint iterations"
           if args.oneshot else f"tol {args.tol:g} (adjoint {adjoint_tol:g})")
        + f", cfactor {args.cfactor}, {solver.primal_core.nlevels} levels")

    if args.check_gradient:
        theta_check = theta0 + 0.5 * (theta_true - theta0)
        say("  gradient check at theta0 + (theta_true - theta0)/2 against central differences:")
        for name, adj, fd in check_gradient(app, solver, theta_check, args.alpha,
                                            block=args.blocks // 2):
            say(f"    dJ/d{name:<6} adjoint {adj: .10e}   finite difference {fd: .10e}   "
                f"rel. error {abs(adj - fd) / abs(fd):.2e}")
        app.set_parameters(theta0[0], theta0[1:])
        solver.reset()

    say("  iter          J          |grad|        kappa   MGRIT its (primal/adjoint)")

    def report(k: int, rec: dict[str, Any] | None) -> None:
        if rec is None:
            return
        say(f"  {k:4d}  {rec['J']:.6e}  {np.linalg.norm(rec['grad']):.6e}  "
            f"{rec['theta'][0]:.8f}   {rec['primal']:2d} / {rec['adjoint']:2d}")

    clock = time.perf_counter()
    theta, res, problem = fit(app, solver, theta0, alpha=args.alpha, maxiter=args.maxiter,
                              gtol=args.gtol, report=report)
    wall = time.perf_counter() - clock

    rel_kappa = abs(theta[0] - kappa_true) / kappa_true
    rel_c = float(np.linalg.norm(theta[1:] - c_true) / np.linalg.norm(c_true))
    say(f"  L-BFGS-B: {res.nit} iterations, {len(problem.records)} evaluations "
        f"(primal + adjoint MGRIT each), {res.message}")
    say(f"  MGRIT iterations in all: {sum(r['primal'] for r in problem.records)} primal, "
        f"{sum(r['adjoint'] for r in problem.records)} adjoint")
    say(f"  final J = {res.fun:.6e}")
    say(f"  kappa: true {kappa_true:.6f}  fitted {theta[0]:.6f}  rel. error {rel_kappa:.2e}")
    say("  c per block:")
    for k in range(args.blocks):
        say(f"    block {k}: true {c_true[k]:.6f}  fitted {theta[1 + k]:.6f}")
    say(f"  c: relative error ||c_fit - c_true|| / ||c_true|| = {rel_c:.2e}")
    say(f"  wall time {wall:.2f} s ({wall / max(1, len(problem.records)):.3f} s per evaluation)")
    return dict(theta=theta, theta_true=theta_true, rel_kappa=rel_kappa, rel_c=rel_c,
                result=res)


if __name__ == "__main__":
    main()
