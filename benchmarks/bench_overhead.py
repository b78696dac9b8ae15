"""How much time does braidpy's core spend outside user callbacks per step call on a scalar
ODE (goal <= 1 us; core share over the plain-Python floor <= 0.2 us), and what does MGRIT
on one process cost as a multiple of serial stepping (--tables serial)?

overhead: u' = -u, backward Euler, cf 4, one process. Per step call: in-core (timings),
replay (solve wall - the same callbacks from a Python loop), total (timings=False) against
the floor (app.step from a loop). serial: _problems.py's scalar ODE and 1D heat, a loop of
step calls vs braidpy.solve (FCF), each with a fresh app.

Run: python benchmarks/bench_overhead.py [--ntime N] [--repeats R] [--quick]
     [--tables overhead serial]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import Counter
from itertools import repeat
from pathlib import Path

import numpy as np
from _harness import clock, microseconds, min_median, print_table, seconds
from _problems import DAHLQUIST_TSTART as T0
from _problems import DAHLQUIST_TSTOP as T1
from _problems import HEAT_TSTART, HEAT_TSTOP, HeatOperator

import braidpy

GOAL_US, CORE_SHARE_GOAL_US = 1.0, 0.2
CALLBACKS = ("init", "step", "clone", "sum", "norm", "access", "bufpack", "bufunpack")


class Dahlquist(braidpy.App):
    """u' = -u, backward Euler, in place; u(tstart) = 1."""

    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)


class Heat(braidpy.App):
    """1D heat, implicit Euler through _problems.HeatOperator."""

    def __init__(self, op: HeatOperator):
        self.op = op

    def init(self, t):
        return self.op.initial() if t == self.tstart else np.zeros(self.op.nx)

    def step(self, u, t0, t1, status):
        u[:] = self.op.solve(u, t1 - t0)


class Recording(Dahlquist):
    """Records the (a, b, x is y) pattern of sum calls and the last Status of step."""

    def __init__(self):
        self.sum_pattern, self.status = Counter(), None

    def sum(self, a, x, b, y):
        self.sum_pattern[(a, b, x is y)] += 1
        super().sum(a, x, b, y)

    def step(self, u, t0, t1, status):
        self.status = status
        super().step(u, t0, t1, status)


def solve(args, app, timings: bool):
    """(wall seconds around braidpy.solve, Result)."""
    wall, _, r = clock(lambda: braidpy.solve(app, T0, T1, args.ntime, timings=timings,
                                             max_levels=args.max_levels,
                                             cfactor=args.cfactor, abs_tol=args.tol))
    return wall, r


def loop(args, counts, sum_pattern=None, status=None) -> float:
    """Seconds of a solve's callback calls from a Python loop (no sum_pattern: the floor)."""
    app = Dahlquist()
    app.tstart, app.tstop, app.ntime = T0, T1, args.ntime
    t0, t1 = T0, T0 + (T1 - T0) / args.ntime
    init, step, clone, vsum, norm, access = (
        app.init, app.step, app.clone, app.sum, app.norm, app.access)
    u, x, y = init(t0), init(t1), init(t1)
    gc.collect()
    start = time.perf_counter()
    if sum_pattern is None:
        for _ in repeat(None, counts["step"]):
            step(u, t0, t1, status)
        return time.perf_counter() - start
    init(t0)
    for _ in repeat(None, counts["init"] - 1):
        init(t1)
    for _ in repeat(None, counts["step"]):
        step(u, t0, t1, None)
    for _ in repeat(None, counts["clone"]):
        clone(u)
    for (a, b, same), n in sum_pattern.items():
        target = x if same else y
        for _ in repeat(None, n):
            vsum(a, x, b, target)
    for _ in repeat(None, counts["norm"]):
        norm(u)
    for _ in repeat(None, counts["access"]):
        access(u, None)
    return time.perf_counter() - start


def measure(args, counts, sum_pattern, status) -> dict:
    """One repeat: a timings=True solve, a timings=False solve, the replay, the floor."""
    wall_t, timed = solve(args, Dahlquist(), timings=True)
    wall_u, untimed = solve(args, Dahlquist(), timings=False)
    inside = sum(timed.timings[name] for name in CALLBACKS)
    return {"wall_timed": wall_t, "total_timed": timed.timings["total"],
            "callbacks_timed": inside, "wall_untimed": wall_u,
            "in_core": (timed.timings["total"] - inside) / timed.counts["step"],
            "replay": loop(args, counts, sum_pattern), "timings": timed.timings,
            "floor": loop(args, counts, status=status),
            "counts_equal": timed.counts == counts == untimed.counts}


def overhead(args) -> None:
    rec = Recording()
    core = braidpy.Core(rec, T0, T1, 4, max_levels=1)
    core.solve()  # rec.status: a live Status while core lives, for the floor
    status, rec.sum_pattern = rec.status, Counter()
    _, ref = solve(args, rec, timings=False)
    pattern, steps = rec.sum_pattern, ref.counts["step"]
    print(f"braidpy from {Path(braidpy.__file__).parent}")
    print(f"braidpy scalar ODE: ntime {args.ntime}, cfactor {args.cfactor}, max_levels "
          f"{args.max_levels} -> {ref.levels} levels, {ref.iterations} iterations, "
          f"{steps} step calls ({steps / args.ntime:.2f} per fine step)\n")
    runs = [measure(args, ref.counts, pattern, status) for _ in range(args.repeats)]
    if not all(r["counts_equal"] for r in runs):
        print("warning: callback counts differ between solves\n")
    tm = sorted(runs, key=lambda r: r["total_timed"])[len(runs) // 2]["timings"]
    print_table(["callback", "calls", "per iteration", "per fine step", "time inside",
                 "per call"],
                [[k, n, f"{n / ref.iterations:.1f}", f"{n / len(ref.times[1:]):.3f}",
                  seconds(tm[k]), microseconds(tm[k] / n)]
                 for k in CALLBACKS if (n := ref.counts[k])],
                title=f"Callback calls ({ref.iterations} iterations; time inside from the "
                      f"median timings=True run)")
    print("sum calls by (a, b): " + ", ".join(
        f"({a:g}, {b:g}{', x is y' if same else ''}): {n}"
        for (a, b, same), n in sorted(pattern.items())) + "\n")
    st = {k: min_median(r[k] for r in runs) for k in runs[0] if k not in (
        "timings", "counts_equal")}
    rows = [[label] + [fmt(v) for v in st[key]] for label, key, fmt in (
        ("solve wall, timings=True (around braidpy.solve)", "wall_timed", seconds),
        ("Result.timings['total'], timings=True", "total_timed", seconds),
        ("time inside callbacks, timings=True", "callbacks_timed", seconds),
        ("solve wall, timings=False", "wall_untimed", seconds),
        ("replay: same calls from a Python loop", "replay", seconds),
        ("core overhead per step, in-core timers", "in_core", microseconds))]
    rows += [[f"(solve wall - replay) / steps, timings={flag}"]
             + [microseconds((w - r) / steps) for w, r in zip(st[key], st["replay"])]
             for flag, key in (("False", "wall_untimed"), ("True", "wall_timed"))]
    print_table(["quantity", "min", "median"], rows,
                title=f"Core overhead ({len(runs)} repeats; replay rows: min - min and "
                      f"median - median; goal <= {GOAL_US:g} us per step)")
    lo, med = st["in_core"]
    print(f"goal (median in-core overhead <= {GOAL_US:g} us per step): "
          f"{'met' if med * 1e6 <= GOAL_US else 'MISSED'} "
          f"(min {lo * 1e6:.3f} us, median {med * 1e6:.3f} us)\n")
    total, floor = (min_median(r[k] / steps for r in runs) for k in ("wall_untimed", "floor"))
    share = [t - f for t, f in zip(total, floor)]
    print_table(["per step call", "min", "median"],
                [[label] + [microseconds(v) for v in vals] for label, vals in (
                    ("total: solve wall / step calls (timings=False)", total),
                    ("floor: the same step from a Python loop", floor),
                    ("core share: total - floor", share))],
                title=f"Per step call ({len(runs)} repeats; core share: min - min and median - "
                      f"median; goal <= {CORE_SHARE_GOAL_US:g} us)")
    print(f"goal (median core share <= {CORE_SHARE_GOAL_US:g} us per step call): "
          f"{'met' if share[1] * 1e6 <= CORE_SHARE_GOAL_US else 'MISSED'}")
    del core


def serial_table(args) -> None:
    """MGRIT (1 process) vs serial time stepping, each with a fresh app."""
    dt = (HEAT_TSTOP - HEAT_TSTART) / args.ntime_heat
    cases = [("scalar ODE", Dahlquist, T0, T1, args.ntime, args.tol),
             (f"heat 1D (nx {args.nx})", lambda: Heat(HeatOperator(args.nx, dt)),
              HEAT_TSTART, HEAT_TSTOP, args.ntime_heat, args.tol_heat)]
    rows = []
    for name, make_app, tstart, tstop, ntime, tol in cases:
        def serial():
            app = make_app()
            app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
            grid = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
            u, step = app.init(tstart), app.step
            for i in range(ntime):
                step(u, grid[i], grid[i + 1], None)

        def mgrit():
            return braidpy.solve(make_app(), tstart, tstop, ntime, max_levels=args.max_levels,
                                 cfactor=args.cfactor, nrelax=1, abs_tol=tol, access_level=0)

        s_t, m_t = zip(*((clock(serial)[0], clock(mgrit)) for _ in range(args.repeats)))
        result = m_t[-1][2]
        (s_min, s_med), (m_min, m_med) = min_median(s_t), min_median(t[0] for t in m_t)
        rows.append([name, ntime] + [seconds(v) for v in (s_min, s_med, m_min, m_med)]
                    + [f"{m_min / s_min:.1f}x", f"{m_med / s_med:.1f}x", result.iterations,
                       result.levels, f"{result.counts['step'] / ntime:.1f}"])
    print_table(["problem", "ntime", "serial min", "serial med", "MGRIT min", "MGRIT med",
                 "ratio min", "ratio med", "iterations", "levels", "step calls per fine step"],
                rows, title=f"braidpy MGRIT (1 process) vs serial time stepping; cfactor "
                            f"{args.cfactor}, FCF, {args.repeats} repeats; ratio = MGRIT / serial")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, default=2**14, help="fine time steps (default 2**14)")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--max-levels", type=int, default=30)
    p.add_argument("--tol", type=float, default=1e-10, help="abs_tol")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tables", nargs="+", choices=("overhead", "serial"), default=["overhead"])
    p.add_argument("--ntime-heat", type=int, default=1024, help="serial table: heat's steps")
    p.add_argument("--nx", type=int, default=1000, help="serial table: heat's interior points")
    p.add_argument("--tol-heat", type=float, default=1e-9, help="serial table: heat's abs_tol")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: ntime 2**10 (heat 64, nx 100), 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.ntime, args.repeats, args.ntime_heat, args.nx = 2**10, 1, 64, 100
    if "serial" in args.tables:
        serial_table(args)
    if "overhead" in args.tables:
        overhead(args)


if __name__ == "__main__":
    main()
