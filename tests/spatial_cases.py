"""XBraid's spatial-coarsening runs (tests/data/xbraid_spatial.json, made by
tests/data/xbraid_spatial_collect.py) as runnable cases: drive-burgers-1D's linear
advection (forward Euler, Lax-Friedrichs fluxes) with `-sc 1` (bilinear coarsening,
linear interpolation; also with `-skip 1` and `-fmg 1`), `-sc 2` (one-sided) and without
`-sc`, and ex-02's 1D heat equation (backward Euler) with `-sc`. Each app does what the C program
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


class BatchedAdvection(Advection):
    """Advection with a batched step (step_stacked): the rows of U are states of one
    level (of that level's size: checked), stepped with the same operations."""

    def size(self, level):
        return self.nspace // 2 ** level + 1 if self.sc else self.nspace + 1

    def step_stacked(self, U, t0s, t1s, status):
        assert U.shape[1] == self.size(status.level), (U.shape, status.level)
        for k in range(U.shape[0]):
            self.step(U[k], float(t0s[k]), float(t1s[k]), status)


class OutOfPlaceAdvection(BatchedAdvection):
    """BatchedAdvection with the out-of-place batched step too (step_stacked_into)."""

    def step_stacked_into(self, U, out, t0s, t1s, status):
        assert U.shape == out.shape and U.shape[1] == self.size(status.level)
        out[...] = U
        self.step_stacked(out, t0s, t1s, status)


class LCG:
    """XBraid's braid_Rand (braid.c): next = next*1103515245 + 12345 (unsigned long),
    returns (unsigned int)(next/65536) % 32768; next starts at 1 in each process."""

    def __init__(self):
        self.next = 1

    def __call__(self):
        self.next = (self.next * 1103515245 + 12345) % (1 << 64)
        return ((self.next // 65536) % (1 << 32)) % 32768


class Heat(braidpy.App):
    """XBraid's ex-02: u_t = u_xx + F on [0, pi] x [0, 2 pi], exact sin(x) cos(t),
    backward Euler (Thomas algorithm, Dirichlet rows the identity), braid_Rand() / 32768
    as the guess at t > 0 (one generator per process, in the order of init calls), and
    with -sc bilinear coarsening (boundaries injected) and linear interpolation while
    level < floor(log2(nspace)) - 1."""

    def __init__(self, nspace=33, sc=True):
        self.nspace, self.xstart, self.xstop = nspace, 0.0, math.pi
        self.rand = LCG()
        self.limit = math.floor(math.log2(nspace)) - 1
        if sc:
            self.coarsen, self.refine = self._coarsen, self._refine

    @staticmethod
    def exact(t, x):
        return math.sin(x) * math.cos(t)

    @staticmethod
    def forcing(t, x):
        return (-1.0) * math.sin(x) * math.sin(t) + math.sin(x) * math.cos(t)

    def init(self, t):
        n = self.nspace
        if t == 0.0:
            dx, x, v = (self.xstop - self.xstart) / (n - 1.0), self.xstart, []
            for _ in range(n):
                v.append(self.exact(0.0, x))
                x += dx
            return np.array(v)
        return np.array([self.rand() / 32768 for _ in range(n)])

    def step(self, u, t0, t1, status):
        n = u.size
        dx, dt = (self.xstop - self.xstart) / (n - 1.0), t1 - t0
        cfl = dt / (dx * dx)
        a, b, c = -cfl, 1.0 + 2 * cfl, -cfl
        v = u.tolist()
        v[0], v[n - 1] = self.exact(t1, 0.0), self.exact(t1, math.pi)
        x = self.xstart
        for i in range(n):
            v[i] = v[i] + dt * self.forcing(t1, x)
            x = x + dx
        g = [0.0] * n
        for i in range(1, n - 1):
            m = 1.0 / (b - a * g[i - 1])
            g[i] = m * c
            v[i] = m * (v[i] - a * v[i - 1])
        for i in range(n - 2, 0, -1):
            v[i] = v[i] - g[i] * v[i + 1]
        u[:] = v

    def norm(self, u):
        return ordered_norm(u)

    def _coarsen(self, f, status):
        if status.level >= self.limit:
            return f.copy()
        n = (f.size - 1) // 2 + 1
        v = np.empty(n)
        v[1:-1] = 0.5 * f[2:-2:2] + 0.25 * f[3:-1:2] + 0.25 * f[1:-3:2]
        v[0], v[-1] = f[0], f[-1]
        return v

    def _refine(self, c, status):
        if status.level >= self.limit:
            return c.copy()
        return Advection._interp_linear(self, c, status)


class BatchedHeat(Heat):
    def step_stacked(self, U, t0s, t1s, status):
        n, level = self.nspace, status.level
        for _ in range(min(level, self.limit)):
            n = (n - 1) // 2 + 1
        assert U.shape[1] == n, (U.shape, level)
        for k in range(U.shape[0]):
            self.step(U[k], float(t0s[k]), float(t1s[k]), status)


def heat_options(nspace=33, ntime=64):
    """ex-02's settings with -sc (max_levels 4 unless -ml): min_coarse 3, skip 0, nrelax 1, cfactor 2, 30
    iterations, tol 1e-7 scaled by sqrt(dt) sqrt(dx)."""
    tstop, xspan = 2 * math.pi, math.pi
    tol = 1.0e-07 / (math.sqrt(tstop / (ntime - 1)) * math.sqrt(xspan / (nspace - 1)))
    return dict(max_levels=4, min_coarse=3, skip=False, nrelax=1, cfactor=2, max_iter=30,
                abs_tol=tol)


def run_case(case, comm=None, batched=False, out_of_place=False, **extra):
    """What XBraid printed for ``case``, from braidpy: residuals (%e), iterations,
    levels, the final values (%.14e, None on ranks without the last point)."""
    if case["example"] == "drive-burgers-1D":
        kind = OutOfPlaceAdvection if out_of_place else BatchedAdvection if batched else Advection
        app = kind(64, case["sc"])
        tstop, ntime, options = 5.0, 128, burgers_options()
    else:
        app = (BatchedHeat if batched else Heat)(case["nspace"], bool(case["sc"]))
        tstop, ntime = 2 * math.pi, 64
        options = {**heat_options(case["nspace"]), "max_levels": case["max_levels"]}
    options.update(case.get("options", {}))  # -skip 1 (skip=True), -fmg 1 (fmg=True)
    r = braidpy.solve(app, 0.0, tstop, ntime, comm=comm, **{**options, **extra})
    assert_split(comm, r.owned, len(r.times))
    final = None if r.final is None else [f"{x:.14e}" for x in r.final]
    return dict(residuals=[f"{v:.6e}" for v in r.residuals], iterations=r.iterations,
                levels=r.levels, final=final, batched=r.counts.get("step_batch", 0) > 0,
                coarsen=r.counts.get("coarsen", 0), refine=r.counts.get("refine", 0))


def expected(case):
    """XBraid's numbers for ``case`` in run_case's form."""
    final = case["final"] if case["example"] == "drive-burgers-1D" else case["final_file"][7:]
    return dict(residuals=case["residuals"], iterations=case["iterations"],
                levels=case["levels"], final=final)


def strict_advection(sc=1):
    """Advection with array-api-strict states on its "device1": the same operations in the
    array API (coarse states built with xp.empty/concat on the state's device)."""
    import array_api_strict as xp

    device = xp.Device("device1")

    class StrictAdvection(Advection):
        array_namespace = xp
        array_device = device

        def __init__(self):
            super().__init__(64, sc)
            self.guess = xp.asarray(self.guess, device=device)
            if sc:
                self.coarsen, self.refine = self._coarsen_xp, self._refine_xp

        def init(self, t):
            if t == 0:
                return xp.asarray(super().init(t), device=device)
            return xp.asarray(self.guess, copy=True)

        def step(self, u, t0, t1, status):
            dx = (self.xstop - self.xstart) / (u.shape[0] - 1.0)
            dt = t1 - t0
            self.seen[status.level] = (dx, dt)
            left = xp.full((1,), self.xleft, dtype=u.dtype, device=device)
            right = xp.full((1,), self.xright, dtype=u.dtype, device=device)
            old = xp.concat((left, u, right))
            um, uk, up = old[:-2], old[1:-1], old[2:]
            fp, fm = self._flux(up, uk), self._flux(uk, um)
            u[:] = uk - (dt / dx) * (fp - fm) + self.eps * (dt / (dx * dx)) * (up - 2 * uk + um)

        def norm(self, u):
            return math.sqrt(float(xp.cumulative_sum(u * u)[-1]))

        def _coarsen_xp(self, f, status):
            assert f.device == device
            mid = 0.5 * f[2:-2:2] + 0.25 * f[3:-1:2] + 0.25 * f[1:-3:2]
            first = (4. / 3.) * 0.5 * f[:1] + (4. / 3.) * 0.25 * f[1:2]
            last = (4. / 3.) * 0.5 * f[-1:] + (4. / 3.) * 0.25 * f[-2:-1]
            return xp.concat((first, mid, last))

        def _refine_xp(self, c, status):
            n = (c.shape[0] - 1) * 2 + 1
            v = xp.empty((n,), dtype=c.dtype, device=device)
            v[2:-1:2] = c[1:-1]
            v[1:-1:2] = 0.5 * c[:-1] + 0.5 * c[1:]
            v[:1], v[-1:] = c[:1], c[-1:]
            return v

    return StrictAdvection()


def run_strict(case, comm=None, max_iter=5):
    """run_case for drive-burgers-1D with array-api-strict states (final on the host),
    stopped after max_iter iterations (array-api-strict is slow: the first residuals
    are XBraid's first ones)."""
    app = strict_advection(case["sc"])
    r = braidpy.solve(app, 0.0, 5.0, 128, comm=comm,
                      **{**burgers_options(), "max_iter": max_iter})
    assert_split(comm, r.owned, len(r.times))
    final = None if r.final is None else [f"{x:.14e}" for x in np.from_dlpack(r.final)]
    device = None if r.final is None else str(r.final.device)
    return dict(residuals=[f"{v:.6e}" for v in r.residuals], iterations=r.iterations,
                levels=r.levels, final=final, device=device)
