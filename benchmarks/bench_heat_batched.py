"""How close does batched MGRIT on ex02's 1D heat equation come to sequential stepping at one
rank (goal <= 6x), what does the batched implicit step save per state, and does weighted
C-relaxation (crelax_weight 1.3) reach 1e-8 in fewer iterations and less time than FCF?

Problem: examples/ex02_heat1d.Heat1D (backward Euler, cached SuperLU per step size),
--ntime steps on [0, pi], --nspace points, abs_tol 1e-8 in the example's norm.
Sequential: a fresh app and ntime ``step`` calls. MGRIT: braidpy.solve, access_level 0,
"unbatched" (batch=False) or "batched" (step_stacked: up to 32 right-hand sides at once).
Tables: kernel (us per state, ``step`` row by row vs one ``step_stacked``, bitwise
agreement), solve (sequential vs unbatched vs batched for the example's settings, cf 16,
F, and its former ones, cf 4, FCF), settings (batched MGRIT for other cfactor / levels /
relaxation / skip, and App's C++ Euclidean norm), crelax (each --weights value,
Options.crelax_weight = XBraid's braid_SetCRelaxWt, on nspace 129, N 4096, [0, 4 pi],
--cfactor 4, FCF, to 1e-8: iterations, last residual, mean convergence factor, wall and
CPU time against the first weight's). Each repeat runs every variant once,
interleaved; min (median); wall and CPU-time ratios; "steps per fine step" is MGRIT's
work ratio; "max|u_N - seq|" the final state's difference.

Run: python benchmarks/bench_heat_batched.py [--repeats R] [--quick] [--ntime N] [--nspace M]
     [--tables kernel solve settings crelax] [--weights 1.0 1.3 1.5] [--cfactor 8]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from _harness import alternate, clock, print_table, ratio, seconds
from _harness import ms as _ms

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for examples/
from examples.ex02_heat1d import Heat1D  # noqa: E402

import braidpy  # noqa: E402

TSTOP = math.pi
TOL = 1e-8
# (label, options): the example's default settings and its former ones
EXAMPLE = ("cf 16, 30 levels, F", dict(cfactor=16, max_levels=30, nrelax=0))
FORMER = ("cf 4, 30 levels, FCF", dict(cfactor=4, max_levels=30, nrelax=1))
DEFAULT_NORM = "norm"  # an options key of this script: App's default norm, see mgrit()
SETTINGS = [
    FORMER,
    ("cf 4, 30 levels, F", dict(cfactor=4, max_levels=30, nrelax=0)),
    ("cf 8, 30 levels, F", dict(cfactor=8, max_levels=30, nrelax=0)),
    EXAMPLE,
    ("cf 16, 30 levels, F, C++ norm", dict(EXAMPLE[1], **{DEFAULT_NORM: True})),
    ("cf 16, 30 levels, FCF", dict(cfactor=16, max_levels=30, nrelax=1)),
    ("cf 16, 30 levels, F, no skip", dict(cfactor=16, max_levels=30, nrelax=0, skip=False)),
    ("cf 16, 2 levels, F", dict(cfactor=16, max_levels=2, nrelax=0)),
    ("cf 32, 2 levels, F", dict(cfactor=32, max_levels=2, nrelax=0)),
    ("cf 32, 2 levels, FCF", dict(cfactor=32, max_levels=2, nrelax=1)),
    ("cf 64, 2 levels, F", dict(cfactor=64, max_levels=2, nrelax=0)),
    ("cf 128, 2 levels, F", dict(cfactor=128, max_levels=2, nrelax=0)),
    ("cf 32 / 4, 3 levels, F", dict(cfactor={0: 32, 1: 4}, max_levels=3, nrelax=0)),
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntime", type=int, default=16384)
    p.add_argument("--nspace", type=int, default=1025)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64, 256, 4096],
                   help="kernel table: states per step_stacked call")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tables", nargs="+", default=["kernel", "solve", "settings"],
                   choices=["kernel", "solve", "settings", "crelax"])
    p.add_argument("--weights", type=float, nargs="+", default=[1.0, 1.3],
                   help="crelax table: the C-relaxation weights")
    p.add_argument("--cfactor", type=int, default=4, help="crelax table")
    p.add_argument("--quick", action="store_true", help="smoke run: N 1024, nspace 129, 1 repeat")
    a = p.parse_args(argv)
    if a.quick:
        a.ntime, a.nspace, a.repeats, a.rows = 1024, 129, 1, [1, 64]
    return a


class Timings:
    """Wall and CPU times of repeated runs, per variant."""

    def __init__(self):
        self.wall, self.cpu = {}, {}

    def run(self, key, fn):
        wall, cpu, out = clock(fn)
        self.wall.setdefault(key, []).append(wall)
        self.cpu.setdefault(key, []).append(cpu)
        return out

    def cells(self, key, reference):
        """[wall ms, wall ratio, CPU ratio] of key against reference."""
        return [_ms(self.wall[key], 0), ratio(self.wall[key], self.wall[reference], 1),
                ratio(self.cpu[key], self.cpu[reference], 1)]


def sequential(args):
    """The final state of ntime backward Euler steps, one step call each."""
    app = Heat1D(args.nspace)
    app.tstart, app.tstop, app.ntime = 0.0, TSTOP, args.ntime
    grid = np.linspace(0.0, TSTOP, args.ntime + 1).tolist()
    u = app.init(0.0)
    for t0, t1 in zip(grid[:-1], grid[1:]):
        app.step(u, t0, t1, None)
    return u


class _EuclideanHeat(Heat1D):
    """Heat1D with App's default (Euclidean) norm, which the core computes in C++."""

    norm = braidpy.App.norm


def mgrit(args, opts, batched):
    """braidpy.solve on a fresh app. With opts[DEFAULT_NORM] the app keeps App's norm
    and the tolerance is divided by sqrt(h): the same halting test as sqrt(h) ||r||."""
    opts = dict(opts)
    if opts.pop(DEFAULT_NORM, False):
        app = _EuclideanHeat(args.nspace)
        tol = TOL / math.sqrt(app.h)
    else:
        app, tol = Heat1D(args.nspace), TOL
    return braidpy.solve(app, 0.0, TSTOP, args.ntime, abs_tol=tol, max_iter=100,
                         access_level=0, batch=batched, **opts)


def states_per_step(args, r):
    return f"{(r.counts['step'] + r.counts['step_batch_items']) / args.ntime:.1f}"


def kernel_table(args):
    """Per state: step row by row vs one step_stacked call, m rows, one dt."""
    app = Heat1D(args.nspace)
    dt = TSTOP / args.ntime
    rng = np.random.default_rng(20261201)
    rows = []
    for m in args.rows:
        U0 = rng.standard_normal((m, args.nspace - 2))
        t0s = np.arange(m) * (4 * dt)  # m intervals' k-th steps
        t1s = t0s + dt
        calls = max(1, 4096 // m)  # about 4096 states per timing

        pairs = list(zip(t0s.tolist(), t1s.tolist()))

        def rows_one_by_one(A):
            for _ in range(calls):
                for k, (t0, t1) in enumerate(pairs):
                    app.step(A[k], t0, t1, None)

        def stacked(B):
            for _ in range(calls):
                app.step_stacked(B, t0s, t1s, None)

        one_t, many_t = [], []
        for _ in range(max(args.repeats, 5)):
            A, B = U0.copy(), U0.copy()
            one_t.append(clock(lambda A=A: rows_one_by_one(A))[0])
            many_t.append(clock(lambda B=B: stacked(B))[0])  # wall time
        o, b = min(one_t) / (calls * m), min(many_t) / (calls * m)
        rows.append([m, f"{o * 1e6:.2f}", f"{b * 1e6:.2f}", f"{o / b:.2f}x",
                     "yes" if np.array_equal(A, B) else "NO"])
    print_table(["rows m", "step us/state", "step_stacked us/state", "step / stacked",
                 "bitwise equal"], rows,
                title=f"Kernel: backward Euler on {args.nspace} points, m states one step "
                      f"each (min of {max(args.repeats, 5)})")


def solve_table(args):
    t, results = Timings(), {}
    variants = [(label, opts, batched) for label, opts in (EXAMPLE, FORMER)
                for batched in (False, True)]
    for _ in range(args.repeats):
        u_seq = t.run("sequential", lambda: sequential(args))
        for label, opts, batched in variants:
            results[label, batched] = t.run((label, batched),
                                            lambda o=opts, b=batched: mgrit(args, o, b))
    rows = [["sequential", "-", *t.cells("sequential", "sequential"), "-", "-", "1.0", "-",
             "-"]]
    for label, _, batched in variants:
        r, other = results[label, batched], results[label, not batched]
        same = (np.array_equal(r.final, other.final) and r.residuals == other.residuals
                and r.iterations == other.iterations)
        speed = ratio(t.wall[label, False], t.wall[label, True], 1) if batched else "-"
        rows.append([label, "batched" if batched else "unbatched",
                     *t.cells((label, batched), "sequential"), speed, r.iterations,
                     states_per_step(args, r), f"{np.abs(r.final - u_seq).max():.1e}",
                     "yes" if same else "NO"])
    print_table(["MGRIT settings", "steps", "wall ms", "MGRIT / sequential",
                 "same in CPU time", "unbatched / batched", "iterations",
                 "steps per fine step", "max|u_N - seq|", "batched == unbatched"], rows,
                title=f"Heat 1D, N {args.ntime}, nspace {args.nspace}, abs_tol {TOL:g}, one "
                      f"process; min (median) of {args.repeats}; ratios of mins (of medians)")


def settings_table(args):
    t, results = Timings(), {}
    for _ in range(args.repeats):
        u_seq = t.run("sequential", lambda: sequential(args))
        for label, opts in SETTINGS:
            results[label] = t.run(label, lambda o=opts: mgrit(args, o, True))
    rows = []
    for label, _ in SETTINGS:
        r = results[label]
        rows.append([label, r.levels, r.iterations, states_per_step(args, r),
                     r.counts["step_batch"], r.counts["step"], *t.cells(label, "sequential"),
                     f"{np.abs(r.final - u_seq).max():.1e}"])
    print_table(["settings (batched)", "levels", "iterations", "steps per fine step",
                 "batched calls", "single steps", "wall ms", "MGRIT / sequential",
                 "same in CPU time", "max|u_N - seq|"], rows,
                title=f"MGRIT settings, heat 1D, N {args.ntime}, nspace {args.nspace}, "
                      f"abs_tol {TOL:g}; sequential {_ms(t.wall['sequential'], 0)} ms; min "
                      f"(median) of {args.repeats}")


def crelax_table(args, nspace=129, ntime=4096, tstop=4 * math.pi):
    """Weighted C-relaxation against the first weight, the weights alternating round
    by round; CPU time is this process's (it leaves out waits for a core)."""
    results, cpu = {}, {w: [] for w in args.weights}

    def solve(w):
        def run():
            wall, used, results[w] = clock(lambda: braidpy.solve(
                Heat1D(nspace=nspace), 0.0, tstop, ntime, cfactor=args.cfactor, nrelax=1,
                crelax_weight=w, abs_tol=TOL, max_iter=100))
            cpu[w].append(used)
        return run

    timed = alternate({w: solve(w) for w in args.weights}, args.repeats)
    rows, first = [], args.weights[0]
    for w in args.weights:
        r = results[w]
        factor = (r.residuals[-1] / r.residuals[0]) ** (1 / max(1, len(r.residuals) - 1))
        rows.append([f"{w:g}", r.iterations, f"{r.residuals[-1]:.2e}", f"{factor:.3f}",
                     f"{seconds(min(timed[w]))} ({seconds(np.median(timed[w]))})",
                     ratio(timed[w], timed[first]), ratio(cpu[w], cpu[first])])
    print_table(["crelax_weight", "iterations", "last ||r||", "conv. factor",
                 "wall min (median)", f"wall / w={first:g}", f"CPU / w={first:g}"], rows,
                title=f"heat (examples/ex02_heat1d.py): nspace {nspace}, ntime {ntime}, "
                      f"tstop {tstop:g}, cfactor {args.cfactor}, FCF, tol {TOL:g}, "
                      f"{args.repeats} rounds, 1 rank")


def main(argv=None):
    args = parse_args(argv)
    tables = dict(kernel=kernel_table, solve=solve_table, settings=settings_table,
                  crelax=crelax_table)
    for name in args.tables:
        tables[name](args)


if __name__ == "__main__":
    main()
