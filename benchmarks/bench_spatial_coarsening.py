"""Spatial coarsening on the 2D heat equation: time per MGRIT iteration with and without.

Problem: ``u_t = u_xx + u_yy`` on the unit square, u = 0 on the boundary, the initial
condition ``sin(pi x) sin(pi y)`` (guess 0 elsewhere), backward Euler on ``--ntime``
steps to ``--tstop`` (1); states are the ``(n-1) x (n-1)`` interior values of an n x n mesh
(``--nx`` = n, a power of two). Each step solves ``(I - dt L) u1 = u0`` with a cached
SuperLU factorization per (grid, dt). MGRIT: cfactor 2, FCF, ``--max-levels`` levels (4),
abs_tol 1e-8 (Euclidean norm), one process.

"time only": every level on the fine mesh. "space-time": the app's ``coarsen`` (full
weighting, the 1D stencil (1, 2, 1)/4 in x and in y) and ``refine`` (bilinear
interpolation) halve the mesh with each time level, down to a 3 x 3 interior (then
the states are copied), so a coarse step costs about a quarter of the finer level's.

Both apps first solve once (their factorizations are then cached: the timings are of the
MGRIT iterations alone). Each repeat runs both, interleaved; the table gives iterations,
CPU and wall time, CPU time per iteration (min over repeats; CPU time leaves out waiting
for a core on a shared machine), the ratio of the two, and the largest difference between
the two final states (both converge to the same fine backward Euler solution). BLAS and
OpenMP threads are set to 1 (unless set already): one core per process.

Run: python benchmarks/bench_spatial_coarsening.py [--nx N] [--ntime T] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import braidpy  # noqa: E402


def restriction_1d(m: int) -> sp.csr_matrix:
    """Full weighting from m - 1 interior points (m even) to m/2 - 1."""
    rows, cols, vals = [], [], []
    for i in range(m // 2 - 1):
        for k, w in ((2 * i, 0.25), (2 * i + 1, 0.5), (2 * i + 2, 0.25)):
            rows.append(i)
            cols.append(k)
            vals.append(w)
    return sp.csr_matrix((vals, (rows, cols)), shape=(m // 2 - 1, m - 1))


class Heat2D(braidpy.App):
    """Backward Euler for the 2D heat equation; with ``spatial`` True, coarsen/refine."""

    def __init__(self, nx: int, spatial: bool):
        self.nx = nx
        self.lu: dict = {}
        self.transfer: dict = {}
        if spatial:
            self.coarsen, self.refine = self._coarsen, self._refine

    def init(self, t):
        x = np.linspace(0.0, 1.0, self.nx + 1)[1:-1]
        if t == self.tstart:
            return np.outer(np.sin(np.pi * x), np.sin(np.pi * x))
        return np.zeros((self.nx - 1, self.nx - 1))

    def _solver(self, m: int, dt: float):
        key = (m, round(dt, 12))
        if key not in self.lu:
            h = 1.0 / m
            n = m - 1
            d = sp.diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]) / h**2
            eye = sp.identity(n)
            lap = sp.kron(d, eye) + sp.kron(eye, d)
            self.lu[key] = spla.factorized((sp.identity(n * n) - dt * lap).tocsc())
        return self.lu[key]

    def step(self, u, t0, t1, status):
        m = u.shape[0] + 1
        u[:] = self._solver(m, t1 - t0)(u.ravel()).reshape(u.shape)

    def _ops(self, m: int):
        if m not in self.transfer:
            r = restriction_1d(m)
            self.transfer[m] = (r, (2.0 * r.T).tocsr())
        return self.transfer[m]

    def _mesh(self, level: int) -> int:
        """Mesh intervals per direction on a level: halved per level down to 4."""
        return max(self.nx >> level, min(self.nx, 4))

    def _coarsen(self, u, status):
        m = self._mesh(status.level)
        if self._mesh(status.level + 1) == m:
            return u.copy()
        r, _ = self._ops(m)
        return np.asarray(r @ (r @ u).T).T.copy()

    def _refine(self, e, status):
        m = self._mesh(status.level)
        if self._mesh(status.level + 1) == m:
            return e.copy()
        _, p = self._ops(m)
        return np.asarray(p @ (p @ e).T).T.copy()


def run(app: Heat2D, ntime: int, max_levels: int, tstop: float):
    start, cpu = time.perf_counter(), time.process_time()
    r = braidpy.solve(app, 0.0, tstop, ntime, max_levels=max_levels, cfactor=2, nrelax=1,
                      abs_tol=1e-8, max_iter=50, access_level=0)
    return (time.process_time() - cpu, time.perf_counter() - start), r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nx", type=int, default=128, help="mesh intervals per direction")
    p.add_argument("--ntime", type=int, default=64)
    p.add_argument("--max-levels", type=int, default=4)
    p.add_argument("--tstop", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    apps = {spatial: Heat2D(args.nx, spatial) for spatial in (False, True)}
    for app in apps.values():  # the factorizations, once per app (cached by mesh and dt)
        run(app, args.ntime, args.max_levels, args.tstop)
    best = {}
    for _ in range(args.repeats):
        for spatial, app in apps.items():
            wall, r = run(app, args.ntime, args.max_levels, args.tstop)
            old = best.get(spatial)
            if old is None or wall < old[0]:
                best[spatial] = (wall, r)
    print(f"2D heat, {args.nx - 1}^2 unknowns, {args.ntime} backward Euler steps to "
          f"t = {args.tstop:g}, cfactor 2, "
          f"FCF, {args.max_levels} levels, abs_tol 1e-8 (min of {args.repeats})")
    print(f"{'coarsening':<12} {'iterations':>10} {'CPU s':>8} {'wall s':>8} "
          f"{'CPU s/iteration':>16}")
    for spatial, name in ((False, "time only"), (True, "space-time")):
        (cpu, wall), r = best[spatial]
        print(f"{name:<12} {r.iterations:>10} {cpu:>8.3f} {wall:>8.3f} "
              f"{cpu / r.iterations:>16.4f}")
    ((w0, _), r0), ((w1, _), r1) = best[False], best[True]
    ratio = (w1 / r1.iterations) / (w0 / r0.iterations)
    print(f"CPU time per iteration, space-time / time only: {ratio:.2f} "
          f"({100 * (1 - ratio):.0f}% lower); iterations {r1.iterations} vs {r0.iterations}")
    print(f"max |u_N(space-time) - u_N(time only)| = {np.max(np.abs(r1.final - r0.final)):.2e}")
    return ratio, r0.iterations, r1.iterations


if __name__ == "__main__":
    main()
