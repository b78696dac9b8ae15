"""Does the performance model predict the seconds per Trainer gradient on every data x space
x layers grid within 25 %?

For P = 1, 2, 4 and every grid D x S x L = P: one ``trainer.evaluator.gradient`` of a
whole batch (one-shot (2, 2), 2 levels, cf 4, warm) beside braidpy.perf.model.predict:
digits (conv 32 x 4, 8x8, 200 images), peaks (dense width 8, 32 layers, 2000 points),
digits28 when named (conv 16 x 8, 28x28, 32 images). Median of --repeats of the slowest
rank; rank counts above --cores are skipped, saying so (a core per rank).

    python benchmarks/bench_perf_grids.py [--ranks 1 2 4] [--calibration FILE]
        [--repeats R] [--json FILE] [--plot FILE.png] [--problems digits peaks digits28]
    python benchmarks/bench_perf_grids.py --from-json RUN1.json ... [--plot FILE.png]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _perf_validation import (WARMUP_GRADIENTS, common_arguments, dump,  # noqa: E402
                              plot_predicted_vs_measured, ranks_with_a_core,
                              run_calibration, run_worker, signed_worst, within)

LEVELS, CFACTOR, M = 2, 4, (2, 2)
#: problem -> (calibrated layer, samples per gradient, residual layers)
PROBLEMS = {"digits": ("conv:4x8x8:3", 200, 32), "peaks": ("dense:8", 2000, 32),
            "digits28": ("conv:8x28x28:3", 32, 16)}


def problem(name: str):
    """(net, X, C) of a problem (see the docstring)."""
    import numpy as np

    from braidpy import data
    from braidpy.nn import ResNet

    _, samples, layers = PROBLEMS[name]
    if name == "digits28":
        X, C = data.digits28(seed=1)["train"]
        net = ResNet((1, 28, 28), 10, width=8, nlayers=layers, tstop=5.0, opening="conv",
                     kernel=3)
        return net, np.ascontiguousarray(X[:samples]), np.ascontiguousarray(C[:samples])
    if name == "digits":
        X, C = data.digits(seed=1)["train"]
        net = ResNet((1, 8, 8), 10, width=4, nlayers=layers, tstop=5.0, opening="conv",
                     kernel=3)
        return net, np.ascontiguousarray(X[:samples]), np.ascontiguousarray(C[:samples])
    X, C = data.peaks(samples, seed=1)
    return ResNet((2,), 5, width=8, nlayers=layers, tstop=5.0), X, C


def grids(name: str, nprocs: int):
    """Every (data, space, layers) of nprocs ranks that training can run."""
    from braidpy.train.spatial_training import max_space

    most = max_space(problem(name)[0], "oneshot")
    return [(d, s, nprocs // (d * s)) for d in range(1, nprocs + 1) if nprocs % d == 0
            for s in range(1, nprocs // d + 1) if (nprocs // d) % s == 0 and s <= most]


def worker(spec: dict) -> None:
    """Time gradients on every grid of this communicator; rank 0 prints RESULT."""
    import numpy as np
    from mpi4py import MPI

    from braidpy.parallel import ProcessGrid
    from braidpy.perf.allocator import keep_freed_memory
    from braidpy.train import TrainConfig, Trainer

    keep_freed_memory()  # as braidpy calibrate measures (braidpy.perf.allocator)
    comm = MPI.COMM_WORLD
    nprocs = comm.Get_size()
    out = []
    for name in spec["problems"]:
        net, X, C = problem(name)
        for shape in grids(name, nprocs):
            grid = ProcessGrid(comm if nprocs > 1 else None, *shape)
            cfg = TrainConfig(mode="oneshot", m1=M[0], m2=M[1], optimizer="sgd",
                              mgrit=dict(cfactor=CFACTOR, max_levels=LEVELS))
            trainer = Trainer(net, (X, C), None, cfg, grid=grid)
            ev, p = trainer.evaluator, trainer.params
            for _ in range(WARMUP_GRADIENTS):  # solvers built, the first (cold) solve
                p += 1e-4
                ev.gradient(p, X, C)
            times, cpus = [], []
            for _ in range(spec["repeats"]):
                p += 1e-4  # a new parameter, as after an optimizer step
                comm.Barrier()
                start, cpu = time.perf_counter(), time.process_time()
                ev.gradient(p, X, C)
                cpu = time.process_time() - cpu
                comm.Barrier()
                most = np.array([time.perf_counter() - start, cpu])  # the slowest rank's
                comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
                wall, cpu = most.tolist()
                times.append(wall)
                cpus.append(cpu)
            grid.free()
            out.append(dict(problem=name, grid=list(shape), times=times, cpu=cpus))
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(out), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--problems", nargs="+", choices=sorted(PROBLEMS),
                   default=["digits", "peaks"])
    p.add_argument("--plot", help="write predicted vs measured to this PNG")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="measure nothing: report (and plot) the rows of earlier --json runs")
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.from_json:
        rows = [r for path in args.from_json for r in json.load(open(path))]
        report(rows, args.json, args.plot)
        return
    args.ranks = ranks_with_a_core(args.ranks, args.cores)
    if not args.ranks:
        p.error(f"every --ranks count is above --cores {args.cores}")

    from braidpy.perf.auto import training_spec
    from braidpy.perf.model import Strategy, predict
    from braidpy.perf.schedule import Cycle

    samples = sorted({PROBLEMS[n][1] // k for n in args.problems for k in (1, 2, 4)})
    cal = run_calibration(args, [PROBLEMS[n][0] for n in args.problems], samples,
                          [1, 4, 16, 32], "braidpy-bench-grids-calibration.json")
    rows = []
    # Each problem in processes of its own, as a training run is (one network per
    # process: no heap shaped by another network's temporaries).
    runs = [(P, name) for P in args.ranks for name in args.problems]
    for P, name in runs:
        spec = dict(problems=[name], repeats=args.repeats)
        for res in run_worker(__file__, spec, P):
            net = problem(res["problem"])[0]
            nspec = training_spec(net.kind, net.input_shape, net.width, net.nlayers,
                                  PROBLEMS[res["problem"]][1], net.nclasses,
                                  net.kernel if net.kind == "conv" else None, net.nparams)
            d, s, lr = res["grid"]
            cyc = Cycle(ntime=net.nlayers, max_levels=LEVELS, cfactor=CFACTOR, batched=True)
            pred = predict(nspec, Strategy(d, s, lr, cyc, M, "oneshot"), cal).seconds
            wall = statistics.median(res["times"])
            rows.append(dict(problem=res["problem"], grid=f"{d}x{s}x{lr}", P=P, wall=wall,
                             cpu=statistics.median(res["cpu"]), predicted=pred,
                             error=pred / wall - 1))
            print(f"measured {res['problem']} {d}x{s}x{lr} at P = {P}: {wall:.4f} s, "
                  f"model {pred:.4f} s ({pred / wall - 1:+.0%})", flush=True)
        if args.json:  # what is measured so far, should a time limit cut the run off
            dump(rows, args.json)
    report(rows, args.json, args.plot)


def report(rows, json_path=None, plot=None) -> None:
    print("measured: median wall s of the gradients (the slowest rank's); cpu s: its CPU "
          "time")
    print(f"{'problem':8s} {'grid':7s} {'P':>2s} {'measured':>9s} {'model s':>9s} "
          f"{'error':>6s} {'cpu s':>8s}")
    for r in rows:
        print(f"{r['problem']:8s} {r['grid']:7s} {r['P']:2d} {r['wall']:9.4f} "
              f"{r['predicted']:9.4f} {r['error']:+6.0%} {r['cpu']:8.4f}")
    errors = [r["error"] for r in rows]
    print(f"within 25%: {within(errors)} of {len(rows)} (worst {signed_worst(errors):+.0%})")
    if json_path:
        dump(rows, json_path)
    if plot:
        plot_predicted_vs_measured(rows, "wall", plot, "measured s / gradient (median wall)")


if __name__ == "__main__":
    main()
