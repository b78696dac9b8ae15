"""Predicted vs measured seconds per gradient on every data x space x layers grid.

Issue 17, item 4 for the grids (bench_perf_model.py checks MGRIT settings with layer
ranks only): for P = 1, 2, 4 ranks, every grid D x S x L = P that training can run on
two problems, the time of one loss-and-gradient of a whole batch as the Trainer
computes it (``trainer.evaluator.gradient``: each data group's one-shot (2, 2) MGRIT
over its layer ranks on its shard, the spatial ranks splitting a conv net's image rows,
then the average over the data groups), beside the model's prediction
(:func:`braidpy.perf.model.predict` for that grid and MGRIT setting):

- digits: a conv ResNet of 32 layers x 4 channels on 8x8 images (scikit-learn's
  digits), 200 images per gradient; any space split (bands of at least one row);
- peaks: the paper's dense ResNet (width 8, 32 layers), 2000 points per gradient;
- digits28 (only when named in --problems): the digits scaled to MNIST's 28x28, a conv
  ResNet of 16 layers x 8 channels (the mnist quick preset's), 32 images per gradient:
  bands thick enough for space splits to pay.

MGRIT: 2 levels, cfactor 4, one-shot m1 = m2 = 2, warm-started as in training; the
activation is ResNet's default (smoothed ReLU), the one ``braidpy calibrate`` measures.
Grids with one layer rank are predicted with the same MGRIT setting on that rank (what
the Trainer runs), not as serial propagation.

As in bench_perf_model.py, each gradient records every rank's run-queue wait, and with
no more ranks than cores only clean gradients count (no rank waited more than 2 % of
it for a core); rows with more ranks than cores are predicted with the ranks sharing
the cores (compute x ranks / cores) and compared by wall time (marked ``*``).

    python benchmarks/bench_perf_grids.py [--ranks 1 2 4] [--calibration FILE]
        [--repeats R] [--max-tries T] [--json FILE] [--plot FILE.png]
        [--problems digits peaks digits28]
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

from _perf_validation import (WARMUP_GRADIENTS, clean_sample,  # noqa: E402
                              common_arguments, dump,
                              plot_predicted_vs_measured, run_calibration, run_worker,
                              signed_worst, within)

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
    from braidpy.perf.runqueue import CLEAN_SHARE, run_delay
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
            times, cpus, delays = [], [], []
            clean = 0
            for _ in range(spec["tries"]):
                p += 1e-4  # a new parameter, as after an optimizer step
                comm.Barrier()
                start, cpu, queued = time.perf_counter(), time.process_time(), run_delay()
                ev.gradient(p, X, C)
                cpu, queued = time.process_time() - cpu, run_delay() - queued
                comm.Barrier()
                # The slowest rank's figures, the same on every rank (all stop together).
                most = np.array([time.perf_counter() - start, cpu, queued])
                comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
                wall, cpu, queued = most.tolist()
                clean += not spec["filter"] or queued <= CLEAN_SHARE * wall
                times.append(wall)
                cpus.append(cpu)
                delays.append(queued)
                if (clean if spec["filter"] else len(times)) >= spec["repeats"]:
                    break
            grid.free()
            out.append(dict(problem=name, grid=list(shape), times=times, cpu=cpus,
                            delays=delays, filter=spec["filter"]))
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

    from braidpy.perf.auto import training_spec
    from braidpy.perf.model import Strategy, predict
    from braidpy.perf.schedule import Cycle

    samples = sorted({PROBLEMS[n][1] // k for n in args.problems for k in (1, 2, 4)})
    cal = run_calibration(args, [PROBLEMS[n][0] for n in args.problems], samples,
                          [1, 4, 16, 32], "braidpy-bench-grids-calibration.json")
    rows = []
    # Each problem in processes of its own, as a training run is: on the 2-core VM at
    # 4 ranks, Peaks' gradients in processes that had run a space split of the digits
    # net before took 0.09 instead of 0.05 s now and then (docs/performance.md).
    runs = [(P, name) for P in args.ranks for name in args.problems]
    for P, name in runs:
        spec = dict(problems=[name], repeats=args.repeats,
                    tries=max(args.max_tries, args.repeats), filter=P <= args.cores)
        for res in run_worker(__file__, spec, P):
            net = problem(res["problem"])[0]
            nspec = training_spec(net.kind, net.input_shape, net.width, net.nlayers,
                                  PROBLEMS[res["problem"]][1], net.nclasses,
                                  net.kernel if net.kind == "conv" else None, net.nparams)
            d, s, lr = res["grid"]
            cyc = Cycle(ntime=net.nlayers, max_levels=LEVELS, cfactor=CFACTOR, batched=True)
            pred = predict(nspec, Strategy(d, s, lr, cyc, M, "oneshot"), cal,
                           cores=args.cores).seconds
            walls, cpus, _, nclean = clean_sample(res)
            wall = statistics.median(walls)
            rows.append(dict(problem=res["problem"], grid=f"{d}x{s}x{lr}", P=P, wall=wall,
                             cpu=statistics.median(cpus), predicted=pred,
                             error=pred / wall - 1, clean=nclean, tries=len(res["times"]),
                             filtered=res["filter"]))
            print(f"measured {res['problem']} {d}x{s}x{lr} at P = {P}: {wall:.4f} s, "
                  f"model {pred:.4f} s ({pred / wall - 1:+.0%})", flush=True)
        if args.json:  # what is measured so far, should a time limit cut the run off
            dump(rows, args.json)
    report(rows, args.json, args.plot)


def report(rows, json_path=None, plot=None) -> None:
    print("measured: median wall s of the clean gradients (no rank waited for a core); "
          "* = more ranks than cores (all gradients, model with shared cores)")
    print(f"{'problem':8s} {'grid':7s} {'P':>2s} {'measured':>9s} {'model s':>9s} "
          f"{'error':>6s} {'clean':>6s} {'cpu s':>8s}")
    for r in rows:
        mark = "" if r["filtered"] and r["clean"] else "*"
        clean = f"{r['clean']}/{r['tries']}" if r["filtered"] else "-"
        print(f"{r['problem']:8s} {r['grid']:7s} {r['P']:2d} {r['wall']:8.4f}{mark:1s} "
              f"{r['predicted']:9.4f} {r['error']:+6.0%} {clean:>6s} {r['cpu']:8.4f}")
    errors = [r["error"] for r in rows]
    print(f"within 25%: {within(errors)} of {len(rows)} (worst {signed_worst(errors):+.0%})")
    if json_path:
        dump(rows, json_path)
    if plot:
        plot_predicted_vs_measured(rows, "wall", plot, "measured s / gradient (median wall)")


if __name__ == "__main__":
    main()
