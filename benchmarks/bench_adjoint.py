"""What does one adjoint-MGRIT gradient cost against serial backpropagation, and does it
stay depth-independent and within 1.5x the trajectory's memory? (braidpy.adjoint, one process)

Apps (defined here): a width-8 "ResNet" u <- u + h tanh(K_n u + b_n) on [0, 2] with its
own random weights per step (J = |u_N - y|^2 / 2; 72 gradient entries per step), and the
1D heat equation with a control c_n per step (implicit Euler, cached splu per dt, a
running term 1e-3 sum |u_i|^2). Both store dJ/dtheta_n into preallocated arrays.

Tables (min and median over --repeats; ratios of mins and of medians):
  cost        serial (forward loop keeping every state + backward loop over the same
              callbacks) vs exact GradientSolver.evaluate() (cf 4, FCF, rel_tol 1e-8,
              cold) vs one-shot oneshot=(2, 2) (warm, after a 1e-3 parameter
              perturbation), N = 256 ... 4096; "grad err" = max|g - g_serial| / max|g_serial|;
              each timing builds a fresh app and solver;
  iterations  primal and adjoint Result.iterations vs N (must not grow);
  memory      tracemalloc over primal_core.solve() then adjoint_core.solve():
              trajectory (getsizeof of the N+1 states), primal kept, adjoint peak,
              adjoint kept, whole peak, as multiples of the trajectory (goal: adjoint
              peak < 1.5x);
  breakdown   the fastest exact evaluation at the largest N: per step call braidpy's
              callback time (Result.timings) vs the user's step / step_adjoint alone
              in a plain loop, the difference, and clone/sum/norm as Python callbacks.

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
from _apps_adjoint import (HEAT_TSTOP, RESNET_TSTOP, WIDTH, HeatControl, HeatControlData,
                           ResNet, ResNetWeights, _Status, serial_gradient)
from _harness import microseconds, min_median, print_table, ratio, seconds

from braidpy.adjoint import GradientSolver


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
            ratio(e_min, s_min, 1), ratio(e_med, s_med, 1),
            f"{grad_error(exact_grad, serial_grad):.1e}", seconds(o_min), ratio(o_min, s_min, 1),
            ratio(o_med, s_med, 1), f"{oneshot_err:.1e}"]
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
        mem_rows.append([case.name, case.ntime, mib(t), ratio(m["primal_kept"], t, 1),
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
