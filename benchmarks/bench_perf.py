"""Does the performance model (braidpy.perf) predict the seconds per gradient within 25 %,
and where does a prediction miss? Each check beside the model's prediction from a
calibration (--calibration, else ``braidpy calibrate`` now, kept beside --json); median of
--repeats, the slowest rank's; rank counts above --cores skipped, except by timeline.
  model: a dense ResNet's gradient under ``mpiexec -n P`` per MGRIT setting; speedups.
  grids: ``trainer.evaluator.gradient`` on every data x space x layers grid of P ranks.
  timeline: every step call of model's gradient beside the model's, the gaps split out.

    python benchmarks/bench_perf.py model [--ranks 1 2 4] [--calibration FILE]
        [--json FILE] [--plot FILE.png] [--quick] [--repeats R]
    python benchmarks/bench_perf.py grids [--problems digits peaks digits28] ...
    python benchmarks/bench_perf.py timeline [--samples 64] [--levels 2] [--cf 4] ...
    python benchmarks/bench_perf.py model|grids --from-json RUN1.json ... [--plot ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from _harness import print_table
from _perf_validation import (CFACTOR, LEVELS, M, PROBLEMS, dump, plot_predicted_vs_measured,
                              problem, run_calibration, run_worker, worker)

from braidpy.perf.auto import training_spec
from braidpy.perf.model import NetSpec, Strategy, predict
from braidpy.perf.schedule import Cycle
from braidpy.perf.timeline import Call, compare_timelines, format_comparison

# model: (name, levels, cfactor, skip, mode, (m1, m2)); ntime is --layers.
SETTINGS = [
    ("L2 cf4 m2/2", 2, 4, False, "oneshot", (2, 2)),
    ("L2 cf2 m2/2", 2, 2, False, "oneshot", (2, 2)),
    ("L3 cf2 m1/1", 3, 2, False, "oneshot", (1, 1)),
    ("L3 cf4 m2/2", 3, 4, False, "oneshot", (2, 2)),
    ("L2 cf4 skip cold m2/2", 2, 4, True, "oneshot", (2, 2)),
    ("L2 cf4 exact", 2, 4, False, "exact", None),
    ("serial", 1, 4, False, "oneshot", (1, 1)),
]


def dense_calibration(args):
    return run_calibration(args, [f"dense:{args.width}"],
                           [16, 128, args.samples, 4 * args.samples], [1, 4, 16, 64],
                           "braidpy-bench-calibration.json")


def check_model(args) -> list:
    cal = dense_calibration(args)
    net = NetSpec("dense", (args.width,), args.layers, args.samples)
    repeats = 2 if args.quick else args.repeats
    rows = []
    print(f"dense ResNet width {args.width}, {args.layers} layers, {args.samples} samples;"
          f" {args.cores} cores; median wall time of {repeats} gradients")
    for name, levels, cf, skip, mode, m in SETTINGS[:1] if args.quick else SETTINGS:
        for P in [P for P in args.ranks if levels > 1 or P == 1]:
            spec = dict(check="model", width=args.width, layers=args.layers,
                        samples=args.samples, levels=levels, cf=cf, skip=skip, mode=mode,
                        m=m, repeats=repeats, faults=args.allocator_default)
            res = run_worker(__file__, spec, P)
            t = statistics.median(res["times"])  # wall: every rank has its core
            its = tuple(int(statistics.median(x)) for x in zip(*res["iterations"]))
            cyc = Cycle(ntime=args.layers, max_levels=levels, cfactor=cf, skip=skip,
                        batched=True)
            prediction = predict(net, Strategy(1, 1, P, cyc, its, mode, cold=skip), cal)
            pred = prediction.seconds
            rows.append(dict(setting=name, P=P, cpu=statistics.median(res["cpu"]), wall=t,
                             measured=t, predicted=pred, error=pred / t - 1,
                             iterations=its, parts=dict(prediction.parts)))
            print(f"measured {name} at P = {P}: {t:.4f} s, model {pred:.4f} s "
                  f"({pred / t - 1:+.0%})", flush=True)
            dump(rows, args.json)  # so far: a run cut off by a time limit keeps it
    return rows


def check_grids(args) -> list:
    samples = sorted({PROBLEMS[n][1] // k for n in args.problems for k in (1, 2, 4)})
    cal = run_calibration(args, [PROBLEMS[n][0] for n in args.problems], samples,
                          [1, 4, 16, 32], "braidpy-bench-grids-calibration.json")
    rows = []  # each problem in processes of its own, as a training run is
    for P, name in [(P, name) for P in args.ranks for name in args.problems]:
        for res in run_worker(__file__, dict(check="grids", problems=[name],
                                             repeats=args.repeats), P):
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
        dump(rows, args.json)  # what is measured so far, should a time limit cut it off
    return rows


def check_timeline(args) -> None:
    cal = dense_calibration(args)
    net = NetSpec("dense", (args.width,), args.layers, args.samples)
    out = []
    print(f"dense ResNet width {args.width}, {args.layers} layers, {args.samples} samples, "
          f"L{args.levels} cf{args.cf}{' skip cold' if args.skip else ''} "
          f"m{args.m[0]}/{args.m[1]}; fastest of {args.repeats} gradients")
    for P in args.ranks:
        spec = dict(check="timeline", width=args.width, layers=args.layers,
                    samples=args.samples, levels=args.levels, cf=args.cf, m=args.m,
                    repeats=args.repeats, skip=args.skip)
        res = run_worker(__file__, spec, P)
        s = Strategy(1, 1, P, Cycle(ntime=args.layers, max_levels=args.levels,
                                    cfactor=args.cf, skip=args.skip, batched=True),
                     tuple(args.m), cold=args.skip)
        # ranks beyond the cores share them: the model a lower bound (the row says so)
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
    dump(out, args.json)


def aggregate(paths):
    """The median of each (setting, P) over several model --json outputs."""
    runs = [json.load(open(path)) for path in paths]
    out = []
    for key in [(r["setting"], r["P"]) for r in runs[0]]:
        same = [r for run in runs for r in run if (r["setting"], r["P"]) == key]
        row = dict(same[0])
        for field in ("cpu", "wall", "measured", "predicted"):
            row[field] = statistics.median(r[field] for r in same)
        row["error"] = row["predicted"] / row["measured"] - 1
        row["runs"] = len(same)
        out.append(row)
    return out


def report(check, rows, json_path=None, plot=None) -> None:
    """Print the table (model: the speedups too) and the summary; write JSON and PNG."""
    print("measured: median wall s of the gradients (the slowest rank's); cpu s: its CPU "
          "time")
    for r in rows:
        r.setdefault("measured", r["wall"])
    keys = ["setting", "P"] if check == "model" else ["problem", "grid", "P"]
    print_table(keys + ["measured", "model s", "error", "cpu s"]
                + (["iterations"] if check == "model" else []),
                [[r[k] for k in keys] + [f"{r['measured']:.4f}", f"{r['predicted']:.4f}",
                                         f"{r['error']:+.0%}", f"{r['cpu']:.4f}"]
                 + ([tuple(r["iterations"])] if check == "model" else []) for r in rows])
    if check == "model":
        # Speedups over one rank: drifts of the machine's speed since the calibration cancel
        one = {r["setting"]: r for r in rows if r["P"] == 1}
        table = []
        for r in rows:
            base = one.get(r["setting"])
            if r["P"] > 1 and base is not None:
                r["speedup"] = base["measured"] / r["measured"]
                r["speedup_model"] = base["predicted"] / r["predicted"]
                table.append([r["setting"], r["P"], f"{r['speedup']:.2f}x",
                              f"{r['speedup_model']:.2f}x"])
        print_table(["setting", "P", "measured speedup", "model"], table)
    errors = [r["error"] for r in rows]
    print(f"within 25%: {sum(abs(e) <= 0.25 for e in errors)} of {len(rows)} "
          f"(worst {max(errors, key=abs):+.0%})")
    dump(rows, json_path)
    if plot:
        plot_predicted_vs_measured(rows, "measured", plot,
                                   "measured s / gradient (median wall)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("check", nargs="?", choices=("model", "grids", "timeline"),
                   default="model", help="what is compared with the model (default model)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--calibration", help="braidpy calibrate's file (default: measure now)")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="cores of this machine (rank counts above it are skipped)")
    p.add_argument("--plot", help="model, grids: write predicted vs measured to this PNG")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="model, grids: report earlier --json runs (model: their medians)")
    for name, default, words in (("repeats", 5, "gradients timed per row"),
                                 ("layers", 64, "model, timeline"), ("width", 8, "model, timeline"),
                                 ("samples", 1000, "model, timeline"), ("levels", 2, "timeline"),
                                 ("cf", 4, "timeline")):
        p.add_argument(f"--{name}", type=int, default=default, help=words)
    p.add_argument("--quick", action="store_true", help="model: one setting, 2 repeats")
    p.add_argument("--allocator-default", action="store_true", help="model: leave glibc's "
                   "allocator as it is (page faults the calibration does not see)")
    p.add_argument("--problems", nargs="+", choices=sorted(PROBLEMS),
                   default=["digits", "peaks"], help="grids")
    p.add_argument("--m", type=int, nargs=2, default=[2, 2], metavar=("M1", "M2"),
                   help="timeline")
    p.add_argument("--skip", action="store_true",
                   help="timeline: skip the first down-sweep, timing cold gradients")
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.from_json and args.check != "timeline":
        rows = (aggregate(args.from_json) if args.check == "model" else
                [r for path in args.from_json for r in json.load(open(path))])
        report(args.check, rows, args.json, args.plot)
        return
    if args.check == "timeline":
        return check_timeline(args)
    over = [P for P in args.ranks if P > args.cores]
    if over:  # the model gives a lower bound there, which is not validated
        print(f"skipped P = {', '.join(map(str, over))}: more ranks than the {args.cores} "
              f"cores (the model gives a lower bound there)", flush=True)
    args.ranks = [P for P in args.ranks if P <= args.cores]
    if not args.ranks:
        p.error(f"every --ranks count is above --cores {args.cores}")
    rows = check_model(args) if args.check == "model" else check_grids(args)
    report(args.check, rows, args.json, args.plot)


if __name__ == "__main__":
    main()
