"""XBraid's examples with a user residual (``-res``) as braidpy apps, and the outputs
XBraid printed for them (tests/data/xbraid_residual.json, made by running XBraid's
ex-01-expanded and ex-02 with the commands it records, at 1, 2 and 4 processes).

Run serially by test_residual.py and under mpiexec by mpi_driver.py (suite "residual")
at the rank count XBraid used.
"""

import json
import math
from pathlib import Path

import numpy as np
from mpi_world import assert_split

import braidpy

CASES = json.loads((Path(__file__).parent / "data" / "xbraid_residual.json").read_text())


class Ex01Res(braidpy.App):
    """XBraid's ex-01-expanded with ``-res``: u' = -u, u(0) = 1, guess 0.456, backward
    Euler whose right-hand side fstop is added before the solve, and the residual
    A(u_i, u_{i-1}) = (1 + dt) u_i - u_{i-1}; |u| = sqrt(u*u)."""

    def init(self, t):
        return np.array([1.0 if t == self.tstart else 0.456])

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        if fstop is not None:
            u[0] += fstop[0]
        u[0] = 1.0 / (1.0 + t1 - t0) * u[0]

    def residual(self, ustop, r, status):
        r[0] = (1.0 + status.t1 - status.t0) * ustop[0] - r[0]

    def norm(self, u):
        return float(np.sqrt(u[0] * u[0]))


class Rand:
    """braid_Rand (XBraid braid.c): the C library's example LCG, state 1 in every
    process, values 0..32767."""

    def __init__(self):
        self.state = 1

    def __call__(self):
        self.state = (self.state * 1103515245 + 12345) % 2 ** 64
        return (self.state // 65536) % 2 ** 32 % 32768


class Ex02Res(braidpy.App):
    """XBraid's ex-02 with ``-res``: u_t = u_xx + f on [0, pi] with the exact solution
    sin(x) cos(t), nspace points including the Dirichlet boundaries, backward Euler by
    a tridiagonal solve (fstop added first); the guess at t > 0 is braid_Rand()/32768
    per value, drawn in the order XBraid draws them on each process; the residual is
    A u_i - u_{i-1} - dt f(t_i) with A the backward Euler matrix (identity rows at the
    boundaries); |u| = sqrt(u.u) summed in order."""

    def __init__(self, nspace):
        self.nspace = nspace
        self.xstart, self.xstop = 0.0, math.pi
        self.rand = Rand()

    def _stencil(self, t0, t1, size):
        dx = (self.xstop - self.xstart) / (size - 1.0)
        dt = t1 - t0
        cfl = dt / (dx * dx)
        return dx, dt, (-cfl, 1.0 + 2 * cfl, -cfl)

    @staticmethod
    def forcing(t, x):
        return (-1.0) * math.sin(x) * math.sin(t) + math.sin(x) * math.cos(t)

    def init(self, t):
        n = self.nspace
        if t == 0.0:
            dx = (self.xstop - self.xstart) / (n - 1.0)
            x, out = self.xstart, []
            for _ in range(n):
                out.append(math.sin(x) * math.cos(t))
                x += dx
            return np.array(out)
        return np.array([float(self.rand()) / 32768 for _ in range(n)])

    def step(self, u, t0, t1, status, fstop=None, ustop=None):
        v = u.tolist()
        n = len(v)
        if fstop is not None:
            f = fstop.tolist()
            v = [v[i] + f[i] for i in range(n)]
        dx, dt, m = self._stencil(t0, t1, n)
        v[0] = math.sin(0.0) * math.cos(t1)
        v[n - 1] = math.sin(math.pi) * math.cos(t1)
        x = self.xstart
        for i in range(n):
            v[i] = v[i] + dt * self.forcing(t1, x)
            x = x + dx
        g = [0.0] * n
        for i in range(1, n - 1):
            c = 1.0 / (m[1] - m[0] * g[i - 1])
            g[i] = c * m[2]
            v[i] = c * (v[i] - m[0] * v[i - 1])
        for i in range(n - 2, 0, -1):
            v[i] = v[i] - g[i] * v[i + 1]
        u[:] = v

    def residual(self, ustop, r, status):
        s, v = ustop.tolist(), r.tolist()
        n = len(s)
        dx, dt, m = self._stencil(status.t0, status.t1, n)
        g = [0.0] * n
        for i in range(1, n - 1):
            g[i] = m[0] * s[i - 1] + m[1] * s[i] + m[2] * s[i + 1]
        g[0], g[n - 1] = s[0], s[n - 1]
        x = self.xstart
        for i in range(n):
            v[i] = g[i] - v[i] - dt * self.forcing(status.t1, x)
            x = x + dx
        r[:] = v

    def norm(self, u):
        dot = 0.0
        for value in u.tolist():
            dot += value * value
        return math.sqrt(dot)

    def error(self, u, t):
        """ex-02-lib.c's compute_error_norm at time t."""
        dx = (self.xstop - self.xstart) / (self.nspace - 1.0)
        x, e = self.xstart, 0.0
        for value in u.tolist():
            e = e + (value - math.sin(x) * math.cos(t)) ** 2
            x += dx
        return math.sqrt(e * dx)


def _arg(args, name, default, kind=int):
    words = args.split()
    return kind(words[words.index(name) + 1]) if name in words else default


def problem(case):
    """(app, tstart, tstop, ntime, options) of ``case``: the example's defaults and the
    options its command line sets."""
    a = case["args"]
    fmg = "-fmg" in a.split()
    if case["example"] == "ex-01-expanded":
        ntime, ml = _arg(a, "-ntime", 10), _arg(a, "-ml", 2)
        # ex-01-expanded sets nrelax on level 0 (-nu0) and on level ml-1 (-nuc, default
        # 5: used by -relax_only_cg only)
        nrelax = {"default": _arg(a, "-nu", 1), ml - 1: _arg(a, "-nuc", 5)}
        if "-nu0" in a.split():
            nrelax[0] = _arg(a, "-nu0", 1)
        opts = dict(max_levels=ml, nrelax=nrelax, cfactor=_arg(a, "-cf", 2),
                    abs_tol=_arg(a, "-tol", 1e-6, float), max_iter=100,
                    skip=bool(_arg(a, "-skip", 1)), fmg=fmg, min_coarse=2,
                    relax_only_cg="-relax_only_cg" in a.split())
        tstart, tstop = 0.0, 0.0 + ntime / 2.0
        if _arg(a, "-tg", 0) == 2:  # its init_TimeSteps and my_timegrid, summed in order
            dt = (tstop - tstart) / ntime
            t, times = tstart, [tstart]
            for i in range(ntime):
                t += dt * 0.5 if i < ntime * 0.5 else dt * 1.5
                times.append(t)
            opts["times"] = times
        return Ex01Res(), tstart, tstop, ntime, opts
    ntime, nspace = _arg(a, "-ntime", 64), _arg(a, "-nspace", 33)
    tstart, tstop = 0.0, 2 * math.pi
    tol = _arg(a, "-tol", 1e-7, float)
    tol = tol / (math.sqrt((tstop - tstart) / (ntime - 1)) *
                 math.sqrt((math.pi - 0.0) / (nspace - 1)))
    opts = dict(max_levels=_arg(a, "-ml", 2), nrelax=_arg(a, "-nu", 1),
                cfactor=_arg(a, "-cf", 2), abs_tol=tol, max_iter=_arg(a, "-mi", 30),
                skip=bool(_arg(a, "-skip", 0)), fmg=fmg, min_coarse=_arg(a, "-mc", 3))
    return Ex02Res(nspace), tstart, tstop, ntime, opts


def batch_steps(app):
    """app with a step_stacked that takes fstop and ustop stacked and steps each row by
    app.step (the same values); app.stacked_calls counts its calls."""
    app.stacked_calls = 0

    def step_stacked(U, t0s, t1s, status, fstop=None, ustop=None):
        app.stacked_calls += 1
        for k in range(len(U)):
            app.step(U[k], float(t0s[k]), float(t1s[k]), status,
                     fstop=None if fstop is None else fstop[k],
                     ustop=None if ustop is None else ustop[k])

    app.step_stacked = step_stacked
    return app


def run(case, comm=None, batched=False, bits=False, **extra):
    """What XBraid prints for ``case``, formatted as XBraid formats it (batched: with
    batch_steps' step_stacked; batched or bits: also the final state's and the
    residuals' bits, to compare)."""
    app, tstart, tstop, ntime, opts = problem(case)
    if batched:
        batch_steps(app)
    r = braidpy.solve(app, tstart, tstop, ntime, comm=comm, batch=batched, **opts, **extra)
    assert_split(comm, r.owned, len(r.times))
    out = dict(levels=r.levels, iterations=r.iterations,
               final=f"{r.residuals[-1] if r.residuals else -1.0:e}",
               history={str(k): f"{v:e}" for k, v in zip(r.residual_iterations, r.residuals)})
    if case["example"] == "ex-01-expanded":
        out["final_value"] = f"{float(r.final[0]):.14e}"
    else:
        out["discretization_error"] = f"{app.error(r.final, tstop):1.4e}"
    if batched or bits:  # the final state's bits (the owner's), every rank's call count
        final = None if r.final is None else r.final.tobytes().hex()
        if comm is not None:
            final = [f for f in comm.allgather(final) if f is not None][0]
        out.update(final_bits=final, residual_bits=[float(v).hex() for v in r.residuals])
    if batched:
        calls = app.stacked_calls if comm is None else sum(comm.allgather(app.stacked_calls))
        out["stacked_calls"] = calls
    return out


def expected(case):
    """The same fields as run(), as XBraid printed them."""
    out = dict(levels=case["levels"], iterations=case["iterations"],
               final=case["final_residual_norm"], history=case["history"])
    for key in ("final_value", "discretization_error"):
        if key in case:
            out[key] = case[key]
    return out


def case_id(case):
    return f"{case['example']} {case['args']} (np {case['nprocs']})"


def at_rank_count(nranks):
    return [c for c in CASES if c["nprocs"] == nranks]


def run_at(nranks, comm):
    out = {case_id(c): run(c, comm) for c in at_rank_count(nranks)}
    for c in at_rank_count(nranks):  # and the unbatched bits at this rank count
        plain = run(c, comm, bits=True)
        out[case_id(c) + " batched"] = dict(
            run(c, comm, batched=True),
            unbatched_bits=[plain["final_bits"], plain["residual_bits"]])
    out.update(run_full_at(nranks, comm))
    out.update({trace_case_id(c): run_trace(c, comm) for c in TRACE_CASES
                if nranks in c["nprocs"]})
    return out


# ---------------------------------------------------------------- full residual norm
# tests/data/xbraid_full_rnorm.json: a C driver built against XBraid's libbraid.a (kept
# outside this repository; tests/data/XBRAID_GOLDEN_NOTES.md describes it) solving
# ex-01-expanded's problem with braid_SetFullRNormRes, at 1, 2 and 4 processes.

FULL_CASES = json.loads((Path(__file__).parent / "data" / "xbraid_full_rnorm.json").read_text())


def exact_residual(ustop, r, status):
    """The driver's -fullexact residual, against the exact propagator:
    r = u_i - exp(-dt) u_{i-1} (nonzero at F-points: the truncation error)."""
    r[0] = ustop[0] - math.exp(-(status.t1 - status.t0)) * r[0]


class Ex01Full(braidpy.App):
    """The driver's problem without -res: the plain step, only a full residual."""

    init, norm = Ex01Res.init, Ex01Res.norm

    def step(self, u, t0, t1, status):
        u[0] = 1.0 / (1.0 + t1 - t0) * u[0]


def full_problem(case):
    words = case["args"].split()
    app = Ex01Res() if "-res" in words else Ex01Full()
    if "-fullexact" in words:
        app.full_residual = exact_residual
    ntime = _arg(case["args"], "-ntime", 10)
    opts = dict(max_levels=_arg(case["args"], "-ml", 2), nrelax=_arg(case["args"], "-nu", 1),
                cfactor=_arg(case["args"], "-cf", 2),
                abs_tol=_arg(case["args"], "-tol", 1e-6, float),
                max_iter=_arg(case["args"], "-mi", 100), skip=bool(_arg(case["args"], "-skip", 1)),
                fmg="-fmg" in words, min_coarse=2, full_rnorm=True)
    return app, 0.0, ntime / 2.0, ntime, opts


def run_full(case, comm=None):
    app, tstart, tstop, ntime, opts = full_problem(case)
    r = braidpy.solve(app, tstart, tstop, ntime, comm=comm, **opts)
    assert_split(comm, r.owned, len(r.times))
    return dict(
        levels=r.levels, iterations=r.iterations,
        history={str(k): f"{v:e}" for k, v in zip(r.residual_iterations, r.residuals)},
        full_history={str(k): f"{v:e}" for k, v in zip(r.full_residual_iterations,
                                                       r.full_residuals)},
        final_full=f"{r.final_full_residual:e}", final_value=f"{float(r.final[0]):.14e}")


def expected_full(case):
    return dict(levels=case["levels"], iterations=case["iterations"], history=case["history"],
                full_history=case["full_history"], final_full=case["final_full_residual_norm"],
                final_value=case["final_value"])


def full_case_id(case):
    return f"fullres {case['args']} (np {case['nprocs']})"


def run_full_at(nranks, comm):
    return {full_case_id(c): run_full(c, comm) for c in FULL_CASES if c["nprocs"] == nranks}


# ---------------------------------------------------------------- every step call
# tests/data/xbraid_step_trace.json: the same driver with -trace records every call of
# its step: iteration, level, index of t0, and u, ustop and fstop as %.17g (nan: none).

TRACE_CASES = json.loads((Path(__file__).parent / "data" / "xbraid_step_trace.json").read_text())


class Tracing(Ex01Res):
    """Ex01Res recording each step call as the driver prints it."""

    def __init__(self):
        self.rows = []

    def step(self, u, t0, t1, status, fstop=None, ustop=None, index=None):
        f = "nan" if fstop is None else "%.17g" % fstop[0]
        self.rows.append("%d %d %d %.17g %.17g %s" % (
            status.iteration, status.level, status.index if index is None else index, u[0],
            ustop[0], f))
        super().step(u, t0, t1, status, fstop=fstop)

    def _step_stacked(self, U, t0s, t1s, status, fstop=None, ustop=None):
        for k in range(len(U)):  # each row as step, with its own index
            self.step(U[k], float(t0s[k]), float(t1s[k]), status,
                      fstop=None if fstop is None else fstop[k], ustop=ustop[k],
                      index=int(status.indices[k]))


def run_trace(case, comm=None, batched=False):
    """The step calls of all ranks, sorted (rank 0; None elsewhere under MPI); batched:
    through step_stacked with fstop and ustop stacked."""
    app, tstart, tstop, ntime, opts = full_problem(case)
    opts.pop("full_rnorm")
    traced = Tracing()
    if batched:
        traced.step_stacked = traced._step_stacked
    r = braidpy.solve(traced, tstart, tstop, ntime, comm=comm, batch=batched, **opts)
    assert_split(comm, r.owned, len(r.times))
    rows = traced.rows if comm is None else comm.gather(traced.rows)
    if comm is not None and comm.Get_rank() != 0:
        return None
    if comm is not None:
        rows = [row for part in rows for row in part]
    return sorted(rows)


def trace_case_id(case):
    return f"trace {case['args']}"
