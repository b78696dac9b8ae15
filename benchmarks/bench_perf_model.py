"""Predicted vs measured seconds per gradient: the performance model (braidpy.perf) checked.

For each setting (layer ranks P, MGRIT levels, cfactor, skip, one-shot (m1, m2) or exact
to tolerance) this script times braidpy's layer-parallel gradient (the trainer's
LayerParallelEvaluator.gradient: opening, primal MGRIT, classifier, adjoint MGRIT,
per-layer gradients, allreduce) on a Peaks-sized dense ResNet, under
``mpiexec -n P`` for P > 1, and prints it beside the model's prediction from a
calibration file (``braidpy calibrate``; made here when none is given). Settings with
``skip`` time cold evaluations (both solves reset before each gradient: skip applies only
to a cold start), the others warm ones as in training. Exact mode is predicted with the
iteration counts the run measured (the model predicts time per iteration, not
convergence). Writes a PNG of predicted vs measured with ``--plot``.

The model assumes every rank has a core to itself. On a machine shared with other jobs
a rank is now and then descheduled while runnable, and its partner spins in MPI
meanwhile, which inflates both wall and CPU time. So each gradient also records how
long each rank waited in the run queue (Linux ``/proc/self/schedstat``) and, with no
more ranks than cores, only *clean* gradients count: those during which no rank waited
more than 2 % of the gradient for a core (up to ``--max-tries`` gradients are run to
get ``--repeats`` clean ones; the table says how many were clean). Their wall time is
compared with the model. With no clean gradient the row falls back to all of them and
is marked.

The machine this was written on has 2 shared cores: with 4 ranks the model is told so
(``cores``) and scales compute by ranks / cores; read those rows as a check of that
simple assumption, not of the schedule (they are never clean: ranks share cores).

    python benchmarks/bench_perf_model.py [--calibration FILE] [--plot FILE.png]
        [--json FILE] [--repeats R] [--max-tries T] [--quick] [--ranks 1 2 4] [--cores 2]
    python benchmarks/bench_perf_model.py --from-json RUN1.json RUN2.json ... [--plot ...]

--json FILE.json also keeps each prediction's critical-path parts, and, when the run
calibrates, FILE.calibration.json the costs the predictions used (for studying a misfit).
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

from _perf_validation import (WARMUP_GRADIENTS, clean_sample,  # noqa: E402
                              common_arguments, dense_validation_app, dump,
                              plot_predicted_vs_measured, run_calibration, run_worker,
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
    from braidpy.perf.runqueue import CLEAN_SHARE, run_delay

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
    times, cpus, iters, delays = [], [], [], []
    clean = 0
    for k in range(spec["tries"] + WARMUP_GRADIENTS):
        params += 1e-4  # a new parameter, as after an optimizer step
        if spec["skip"]:
            solver.reset()
        comm.Barrier()
        start, cpu, queued = time.perf_counter(), time.process_time(), run_delay()
        if rank == 0:
            solver.primal_core.set_initial_condition(app.initial_state())
        g = solver.evaluate()
        grad = np.zeros(net.nparams)
        comm.Allreduce(MPI.IN_PLACE, grad)
        cpu = time.process_time() - cpu  # before the barrier: MPICH spins in it
        queued = run_delay() - queued
        comm.Barrier()
        wall = time.perf_counter() - start
        # The same values on every rank, so that every rank stops at the same gradient.
        most = np.array([cpu, queued, wall])
        comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
        cpu, queued, wall = most.tolist()
        if k >= WARMUP_GRADIENTS:  # the first include exact mode's cold start
            ok = not spec["filter"] or queued <= CLEAN_SHARE * wall
            clean += ok
            times.append(wall)
            cpus.append(cpu)
            delays.append(queued)
            iters.append((g.primal.iterations, g.adjoint.iterations))
            if (clean if spec["filter"] else k + 1 - WARMUP_GRADIENTS) >= spec["repeats"]:
                break
    solver.close()
    if rank == 0:
        print("RESULT " + json.dumps({"times": times, "cpu": cpus, "iterations": iters,
                                      "delays": delays, "filter": spec["filter"]}),
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
        report(rows, args.cores, args.json, args.plot)
        return

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
          f" {args.cores} cores; median of {repeats} gradients")
    for name, levels, cf, skip, mode, m in settings:
        for P in args.ranks:
            if levels == 1 and P > 1:
                continue
            spec = dict(width=args.width, layers=args.layers, samples=args.samples,
                        levels=levels, cf=cf, skip=skip, mode=mode, m=m, repeats=repeats,
                        tries=max(args.max_tries, repeats), filter=P <= args.cores,
                        faults=args.allocator_default)
            res = measure(spec, P)
            walls, cpus, its_all, nclean = clean_sample(res)
            cpu = statistics.median(cpus)
            wall = statistics.median(walls)
            # Clean gradients: the wall time (no rank lost its core); otherwise, as
            # before, the slowest rank's CPU time (waits spin in MPICH, so they count).
            t = wall if res["filter"] and nclean else cpu
            its = tuple(int(statistics.median(x)) for x in zip(*its_all))
            cyc = Cycle(ntime=args.layers, max_levels=levels, cfactor=cf, skip=skip,
                        batched=True)
            s = Strategy(1, 1, P, cyc, its, mode, cold=skip)
            prediction = predict(net, s, cal)
            pred = prediction.seconds
            shared = predict(net, s, cal, cores=args.cores).seconds
            err = pred / t - 1  # t: what "measured" means for this row
            rows.append(dict(setting=name, P=P, cpu=cpu, wall=wall, measured=t,
                             predicted=pred, predicted_shared=shared, error=err,
                             error_wall=shared / wall - 1, iterations=its, clean=nclean,
                             tries=len(res["times"]), filtered=res["filter"],
                             queued=statistics.median(res["delays"]),
                             parts=dict(prediction.parts)))
            # Each row as it comes, and the JSON so far: a run cut off by a time
            # limit (a lent GPU machine's) keeps what it measured.
            print(f"measured {name} at P = {P}: {t:.4f} s, model {pred:.4f} s "
                  f"({err:+.0%})", flush=True)
            if args.json:
                dump(rows, args.json)
    report(rows, args.cores, args.json, args.plot)


def aggregate(paths):
    """The median of each (setting, P) over several --json outputs."""
    runs = [json.load(open(path)) for path in paths]
    keys = [(r["setting"], r["P"]) for r in runs[0]]
    out = []
    for key in keys:
        same = [r for run in runs for r in run if (r["setting"], r["P"]) == key]
        for r in same:  # files of before the clean filter compared CPU time
            r.setdefault("measured", r["cpu"])
        row = dict(same[0])
        for field in ("cpu", "wall", "measured", "predicted", "predicted_shared"):
            row[field] = statistics.median(r[field] for r in same)
        row["clean"] = sum(r.get("clean", 0) for r in same)
        row["tries"] = sum(r.get("tries", 0) for r in same)
        row["error"] = row["predicted"] / row["measured"] - 1
        row["error_wall"] = row["predicted_shared"] / row["wall"] - 1
        row["runs"] = len(same)
        out.append(row)
    return out


def report(rows, cores, json_path=None, plot=None):
    """Print the table, the speedups and the summary; write JSON and the PNG."""
    print("measured: wall s of the clean gradients (no rank waited for a core), else the "
          "slowest rank's CPU s (marked *)")
    print(f"{'setting':24s} {'P':>2s} {'measured':>9s} {'model s':>10s} {'error':>6s} "
          f"{'clean':>7s} {'cpu s':>8s} {'wall s':>9s} {'model s':>10s} {'error':>6s}  "
          f"iterations")
    for r in rows:
        r.setdefault("measured", r["cpu"])
        mark = "" if r.get("filtered") and r.get("clean") else "*"
        clean = f"{r.get('clean', 0)}/{r.get('tries', 0)}" if r.get("filtered") else "-"
        print(f"{r['setting']:24s} {r['P']:2d} {r['measured']:8.4f}{mark:1s} "
              f"{r['predicted']:10.4f} {r['error']:+6.0%} {clean:>7s} {r['cpu']:8.4f} "
              f"{r['wall']:9.4f} {r['predicted_shared']:10.4f} {r['error_wall']:+6.0%}  "
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
          f"{signed_worst(errors):+.0%}); wall time (model with ranks sharing {cores} "
          f"cores): {within([r['error_wall'] for r in rows])} of {len(rows)}")
    if json_path:
        dump(rows, json_path)
    if plot:
        plot_predicted_vs_measured(rows, "measured", plot,
                                   "measured s / gradient (clean wall, else slowest CPU)")


if __name__ == "__main__":
    main()
