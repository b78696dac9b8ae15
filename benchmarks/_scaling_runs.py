"""scaling.py's pieces without a launch: time to a loss from ``braidpy train --log``, the
rows, the children's tasks (a probe of the step costs, the time rows' solves) and the plan."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from _harness import ROOT as _ROOT
from _sidecar import result_line

ROOT = str(_ROOT)


RTOL = 1e-9  # slack on the target for round-off (a run equal to serial must reach it)


def trailing_means(losses: Sequence[float], window: int = 1) -> List[Optional[float]]:
    """Mean of each loss with the window - 1 before it (None until there are window)."""
    out: List[Optional[float]] = []
    for i in range(len(losses)):
        out.append(None if i + 1 < window else
                   sum(losses[i + 1 - window:i + 1]) / window)
    return out


def target_loss(losses: Sequence[float], window: int = 1) -> float:
    """The serial run's target: the mean of its last ``window`` logged losses."""
    if not losses:
        raise ValueError("no losses logged")
    tail = list(losses[-window:])
    return sum(tail) / len(tail)


def first_reaching(losses: Sequence[float], seconds: Sequence[float], target: float,
                   window: int = 1, rtol: float = RTOL) -> Optional[Tuple[int, float]]:
    """(step, seconds) of the first logged step whose trailing ``window``-step mean
    loss is <= ``target`` (with relative slack ``rtol``): its 1-based step number and
    the sum of the step times up to it. None when no step reaches it.

    >>> first_reaching([3.0, 2.0, 1.0, 0.5], [1.0, 1.0, 1.0, 1.0], 1.0)
    (3, 3.0)
    >>> first_reaching([3.0, 2.0], [1.0, 1.0], 1.0) is None
    True
    """
    if len(seconds) < len(losses):
        raise ValueError("a step time for every loss")
    bound = target + rtol * abs(target)
    total = 0.0
    for i, mean in enumerate(trailing_means(losses, window)):
        total += seconds[i]
        if mean is not None and mean <= bound:
            return i + 1, total
    return None


def read_log(path: str) -> Tuple[Optional[dict], List[dict], Optional[dict]]:
    """(header, step records, end record) of a ``braidpy train --log`` file; a last
    line cut off by a killed run is ignored."""
    header, steps, end = None, [], None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None, [], None
    for line in text.split("\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        event = rec.get("event")
        if event == "header":
            header = rec
        elif event == "step":
            steps.append(rec)
        elif event == "end":
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
    out = []
    for r in steps:
        x = as_float(r.get("loss"))
        out.append(x if math.isfinite(x) else math.inf)
    return out


def seconds_of(steps: Sequence[dict]) -> List[float]:
    return [as_float(r.get("seconds")) for r in steps]


def per_step(seconds: Sequence[float]) -> Tuple[float, str]:
    """(time per step, how): the median without the first step when there are two."""
    if len(seconds) >= 2:
        return statistics.median(seconds[1:]), f"median of steps 2..{len(seconds)}"
    return seconds[0], "one step only (includes the first step's setup)"


def core_check(processes: int, steps: int = 2000) -> Dict[str, Any]:
    """benchmarks/cpu_scaling.py's check: the same NumPy work in 1 and in ``processes``
    processes at once (no MPI); time per process over one process's. Near 1: the ranks
    will have cores of their own; well above: hyperthreads, a shared host, or load."""
    from cpu_scaling import run

    try:
        from threadpoolctl import threadpool_limits

        limits: Any = threadpool_limits(1)
    except ImportError:
        limits = contextlib.nullcontext()
    with limits:
        one = statistics.mean(run(1, steps))
        many = run(processes, steps)
    return {"processes": processes, "steps": steps, "one_seconds": one,
            "each_seconds_mean": statistics.mean(many), "each_seconds_max": max(many),
            "ratio": statistics.mean(many) / one}


def training_rows(small: bool, quick: bool) -> List[Dict[str, Any]]:
    """The training rows: name, title, braidpy train arguments, samples per step."""
    if small:
        return [
            dict(name="peaks16", title="Peaks, 16 layers, 400 samples, L-BFGS (--small)",
                 args=["peaks", "--preset", "paper", "--layers", "16", "--samples", "400"],
                 layers=16, samples=400, optimizer="lbfgs"),
            dict(name="batch8", title="Peaks, 16 layers, batches of 8, Adam (--small)",
                 args=["peaks", "--preset", "paper", "--layers", "16", "--samples", "400",
                       "--batch", "8", "--shuffle", "--optimizer", "adam"],
                 layers=16, samples=8, optimizer="adam"),
        ]
    rows = [
        dict(name="peaks256", title="Peaks, 256 layers, 5000 samples, full-batch L-BFGS "
             "(--preset paper)",
             args=["peaks", "--preset", "paper", "--layers", "256", "--samples", "5000"],
             layers=256, samples=5000, optimizer="lbfgs"),
        dict(name="peaks1024", title="Peaks, 1024 layers, 5000 samples, full-batch L-BFGS "
             "(--preset paper)",
             args=["peaks", "--preset", "paper", "--layers", "1024", "--samples", "5000"],
             layers=1024, samples=5000, optimizer="lbfgs"),
        dict(name="batch32", title="Peaks, 1024 layers, shuffled batches of 32 of 5000, "
             "Adam (--preset paper)",
             args=["peaks", "--preset", "paper", "--layers", "1024", "--samples", "5000",
                   "--batch", "32", "--shuffle", "--optimizer", "adam"],
             layers=1024, samples=32, optimizer="adam"),
    ]
    return [r for r in rows if not (quick and r["name"] == "peaks1024")]


def time_rows(small: bool) -> List[Dict[str, Any]]:
    """The time-integration rows: the example and its command-line arguments."""
    ntime = 512 if small else 16384
    heat = ["--ntime", str(ntime), "--tol", "1e-8"] + (["--nspace", "33"] if small else [])
    return [
        dict(name="heat", title=f"ex02 heat 1D, {ntime} implicit Euler steps x "
             f"{33 if small else 513} points, MGRIT to 1e-8 (the example's defaults)",
             example="ex02_heat1d", args=heat),
        dict(name="ode", title=f"ex01 scalar ODE, {ntime * 2 if small else ntime} backward "
             f"Euler steps, MGRIT to 1e-8 (the example's defaults)",
             example="ex01_scalar_ode",
             args=["--ntime", str(ntime * 2 if small else ntime), "--tol", "1e-8"]),
    ]


def worker(spec: Dict[str, Any]) -> None:
    """A child's task; rank 0 prints ``RESULT {json}``."""
    task = spec["task"]
    if task == "probe":
        out = probe(spec)
    elif task == "time":
        out = time_solves(spec)
    else:
        raise ValueError(f"unknown task {task!r}")
    if out is not None:
        result_line(out)


def probe(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Seconds of one serial gradient per training row (the plan's estimate) and of one
    sequential step per time row."""
    from braidpy import data
    from braidpy.nn import ResNet
    from braidpy.train import TrainConfig, Trainer

    out: Dict[str, Any] = {}
    for row in spec["training"]:
        X, C = data.peaks(max(row["samples"], 8), 1)
        net = ResNet((2,), 5, width=8, nlayers=row["layers"])
        tr = Trainer(net, (X, C), None, TrainConfig(mode="serial", validate_every=0))
        times = []  # two at least: the first pays for the cold start (the states' block)
        while len(times) < 2 or (len(times) < 3 and sum(times) < 0.5):
            start = time.perf_counter()
            tr.evaluator.gradient(tr.params, X[:row["samples"]], C[:row["samples"]])
            times.append(time.perf_counter() - start)
        out[row["name"]] = min(times)
    sys.path.insert(0, ROOT)
    for row in spec["time"]:
        mod = _example(row["example"])
        n = 200
        args = mod.parse_args(row["args"] + ["--ntime", str(n)])
        out[row["name"]] = sequential_seconds(row["example"], args) / n
    return out


def _example(name: str):
    import importlib

    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module(f"examples.{name}")


def sequential_seconds(example: str, args: argparse.Namespace) -> float:
    """Seconds of plain sequential stepping over the example's time grid (a loop over
    its app's ``step``, one state, nothing stored)."""
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
    """Sequential stepping (spec mgrit false, one process) or the example's own MGRIT
    solve (its ``main``, on every rank of the launch) per time row, after a warm-up."""
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
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            mod.main(row["args"] + ["--ntime", "64"])  # warm-up
            if comm is not None:
                comm.Barrier()
            r = mod.main(row["args"])
        total = float(r.timings["total"])
        if comm is not None:
            total = comm.allreduce(total, op=_mpi_max())
        tol = mod.parse_args(row["args"]).tol
        residual = float(r.residuals[-1]) if len(r.residuals) else math.nan
        out[row["name"]] = {"seconds": total, "iterations": int(r.iterations),
                            "residual": residual, "converged": bool(residual <= tol)}
    if comm is not None and comm.Get_rank() != 0:
        return None
    return out


def _mpi_max():
    from mpi4py import MPI

    return MPI.MAX


def launch_seconds(P: int) -> float:
    """Rough start-up of a launch: interpreter, imports, MPI, data, solver setup."""
    return 1.2 + 0.12 * P


#: Rough one-shot cost per step over serial's on one rank: DESIGN.md §10 counts ~5.75
#: layer calls per serial one; the batched calls cost about twice as much each on full
#: batches (measured 13x on the 2-core VM) and little more on small ones.
ONESHOT_WORK = {"full": 12.0, "small": 2.5}


EFFICIENCY = 0.6  # parallel efficiency assumed for P > 1 (DESIGN.md §10: ~60 % at 16)


def oneshot_ratio(row: Dict[str, Any], P: int) -> float:
    work = ONESHOT_WORK["full" if row["samples"] >= 1000 else "small"]
    return work / (P * (EFFICIENCY if P > 1 else 1.0))


def estimate_training(row: Dict[str, Any], ranks: Sequence[int], cap: float,
                      auto: bool) -> Dict[Tuple[str, int], float]:
    """Estimated seconds of each launch of a training row: (column, P) -> seconds."""
    s, K = row["step_estimate"], row["steps"]
    T = s * K
    est = {("serial", 1): launch_seconds(1) + T}
    for P in ranks:
        if P > 1:
            est[("data", P)] = launch_seconds(P) + T / (0.85 * P)
        for column in (("layer", "auto") if auto and P > 1 else ("layer",)):
            ratio = oneshot_ratio(row, P)
            # On pace: it runs to the target; else it is abandoned after 2 steps.
            run = T * ratio if ratio <= cap else min(cap * T, 2.5 * s * ratio)
            est[(column, P)] = launch_seconds(P) + min(run, cap * T)
    return est


def estimate_time_rows(rows: Sequence[Dict[str, Any]], ranks: Sequence[int]
                       ) -> Dict[Tuple[str, int], float]:
    seq = sum(r["step_estimate"] * r["ntime"] for r in rows)
    est = {("serial", 1): launch_seconds(1) + 1.1 * seq}
    for P in ranks:
        # MGRIT ~8x sequential's work; then the example's own checks on rank 0 (the
        # space-time solution gathered, sequential stepping again).
        est[("layer", P)] = launch_seconds(P) + 1.5 * seq + 1.1 * seq * 8 / (
            P * (EFFICIENCY if P > 1 else 1.0))
    return est


def least_steps(row: Dict[str, Any], args: argparse.Namespace) -> int:
    """The fewest steps --budget may leave a row: --min-steps, and two windows of an
    averaged (Adam) row."""
    return max(args.min_steps, 2 * row["window"])


def plan(train: List[Dict[str, Any]], times: List[Dict[str, Any]], ranks: Sequence[int],
         args: argparse.Namespace, auto: bool) -> Dict[str, Any]:
    """Step counts that fit --budget by the estimate (the most expensive row's lowered
    first, never below --min-steps) and the estimate itself."""
    calibrate = launch_seconds(max(ranks)) + 3.0 if auto else 0.0

    def total() -> float:
        t = calibrate + sum(estimate_time_rows(times, ranks).values()) if times else calibrate
        for row in train:
            t += sum(estimate_training(row, ranks, args.cap, auto).values())
        return t

    lowered = []
    if args.budget:
        fixed = 0.9 * args.budget  # a tenth for what the estimate misses
        while total() > fixed:
            row = max((r for r in train if r["steps"] > least_steps(r, args)),
                      key=lambda r: r["steps"] * r["step_estimate"], default=None)
            if row is None:
                break
            row["steps"] = max(least_steps(row, args), int(row["steps"] * 0.8))
            lowered.append(row["name"])
    return {"estimate_seconds": total(), "calibration_estimate": calibrate,
            "lowered": sorted(set(lowered))}


def metric(seconds: Optional[float] = None, reason: Optional[str] = None,
           **extra: Any) -> Dict[str, Any]:
    """A measurement: {'seconds': x, ...} or {'reason': why, ...}."""
    if seconds is not None and math.isfinite(seconds):
        return {"seconds": float(seconds), **extra}
    return {"reason": reason or "no number", **extra}


def grid_text(shape: Sequence[int]) -> str:
    return ",".join(map(str, shape))
