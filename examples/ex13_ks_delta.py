"""Example 13: Kuramoto-Sivashinsky, where Delta correction makes a stalling MGRIT solve
converge.

The Kuramoto-Sivashinsky equation ``u_t = -u_xx - u_xxxx - u u_x`` on a periodic
interval of length 64 (``braidpy.problems.KuramotoSivashinskySpectral``: Fourier
collocation on 64 points, ETDRK4 in time, ``u(x, 0) = sin(2 pi x / 64)``) is chaotic,
with several positive Lyapunov exponents (the largest about 0.1: an error grows tenfold
in a Lyapunov time ``ln(10) / 0.1``). Over a long horizon the coarse levels of plain FAS
MGRIT lose track of the fine trajectory's unstable directions and the iteration stalls.
Delta correction (Vargas, Falgout, Guenther, Schroder, SISC 2023) carries ``delta_rank``
basis vectors with every state, propagated by the step's Jacobian, and corrects each
coarse step by the low-rank difference between the fine and the coarse propagation of
that basis.

The app adds to ETDRK4 its exact tangent: the same four stages linearised at the
stepped state, applied to all basis vectors at once (``status.basis``); ``init_basis``
gives Fourier modes (the constant, then cos and sin of wave numbers 1, 2, ...) and
``inner_prod`` the dot product. The script runs plain FAS and Delta correction with the
same hierarchy and prints both residual histories and whether each converged.

Run it serially::

    python examples/ex13_ks_delta.py

or with the time grid split over 4 MPI ranks (same iterations)::

    mpiexec -n 4 python examples/ex13_ks_delta.py
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import braidpy
from braidpy.parallel import world
from braidpy.problems import KuramotoSivashinskySpectral

__all__ = ["SpectralKSDelta", "main"]


class SpectralKSDelta(braidpy.App):
    """ETDRK4 on ``KuramotoSivashinskySpectral``; the step also maps the Delta basis by
    ETDRK4's exact derivative.

    Examples
    --------
    >>> import numpy as np
    >>> from braidpy.problems import KuramotoSivashinskySpectral
    >>> app = SpectralKSDelta(KuramotoSivashinskySpectral())
    >>> u, v = app.problem.u0, app.init_basis(0.0, 3)
    >>> def phi(w):
    ...     return app.problem._etdrk4(w[None], np.array([0.1]))[0]
    >>> jv = app.tangent(u, 0.1, v[None])[0]
    >>> fd = (phi(u + 1e-6 * v) - phi(u - 1e-6 * v)) / 2e-6
    >>> bool(np.allclose(jv, fd, rtol=1e-7, atol=1e-9))
    True
    """

    def __init__(self, problem: KuramotoSivashinskySpectral):
        self.problem = problem

    def init(self, t: float) -> np.ndarray:
        return self.problem.u0.copy()

    def init_basis(self, t: float, index: int) -> np.ndarray:
        p = self.problem
        if index == 0:
            return np.ones(p.nx) / p.nx
        k = (index + 1) // 2
        x = p.x * (2 * math.pi / p.length)
        return np.cos(k * x) if index % 2 else np.sin(k * x)

    def inner_prod(self, u: np.ndarray, v: np.ndarray) -> float:
        return float(np.dot(u, v))

    def tangent(self, u: np.ndarray, dt: float, W: np.ndarray) -> np.ndarray:
        """``Phi'(u) w`` for each row ``w`` of ``W``: ETDRK4 linearised at ``u``."""
        p = self.problem
        E, E2, Q, f1, f2, f3 = p._coefficients(dt)
        n = p.nx

        def dN(v: np.ndarray, w: np.ndarray) -> np.ndarray:  # N'(v) w, N(v) = g FFT(u^2)
            return p._g * np.fft.rfft(2 * np.fft.irfft(v, n=n) * np.fft.irfft(w, n=n, axis=-1),
                                      axis=-1)

        v = np.fft.rfft(u)
        Nv = p._nonlinear(v)
        a = E2 * v + Q * Nv
        Na = p._nonlinear(a)
        b = E2 * v + Q * Na
        Nb = p._nonlinear(b)
        c = E2 * a + Q * (2 * Nb - Nv)
        w = np.fft.rfft(W, axis=-1)
        dNv = dN(v, w)
        da = E2 * w + Q * dNv
        dNa = dN(a, da)
        db = E2 * w + Q * dNa
        dNb = dN(b, db)
        dc = E2 * da + Q * (2 * dNb - dNv)
        dNc = dN(c, dc)
        w = E * w + dNv * f1 + 2 * (dNa + dNb) * f2 + dNc * f3
        return np.fft.irfft(w, n=n, axis=-1)

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        basis = status.basis  # [] unless this step propagates the Delta basis
        if basis:
            new = self.tangent(u, t1 - t0, np.stack([np.asarray(psi) for psi in basis]))
            for psi, row in zip(basis, new):
                psi[:] = row
        u[:] = self.problem._etdrk4(u[None], np.array([t1 - t0]))[0]

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> np.ndarray:
        """Plain steps of many states at once (without Delta; braidpy steps one state at
        a time when the basis must be propagated)."""
        return self.problem._etdrk4(np.asarray(U), t1s - t0s)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lyapunov-times", type=float, default=16.0,
                   help="tstop in Lyapunov times ln(10)/0.1")
    p.add_argument("--ntime", type=int, default=4096, help="ETDRK4 steps")
    p.add_argument("--rank", type=int, default=8, help="Delta basis vectors")
    p.add_argument("--defer-level", type=int, default=0, help="delta_defer_level")
    p.add_argument("--defer-iter", type=int, default=0, help="delta_defer_iter")
    p.add_argument("--max-levels", type=int, default=3)
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--tol", type=float, default=1e-8, help="absolute tolerance (2-norm)")
    p.add_argument("--max-iter", type=int, default=30)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[int, braidpy.Result]:
    """Run the example; returns the Results by delta_rank (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    problem = KuramotoSivashinskySpectral(lyapunov_times=args.lyapunov_times,
                                          ntime=args.ntime)
    common = dict(max_levels=args.max_levels, cfactor=args.cfactor, nrelax=1, tnorm=2,
                  abs_tol=args.tol, max_iter=args.max_iter)
    delta = dict(delta_rank=args.rank, delta_defer_level=args.defer_level,
                 delta_defer_iter=args.defer_iter, lyapunov_estimate=True)
    results = {}
    for r_delta, extra in ((0, {}), (args.rank, delta)):
        results[r_delta] = braidpy.solve(SpectralKSDelta(problem), problem.tstart,
                                         problem.tstop, problem.ntime, comm=comm,
                                         **common, **extra)
    if rank != 0:
        return results
    print(f"ex13: Kuramoto-Sivashinsky, 64 Fourier modes on length 64, ETDRK4, "
          f"{args.ntime} steps over {args.lyapunov_times:g} Lyapunov times "
          f"(t = {problem.tstop:.2f}), {size} MPI rank(s)")
    print(f"  hierarchy: {results[0].levels} levels, cfactor {args.cfactor}, FCF, "
          f"tolerance {args.tol:g}, at most {args.max_iter} iterations")
    for r_delta, r in results.items():
        label = ("plain FAS (delta_rank 0)" if r_delta == 0 else
                 f"Delta correction (delta_rank {r_delta}, defer level {args.defer_level}, "
                 f"iteration {args.defer_iter})")
        state = "converged" if r.converged else "not converged"
        print(f"  {label}: {r.iterations} iterations, {state}")
        print(f"    residuals: {' '.join(f'{x:.1e}' for x in r.residuals)}")
    plain = results[0]
    tail = plain.residuals[len(plain.residuals) // 2:]
    print(f"  plain FAS over its last {len(tail)} iterations: residual between "
          f"{min(tail):.2e} and {max(tail):.2e}")
    print("  Delta correction's residual history:")
    corrected = results[args.rank]
    for k, norm in zip(corrected.residual_iterations, corrected.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    print(f"  iterations: {plain.iterations} without Delta, {corrected.iterations} with")
    return results


if __name__ == "__main__":
    main()
