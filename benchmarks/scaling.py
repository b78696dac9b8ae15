"""Where does layer parallelism pay on this host, and against what? Serial vs layer-parallel
vs data-parallel vs the best grid vs ``--grid auto``, per step and to the same loss.

Per rank count P: serial (``braidpy train --mode serial``), layer (``--grid 1,1,P`` with
the setting ``--grid auto`` would choose and ``--quality-check-every K``), data (``--grid
P,1,1 --mode serial``), best (the fastest grid at P), auto (``--grid auto``, calibrated
first). Rows: Peaks (``--preset paper``, 5000 samples), 256 and 1024 layers L-BFGS, 1024
layers Adam on batches of 32; heat and ode (ex02/ex01, 16384 steps, MGRIT to 1e-8 against
sequential stepping). Timed: seconds per step (median) and to the serial run's loss (a run
stops there, at M = 2K steps or at --cap x serial's time); the slowest rank. One thread
per rank; --budget shares the time among the launches; each cut says why.

    python benchmarks/scaling.py [--json FILE] [--quick | --small] [--budget S]
        [--ranks 1 2 4 ...] [--steps K] [--rows ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_scaling  # noqa: E402
from _harness import dump_json, find_mpiexec, host_info, print_host  # noqa: E402
from _scaling_runs import (Runner, first_reaching, launch_seconds, losses_of,  # noqa: E402
                           metric, print_tables, read_log, run_training, seconds_of, short,
                           target_loss, time_launch, time_rows, time_solves, trailing_means,
                           training_metrics, training_rows, with_speedup)

__all__ = ["first_reaching", "losses_of", "read_log", "seconds_of", "target_loss",
           "trailing_means", "training_metrics", "with_speedup", "short", "main"]
NAMES = ("per_step", "to_target")


def cell(P, column, grid, over, metrics, **extra):
    return {"P": P, "column": column, "grid": grid, "over": over, "metrics": metrics, **extra}


def reasons(names, why, kind):
    return {n: metric(reason=why, kind=kind) for n in names}


def best_cell(cells, P, names, over):
    """The fastest grid measured at P, per metric."""
    metrics = {}
    for name in names:
        have = [c for c in cells if c["P"] == P and c["column"] != "best"
                and "seconds" in c["metrics"].get(name, {})]
        c = min(have, key=lambda c: c["metrics"][name]["seconds"], default=None)
        metrics[name] = {**c["metrics"][name], "column": c["column"], "grid": c["grid"]} \
            if c else metric(reason=f"no grid measured a number at P = {P}", kind="none")
    return cell(P, "best", None, over, metrics)


def setting_args(s):
    """braidpy train's options of a Setting (as a dict)."""
    return ["--m1", str(s["m1"]), "--m2", str(s["m2"]), "--relax", s["relax"], "--levels",
            str(s["levels"]), "--cf", str(s["cfactor"])]


def grids(P):
    """The grids a training row is launched on at P (besides --grid auto)."""
    return ([f"{P},1,1"] if P > 1 else []) + [f"1,1,{P}"]


def calibrate(runner, ranks, train):
    """``braidpy calibrate`` on this host at the most ranks (network costs measured)."""
    path, P = os.path.join(runner.workdir, "calibration.json"), max(ranks)
    per_rank = sorted({max(1, r["samples"] // d) for r in train for d in ranks})
    picks = sorted({per_rank[0], per_rank[-1], per_rank[len(per_rank) // 2]})
    cmd = [sys.executable, "-m", "braidpy", "calibrate", "-o", path, "--layer", "dense:8",
           "--samples", *map(str, picks), "--cores", str(runner.cores), "--repeats",
           "2" if runner.args.small else "3", "-q"]
    why = runner.skip_reason(P, launch_seconds(P) + 3)
    if why:
        return {"status": "skipped", "reason": why}
    run = runner.run(P, cmd, 60 + 5 * P)
    ok = run["status"] == "exited" and run["rc"] == 0 and os.path.exists(path)
    runner.calibration = path if ok else None
    return {"path": runner.calibration, "status": "ok" if ok else "failed",
            "seconds": run["wall_seconds"], "cmd": run["cmd"],
            "reason": None if ok else (run["reason"] or run["output_tail"][-400:])}


def auto_choice(row, P, calibration, check_every, grid=None):
    """What --grid auto picks for this row at P (braidpy.perf.auto.decide_grid, as the
    command line runs it): the grid and the MGRIT setting, the fastest qualified one with
    quality checks every ``check_every`` steps, else (0) the preset's. ``grid``: only it."""
    if P == 1:
        return {"shape": [1, 1, 1], "summary": "one rank: the only grid"}
    if not calibration:
        return {"error": "no calibration (braidpy calibrate failed or was skipped)"}
    try:
        from braidpy.nn import ResNet
        from braidpy.perf.auto import (Setting, decide_grid, training_settings,
                                       training_spec, trials_per_step)
        from braidpy.train.presets import preset

        s = preset("paper", "peaks")
        net = ResNet((2,), 5, width=s["width"], nlayers=row["layers"])
        spec = training_spec(net.kind, net.input_shape, net.width, net.nlayers,
                             row["samples"], net.nclasses, None, net.nparams)
        default = Setting(s["m1"], s["m2"], s["relax"], s["max_levels"], s["cfactor"])
        settings = training_settings(s["mode"], {}, default, checked=bool(check_every),
                                     nlayers=net.nlayers)
        c = decide_grid(spec, P, calibration, mode=s["mode"], grid=grid, settings=settings,
                        check_every=check_every, trials=trials_per_step(row["optimizer"]))
        # In the default mode a grid without layer or space ranks runs serial
        # backpropagation: its setting is moot.
        return {"shape": list(c.shape), "predicted_seconds": c.seconds,
                "summary": c.summary, "setting": dataclasses.asdict(c.setting),
                "preset_setting": c.setting == default,
                "runs_mgrit": c.shape[1] > 1 or c.shape[2] > 1}
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's reason
        return {"error": f"{type(exc).__name__}: {exc}"}


# ------------------------------------------------------------------ the measurements


def measure(args, workdir):
    """The whole run (logs and the calibration in ``workdir``)."""
    mpiexec = find_mpiexec()
    host = host_info(mpiexec)
    cores = host["cpu"]["cores_for_ranks"]
    ranks = sorted(set(args.ranks or ([1, 2] if args.small else
                                      [P for P in (1, 2, 4, 8, 16) if P <= cores])))
    runner = Runner(args, mpiexec, host["mpi"]["implementation"], cores, workdir)
    print_host(host, runner.child_env)
    print(f"ranks {' '.join(map(str, ranks))} ({cores} physical cores for ranks"
          + ("; more ranks than cores: those timings are not scaling, marked 'over'"
             if max(ranks) > cores else "") + ")", flush=True)
    if max(ranks) > 1:
        check = host["core_check"] = cpu_scaling.check(max(ranks), 2000)
        print(f"cores check (benchmarks/cpu_scaling.py): {check['processes']} processes of "
              f"the same NumPy work at once take {check['ratio']:.2f}x one process's time "
              f"({check['one_seconds'] * 1e3:.0f} ms)"
              + ("" if check["ratio"] < 1.3 else ": the ranks will not have a core each "
                 "(hyperthreads, a shared host or other load): expect less than P-fold"),
              flush=True)
    train = [r for r in training_rows(args.small, args.quick) if r["name"] in args.rows]
    times = [r for r in time_rows(args.small) if r["name"] in args.rows]
    for row in train:
        adam = row["optimizer"] == "adam"
        row["steps"], row["window"] = (args.adam_steps, args.window) if adam else (args.steps, 1)
    use_auto = bool(train) and max(ranks) > 1
    plan = {"training_rows": [r["name"] for r in train], "time_rows": [r["name"] for r in times],
            "launches": len(train) + bool(times) + sum(
                bool(times) + len(train) * (len(grids(P)) + (P > 1)) for P in ranks)}
    print(f"plan: {len(train)} training rows, {len(times)} time rows, ranks "
          f"{' '.join(map(str, ranks))}; {plan['launches']} launches; serial runs of up to "
          f"K = {args.steps} L-BFGS or {args.adam_steps} Adam steps (window {args.window}), "
          f"parallel runs of up to {args.max_steps_factor}K"
          + (f"; --budget {args.budget:.0f} s: a quarter for the serial runs, then P from "
             f"the largest down, each launch its share" if args.budget else "") + "\n",
          flush=True)
    if args.dry_run:
        return {"host": host, "ranks": ranks, "plan": plan, "rows": []}

    report = {"script": "benchmarks/scaling.py", "argv": sys.argv[1:], "host": host,
              "child_env": runner.child_env, "ranks": ranks, "cores_for_ranks": cores,
              "settings": {k: v for k, v in vars(args).items() if k != "worker"},
              "plan": plan, "rows": [], "elapsed_seconds": None}
    cal = {"status": "not needed (one rank, or no training row)"}
    if use_auto:
        print("calibrating (braidpy calibrate) for --grid auto ...", flush=True)
        cal = calibrate(runner, ranks, train)
        print(f"  calibration: {cal['status']}"
              + (f" in {cal['seconds']:.1f} s" if cal.get("seconds") else "")
              + (f": {cal['reason']}" if cal.get("reason") else ""), flush=True)
    report["calibration"] = cal
    rows = {r["name"]: {"name": r["name"], "kind": "training" if r in train else "time",
                        "title": r["title"], "serial": None, "target": None, "cells": [],
                        **{k: r[k] for k in ("args", "example", "optimizer", "steps",
                                             "window") if k in r}}
            for r in train + times}
    report["rows"] = list(rows.values())

    def save():
        report["elapsed_seconds"] = runner.budget.elapsed()
        dump_json(args.json, report)

    # ---- serial runs: the targets, the step counts K that fit, the later launches' weights
    for i, row in enumerate(train):
        out = rows[row["name"]]
        print(f"{row['name']}: serial, {row['steps']} steps ...", flush=True)
        why = runner.skip_reason(1, 2.0)
        out["serial"] = cell(1, "serial", None, False, reasons(NAMES, why or "", "skipped"),
                             mode="serial")
        if not why:
            limit = runner.budget.left(0.25) / (len(train) - i)
            run = run_training(runner, row, 1, None, "serial", None, limit, row["steps"])
            losses, secs = run["losses"], run["step_seconds"]
            if losses:
                loss = target_loss(losses, row["window"])
                hit = first_reaching(losses, secs, loss, row["window"])
                out["target"] = {"loss": loss, "window": row["window"], "step": hit[0],
                                 "seconds": hit[1], "serial_steps": len(losses)}
                out["steps"] = row["steps"] = len(losses)  # fewer where the budget cut it
            out["serial"].update(run=run, metrics=training_metrics(
                run, out["target"], row["window"], row["steps"]))
        save()
    if times:
        print("time rows: sequential stepping ...", flush=True)
        results = time_launch(runner, times, 1, False)
        for row in times:
            rows[row["name"]]["serial"] = cell(1, "serial", None, False, {
                "solve": results[row["name"]]}, mode="sequential", run=results["_run"])
        save()
    seq = sum(rows[r["name"]]["serial"]["metrics"]["solve"].get("seconds", 1.0) for r in times)
    for P in ranks:
        runner.weights[("time", P, True)] = launch_seconds(P) + 10 * seq
        for row in train:
            serial = (rows[row["name"]]["target"] or {}).get("seconds", 1.0)
            for grid in grids(P) + ["auto"] * (P > 1):
                runner.weights[(row["name"], grid, P)] = launch_seconds(P) + args.cap * serial

    # ---- P from the largest down
    for P in sorted(ranks, reverse=True):
        over = P > cores
        if times:
            print(f"P = {P}: time rows, MGRIT ...", flush=True)
            results = time_launch(runner, times, P, True)
            for row in times:
                cells = rows[row["name"]]["cells"]
                seq = rows[row["name"]]["serial"]["metrics"]["solve"].get("seconds")
                cells.append(cell(P, "layer", f"1,1,{P}", over, {"solve": with_speedup(
                    results[row["name"]], seq)}, mode="mgrit", run=results["_run"]))
                for column, why in (("data", "time integration has no data dimension"),
                                    ("auto", "--grid auto is a braidpy train option")):
                    cells.append(cell(P, column, None, over, reasons(("solve",), "n/a: " + why,
                                                                     "n/a")))
                cells.append(best_cell(cells, P, ("solve",), over))
            save()
        for row in train:
            training_cells(runner, row, rows[row["name"]], P, over, args)
            save()
    save()
    return report


def training_cells(runner, row, out, P, over, args):
    """The cells of one training row at P: data, layer, auto, best."""
    target, cells, K = out["target"], out["cells"], args.quality_check_every
    serial = out["serial"]["metrics"] if out["serial"] else {}
    s_target = target["seconds"] if target else None
    max_steps = args.max_steps_factor * row["steps"] if target else max(2, row["steps"])
    checks = ["--quality-check-every", str(K)] if K else []

    def run(column, grid, mode=None, extra=()):
        share = runner.share((row["name"], grid, P))
        limit = min(args.cap * s_target if s_target else share,
                    max(share - launch_seconds(P), 0.5))
        print(f"P = {P}: {row['name']} {column} ({grid}, {mode or 'one-shot'}) ...",
              flush=True)
        why = runner.skip_reason(P, min(share, launch_seconds(P) + 1))
        c = cell(P, column, grid, over, reasons(NAMES, why or "", "skipped"),
                 mode=mode or "oneshot")
        if not why:
            c["run"] = r = run_training(runner, row, P, grid, mode, target, limit, max_steps,
                                        extra)
            c["metrics"] = training_metrics(r, target, row["window"], max_steps)
            with_speedup(c["metrics"]["per_step"], serial.get("per_step", {}).get("seconds"))
            with_speedup(c["metrics"]["to_target"], s_target)
        return c

    if P == 1:
        failed = metric(reason="the serial run failed", kind="error")
        cells.append(cell(1, "data", "1,1,1", over, {n: {
            **serial.get(n, failed), "same_as": "serial", "speedup": 1.0} for n in NAMES},
            mode="serial"))
    else:
        cells.append(run("data", f"{P},1,1", "serial"))
    # The layer grid with the setting --grid auto would choose for it (and its checks);
    # one rank runs serial backpropagation in the default mode: nothing to choose.
    choice = auto_choice(row, P, runner.calibration, K, grid=(1, 1, P)) if K and P > 1 else {}
    setting = choice.get("setting")
    layer = run("layer", f"1,1,{P}", None, setting_args(setting) + checks if setting else ())
    layer.update(setting=setting, checks=K if setting else 0)
    if "error" in choice:
        layer["setting_reason"] = f"the preset's setting: {choice['error']}"
    cells.append(layer)

    choice = auto_choice(row, P, runner.calibration, K)
    grid = ",".join(map(str, choice["shape"])) if "shape" in choice else None
    # A measured grid is --grid auto's run only if it ran auto's setting and checks (a
    # cell without a setting ran the preset's).
    chosen = None if choice.get("preset_setting") else choice.get("setting")
    same = [c for c in cells if c["P"] == P and grid and c["grid"] == grid
            and c.get("mode") == "oneshot" and c.get("setting") == chosen
            and c.get("checks", 0) == (K if P > 1 else 0)]
    if "error" in choice or same:
        runner.weights.pop((row["name"], "auto", P), None)  # not launched
        auto = cell(P, "auto", None, over, reasons(NAMES, f"--grid auto: {choice.get('error')}",
                                                   "error"))
        if same:
            auto.update(grid=grid, mode="oneshot", metrics={n: {
                **same[0]["metrics"][n], "same_as": same[0]["column"]} for n in NAMES})
    else:
        auto = run("auto", "auto", None, checks if P > 1 else [])
        got = ",".join(map(str, auto.get("run", {}).get("grid") or [])) or None
        if got and got != grid:
            auto["mismatch"] = f"predicted {grid}, the run chose {got}"
        auto["grid"] = got or grid
    auto["choice"] = choice
    cells.append(auto)
    cells.append(best_cell(cells, P, NAMES, over))  # auto's run among them


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--json", metavar="FILE", help="write every measurement and the host here")
    p.add_argument("--ranks", type=int, nargs="+", metavar="P",
                   help="rank counts (default 1 2 4 8 16 up to the physical cores)")
    p.add_argument("--rows", nargs="+", metavar="ROW",
                   help="only these rows (peaks256 peaks1024 batch32 heat ode; --small: "
                        "peaks16 batch8 heat ode)")
    for flag, kind, default, what in (
            ("--steps", int, 20, "K: serial L-BFGS steps (the target)"),
            ("--adam-steps", int, 100, "K of the Adam row"),
            ("--window", int, 10, "losses averaged for the Adam row's target and its runs"),
            ("--max-steps-factor", int, 2, "M = this x K steps at most per parallel run"),
            ("--cap", float, 1.5, "a parallel run stops at this x serial's time to the loss"),
            ("--budget", float, None, "seconds for the whole run (default 240, --quick 120, "
                                      "--small 90; 0: no limit)"),
            ("--timeout", float, 300, "seconds per launch at most")):
        p.add_argument(flag, type=kind, default=default, help=what)
    p.add_argument("--quality-check-every", type=int, default=10, metavar="K",
                   help="the layer and auto columns check every K-th gradient and run the "
                        "setting --grid auto chooses with the checks (0: the preset's "
                        "setting, no checks)")
    p.add_argument("--quick", action="store_true",
                   help="without the 1024-layer full-batch row, budget 120 s")
    p.add_argument("--small", action="store_true",
                   help="CI: tiny rows, ranks 1 and 2, a few steps (well under a minute)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the host and the plan; measure nothing")
    args = p.parse_args(argv)
    if args.small:
        args.steps, args.adam_steps = min(args.steps, 4), min(args.adam_steps, 12)
        args.window = min(args.window, 3)
    names = [r["name"] for r in training_rows(args.small, False) + time_rows(args.small)]
    unknown = sorted(set(args.rows or ()) - set(names))
    if unknown:
        p.error(f"--rows: no row {', '.join(unknown)}{' with --small' if args.small else ''}"
                f" (rows: {' '.join(names)})")
    args.rows = args.rows or names
    if args.budget is None:
        args.budget = 90.0 if args.small else 120.0 if args.quick else 240.0
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        time_solves(json.loads(args.worker))
        return {}
    # A time limit's SIGTERM (gpu_check.sh's `timeout`) unwinds like Ctrl-C: the running
    # launch, in a session of its own, is killed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="braidpy-scaling-",
                                     ignore_cleanup_errors=True) as workdir:
        report = measure(args, workdir)
    if not args.dry_run:
        print_tables(report)
        print(f"\ntotal {report['elapsed_seconds']:.0f} s"
              + (f"; JSON: {args.json}" if args.json else ""))
    return report


if __name__ == "__main__":
    main()
