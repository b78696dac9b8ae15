"""Example 12: the Lorenz system with Delta correction, and its Lyapunov exponents.

The Lorenz system (``braidpy.problems.Lorenz``: sigma = 10, rho = 28, beta = 8/3, a
start near the attractor) is chaotic: a perturbation grows like ``exp(0.9 t)``, and so
does the error of a coarse MGRIT level, whose steps are ``cfactor`` times longer. Plain
FAS MGRIT then converges slowly. Delta correction (Vargas, Falgout, Guenther, Schroder,
SISC 2023; XBraid's ``braid_SetDeltaCorrection``, its ex-07) lets every state carry
``delta_rank`` basis vectors that the step maps with its Jacobian; restriction compares
the fine and coarse propagation of that basis and corrects the coarse step by the
low-rank difference, so coarse levels follow the fine level's fastest-growing
directions. The basis, Gram-Schmidt-orthonormalized at C-points, converges to the
leading Lyapunov vectors, and their growth rates to the Lyapunov exponents (about 0.9,
0 and -14.6 for this system).

The app steps forward Euler ``u <- u + h f(u)``, as XBraid's ex-07, and maps each basis
vector ``psi`` in ``status.basis`` to ``(I + h J(u)) psi``, the step's exact derivative
(``Lorenz.jacobian`` gives ``J``). The script solves once with ``delta_rank=0`` (plain
FAS) and once with ``--rank`` (3) vectors, and prints both iteration counts, their
ratio, and the average Lyapunov exponents of the Delta solve.

Run it serially::

    python examples/ex12_lorenz_delta.py
    python examples/ex12_lorenz_delta.py --lyapunov-times 8 --ntime 4096

or with the time grid split over 4 MPI ranks (same iterations, same exponents)::

    mpiexec -n 4 python examples/ex12_lorenz_delta.py
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import braidpy
from braidpy.parallel import world
from braidpy.problems import Lorenz

__all__ = ["LorenzDelta", "main"]

#: One Lyapunov time of the Lorenz system: ln(10) / 0.9 (an error grows tenfold).
LYAPUNOV_TIME = math.log(10.0) / 0.9


class LorenzDelta(braidpy.App):
    """Forward Euler on ``Lorenz``; the step also maps the Delta basis by ``I + h J(u)``.

    Examples
    --------
    >>> import braidpy
    >>> app = LorenzDelta()
    >>> r = braidpy.solve(app, 0.0, 2.0, 512, max_levels=2, cfactor=2, delta_rank=3,
    ...                   abs_tol=1e-8)
    >>> r.iterations < 10
    True
    """

    def __init__(self, problem: Lorenz | None = None):
        self.problem = Lorenz() if problem is None else problem

    def init(self, t: float) -> np.ndarray:
        return self.problem.u0.copy()

    def init_basis(self, t: float, index: int) -> np.ndarray:
        """The unit vectors e_0, e_1, e_2 (Gram-Schmidt leaves them as they are)."""
        e = np.zeros(3)
        e[index] = 1.0
        return e

    def inner_prod(self, u: np.ndarray, v: np.ndarray) -> float:
        return float(np.dot(u, v))

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        h = t1 - t0
        basis = status.basis  # [] unless this step propagates the Delta basis
        if basis:
            F = np.eye(3) + h * self.problem.jacobian(t0, u)  # at the state stepped from
            for psi in basis:
                psi[:] = F @ psi
        u += h * self.problem.rhs(t0, u)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lyapunov-times", type=float, default=4.0,
                   help="tstop in Lyapunov times ln(10)/0.9")
    p.add_argument("--ntime", type=int, default=2048, help="forward Euler steps")
    p.add_argument("--rank", type=int, default=3, help="Delta basis vectors (1 to 3)")
    p.add_argument("--max-levels", type=int, default=3)
    p.add_argument("--cfactor", type=int, default=2)
    p.add_argument("--tol", type=float, default=1e-6, help="absolute tolerance")
    p.add_argument("--max-iter", type=int, default=100)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[int, braidpy.Result]:
    """Run the example; returns the Results by delta_rank (on every rank)."""
    args = parse_args(argv)
    if not 1 <= args.rank <= 3:
        raise SystemExit(f"--rank must be 1, 2 or 3, got {args.rank}")
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    tstop = args.lyapunov_times * LYAPUNOV_TIME
    common = dict(max_levels=args.max_levels, cfactor=args.cfactor, nrelax=0, skip=False,
                  abs_tol=args.tol, max_iter=args.max_iter)
    delta = dict(delta_rank=args.rank, lyapunov_estimate=True, lyapunov_exponents=True)
    results = {}
    for r_delta, extra in ((0, {}), (args.rank, delta)):
        app = LorenzDelta()
        results[r_delta] = braidpy.solve(app, 0.0, tstop, args.ntime, comm=comm,
                                         **common, **extra)
    if rank != 0:
        return results
    plain, corrected = results[0], results[args.rank]
    print(f"ex12: Lorenz, forward Euler, {args.ntime} steps over {args.lyapunov_times:g} "
          f"Lyapunov times (t = {tstop:.4f}), {size} MPI rank(s)")
    print(f"  hierarchy: {plain.levels} levels, cfactor {args.cfactor}, F-relaxation, "
          f"tolerance {args.tol:g}")
    for label, r in (("plain FAS (delta_rank 0)", plain),
                     (f"Delta correction (delta_rank {args.rank})", corrected)):
        state = "converged" if r.converged else "not converged"
        print(f"  {label}: {r.iterations} iterations, {state}, "
              f"|| r || = {r.residuals[-1]:.6e}")
    print(f"  iterations: {plain.iterations} without Delta, {corrected.iterations} with "
          f"(ratio {corrected.iterations / plain.iterations:.2f})")
    print("  Delta correction's residual history:")
    for k, norm in zip(corrected.residual_iterations, corrected.residuals):
        print(f"    || r_{k} || = {norm:.6e}")
    exps = ", ".join(f"{x:.6f}" for x in corrected.lyapunov_exponents)
    print(f"  Lyapunov exponents: {exps}")
    print(f"  u(T) with Delta - u(T) without: "
          f"{np.max(np.abs(corrected.final - plain.final)):.3e}")
    return results


if __name__ == "__main__":
    main()
