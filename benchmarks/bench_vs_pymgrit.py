"""Is braidpy >= 3x faster than PyMGRIT 1.0.6 on PyMGRIT's own problems, at the same
solution? Setup + solve to the same tolerance, 1 and 2 ranks, braidpy batched.

Each side runs its own library's problem classes (_worker.py's CASES): braidpy.problems
(batched steps, its default) and PyMGRIT's applications, with the same equation,
coefficients, initial value, spatial grid and time stepper (docs/problems.md; PyMGRIT's
Arenstorf steps with scipy's adaptive RK45, braidpy's with RK4: not the same solution).
Matched: levels (--max-levels, default 3) and cfactor, V-cycles, FCF, the same absolute
tolerance on the same residual norm (tnorm 2), a zero initial guess, skip=False (--skip:
braidpy's default), no output. Left different (the algorithms): PyMGRIT's residual after
the cycle (braidpy reports one more iteration), PyMGRIT's coarsest grid gathered on rank
0. Each timed solve runs in a fresh process (_worker.py; PyMGRIT in its venv,
$BRAIDPY_PYMGRIT_VENV, default ~/.cache/braidpy/pymgrit-venv) after an untimed warm-up,
one BLAS thread, malloc thresholds 2**30; app + hierarchy + solver + solve, the slowest
rank's. Rounds alternate the sides; min and median; ratios PyMGRIT / braidpy; the
difference of the two u(tstop) in max norm.

Run: bash benchmarks/setup_pymgrit_env.sh   (once)
     python benchmarks/bench_vs_pymgrit.py [--repeats R] [--ranks 1 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from _harness import min_median, print_table, seconds
from _problems import count_levels
from _sidecar import THREAD_ENV, mpiexec_for, run_for_result
from _sidecar import venv_python as sidecar_python
from _worker import CASES

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_worker.py"
DEFAULT_VENV = Path.home() / ".cache" / "braidpy" / "pymgrit-venv"
SUBPROCESS_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    **THREAD_ENV,
}
GOAL = 3.0
#: longer steps diverge (RK4) or defeat Newton: warm-ups solve the full problem
FULL_WARMUP = {"brusselator", "allencahn"}
SAME_SOLUTION = 1e-8  # max |u_braidpy(T) - u_PyMGRIT(T)| of one discretisation
#: problem -> (time steps, spatial points per direction, absolute tolerance)
SIZES = {"dahlquist": (4096, 1, 1e-10), "brusselator": (640, 1, 1e-10),
         "arenstorf": (512, 1, 1e-10), "advection1d": (256, 65, 1e-10),
         "heat1d": (256, 129, 1e-10), "heat2d": (128, 17, 1e-10),
         "allencahn": (64, 12, 1e-9)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    p.add_argument("--cfactor", type=int, default=4)
    p.add_argument("--max-levels", type=int, default=3)
    p.add_argument("--skip", action="store_true", help="braidpy skip=True")
    p.add_argument("--repeats", type=int, default=3, help="rounds: timed solves per side")
    p.add_argument("--warmup-scale", type=int, default=8,
                   help="warm-up solves after the first round use nsteps / this")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per subprocess")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 1 rank")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.ranks = 1, [1]
    return args


def venv_python() -> Path:
    return sidecar_python("BRAIDPY_PYMGRIT_VENV", DEFAULT_VENV,
                          f"bash {HERE / 'setup_pymgrit_env.sh'}")


def worker_command(args, side: str, problem: str, ranks: int, python: Path,
                   first: bool) -> list:
    nsteps, nx, tol = SIZES[problem]
    warm = nsteps if first or problem in FULL_WARMUP else max(
        nsteps // args.warmup_scale, 2 * args.cfactor)
    cmd = [str(python), str(WORKER), "--side", side, "--problem", problem,
           "--nsteps", str(nsteps), "--nx", str(nx), "--cfactor", str(args.cfactor),
           "--levels", str(count_levels(nsteps, args.cfactor, args.max_levels)),
           "--tol", repr(tol), "--repeats", "1", "--warmup-nsteps", str(warm)]
    if first:
        cmd.append("--count-steps")
    if args.skip:
        cmd.append("--skip")
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
            runs.append((problem, ranks, ["braidpy", "pymgrit"]))
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
            steps, residual]


def ratio_rows(results) -> list:
    rows = []
    for (problem, ranks, side), r in results.items():
        if side == "braidpy":
            continue
        b = results[(problem, ranks, "braidpy")]
        (b_min, b_med), (p_min, p_med) = min_median(b["times"]), min_median(r["times"])
        met = (p_min / b_min >= GOAL, p_med / b_med >= GOAL)
        diff = np.max(np.abs(np.subtract(b["final"], r["final"])))
        verdict = ("other solution" if diff > SAME_SOLUTION else "met" if all(met)
                   else "mixed" if any(met) else "MISSED")
        rows.append([problem, ranks, f"{b['iterations']} / {r['iterations']}", f"{diff:.1e}",
                     f"{p_min / b_min:.2f}x", f"{p_med / b_med:.2f}x", verdict])
    return rows


def main(argv=None) -> None:
    args = parse_args(argv)
    results = run_rounds(args, venv_python())
    sizes = ", ".join(f"{k} {SIZES[k][0]} steps" + (f" nx {SIZES[k][1]}" if SIZES[k][1] > 1
                                                   else "") for k in args.problems)
    print_table(
        ["problem", "ranks", "side", "min", "median", "iterations", "levels", "step calls",
         "last residual"],
        [side_row(*key, r) for key, r in results.items()],
        title=f"Wall time of setup + solve ({args.repeats} rounds, one fresh process per side "
              f"and round; cfactor {args.cfactor}, FCF, V-cycles; {sizes}; braidpy "
              f"skip={args.skip}; step calls summed over ranks)")
    print_table(["problem", "ranks", "iterations braidpy / PyMGRIT", "max |du(T)|",
                 "ratio of mins", "of medians", f"verdict (>= {GOAL:g}x)"],
                ratio_rows(results), title="PyMGRIT time / braidpy time (higher: braidpy faster)")


if __name__ == "__main__":
    main()
