"""Where does layer parallelism pay on this host, and against what? Serial vs layer-parallel
vs data-parallel vs the best grid vs ``--grid auto``, per step and to the same loss.

Columns per rank count P (1, 2, 4, 8, 16 up to the physical cores, or --ranks): serial
(``braidpy train --mode serial``; time rows: sequential stepping), layer (``--grid 1,1,P``
with the setting ``--grid auto`` would choose for that grid and ``--quality-check-every K``;
K = 0: the preset's, no checks; time rows: the example's MGRIT on P ranks), data (``--grid
P,1,1 --mode serial``), best (the fastest grid measured at P; --mixed adds every D,1,L),
auto (``--grid auto`` with the checks, from a ``braidpy calibrate`` made first). Rows:
peaks256, peaks1024 (``train peaks --preset paper --samples 5000``, L-BFGS), batch32 (1024
layers, Adam on shuffled batches of 32), heat and ode (examples ex02/ex01, 16384 steps,
MGRIT to 1e-8); --small: 16 layers, 512 steps. Training cells, from each run's --log:
seconds per step (median, the first step left out) and seconds to the serial run's loss
(the mean of its last --window losses); a parallel run stops at that loss, at M = 2K
steps or at --cap x serial's time to it. Time cells: the slowest rank's solve after a
warm-up. The host and cpu_scaling.py's core check come first (--dry-run stops there);
--budget: the serial runs may take a quarter of it, every later launch its share by its
serial time, a cut or skipped launch says why. One thread per rank; a launch past its
time is killed with every process it started.

    python benchmarks/scaling.py [--json FILE] [--quick | --small] [--budget S]
        [--ranks 1 2 4 ...] [--steps K] [--rows ...] [--mixed] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_scaling  # noqa: E402
from _harness import find_mpiexec, host_info, print_host, print_table  # noqa: E402
from _scaling_runs import (Runner, auto_choice, calibrate, first_reaching,  # noqa: E402
                           launch_seconds, losses_of, metric, read_log, run_training,
                           seconds_of, target_loss, time_launch, time_rows, time_solves,
                           trailing_means, training_metrics, training_rows, with_speedup)

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


def setting_text(s):
    """A table's short form of a Setting: 'm1/2 F L3 cf8'."""
    return f"m{s['m1']}/{s['m2']} {s['relax']} L{s['levels']} cf{s['cfactor']}" if s else ""


def grids(P, mixed):
    """The grids a training row is launched on at P (besides --grid auto)."""
    return ([f"{P},1,1"] if P > 1 else []) + [f"1,1,{P}"] + (
        [f"{d},1,{P // d}" for d in range(2, P) if P % d == 0] if mixed else [])


# ------------------------------------------------------------------ the measurements


def measure(args):
    """The whole run (logs and the calibration in a temporary folder, removed after)."""
    workdir = tempfile.mkdtemp(prefix="braidpy-scaling-")
    try:
        return _measure(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(args, workdir):
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
                bool(times) + len(train) * (len(grids(P, args.mixed)) + (P > 1)) for P in ranks)}
    print(f"plan: {len(train)} training rows, {len(times)} time rows, ranks "
          f"{' '.join(map(str, ranks))}; {plan['launches']} launches"
          + (f" in --budget {args.budget:.0f} s: the serial runs in a quarter of it, then "
             f"P from the largest down, each launch its share" if args.budget else ""))
    for row in train:
        print(f"  {row['name']}: serial up to K = {row['steps']} steps, window "
              f"{row['window']}, at most {args.max_steps_factor * row['steps']} steps per "
              f"parallel run")
    print(flush=True)
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
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1, default=str)

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
            for grid in grids(P, args.mixed) + ["auto"] * (P > 1):
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
                cells.append(cell(P, "data", None, over, reasons(
                    ("solve",), "n/a: time integration has no data dimension", "n/a")))
                cells.append(cell(P, "auto", None, over, reasons(
                    ("solve",), "n/a: --grid auto is a braidpy train option", "n/a")))
                cells.append(best_cell(cells, P, ("solve",), over))
            save()
        for row in train:
            training_cells(runner, row, rows[row["name"]], P, over, args)
            save()
    save()
    return report


def training_cells(runner, row, out, P, over, args):
    """The cells of one training row at P: data, layer, --mixed grids, auto, best."""
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
    if args.mixed:
        cells += [run("mixed", f"{d},1,{P // d}") for d in range(2, P) if P % d == 0]

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
    cells += [auto, best_cell(cells, P, NAMES, over)]


# ------------------------------------------------------------------ the tables

HEADS = {"layer": "layer 1,1,P", "data": "data P,1,1 (serial mode)", "best": "best",
         "auto": "--grid auto", "mixed": "mixed D,1,L"}


def short(m):
    """A table cell: seconds and speedup, or a short form of the reason."""
    if "seconds" in m:
        return f"{m['seconds']:.3g}" + (f" ({m['speedup']:.2f}x)" if "speedup" in m else "")
    kind, reason = m.get("kind"), m.get("reason", "")
    if kind == "limit" and m.get("at_least"):
        return f">{m['at_least']:.3g}" + (f" (<{m['speedup_below']:.2f}x)"
                                          if "speedup_below" in m else "")
    if kind == "steps":
        return "not in " + reason.split("within ", 1)[-1].split(" (")[0]
    return {"timeout": "timeout", "skipped": "skipped", "n/a": "n/a", "error": "failed",
            "none": "-"}.get(kind, reason[:20])


def cell_text(c, column, name):
    m = c["metrics"].get(name, {})
    label = (m.get("grid") if column == "best" else
             c.get("grid") if column in ("auto", "mixed") else "") or ""
    if column in ("layer", "auto"):  # the MGRIT setting it ran
        choice = c.get("choice") or {}
        ran = c.get("setting") or (choice.get("setting") if choice.get("runs_mgrit") else None)
        label = f"{label} {setting_text(ran)}".strip()
    text = short(m) + (f" {m['iterations']} it" if "iterations" in m else "")
    return f"{label} {'= ' + m['same_as'] + ': ' if m.get('same_as') else ''}{text}".strip()


def print_tables(report):
    print("\nSeconds (speedup over serial). '>X (<Yx)': stopped at its limit of X s without "
          "a step / the loss; 'not in M steps': ran M steps without reaching the loss; "
          "'over': more ranks than physical cores. Every reason in full in the JSON.")
    for row in report["rows"]:
        print(f"\n== {row['name']}: {row['title']}")
        cells, serial = row["cells"], (row.get("serial") or {}).get("metrics", {})
        if row["kind"] == "training":
            t = row.get("target")
            print(f"   serial (--mode serial, 1 rank): {short(serial['per_step'])} s/step; "
                  f"target loss {t['loss']:.5g} (mean of the last {t['window']}) of "
                  f"{t['serial_steps']} steps, reached at step {t['step']} in "
                  f"{t['seconds']:.3g} s" if t else
                  f"   serial: {serial.get('per_step', {}).get('reason', 'failed')}")
            names = (("per_step", "seconds per step"),
                     ("to_target", "seconds to the serial run's loss"))
            columns = ["layer", "data", "best", "auto"] + (
                ["mixed"] if any(c["column"] == "mixed" for c in cells) else [])
            heads = [HEADS[c] for c in columns]
        else:
            s = serial.get("solve", {})
            print("   sequential stepping (1 process): "
                  + (f"{s['seconds']:.3g} s" if "seconds" in s else s.get("reason", "")))
            names = (("solve", "seconds to solve to 1e-8 (iterations)"),)
            columns, heads = ["layer", "best"], ["time-parallel", "best"]
        for name, what in names:
            table = []
            for P in sorted({c["P"] for c in cells}):
                mine = [c for c in cells if c["P"] == P]
                table.append([f"{P}" + (" over" if any(c.get("over") for c in mine) else "")]
                             + ["; ".join(cell_text(c, col, name) for c in mine
                                          if c["column"] == col) or "-" for col in columns])
            print_table(["P"] + heads, table, title=f"   {what}")


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
    p.add_argument("--mixed", action="store_true", help="also every D,1,L grid, D, L > 1")
    p.add_argument("--calibration", metavar="FILE",
                   help="braidpy calibrate's file for --grid auto (default: made now)")
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
    report = measure(args)
    if not args.dry_run:
        print_tables(report)
        print(f"\ntotal {report['elapsed_seconds']:.0f} s"
              + (f"; JSON: {args.json}" if args.json else ""))
    return report


if __name__ == "__main__":
    main()
