"""scaling.py's parts: time to a loss from ``braidpy train --log``, the rows, the launches
(one watched ``braidpy train``, the time rows' solves, their child) and the tables."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import statistics
import sys
import time

from _harness import Budget, print_table
from _sidecar import HERE, ROOT, THREAD_VARS, launch, result_line

SCRIPT = str(HERE / "scaling.py")
RTOL = 1e-9  # slack on the target for round-off (a run equal to serial must reach it)
#: Open MPI delivers messages above its eager limit only when the sender enters MPI.
OMPI_VARS = {"OMPI_MCA_btl_vader_eager_limit": "131072",
             "OMPI_MCA_btl_vader_max_send_size": "131072"}


def metric(seconds=None, reason=None, **extra):
    """A measurement: {'seconds': x, ...} or {'reason': why, ...}."""
    if seconds is not None and math.isfinite(seconds):
        return {"seconds": float(seconds), **extra}
    return {"reason": reason or "no number", **extra}


def trailing_means(losses, window=1):
    """Mean of each loss with the window - 1 before it (None until there are window)."""
    return [None if i + 1 < window else sum(losses[i + 1 - window:i + 1]) / window
            for i in range(len(losses))]


def target_loss(losses, window=1):
    """The serial run's target: the mean of its last ``window`` logged losses."""
    if not losses:
        raise ValueError("no losses logged")
    return sum(losses[-window:]) / len(losses[-window:])


def first_reaching(losses, seconds, target, window=1, rtol=RTOL):
    """(1-based step, its step times summed) of the first step whose trailing
    ``window``-step mean loss is <= target (relative slack rtol); None if none is."""
    bound, total = target + rtol * abs(target), 0.0
    for i, mean in enumerate(trailing_means(losses, window)):
        total += seconds[i]
        if mean is not None and mean <= bound:
            return i + 1, total
    return None


def read_log(path):
    """(header, step records, end record) of a ``braidpy train --log`` file; a last line
    cut off by a killed run is ignored."""
    events = {"header": [None], "step": [], "end": [None]}
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError, AttributeError):
                rec = json.loads(line)
                events.get(rec.get("event"), []).append(rec)
    return events["header"][-1], events["step"], events["end"][-1]


def as_float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def losses_of(steps):
    """Logged losses, anything not finite as +inf (never reaches a target)."""
    losses = [as_float(r.get("loss")) for r in steps]
    return [x if math.isfinite(x) else math.inf for x in losses]


def seconds_of(steps):
    return [as_float(r.get("seconds")) for r in steps]


def training_metrics(run, target, window, max_steps):
    """per_step (the median without the first step, when there are two) and to_target of
    a training run: numbers, or reasons."""
    secs, losses, status = run["step_seconds"], run["losses"], run["status"]
    failed = status == "timeout" or (status == "exited" and run["rc"])
    why = run["reason"] or (error_text(run) if failed else None)
    limited = status == "stopped" and run.get("limit_seconds")
    if secs:
        step = metric(statistics.median(secs[1:] or secs), steps=len(secs))
    elif limited:
        step = metric(reason=f"no step finished within {run['limit_seconds']:.3g} s",
                      kind="limit", at_least=run["limit_seconds"])
    else:
        step = metric(reason=why or "no step logged",
                      kind="timeout" if status == "timeout" else "error")
    if target is None:
        return {"per_step": step, "to_target": metric(
            reason="no target: the serial run logged no loss", kind="error")}
    hit = first_reaching(losses, secs, target["loss"], window)
    if hit:
        reach = metric(hit[1], step=hit[0])
        if (run.get("ran") or {}).get("quality_check_every"):  # of which the checks took
            reach["check_seconds"] = sum(run["check_seconds"][:hit[0]])
    elif limited:
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


def error_text(run):
    lines = run["output_tail"].strip().splitlines()
    return f"error: exit status {run['rc']}" + (f": {lines[-1][:200]}" if lines else "")


def with_speedup(m, serial):
    """The metric with its speedup over serial (or the bound a limit gives)."""
    if serial is not None and "seconds" in m:
        m["speedup"] = serial / m["seconds"]
    elif serial is not None and m.get("at_least"):
        m["speedup_below"] = serial / m["at_least"]
    return m


def training_rows(small, quick):
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


def time_rows(small):
    """The time-integration rows: the example and its arguments (MGRIT to 1e-8)."""
    n = 512 if small else 16384
    heat = ["--ntime", str(n), "--tol", "1e-8"] + (["--nspace", "33"] if small else [])
    m = 2 * n if small else n
    return [dict(name="heat", example="ex02_heat1d", args=heat,
                 title=f"ex02 heat 1D, {n} implicit Euler steps x {33 if small else 513} "
                       f"points, MGRIT to 1e-8 (the example's defaults)"),
            dict(name="ode", example="ex01_scalar_ode", args=["--ntime", str(m), "--tol", "1e-8"],
                 title=f"ex01 scalar ODE, {m} backward Euler steps, MGRIT to 1e-8 "
                       f"(the example's defaults)")]


def launch_seconds(P):
    """Rough start-up of a launch."""
    return 1.2 + 0.12 * P


class Runner:
    """The launches: the child environment, mpiexec, --budget and each launch's share."""

    def __init__(self, args, mpiexec, impl, cores, workdir):
        self.args, self.mpiexec, self.impl, self.cores = args, mpiexec, impl, cores
        self.workdir, self.budget, self.calibration = workdir, Budget(args.budget), None
        self.child_env = {k: "1" for k in THREAD_VARS}
        self.env = {**os.environ, **self.child_env, "PYTHONUNBUFFERED": "1"}
        if impl == "Open MPI":
            root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
            self.env = {**OMPI_VARS, **(root if os.geteuid() == 0 else {}), **self.env}
        self.weights = {}  # launch key -> its weight in the budget, until it runs

    def skip_reason(self, P, need):
        if P > 1 and not self.mpiexec:
            return "skipped: no mpiexec found (pip install mpich, or set BRAIDPY_MPIEXEC)"
        if self.budget.left() < need:
            return (f"skipped: --budget {self.args.budget:.0f} s would be exceeded "
                    f"({self.budget.elapsed():.0f} s used, this launch needs ~{need:.0f} s)")
        return None

    def share(self, key):
        """Seconds this launch may take (inf without a budget): its weight's part of the
        budget left, among the launches still to come; the launch is then done."""
        weight = self.weights.pop(key, 1.0)
        return weight * self.budget.factor(weight + sum(self.weights.values()))

    def run(self, P, cmd, seconds, watch=None):
        """``cmd`` on P ranks, killed past ``seconds`` (and --timeout, the budget's end)."""
        over = ["--oversubscribe"] if self.impl == "Open MPI" and P > self.cores else []
        mpi = [self.mpiexec or "mpiexec", "-n", str(P), *over] if P > 1 else []
        limit = max(1.0, min(self.args.timeout, seconds, self.budget.left() + 5.0))
        return launch(mpi + cmd, self.env, limit, self.workdir, watch)


def run_training(runner, row, P, grid, mode, target, limit, steps, extra=()):
    """One ``braidpy train`` launch (``extra``: more of its options), watched through its
    log: stopped once it reaches the target or past ``limit`` s; its run record."""
    log = os.path.join(runner.workdir, f"{row['name']}-{P}-{grid or 'serial'}-"
                       f"{mode or 'default'}.jsonl".replace(",", "x"))
    with contextlib.suppress(OSError):
        os.unlink(log)
    cmd = [sys.executable, "-m", "braidpy", "train", *row["args"], "--iterations",
           str(steps), "--validate-every", "0", "--log", log, "-q"]
    cmd += (["--grid", grid] if grid else []) + (["--mode", mode] if mode else [])
    cmd += ["--calibration", str(runner.calibration)] if grid == "auto" else []
    started = []  # when the log's header appeared

    def watch(elapsed):
        header, recs, _ = read_log(log)
        if header is None:
            return None
        started[:] = started or [elapsed]
        secs = seconds_of(recs)
        if target and first_reaching(losses_of(recs), secs, target["loss"], row["window"]):
            return "reached"
        if elapsed - started[0] > limit + 0.5 or sum(secs) > limit:
            return f"limit: stopped at its limit of {limit:.3g} s"
        return None

    run = runner.run(P, cmd + list(extra), launch_seconds(P) * 3 + 20 + limit, watch)
    header, recs, end = read_log(log)
    config = (header or {}).get("config") or {}
    ran = {k: config.get(k) for k in ("m1", "m2", "relax", "cfactor", "quality_check_every")}
    run.update(grid=(header or {}).get("grid"), steps_logged=len(recs),
               ran={**ran, "levels": (config.get("mgrit") or {}).get("max_levels")},
               losses=losses_of(recs), step_seconds=seconds_of(recs),
               check_seconds=[as_float(r.get("quality_check_seconds", 0.0)) for r in recs],
               startup_seconds=(started or [None])[0], limit_seconds=limit,
               stop_reason=(end or {}).get("stop_reason"))
    return run


def time_launch(runner, times, P, mgrit):
    """Every time row solved in one launch (sequential stepping on one process, or the
    examples' MGRIT on P ranks): per row a metric, and '_run' the launch."""
    share = runner.share(("time", P, mgrit))
    why = runner.skip_reason(P, min(share, launch_seconds(P) + 1))
    if why:
        return {"_run": None, **{r["name"]: metric(reason=why, kind="skipped") for r in times}}
    spec = {"mgrit": mgrit, "rows": times}
    run = runner.run(P, [sys.executable, SCRIPT, "--worker", json.dumps(spec)], 30 + 3 * share)
    failed = metric(reason=run["reason"] or error_text(run),
                    kind="timeout" if run["status"] == "timeout" else "error")
    return {"_run": {k: run[k] for k in ("cmd", "status", "rc", "wall_seconds", "output_tail")},
            **{r["name"]: (run["result"] or {}).get(r["name"]) or failed for r in times}}


def _example(name):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"examples.{name}")


def sequential_seconds(example, args):
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
        u = u if out is None else out
    return time.perf_counter() - start


def time_solves(spec):
    """The time rows' child: per row, after a warm-up of 64 steps, sequential stepping on
    one process, or the example's own MGRIT solve (its ``main`` on every rank; the slowest
    rank's total). Rank 0 prints a metric per row."""
    out, comm = {}, None
    if spec["mgrit"]:
        from braidpy.parallel import world

        comm = world()
    for row in spec["rows"]:
        mod = _example(row["example"])
        args = mod.parse_args(row["args"])
        if not spec["mgrit"]:
            sequential_seconds(row["example"], mod.parse_args(row["args"] + ["--ntime", "64"]))
            out[row["name"]] = metric(sequential_seconds(row["example"], args))
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
        found = dict(iterations=int(r.iterations),
                     residual=float(r.residuals[-1]) if len(r.residuals) else math.nan)
        out[row["name"]] = metric(total, **found) if found["residual"] <= args.tol else metric(
            reason=f"not converged to the tolerance in {found['iterations']} iterations "
                   f"(residual {found['residual']:.2e})", kind="error", solve_seconds=total,
            **found)
    if comm is None or comm.Get_rank() == 0:
        result_line(out)


# ------------------------------------------------------------------ the tables


def setting_text(s):
    """A table's short form of a Setting: 'm1/2 F L3 cf8'."""
    return f"m{s['m1']}/{s['m2']} {s['relax']} L{s['levels']} cf{s['cfactor']}" if s else ""


HEADS = {"layer": "layer 1,1,P", "data": "data P,1,1 (serial mode)", "best": "best",
         "auto": "--grid auto"}


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
             c.get("grid") if column == "auto" else "") or ""
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
            columns = ["layer", "data", "best", "auto"]
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
