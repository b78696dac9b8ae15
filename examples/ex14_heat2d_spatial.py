"""Example 14: the 2D heat equation with spatial coarsening: cheaper coarse levels.

``u_t = u_xx + u_yy + g`` on the unit square, ``u = 0`` on the boundary, with the
manufactured solution ``sin(pi x) sin(pi y) cos t`` (``braidpy.problems.Heat2D``): the
five-point Laplacian on an ``nx`` x ``nx`` mesh of intervals (``(nx - 1)^2`` unknowns)
and backward Euler in time (``braidpy.integrators.BackwardEuler``, one sparse LU
factorization per step size, reused). Backward Euler is stable for any step, so MGRIT
converges with coarsening in time alone; but then every coarse step solves on the fine
mesh. Coarse levels take steps 2, 4, 8... times longer, and on those a coarser mesh
resolves what the coarse correction needs: coarsening in space as well (XBraid's
``braid_SetSpatialCoarsen``/``braid_SetSpatialRefine``) halves the mesh per level, so a
coarse step costs about a quarter of the finer level's, and MGRIT takes about as many
iterations.

The app, ``Heat2DSpatial``, is a ``braidpy.integrators.PerLevel`` with one backward
Euler integrator per mesh (``nx``, ``nx/2``, ... intervals, down to 4) and the two
methods of the spatial-coarsening contract (docs/conventions.md, "Spatial coarsening"):
``coarsen(u, status)``, full weighting (the stencil ``(1, 2, 1)/4`` in x and in y), and
``refine(e, status)``, bilinear interpolation of a coarse correction. MGRIT converges to
the fine backward Euler solution either way; the script runs both variants and prints,
for each, the iterations, the CPU time per iteration (of the whole solve, its LU
factorizations included; on several ranks, the slowest rank's) and the largest
difference from sequential time stepping (and from the exact solution).

Run it serially::

    python examples/ex14_heat2d_spatial.py
    python examples/ex14_heat2d_spatial.py --nx 128 --ntime 128
    python examples/ex14_heat2d_spatial.py --no-spatial       # time coarsening only

or with the time grid split over 4 MPI ranks (same iterations, same solution)::

    mpiexec -n 4 python examples/ex14_heat2d_spatial.py
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

# One BLAS/OpenMP thread per process (unless set already): the sparse solves are small,
# threads would only contend with the other MPI ranks and blur the CPU times.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import braidpy  # noqa: E402
from braidpy.integrators import PerLevel  # noqa: E402
from braidpy.parallel import world  # noqa: E402
from braidpy.problems import Heat2D  # noqa: E402

__all__ = ["Heat2DSpatial", "bilinear", "full_weighting", "main", "mesh_sizes"]


def mesh_sizes(nx: int, levels: int) -> list[int]:
    """Mesh intervals per direction on each level: halved per level, down to 4."""
    return [max(nx >> level, min(nx, 4)) for level in range(levels)]


def full_weighting(u: np.ndarray) -> np.ndarray:
    """Full weighting along axis 0: ``m - 1`` interior values to ``m/2 - 1``; coarse
    point i (fine point 2i) gets ``(u_{2i-1} + 2 u_{2i} + u_{2i+1}) / 4``."""
    return 0.25 * u[0:-2:2] + 0.5 * u[1:-1:2] + 0.25 * u[2::2]


def bilinear(e: np.ndarray) -> np.ndarray:
    """Linear interpolation along axis 0: ``m/2 - 1`` interior values to ``m - 1``;
    coarse points copied, midpoints averaged (the boundary values are 0)."""
    padded = np.zeros((e.shape[0] + 2,) + e.shape[1:])
    padded[1:-1] = e
    f = np.empty((2 * e.shape[0] + 1,) + e.shape[1:])
    f[1::2] = e
    f[0::2] = 0.5 * (padded[:-1] + padded[1:])
    return f


class Heat2DSpatial(PerLevel):
    """Backward Euler for ``braidpy.problems.Heat2D`` with one mesh per MGRIT level.

    A state on a level of ``m`` intervals per direction is the flat vector of the
    ``(m - 1)^2`` interior values (x the slower index, as Heat2D's). With
    ``spatial=False`` the app has no ``coarsen`` and ``refine``: every level steps on
    the fine mesh.

    Examples
    --------
    >>> import braidpy
    >>> app = Heat2DSpatial(16, max_levels=3)
    >>> app.meshes
    [16, 8, 4]
    >>> r = braidpy.solve(app, 0.0, 1.0, 16, max_levels=3, cfactor=2, abs_tol=1e-10)
    >>> r.final.shape
    (225,)
    """

    def __init__(self, nx: int = 64, max_levels: int = 4, spatial: bool = True):
        if isinstance(nx, bool) or not isinstance(nx, int) or nx < 4 or nx & (nx - 1):
            raise ValueError(f"nx must be a power of two >= 4, got {nx!r}")
        self.meshes = mesh_sizes(nx, max_levels) if spatial else [nx]
        # One Heat2D per distinct mesh (the coarsest may repeat): its operator and source.
        self.problems = [Heat2D(nx=m + 1, ny=m + 1) for m in dict.fromkeys(self.meshes)]
        # rhs_per_solve=1: one solve per state, so the solution is bitwise the same
        # whatever states a batched step stacks, that is at any number of ranks (SuperLU's
        # many-column solves differ from one column's in the last bit).
        super().__init__([p.app("backward_euler", rhs_per_solve=1) for p in self.problems])
        if spatial:
            self.coarsen = self._coarsen
            self.refine = self._refine

    def mesh(self, level: int) -> int:
        """Mesh intervals per direction on ``level``."""
        return self.meshes[min(level, len(self.meshes) - 1)]

    def _coarsen(self, u: np.ndarray, status: Any) -> np.ndarray:
        """The state on level ``status.level + 1``: full weighting in x, then in y."""
        m = self.mesh(status.level)
        if self.mesh(status.level + 1) == m:
            return u.copy()
        U = u.reshape(m - 1, m - 1)
        return full_weighting(full_weighting(U).T).T.ravel()

    def _refine(self, e: np.ndarray, status: Any) -> np.ndarray:
        """A correction from level ``status.level + 1`` on level ``status.level``:
        bilinear interpolation (linear in x, then in y)."""
        m = self.mesh(status.level)
        if self.mesh(status.level + 1) == m:
            return e.copy()
        E = e.reshape(m // 2 - 1, m // 2 - 1)
        return bilinear(bilinear(E).T).T.ravel()


def sequential_solution(problem: Heat2D, times: np.ndarray) -> np.ndarray:
    """The fine backward Euler solution at the final time, one step at a time."""
    app = problem.app("backward_euler")
    u = problem.u0.copy()
    for t0, t1 in zip(times[:-1].tolist(), times[1:].tolist()):
        app.step(u, t0, t1, None)
    return u


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nx", type=int, default=64, help="mesh intervals per direction (2^k)")
    p.add_argument("--ntime", type=int, default=64, help="time steps")
    p.add_argument("--tstop", type=float, default=1.0, help="final time")
    p.add_argument("--max-levels", type=int, default=4)
    p.add_argument("--cfactor", type=int, default=2)
    p.add_argument("--tol", type=float, default=1e-8, help="absolute tolerance")
    p.add_argument("--max-iter", type=int, default=50)
    p.add_argument("--no-spatial", dest="spatial", action="store_false",
                   help="run only the variant without spatial coarsening")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, braidpy.Result]:
    """Run the example; returns ``{variant: braidpy.Result}`` (on every rank)."""
    args = parse_args(argv)
    comm = world()
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    variants = {"time only": False}
    if args.spatial:
        variants["space-time"] = True
    results, cpu, meshes = {}, {}, {}
    for name, spatial in variants.items():
        app = Heat2DSpatial(args.nx, args.max_levels, spatial=spatial)
        start = time.process_time()
        results[name] = braidpy.solve(app, 0.0, args.tstop, args.ntime, comm=comm,
                                      max_levels=args.max_levels, cfactor=args.cfactor,
                                      abs_tol=args.tol, max_iter=args.max_iter)
        cpu[name] = time.process_time() - start
        if comm is not None:  # the slowest rank's time
            from mpi4py import MPI

            cpu[name] = comm.allreduce(cpu[name], op=MPI.MAX)
        meshes[name] = [app.mesh(level) for level in range(results[name].levels)]
    if rank != 0:
        return results
    fine = Heat2D(nx=args.nx + 1, ny=args.nx + 1, tstop=args.tstop)
    times = results["time only"].times
    u_seq = sequential_solution(fine, times)
    exact = fine.reference([args.tstop])[0]
    print(f"ex14: 2D heat, {args.nx - 1}^2 unknowns, {args.ntime} backward Euler steps to "
          f"t = {args.tstop:g}, cfactor {args.cfactor}, up to {args.max_levels} levels, "
          f"abs_tol {args.tol:g}, {size} MPI rank(s)")
    for name in variants:
        r = results[name]
        print(f"  {name}: meshes per level " + " > ".join(f"{m}x{m}" for m in meshes[name]))
        print(f"    iterations: {r.iterations}, last residual {r.residuals[-1]:.6e}")
        print(f"    CPU s per iteration: {cpu[name] / r.iterations:.4f}")
        print(f"    max |MGRIT - sequential| at t_N = {np.max(np.abs(r.final - u_seq)):.3e}")
        print(f"    max |MGRIT - exact| at t_N = {np.max(np.abs(r.final - exact)):.3e}")
    if args.spatial:
        (c0, r0), (c1, r1) = ((cpu[n], results[n]) for n in variants)
        ratio = (c1 / r1.iterations) / (c0 / r0.iterations)
        print(f"  space-time / time only: CPU time per iteration {ratio:.2f}, iterations "
              f"{r1.iterations} vs {r0.iterations}")
    return results


if __name__ == "__main__":
    main()
