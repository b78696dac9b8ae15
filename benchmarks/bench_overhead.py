"""How much time does braidpy's core spend outside user callbacks per step call on a scalar
ODE (goal <= 1 us; core share over the plain-Python floor <= 0.2 us), and what does MGRIT
cost on one process as a multiple of plain serial time stepping (--tables serial)?

Problem: u' = -u on [0, 5], backward Euler on 1-element arrays, ntime 2**14, max_levels
30, cf 4, abs_tol 1e-10, one process. App's default clone/sum/norm run in C++ here
(csrc/bindings/array_fast.cpp), so they count as core time and the replay is then slower
than the solve (only the in-core estimate is meaningful). Per step call:
  1. in-core: (timings['total'] - seconds inside callbacks) / step calls (timings=True);
  2. replay: (solve wall time - the same app calls replayed from a Python loop) / step calls;
  3. total = timings=False solve wall / step calls; floor = app.step from a plain loop
     with the same argument types; core share = total - floor.
Each repeat runs all four; min and median (the replay subtracts min from min, median from
median). Callback counts per solve, per iteration and per fine step.

--tables serial: the scalar ODE (ntime --ntime) and 1D heat (implicit Euler, cached splu
per dt, --nx 1000, --ntime-heat 1024, abs_tol --tol-heat 1e-9) of _problems.py. Serial:
a fresh app and ntime app.step calls in a loop. MGRIT: a fresh app and braidpy.solve,
FCF, skip, access_level 0. Min and median over repeats and their ratios; "step calls per
fine step" is MGRIT's work ratio.

Run: python benchmarks/bench_overhead.py [--ntime N] [--repeats R] [--quick]
     [--tables overhead serial]
(PYTHONPATH chooses the braidpy build, e.g. a baseline's, to compare side by side.)
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import Counter
from itertools import repeat
from pathlib import Path

from _apps_braidpy import Dahlquist
from _apps_braidpy import Heat
from _problems import DAHLQUIST_TSTART, DAHLQUIST_TSTOP, HEAT_TSTART, HEAT_TSTOP, HeatOperator
from _harness import microseconds, min_median, print_table, seconds

import braidpy

GOAL_US = 1.0
CORE_SHARE_GOAL_US = 0.2
CALLBACKS = ("init", "step", "clone", "sum", "norm", "access", "bufpack", "bufunpack")


class RecordingDahlquist(Dahlquist):
    """Dahlquist that records the (a, b, x is y) pattern of its sum calls."""

    def __init__(self):
        self.sum_pattern = Counter()

    def sum(self, a, x, b, y):
        self.sum_pattern[(a, b, x is y)] += 1
        super().sum(a, x, b, y)


def parse_args(argv=None) -> argparse.Namespace:
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
    return args


def solve(args, app, timings: bool):
    """(wall seconds around braidpy.solve, Result)."""
    gc.collect()
    start = time.perf_counter()
    result = braidpy.solve(app, DAHLQUIST_TSTART, DAHLQUIST_TSTOP, args.ntime,
                           max_levels=args.max_levels, cfactor=args.cfactor,
                           abs_tol=args.tol, timings=timings)
    return time.perf_counter() - start, result


def in_core_overhead(result) -> float:
    """Seconds per step call outside callbacks, from the in-core timers."""
    inside = sum(result.timings[name] for name in CALLBACKS)
    return (result.timings["total"] - inside) / result.counts["step"]


def replay(args, counts, sum_pattern) -> float:
    """Seconds for a Python loop making the solve's callback calls on a fresh app."""
    app = Dahlquist()
    app.tstart, app.tstop, app.ntime = DAHLQUIST_TSTART, DAHLQUIST_TSTOP, args.ntime
    t0, t1 = app.tstart, app.tstart + (app.tstop - app.tstart) / args.ntime
    init, step, clone, vsum, norm, access = (
        app.init, app.step, app.clone, app.sum, app.norm, app.access)
    u, x, y, status = init(t0), init(t1), init(t1), None
    gc.collect()
    start = time.perf_counter()
    init(t0)
    for _ in repeat(None, counts["init"] - 1):
        init(t1)
    for _ in repeat(None, counts["step"]):
        step(u, t0, t1, status)
    for _ in repeat(None, counts["clone"]):
        clone(u)
    for (a, b, same), n in sum_pattern.items():
        target = x if same else y
        for _ in repeat(None, n):
            vsum(a, x, b, target)
    for _ in repeat(None, counts["norm"]):
        norm(u)
    for _ in repeat(None, counts["access"]):
        access(u, status)
    return time.perf_counter() - start


class StatusKeeper(Dahlquist):
    """Dahlquist that keeps the Status object its solver hands to step."""

    status = None

    def step(self, u, t0, t1, status):
        self.status = status
        super().step(u, t0, t1, status)


def step_floor(args, steps: int) -> float:
    """Seconds for `steps` calls of Dahlquist.step from a plain Python loop, with
    the solve's argument types: a 1-element array, two floats, a live Status."""
    keeper = StatusKeeper()
    core = braidpy.Core(keeper, DAHLQUIST_TSTART, DAHLQUIST_TSTOP, 4, max_levels=1)
    core.solve()  # the status stays valid while core lives
    app = Dahlquist()
    app.tstart, app.tstop, app.ntime = DAHLQUIST_TSTART, DAHLQUIST_TSTOP, args.ntime
    step, u, status = app.step, app.init(app.tstart), keeper.status
    t0, t1 = app.tstart, app.tstart + (app.tstop - app.tstart) / args.ntime
    gc.collect()
    start = time.perf_counter()
    for _ in repeat(None, steps):
        step(u, t0, t1, status)
    elapsed = time.perf_counter() - start
    del core
    return elapsed


def record(args):
    """Result and sum (a, b) pattern of one solve with the recording app."""
    app = RecordingDahlquist()
    _, result = solve(args, app, timings=False)
    return result, app.sum_pattern


def measure(args, counts, sum_pattern) -> dict:
    """One repeat: a timings=True solve, a timings=False solve, the replay, the floor."""
    wall_t, timed = solve(args, Dahlquist(), timings=True)
    wall_u, untimed = solve(args, Dahlquist(), timings=False)
    return {
        "wall_timed": wall_t, "total_timed": timed.timings["total"],
        "callbacks_timed": sum(timed.timings[name] for name in CALLBACKS),
        "in_core": in_core_overhead(timed), "wall_untimed": wall_u,
        "replay": replay(args, counts, sum_pattern), "timings": timed.timings,
        "floor": step_floor(args, counts["step"]),
        "counts_equal": timed.counts == counts == untimed.counts,
    }


def print_counts(result, timings) -> None:
    rows = []
    for name in CALLBACKS:
        n = result.counts[name]
        if n == 0:
            continue
        rows.append([name, n, f"{n / result.iterations:.1f}", f"{n / len(result.times[1:]):.3f}",
                     seconds(timings[name]), microseconds(timings[name] / n)])
    print_table(["callback", "calls", "per iteration", "per fine step", "time inside",
                 "per call"], rows,
                title=f"Callback calls ({result.iterations} iterations; time inside from the "
                      f"median timings=True run)")


def print_overhead(runs, steps: int) -> None:
    """Measured quantities, then the overhead estimates, each as min and median."""
    stats = {key: min_median(r[key] for r in runs)
             for key in ("wall_timed", "total_timed", "callbacks_timed", "wall_untimed",
                         "replay", "in_core")}

    def row(label, key, fmt):
        return [label] + [fmt(v) for v in stats[key]]

    def replay_row(label, wall_key):
        return [label] + [microseconds((w - r) / steps)
                          for w, r in zip(stats[wall_key], stats["replay"])]

    rows = [
        row("solve wall, timings=True (around braidpy.solve)", "wall_timed", seconds),
        row("Result.timings['total'], timings=True", "total_timed", seconds),
        row("time inside callbacks, timings=True", "callbacks_timed", seconds),
        row("solve wall, timings=False", "wall_untimed", seconds),
        row("replay: same calls from a Python loop", "replay", seconds),
        row("core overhead per step, in-core timers", "in_core", microseconds),
        replay_row("(solve wall - replay) / steps, timings=False", "wall_untimed"),
        replay_row("(solve wall - replay) / steps, timings=True", "wall_timed"),
    ]
    print_table(["quantity", "min", "median"], rows,
                title=f"Core overhead ({len(runs)} repeats; replay rows: min - min and "
                      f"median - median; goal <= {GOAL_US:g} us per step)")
    lo, med = stats["in_core"]
    verdict = "met" if med * 1e6 <= GOAL_US else "MISSED"
    print(f"goal (median in-core overhead <= {GOAL_US:g} us per step): {verdict} "
          f"(min {lo * 1e6:.3f} us, median {med * 1e6:.3f} us)")


def print_per_step(runs, steps: int) -> None:
    """Total per step call beside the plain-Python floor; core share = the difference."""
    total = min_median(r["wall_untimed"] / steps for r in runs)
    floor = min_median(r["floor"] / steps for r in runs)
    share = [t - f for t, f in zip(total, floor)]
    rows = [["total: solve wall / step calls (timings=False)"] + [microseconds(v) for v in total],
            ["floor: the same step from a Python loop"] + [microseconds(v) for v in floor],
            ["core share: total - floor"] + [microseconds(v) for v in share]]
    print_table(["per step call", "min", "median"], rows,
                title=f"Per step call ({len(runs)} repeats; core share: min - min and median - "
                      f"median; goal <= {CORE_SHARE_GOAL_US:g} us)")
    verdict = "met" if share[1] * 1e6 <= CORE_SHARE_GOAL_US else "MISSED"
    print(f"goal (median core share <= {CORE_SHARE_GOAL_US:g} us per step call): {verdict}")


def serial_table(args) -> None:
    """MGRIT (1 process) vs serial time stepping, each with a fresh app (see --tables)."""
    heat_dt = (HEAT_TSTOP - HEAT_TSTART) / args.ntime_heat
    cases = [("scalar ODE", Dahlquist, DAHLQUIST_TSTART, DAHLQUIST_TSTOP, args.ntime,
              args.tol),
             (f"heat 1D (nx {args.nx})", lambda: Heat(HeatOperator(args.nx, heat_dt)),
              HEAT_TSTART, HEAT_TSTOP, args.ntime_heat, args.tol_heat)]
    rows = []
    for name, make_app, tstart, tstop, ntime, tol in cases:
        serial_times, mgrit_times = [], []
        for _ in range(args.repeats):
            gc.collect()
            start = time.perf_counter()
            app = make_app()
            app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
            times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
            u, step = app.init(tstart), app.step
            for i in range(ntime):
                step(u, times[i], times[i + 1], None)
            serial_times.append(time.perf_counter() - start)
            gc.collect()
            start = time.perf_counter()
            result = braidpy.solve(make_app(), tstart, tstop, ntime,
                                   max_levels=args.max_levels, cfactor=args.cfactor,
                                   nrelax=1, abs_tol=tol, access_level=0)
            mgrit_times.append(time.perf_counter() - start)
        (s_min, s_med), (m_min, m_med) = min_median(serial_times), min_median(mgrit_times)
        rows.append([name, ntime, seconds(s_min), seconds(s_med), seconds(m_min),
                     seconds(m_med), f"{m_min / s_min:.1f}x", f"{m_med / s_med:.1f}x",
                     result.iterations, result.levels,
                     f"{result.counts['step'] / ntime:.1f}"])
    print_table(["problem", "ntime", "serial min", "serial med", "MGRIT min", "MGRIT med",
                 "ratio min", "ratio med", "iterations", "levels", "step calls per fine step"],
                rows, title=f"braidpy MGRIT (1 process) vs serial time stepping; cfactor "
                            f"{args.cfactor}, FCF, {args.repeats} repeats; ratio = MGRIT / serial")


def main(argv=None) -> None:
    args = parse_args(argv)
    if "serial" in args.tables:
        serial_table(args)
    if "overhead" in args.tables:
        overhead(args)


def overhead(args) -> None:
    reference, sum_pattern = record(args)
    print(f"braidpy from {Path(braidpy.__file__).parent}")
    print(f"braidpy scalar ODE: ntime {args.ntime}, cfactor {args.cfactor}, max_levels "
          f"{args.max_levels} -> {reference.levels} levels, {reference.iterations} iterations, "
          f"{reference.counts['step']} step calls ({reference.counts['step'] / args.ntime:.2f} "
          f"per fine step)\n")
    runs = [measure(args, reference.counts, sum_pattern) for _ in range(args.repeats)]
    if not all(r["counts_equal"] for r in runs):
        print("warning: callback counts differ between solves\n")
    median_run = sorted(runs, key=lambda r: r["total_timed"])[len(runs) // 2]
    print_counts(reference, median_run["timings"])
    print("sum calls by (a, b): " + ", ".join(
        f"({a:g}, {b:g}{', x is y' if same else ''}): {n}"
        for (a, b, same), n in sorted(sum_pattern.items())) + "\n")
    print_overhead(runs, reference.counts["step"])
    print()
    print_per_step(runs, reference.counts["step"])


if __name__ == "__main__":
    main()
