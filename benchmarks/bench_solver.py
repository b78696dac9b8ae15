"""Does each MGRIT solver feature pay against its baseline on one process?

heat: batched MGRIT on ex02's 1D heat vs sequential stepping (<= 6x): kernel, solve,
settings tables. crelax: crelax_weight vs the first weight. problems: batched MGRIT vs
sequential on braidpy.problems' Heat1D, Heat2D, Advection1D (<= 2.5x). richardson: ex-06's
error ~100x smaller in as many iterations? delta: Delta correction on Lorenz (half the
iterations) and Kuramoto-Sivashinsky (converges where FAS stalls). spatial: ex14's spatial
coarsening, CPU s per iteration. Rounds run every variant once; min (median).

Run: python benchmarks/bench_solver.py FEATURE [--repeats R] [--quick] [options]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from _harness import clock, host_info, ms, print_host, print_table, ratio, seconds  # noqa: E402

import braidpy  # noqa: E402
from braidpy.problems import Advection1D, Heat1D, Heat2D, KuramotoSivashinskySpectral  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1]))  # for examples/
from examples.ex02_heat1d import Heat1D as Ex02Heat  # noqa: E402
from examples.ex12_lorenz_delta import LYAPUNOV_TIME, LorenzDelta  # noqa: E402
from examples.ex13_ks_delta import SpectralKSDelta  # noqa: E402
from examples.ex14_heat2d_spatial import Heat2DSpatial  # noqa: E402

TOL = 1e-8
CPP_NORM = "norm"  # a settings key of this script: App's default norm, see ex02()
EXAMPLE = ("cf 16, 30 levels, F", dict(cfactor=16, max_levels=30, nrelax=0))  # ex02's
FORMER = ("cf 4, 30 levels, FCF", dict(cfactor=4, max_levels=30, nrelax=1))  # its former
SETTINGS = [
    FORMER,
    ("cf 4, 30 levels, F", dict(cfactor=4, max_levels=30, nrelax=0)),
    ("cf 8, 30 levels, F", dict(cfactor=8, max_levels=30, nrelax=0)),
    EXAMPLE,
    ("cf 16, 30 levels, F, C++ norm", dict(cfactor=16, max_levels=30, nrelax=0, norm=True)),
    ("cf 16, 30 levels, FCF", dict(cfactor=16, max_levels=30, nrelax=1)),
    ("cf 16, 30 levels, F, no skip", dict(cfactor=16, max_levels=30, nrelax=0, skip=False)),
    ("cf 16, 2 levels, F", dict(cfactor=16, max_levels=2, nrelax=0)),
    ("cf 32, 2 levels, F", dict(cfactor=32, max_levels=2, nrelax=0)),
    ("cf 32, 2 levels, FCF", dict(cfactor=32, max_levels=2, nrelax=1)),
    ("cf 64, 2 levels, F", dict(cfactor=64, max_levels=2, nrelax=0)),
    ("cf 128, 2 levels, F", dict(cfactor=128, max_levels=2, nrelax=0)),
    ("cf 32 / 4, 3 levels, F", dict(cfactor={0: 32, 1: 4}, max_levels=3, nrelax=0)),
]


def rounds(fns, repeats):
    """({key: wall seconds}, {key: CPU seconds}, {key: last result}), the fns called in
    turn, once per round."""
    wall, cpu, out = {k: [] for k in fns}, {k: [] for k in fns}, {}
    for _ in range(repeats):
        for key, fn in fns.items():
            w, c, out[key] = clock(fn)
            wall[key].append(w)
            cpu[key].append(c)
    return wall, cpu, out


def sequential(app, times):
    """The final state of len(times) - 1 ``step`` calls on app, one after another."""
    times = [float(t) for t in times]
    app.tstart, app.tstop, app.ntime = times[0], times[-1], len(times) - 1
    u = app.init(times[0])
    for t0, t1 in zip(times[:-1], times[1:]):
        r = app.step(u, t0, t1, None)
        u = u if r is None else r
    return u


def diff(r, u):
    return f"{np.max(np.abs(np.asarray(r.final) - u)):.1e}"


# ------------------------------------------------------------------ heat (ex02), crelax


class _EuclideanHeat(Ex02Heat):
    """ex02's app with App's default (Euclidean) norm, which the core computes in C++."""

    norm = braidpy.App.norm


def ex02(args, opts, batched):
    """braidpy.solve of ex02 on a fresh app. With opts["norm"] the app keeps App's norm
    and the tolerance is divided by sqrt(h): the same halting test as sqrt(h) ||r||."""
    opts = dict(opts)
    app = (_EuclideanHeat if opts.pop(CPP_NORM, False) else Ex02Heat)(args.nspace)
    tol = TOL / math.sqrt(app.h) if isinstance(app, _EuclideanHeat) else TOL
    return braidpy.solve(app, 0.0, math.pi, args.ntime, abs_tol=tol, max_iter=100,
                         access_level=0, batch=batched, **opts)


def states_per_step(args, r):
    return f"{(r.counts['step'] + r.counts['step_batch_items']) / args.ntime:.1f}"


def heat_kernel(args):
    """Per state: step row by row vs one step_stacked call, m rows, one dt."""
    app, dt = Ex02Heat(args.nspace), math.pi / args.ntime
    rng, rows = np.random.default_rng(20261201), []
    for m in args.rows:
        U0 = rng.standard_normal((m, args.nspace - 2))
        t0s = np.arange(m) * (4 * dt)  # m intervals' k-th steps
        t1s, calls = t0s + dt, max(1, 4096 // m)  # about 4096 states per timing
        pairs = list(zip(t0s.tolist(), t1s.tolist()))

        def one_by_one(A):
            for _ in range(calls):
                for k, (t0, t1) in enumerate(pairs):
                    app.step(A[k], t0, t1, None)

        def stacked(B):
            for _ in range(calls):
                app.step_stacked(B, t0s, t1s, None)

        A, B = U0.copy(), U0.copy()
        wall, _, _ = rounds({"one": lambda: one_by_one(A), "stacked": lambda: stacked(B)},
                            max(args.repeats, 5))
        o, b = min(wall["one"]) / (calls * m), min(wall["stacked"]) / (calls * m)
        rows.append([m, f"{o * 1e6:.2f}", f"{b * 1e6:.2f}", f"{o / b:.2f}x",
                     "yes" if np.array_equal(A, B) else "NO"])
    print_table(["rows m", "step us/state", "step_stacked us/state", "step / stacked",
                 "bitwise equal"], rows,
                title=f"Kernel: backward Euler on {args.nspace} points, m states one step "
                      f"each (min of {max(args.repeats, 5)})")


def heat_solve(args):
    variants = {(label, b): opts for label, opts in (EXAMPLE, FORMER) for b in (False, True)}
    fns = heat_sequential(args)
    fns.update({k: lambda o=o, b=k[1]: ex02(args, o, b) for k, o in variants.items()})
    wall, cpu, res = rounds(fns, args.repeats)
    rows = [["sequential", "-", ms(wall["sequential"], 0), "1.0x (1.0x)", "1.0x (1.0x)",
             "-", "-", "1.0", "-", "-"]]
    for label, batched in variants:
        r, other = res[label, batched], res[label, not batched]
        same = (np.array_equal(r.final, other.final) and r.residuals == other.residuals
                and r.iterations == other.iterations)
        rows.append([label, "batched" if batched else "unbatched", ms(wall[label, batched], 0),
                     ratio(wall[label, batched], wall["sequential"], 1),
                     ratio(cpu[label, batched], cpu["sequential"], 1),
                     ratio(wall[label, False], wall[label, True], 1) if batched else "-",
                     r.iterations, states_per_step(args, r), diff(r, res["sequential"]),
                     "yes" if same else "NO"])
    print_table(["MGRIT settings", "steps", "wall ms", "MGRIT / sequential",
                 "same in CPU time", "unbatched / batched", "iterations",
                 "steps per fine step", "max|u_N - seq|", "batched == unbatched"], rows,
                title=f"Heat 1D, N {args.ntime}, nspace {args.nspace}, abs_tol {TOL:g}, one "
                      f"process; min (median) of {args.repeats}; ratios of mins (of medians)")


def heat_settings(args):
    fns = heat_sequential(args)
    fns.update({label: lambda o=opts: ex02(args, o, True) for label, opts in SETTINGS})
    wall, cpu, res = rounds(fns, args.repeats)
    rows = [[label, r.levels, r.iterations, states_per_step(args, r), r.counts["step_batch"],
             r.counts["step"], ms(wall[label], 0), ratio(wall[label], wall["sequential"], 1),
             ratio(cpu[label], cpu["sequential"], 1), diff(r, res["sequential"])]
            for label, _ in SETTINGS for r in [res[label]]]
    print_table(["settings (batched)", "levels", "iterations", "steps per fine step",
                 "batched calls", "single steps", "wall ms", "MGRIT / sequential",
                 "same in CPU time", "max|u_N - seq|"], rows,
                title=f"MGRIT settings, heat 1D, N {args.ntime}, nspace {args.nspace}, "
                      f"abs_tol {TOL:g}; sequential {ms(wall['sequential'], 0)} ms; min "
                      f"(median) of {args.repeats}")


def heat_sequential(args):
    return {"sequential": lambda: sequential(Ex02Heat(args.nspace),
                                             np.linspace(0.0, math.pi, args.ntime + 1))}


def heat(args):
    for table in args.tables:
        dict(kernel=heat_kernel, solve=heat_solve, settings=heat_settings)[table](args)


def crelax(args, nspace=129, ntime=4096, tstop=4 * math.pi):
    wall, cpu, res = rounds({w: lambda w=w: braidpy.solve(
        Ex02Heat(nspace=nspace), 0.0, tstop, ntime, cfactor=args.cfactor, nrelax=1,
        crelax_weight=w, abs_tol=TOL, max_iter=100) for w in args.weights}, args.repeats)
    first, rows = args.weights[0], []
    for w in args.weights:
        r = res[w]
        factor = (r.residuals[-1] / r.residuals[0]) ** (1 / max(1, len(r.residuals) - 1))
        rows.append([f"{w:g}", r.iterations, f"{r.residuals[-1]:.2e}", f"{factor:.3f}",
                     f"{seconds(min(wall[w]))} ({seconds(np.median(wall[w]))})",
                     ratio(wall[w], wall[first]), ratio(cpu[w], cpu[first])])
    print_table(["crelax_weight", "iterations", "last ||r||", "conv. factor",
                 "wall min (median)", f"wall / w={first:g}", f"CPU / w={first:g}"], rows,
                title=f"heat (examples/ex02_heat1d.py): nspace {nspace}, ntime {ntime}, "
                      f"tstop {tstop:g}, cfactor {args.cfactor}, FCF, tol {TOL:g}, "
                      f"{args.repeats} rounds, 1 rank")


# ------------------------------------------------------------------ problems, richardson


def problems(args):
    print_host(host_info(mpi=False))
    rows, ntime = [], args.ntime[0]
    for name, problem in (("heat 1D", Heat1D(nx=1001, ntime=ntime)),
                          ("heat 2D", Heat2D(nx=65, ny=65, ntime=ntime)),
                          ("advection 1D", Advection1D(nx=513, ntime=ntime))):
        wall, cpu, res = rounds({
            "sequential": lambda p=problem: sequential(p.app(), p.times),
            "mgrit": lambda p=problem: p.solve(cfactor=16, nrelax=1, max_levels=2,
                                               abs_tol=TOL, access_level=0)}, args.repeats)
        rows.append([name, res["mgrit"].iterations, diff(res["mgrit"], res["sequential"]),
                     ratio(wall["mgrit"], wall["sequential"]),
                     ratio(cpu["mgrit"], cpu["sequential"])])
    # CPU time as well: under a loaded machine it stays close to the work done.
    print_table(["problem", "MGRIT iterations", "max |MGRIT - sequential|",
                 "wall MGRIT / sequential", "CPU MGRIT / sequential"], rows,
                title=f"backward Euler, {ntime} steps, cfactor 16, FCF, 2 levels, "
                      f"tol 1e-8, {args.repeats} rounds")


class Ex06(braidpy.App):
    """u' = -4u - t + 1, u(0) = 1, guess 0.456, backward Euler."""

    def init(self, t):
        return np.array([1.0 if t == 0.0 else 0.456])

    def step(self, u, t0, t1, status):
        u += (t1 - t0) * (-4.0 * u + 1 - t1) / (1.0 + 4.0 * (t1 - t0))


def richardson(args):
    print_host(host_info(mpi=False))
    exact, rows = (1.0 / 16.0) * (-4.0 * 0.5 + 11.0 * math.exp(-4.0 * 0.5) + 5.0), []
    for n in args.ntime:
        wall, _, got = rounds({rich: lambda rich=rich: braidpy.solve(
            Ex06(), 0.0, 0.5, n, cfactor=2, min_coarse=8, skip=False, abs_tol=1e-10,
            richardson=rich, local_order=2) for rich in (False, True)}, args.repeats)
        errs = [abs(float(got[k].final[0]) - exact) for k in (False, True)]
        rows.append([n, f"{got[False].iterations} / {got[True].iterations}",
                     f"{errs[0]:.2e}", f"{errs[1]:.2e}", f"{errs[0] / errs[1]:.0f}x",
                     f"{ms(wall[True], 1)} ms", ratio(wall[True], wall[False])])
    print_table(["ntime", "iterations plain / rich.", "error plain", "error rich.",
                 "error ratio", "rich. wall min (median)", "wall rich. / plain"], rows,
                title=f"ex-06 (backward Euler), cfactor 2, FCF, tol 1e-10, {args.repeats} rounds")


# ------------------------------------------------------------------ delta, spatial


def delta_solve(app, tstart, tstop, ntime, rank, **opts):
    """(iterations, converged, last residual, seconds) of one solve, Delta if rank."""
    extra = dict(delta_rank=rank, lyapunov_estimate=True) if rank else {}
    wall, _, r = clock(lambda: braidpy.solve(app, tstart, tstop, ntime, **opts, **extra))
    return r.iterations, r.converged, r.residuals[-1], wall


def delta(args):
    rows, ratios = [], []
    for lt in args.lyapunov_times:
        n = int(round(lt * args.steps_per_time))
        plain, dlt = (delta_solve(LorenzDelta(), 0.0, lt * LYAPUNOV_TIME, n, k, max_levels=3,
                                  cfactor=2, nrelax=0, skip=False, abs_tol=1e-6,
                                  max_iter=args.max_iter) for k in (0, args.rank))
        ratios.append((dlt[0] / plain[0], dlt[1]))  # plain not converged: an upper bound
        rows.append([f"{lt:g}", n, f"{plain[0]}" if plain[1] else f">= {plain[0]} (not "
                     "converged)", f"{dlt[0]}" if dlt[1] else f"{dlt[0]} (not converged)",
                     f"{ratios[-1][0]:.2f}" if plain[1] else f"<= {ratios[-1][0]:.2f}",
                     f"{plain[3]:.2f} s", f"{dlt[3]:.2f} s"])
        print(*rows[-1], flush=True)
    print()
    print_table(["Lyapunov times", "steps", "iters rank 0", f"iters rank {args.rank}",
                 "ratio", "time rank 0", f"time rank {args.rank}"], rows,
                title="Lorenz, forward Euler, 3 levels, cf 2, F-relaxation, to 1e-6")
    worst = max(r for r, _ in ratios)
    met = worst <= 0.5 and all(ok for _, ok in ratios)
    print(f"largest ratio {worst:.2f} (goal <= 0.50): {'met' if met else 'NOT met'}")
    if args.ks_rank:
        p = KuramotoSivashinskySpectral(lyapunov_times=16.0, ntime=4096)
        runs = {k: delta_solve(SpectralKSDelta(p), p.tstart, p.tstop, p.ntime, k, max_levels=3,
                               cfactor=4, nrelax=1, tnorm=2, abs_tol=1e-8, max_iter=30)
                for k in (0, args.ks_rank)}
        print()
        print_table(["delta_rank", "iterations", "converged", "last residual", "time"],
                    [[k, it, ok, f"{res:.2e}", f"{sec:.1f} s"]
                     for k, (it, ok, res, sec) in runs.items()],
                    title="Kuramoto-Sivashinsky (ETDRK4, 64 modes), 4096 steps over 16 "
                          "Lyapunov times, 3 levels, cf 4, FCF, to 1e-8, at most 30")
        print(f"Kuramoto-Sivashinsky: plain FAS {'converged' if runs[0][1] else 'stalled'}, "
              f"Delta {'converged' if runs[args.ks_rank][1] else 'did not converge'}")


def spatial(args):
    ntime = args.ntime[0]
    apps = {name: Heat2DSpatial(args.nx, args.max_levels, spatial=s)
            for name, s in (("time only", False), ("space-time", True))}

    def solve(app):
        return braidpy.solve(app, 0.0, args.tstop, ntime, max_levels=args.max_levels,
                             cfactor=2, nrelax=1, abs_tol=TOL, max_iter=50, access_level=0)

    for app in apps.values():  # the factorizations, once per app (cached per mesh and dt)
        solve(app)
    wall, cpu, res = rounds({k: lambda a=a: solve(a) for k, a in apps.items()}, args.repeats)
    print_table(["coarsening", "meshes", "iterations", "CPU s", "wall s", "CPU s/iteration"],
                [[k, " > ".join(f"{app.mesh(lv)}" for lv in range(res[k].levels)),
                  res[k].iterations, f"{min(cpu[k]):.3f}", f"{min(wall[k]):.3f}",
                  f"{min(cpu[k]) / res[k].iterations:.4f}"] for k, app in apps.items()],
                title=f"2D heat (ex14), {args.nx - 1}^2 unknowns, {ntime} backward Euler steps "
                      f"to t = {args.tstop:g}, cfactor 2, FCF, {args.max_levels} levels, "
                      f"abs_tol 1e-8 (min of {args.repeats})")
    (c0, r0), (c1, r1) = ((min(cpu[k]), res[k]) for k in apps)
    q = (c1 / r1.iterations) / (c0 / r0.iterations)
    print(f"CPU time per iteration, space-time / time only: {q:.2f} ({100 * (1 - q):.0f}% "
          f"lower); iterations {r1.iterations} vs {r0.iterations}")
    print(f"max |u_N(space-time) - u_N(time only)| = {np.max(np.abs(r1.final - r0.final)):.2e}")


FEATURES = dict(heat=heat, crelax=crelax, problems=problems, richardson=richardson,
                delta=delta, spatial=spatial)
NTIME = dict(heat=[16384], problems=[256], richardson=[256, 1024, 4096], spatial=[64])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("feature", choices=FEATURES)
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    p.add_argument("--ntime", type=int, nargs="+", help="time steps (heat 16384, problems "
                   "256, richardson 256 1024 4096, spatial 64)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 repeat; heat: N 1024, "
                   "nspace 129; spatial: nx 32, N 16; richardson: N 256; problems: N 64")
    p.add_argument("--tables", nargs="+", default=["kernel", "solve", "settings"],
                   choices=["kernel", "solve", "settings"], help="heat")
    p.add_argument("--nspace", type=int, default=1025, help="heat: points")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64, 256, 4096],
                   help="heat kernel table: states per step_stacked call")
    p.add_argument("--weights", type=float, nargs="+", default=[1.0, 1.3], help="crelax")
    p.add_argument("--cfactor", type=int, default=4, help="crelax")
    p.add_argument("--lyapunov-times", type=float, nargs="+", default=[4.0, 8.0],
                   help="delta: Lorenz horizons in Lyapunov times ln(10)/0.9")
    p.add_argument("--steps-per-time", type=int, default=512,
                   help="delta: forward Euler steps per Lyapunov time (ex-07: 512)")
    p.add_argument("--rank", type=int, default=3, help="delta: Lorenz's basis vectors")
    p.add_argument("--max-iter", type=int, default=100, help="delta: Lorenz's")
    p.add_argument("--ks-rank", type=int, default=8,
                   help="delta: Kuramoto-Sivashinsky's basis vectors (0: skip that case)")
    p.add_argument("--nx", type=int, default=128, help="spatial: mesh intervals (2^k)")
    p.add_argument("--max-levels", type=int, default=4, help="spatial")
    p.add_argument("--tstop", type=float, default=1.0, help="spatial")
    args = p.parse_args(argv)
    args.ntime = args.ntime or NTIME.get(args.feature, [])
    if args.quick:
        args.repeats, args.nspace, args.rows, args.nx = 1, 129, [1, 64], 32
        args.ntime = dict(heat=[1024], problems=[64], richardson=[256], spatial=[16]).get(
            args.feature, args.ntime)
    if args.feature == "heat":
        args.ntime = args.ntime[0]
    FEATURES[args.feature](args)


if __name__ == "__main__":
    main()
