"""XBraid's ex-02 (1D heat equation) re-implemented operation for operation, and the
cases of tests/data/xbraid_parity.json run through braidpy: serially
(test_xbraid_parity.py) and at XBraid's rank count (mpi_driver.py parity).

ex-02 (XBraid examples/ex-02.c with ex-02-lib.c): u_t = u_xx + f on [0, pi] x [0, 2 pi],
exact solution sin(x) cos(t); a state holds all nspace points, boundaries included.
A step to t1 sets the boundary values to the exact ones, adds dt * f(t1, x) at every
point and solves the backward Euler system (I - dt D2) u1 = rhs by the Thomas algorithm
with identity rows at both ends. Initial guess: sin(x) at t = 0, elsewhere uniform
random values from XBraid's own generator braid_Rand (a 64-bit LCG seeded 1 in each
process, so the guess depends on the rank count), drawn in the order init is called.
Spatial norm sqrt(sum u_i^2), summed left to right. Every expression below keeps the
C source's operation order, so the residuals agree with XBraid's to the last bit.
"""

import json
import math
from pathlib import Path

import numpy as np
from mpi_world import assert_split

import braidpy

DATA = json.loads((Path(__file__).parent / "data" / "xbraid_parity.json").read_text())
PI = math.pi  # ex-02-lib.c's PI is math.h's M_PI


class BraidRand:
    """braid_Rand (braid.c): next = next * 1103515245 + 12345 (unsigned long), returns
    (next / 65536) % 32768."""

    def __init__(self):
        self.state = 1

    def __call__(self):
        self.state = (self.state * 1103515245 + 12345) % (1 << 64)
        return (self.state >> 16) % 32768


def exact(t, x):
    return math.sin(x) * math.cos(t)


def forcing(t, x):
    return (-1.0) * math.sin(x) * math.sin(t) + math.sin(x) * math.cos(t)


class Ex02(braidpy.App):
    """ex-02's heat equation (see the module docstring). ``calls`` counts step calls
    that came batched (``step_stacked``), so a test can see which path ran."""

    def __init__(self, nspace=33, batched=False):
        self.nspace = nspace
        self.xstart, self.xstop = 0.0, PI
        self.rand = BraidRand()
        self.stacked_calls = 0
        if batched:
            self.step_stacked = self._step_stacked

    def init(self, t):
        n = self.nspace
        dx = (self.xstop - self.xstart) / (n - 1.0)
        if t == 0.0:
            out, x = [], self.xstart
            for _ in range(n):
                out.append(exact(0.0, x))
                x += dx
            return np.array(out)
        return np.array([float(self.rand()) / 32768 for _ in range(n)])

    def step(self, u, t0, t1, status):
        u[:] = self._stepped(u.tolist(), t0, t1)

    def _step_stacked(self, U, t0s, t1s, status):
        self.stacked_calls += 1
        for k in range(len(U)):
            U[k] = self._stepped(U[k].tolist(), float(t0s[k]), float(t1s[k]))

    def _stepped(self, v, tstart, tstop):
        size = len(v)
        dt = tstop - tstart
        dx = (self.xstop - self.xstart) / (size - 1.0)
        cfl = dt / (dx * dx)
        a, b, c = -cfl, 1.0 + 2 * cfl, -cfl
        v[0] = exact(tstop, 0.0)
        v[size - 1] = exact(tstop, PI)
        x = self.xstart
        for i in range(size):
            v[i] = v[i] + dt * forcing(tstop, x)
            x = x + dx
        g = [0.0] * size
        for i in range(1, size - 1):
            m = 1.0 / (b - a * g[i - 1])
            g[i] = m * c
            v[i] = m * (v[i] - a * v[i - 1])
        for i in range(size - 2, 0, -1):
            v[i] = v[i] - g[i] * v[i + 1]
        return v

    def norm(self, u):
        dot = 0.0
        for value in u.tolist():
            dot += value * value
        return math.sqrt(dot)


def discretization_error(u, t, nspace=33):
    """ex-02-lib.c's compute_error_norm at time t (printed by ex-02 with %1.4e)."""
    dx = (PI - 0.0) / (nspace - 1.0)
    x, error = 0.0, 0.0
    for value in u.tolist():
        error = error + pow(value - exact(t, x), 2)
        x += dx
    return math.sqrt(error * dx)


def ex02_options(args):
    """braidpy options for ex-02's command-line arguments (ex-02.c's defaults)."""
    o = dict(ntime=64, max_levels=2, nrelax=1, skip=0, crelax_weight=1.0, tol=1e-7,
             cfactor=2, max_iter=30, min_coarse=3, fmg=False)
    flags = {"-ntime": ("ntime", int), "-ml": ("max_levels", int), "-nu": ("nrelax", int),
             "-CWt": ("crelax_weight", float), "-skip": ("skip", int), "-tol": ("tol", float),
             "-cf": ("cfactor", int), "-mc": ("min_coarse", int), "-mi": ("max_iter", int)}
    k = 0
    while k < len(args):
        if args[k] == "-fmg":
            o["fmg"] = True
            k += 1
            continue
        name, kind = flags[args[k]]
        o[name] = kind(args[k + 1])
        k += 2
    tstart, tstop, nspace = 0.0, 2 * PI, 33
    # ex-02 scales its tolerance by the grid (sqrt(dt) sqrt(dx)), dt with ntime - 1.
    tol = o["tol"] / (math.sqrt((tstop - tstart) / (o["ntime"] - 1))
                      * math.sqrt((PI - 0.0) / (nspace - 1)))
    return o["ntime"], dict(max_levels=o["max_levels"], nrelax=o["nrelax"],
                            skip=bool(o["skip"]), crelax_weight=o["crelax_weight"],
                            abs_tol=tol, cfactor=o["cfactor"], max_iter=o["max_iter"],
                            min_coarse=o["min_coarse"], fmg=o["fmg"])


def run_ex02(case, comm=None, batched=False, **extra):
    """What ex-02 prints for ``case``: levels, iterations, residual history (%1.6e) and
    the discretization error at the final time (%1.4e, printed by the owner of t_N)."""
    ntime, options = ex02_options(case["args"])
    options.update(extra)
    app = Ex02(batched=batched)
    r = braidpy.solve(app, 0.0, 2 * PI, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    error = None
    if r.final is not None:
        error = f"{discretization_error(r.final, r.times[-1]):1.4e}"
    if comm is not None:
        error = [e for e in comm.allgather(error) if e is not None][0]
    return dict(levels=r.levels, iterations=r.iterations,
                history={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                             r.residuals)},
                error=error, stacked_calls=app.stacked_calls)


def cases(kind, nranks=None):
    return [c for c in DATA["cases"]
            if c["kind"] == kind and (nranks is None or c["nranks"] == nranks)]


class Ex01(braidpy.App):
    """XBraid's ex-01 problem as tests/data/xbraid_drivers/parity_driver.c solves it
    (u' = -u on [0, 5], guess 0.456, backward Euler, |u| = sqrt(u*u)); its sync records
    what XBraid's sync status tells the driver."""

    def __init__(self, record_syncs=True, batched=False, periodic=False):
        self.syncs = []
        self.periodic = periodic
        if record_syncs:
            self.sync = self._sync
        if batched:
            self.step_stacked = self._step_stacked

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    def step(self, u, t0, t1, status):
        u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

    def _step_stacked(self, U, t0s, t1s, status):
        for k in range(len(U)):
            U[k, 0] = 1.0 / (1.0 + float(t1s[k]) - float(t0s[k])) * U[k, 0]

    def norm(self, u):
        return float(np.sqrt(u[0] * u[0]))

    def _sync(self, status):
        owned = status.owned(0)
        # Periodic: XBraid's grid stops at ntime - 1 (its NTPoints); braidpy's last rank
        # also holds point ntime, which is point 0 again.
        last = self.ntime - 1 if self.periodic else self.ntime
        self.syncs.append(dict(
            caller={"init": 7, "cycle": 5}[status.phase], iteration=status.iteration,
            level=status.level, nlevels=status.nlevels, done=int(status.done),
            ntime=last, lo=owned.start, hi=min(owned.stop - 1, last),
            rnorms=[f"{r:.17e}" for r in status.rnorms()]))


def driver_options(args):
    """braidpy options for parity_driver.c's arguments (its defaults: ex-01's)."""
    o = dict(max_levels=2, min_coarse=2, cfactor=2, nrelax=1, max_iter=100, abs_tol=1e-6,
             skip=True)
    ntime, k = 10, 0
    weights = {}
    while k < len(args):
        a = args[k]
        if a in ("-sync", "-fmg", "-rcg", "-periodic", "-res", "-sc", "-fullres"):
            o.update({"-fmg": dict(fmg=True), "-rcg": dict(relax_only_cg=True),
                      "-periodic": dict(periodic=True),
                      "-fullres": dict(full_rnorm=True)}.get(a, {}))
            k += 1
            continue
        if a == "-CWtl":
            weights[int(args[k + 1])] = float(args[k + 2])
            k += 3
            continue
        value = args[k + 1]
        if a == "-nt":
            ntime = int(value)
        elif a == "-CWt":
            weights["default"] = float(value)
        else:
            name, kind = {"-ml": ("max_levels", int), "-mc": ("min_coarse", int),
                          "-cf": ("cfactor", int), "-nu": ("nrelax", int),
                          "-mi": ("max_iter", int), "-tol": ("abs_tol", float),
                          "-skip": ("skip", lambda v: bool(int(v))),
                          "-nfmg": ("nfmg", int)}[a]
            o[name] = kind(value)
        k += 2
    if weights:
        o["crelax_weight"] = weights
    return ntime, o


class Ex01Res(Ex01):
    """Ex01 with the driver's -res: the step adds fstop before its solve, and the
    residual is r <- (1 + dt) ustop - r."""

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        if fstop is not None:
            u[0] += fstop[0]
        u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

    def residual(self, ustop, r, status):
        r[0] = (1.0 + status.t1 - status.t0) * ustop[0] - r[0]


def run_driver_case(case, comm=None, batched=False, res_class=Ex01Res):
    """What parity_driver prints for ``case`` (residuals %1.6e, iterations, the final
    value %.17e on the owner of t_N) and every rank's sync calls."""
    ntime, options = driver_options(case["args"])
    if "-res" in case["args"]:  # an app with a residual takes fstop: unbatched
        options["batch"] = False
    app = (res_class if "-res" in case["args"] else Ex01)(
        record_syncs="-sync" in case["args"], batched=batched,
        periodic="-periodic" in case["args"])
    if "-fullres" in case["args"]:  # the full residual norm with -res's residual
        app.full_residual = lambda ustop, r, status: Ex01Res.residual(app, ustop, r, status)
    if "-sc" in case["args"]:  # the driver's coarsen 0.75 u and refine (a copy)
        app.coarsen = lambda u, status: 0.75 * u
        app.refine = lambda e, status: e.copy()
    r = braidpy.solve(app, 0.0, 5.0, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    final = f"{r.final[0]:.17e}" if r.final is not None else None
    syncs = {"0": app.syncs} if app.syncs else {}
    if comm is not None:
        final = [f for f in comm.allgather(final) if f is not None][0]
        syncs = {str(k): s for k, s in enumerate(comm.allgather(app.syncs)) if s}
    out = dict(iterations=r.iterations, final=final, syncs=syncs,
               residuals={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                              r.residuals)})
    if "-fullres" in case["args"]:
        out["full"] = {str(k): f"{v:1.6e}" for k, v in zip(r.full_residual_iterations,
                                                           r.full_residuals)}
    return out


class Ex06(braidpy.App):
    """XBraid's ex-06: u' = -4u - t + 1, backward Euler
    x + dt * (-4x + 1 - (t0 + dt)) / (1 + 4 dt), init 1 at t = 0 and 0.456 elsewhere,
    |u| = sqrt(u*u)."""

    def __init__(self, batched=False):
        if batched:
            self.step_stacked = self._step_stacked

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    @staticmethod
    def _be(x, t0, t1):
        dt = t1 - t0
        return x + dt * ((-4.0 * x + 1 - (t0 + dt)) / (1.0 + 4.0 * dt))

    def step(self, u, t0, t1, status):
        u[0] = self._be(float(u[0]), t0, t1)

    def _step_stacked(self, U, t0s, t1s, status):
        for k in range(len(U)):
            U[k, 0] = self._be(float(U[k, 0]), float(t0s[k]), float(t1s[k]))

    def norm(self, u):
        return float(np.sqrt(u[0] * u[0]))


def ex06_options(args):
    """braidpy options for ex-06's arguments (its defaults; storage 0 and access level 2
    change no value)."""
    o = dict(max_levels=100, nrelax=1, cfactor=2, max_iter=100, min_coarse=8, skip=False,
             periodic=False)
    ntime, tol, k = 256, 1.0e-12, 0
    while k < len(args):
        if args[k] == "-periodic":
            o["periodic"] = True
            k += 1
            continue
        a, v = args[k], args[k + 1]
        if a == "-nt":
            ntime = int(v)
        elif a == "-tol":
            tol = float(v)
        else:
            o[{"-ml": "max_levels", "-nu": "nrelax", "-cf": "cfactor", "-mi": "max_iter"}[a]] = \
                int(v)
        k += 2
    # ex-06 scales tol by sqrt(dt) with dt from its default ntime 256, before parsing -nt.
    o["abs_tol"] = tol / math.sqrt((0.5 - 0.0) / (256 - 1))
    return ntime, o


def run_ex06(case, comm=None, batched=False):
    """Levels, iterations, residuals (%1.6e) and u at t_0 (= u(tstop), %.14e)."""
    ntime, options = ex06_options(case["args"])
    r = braidpy.solve(Ex06(batched=batched), 0.0, 0.5, ntime, comm=comm, **options)
    assert_split(comm, r.owned, len(r.times))
    u0 = f"{r.solution(index=0)[0]:.14e}" if 0 in r.owned else None
    final = f"{r.final[0]:.14e}"
    if comm is not None:
        u0 = [u for u in comm.allgather(u0) if u is not None][0]
    return dict(levels=r.levels, iterations=r.iterations, u0=u0, final=final,
                history={str(k): f"{v:1.6e}" for k, v in zip(r.residual_iterations,
                                                             r.residuals)})


def run_at(nranks, comm):
    """Every case XBraid ran with ``nranks`` processes, chain by chain and batched."""
    out = {}
    for case in cases("ex02", nranks):
        out[case["id"]] = run_ex02(case, comm)
        out[case["id"] + "/batched"] = run_ex02(case, comm, batched=True)
    for case in cases("ex06", nranks):
        out[case["id"]] = run_ex06(case, comm)
        out[case["id"] + "/batched"] = run_ex06(case, comm, batched=True)
    for case in cases("driver", nranks):
        out[case["id"]] = run_driver_case(case, comm)
        out[case["id"] + "/batched"] = run_driver_case(case, comm, batched=True)
    return out
