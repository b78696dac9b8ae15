"""Example 11: the 2D heat equation with PETSc, parallel in space and in time.

``u_t = u_xx + u_yy + g`` on the unit square with ``u = 0`` on its boundary,
``g = sin(pi x) sin(pi y) (2 pi^2 cos t - sin t)``, so that the exact solution is
``sin(pi x) sin(pi y) cos t``. Space: the 5-point Laplacian on a PETSc ``DMDA`` of
``--nspace`` x ``--nspace`` interior points (``h = 1/(nspace + 1)``). Time: backward Euler
on ``--ntime`` steps over ``[0, --tstop]``, either by ``braidpy.petsc.KSPBackwardEuler``
(``--stepper ksp``: one CG solve of ``(I - dt A) u1 = u0 + dt g(t1)`` per step, the
operator assembled once per step size) or by a PETSc ``TS`` (``--stepper ts``: TSBEULER
on ``u' = A u + g``, a linear problem solved by one KSP per step, through
``braidpy.petsc.TSApp``).

The ranks form a space x time grid (``braidpy.parallel.ProcessGrid``): ``--space`` ranks
share each state (the DMDA is split over ``grid.space_comm``), and the time grid is split
over the ``P / space`` time groups (``grid.layers_comm``). The solution does not depend
on the split, to the tolerance::

    python examples/ex11_petsc_heat2d.py
    mpiexec -n 2 python examples/ex11_petsc_heat2d.py --space 2     # 2 space x 1 time
    mpiexec -n 4 python examples/ex11_petsc_heat2d.py --space 2     # 2 space x 2 time
    mpiexec -n 4 python examples/ex11_petsc_heat2d.py --stepper ts

It prints the MGRIT iterations and residuals, and the largest difference of the final
state from sequential PETSc time stepping with the same stepper (a plain loop over the
steps, or one ``TSSolve`` over ``[0, tstop]``) and from the exact solution. Needs
petsc4py: ``pip install -e ".[petsc]"`` (docs/install.md).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np

import braidpy
from braidpy.parallel import ProcessGrid, world
from braidpy.petsc import KSPBackwardEuler, TSApp, petsc4py_PETSc

__all__ = ["Heat2D", "main"]


class Heat2D:
    """The 2D heat problem on a DMDA over ``comm`` (an mpi4py or PETSc communicator).

    Attributes
    ----------
    da : petsc4py.PETSc.DMDA
        ``n`` x ``n`` interior points, one unknown each, a star stencil of width 1.
    A : petsc4py.PETSc.Mat
        The 5-point Laplacian (``-4/h^2`` on the diagonal, ``1/h^2`` for each neighbour).
    u0 : petsc4py.PETSc.Vec
        ``sin(pi x) sin(pi y)``, the exact solution at ``t = 0``.
    source_scale : float
        Multiplies ``g``; ``float("nan")`` in ``[nan_from, nan_to]`` makes a solve there
        diverge (the tests' failing step).
    """

    def __init__(self, n: int, comm: Any = None, nan_window: Optional[tuple] = None):
        PETSc = petsc4py_PETSc()
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ValueError(f"nspace must be an int >= 2, got {n!r}")
        comm = PETSc.COMM_WORLD if comm is None else comm
        self.n, self.h = n, 1.0 / (n + 1)
        self.nan_window = nan_window
        self.da = da = PETSc.DMDA().create(
            dim=2, sizes=(n, n), dof=1, stencil_width=1,
            stencil_type=PETSc.DMDA.StencilType.STAR, comm=comm)
        (xs, xe), (ys, ye) = da.getRanges()
        self.ranges = (xs, xe), (ys, ye)
        x = (np.arange(xs, xe) + 1) * self.h
        y = (np.arange(ys, ye) + 1) * self.h
        # A global Vec's local block is ordered with x fastest: [j - ys, i - xs].
        self.shape_local = np.sin(math.pi * y)[:, None] * np.sin(math.pi * x)[None, :]
        self.A = A = da.createMat()
        row, col = PETSc.Mat.Stencil(), PETSc.Mat.Stencil()
        inv_h2 = 1.0 / self.h ** 2
        for j in range(ys, ye):
            for i in range(xs, xe):
                row.index = (i, j)
                A.setValueStencil(row, row, -4.0 * inv_h2)
                for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                    if 0 <= i + di < n and 0 <= j + dj < n:
                        col.index = (i + di, j + dj)
                        A.setValueStencil(row, col, inv_h2)
        A.assemble()
        self.u0 = self.exact(0.0)

    def _vec(self, values: np.ndarray) -> Any:
        v = self.da.createGlobalVec()
        v.setArray(values.ravel())
        return v

    def exact(self, t: float) -> Any:
        """The exact solution at ``t`` (a new Vec)."""
        return self._vec(self.shape_local * math.cos(t))

    def source(self, t: float, out: Any) -> None:
        """``g(t)`` into ``out``."""
        scale = 2.0 * math.pi ** 2 * math.cos(t) - math.sin(t)
        if self.nan_window is not None and self.nan_window[0] <= t <= self.nan_window[1]:
            scale = float("nan")
        out.setArray((self.shape_local * scale).ravel())

    def gather(self, v: Any) -> Optional[np.ndarray]:
        """The whole field as an ``(n, n)`` array ``[j, i]`` on the communicator's rank 0
        (None elsewhere); collective."""
        PETSc = petsc4py_PETSc()
        natural = self.da.createNaturalVec()
        self.da.globalToNatural(v, natural)
        scatter, whole = PETSc.Scatter.toZero(natural)
        scatter.scatter(natural, whole, False, PETSc.Scatter.Mode.FORWARD)
        out = whole.getArray().reshape(self.n, self.n).copy() if self.da.comm.rank == 0 \
            else None
        scatter.destroy()
        whole.destroy()
        natural.destroy()
        return out

    def norm_scale(self) -> float:
        """``h``: the Vec 2-norm times ``h`` is the discrete L2 norm on the unit square."""
        return self.h

    # --- steppers ----------------------------------------------------------------------

    def ksp_app(self, **kwargs: Any) -> KSPBackwardEuler:
        """Backward Euler by KSPBackwardEuler (CG + Jacobi, rtol 1e-12)."""
        return KSPBackwardEuler(self.A, self.u0, g=self.source, norm_scale=self.h, **kwargs)

    def make_ts(self, rtol: float = 1e-12, prefix: Optional[str] = None) -> Any:
        """A TSBEULER for ``u' = A u + g`` (linear, fixed steps: TSBEULER adapts nothing; one
        KSP solve per step)."""
        PETSc = petsc4py_PETSc()
        ts = PETSc.TS().create(comm=self.da.comm)
        ts.setProblemType(PETSc.TS.ProblemType.LINEAR)
        ts.setType(PETSc.TS.Type.BEULER)
        src = self.u0.duplicate()

        def rhs(ts: Any, t: float, u: Any, f: Any) -> None:
            self.A.mult(u, f)
            self.source(t, src)
            f.axpy(1.0, src)

        def jacobian(ts: Any, t: float, u: Any, J: Any, P: Any) -> None:
            # TS turns J into its shifted implicit operator in place: fill it each time
            self.A.copy(J, PETSc.Mat.Structure.SAME_NONZERO_PATTERN)

        ts.setRHSFunction(rhs, self.u0.duplicate())
        J = self.A.copy()
        ts.setRHSJacobian(jacobian, J, J)
        snes = ts.getSNES()
        snes.setType("ksponly")
        ksp = snes.getKSP()
        ksp.setType("cg")
        ksp.getPC().setType("jacobi")
        ksp.setTolerances(rtol=rtol, atol=1e-50, max_it=10000)
        if prefix is not None:
            ts.setOptionsPrefix(prefix)
            ts.setFromOptions()
        return ts

    def ts_app(self, **kwargs: Any) -> TSApp:
        """Backward Euler by a TS (make_ts) through TSApp."""
        return TSApp(self.make_ts(), self.u0, norm_scale=self.h, **kwargs)

    # --- sequential references -----------------------------------------------------------

    def sequential(self, stepper: str, tstop: float, ntime: int) -> Any:
        """Sequential PETSc time stepping: the KSP stepper in a plain loop over the steps,
        or one TSSolve over [0, tstop] with ntime fixed steps (a fresh TS)."""
        times = np.linspace(0.0, tstop, ntime + 1)
        u = self.u0.copy()
        if stepper == "ksp":
            app = self.ksp_app()
            for k in range(ntime):
                app.step(u, float(times[k]), float(times[k + 1]), None)
            return u
        PETSc = petsc4py_PETSc()
        ts = self.make_ts()
        ts.setTime(0.0)
        ts.setTimeStep(tstop / ntime)
        ts.setMaxTime(tstop)
        ts.setMaxSteps(ntime + 1)
        ts.setExactFinalTime(PETSc.TS.ExactFinalTime.MATCHSTEP)
        ts.solve(u)
        return u


def solve_heat(heat: Heat2D, stepper: str, tstop: float, ntime: int, comm: Any,
               **options: Any) -> braidpy.Result:
    """MGRIT for ``heat`` with the given stepper over the time communicator ``comm``."""
    app = heat.ksp_app() if stepper == "ksp" else heat.ts_app()
    return braidpy.solve(app, 0.0, tstop, ntime, comm=comm, **options)


def main(argv: Optional[Sequence[str]] = None,
         report: Callable[[str], None] = print) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nspace", type=int, default=32, help="interior points per axis")
    parser.add_argument("--ntime", type=int, default=64)
    parser.add_argument("--tstop", type=float, default=1.0)
    parser.add_argument("--space", type=int, default=1,
                        help="ranks sharing each state (the rest split the time grid)")
    parser.add_argument("--stepper", choices=("ksp", "ts"), default="ksp")
    parser.add_argument("--max-levels", type=int, default=4)
    parser.add_argument("--cfactor", type=int, default=4)
    parser.add_argument("--nrelax", type=int, default=1)
    parser.add_argument("--tol", type=float, default=1e-9)
    parser.add_argument("--max-iter", type=int, default=50)
    parser.add_argument("--print-level", type=int, default=1)
    args = parser.parse_args(argv)

    comm = world()
    size = 1 if comm is None else comm.Get_size()
    if args.space < 1 or size % args.space:
        parser.error(f"--space {args.space} must divide the number of ranks ({size})")
    grid = ProcessGrid(comm, space=args.space, layers=size // args.space)
    space_comm = grid.space_comm
    if space_comm is None:
        space_comm = petsc4py_PETSc().COMM_SELF if size == 1 else comm
    heat = Heat2D(args.nspace, space_comm)
    start = time.perf_counter()
    result = solve_heat(heat, args.stepper, args.tstop, args.ntime, grid.layers_comm,
                        max_levels=args.max_levels, cfactor=args.cfactor,
                        nrelax=args.nrelax, abs_tol=args.tol, max_iter=args.max_iter,
                        print_level=args.print_level if grid.rank == 0 else 0)
    mgrit_s = time.perf_counter() - start
    start = time.perf_counter()
    seq = heat.sequential(args.stepper, args.tstop, args.ntime)
    seq_s = time.perf_counter() - start
    final, seq_all = heat.gather(result.final), heat.gather(seq)
    exact = heat.gather(heat.exact(args.tstop))
    out = dict(iterations=result.iterations, residuals=list(result.residuals),
               levels=result.levels, space=args.space, time=size // args.space)
    if final is not None:
        out["error_vs_sequential"] = float(np.max(np.abs(final - seq_all)))
        out["error_vs_exact"] = float(np.max(np.abs(final - exact)))
    if grid.rank == 0:
        report(f"2D heat, {args.nspace}x{args.nspace} points, {args.ntime} steps, stepper "
               f"{args.stepper}, {args.space} space x {size // args.space} time ranks")
        report(f"MGRIT: {result.iterations} iterations, {result.levels} levels, "
               f"{mgrit_s:.3f} s; sequential stepping {seq_s:.3f} s")
        report(f"max |MGRIT - sequential| = {out['error_vs_sequential']:.3e}")
        report(f"max |MGRIT - exact|      = {out['error_vs_exact']:.3e} "
               f"(backward Euler's error)")
    grid.free()
    return out


if __name__ == "__main__":
    main()
