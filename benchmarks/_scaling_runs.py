"""scaling.py's parts: time to a loss from ``braidpy train --log``, the rows, the plan, the
launches (one watched ``braidpy train``, the calibration, --grid auto's choice, the time
rows' solves) and the children's tasks."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from _harness import Budget, best
from _sidecar import HERE, ROOT, THREAD_VARS, launch, result_line

SCRIPT = str(HERE / "scaling.py")
RTOL = 1e-9  # slack on the target for round-off (a run equal to serial must reach it)
#: Open MPI delivers messages above its shared-memory eager limit only when the sender
#: enters MPI; raised above the states' size as the perf benchmarks do (MPICH ignores it).
OMPI_VARS = {"OMPI_MCA_btl_vader_eager_limit": "131072",
             "OMPI_MCA_btl_vader_max_send_size": "131072"}

# ------------------------------------------------------------------ time to a loss


def metric(seconds: Optional[float] = None, reason: Optional[str] = None,
           **extra: Any) -> Dict[str, Any]:
    """A measurement: {'seconds': x, ...} or {'reason': why, ...}."""
    if seconds is not None and math.isfinite(seconds):
        return {"seconds": float(seconds), **extra}
    return {"reason": reason or "no number", **extra}


def trailing_means(losses: Sequence[float], window: int = 1) -> List[Optional[float]]:
    """Mean of each loss with the window - 1 before it (None until there are window)."""
    return [None if i + 1 < window else sum(losses[i + 1 - window:i + 1]) / window
            for i in range(len(losses))]


def target_loss(losses: Sequence[float], window: int = 1) -> float:
    """The serial run's target: the mean of its last ``window`` logged losses."""
    if not losses:
        raise ValueError("no losses logged")
    tail = list(losses[-window:])
    return sum(tail) / len(tail)


def first_reaching(losses: Sequence[float], seconds: Sequence[float], target: float,
                   window: int = 1, rtol: float = RTOL) -> Optional[tuple]:
    """(1-based step, its step times summed) of the first step whose trailing
    ``window``-step mean loss is <= target (relative slack rtol); None if none is."""
    bound, total = target + rtol * abs(target), 0.0
    for i, mean in enumerate(trailing_means(losses, window)):
        total += seconds[i]
        if mean is not None and mean <= bound:
            return i + 1, total
    return None


def read_log(path: str) -> tuple:
    """(header, step records, end record) of a ``braidpy train --log`` file; a last line
    cut off by a killed run is ignored."""
    header, steps, end = None, [], None
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError:
        return None, [], None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == "step":
            steps.append(rec)
        elif rec.get("event") == "header":
            header = rec
        elif rec.get("event") == "end":
            end = rec
    return header, steps, end


def as_float(x: Any) -> float:
    """A logged number ('nan', 'inf' strings included) as a float."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def losses_of(steps: Sequence[dict]) -> List[float]:
    """Logged losses, anything not finite as +inf (never reaches a target)."""
    losses = [as_float(r.get("loss")) for r in steps]
    return [x if math.isfinite(x) else math.inf for x in losses]


def seconds_of(steps: Sequence[dict]) -> List[float]:
    return [as_float(r.get("seconds")) for r in steps]


def training_metrics(run: Dict[str, Any], target: Optional[Dict[str, Any]], window: int,
                     max_steps: int) -> Dict[str, Dict[str, Any]]:
    """per_step (the median without the first step, when there are two) and to_target of a
    training run: numbers, or reasons."""
    secs, losses, status = run["step_seconds"], run["losses"], run["status"]
    failed = status == "timeout" or (status == "exited" and run["rc"])
    why = run["reason"] or (error_text(run) if failed else None)
    if len(secs) >= 2:
        step = metric(statistics.median(secs[1:]), note=f"median of steps 2..{len(secs)}",
                      steps=len(secs))
    elif secs:
        step = metric(secs[0], note="one step only (includes the first step's setup)",
                      steps=1)
    elif run.get("limit_seconds") and status == "stopped":
        step = metric(reason=f"no step finished within {run['limit_seconds']:.3g} s",
                      kind="limit", at_least=run["limit_seconds"])
    else:
        step = metric(reason=why or "no step logged",
                      kind={"timeout": "timeout", "stopped": "limit"}.get(status, "error"))
    if target is None:
        return {"per_step": step, "to_target": metric(
            reason="no target: the serial run logged no loss", kind="error")}
    hit = first_reaching(losses, secs, target["loss"], window)
    if hit:
        reach = metric(hit[1], step=hit[0])
        if (run.get("ran") or {}).get("quality_check_every"):  # of which the checks took
            reach["check_seconds"] = sum(run["check_seconds"][:hit[0]])
    elif status == "stopped" and run["reason"].startswith("abandoned"):
        reach = metric(reason="not reached: " + run["reason"], kind="projected",
                       at_least=run["projected_seconds"])
    elif status == "stopped":
        reach = metric(reason=f"not reached within {run['limit_seconds']:.3g} s "
                       f"({len(secs)} steps)", kind="limit", at_least=run["limit_seconds"])
    elif failed:
        reach = metric(reason=f"not reached: {why}",
                       kind="timeout" if status == "timeout" else "error")
    elif run.get("stop_reason") not in (None, "iterations"):
        reach = metric(reason=f"not reached: training stopped ({run['stop_reason']}) after "
                       f"{len(secs)} steps", kind="error")
    else:
        last = trailing_means(losses, window)[-1] if losses else None
        reach = metric(reason=f"not reached within {max_steps} steps" + (
            f" ({sum(secs):.3g} s; loss {last:.4g} > {target['loss']:.4g})"
            if last is not None else ""), kind="steps")
    return {"per_step": step, "to_target": reach}


def error_text(run: Dict[str, Any]) -> str:
    """A failed launch in a line: its exit status and last line of output."""
    lines = run["output_tail"].strip().splitlines()
    return f"error: exit status {run['rc']}" + (f": {lines[-1][:200]}" if lines else "")


def with_speedup(m: Dict[str, Any], serial: Optional[float]) -> Dict[str, Any]:
    """The metric with its speedup over serial (or the bound a limit gives)."""
    if serial is not None and "seconds" in m:
        m["speedup"] = serial / m["seconds"]
    elif serial is not None and m.get("at_least"):
        m["speedup_below"] = serial / m["at_least"]
    return m


# ------------------------------------------------------------------ rows and the plan


def training_rows(small: bool, quick: bool) -> List[Dict[str, Any]]:
    """name, title, ``braidpy train`` arguments, layers, samples per step, optimizer."""
    table = ([("peaks16", 16, 400, 0), ("batch8", 16, 400, 8)] if small else
             [("peaks256", 256, 5000, 0), ("peaks1024", 1024, 5000, 0),
              ("batch32", 1024, 5000, 32)])
    rows = []
    for name, layers, samples, batch in table:
        args = ["peaks", "--preset", "paper", "--layers", str(layers), "--samples",
                str(samples)]
        args += ["--batch", str(batch), "--shuffle", "--optimizer", "adam"] if batch else []
        what = (f"shuffled batches of {batch} of {samples}, Adam" if batch else
                f"{samples} samples, full-batch L-BFGS")
        title = f"Peaks, {layers} layers, {what} ({'--small' if small else '--preset paper'})"
        if not (quick and name == "peaks1024"):
            rows.append(dict(name=name, title=title, args=args, layers=layers,
                             samples=batch or samples, optimizer="adam" if batch else "lbfgs"))
    return rows


def time_rows(small: bool) -> List[Dict[str, Any]]:
    """The time-integration rows: the example, its arguments, its time steps."""
    n = 512 if small else 16384
    heat = ["--ntime", str(n), "--tol", "1e-8"] + (["--nspace", "33"] if small else [])
    m = 2 * n if small else n
    return [dict(name="heat", example="ex02_heat1d", args=heat, ntime=n,
                 title=f"ex02 heat 1D, {n} implicit Euler steps x {33 if small else 513} "
                       f"points, MGRIT to 1e-8 (the example's defaults)"),
            dict(name="ode", example="ex01_scalar_ode", args=["--ntime", str(m), "--tol", "1e-8"],
                 ntime=m, title=f"ex01 scalar ODE, {m} backward Euler steps, MGRIT to 1e-8 "
                                f"(the example's defaults)")]


def launch_seconds(P: int) -> float:
    """Rough start-up of a launch: interpreter, imports, MPI, data, solver setup."""
    return 1.2 + 0.12 * P


#: One-shot work per step over serial's on one rank (DESIGN.md §10: ~5.75 layer calls per
#: serial one; batched calls cost about twice as much each on full batches, >= 1000 samples,
#: little more on small ones), and the parallel efficiency assumed for P > 1 (~60 % at 16).
ONESHOT_WORK = {True: 12.0, False: 2.5}
EFFICIENCY = 0.6


def estimates(train: Sequence[dict], times: Sequence[dict], ranks: Sequence[int],
              cap: float, auto: bool) -> Dict[tuple, float]:
    """Estimated seconds of every launch: (row name or "time", column, P) -> seconds."""
    est = {}
    for row in train:
        s, T = row["step_estimate"], row["step_estimate"] * row["steps"]
        est[(row["name"], "serial", 1)] = launch_seconds(1) + T
        for P in ranks:
            if P > 1:
                est[(row["name"], "data", P)] = launch_seconds(P) + T / (0.85 * P)
            ratio = ONESHOT_WORK[row["samples"] >= 1000] / (P * (EFFICIENCY if P > 1 else 1))
            # On pace: it runs to the target; else it is abandoned after 2 steps.
            run = T * ratio if ratio <= cap else min(cap * T, 2.5 * s * ratio)
            for column in ("layer", "auto") if auto and P > 1 else ("layer",):
                est[(row["name"], column, P)] = launch_seconds(P) + min(run, cap * T)
    if times:
        seq = sum(r["step_estimate"] * r["ntime"] for r in times)
        est[("time", "serial", 1)] = launch_seconds(1) + 1.1 * seq
        for P in ranks:  # MGRIT ~8x sequential's work, then the example's own checks
            est[("time", "layer", P)] = launch_seconds(P) + 1.5 * seq + 8.8 * seq / (
                P * (EFFICIENCY if P > 1 else 1))
    return est


def plan(train: Sequence[dict], times: Sequence[dict], ranks: Sequence[int], args: Any,
         auto: bool) -> Dict[str, Any]:
    """Step counts that fit --budget by the estimate (the costliest row's K lowered first,
    never below --min-steps or two windows) and the estimate."""
    calibrate = launch_seconds(max(ranks)) + 3.0 if auto else 0.0

    def total() -> float:
        return calibrate + sum(estimates(train, times, ranks, args.cap, auto).values())

    def least(row: dict) -> int:
        return max(args.min_steps, 2 * row["window"])

    lowered = set()
    while args.budget and total() > 0.9 * args.budget:  # a tenth for what it misses
        row = max((r for r in train if r["steps"] > least(r)),
                  key=lambda r: r["steps"] * r["step_estimate"], default=None)
        if row is None:
            break
        row["steps"] = max(least(row), int(row["steps"] * 0.8))
        lowered.add(row["name"])
    return {"estimate_seconds": total(), "calibration_estimate": calibrate,
            "lowered": sorted(lowered)}


def core_check(processes: int, steps: int = 2000) -> Dict[str, Any]:
    """cpu_scaling.py's check: the same NumPy work in 1 and in ``processes`` processes at
    once; time per process over one process's (near 1: the ranks will have a core each)."""
    from cpu_scaling import run

    one, many = statistics.mean(run(1, steps)), run(processes, steps)
    return {"processes": processes, "steps": steps, "one_seconds": one,
            "each_seconds_mean": statistics.mean(many), "each_seconds_max": max(many),
            "ratio": statistics.mean(many) / one}


# ------------------------------------------------------------------ launches


class Runner:
    """The launches: the child environment, mpiexec, --budget and each launch's share."""

    def __init__(self, args: Any, mpiexec: Optional[str], impl: str, cores: int,
                 workdir: str):
        self.args, self.mpiexec, self.impl, self.cores = args, mpiexec, impl, cores
        self.workdir, self.budget, self.calibration = workdir, Budget(args.budget), None
        self.child_env = {k: "1" for k in THREAD_VARS}
        self.env = {**os.environ, **self.child_env, "PYTHONUNBUFFERED": "1"}
        if impl == "Open MPI":
            root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
            self.env = {**OMPI_VARS, **(root if os.geteuid() == 0 else {}), **self.env}
        self.remaining: Dict[Any, float] = {}  # launch key -> estimate, until it runs

    def skip_reason(self, P: int, need: float) -> Optional[str]:
        if P > 1 and not self.mpiexec:
            return "skipped: no mpiexec found (pip install mpich, or set BRAIDPY_MPIEXEC)"
        if self.budget.left() < need:
            return (f"skipped: --budget {self.args.budget:.0f} s would be exceeded "
                    f"({self.budget.elapsed():.0f} s used, this launch needs ~{need:.0f} s)")
        return None

    def share(self, key: Any) -> float:
        """Seconds this launch may take: its estimate times the budget left per estimated
        second of all launches still to come (inf without a budget)."""
        est = self.remaining.get(key, 10.0)
        return est * self.budget.factor(sum(self.remaining.values()))

    def done(self, key: Any) -> None:
        self.remaining.pop(key, None)

    def run(self, P: int, cmd: List[str], seconds: float, watch: Any = None) -> dict:
        """``cmd`` on P ranks, killed past ``seconds`` (--timeout, the budget's end)."""
        over = ["--oversubscribe"] if self.impl == "Open MPI" and P > self.cores else []
        mpi = [self.mpiexec or "mpiexec", "-n", str(P), *over] if P > 1 else []
        limit = max(1.0, min(self.args.timeout, seconds, self.budget.left() + 5.0))
        return launch(mpi + cmd, self.env, limit, self.workdir, watch)


def run_training(runner: Runner, row: dict, P: int, grid: Optional[str],
                 mode: Optional[str], key: Any, target: Optional[dict],
                 serial_means: Sequence[Optional[float]], limit: float, steps: int,
                 extra: Sequence[str] = ()) -> Dict[str, Any]:
    """One ``braidpy train`` launch (``extra``: more of its options), watched through its
    log: stopped at the target, at its limit, or abandoned; its run record."""
    log = os.path.join(runner.workdir, f"{row['name']}-{P}-{grid or 'serial'}-"
                       f"{mode or 'default'}.jsonl".replace(",", "x"))
    with contextlib.suppress(OSError):
        os.unlink(log)
    cmd = [sys.executable, "-m", "braidpy", "train", *row["args"], "--iterations",
           str(steps), "--validate-every", "0", "--log", log, "-q"]
    cmd += (["--grid", grid] if grid else []) + (["--mode", mode] if mode else [])
    cmd += ["--calibration", str(runner.calibration)] if grid == "auto" else []
    seen: Dict[str, Any] = {"header_at": None, "projected": None}
    window = row["window"]

    def watch(elapsed: float) -> Optional[str]:
        header, recs, _ = read_log(log)
        if header is None:
            return None
        seen["header_at"] = seen["header_at"] or elapsed
        if target is None:
            return None
        losses, secs = losses_of(recs), seconds_of(recs)
        if first_reaching(losses, secs, target["loss"], window):
            return "reached"
        used, j = sum(secs), len(recs)
        if elapsed - seen["header_at"] > limit + 0.5 or used > limit:
            return f"limit: not reached within its limit of {limit:.3g} s"
        if j >= 2:
            pace = statistics.median(secs[1:])
            mine = trailing_means(losses, window)[-1]
            theirs = serial_means[j - 1] if j - 1 < len(serial_means) else None
            need = used + max(target["step"] - j, 1) * pace
            if (mine is None or theirs is None or mine > theirs) and need > limit:
                seen["projected"] = need
                return (f"abandoned after {j} steps ({used:.3g} s): at {pace:.3g} s/step, "
                        f"with its loss not below the serial run's at that step, reaching "
                        f"the target takes >= {need:.3g} s > its limit of {limit:.3g} s")
        return None

    hard = launch_seconds(P) * 3 + 20 + (limit if target else runner.share(key) * 3)
    run = runner.run(P, cmd + list(extra), hard, watch)
    header, recs, end = read_log(log)
    config = (header or {}).get("config") or {}
    ran = {k: config.get(k) for k in ("m1", "m2", "relax", "cfactor", "quality_check_every")}
    run.update(grid=(header or {}).get("grid"), steps_logged=len(recs),
               # the MGRIT setting and checks the run reports (its log's header)
               ran={**ran, "levels": (config.get("mgrit") or {}).get("max_levels")},
               losses=losses_of(recs), step_seconds=seconds_of(recs),
               # of the steps' seconds, what the gradient-quality checks took
               check_seconds=[as_float(r.get("quality_check_seconds", 0.0)) for r in recs],
               startup_seconds=seen["header_at"], limit_seconds=limit if target else None,
               projected_seconds=seen["projected"], stop_reason=(end or {}).get("stop_reason"))
    return run


def calibrate(runner: Runner, ranks: Sequence[int], train: Sequence[dict]) -> Dict[str, Any]:
    """``braidpy calibrate`` on this host at the most ranks (network costs measured), or
    the --calibration given."""
    if runner.args.calibration:
        runner.calibration = runner.args.calibration
        return {"path": runner.calibration, "status": "given"}
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


def auto_choice(row: dict, P: int, calibration: Optional[str], check_every: int,
                grid: Optional[tuple] = None) -> Dict[str, Any]:
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


def time_launch(runner: Runner, times: Sequence[dict], P: int, mgrit: bool,
                key: Any) -> Dict[str, Any]:
    """Every time row solved in one launch (sequential stepping on one process, or the
    examples' MGRIT on P ranks): per row a metric, and '_run' the launch."""
    est = runner.share(key)
    why = runner.skip_reason(P, min(est, launch_seconds(P) + 1))
    runner.done(key)
    if why:
        return {"_run": None, **{r["name"]: metric(reason=why, kind="skipped") for r in times}}
    spec = {"task": "time", "mgrit": mgrit,
            "rows": [{k: r[k] for k in ("name", "example", "args")} for r in times]}
    run = runner.run(P, [sys.executable, SCRIPT, "--worker", json.dumps(spec)], max(30, 4 * est))
    out: Dict[str, Any] = {"_run": {k: run[k] for k in ("cmd", "status", "rc", "wall_seconds",
                                                        "output_tail")}}
    for r in times:
        got = (run["result"] or {}).get(r["name"])
        if got is None:
            out[r["name"]] = metric(reason=run["reason"] or error_text(run),
                                    kind="timeout" if run["status"] == "timeout" else "error")
        elif mgrit and not got["converged"]:
            out[r["name"]] = metric(
                reason=f"not converged to the tolerance in {got['iterations']} iterations "
                       f"(residual {got['residual']:.2e})", kind="error",
                iterations=got["iterations"], residual=got["residual"],
                solve_seconds=got["seconds"])
        else:
            out[r["name"]] = metric(got["seconds"], **{k: v for k, v in got.items()
                                                       if k not in ("seconds", "converged")})
    return out


# ------------------------------------------------------------------ the children


def worker(spec: Dict[str, Any]) -> None:
    """A child's task (the probe, or the time rows' solves); rank 0 prints its result."""
    out = probe(spec) if spec["task"] == "probe" else time_solves(spec)
    if out is not None:
        result_line(out)


def _example(name: str) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"examples.{name}")


def probe(spec: Dict[str, Any]) -> Dict[str, float]:
    """Seconds of one serial gradient per training row (the plan's estimate; the least of
    two or more, the first paying the cold start) and of one sequential step per time row."""
    from braidpy import data
    from braidpy.nn import ResNet
    from braidpy.train import TrainConfig, Trainer

    out = {}
    for row in spec["training"]:
        X, C = data.peaks(max(row["samples"], 8), 1)
        net = ResNet((2,), 5, width=8, nlayers=row["layers"])
        tr = Trainer(net, (X, C), None, TrainConfig(mode="serial", validate_every=0))
        n = row["samples"]

        def gradient() -> Any:
            return tr.evaluator.gradient(tr.params, X[:n], C[:n])

        out[row["name"]] = min(best(gradient, 1), best(gradient, 2, budget=0.5))
    for row in spec["time"]:
        args = _example(row["example"]).parse_args(row["args"] + ["--ntime", "200"])
        out[row["name"]] = sequential_seconds(row["example"], args) / 200
    return out


def sequential_seconds(example: str, args: Any) -> float:
    """Seconds of plain sequential stepping over the example's time grid (its app's
    ``step`` in a loop, one state, nothing stored)."""
    import numpy as np

    mod = _example(example)
    app = mod.Heat1D(nspace=args.nspace) if example == "ex02_heat1d" else \
        mod.ScalarODE(lam=args.lam)
    grid = np.linspace(0.0, args.tstop, args.ntime + 1).tolist()
    app.tstart, app.tstop, app.ntime = 0.0, float(args.tstop), args.ntime
    u = app.init(0.0)
    start = time.perf_counter()
    for t0, t1 in zip(grid[:-1], grid[1:]):
        out = app.step(u, t0, t1, None)
        if out is not None:
            u = out
    return time.perf_counter() - start


def time_solves(spec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Per time row, after a warm-up: sequential stepping (one process), or the example's
    own MGRIT solve (its ``main`` on every rank; the slowest rank's total)."""
    out: Dict[str, Any] = {}
    comm = None
    if spec["mgrit"]:
        from braidpy.parallel import world

        comm = world()
    for row in spec["rows"]:
        mod = _example(row["example"])
        if not spec["mgrit"]:
            sequential_seconds(row["example"], mod.parse_args(row["args"] + ["--ntime", "64"]))
            out[row["name"]] = {"seconds": sequential_seconds(row["example"],
                                                              mod.parse_args(row["args"]))}
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            mod.main(row["args"] + ["--ntime", "64"])  # warm-up
            if comm is not None:
                comm.Barrier()
            r = mod.main(row["args"])
        total = float(r.timings["total"])
        if comm is not None:
            from mpi4py import MPI

            total = comm.allreduce(total, op=MPI.MAX)
        residual = float(r.residuals[-1]) if len(r.residuals) else math.nan
        out[row["name"]] = {"seconds": total, "iterations": int(r.iterations),
                            "residual": residual,
                            "converged": bool(residual <= mod.parse_args(row["args"]).tol)}
    return None if comm is not None and comm.Get_rank() != 0 else out
