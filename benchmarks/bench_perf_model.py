"""Does the performance model (braidpy.perf) predict the seconds per layer-parallel gradient
within 25 % for each MGRIT setting and rank count?

Per setting (layer ranks P, levels, cfactor, skip, one-shot (m1, m2) or exact): the
trainer's LayerParallelEvaluator.gradient on a Peaks-sized dense ResNet under
``mpiexec -n P``, beside the model's prediction from a calibration (``braidpy
calibrate``; made here when none is given). "serial" times ResNet.loss_and_gradient;
skip settings time cold evaluations, the others warm; exact mode is predicted with the
measured iteration counts. Median of --repeats of the slowest rank; rank counts above
--cores are skipped, saying so. --json also keeps each prediction's critical-path parts
(and FILE.calibration.json the costs used); --plot a PNG.

    python benchmarks/bench_perf_model.py [--calibration FILE] [--plot FILE.png]
        [--json FILE] [--repeats R] [--quick] [--ranks 1 2 4] [--cores N]
    python benchmarks/bench_perf_model.py --from-json RUN1.json RUN2.json ... [--plot ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _perf_validation import (WARMUP_GRADIENTS, common_arguments,  # noqa: E402
                              dense_validation_app, dump, plot_predicted_vs_measured,
                              ranks_with_a_core, run_calibration, run_worker,
                              signed_worst, within)

# (name, levels, cfactor, skip, mode, (m1, m2)); ntime is --layers.
SETTINGS = [
    ("L2 cf4 m2/2", 2, 4, False, "oneshot", (2, 2)),
    ("L2 cf2 m2/2", 2, 2, False, "oneshot", (2, 2)),
    ("L3 cf2 m1/1", 3, 2, False, "oneshot", (1, 1)),
    ("L3 cf4 m2/2", 3, 4, False, "oneshot", (2, 2)),
    ("L2 cf4 skip cold m2/2", 2, 4, True, "oneshot", (2, 2)),
    ("L2 cf4 exact", 2, 4, False, "exact", None),
    ("serial", 1, 4, False, "oneshot", (1, 1)),
]


def worker(spec: dict) -> None:
    """Time spec['repeats'] gradients on this communicator; rank 0 prints RESULT."""
    from mpi4py import MPI

    from braidpy.adjoint import GradientSolver
    from braidpy.perf.allocator import keep_freed_memory

    if not spec.get("faults"):  # as braidpy calibrate measures (braidpy.perf.allocator)
        keep_freed_memory()

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    layers = spec["layers"]
    net, params, app = dense_validation_app(spec)
    opts = dict(max_levels=spec["levels"], cfactor=spec["cf"], skip=spec["skip"],
                abs_tol=1e-7, storage="final")
    oneshot = tuple(spec["m"]) if spec["mode"] == "oneshot" else None
    solver = GradientSolver(app, 0.0, net.tstop, layers, comm=comm if comm.Get_size() > 1
                            else None, primal=opts, oneshot=oneshot)
    # Serial propagation on one rank is what serial training runs: the network's own
    # sweeps (ResNet.loss_and_gradient), which the model prices by the calibrated
    # `serial` where the layer has them; across layer ranks, the core's.
    own_sweeps = spec["levels"] == 1 and comm.Get_size() == 1
    times, cpus, iters = [], [], []
    for k in range(spec["repeats"] + WARMUP_GRADIENTS):
        params += 1e-4  # a new parameter, as after an optimizer step
        if spec["skip"]:
            solver.reset()
        comm.Barrier()
        start, cpu = time.perf_counter(), time.process_time()
        if own_sweeps:
            net.loss_and_gradient(params, app.X, app.C)
            g = None
        else:
            if rank == 0:
                solver.primal_core.set_initial_condition(app.initial_state())
            g = solver.evaluate()
        grad = np.zeros(net.nparams)
        comm.Allreduce(MPI.IN_PLACE, grad)
        cpu = time.process_time() - cpu  # before the barrier: MPICH spins in it
        comm.Barrier()
        wall = time.perf_counter() - start
        most = np.array([cpu, wall])  # the slowest rank's
        comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
        cpu, wall = most.tolist()
        if k >= WARMUP_GRADIENTS:  # the first include exact mode's cold start
            times.append(wall)
            cpus.append(cpu)
            iters.append((1, 1) if g is None else (g.primal.iterations,
                                                   g.adjoint.iterations))
    solver.close()
    if rank == 0:
        print("RESULT " + json.dumps({"times": times, "cpu": cpus, "iterations": iters}),
              flush=True)


def measure(spec: dict, nranks: int) -> dict:
    return run_worker(__file__, spec, nranks)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_arguments(p)
    p.add_argument("--plot", help="write predicted vs measured to this PNG")
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="one setting, 2 repeats")
    p.add_argument("--allocator-default", action="store_true",
                   help="leave glibc's allocator as it is in the gradients (it returns "
                        "large temporaries to the kernel: page faults the calibration, "
                        "which keeps them, does not see)")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="measure nothing: the medians of earlier --json outputs")
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.from_json:
        rows = aggregate(args.from_json)
        print(f"medians over {len(args.from_json)} runs")
        report(rows, args.json, args.plot)
        return
    args.ranks = ranks_with_a_core(args.ranks, args.cores)
    if not args.ranks:
        p.error(f"every --ranks count is above --cores {args.cores}")

    from braidpy.perf.model import NetSpec, Strategy, predict
    from braidpy.perf.schedule import Cycle

    cal = run_calibration(args, [f"dense:{args.width}"],
                          [16, 128, args.samples, 4 * args.samples], [1, 4, 16, 64],
                          "braidpy-bench-calibration.json")
    net = NetSpec("dense", (args.width,), args.layers, args.samples)
    settings = SETTINGS[:1] if args.quick else SETTINGS
    repeats = 2 if args.quick else args.repeats
    rows = []
    print(f"dense ResNet width {args.width}, {args.layers} layers, {args.samples} samples;"
          f" {args.cores} cores; median wall time of {repeats} gradients")
    for name, levels, cf, skip, mode, m in settings:
        for P in args.ranks:
            if levels == 1 and P > 1:
                continue
            spec = dict(width=args.width, layers=args.layers, samples=args.samples,
                        levels=levels, cf=cf, skip=skip, mode=mode, m=m, repeats=repeats,
                        faults=args.allocator_default)
            res = measure(spec, P)
            cpu = statistics.median(res["cpu"])
            t = statistics.median(res["times"])  # wall: every rank has its core
            its = tuple(int(statistics.median(x)) for x in zip(*res["iterations"]))
            cyc = Cycle(ntime=args.layers, max_levels=levels, cfactor=cf, skip=skip,
                        batched=True)
            s = Strategy(1, 1, P, cyc, its, mode, cold=skip)
            prediction = predict(net, s, cal)
            pred = prediction.seconds
            err = pred / t - 1
            rows.append(dict(setting=name, P=P, cpu=cpu, wall=t, measured=t,
                             predicted=pred, error=err, iterations=its,
                             parts=dict(prediction.parts)))
            # Each row as it comes, and the JSON so far: a run cut off by a time
            # limit (a GPU machine's) keeps what it measured.
            print(f"measured {name} at P = {P}: {t:.4f} s, model {pred:.4f} s "
                  f"({err:+.0%})", flush=True)
            if args.json:
                dump(rows, args.json)
    report(rows, args.json, args.plot)


def aggregate(paths):
    """The median of each (setting, P) over several --json outputs."""
    runs = [json.load(open(path)) for path in paths]
    keys = [(r["setting"], r["P"]) for r in runs[0]]
    out = []
    for key in keys:
        same = [r for run in runs for r in run if (r["setting"], r["P"]) == key]
        for r in same:  # files written before 2026-11-29 may have compared CPU time
            r.setdefault("measured", r["cpu"])
        row = dict(same[0])
        for field in ("cpu", "wall", "measured", "predicted"):
            row[field] = statistics.median(r[field] for r in same)
        row["error"] = row["predicted"] / row["measured"] - 1
        row["runs"] = len(same)
        out.append(row)
    return out


def report(rows, json_path=None, plot=None):
    """Print the table, the speedups and the summary; write JSON and the PNG."""
    print("measured: median wall s of the gradients (the slowest rank's); cpu s: its CPU "
          "time")
    print(f"{'setting':24s} {'P':>2s} {'measured':>9s} {'model s':>10s} {'error':>6s} "
          f"{'cpu s':>8s}  iterations")
    for r in rows:
        r.setdefault("measured", r["cpu"])
        print(f"{r['setting']:24s} {r['P']:2d} {r['measured']:9.4f} "
              f"{r['predicted']:10.4f} {r['error']:+6.0%} {r['cpu']:8.4f}  "
              f"{tuple(r['iterations'])}")
    # Speedups over the same setting on one rank: drifts of the machine's speed
    # between the calibration and the runs cancel; the schedule model remains.
    one = {r["setting"]: r for r in rows if r["P"] == 1}
    print(f"\n{'setting':24s} {'P':>2s} {'measured speedup':>17s} {'model':>6s}")
    for r in rows:
        base = one.get(r["setting"])
        if r["P"] > 1 and base is not None:
            r["speedup"] = base["measured"] / r["measured"]
            r["speedup_model"] = base["predicted"] / r["predicted"]
            print(f"{r['setting']:24s} {r['P']:2d} {r['speedup']:16.2f}x "
                  f"{r['speedup_model']:5.2f}x")
    errors = [r["error"] for r in rows]
    print(f"measured within 25%: {within(errors)} of {len(rows)} (worst "
          f"{signed_worst(errors):+.0%})")
    if json_path:
        dump(rows, json_path)
    if plot:
        plot_predicted_vs_measured(rows, "measured", plot,
                                   "measured s / gradient (median wall)")


if __name__ == "__main__":
    main()
