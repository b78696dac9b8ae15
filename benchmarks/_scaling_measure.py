"""scaling.py's run: the host, the plan, the serial runs (the targets), then every cell
from the largest P down, saved to --json as it goes."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from _harness import find_mpiexec, host_info, print_host
from _scaling_cells import (SCRIPT, Runner, auto_choice, best_cell, calibrate, run_training,
                            setting_args, time_launch, training_metrics, with_speedup)
from _scaling_runs import (core_check, estimate_time_rows, estimate_training, first_reaching,
                           grid_text, launch_seconds, metric, plan, target_loss, time_rows,
                           trailing_means, training_rows)
from _sidecar import launch

DEFAULT_RANKS = (1, 2, 4, 8, 16)


def measure(args: argparse.Namespace) -> Dict[str, Any]:
    """The whole run (logs and the calibration in a temporary folder, removed after)."""
    workdir = tempfile.mkdtemp(prefix="braidpy-scaling-")
    try:
        return _measure(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _measure(args: argparse.Namespace, workdir: str) -> Dict[str, Any]:
    mpiexec = find_mpiexec()
    host = host_info(mpiexec)
    cores = host["cpu"]["cores_for_ranks"]
    if args.ranks:
        ranks = sorted(set(args.ranks))
    elif args.small:
        ranks = [1, 2]
    else:
        ranks = [P for P in DEFAULT_RANKS if P <= cores or args.oversubscribe]
    runner = Runner(args, mpiexec, host["mpi"]["implementation"], cores, workdir)
    print_host(host, runner.child_env)
    print(f"ranks {' '.join(map(str, ranks))} ({cores} physical cores for ranks"
          + ("; more ranks than cores: those timings are not scaling, marked 'over'"
             if max(ranks) > cores else "") + ")", flush=True)
    if max(ranks) > 1:
        check = core_check(max(ranks))
        host["core_check"] = check
        print(f"cores check (benchmarks/cpu_scaling.py): {check['processes']} processes of "
              f"the same NumPy work at once take {check['ratio']:.2f}x one process's time "
              f"({check['one_seconds'] * 1e3:.0f} ms)"
              + ("" if check["ratio"] < 1.3 else ": the ranks will not have a core each "
                 "(hyperthreads, a shared host or other load): expect less than P-fold"),
              flush=True)

    train = [r for r in training_rows(args.small, args.quick) if args.rows is None
             or r["name"] in args.rows]
    times = [r for r in time_rows(args.small) if args.rows is None or r["name"] in args.rows]
    for row in train:
        row["steps"] = args.adam_steps if row["optimizer"] == "adam" else args.steps
        row["window"] = args.window if row["optimizer"] == "adam" else 1
    for row in times:
        row["ntime"] = int(row["args"][row["args"].index("--ntime") + 1])
    use_auto = not args.no_auto and max(ranks) > 1

    # The plan: one serial gradient per training row and a few sequential steps per time
    # row, timed in a child, give the estimate and the step counts that fit --budget.
    spec = {"task": "probe", "training": [{k: r[k] for k in ("name", "layers", "samples")}
                                          for r in train],
            "time": [{k: r[k] for k in ("name", "example", "args")} for r in times]}
    pr = launch([sys.executable, SCRIPT, "--worker", json.dumps(spec)], runner.env, 120,
                workdir)
    probe_s = pr["result"] or {}
    for row in train:
        g = probe_s.get(row["name"], 0.05)
        row["step_estimate"] = g * (1.35 if row["optimizer"] == "lbfgs" else 1.0)
    for row in times:
        row["step_estimate"] = probe_s.get(row["name"], 1e-4)
    the_plan = plan(train, times, ranks, args, use_auto)
    the_plan["probe"] = probe_s or {"error": pr["output_tail"][-400:]}
    print(f"plan: {len(train)} training rows, {len(times)} time rows, ranks "
          f"{' '.join(map(str, ranks))}; estimated {the_plan['estimate_seconds']:.0f} s"
          + (f" (budget {args.budget:.0f} s; launches that would overrun it are cut short "
             f"or skipped, each with its reason)" if args.budget else " (no budget)"))
    for row in train:
        print(f"  {row['name']}: serial ~{row['step_estimate']:.3g} s/step, K = "
              f"{row['steps']} steps" + (" (lowered to fit --budget)" if row["name"] in
                                         the_plan["lowered"] else "")
              + f", window {row['window']}, at most {args.max_steps_factor * row['steps']} "
              f"steps per parallel run")
    print(flush=True)
    if args.dry_run:
        return {"host": host, "ranks": ranks, "plan": the_plan, "rows": [],
                "elapsed_seconds": runner.budget.elapsed()}

    # Every launch's estimate, for the budget's fair shares.
    for row in train:
        for (column, P), sec in estimate_training(row, ranks, args.cap, use_auto).items():
            runner.remaining[(row["name"], column, P)] = sec
    if times:
        for (column, P), sec in estimate_time_rows(times, ranks).items():
            runner.remaining[("time", column, P)] = sec

    report: Dict[str, Any] = {
        "script": "benchmarks/scaling.py", "argv": sys.argv[1:], "host": host,
        "child_env": runner.child_env, "ranks": ranks, "cores_for_ranks": cores,
        "settings": {k: v for k, v in vars(args).items() if k not in ("worker",)},
        "plan": the_plan, "rows": [], "elapsed_seconds": None}
    report["settings"]["rows"] = [r["name"] for r in train + times]

    cal: Dict[str, Any] = {"status": "not needed (one rank, or --no-auto)"}
    if use_auto:
        print("calibrating (braidpy calibrate) for --grid auto ...", flush=True)
        cal = calibrate(runner, ranks, train)
        print(f"  calibration: {cal['status']}"
              + (f" in {cal['seconds']:.1f} s" if cal.get("seconds") else "")
              + (f": {cal['reason']}" if cal.get("reason") else ""), flush=True)
    report["calibration"] = cal
    cal_path = cal.get("path")

    rows_out: Dict[str, Dict[str, Any]] = {}
    for row in train:
        rows_out[row["name"]] = {
            "name": row["name"], "kind": "training", "title": row["title"],
            "braidpy_train": row["args"], "optimizer": row["optimizer"],
            "steps": row["steps"], "max_steps": args.max_steps_factor * row["steps"],
            "window": row["window"], "serial": None, "target": None, "cells": []}
    for row in times:
        rows_out[row["name"]] = {
            "name": row["name"], "kind": "time", "title": row["title"],
            "example": f"examples/{row['example']}.py", "example_args": row["args"],
            "ntime": row["ntime"], "serial": None, "cells": []}
    report["rows"] = list(rows_out.values())

    def save() -> None:
        report["elapsed_seconds"] = runner.budget.elapsed()
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1, default=str)

    # ---- serial runs: the targets
    serial_means: Dict[str, List[Optional[float]]] = {}
    for row in train:
        out = rows_out[row["name"]]
        key = (row["name"], "serial", 1)
        why = runner.skip_reason(1, 2.0)
        print(f"{row['name']}: serial, {row['steps']} steps ...", flush=True)
        if why:
            m = metric(reason=why, kind="skipped")
            out["serial"] = {"P": 1, "column": "serial", "grid": None, "mode": "serial",
                             "metrics": {"per_step": m, "to_target": dict(m)}}
            runner.done(key)
            continue
        run = run_training(runner, row, 1, None, "serial", key, None, [],
                           0.0, row["steps"])
        runner.done(key)
        losses = run["losses"]
        if losses:
            loss = target_loss(losses, row["window"])
            hit = first_reaching(losses, run["step_seconds"], loss, row["window"])
            out["target"] = {"loss": loss, "window": row["window"],
                             "step": hit[0] if hit else len(losses),
                             "seconds": hit[1] if hit else sum(run["step_seconds"]),
                             "serial_steps": len(losses)}
            serial_means[row["name"]] = trailing_means(losses, row["window"])
        mets = training_metrics(run, out["target"], row["window"], row["steps"])
        out["serial"] = {"P": 1, "column": "serial", "grid": None, "mode": "serial",
                         "metrics": mets, "run": run}
        save()
    if times:
        key = ("time", "serial", 1)
        print("time rows: sequential stepping ...", flush=True)
        results = time_launch(runner, times, 1, False, key)
        for row in times:
            rows_out[row["name"]]["serial"] = {
                "P": 1, "column": "serial", "grid": None, "mode": "sequential",
                "metrics": {"solve": results[row["name"]]}, "run": results["_run"]}
        save()

    # ---- P from the largest down
    for P in sorted(ranks, reverse=True):
        over = P > cores
        if times:
            key = ("time", "layer", P)
            print(f"P = {P}: time rows, MGRIT ...", flush=True)
            results = time_launch(runner, times, P, True, key)
            for row in times:
                out = rows_out[row["name"]]
                seq = out["serial"]["metrics"]["solve"].get("seconds")
                solve = with_speedup(results[row["name"]], seq)
                out["cells"].append({"P": P, "column": "layer", "grid": f"1,1,{P}",
                                     "mode": "mgrit", "over": over,
                                     "metrics": {"solve": solve}, "run": results["_run"]})
                for column, why in (("data", "n/a: time integration has no data dimension"),
                                    ("auto", "n/a: --grid auto is a braidpy train option")):
                    out["cells"].append({"P": P, "column": column, "grid": None,
                                         "over": over, "metrics": {"solve": metric(
                                             reason=why, kind="n/a")}})
                out["cells"].append(best_cell(out["cells"], P, ("solve",), over))
            save()
        for row in train:
            out = rows_out[row["name"]]
            measure_training_P(runner, row, out, P, over, cal_path, serial_means, args)
            save()
    report["elapsed_seconds"] = runner.budget.elapsed()
    save()
    return report


def measure_training_P(runner: Runner, row: Dict[str, Any], out: Dict[str, Any], P: int,
                       over: bool, cal_path: Optional[str],
                       serial_means: Dict[str, List[Optional[float]]],
                       args: argparse.Namespace) -> None:
    """The cells of one training row at P: data, layer, auto (and --mixed grids)."""
    target = out["target"]
    serial = out["serial"]["metrics"] if out["serial"] else {}
    s_step = serial.get("per_step", {}).get("seconds")
    s_target = target["seconds"] if target else None
    max_steps = args.max_steps_factor * row["steps"] if target else max(2, row["steps"])
    names = ("per_step", "to_target")

    def cell(column: str, grid: Optional[str], mode: Optional[str],
             extra: Sequence[str] = ()) -> Dict[str, Any]:
        key = (row["name"], column, P)
        share = runner.share(key)
        limit = args.cap * s_target if s_target else share
        limit = min(limit, max(share - launch_seconds(P), 0.5))
        print(f"P = {P}: {row['name']} {column} ({grid}, {mode or 'one-shot'}) ...",
              flush=True)
        why = runner.skip_reason(P, min(share, launch_seconds(P) + 1))
        if why:
            runner.done(key)
            m = metric(reason=why, kind="skipped")
            return {"P": P, "column": column, "grid": grid, "mode": mode or "oneshot",
                    "over": over, "metrics": {n: dict(m) for n in names}}
        run = run_training(runner, row, P, grid, mode, key, target,
                           serial_means.get(row["name"], []), limit, max_steps, extra)
        runner.done(key)
        mets = training_metrics(run, target, row["window"], max_steps)
        with_speedup(mets["per_step"], s_step)
        with_speedup(mets["to_target"], s_target)
        return {"P": P, "column": column, "grid": grid, "mode": mode or "oneshot",
                "over": over, "metrics": mets, "run": run}

    cells = out["cells"]
    if P == 1:
        cells.append({"P": 1, "column": "data", "grid": "1,1,1", "mode": "serial",
                      "over": over, "metrics": {n: {**serial.get(n, metric(
                          reason="the serial run failed", kind="error")),
                          "same_as": "serial", "speedup": 1.0} for n in names}})
    else:
        cells.append(cell("data", f"{P},1,1", "serial"))
    K = args.quality_check_every
    checks = ["--quality-check-every", str(K)] if K else []
    # The layer grid with the setting --grid auto would choose for it (and its checks);
    # one rank runs serial backpropagation in the default mode: nothing to choose.
    layer_choice = auto_choice(row, P, cal_path, K, grid=(1, 1, P)) \
        if K and P > 1 else {}
    if "setting" in layer_choice:
        layer = cell("layer", f"1,1,{P}", None,
                     setting_args(layer_choice["setting"]) + checks)
        layer.update(setting=layer_choice["setting"], checks=K)
    else:
        layer = cell("layer", f"1,1,{P}", None)
        layer.update(setting=None, checks=0)
        if "error" in layer_choice:
            layer["setting_reason"] = f"the preset's setting: {layer_choice['error']}"
    cells.append(layer)
    if args.mixed:
        for d in range(2, P):
            if P % d == 0:
                cells.append(cell("mixed", f"{d},1,{P // d}", None))
    if args.no_auto:
        m = metric(reason="n/a: --no-auto", kind="n/a")
        cells.append({"P": P, "column": "auto", "grid": None, "over": over,
                      "metrics": {n: dict(m) for n in names}})
    else:
        choice = auto_choice(row, P, cal_path, K)
        grid = grid_text(choice["shape"]) if "shape" in choice else None
        # A measured grid is --grid auto's run only if it ran auto's setting and checks
        # (a cell without a setting ran the preset's).
        chosen = None if choice.get("preset_setting") else choice.get("setting")
        same = [c for c in cells if c["P"] == P and c["grid"] == grid
                and c.get("mode") == "oneshot" and "shape" in choice
                and c.get("setting") == chosen and c.get("checks", 0) == (K if P > 1 else 0)]
        if "error" in choice:
            m = metric(reason=f"--grid auto: {choice['error']}", kind="error")
            runner.done((row["name"], "auto", P))
            c = {"P": P, "column": "auto", "grid": None, "over": over,
                 "metrics": {n: dict(m) for n in names}}
        elif same:
            runner.done((row["name"], "auto", P))
            c = {"P": P, "column": "auto", "grid": grid, "mode": "oneshot", "over": over,
                 "metrics": {n: {**same[0]["metrics"][n], "same_as": same[0]["column"]}
                             for n in names}}
        else:
            c = cell("auto", "auto", None, checks if P > 1 else [])
            got = c.get("run", {}).get("grid")
            if got and grid_text(got) != grid:
                c["mismatch"] = f"predicted {grid}, the run chose {grid_text(got)}"
            c["grid"] = grid_text(got) if got else grid
        c["choice"] = choice
        cells.append(c)
    cells.append(best_cell(cells, P, names, over))
