"""Where does a prediction of the performance model miss? A real gradient's step calls, rank
by rank, beside the model's simulated ones (braidpy.perf.timeline).

Runs bench_perf_model.py's dense layer-parallel gradient (GradientSolver.evaluate, warm)
under ``mpiexec -n P``, records every step call (``braidpy.perf.timeline.recording``),
keeps the fastest of --repeats, pairs the calls with the model's in order and splits the
difference into calls (calibration) and gaps labelled by the model operations in them.

    python benchmarks/bench_perf_timeline.py [--calibration FILE] [--ranks 1 2 4]
        [--samples 64] [--levels 2] [--cf 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _perf_validation import (common_arguments, dense_validation_app,  # noqa: E402
                              run_calibration, run_worker)


def worker(spec: dict) -> None:
    from mpi4py import MPI

    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNetApp
    from braidpy.perf.allocator import keep_freed_memory
    from braidpy.perf.timeline import recording

    keep_freed_memory()  # as braidpy calibrate measures
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    layers = spec["layers"]
    net, params, app = dense_validation_app(spec, recording(ResNetApp))
    app.calls = []
    opts = dict(max_levels=spec["levels"], cfactor=spec["cf"], skip=spec["skip"],
                abs_tol=1e-7, storage="final")
    solver = GradientSolver(app, 0.0, net.tstop, layers, comm=comm if comm.Get_size() > 1
                            else None, primal=opts, oneshot=tuple(spec["m"]))
    best = None
    for k in range(spec["repeats"] + 2):  # two warm-ups
        params += 1e-4
        if spec["skip"]:  # skip applies to a cold start only: both solves reset
            solver.reset()
        app.calls.clear()
        comm.Barrier()
        start = time.perf_counter()
        if rank == 0:
            solver.primal_core.set_initial_condition(app.initial_state())
        solver.evaluate()
        end = time.perf_counter()
        comm.Barrier()
        first = comm.allreduce(start, op=MPI.MIN)  # the clock is the machine's
        wall = comm.allreduce(end, op=MPI.MAX) - first
        calls = [(c.tag, c.rows, c.batch, c.start - first, c.end - first)
                 for c in app.calls]
        if k >= 2 and (best is None or wall < best[0]):
            best = (wall, calls)
    solver.close()
    gathered = comm.gather(best[1])
    if rank == 0:
        print("RESULT " + json.dumps({"wall": best[0], "calls": gathered}), flush=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--levels", type=int, default=2)
    p.add_argument("--cf", type=int, default=4)
    p.add_argument("--m", type=int, nargs=2, default=[2, 2], metavar=("M1", "M2"))
    p.add_argument("--skip", action="store_true",
                   help="skip the first down-sweep, timing cold gradients (as "
                        "bench_perf_model.py's skip setting)")
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    from braidpy.perf.model import NetSpec, Strategy, predict
    from braidpy.perf.schedule import Cycle
    from braidpy.perf.timeline import Call, compare_timelines, format_comparison

    cal = run_calibration(args, [f"dense:{args.width}"],
                          [16, 128, args.samples, 4 * args.samples], [1, 4, 16, 64],
                          "braidpy-bench-calibration.json")
    net = NetSpec("dense", (args.width,), args.layers, args.samples)
    out = []
    print(f"dense ResNet width {args.width}, {args.layers} layers, {args.samples} samples, "
          f"L{args.levels} cf{args.cf}{' skip cold' if args.skip else ''} "
          f"m{args.m[0]}/{args.m[1]}; fastest of "
          f"{args.repeats} gradients")
    for P in args.ranks:
        spec = dict(width=args.width, layers=args.layers, samples=args.samples,
                    levels=args.levels, cf=args.cf, m=args.m, repeats=args.repeats,
                    skip=args.skip)
        res = run_worker(__file__, spec, P)
        s = Strategy(1, 1, P, Cycle(ntime=args.layers, max_levels=args.levels,
                                    cfactor=args.cf, skip=args.skip, batched=True),
                     tuple(args.m), cold=args.skip)
        # ranks beyond the cores share them: the model's compute x ranks / cores, a
        # lower bound that is not validated (the row says so)
        pred = predict(net, s, cal, cores=args.cores, record=True)
        measured = [[Call(*c) for c in rank_calls] for rank_calls in res["calls"]]
        comparison = compare_timelines(measured, pred.timeline.events, res["wall"],
                                       pred.timeline.makespan)
        print(f"\n== P = {P}" + (f" ({P} ranks on {args.cores} cores: the model a lower "
                                  f"bound, not validated)" if P > args.cores else ""))
        print(format_comparison(comparison))
        out.append(dict(P=P, wall=res["wall"], predicted=pred.seconds,
                        makespan=pred.timeline.makespan, calls=res["calls"],
                        model=[[e.rank, e.op.kind, e.op.tag, e.op.rows, e.op.batch,
                                e.start, e.end] for e in pred.timeline.events]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
