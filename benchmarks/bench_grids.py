"""Which data x space x layers grid of P ranks gives the fastest gradient, and what do the
data reductions and agreement points cost? (overlap on vs off)

Every grid D x S x L = P (S > 1 for digits' conv only): digits (conv, 32 x 4, batches of
200), peaks (width 8, 32 layers, batches of 2000). Timed: one ``evaluator.gradient`` of a
batch, the slowest rank (min, median); rank 0's share in ``Waitall`` and agreement.

    mpiexec -n P python benchmarks/bench_grids.py [--repeats R] [--quick]
        [--problems digits peaks] [--mode oneshot|exact]
"""

from __future__ import annotations

import argparse
import statistics

from _harness import print_table
from _sidecar import slowest
from mpi4py import MPI

from braidpy import data
from braidpy.nn import ResNet
from braidpy.parallel import ProcessGrid
from braidpy.train import TrainConfig, Trainer
from braidpy.train.spatial_training import max_space


def problem(name, quick):
    if name == "digits":
        X, C = data.digits(seed=1)["train"]
        n = 100 if quick else 200
        net = ResNet((1, 8, 8), 10, width=4, nlayers=32, tstop=5.0, activation="smooth_relu",
                     opening="conv", kernel=3)
        return net, X[:n], C[:n]
    X, C = data.peaks(500 if quick else 2000, seed=1)
    return ResNet((2,), 5, width=8, nlayers=32, tstop=5.0, activation="smooth_relu"), X, C


def time_gradients(comm, grid, name, mode, overlap, repeats, quick):
    """Per gradient: the slowest rank's seconds; the median shares waiting and agreeing;
    the step calls."""
    net, X, C = problem(name, quick)
    cfg = TrainConfig(mode=mode, optimizer="sgd", mgrit=dict(cfactor=4, max_levels=2))
    trainer = Trainer(net, (X, C), None, cfg, grid=grid)
    ev, p = trainer.evaluator, trainer.params
    ev.overlap = overlap
    ev.gradient(p, X, C)  # warm-up: solvers built, first (sequential) solve
    times, waits, agrees, calls = [], [], [], ev.step_calls
    for _ in range(repeats):
        seconds, (_, _, stats) = slowest(comm, lambda: ev.gradient(p, X, C))
        times.append(seconds)
        waits.append(stats["data_wait_seconds"] / times[-1])
        agrees.append(stats["data_agree_seconds"] / times[-1])
    calls = (ev.step_calls - calls) // repeats
    return times, statistics.median(waits), statistics.median(agrees), calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small batches, 2 repeats")
    parser.add_argument("--problems", nargs="+", choices=("digits", "peaks"),
                        default=["digits", "peaks"])
    parser.add_argument("--mode", choices=("oneshot", "exact"), default="oneshot")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    repeats = 2 if args.quick else args.repeats
    rows = []
    for name in args.problems:
        most_space = max_space(problem(name, True)[0], args.mode)
        for d in (d for d in range(1, p + 1) if p % d == 0):
            for s in (s for s in range(1, min(p // d, most_space) + 1) if (p // d) % s == 0):
                grid = ProcessGrid(comm if p > 1 else None, d, s, p // (d * s))
                for overlap in (True, False):
                    times, wait, agree, calls = time_gradients(
                        comm, grid, name, args.mode, overlap, repeats, args.quick)
                    rows.append([name, f"{d}x{s}x{p // (d * s)}", "on" if overlap else "off",
                                 f"{min(times) * 1e3:.1f}",
                                 f"{statistics.median(times) * 1e3:.1f}",
                                 f"{100 * wait:.1f}%", f"{100 * agree:.1f}%", calls])
                grid.free()
    if comm.Get_rank() == 0:
        print(f"P = {p} ranks, mode {args.mode}; min / median over {repeats} repeats")
        print_table(["problem", "grid DxSxL", "overlap", "ms min", "ms median", "wait",
                     "agree", "steps"], rows,
                    "time per gradient of one batch on every data x space x layers grid")


if __name__ == "__main__":
    main()
