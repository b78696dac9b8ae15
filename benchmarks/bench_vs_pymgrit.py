"""Is braidpy >= 3x faster than PyMGRIT 1.0.6 on PyMGRIT's own problems, at the same
solution? Setup + solve to the same tolerance, 1 and 2 ranks, braidpy batched.

Each side runs its own library's classes (_worker.py, docs/problems.md). Matched: levels,
cfactor, V-cycles, FCF, absolute tolerance (tnorm 2), zero guess, skip=False. Timed: each
solve in a fresh process after a warm-up (PyMGRIT in $BRAIDPY_PYMGRIT_VENV), the slowest
rank; rounds alternate the sides; min, median.

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
from _sidecar import HERE, THREAD_ENV, alternating, mpiexec_for, run_for_result, venv_python
from _worker import CASES

GOAL, SAME_SOLUTION = 3.0, 1e-8  # SAME: max |u_braidpy(T) - u_PyMGRIT(T)|
ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
       **THREAD_ENV}
#: longer steps diverge (RK4) or defeat Newton: warm-ups solve the full problem
FULL_WARMUP = {"brusselator", "allencahn"}
#: problem -> (time steps, spatial points per direction, absolute tolerance)
SIZES = {"dahlquist": (4096, 1, 1e-10), "brusselator": (640, 1, 1e-10),
         "arenstorf": (512, 1, 1e-10),
         "advection1d": (256, 65, 1e-10), "heat1d": (256, 129, 1e-10),
         "heat2d": (128, 17, 1e-10), "allencahn": (64, 12, 1e-9)}


def run_worker(args, side: str, problem: str, ranks: int, python: Path, first: bool) -> dict:
    """One side's setup + solve in a fresh process (_worker.py): its RESULT as a dict."""
    nsteps, nx, tol = SIZES[problem]
    warm = nsteps if first or problem in FULL_WARMUP else max(
        nsteps // args.warmup_scale, 2 * args.cfactor)
    cmd = [str(python), str(HERE / "_worker.py"), "--side", side, "--problem", problem,
           "--nsteps", str(nsteps), "--nx", str(nx), "--cfactor", str(args.cfactor),
           "--levels", str(count_levels(nsteps, args.cfactor, args.max_levels)),
           "--tol", repr(tol), "--repeats", "1", "--warmup-nsteps", str(warm)]
    cmd += ["--count-steps"] * first + ["--skip"] * args.skip
    if ranks > 1:
        cmd = [mpiexec_for(python), "-n", str(ranks), *cmd, "--mpi"]
    return run_for_result(cmd, dict(os.environ, **ENV), args.timeout)


def main(argv=None) -> None:
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
    pymgrit = venv_python("BRAIDPY_PYMGRIT_VENV",
                          Path.home() / ".cache" / "braidpy" / "pymgrit-venv",
                          f"bash {HERE / 'setup_pymgrit_env.sh'}")
    plan = [((problem, ranks), ("braidpy", "pymgrit")) for problem in args.problems
            for ranks in args.ranks]
    results = alternating(plan, args.repeats, lambda key, side, first: run_worker(
        args, side, *key, Path(sys.executable) if side == "braidpy" else pymgrit, first),
        ["times"])
    sides, ratios = [], []
    for (problem, ranks, side), r in results.items():
        lo, med = min_median(r["times"])
        sides.append([problem, ranks, side, seconds(lo), seconds(med), r["iterations"],
                      r["levels"], "-" if r.get("steps") is None else r["steps"],
                      "-" if r["residual"] is None else f"{r['residual']:.2e}"])
        if side == "pymgrit":
            b = results[problem, ranks, "braidpy"]
            (b_min, b_med), (p_min, p_med) = min_median(b["times"]), (lo, med)
            met = (p_min / b_min >= GOAL, p_med / b_med >= GOAL)
            diff = np.max(np.abs(np.subtract(b["final"], r["final"])))
            ratios.append([problem, ranks, f"{b['iterations']} / {r['iterations']}",
                           f"{diff:.1e}", f"{p_min / b_min:.2f}x", f"{p_med / b_med:.2f}x",
                           "other solution" if diff > SAME_SOLUTION else "met" if all(met)
                           else "mixed" if any(met) else "MISSED"])
    sizes = ", ".join(f"{k} {SIZES[k][0]} steps" + (f" nx {SIZES[k][1]}" if SIZES[k][1] > 1
                                                   else "") for k in args.problems)
    print_table(["problem", "ranks", "side", "min", "median", "iterations", "levels",
                 "step calls", "last residual"], sides,
                title=f"Wall time of setup + solve ({args.repeats} rounds, one fresh process per "
                      f"side and round; cfactor {args.cfactor}, FCF, V-cycles; {sizes}; braidpy "
                      f"skip={args.skip}; step calls summed over ranks)")
    print_table(["problem", "ranks", "iterations braidpy / PyMGRIT", "max |du(T)|",
                 "ratio of mins", "of medians", f"verdict (>= {GOAL:g}x)"], ratios,
                title="PyMGRIT time / braidpy time (higher: braidpy faster)")


if __name__ == "__main__":
    main()
