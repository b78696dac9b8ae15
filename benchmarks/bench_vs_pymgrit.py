"""braidpy vs PyMGRIT 1.0.6: wall time of setup + solve, serially and with 2 ranks.

Both sides solve the same problems with the same time steppers (_problems.py;
braidpy apps in _apps_braidpy.py, PyMGRIT Application/Vector subclasses in
_apps_pymgrit.py, both on NumPy arrays):

- Dahlquist: u' = -u on [0, 5], backward Euler, 2**14 steps (2**14 + 1 points);
- heat 1D: nx = 1000 interior points, implicit Euler with one splu factor per
  dt, 1024 steps (1025 points) on [0, 2].

Matched options: the same cfactor and number of levels (braidpy's hierarchy
for max_levels; PyMGRIT gets that many levels from simple_setup_problem), V-cycles,
FCF relaxation (braidpy nrelax=1; PyMGRIT cf_iter=1, weight_c=1), the same
absolute tolerance on the same residual norm: the 2-norm over fine C-points
(t > 0) of the spatial 2-norms of r_c = Phi(u_{c-1}) - u_c (braidpy tnorm=2,
Euclidean norm; PyMGRIT t_norm=2), cold start from zero (PyMGRIT
nested_iteration=False), no output (braidpy access_level=0).

Differences that remain (the algorithms, not the settings):
- PyMGRIT computes its residual after the whole V-cycle, with one extra fine
  step per C-point; braidpy (XBraid) measures it during the down-sweep, after
  FC-relaxation, at no extra cost, and halts after that cycle. braidpy's
  norm therefore lags by about one cycle: it reports one more iteration for
  the same tolerance.
- braidpy skips the first down-sweep (XBraid's skip=1, default; --no-skip
  turns it off); PyMGRIT's first iteration F-relaxes and FCF-relaxes level 0.
- PyMGRIT gathers the coarsest grid to rank 0 and steps it there; braidpy
  keeps it distributed and steps through it rank after rank (no gather).

Each timed solve runs in a fresh subprocess (_worker.py): braidpy with this
interpreter, PyMGRIT with the virtualenv's (benchmarks/setup_pymgrit_env.sh
creates it; BRAIDPY_PYMGRIT_VENV says where, default
~/.cache/braidpy/pymgrit-venv), under that environment's mpiexec for 2 ranks.
Every subprocess gets MALLOC_MMAP_THRESHOLD_ = MALLOC_TRIM_THRESHOLD_ = 2**30
and one BLAS/OpenMP thread, and does an untimed warm-up solve first: of the
full problem in the first round (which also counts step calls), of
nsteps / --warmup-scale steps after that. The timed solve covers app +
hierarchy + solver construction + solve; under MPI, the slowest rank
between barriers. --repeats rounds run every (problem, ranks, side) once,
sides alternating in order, so that a slow spell of a shared machine hits
both sides alike. Tables show min and median over rounds, and ratios
PyMGRIT / braidpy. --with-builtin adds PyMGRIT's own float-valued Dahlquist
class (serial) for reference: PyMGRIT at its cheapest vector type.

Run: bash benchmarks/setup_pymgrit_env.sh   (once)
     python benchmarks/bench_vs_pymgrit.py [--repeats R] [--ranks 1 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _problems import count_levels
from _report import min_median, print_table, seconds
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
