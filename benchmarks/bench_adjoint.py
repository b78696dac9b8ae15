"""Adjoint MGRIT (braidpy.adjoint): cost of one gradient, iterations vs N, memory; one process.

Problems (apps defined here; NumPy and SciPy only):

ResNet (width 8): u_{n+1} = u_n + h tanh(K_n u_n + b_n) on [0, 2], h = t1 - t0,
    with its own random K_n = Kbar + sigma*G_n/sqrt(8) (sigma 0.5) and
    b_n = bbar + 0.1*g_n per step (Kbar: a random antisymmetric matrix minus
    0.1 I; all draws from one fixed-seed Generator per N); a coarse step from
    t_n uses the weights of step n. J = |u_N - y|^2 / 2. Gradients with respect to every
    K_n and b_n (72 numbers per step).
Heat control (nx interior points, on [0, 1]): u_{n+1} = S_dt (u_n + dt c_n g), S_dt =
    (I - dt A)^-1 (implicit Euler, one cached splu factor per dt, as
    _problems.HeatOperator), a control c_n per step and a fixed source profile
    g; J = |u_N - y|^2 / 2 + 1e-3 sum_i |u_i|^2 (a running term).
    Gradient with respect to every c_n: dt (S_dt g) . w_{n+1}.

Both apps store dJ/dtheta_n into preallocated arrays and return None from
step_gradient ("accumulate yourself" in braidpy.adjoint), so that the
gradient's own storage is allocated before any measurement starts and is the
same for the serial and the MGRIT runs.

Serial: a Python loop of N app.step calls from app.init(tstart) that keeps a
clone of every state (the trajectory), J, then a backward loop of N
step_gradient + step_adjoint calls (+ running_gradient), i.e. the same user
callbacks braidpy calls, in the order of tests/apps.py's serial_gradient.
Exact: a GradientSolver built with primal=dict(cfactor, max_levels 30, FCF,
skip, rel_tol, abs_tol 0, timings=True) (the adjoint's options default to the
primal's; the timers cost two clock reads per callback call) and one cold
evaluate(). One-shot: GradientSolver(..., oneshot=(2, 2)); one
evaluate() untimed, then per evaluation a perturbation of the parameters
(1e-3 times a standard normal draw added to each) and a timed evaluate(), warm-started from the
previous one. Every timing includes building a fresh app from the stored
weights (for heat: the LU factors, computed on first use) and, for MGRIT,
the GradientSolver. "grad err" is max |g - g_serial| / max |g_serial| over
all parameters (one-shot: of its last evaluation, against a serial gradient
at the same parameters). Iterations are Result.iterations of the primal and
of the adjoint solve (XBraid's count); they must not grow with N.

Memory, one run per case after the timings (tracemalloc traces NumPy's data
buffers and every Python object, including the array headers, which matter
for width-8 states): a fresh app and GradientSolver, then the steps of
GradientSolver.evaluate() by hand: primal_core.solve(), J and w_N =
dJ/du_N from Result.final, adjoint_core.set_initial_condition(w_N),
adjoint_core.solve().
  trajectory    sum of sys.getsizeof (data + array header) over the N+1
                primal states, i.e. what storage="all" must keep (measured
                on copies from Result.solution after tracing stops).
  primal kept   tracemalloc growth over the primal solve, all still held for
                the adjoint and the next warm start: the trajectory and
                whatever else the solve leaves behind.
  adjoint peak  tracemalloc peak during adjoint_core.solve() minus the traced
                size just before it: everything the adjoint solve allocates
                at its worst moment (its fine C-points, the coarse levels'
                vectors during a cycle, temporaries, the status objects of
                the callbacks in flight); the primal, read but not copied,
                is not in it.
  adjoint kept  growth over the adjoint solve still held after it (its fine
                C-points, kept for the next warm start).
  whole peak    tracemalloc peak over both solves minus the size before the
                primal; a serial sweep needs the trajectory + O(1).
Ratios are to the trajectory (goal for the adjoint peak: < 1.5x).

The last table takes the fastest exact evaluation at the largest N apart with
braidpy's callback timers (Result.timings): per step call, the step
callback's time (for the adjoint: braidpy.adjoint's wrapper around the
user's step_adjoint, with its status object, running term and index
arithmetic), the user's step or step_adjoint alone in a plain loop over the
fine steps (min over repeats), and the difference: what braidpy adds to each
step call. The clone/sum/norm column is their time as Python callbacks
(braidpy runs App's defaults in C++ when it can, and then they show ~0).

The tables show min and median over repeats of each timing and the ratios of
mins and medians (one-shot: over the warm evaluations); on a shared machine
trust the mins.

Run: python benchmarks/bench_adjoint.py [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
import tracemalloc

import numpy as np
from _problems import HeatOperator
from _report import microseconds, min_median, print_table, seconds

import braidpy
from braidpy.adjoint import GradientSolver

WIDTH = 8
RESNET_TSTOP = 2.0
HEAT_TSTOP = 1.0


# ------------------------------------------------------------------------- apps


class ResNetWeights:
    """Per-step weights, initial state and target of the ResNet problem."""

    def __init__(self, ntime: int, sigma: float = 0.5, seed: int = 20240611):
        rng = np.random.default_rng(seed + ntime)
        a = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)
        kbar = 1.5 * (a - a.T) - 0.1 * np.eye(WIDTH)
        self.K = kbar + sigma * rng.standard_normal((ntime, WIDTH, WIDTH)) / np.sqrt(WIDTH)
        self.b = 0.3 * rng.standard_normal(WIDTH) + 0.1 * rng.standard_normal((ntime, WIDTH))
        self.u0 = rng.standard_normal(WIDTH)
        self.target = rng.standard_normal(WIDTH)

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.K += scale * rng.standard_normal(self.K.shape)
        self.b += scale * rng.standard_normal(self.b.shape)


class ResNet(braidpy.App):
    """u <- u + h tanh(K_n u + b_n); J = |u_N - y|^2 / 2; dJ/dK_n, dJ/db_n stored in place."""

    def __init__(self, weights: ResNetWeights):
        self.w = weights
        n = weights.K.shape[0]
        self.dK = np.zeros((n, WIDTH, WIDTH))
        self.db = np.zeros((n, WIDTH))

    def gradient(self) -> np.ndarray:
        return np.concatenate([self.dK.ravel(), self.db.ravel()])

    def init(self, t):
        return self.w.u0.copy() if t == self.tstart else np.zeros(WIDTH)

    def step(self, u, t0, t1, status):
        i = status.fine_index
        u += (t1 - t0) * np.tanh(self.w.K[i] @ u + self.w.b[i])

    def step_adjoint(self, w, u, t0, t1, status):
        i = status.fine_index
        K = self.w.K[i]
        s = np.tanh(K @ u + self.w.b[i])
        w += (t1 - t0) * ((1.0 - s * s) * w) @ K

    def step_gradient(self, w, u, t0, t1, status):
        i = status.fine_index
        s = np.tanh(self.w.K[i] @ u + self.w.b[i])
        sw = (t1 - t0) * (1.0 - s * s) * w
        np.multiply.outer(sw, u, out=self.dK[i])
        self.db[i] = sw

    def terminal_objective(self, u):
        d = u - self.w.target
        return 0.5 * float(d @ d)

    def terminal_gradient(self, u):
        return u - self.w.target


class HeatControlData:
    """Controls c_n (a smooth signal plus per-step noise) of the heat problem."""

    def __init__(self, ntime: int, nx: int, seed: int = 20240611):
        rng = np.random.default_rng(seed + ntime)
        t = np.arange(ntime) / ntime
        self.nx = nx
        self.c = np.sin(2 * np.pi * t) + 0.3 * rng.standard_normal(ntime)

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.c += scale * rng.standard_normal(self.c.shape)


class HeatControl(braidpy.App):
    """u <- S_dt (u + dt c_n g); J = |u_N - y|^2/2 + 1e-3 sum_i |u_i|^2; dJ/dc_n stored."""

    def __init__(self, data: HeatControlData, ntime: int):
        self.data = data
        self.op = HeatOperator(data.nx, HEAT_TSTOP / ntime)
        x = self.op.x
        self.g = np.exp(-50.0 * (x - 0.3) ** 2)
        self.target = 0.2 * np.sin(np.pi * x)
        self._sg = {}  # dt -> S_dt g
        self.dc = np.zeros(ntime)

    def gradient(self) -> np.ndarray:
        return self.dc

    def init(self, t):
        return self.op.initial() if t == self.tstart else np.zeros(self.op.nx)

    def step(self, u, t0, t1, status):
        dt = t1 - t0
        return self.op.solve(u + (dt * self.data.c[status.fine_index]) * self.g, dt)

    def step_adjoint(self, w, u, t0, t1, status):
        return self.op.solve(w, t1 - t0)  # S_dt is symmetric

    def step_gradient(self, w, u, t0, t1, status):
        dt = t1 - t0
        sg = self._sg.get(dt)
        if sg is None:
            sg = self._sg[dt] = self.op.solve(self.g, dt)
        self.dc[status.fine_index] = dt * float(sg @ w)

    def terminal_objective(self, u):
        d = u - self.target
        return 0.5 * float(d @ d)

    def terminal_gradient(self, u):
        return u - self.target

    def running_objective(self, u, t, status):
        return 1e-3 * float(u @ u)

    def running_gradient(self, u, t, status):
        return 2e-3 * u


# ----------------------------------------------------------------- the serial sweep


class _Status:
    """What the serial loops pass as status (the fields the apps read)."""

    __slots__ = ("fine_index", "level", "t", "t0", "t1", "phase")

    def __init__(self):
        self.fine_index, self.level, self.phase = 0, 0, "final"


def serial_gradient(app, tstart: float, tstop: float, ntime: int) -> float:
    """J after a forward sweep that keeps every state and a backward adjoint sweep;
    the per-step gradients land in the app's arrays."""
    app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
    times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
    st = _Status()
    step, clone = app.step, app.clone
    u = app.init(tstart)
    traj = [clone(u)]
    for n in range(ntime):
        st.fine_index = n
        r = step(u, times[n], times[n + 1], st)
        if r is not None and r is not u:
            u = r
        traj.append(clone(u))
    running = callable(getattr(app, "running_objective", None))
    J = float(app.terminal_objective(traj[ntime]))
    w = clone(app.terminal_gradient(traj[ntime]))
    if running:
        for n in range(ntime + 1):
            st.t = times[n]
            J += float(app.running_objective(traj[n], times[n], st))
        app.sum(1.0, app.running_gradient(traj[ntime], times[ntime], st), 1.0, w)
    step_adjoint, step_gradient = app.step_adjoint, app.step_gradient
    for n in range(ntime - 1, -1, -1):
        st.fine_index = n
        step_gradient(w, traj[n], times[n], times[n + 1], st)
        r = step_adjoint(w, traj[n], times[n], times[n + 1], st)
        if r is not None and r is not w:
            w = r
        if running:
            app.sum(1.0, app.running_gradient(traj[n], times[n], st), 1.0, w)
    return J


# ---------------------------------------------------------------------- the cases


class Case:
    """One problem at one N: its data, how to build an app, and its time interval."""

    def __init__(self, name: str, ntime: int, data, make_app, tstop: float):
        self.name, self.ntime, self.data, self.make_app, self.tstop = (
            name, ntime, data, make_app, tstop)

    def app(self):
        return self.make_app(self.data, self.ntime)


def cases(args) -> list:
    out = []
    for n in args.ntime:
        out.append(Case(f"ResNet (width {WIDTH})", n, ResNetWeights(n, args.sigma),
                        lambda d, n: ResNet(d), RESNET_TSTOP))
    for n in args.ntime:
        out.append(Case(f"heat control (nx {args.nx})", n, HeatControlData(n, args.nx),
                        HeatControl, HEAT_TSTOP))
    return out


def mgrit_options(args) -> dict:
    return dict(max_levels=30, cfactor=args.cfactor, nrelax=1, rel_tol=args.rel_tol,
                abs_tol=0.0, timings=True)


def grad_error(g, ref) -> float:
    return float(np.max(np.abs(g - ref)) / np.max(np.abs(ref)))


def time_serial(case):
    """(seconds, J, gradient) of a fresh app and serial_gradient."""
    gc.collect()
    start = time.perf_counter()
    app = case.app()
    J = serial_gradient(app, 0.0, case.tstop, case.ntime)
    elapsed = time.perf_counter() - start
    return elapsed, J, app.gradient().copy()


def time_exact(args, case):
    """(seconds, Gradient, gradient array) of a fresh app and GradientSolver, one evaluate()."""
    gc.collect()
    start = time.perf_counter()
    app = case.app()
    gs = GradientSolver(app, 0.0, case.tstop, case.ntime, primal=mgrit_options(args))
    result = gs.evaluate()
    elapsed = time.perf_counter() - start
    return elapsed, result, app.gradient().copy()


def time_oneshot(args, case, rng):
    """(seconds of each warm evaluate(), last Gradient, its gradient, serial gradient at
    the same parameters): one cold evaluate() untimed, then `repeats` times a
    perturbation of (a copy of) case.data and a timed evaluate()."""
    data = copy.deepcopy(case.data)
    app = case.make_app(data, case.ntime)
    gs = GradientSolver(app, 0.0, case.tstop, case.ntime, primal=mgrit_options(args),
                        oneshot=(2, 2))
    gs.evaluate()
    times = []
    for _ in range(args.repeats):
        data.perturb(rng)
        gc.collect()
        start = time.perf_counter()
        result = gs.evaluate()
        times.append(time.perf_counter() - start)
    ref = case.make_app(data, case.ntime)
    serial_gradient(ref, 0.0, case.tstop, case.ntime)
    return times, result, app.gradient().copy(), ref.gradient()


def measure_memory(args, case) -> dict:
    """Traced bytes of the primal trajectory and of the two solves (see the docstring)."""
    app = case.app()
    gs = GradientSolver(app, 0.0, case.tstop, case.ntime, primal=mgrit_options(args))
    gc.collect()
    tracemalloc.start()
    try:
        before_primal = tracemalloc.get_traced_memory()[0]
        primal = gs.primal_core.solve()
        after_primal = tracemalloc.get_traced_memory()[0]
        w_final = app.clone(app.terminal_gradient(primal.final))
        if callable(getattr(app, "running_gradient", None)):
            app.sum(1.0, app.running_gradient(primal.final, case.tstop, _Status()), 1.0, w_final)
        gs.adjoint_core.set_initial_condition(w_final)
        del w_final
        whole_peak_primal = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        before_adjoint = tracemalloc.get_traced_memory()[0]
        gs.adjoint_core.solve()
        after_adjoint, adjoint_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    trajectory = sum(sys.getsizeof(primal.solution(index=i)) for i in range(case.ntime + 1))
    return dict(trajectory=trajectory, primal_kept=after_primal - before_primal,
                adjoint_peak=adjoint_peak - before_adjoint,
                adjoint_kept=after_adjoint - before_adjoint,
                whole_peak=max(whole_peak_primal, adjoint_peak) - before_primal)


def user_call_seconds(case, repeats: int) -> tuple:
    """Seconds per call of app.step alone and of app.step_adjoint alone, each in a plain
    loop over the N fine steps along the true trajectory and adjoint (min over repeats)."""
    app = case.app()
    app.tstart, app.tstop, app.ntime = 0.0, case.tstop, case.ntime
    times = [(i / case.ntime) * case.tstop for i in range(case.ntime + 1)]
    st = _Status()
    step, step_adjoint = app.step, app.step_adjoint
    u = app.init(0.0)
    traj = [app.clone(u)]
    for n in range(case.ntime):  # warm-up (LU factors) and the states
        st.fine_index = n
        r = step(u, times[n], times[n + 1], st)
        u = u if r is None else r
        traj.append(app.clone(u))
    forward, backward = [], []
    for _ in range(repeats):
        u = app.clone(traj[0])
        gc.collect()
        start = time.perf_counter()
        for n in range(case.ntime):
            st.fine_index = n
            r = step(u, times[n], times[n + 1], st)
            if r is not None and r is not u:
                u = r
        forward.append(time.perf_counter() - start)
        w = app.clone(app.terminal_gradient(traj[-1]))
        start = time.perf_counter()
        for n in range(case.ntime - 1, -1, -1):
            st.fine_index = n
            r = step_adjoint(w, traj[n], times[n], times[n + 1], st)
            if r is not None and r is not w:
                w = r
        backward.append(time.perf_counter() - start)
    return min(forward) / case.ntime, min(backward) / case.ntime


def breakdown_rows(args, case, result) -> list:
    """Where the time of an exact evaluation (a Gradient) goes, from braidpy's timers."""
    user_step, user_adjoint = user_call_seconds(case, args.repeats)
    rows = []
    for label, res, user in (("primal", result.primal, user_step),
                             ("adjoint", result.adjoint, user_adjoint)):
        tm, calls = res.timings, res.counts["step"]
        inside = sum(v for k, v in tm.items() if k != "total")
        per_call = tm["step"] / calls
        rows.append([case.name, case.ntime, label, seconds(tm["total"]),
                     f"{calls / case.ntime:.1f}", microseconds(per_call), microseconds(user),
                     microseconds(per_call - user), seconds(calls * user),
                     seconds(tm["clone"] + tm["sum"] + tm["norm"]), seconds(tm["access"]),
                     seconds(tm["total"] - inside)])
    return rows


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x"


def run_case(args, case, rng):
    serial_t, exact_t = [], []
    exact = None
    serial_grad = exact_grad = None
    for _ in range(args.repeats):
        elapsed, _, serial_grad = time_serial(case)
        serial_t.append(elapsed)
        elapsed, result, exact_grad = time_exact(args, case)
        if not exact_t or elapsed < min(exact_t):
            exact = result
        exact_t.append(elapsed)
    oneshot_t, oneshot, grad, ref = time_oneshot(args, case, rng)
    oneshot_err = grad_error(grad, ref)
    (s_min, s_med), (e_min, e_med), (o_min, o_med) = (
        min_median(serial_t), min_median(exact_t), min_median(oneshot_t))
    cost = [case.name, case.ntime, seconds(s_min), seconds(s_med), seconds(e_min),
            ratio(e_min, s_min), ratio(e_med, s_med), f"{grad_error(exact_grad, serial_grad):.1e}",
            seconds(o_min), ratio(o_min, s_min), ratio(o_med, s_med), f"{oneshot_err:.1e}"]
    p, a = exact.primal, exact.adjoint
    iters = [case.name, case.ntime, p.levels, p.iterations, a.iterations,
             f"{p.residuals[-1]:.1e}" if p.residuals else "-",
             f"{a.residuals[-1]:.1e}" if a.residuals else "-",
             f"{p.counts['step'] / case.ntime:.1f}", f"{a.counts['step'] / case.ntime:.1f}",
             f"{oneshot.primal.iterations}/{oneshot.adjoint.iterations}"]
    return cost, iters, exact


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    p.add_argument("--nx", type=int, default=200, help="heat: interior spatial points")
    p.add_argument("--sigma", type=float, default=0.5, help="ResNet: per-step weight noise")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--rel-tol", type=float, default=1e-8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: ntime 64 128, nx 50, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.ntime, args.nx, args.repeats = [64, 128], 50, 1
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    rng = np.random.default_rng(31337)
    cost_rows, iter_rows, mem_rows, time_rows = [], [], [], []
    for case in cases(args):
        cost, iters, exact = run_case(args, case, rng)
        cost_rows.append(cost)
        iter_rows.append(iters)
        m = measure_memory(args, case)
        t = m["trajectory"]
        mem_rows.append([case.name, case.ntime, mib(t), ratio(m["primal_kept"], t),
                         mib(m["adjoint_peak"]), f"{m['adjoint_peak'] / t:.2f}x",
                         f"{m['adjoint_kept'] / t:.2f}x", f"{m['whole_peak'] / t:.2f}x"])
        if case.ntime == max(args.ntime):
            time_rows += breakdown_rows(args, case, exact)
    print_table(["problem", "N", "serial min", "serial med", "exact min", "exact/serial min",
                 "exact/serial med", "grad err", "1-shot min", "1-shot/serial min",
                 "1-shot/serial med", "1-shot err"], cost_rows,
                title=f"One gradient: MGRIT (1 process) vs serial forward + backward sweep; "
                      f"cfactor {args.cfactor}, FCF, rel_tol {args.rel_tol:g}; "
                      f"one-shot (2, 2) warm; {args.repeats} repeats")
    print_table(["problem", "N", "levels", "primal iters", "adjoint iters", "primal r",
                 "adjoint r", "primal steps/N", "adjoint steps/N", "1-shot iters"], iter_rows,
                title="Iterations of the exact evaluation (cold start) vs N; steps/N = step "
                      "callback calls per fine step")
    print_table(["problem", "N", "trajectory", "primal kept", "adjoint peak", "adjoint peak/traj",
                 "adjoint kept/traj", "whole peak/traj"], mem_rows,
                title="Memory (tracemalloc), as multiples of the stored primal trajectory")
    print_table(["problem", "N", "solve", "wall", "steps/N", "step callback", "user alone",
                 "difference", "user total", "clone+sum+norm", "access", "in core"], time_rows,
                title="Where the time goes: the fastest exact evaluation at the largest N; "
                      "per step call: the step callback's time (braidpy's timers; adjoint: "
                      "braidpy's wrapper around step_adjoint), the user's step or step_adjoint "
                      "alone (a plain loop), and their difference; user total = step calls x "
                      "user alone; in core = wall - all callback time")


if __name__ == "__main__":
    main()
