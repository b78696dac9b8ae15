"""What does MGRIT cost, on one process, as a multiple of plain serial time stepping?

The scalar ODE u' = -u (backward Euler, 1-element arrays, ntime 2**14) and 1D heat
(implicit Euler, cached splu per dt, nx 1000, ntime 1024) of _problems.py. Serial: ntime
app.step calls in a loop. MGRIT: braidpy.solve, max_levels 30, cf 4, FCF, skip,
access_level 0, abs_tol 1e-10 (ODE) / 1e-9 (heat). Both include building the app. Min and
median over repeats and their ratios; "step calls per fine step" is MGRIT's work ratio.

Run: python benchmarks/bench_vs_serial.py [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import time

from _apps_braidpy import Dahlquist, Heat
from _problems import DAHLQUIST_TSTART, DAHLQUIST_TSTOP, HEAT_TSTART, HEAT_TSTOP, HeatOperator
from _harness import min_median, print_table, seconds

import braidpy


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime-ode", type=int, default=2**14)
    p.add_argument("--ntime-heat", type=int, default=1024)
    p.add_argument("--nx", type=int, default=1000, help="heat: interior spatial points")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--max-levels", type=int, default=30)
    p.add_argument("--tol-ode", type=float, default=1e-10)
    p.add_argument("--tol-heat", type=float, default=1e-9)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: ntime 2**10 (ODE) / 64 (heat), nx 100, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.ntime_ode, args.ntime_heat, args.nx, args.repeats = 2**10, 64, 100, 1
    return args


def cases(args):
    """(name, app factory, tstart, tstop, ntime, abs_tol) per problem."""
    heat_dt = (HEAT_TSTOP - HEAT_TSTART) / args.ntime_heat
    return [
        ("scalar ODE", Dahlquist, DAHLQUIST_TSTART, DAHLQUIST_TSTOP, args.ntime_ode,
         args.tol_ode),
        (f"heat 1D (nx {args.nx})", lambda: Heat(HeatOperator(args.nx, heat_dt)), HEAT_TSTART,
         HEAT_TSTOP, args.ntime_heat, args.tol_heat),
    ]


def serial(make_app, tstart, tstop, ntime) -> float:
    """Seconds for a fresh app and ntime app.step calls in a Python loop."""
    gc.collect()
    start = time.perf_counter()
    app = make_app()
    app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
    times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
    u = app.init(tstart)
    step = app.step
    for i in range(ntime):
        step(u, times[i], times[i + 1], None)
    return time.perf_counter() - start


def mgrit(args, make_app, tstart, tstop, ntime, tol):
    """(seconds, Result) for a fresh app and one braidpy solve."""
    gc.collect()
    start = time.perf_counter()
    result = braidpy.solve(make_app(), tstart, tstop, ntime, max_levels=args.max_levels,
                           cfactor=args.cfactor, nrelax=1, abs_tol=tol, access_level=0)
    return time.perf_counter() - start, result


def run_case(args, case) -> list:
    name, make_app, tstart, tstop, ntime, tol = case
    serial_times, mgrit_times, result = [], [], None
    for _ in range(args.repeats):
        serial_times.append(serial(make_app, tstart, tstop, ntime))
        elapsed, result = mgrit(args, make_app, tstart, tstop, ntime, tol)
        mgrit_times.append(elapsed)
    (s_min, s_med), (m_min, m_med) = min_median(serial_times), min_median(mgrit_times)
    return [name, ntime, seconds(s_min), seconds(s_med), seconds(m_min), seconds(m_med),
            f"{m_min / s_min:.1f}x", f"{m_med / s_med:.1f}x", result.iterations, result.levels,
            f"{result.counts['step'] / ntime:.1f}"]


def main(argv=None) -> None:
    args = parse_args(argv)
    rows = [run_case(args, case) for case in cases(args)]
    print_table(["problem", "ntime", "serial min", "serial med", "MGRIT min", "MGRIT med",
                 "ratio min", "ratio med", "iterations", "levels", "step calls per fine step"],
                rows, title=f"braidpy MGRIT (1 process) vs serial time stepping; cfactor "
                            f"{args.cfactor}, FCF, {args.repeats} repeats; ratio = MGRIT / serial")


if __name__ == "__main__":
    main()
