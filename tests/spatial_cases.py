"""XBraid's spatial-coarsening runs (tests/data/xbraid_spatial.json) as runnable cases:
drive-burgers-1D's linear advection (forward Euler, Lax-Friedrichs fluxes) with `-sc 1`
(bilinear coarsening, linear interpolation), `-sc 2` (one-sided) and without `-sc`, and
ex-02's 1D heat equation (backward Euler) with `-sc`. Each app does what the C program
does, in the same order of floating-point operations, so that every printed residual
agrees to the last digit. Run serially (test_spatial.py) and at the rank count XBraid
used (mpi_spatial_coarsen_driver.py).
"""

import ctypes
import ctypes.util
import json
import math
from pathlib import Path

import numpy as np
from mpi_world import assert_split

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_spatial.json").read_text())
CASES = DATA["cases"]


def ordered_norm(u):
    """C's `for i: dot += u[i]*u[i]; sqrt(dot)`: a running sum (np.cumsum adds in order)."""
    return math.sqrt(float(np.cumsum(u * u)[-1]))


def glibc_rand(n):
    """The first n values of glibc's rand() after srand(0), as rand()/RAND_MAX."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.srand(0)
    return np.array([libc.rand() / 2147483647.0 for _ in range(n)])


class Advection(braidpy.App):
    """drive-burgers-1D with `-prob 0 -st 0`: u_t + a u_x = 0 on [-2, 3], t in [0, 5],
    forward Euler with Lax-Friedrichs fluxes, Dirichlet values xLeft = 1, xRight = 0;
    init: a ramp at t = 0, glibc rand() after srand(0) elsewhere; sc: 0 none, 1
    bilinear coarsening and linear interpolation, 2 one-sided."""

    def __init__(self, nspace=64, sc=1, a=1.0):
        self.nspace, self.sc, self.a = nspace, sc, a
        self.xstart, self.xstop, self.xleft, self.xright, self.eps = -2.0, 3.0, 1.0, 0.0, 0.0
        self.guess = glibc_rand(nspace + 1)
        self.seen = {}  # level -> (dx, dt): the driver's per-level diagnostics
        if sc:  # the driver's my_Coarsen*/my_Interp*
            self.coarsen = self._coarsen_linear if sc == 1 else self._coarsen_one_sided
            self.refine = self._interp_linear if sc == 1 else self._interp_one_sided

    def init(self, t):
        if t == 0:
            i = np.arange(self.nspace + 1, dtype=np.float64)
            x = self.xstart + (i / self.nspace) * (self.xstop - self.xstart)
            ramp = self.xleft - (x - -1.0) * (self.xleft - self.xright)
            return np.where(x < -1.0, self.xleft, np.where(x < 0.0, ramp, self.xright))
        return self.guess.copy()

    def _flux(self, up, uk):
        a = self.a
        return 0.5 * (a * up + a * uk) - 0.5 * abs(a) * (up - uk)

    def step(self, u, t0, t1, status):
        dx = (self.xstop - self.xstart) / (u.size - 1.0)
        dt = t1 - t0
        self.seen[status.level] = (dx, dt)
        old = np.concatenate(([self.xleft], u, [self.xright]))
        um, uk, up = old[:-2], old[1:-1], old[2:]
        fp, fm = self._flux(up, uk), self._flux(uk, um)
        u[:] = uk - (dt / dx) * (fp - fm) + self.eps * (dt / (dx * dx)) * (up - 2 * uk + um)

    def norm(self, u):
        return ordered_norm(u)

    def _coarsen_linear(self, f, status):
        n = (f.size - 1) // 2 + 1
        v = np.empty(n)
        v[1:-1] = 0.5 * f[2:-2:2] + 0.25 * f[3:-1:2] + 0.25 * f[1:-3:2]
        v[0] = (4. / 3.) * 0.5 * f[0] + (4. / 3.) * 0.25 * f[1]
        v[-1] = (4. / 3.) * 0.5 * f[-1] + (4. / 3.) * 0.25 * f[-2]
        return v

    def _interp_linear(self, c, status):
        n = (c.size - 1) * 2 + 1
        v = np.empty(n)
        v[2:-1:2] = c[1:-1]
        v[1:-1:2] = 0.5 * c[:-1] + 0.5 * c[1:]
        v[0], v[-1] = c[0], c[-1]
        return v

    def _coarsen_one_sided(self, f, status):
        n = (f.size - 1) // 2 + 1
        v = np.empty(n)
        v[1:-1] = 0.5 * f[2:-2:2] + 0.5 * f[1:-3:2]
        v[0] = 0.5 * f[0]
        v[-1] = 0.5 * f[-1] + 0.5 * f[-2]
        return v

    def _interp_one_sided(self, c, status):
        n = (c.size - 1) * 2 + 1
        v = np.empty(n)
        v[1:-1] = c[np.arange(1, n - 1) // 2]
        v[0], v[-1] = c[0], c[-1]
        return v


def burgers_options(nspace=64, ntime=128, tstop=5.0, xspan=5.0):
    """The driver's defaults: 2 levels unless -ml, skip 0, nrelax 1, cfactor 2, 30
    iterations, tol 1e-7 scaled by sqrt(dt) sqrt(dx) as the driver scales it."""
    tol = 1.0e-07 / (math.sqrt(tstop / (ntime - 1)) * math.sqrt(xspan / (nspace - 1)))
    return dict(max_levels=4, skip=False, nrelax=1, cfactor=2, max_iter=30, abs_tol=tol)


def run_burgers(case, comm=None, **extra):
    """(printed residuals, iterations, levels, final values %.14e, the app)."""
    app = Advection(64, case["sc"])
    r = braidpy.solve(app, 0.0, 5.0, 128, comm=comm, **{**burgers_options(), **extra})
    assert_split(comm, r.owned, len(r.times))
    final = None if r.final is None else [f"{x:.14e}" for x in r.final]
    return dict(residuals=[f"{v:.6e}" for v in r.residuals], iterations=r.iterations,
                levels=r.levels, final=final, seen={str(k): v for k, v in app.seen.items()})


def cases(example, nranks=None):
    return [c for c in CASES if c["example"] == example and
            (nranks is None or c["nranks"] == nranks)]
