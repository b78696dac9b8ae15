"""Is braidpy.torch faster than torchbraid for the same one-shot forward+backward? (CPU, 1
and 2 ranks, plain torch for reference)

Both sides and serial torch (_worker_torch.py): N blocks x <- x + (T/N) tanh(Linear_n(x)),
width 8, float64, T = 2, the same weights; loss sum(y * wts). Matched: cf 16, 2 levels,
F-relaxation, 2 forward and 2 backward iterations, warm-started (braidpy oneshot=(2, 2);
torchbraid setFwdMaxIters(2) / setBwdMaxIters(2), its default skip=0). Left different:
torchbraid's final F-relaxation and its own buffers. Each (N, batch, ranks, side) in a
fresh process (torchbraid in its venv, $BRAIDPY_TORCHBRAID_VENV, default
~/.cache/braidpy/torchbraid-venv), one thread, two warm-ups, then --repeats timed calls;
CPU and wall time, the slowest rank's; min [median]; --rounds reverses the sides' order
every other round. --check: each side's gradient error against autograd (after the timed
calls, and converged to 1e-12).

Run: bash benchmarks/setup_torchbraid_env.sh TORCHBRAID_SRC XBRAID_SRC   (once)
     python benchmarks/bench_vs_torchbraid.py [--layers 1024 4096] [--batches 1 32]
         [--ranks 1 2] [--repeats R] [--rounds K] [--check] [--clock cpu|wall] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _harness import min_median, print_table, seconds
from _sidecar import THREAD_ENV, mpiexec_for, run_for_result
from _sidecar import venv_python as sidecar_python

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_worker_torch.py"
DEFAULT_VENV = Path.home() / ".cache" / "braidpy" / "torchbraid-venv"
SUBPROCESS_ENV = dict(THREAD_ENV)
SIDES = ["serial", "braidpy", "torchbraid"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, nargs="+", default=[1024, 4096])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--cfactor", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="timed calls per process")
    p.add_argument("--rounds", type=int, default=1, help="fresh processes per side")
    p.add_argument("--check", action="store_true",
                   help="gradient errors against autograd (one-shot and converged)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
    p.add_argument("--quick", action="store_true", help="smoke run: N 256, batch 1, 1 rank")
    args = p.parse_args(argv)
    if args.quick:
        args.layers, args.batches, args.ranks, args.repeats = [256], [1], [1], 1
    return args


def venv_python() -> Path:
    return sidecar_python("BRAIDPY_TORCHBRAID_VENV", DEFAULT_VENV,
                          f"bash {HERE / 'setup_torchbraid_env.sh'} TORCHBRAID_SRC XBRAID_SRC")


def run_worker(args, side: str, n: int, batch: int, ranks: int, python: Path) -> dict:
    cmd = [str(python), str(WORKER), "--side", side, "--layers", str(n), "--batch", str(batch),
           "--cfactor", str(args.cfactor), "--repeats", str(args.repeats)]
    if args.check:
        cmd.append("--check")
    if ranks > 1 and side != "serial":
        cmd = [mpiexec_for(python), "-n", str(ranks), *cmd, "--mpi"]
    env = dict(os.environ, **SUBPROCESS_ENV)
    if side != "torchbraid":  # braidpy from this checkout, whatever the caller's path
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                          env.get("PYTHONPATH")]))
    return run_for_result(cmd, env, args.timeout)


def plan(args) -> list:
    """(N, batch, ranks, sides): serial torch (always one process) once per (N, batch)."""
    runs = []
    for n in args.layers:
        for batch in args.batches:
            for j, ranks in enumerate(args.ranks):
                sides = SIDES if j == 0 else SIDES[1:]
                runs.append((n, batch, ranks, sides))
    return runs


def main(argv=None) -> None:
    args = parse_args(argv)
    tb_python = venv_python()
    results: dict = {}
    for k in range(args.rounds):
        for n, batch, ranks, sides in plan(args):
            for side in sides if k % 2 == 0 else sides[::-1]:
                print(f"round {k + 1}/{args.rounds}: {side} N={n} batch={batch} "
                      f"ranks={ranks}", file=sys.stderr, flush=True)
                python = tb_python if side == "torchbraid" else Path(sys.executable)
                r = run_worker(args, side, n, batch, ranks, python)
                key = (n, batch, ranks, side)
                if key in results:
                    r["cpu"] = results[key]["cpu"] + r["cpu"]
                    r["wall"] = results[key]["wall"] + r["wall"]
                results[key] = r
    rows, versions = [], {}
    for n, batch, ranks, _ in plan(args):
        serial = min_median(results[(n, batch, args.ranks[0], "serial")][args.clock])
        for side in ("braidpy", "torchbraid"):
            r = results[(n, batch, ranks, side)]
            versions.setdefault(side, r.get("version", ""))
            lo, med = min_median(r[args.clock])
            row = [n, batch, ranks, side, f"{seconds(lo)} [{seconds(med)}]",
                   f"{seconds(serial[0])} [{seconds(serial[1])}]", f"{serial[0] / lo:.2f}x"]
            if side == "torchbraid":
                b_lo = min_median(results[(n, batch, ranks, "braidpy")][args.clock])[0]
                row.append(f"{lo / b_lo:.2f}x")
            else:
                row.append("")
            if args.check:
                row += [f"{r['err_oneshot']:.1e}", f"{r['err_converged']:.1e}"]
            rows.append(row)
    headers = ["N", "batch", "ranks", "side", "one-shot (2,2) fwd+bwd", "serial torch",
               "serial / side", "torchbraid / braidpy"]
    if args.check:
        headers += ["grad err one-shot", "grad err converged"]
    torch_version = results[next(iter(results))]["torch"]
    print_table(headers, rows,
                title=f"{args.clock} time, min [median] of {args.rounds} x {args.repeats} calls; "
                      f"torch {torch_version}, torchbraid {versions.get('torchbraid', '?')}, "
                      f"1 torch thread per rank; width 8, float64, cfactor {args.cfactor}, "
                      f"2 levels, F-relaxation")


if __name__ == "__main__":
    main()
