"""scaling.py's launches: the child environment and budget (Runner), one ``braidpy train``
watched through its log and its metrics, the calibration and ``--grid auto``'s choice."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from _harness import THREAD_VARS, Budget
from _scaling_runs import (as_float, first_reaching, launch_seconds, losses_of, metric,
                           per_step, read_log, seconds_of, trailing_means)
from _sidecar import HERE, launch

SCRIPT = str(HERE / "scaling.py")


#: Open MPI delivers messages above its shared-memory eager limit only when the sender
#: enters MPI; raised above the states' size as the perf benchmarks do (MPICH ignores it).
OMPI_VARS = {"OMPI_MCA_btl_vader_eager_limit": "131072",
             "OMPI_MCA_btl_vader_max_send_size": "131072"}


class Runner:
    """Launches, budget, and the child environment."""

    def __init__(self, args: argparse.Namespace, mpiexec: Optional[str], impl: str,
                 cores: int, workdir: str):
        self.args, self.mpiexec, self.impl, self.cores = args, mpiexec, impl, cores
        self.workdir = workdir
        self.budget = Budget(args.budget)
        self.env = dict(os.environ)
        self.child_env = {k: "1" for k in THREAD_VARS}
        self.env.update(self.child_env)
        self.env["PYTHONUNBUFFERED"] = "1"
        if impl == "Open MPI":
            for k, v in OMPI_VARS.items():
                self.env.setdefault(k, v)
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                self.env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
                self.env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        self.remaining: Dict[Any, float] = {}  # launch key -> estimate, until it runs

    def prefix(self, P: int) -> List[str]:
        if P == 1:
            return []
        flags = ["--oversubscribe"] if self.impl == "Open MPI" and P > self.cores else []
        return [self.mpiexec or "mpiexec", "-n", str(P), *flags]

    def skip_reason(self, P: int, need: float) -> Optional[str]:
        if P > 1 and not self.mpiexec:
            return "skipped: no mpiexec found (pip install mpich, or set BRAIDPY_MPIEXEC)"
        left = self.budget.left()
        if left < need:
            return (f"skipped: --budget {self.args.budget:.0f} s would be exceeded "
                    f"({self.budget.elapsed():.0f} s used, this launch needs ~{need:.0f} s)")
        return None

    def share(self, key: Any) -> float:
        """The seconds this launch may take: its estimate times the budget left per
        estimated second of all launches still to come (inf without a budget)."""
        est = self.remaining.get(key, 10.0)
        return est * self.budget.factor(sum(self.remaining.values()))

    def done(self, key: Any) -> None:
        self.remaining.pop(key, None)

    def hard_timeout(self, seconds: float) -> float:
        return max(1.0, min(self.args.timeout, seconds, self.budget.left() + 5.0))


def run_training(runner: Runner, row: Dict[str, Any], P: int, grid: Optional[str],
                 mode: Optional[str], key: Any, target: Optional[Dict[str, Any]],
                 serial_means: Sequence[Optional[float]], limit: float,
                 steps: int, extra: Sequence[str] = ()) -> Dict[str, Any]:
    """One ``braidpy train`` launch (``extra``: more of its options), watched through
    its log; its run record."""
    log = os.path.join(runner.workdir, f"{row['name']}-{P}-{grid or 'serial'}"
                       f"-{mode or 'default'}.jsonl".replace(",", "x"))
    with contextlib.suppress(OSError):
        os.unlink(log)
    cmd = [sys.executable, "-m", "braidpy", "train", *row["args"],
           "--iterations", str(steps), "--validate-every", "0", "--log", log, "-q"]
    if grid:
        cmd += ["--grid", grid]
    if grid == "auto":
        cmd += ["--calibration", runner.args.calibration_path]
    if mode:
        cmd += ["--mode", mode]
    cmd = runner.prefix(P) + cmd + list(extra)
    seen: Dict[str, Any] = {"header_at": None, "projected": None}
    window = row["window"]

    def watch(elapsed: float) -> Optional[str]:
        header, recs, _ = read_log(log)
        if header is None:
            return None
        if seen["header_at"] is None:
            seen["header_at"] = elapsed
        if target is None:
            return None
        losses, secs = losses_of(recs), seconds_of(recs)
        if first_reaching(losses, secs, target["loss"], window):
            return "reached"
        used = sum(secs)
        if elapsed - seen["header_at"] > limit + 0.5 or used > limit:
            return f"limit: not reached within its limit of {limit:.3g} s"
        j = len(recs)
        if j >= 2:
            pace = statistics.median(secs[1:])
            mine = trailing_means(losses, window)[-1]
            theirs = serial_means[j - 1] if j - 1 < len(serial_means) else None
            behind = mine is None or theirs is None or mine > theirs
            need = used + max(target["step"] - j, 1) * pace
            if behind and need > limit:
                seen["projected"] = need
                return (f"abandoned after {j} steps ({used:.3g} s): at {pace:.3g} s/step, "
                        f"with its loss not below the serial run's at that step, reaching "
                        f"the target takes >= {need:.3g} s > its limit of {limit:.3g} s")
        return None

    hard = runner.hard_timeout(launch_seconds(P) * 3 + 20 + (limit if target else
                                                              runner.share(key) * 3))
    run = launch(cmd, runner.env, hard, runner.workdir, watch)
    header, recs, end = read_log(log)
    config = (header or {}).get("config") or {}
    run.update(grid=header.get("grid") if header else None, steps_logged=len(recs),
               # the MGRIT setting and checks the run reports (its log's header)
               ran={k: config.get(k) for k in ("m1", "m2", "relax", "cfactor",
                                               "quality_check_every")}
               | {"levels": (config.get("mgrit") or {}).get("max_levels")},
               losses=losses_of(recs), step_seconds=seconds_of(recs),
               # of the steps' seconds, what the gradient-quality checks took
               check_seconds=[as_float(r.get("quality_check_seconds", 0.0)) for r in recs],
               startup_seconds=seen["header_at"], limit_seconds=limit if target else None,
               projected_seconds=seen["projected"],
               stop_reason=end.get("stop_reason") if end else None)
    if runner.args.keep_logs:
        os.makedirs(runner.args.keep_logs, exist_ok=True)
        with contextlib.suppress(OSError):
            shutil.copy(log, runner.args.keep_logs)
    return run


def training_metrics(run: Dict[str, Any], target: Optional[Dict[str, Any]], window: int,
                     max_steps: int) -> Dict[str, Dict[str, Any]]:
    """per_step and to_target of a training run (numbers or reasons)."""
    secs, losses = run["step_seconds"], run["losses"]
    failed = run["status"] == "timeout" or (run["status"] == "exited" and run["rc"])
    why = run["reason"] or (error_text(run) if failed else None)
    if secs:
        value, how = per_step(secs)
        step = metric(value, note=how, steps=len(secs))
    else:
        step = metric(reason=why or "no step logged", kind="timeout" if run["status"] ==
                      "timeout" else "limit" if run["status"] == "stopped" else "error")
        if run.get("limit_seconds") and run["status"] == "stopped":
            step.update(reason=f"no step finished within {run['limit_seconds']:.3g} s",
                        kind="limit", at_least=run["limit_seconds"])
    if target is None:
        return {"per_step": step, "to_target": metric(
            reason="no target: the serial run logged no loss", kind="error")}
    hit = first_reaching(losses, secs, target["loss"], window)
    if hit:
        reach = metric(hit[1], step=hit[0])
        if (run.get("ran") or {}).get("quality_check_every"):  # of which the checks took
            reach["check_seconds"] = sum(run["check_seconds"][:hit[0]])
        return {"per_step": step, "to_target": reach}
    if run["status"] == "stopped" and run["reason"].startswith("abandoned"):
        reach = metric(reason="not reached: " + run["reason"], kind="projected",
                       at_least=run["projected_seconds"])
    elif run["status"] == "stopped":
        reach = metric(reason=f"not reached within {run['limit_seconds']:.3g} s "
                       f"({len(secs)} steps)", kind="limit", at_least=run["limit_seconds"])
    elif run["status"] == "timeout":
        reach = metric(reason=f"not reached: {why}", kind="timeout")
    elif failed:
        reach = metric(reason=f"not reached: {why}", kind="error")
    elif run.get("stop_reason") not in (None, "iterations"):
        reach = metric(reason=f"not reached: training stopped ({run['stop_reason']}) after "
                       f"{len(secs)} steps", kind="error")
    else:
        last = trailing_means(losses, window)[-1] if losses else None
        reach = metric(reason=f"not reached within {max_steps} steps ({sum(secs):.3g} s; "
                       f"loss {last:.4g} > {target['loss']:.4g})" if last is not None
                       else f"not reached within {max_steps} steps", kind="steps")
    return {"per_step": step, "to_target": reach}


def error_text(run: Dict[str, Any]) -> str:
    """A failed launch in a line: its exit status and last line of output."""
    lines = run["output_tail"].strip().splitlines()
    return f"error: exit status {run['rc']}" + (f": {lines[-1][:200]}" if lines else "")


def with_speedup(m: Dict[str, Any], serial: Optional[float]) -> Dict[str, Any]:
    """The metric with its speedup over serial (or the bound a limit gives)."""
    if serial is None:
        return m
    if "seconds" in m:
        m["speedup"] = serial / m["seconds"]
    elif m.get("at_least"):
        m["speedup_below"] = serial / m["at_least"]
    return m


def calibrate(runner: Runner, ranks: Sequence[int], train: Sequence[Dict[str, Any]]
              ) -> Dict[str, Any]:
    """``braidpy calibrate`` on this host, at the most ranks (network costs measured)."""
    if runner.args.calibration:
        runner.args.calibration_path = runner.args.calibration
        return {"path": runner.args.calibration, "status": "given"}
    path = os.path.join(runner.workdir, "calibration.json")
    runner.args.calibration_path = path
    P = max(ranks)
    per_rank = sorted({max(1, r["samples"] // d) for r in train for d in ranks})
    picks = sorted({per_rank[0], per_rank[-1], per_rank[len(per_rank) // 2]})
    cmd = runner.prefix(P) + [sys.executable, "-m", "braidpy", "calibrate", "-o", path,
                              "--layer", "dense:8", "--samples", *map(str, picks),
                              "--cores", str(runner.cores), "--repeats",
                              "2" if runner.args.small else "3", "-q"]
    why = runner.skip_reason(P, launch_seconds(P) + 3)
    if why:
        return {"status": "skipped", "reason": why}
    run = launch(cmd, runner.env, runner.hard_timeout(60 + 5 * P), runner.workdir)
    ok = run["status"] == "exited" and run["rc"] == 0 and os.path.exists(path)
    return {"path": path if ok else None, "status": "ok" if ok else "failed",
            "seconds": run["wall_seconds"], "cmd": cmd,
            "reason": None if ok else (run["reason"] or run["output_tail"][-400:])}


def auto_choice(row: Dict[str, Any], P: int, calibration: Optional[str], check_every: int,
                grid: Optional[Tuple[int, int, int]] = None) -> Dict[str, Any]:
    """What --grid auto picks for this row at P (braidpy.perf.auto.decide_grid, the
    function the command line runs on rank 0): the grid, with the MGRIT setting the
    command line takes: with quality checks every ``check_every`` steps (their cost
    counted) the fastest qualified one for the row's depth, else (0) the preset's.
    ``grid``: only that grid (the setting for it)."""
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
        c = decide_grid(spec, P, calibration, mode=s["mode"], grid=grid,
                        settings=training_settings(s["mode"], {}, default,
                                                   checked=bool(check_every),
                                                   nlayers=net.nlayers),
                        check_every=check_every,
                        trials=trials_per_step(row["optimizer"]))
        # In the default mode a grid without layer or space ranks runs serial
        # backpropagation: its setting is moot.
        return {"shape": list(c.shape), "predicted_seconds": c.seconds,
                "summary": c.summary, "setting": dataclasses.asdict(c.setting),
                "preset_setting": c.setting == default,
                "runs_mgrit": c.shape[1] > 1 or c.shape[2] > 1}
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's reason
        return {"error": f"{type(exc).__name__}: {exc}"}


def setting_args(setting: Dict[str, Any]) -> List[str]:
    """braidpy train's options of a Setting (as a dict)."""
    return ["--m1", str(setting["m1"]), "--m2", str(setting["m2"]), "--relax",
            setting["relax"], "--levels", str(setting["levels"]), "--cf",
            str(setting["cfactor"])]


def setting_text(setting: Optional[Dict[str, Any]]) -> str:
    """A table's short form of a Setting: 'm1/2 F L3 cf8'."""
    if not setting:
        return ""
    return (f"m{setting['m1']}/{setting['m2']} {setting['relax']} L{setting['levels']} "
            f"cf{setting['cfactor']}")


def time_launch(runner: Runner, times: Sequence[Dict[str, Any]], P: int, mgrit: bool,
                key: Any) -> Dict[str, Any]:
    """Solve every time row in one launch (sequential on one process, or the examples'
    MGRIT on P ranks); per row a metric, and '_run' the launch."""
    est = runner.share(key)
    why = runner.skip_reason(P, min(est, launch_seconds(P) + 1))
    runner.done(key)
    if why:
        return {"_run": None, **{r["name"]: metric(reason=why, kind="skipped")
                                 for r in times}}
    spec = {"task": "time", "mgrit": mgrit,
            "rows": [{k: r[k] for k in ("name", "example", "args")} for r in times]}
    cmd = runner.prefix(P) + [sys.executable, SCRIPT, "--worker", json.dumps(spec)]
    run = launch(cmd, runner.env, runner.hard_timeout(max(30.0, 4 * est)), runner.workdir)
    out: Dict[str, Any] = {"_run": {k: run[k] for k in ("cmd", "status", "rc",
                                                        "wall_seconds", "output_tail")}}
    res = run["result"] or {}
    for r in times:
        got = res.get(r["name"])
        if got is None:
            why = run["reason"] or error_text(run)
            out[r["name"]] = metric(reason=why, kind="timeout" if run["status"] == "timeout"
                                    else "error")
        elif mgrit and not got["converged"]:
            out[r["name"]] = metric(reason=f"not converged to the tolerance in "
                                    f"{got['iterations']} iterations (residual "
                                    f"{got['residual']:.2e})", kind="error",
                                    **{k: got[k] for k in ("iterations", "residual")},
                                    solve_seconds=got["seconds"])
        else:
            out[r["name"]] = metric(got["seconds"], **{k: v for k, v in got.items()
                                                       if k not in ("seconds", "converged")})
    return out


def best_cell(cells: Sequence[Dict[str, Any]], P: int, names: Sequence[str],
              over: bool) -> Dict[str, Any]:
    """The fastest measured grid at P, per metric."""
    mine = [c for c in cells if c["P"] == P and c["column"] not in ("best",)]
    metrics: Dict[str, Any] = {}
    for name in names:
        have = [c for c in mine if "seconds" in c["metrics"].get(name, {})]
        if not have:
            metrics[name] = metric(reason=f"no grid measured a number at P = {P}",
                                   kind="none")
            continue
        c = min(have, key=lambda c: c["metrics"][name]["seconds"])
        metrics[name] = {**c["metrics"][name], "column": c["column"], "grid": c["grid"]}
    return {"P": P, "column": "best", "grid": None, "over": over, "metrics": metrics}
