"""Is braidpy faster than PyMGRIT 1.0.6 on the same problems and settings (>= 5x on the
scalar ODE, never slower on heat)? Setup + solve, 1 and 2 ranks.

Same steppers on both sides (_problems.py, _apps_braidpy.py, _apps_pymgrit.py): Dahlquist
u' = -u on [0, 5], backward Euler, 2**14 steps; heat 1D, nx 1000, implicit Euler with a
splu per dt, 1024 steps on [0, 2]. Matched: cfactor and levels, V-cycles, FCF, the same
absolute tolerance on the same residual norm (tnorm 2), cold start, no output. Left
different (the algorithms): PyMGRIT's residual after the cycle (braidpy reports one more
iteration), braidpy's skip=1 (--no-skip), PyMGRIT's coarsest grid gathered on rank 0.
Each timed solve runs in a fresh process (_worker.py; PyMGRIT in its venv,
$BRAIDPY_PYMGRIT_VENV, default ~/.cache/braidpy/pymgrit-venv) after an untimed warm-up,
one BLAS thread, malloc thresholds 2**30; app + hierarchy + solver + solve, the slowest
rank's. Rounds alternate the sides; min and median; ratios PyMGRIT / braidpy.
--with-builtin adds PyMGRIT's own float Dahlquist (serial).

Run: bash benchmarks/setup_pymgrit_env.sh   (once)
     python benchmarks/bench_vs_pymgrit.py [--repeats R] [--ranks 1 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _problems import count_levels
from _harness import min_median, print_table, seconds
from _sidecar import THREAD_ENV, mpiexec_for, run_for_result
from _sidecar import venv_python as sidecar_python

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_worker.py"
DEFAULT_VENV = Path.home() / ".cache" / "braidpy" / "pymgrit-venv"
SUBPROCESS_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    **THREAD_ENV,
}
SCALAR_GOAL, HEAT_GOAL = 5.0, 1.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", nargs="+", choices=["dahlquist", "heat"],
                   default=["dahlquist", "heat"])
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    p.add_argument("--nsteps-dahlquist", type=int, default=2**14)
    p.add_argument("--nsteps-heat", type=int, default=1024)
    p.add_argument("--nx", type=int, default=1000, help="heat: interior spatial points")
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--max-levels", type=int, default=30)
    p.add_argument("--tol-dahlquist", type=float, default=1e-10)
    p.add_argument("--tol-heat", type=float, default=1e-9)
    p.add_argument("--no-skip", action="store_true", help="braidpy skip=False")
    p.add_argument("--repeats", type=int, default=3, help="rounds: timed solves per side")
    p.add_argument("--warmup-scale", type=int, default=8,
                   help="warm-up solves after the first round use nsteps / this")
    p.add_argument("--with-builtin", action="store_true",
                   help="also time PyMGRIT's own (float) Dahlquist class, serially")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per subprocess")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 2**10 / 64 steps, nx 100, 1 repeat")
    args = p.parse_args(argv)
    if args.quick:
        args.nsteps_dahlquist, args.nsteps_heat, args.nx, args.repeats = 2**10, 64, 100, 1
    return args


def venv_python() -> Path:
    return sidecar_python("BRAIDPY_PYMGRIT_VENV", DEFAULT_VENV,
                          f"bash {HERE / 'setup_pymgrit_env.sh'}")


def worker_command(args, side: str, problem: str, ranks: int, python: Path,
                   first: bool) -> list:
    nsteps = args.nsteps_dahlquist if problem == "dahlquist" else args.nsteps_heat
    tol = args.tol_dahlquist if problem == "dahlquist" else args.tol_heat
    warm = nsteps if first else max(nsteps // args.warmup_scale, 2 * args.cfactor)
    cmd = [str(python), str(WORKER), "--side", side, "--problem", problem,
           "--nsteps", str(nsteps), "--nx", str(args.nx), "--cfactor", str(args.cfactor),
           "--levels", str(count_levels(nsteps, args.cfactor, args.max_levels)),
           "--tol", repr(tol), "--repeats", "1", "--warmup-nsteps", str(warm)]
    if first:
        cmd.append("--count-steps")
    if args.no_skip:
        cmd.append("--no-skip")
    if ranks > 1:
        cmd = [mpiexec_for(python), "-n", str(ranks), *cmd, "--mpi"]
    return cmd


def run_worker(args, side: str, problem: str, ranks: int, python: Path, first: bool) -> dict:
    """Run one side in a subprocess; its RESULT line as a dict."""
    cmd = worker_command(args, side, problem, ranks, python, first)
    env = dict(os.environ, **SUBPROCESS_ENV)
    return run_for_result(cmd, env, args.timeout)


def plan(args) -> list:
    """(problem, ranks, sides) in run order; each round runs them all."""
    runs = []
    for problem in args.problems:
        for ranks in args.ranks:
            sides = ["braidpy", "pymgrit"]
            if args.with_builtin and problem == "dahlquist" and ranks == 1:
                sides.append("pymgrit-builtin")
            runs.append((problem, ranks, sides))
    return runs


def run_rounds(args, pymgrit_python: Path) -> dict:
    """{(problem, ranks, side): outcome with the times of all rounds}."""
    results = {}
    for k in range(args.repeats):
        for problem, ranks, sides in plan(args):
            for side in sides if k % 2 == 0 else sides[::-1]:
                python = Path(sys.executable) if side == "braidpy" else pymgrit_python
                print(f"round {k + 1}/{args.repeats}: {side} {problem} on {ranks} rank(s)",
                      file=sys.stderr, flush=True)
                r = run_worker(args, side, problem, ranks, python, first=k == 0)
                key = (problem, ranks, side)
                if key in results:
                    r["times"] = results[key]["times"] + r["times"]
                    r["steps"] = results[key]["steps"]
                results[key] = r
    return results


def side_row(problem, ranks, side, r) -> list:
    lo, med = min_median(r["times"])
    residual = "-" if r["residual"] is None else f"{r['residual']:.2e}"
    steps = "-" if r.get("steps") is None else r["steps"]
    return [problem, ranks, side, seconds(lo), seconds(med), r["iterations"], r["levels"],
            steps, residual, f"{r['final_norm']:.12g}"]


def ratio_rows(results) -> list:
    rows = []
    for (problem, ranks, side), r in results.items():
        if side == "braidpy":
            continue
        b_min, b_med = min_median(results[(problem, ranks, "braidpy")]["times"])
        p_min, p_med = min_median(r["times"])
        goal = SCALAR_GOAL if problem == "dahlquist" else HEAT_GOAL
        met = (p_min / b_min >= goal, p_med / b_med >= goal)
        verdict = "met" if all(met) else "mixed" if any(met) else "MISSED"
        rows.append([problem, ranks, f"{side} / braidpy", f"{p_min / b_min:.2f}x",
                     f"{p_med / b_med:.2f}x", f">= {goal:g}x", verdict])
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    results = run_rounds(args, venv_python())
    print_table(
        ["problem", "ranks", "side", "min", "median", "iterations", "levels", "step calls",
         "last residual", "|u(T)|"],
        [side_row(*key, r) for key, r in results.items()],
        title=f"Wall time of setup + solve ({args.repeats} rounds, one fresh process per side "
              f"and round; cfactor {args.cfactor}, FCF, V-cycles; tol {args.tol_dahlquist:g} "
              f"(Dahlquist), {args.tol_heat:g} (heat); braidpy skip={not args.no_skip}; step "
              f"calls summed over ranks)")
    print_table(["problem", "ranks", "ratio", "of mins", "of medians", "goal", "verdict"],
                ratio_rows(results), title="PyMGRIT time / braidpy time (higher: braidpy faster)")


if __name__ == "__main__":
    main()
