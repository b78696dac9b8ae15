"""What does one adjoint-MGRIT gradient cost against serial backpropagation, and does it
stay depth-independent and within 1.5x the trajectory's memory? (braidpy.adjoint, one process)

Apps: a width-8 ResNet u <- u + h tanh(K_n u + b_n), J = |u_N - y|^2 / 2; 1D heat with a
control per step and a running term. Timed: serial forward + backward sweep vs
GradientSolver.evaluate() (cf 4, FCF, rel_tol 1e-8, cold) vs one-shot (2, 2) warm after a
perturbation; also iterations vs N, tracemalloc memory as multiples of the trajectory, and
at the largest N where the time goes (callback timers vs the user's step alone).

Run: python benchmarks/bench_adjoint.py [--repeats R] [--ntime N ...] [--nx NX] [--quick]
"""

from __future__ import annotations

import argparse
import copy
import gc
import sys
import time
import tracemalloc

import numpy as np
from _apps_resnet import ResNetWeights
from _harness import clock, microseconds, min_median, print_table, ratio, seconds
from _problems import HeatOperator

import braidpy
from braidpy.adjoint import GradientSolver

WIDTH, RESNET_TSTOP, HEAT_TSTOP = 8, 2.0, 1.0


class Terminal(braidpy.App):
    """J's terminal part |u_N - target|^2 / 2."""

    def terminal_objective(self, u):
        return 0.5 * float((u - self.target) @ (u - self.target))

    def terminal_gradient(self, u):
        return u - self.target


class ResNet(Terminal):
    """u <- u + h tanh(K_n u + b_n); J = |u_N - y|^2 / 2; dJ/dK_n, dJ/db_n stored in place."""

    def __init__(self, weights: ResNetWeights, ntime: int):
        self.w, self.target = weights, weights.target[0]
        self.dK, self.db = np.zeros((ntime, WIDTH, WIDTH)), np.zeros((ntime, WIDTH))

    def gradient(self) -> np.ndarray:
        return np.concatenate([self.dK.ravel(), self.db.ravel()])

    def init(self, t):
        return self.w.u0[0].copy() if t == self.tstart else np.zeros(WIDTH)

    def step(self, u, t0, t1, status):
        i = status.fine_index
        u += (t1 - t0) * np.tanh(self.w.K[i] @ u + self.w.b[i])

    def step_adjoint(self, w, u, t0, t1, status):
        i = status.fine_index
        s = np.tanh(self.w.K[i] @ u + self.w.b[i])
        w += (t1 - t0) * ((1.0 - s * s) * w) @ self.w.K[i]

    def step_gradient(self, w, u, t0, t1, status):
        i = status.fine_index
        s = np.tanh(self.w.K[i] @ u + self.w.b[i])
        sw = (t1 - t0) * (1.0 - s * s) * w
        np.multiply.outer(sw, u, out=self.dK[i])
        self.db[i] = sw


class HeatControlData:
    """Controls c_n (a smooth signal plus per-step noise) of the heat problem."""

    def __init__(self, ntime: int, nx: int, seed: int = 20240611):
        rng = np.random.default_rng(seed + ntime)
        self.nx = nx
        self.c = np.sin(2 * np.pi * np.arange(ntime) / ntime) + 0.3 * rng.standard_normal(ntime)

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.c += scale * rng.standard_normal(self.c.shape)


class HeatControl(Terminal):
    """u <- S_dt (u + dt c_n g); J = |u_N - y|^2/2 + 1e-3 sum_i |u_i|^2; dJ/dc_n stored."""

    def __init__(self, data: HeatControlData, ntime: int):
        self.data, self.op = data, HeatOperator(data.nx, HEAT_TSTOP / ntime)
        self.g = np.exp(-50.0 * (self.op.x - 0.3) ** 2)
        self.target = 0.2 * np.sin(np.pi * self.op.x)
        self._sg, self.dc = {}, np.zeros(ntime)  # _sg: dt -> S_dt g

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
        if dt not in self._sg:
            self._sg[dt] = self.op.solve(self.g, dt)
        self.dc[status.fine_index] = dt * float(self._sg[dt] @ w)

    def running_objective(self, u, t, status):
        return 1e-3 * float(u @ u)

    def running_gradient(self, u, t, status):
        return 2e-3 * u


class _Status:
    """What the serial loops pass as status (the fields the apps read)."""

    __slots__ = ("fine_index", "level", "t", "t0", "t1", "phase")

    def __init__(self):
        self.fine_index, self.level, self.phase = 0, 0, "final"


def setup(app, tstop: float, ntime: int):
    """(times, status) for the serial loops; sets the app's interval."""
    app.tstart, app.tstop, app.ntime = 0.0, tstop, ntime
    return [(i / ntime) * tstop for i in range(ntime + 1)], _Status()


def forward(app, times, st, u):
    """Steps u over all intervals: the trajectory (clones, u_0 .. u_N)."""
    step, clone = app.step, app.clone
    traj = [clone(u)]
    for n in range(len(times) - 1):
        st.fine_index = n
        r = step(u, times[n], times[n + 1], st)
        u = u if r is None else r
        traj.append(clone(u))
    return traj


def serial_gradient(app, tstop: float, ntime: int) -> float:
    """J after a forward sweep keeping every state and a backward adjoint sweep; the
    per-step gradients land in the app's arrays."""
    times, st = setup(app, tstop, ntime)
    traj = forward(app, times, st, app.init(0.0))
    running = callable(getattr(app, "running_objective", None))
    J = float(app.terminal_objective(traj[ntime]))
    w = app.clone(app.terminal_gradient(traj[ntime]))
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
        w = w if r is None else r
        if running:
            app.sum(1.0, app.running_gradient(traj[n], times[n], st), 1.0, w)
    return J


class Case:
    """One problem at one N: its data, how to build an app, and its time interval."""

    def __init__(self, name, ntime, data, make_app, tstop):
        self.name, self.ntime, self.data, self.make_app, self.tstop = (
            name, ntime, data, make_app, tstop)

    def app(self, data=None):
        return self.make_app(self.data if data is None else data, self.ntime)

    def serial(self):
        serial_gradient(app := self.app(), self.tstop, self.ntime)
        return app

    def exact(self, args):
        return self.solver(args, app := self.app()).evaluate(), app

    def solver(self, args, app, **kw):
        return GradientSolver(app, 0.0, self.tstop, self.ntime, **kw, primal=dict(
            max_levels=30, cfactor=args.cfactor, nrelax=1, rel_tol=args.rel_tol, abs_tol=0.0,
            timings=True))


def grad_error(g, ref) -> float:
    return float(np.max(np.abs(g - ref)) / np.max(np.abs(ref)))


def run_case(args, case, rng):
    """Rows of the cost and iteration tables, and the fastest exact evaluation."""
    serial_t, exact_t, exact = [], [], None
    for _ in range(args.repeats):  # each timing builds a fresh app (and solver)
        wall, _, serial = clock(lambda: case.serial())
        serial_t.append(wall)
        wall, _, (result, app) = clock(lambda: case.exact(args))
        if not exact_t or wall < min(exact_t):
            exact = result
        exact_t.append(wall)
    exact_err = grad_error(app.gradient(), serial.gradient())
    data = copy.deepcopy(case.data)  # one-shot: warm, after a perturbation each time
    app = case.app(data)
    gs = case.solver(args, app, oneshot=(2, 2))
    gs.evaluate()
    oneshot_t = []
    for _ in range(args.repeats):
        data.perturb(rng)
        wall, _, oneshot = clock(gs.evaluate)
        oneshot_t.append(wall)
    serial_gradient(ref := case.app(data), case.tstop, case.ntime)
    (s_min, s_med), (e_min, e_med), (o_min, o_med) = (
        min_median(serial_t), min_median(exact_t), min_median(oneshot_t))
    cost = [case.name, case.ntime, seconds(s_min), seconds(s_med), seconds(e_min),
            ratio(e_min, s_min, 1), ratio(e_med, s_med, 1), f"{exact_err:.1e}",
            seconds(o_min), ratio(o_min, s_min, 1), ratio(o_med, s_med, 1),
            f"{grad_error(app.gradient(), ref.gradient()):.1e}"]
    p, a = exact.primal, exact.adjoint
    iters = [case.name, case.ntime, p.levels, p.iterations, a.iterations] + [
        f"{r.residuals[-1]:.1e}" if r.residuals else "-" for r in (p, a)] + [
        f"{r.counts['step'] / case.ntime:.1f}" for r in (p, a)] + [
        f"{oneshot.primal.iterations}/{oneshot.adjoint.iterations}"]
    return cost, iters, exact


def memory_row(args, case) -> list:
    """Traced bytes of the trajectory and of the primal, then the adjoint solve."""
    app = case.app()
    gs = case.solver(args, app)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        primal = gs.primal_core.solve()
        primal_kept = tracemalloc.get_traced_memory()[0] - before
        w_final = app.clone(app.terminal_gradient(primal.final))
        if callable(getattr(app, "running_gradient", None)):
            app.sum(1.0, app.running_gradient(primal.final, case.tstop, _Status()), 1.0, w_final)
        gs.adjoint_core.set_initial_condition(w_final)
        del w_final
        peak_primal = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        before_adjoint = tracemalloc.get_traced_memory()[0]
        gs.adjoint_core.solve()
        after_adjoint, adjoint_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    t = sum(sys.getsizeof(primal.solution(index=i)) for i in range(case.ntime + 1))
    return [case.name, case.ntime, mib(t), ratio(primal_kept, t, 1),
            mib(adjoint_peak - before_adjoint), f"{(adjoint_peak - before_adjoint) / t:.2f}x",
            f"{(after_adjoint - before_adjoint) / t:.2f}x",
            f"{(max(peak_primal, adjoint_peak) - before) / t:.2f}x"]


def user_call_seconds(case, repeats: int) -> tuple:
    """Seconds per call of app.step alone and of app.step_adjoint alone, each in a plain
    loop over the N fine steps along the true trajectory and adjoint (min over repeats)."""
    app = case.app()
    times, st = setup(app, case.tstop, case.ntime)
    traj = forward(app, times, st, app.init(0.0))  # warm-up (LU factors) and the states
    step, step_adjoint, N = app.step, app.step_adjoint, case.ntime
    fwd, bwd = [], []
    for _ in range(repeats):
        u = app.clone(traj[0])
        gc.collect()
        start = time.perf_counter()
        for n in range(N):
            st.fine_index = n
            r = step(u, times[n], times[n + 1], st)
            u = u if r is None else r
        fwd.append(time.perf_counter() - start)
        w = app.clone(app.terminal_gradient(traj[-1]))
        start = time.perf_counter()
        for n in range(N - 1, -1, -1):
            st.fine_index = n
            r = step_adjoint(w, traj[n], times[n], times[n + 1], st)
            w = w if r is None else r
        bwd.append(time.perf_counter() - start)
    return min(fwd) / N, min(bwd) / N


def breakdown_rows(args, case, result) -> list:
    """Where the time of an exact evaluation (a Gradient) goes, from braidpy's timers."""
    rows = []
    for label, res, user in zip(("primal", "adjoint"), (result.primal, result.adjoint),
                                user_call_seconds(case, args.repeats)):
        tm, calls = res.timings, res.counts["step"]
        inside = sum(v for k, v in tm.items() if k != "total")
        rows.append([case.name, case.ntime, label, seconds(tm["total"]),
                     f"{calls / case.ntime:.1f}", microseconds(tm["step"] / calls),
                     microseconds(user), microseconds(tm["step"] / calls - user),
                     seconds(calls * user), seconds(tm["clone"] + tm["sum"] + tm["norm"]),
                     seconds(tm["access"]), seconds(tm["total"] - inside)])
    return rows


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    p.add_argument("--nx", type=int, default=200, help="heat: interior spatial points")
    p.add_argument("--sigma", type=float, default=0.5, help="ResNet: per-step weight noise")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--rel-tol", type=float, default=1e-8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smoke run: ntime 64 128, nx 50, "
                   "1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.ntime, args.nx, args.repeats = [64, 128], 50, 1
    rng = np.random.default_rng(31337)
    cases = [Case(f"ResNet (width {WIDTH})", n, ResNetWeights(n, WIDTH, 1, args.sigma, 20240611),
                  ResNet, RESNET_TSTOP) for n in args.ntime]
    cases += [Case(f"heat control (nx {args.nx})", n, HeatControlData(n, args.nx),
                   HeatControl, HEAT_TSTOP) for n in args.ntime]
    tables = [[], [], [], []]
    for case in cases:
        cost, iters, exact = run_case(args, case, rng)
        tables[0].append(cost)
        tables[1].append(iters)
        tables[2].append(memory_row(args, case))
        if case.ntime == max(args.ntime):
            tables[3] += breakdown_rows(args, case, exact)
    print_table(["problem", "N", "serial min", "serial med", "exact min", "exact/serial min",
                 "exact/serial med", "grad err", "1-shot min", "1-shot/serial min",
                 "1-shot/serial med", "1-shot err"], tables[0],
                title=f"One gradient: MGRIT (1 process) vs serial forward + backward sweep; "
                      f"cfactor {args.cfactor}, FCF, rel_tol {args.rel_tol:g}; "
                      f"one-shot (2, 2) warm; {args.repeats} repeats")
    print_table(["problem", "N", "levels", "primal iters", "adjoint iters", "primal r",
                 "adjoint r", "primal steps/N", "adjoint steps/N", "1-shot iters"], tables[1],
                title="Iterations of the exact evaluation (cold start) vs N; steps/N = step "
                      "callback calls per fine step")
    print_table(["problem", "N", "trajectory", "primal kept", "adjoint peak", "adjoint peak/traj",
                 "adjoint kept/traj", "whole peak/traj"], tables[2],
                title="Memory (tracemalloc), as multiples of the stored primal trajectory")
    print_table(["problem", "N", "solve", "wall", "steps/N", "step callback", "user alone",
                 "difference", "user total", "clone+sum+norm", "access", "in core"], tables[3],
                title="Where the time goes: the fastest exact evaluation at the largest N; "
                      "per step call: the step callback's time (braidpy's timers; adjoint: "
                      "braidpy's wrapper around step_adjoint), the user's step or step_adjoint "
                      "alone (a plain loop), and their difference; user total = step calls x "
                      "user alone; in core = wall - all callback time")


if __name__ == "__main__":
    main()
