"""Scaling on this host in one command: serial vs layer/time-parallel vs data-parallel.

Every rank count P (1, 2, 4, 8, 16: those up to this host's physical cores, unless
--oversubscribe or --ranks) and every row below is one line of a table; the columns are

- serial: ``braidpy train --mode serial`` on one process (training rows); plain
  sequential stepping of the example's app, one process (time-integration rows);
- layer 1,1,P: ``--grid 1,1,P --quality-check-every K`` (--quality-check-every, default
  10) with the one-shot MGRIT setting ``--grid auto`` would choose for that grid: the
  fastest by the model of the settings qualified for the row's depth
  (braidpy.perf.auto.qualified; the multilevel ones from 1024 layers on); with K = 0 or
  without a calibration the preset's (one-shot m1 = m2 = 2, FCF, 2 levels, cf 4) and no
  checks. For the time rows the example's own MGRIT solve on P ranks;
- data P,1,1: ``--grid P,1,1 --mode serial`` (each data group backpropagates its shard
  of every batch exactly; the gradients are averaged): work ratio 1. Training rows only;
- best: the fastest of the grids measured at P (layer, data, auto's, and with --mixed
  every D,1,L), separately per step and to the loss;
- auto: the grid and setting ``--grid auto --quality-check-every K`` picks at P
  (braidpy's default mode, one-shot) from a ``braidpy calibrate`` of this host made at
  the start (or --calibration); with K = 0 the grid only, the preset's setting. The
  choice is computed with the function the command line uses
  (braidpy.perf.auto.decide_grid); when it is a grid and setting already measured at P
  with the same checks, that run is its time, else a ``--grid auto`` run is timed (and
  the grid its log reports is checked against the prediction).

Rows (defaults; --small for CI, --quick for a shorter run):

- peaks256, peaks1024: ``braidpy train peaks --preset paper --layers N --samples 5000``
  (full batch, L-BFGS);
- batch32: Peaks, 1024 layers, ``--batch 32 --shuffle --optimizer adam``;
- heat: ``examples/ex02_heat1d.py --ntime 16384 --tol 1e-8`` (513 points in x);
- ode: ``examples/ex01_scalar_ode.py --ntime 16384 --tol 1e-8``.

Two measurements per training cell, both from the run's ``--log`` JSON lines (one
record per optimizer step with its ``loss`` and ``seconds``; validation is off):

- time per step: the median step time, the first step (solver setup, cold caches) left
  out when there are two or more;
- time to the serial run's loss: the serial run takes K steps (--steps, default 20 for
  L-BFGS; --adam-steps, default 100, for Adam); the mean of its last W logged losses
  (W = 1 for L-BFGS, --window 10 for Adam's noisy mini-batch losses) is the target.
  A run's time to it is the sum of its step times up to the first step whose trailing
  W-step mean loss is <= the target (relative slack 1e-9 for round-off). The loss of a
  record is the one its step computed (for one-shot runs the inexact MGRIT loss: what
  the log holds). The serial run's own time to the target is found the same way. For
  runs with gradient-quality checks the JSON gives the checks' part of that time
  (``check_seconds``, from the records' ``quality_check_seconds``).

A parallel run stops at whichever comes first: the target reached (the rest is not
needed), M = 2K steps (--max-steps-factor) -> "not reached within M steps", or its time
limit -> "not reached within X s". The limit is --cap (1.5) times the serial run's
time to the target, lowered where --budget needs it; a run whose loss is not ahead of
the serial run's at the same step and whose pace would take it past its limit is
stopped early, from its second step on ("abandoned", the projection in the reason).

The time rows: time to solve to 1e-8 (the example's ``r.timings['total']``, the
slowest rank's, after a warm-up solve in the same process) beside sequential stepping
(a loop over the app's ``step``). MGRIT's 1-rank column is its work ratio.

The host comes first: cores (logical, affinity, physical from /proc/cpuinfo, cgroup
quota), MPI (mpi4py's Get_library_version, the launcher), NumPy's BLAS threads
(threadpoolctl), versions, date, git commit, and benchmarks/cpu_scaling.py's check that
P processes of the same NumPy work at once run as fast as one (else the cores are not
the ranks' own). Then the plan: one serial gradient per training row is timed (a
child process) and every launch estimated; --dry-run stops there.

Every launch runs with one thread per rank (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1,
MKL_NUM_THREADS=1, ...: one core per rank), in a session of its own; a launch that
runs past its time is killed with all its processes and recorded as "timeout".
Cells are measured in the order serial runs, then P from the largest down (so a
budget that runs out costs the small rank counts first); a cell that did not run
says why. --budget (default 240 s) covers the whole run: step counts are lowered
(never below --min-steps) until the printed estimate fits it, and launches that
would overrun it are cut short or skipped.

    python benchmarks/scaling.py [--json FILE] [--quick | --small] [--budget S]
        [--ranks 1 2 4 ...] [--oversubscribe] [--steps K] [--adam-steps K]
        [--rows peaks256 peaks1024 batch32 heat ode] [--mixed] [--calibration FILE]
        [--quality-check-every K] [--timeout S] [--cap C] [--keep-logs DIR] [--dry-run]
    STEPS="scale" bash benchmarks/gpu_check.sh     # on a 16-core GPU machine

Nothing is meaningful with more ranks than cores (marked "over" in the tables).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import dataclasses
import io
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCRIPT = os.path.abspath(__file__)
sys.path.insert(0, HERE)

from _report import print_table  # noqa: E402

#: Set to 1 in every launch: one core per rank.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")
#: Open MPI delivers messages above its shared-memory eager limit only when the sender
#: enters MPI; raised above the states' size as the perf benchmarks do (MPICH ignores it).
OMPI_VARS = {"OMPI_MCA_btl_vader_eager_limit": "131072",
             "OMPI_MCA_btl_vader_max_send_size": "131072"}
DEFAULT_RANKS = (1, 2, 4, 8, 16)
RTOL = 1e-9  # slack on the target for round-off (a run equal to serial must reach it)
PREFIX = "RESULT "


# ------------------------------------------------------------------ time to a loss


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


# ------------------------------------------------------------------ host


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def cpu_info() -> Dict[str, Any]:
    """Logical and physical cores this process may use (affinity, /proc/cpuinfo's
    physical id and core id, the cgroup's CPU quota)."""
    logical = os.cpu_count() or 1
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else list(range(logical))
    out: Dict[str, Any] = {"logical": logical, "affinity": len(usable)}
    text = _read("/proc/cpuinfo") or ""
    cores, model = {}, None
    for block in text.split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        if "processor" not in fields:
            continue
        model = model or fields.get("model name") or fields.get("Model")
        if "core id" in fields:
            cores[int(fields["processor"])] = (fields.get("physical id", "0"),
                                               fields["core id"])
    out["model"] = model or platform.processor() or "?"
    if cores:
        physical = {cores[c] for c in usable if c in cores}
        out["physical"] = len(physical) or len(usable)
        out["physical_source"] = "/proc/cpuinfo (physical id, core id) of the affinity set"
    else:
        out["physical"] = len(usable)
        out["physical_source"] = "unknown: /proc/cpuinfo has no core ids; affinity count"
    quota = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    if len(quota) == 2 and quota[0] != "max":
        out["cgroup_quota_cores"] = int(quota[0]) / int(quota[1])
    out["cores_for_ranks"] = max(1, min(out["physical"], int(out.get(
        "cgroup_quota_cores", out["physical"]))))
    out["loadavg"] = (_read("/proc/loadavg") or "?").split()[:3]
    return out


def find_mpiexec() -> Optional[str]:
    """$BRAIDPY_MPIEXEC, else the mpiexec beside this interpreter (the mpich wheel's),
    else the one on PATH (the tests' rule)."""
    if os.environ.get("BRAIDPY_MPIEXEC"):
        return os.environ["BRAIDPY_MPIEXEC"]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


def _run_text(cmd: Sequence[str], timeout: float = 20) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"({exc})"


def mpi_info(mpiexec: Optional[str]) -> Dict[str, Any]:
    """MPI as mpi4py sees it (Get_library_version, asked in a child process without
    MPI_Init) and the launcher's --version."""
    code = ("import json, mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI\n"
            "print(json.dumps({'mpi4py': mpi4py.__version__, "
            "'library': MPI.Get_library_version().strip(), 'standard': MPI.Get_version()}))")
    out: Dict[str, Any] = {"mpiexec": mpiexec}
    text = _run_text([sys.executable, "-c", code])
    try:
        out.update(json.loads(text.splitlines()[-1]))
    except (ValueError, IndexError):
        out["error"] = f"mpi4py: {text[-300:]}"
    lib = out.get("library", "")
    out["implementation"] = ("Open MPI" if "Open MPI" in lib else "MPICH" if "MPICH" in lib
                             else "Intel MPI" if "Intel" in lib else lib.split("\n")[0][:40]
                             or "?")
    out["library_first_line"] = " ".join(lib.splitlines()[0].split()) if lib else None
    if mpiexec:
        out["mpiexec_version"] = " ".join(" ".join(
            _run_text([mpiexec, "--version"]).splitlines()[:2]).split())
    return out


def blas_info() -> Dict[str, Any]:
    """NumPy's BLAS and its threads in this process (threadpoolctl if installed) and the
    thread variables as this process found them."""
    import numpy  # noqa: F401 - its BLAS loaded, for threadpoolctl

    out: Dict[str, Any] = {"env": {k: os.environ.get(k) for k in THREAD_VARS}}
    try:
        from threadpoolctl import threadpool_info

        out["threadpools"] = [{k: p.get(k) for k in ("user_api", "internal_api",
                                                     "num_threads", "version")}
                              for p in threadpool_info()]
    except ImportError:
        out["threadpools"] = "threadpoolctl not installed"
    return out


def git_info() -> Dict[str, Any]:
    """The checkout's commit, and whether tracked files differ from it (read-only:
    --no-optional-locks, nothing written)."""
    head = _run_text(["git", "-C", ROOT, "rev-parse", "HEAD"])
    try:
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", ROOT, "diff", "--quiet",
                                "HEAD", "--"], capture_output=True, timeout=20).returncode
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"commit": head if len(head) == 40 else None,
            "tracked_changes": None if dirty is None else bool(dirty)}


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


def host_info(mpiexec: Optional[str]) -> Dict[str, Any]:
    import numpy as np

    try:
        import braidpy

        version = braidpy.__version__
    except ImportError:
        version = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(), "platform": platform.platform(),
        "cpu": cpu_info(), "mpi": mpi_info(mpiexec), "blas": blas_info(),
        "python": platform.python_version(), "numpy": np.__version__, "braidpy": version,
        "git": git_info(),
    }


def print_host(host: Dict[str, Any], child_env: Dict[str, str]) -> None:
    c, m, b = host["cpu"], host["mpi"], host["blas"]
    print(f"host {host['hostname']}, {host['date']}; {host['platform']}")
    print(f"  cpu: {c['model']}; {c['logical']} logical cores, {c['affinity']} in this "
          f"process's affinity, {c['physical']} physical ({c['physical_source']})"
          + (f", cgroup quota {c['cgroup_quota_cores']:.1f} cores"
             if "cgroup_quota_cores" in c else "")
          + f"; load {' '.join(c['loadavg'])}")
    print(f"  MPI: {m['implementation']} ({m.get('library_first_line') or m.get('error')}); "
          f"mpi4py {m.get('mpi4py', '-')}; mpiexec {m['mpiexec']} "
          f"({m.get('mpiexec_version', '-')})")
    pools = b["threadpools"]
    pools = pools if isinstance(pools, str) else ", ".join(
        f"{p['internal_api']} {p['version']} {p['num_threads']} threads" for p in pools)
    env = ", ".join(f"{k}={v}" for k, v in b["env"].items() if v is not None) or "none set"
    print(f"  BLAS here: {pools}; thread variables found: {env}")
    print(f"  Python {host['python']}, NumPy {host['numpy']}, braidpy {host['braidpy']}; "
          f"git {host['git']['commit']}"
          + (" + uncommitted changes" if host["git"]["tracked_changes"] else ""))
    print(f"  every launch runs with {', '.join(f'{k}={v}' for k, v in child_env.items())}: "
          f"one core per rank; ranks are not pinned (the MPI launcher's default binding)")


# ------------------------------------------------------------------ rows


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


# ------------------------------------------------------------------ worker (children)


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
        print(PREFIX + json.dumps(out), flush=True)


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


# ------------------------------------------------------------------ launching


def _processes() -> Dict[int, Tuple[int, int]]:
    """pid -> (parent pid, session id) of every process /proc shows."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        try:
            fields = stat.rsplit(")", 1)[1].split() if stat else []
            out[int(entry)] = (int(fields[1]), int(fields[3]))
        except (IndexError, ValueError):
            continue
    return out


def launch_tree(pid: int) -> List[int]:
    """The launch ``pid`` and every process it started: its descendants (MPICH's proxy
    starts each rank in a session of its own) and its session's processes."""
    procs = _processes()
    tree, todo = {pid}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in procs.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                todo.append(child)
    tree.update(p for p, (_, sid) in procs.items() if sid == pid)
    return sorted(tree)


def kill_launch(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL to what is left, to the launch and every process it started
    (found, by id, before the first signal: orphans lose their parent link)."""
    tree = launch_tree(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.perf_counter() + 3
        while time.perf_counter() < deadline:
            proc.poll()
            alive = [p for p in tree if os.path.exists(f"/proc/{p}") and
                     "Z" not in ((_read(f"/proc/{p}/stat") or ") Z").rsplit(")", 1)[1][:3])]
            if not alive:
                return
            time.sleep(0.05)
        tree = alive
    proc.poll()


def launch(cmd: List[str], env: Dict[str, str], timeout: float, workdir: str,
           watch: Optional[Callable[[float], Optional[str]]] = None) -> Dict[str, Any]:
    """Run ``cmd`` in a session of its own; ``watch(elapsed)`` is polled and a reason it
    returns stops the run ("stopped"); past ``timeout`` s it is killed ("timeout")."""
    out_path = os.path.join(workdir, f"launch-{time.monotonic_ns()}.out")
    start = time.perf_counter()
    with open(out_path, "w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=ROOT, start_new_session=True)
        status, why = "exited", None
        try:
            while True:
                try:
                    proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    pass
                elapsed = time.perf_counter() - start
                reason = watch(elapsed) if watch else None
                if reason:
                    status, why = "stopped", reason
                    kill_launch(proc)
                    break
                if elapsed > timeout:
                    status, why = "timeout", f"timeout: killed after {timeout:.0f} s"
                    kill_launch(proc)
                    break
        finally:  # interrupted (Ctrl-C, SIGTERM): the launch's own session goes too
            if proc.poll() is None:
                kill_launch(proc)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    os.unlink(out_path)
    result = None
    for line in text.splitlines():
        if line.startswith(PREFIX):
            with contextlib.suppress(ValueError):
                result = json.loads(line[len(PREFIX):])
    return {"cmd": cmd, "status": status, "reason": why, "rc": proc.returncode,
            "wall_seconds": wall, "result": result,
            "output_tail": text[-1500:] if (proc.returncode or status == "timeout") else ""}


class Budget:
    """Seconds left of --budget (0: no limit) and each launch's fair share of them."""

    def __init__(self, seconds: float):
        self.total = seconds
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return math.inf if not self.total else self.total - self.elapsed()

    def factor(self, remaining_estimate: float) -> float:
        """Seconds left per estimated second of the launches still to come (inf
        without a budget): above 1 they may run longer than estimated, below 1 they
        must run shorter."""
        if not self.total:
            return math.inf
        return max(self.left(), 0.0) / max(remaining_estimate, 1e-9)


# ------------------------------------------------------------------ the plan


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


# ------------------------------------------------------------------ cells


def metric(seconds: Optional[float] = None, reason: Optional[str] = None,
           **extra: Any) -> Dict[str, Any]:
    """A measurement: {'seconds': x, ...} or {'reason': why, ...}."""
    if seconds is not None and math.isfinite(seconds):
        return {"seconds": float(seconds), **extra}
    return {"reason": reason or "no number", **extra}


def grid_text(shape: Sequence[int]) -> str:
    return ",".join(map(str, shape))


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


# ------------------------------------------------------------------ measuring


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


# ------------------------------------------------------------------ the tables


def short(m: Dict[str, Any]) -> str:
    """A table cell: seconds and speedup, or a short form of the reason."""
    if "seconds" in m:
        text = f"{m['seconds']:.3g}"
        if "speedup" in m:
            text += f" ({m['speedup']:.2f}x)"
        return text
    kind, reason = m.get("kind"), m.get("reason", "")
    if kind in ("limit", "projected") and m.get("at_least"):
        bound = f" (<{m['speedup_below']:.2f}x)" if "speedup_below" in m else ""
        return f">{m['at_least']:.3g}{bound}" + (" proj." if kind == "projected" else "")
    if kind == "steps":
        return "not in " + reason.split("within ", 1)[-1].split(" (")[0]
    return {"timeout": "timeout", "skipped": "skipped", "n/a": "n/a", "error": "failed",
            "none": "-"}.get(kind, reason[:20])


def print_tables(report: Dict[str, Any]) -> None:
    print()
    print("Seconds (speedup over serial). '>X (<Yx)': stopped at its limit of X s without "
          "a step / the loss; '... proj.': stopped early, its pace projecting more than X s "
          "to the loss; 'not in M steps': ran M steps without reaching the loss; 'over': "
          "more ranks than physical cores. Every reason in full in the JSON.")
    for row in report["rows"]:
        print()
        print(f"== {row['name']}: {row['title']}")
        serial = row.get("serial") or {}
        cols = ["layer", "data", "best", "auto"] + (["mixed"] if any(
            c["column"] == "mixed" for c in row["cells"]) else [])
        if row["kind"] == "training":
            t = row.get("target")
            sm = serial.get("metrics", {})
            if t:
                print(f"   serial (--mode serial, 1 rank): {short(sm['per_step'])} s/step; "
                      f"target loss {t['loss']:.5g} (mean of the last {t['window']}) of "
                      f"{t['serial_steps']} steps, reached at step {t['step']} in "
                      f"{t['seconds']:.3g} s")
            else:
                print(f"   serial: {sm.get('per_step', {}).get('reason', 'failed')}")
            names = (("per_step", "seconds per step"),
                     ("to_target", "seconds to the serial run's loss"))
        else:
            sm = serial.get("metrics", {}).get("solve", {})
            print(f"   sequential stepping (1 process): "
                  + (f"{sm['seconds']:.3g} s" if "seconds" in sm else sm.get("reason", "")))
            names = (("solve", "seconds to solve to 1e-8 (iterations)"),)
            cols = ["layer", "best"]
        for name, what in names:
            table = []
            for P in sorted({c["P"] for c in row["cells"]}):
                line = [f"{P}" + (" over" if any(c["P"] == P and c.get("over")
                                                  for c in row["cells"]) else "")]
                for col in cols:
                    cs = [c for c in row["cells"] if c["P"] == P and c["column"] == col]
                    parts = []
                    for c in cs:
                        m = c["metrics"].get(name, {})
                        label = (m.get("grid") or "") if col == "best" else \
                            (c.get("grid") or "") if col in ("auto", "mixed") else ""
                        if col in ("layer", "auto"):  # the MGRIT setting it ran
                            choice = c.get("choice") or {}
                            ran = c.get("setting") or (choice.get("setting")
                                                       if choice.get("runs_mgrit") else None)
                            label = f"{label} {setting_text(ran)}".strip()
                        text = short(m)
                        if name == "solve" and "iterations" in m:
                            text += f" {m['iterations']} it"
                        if m.get("same_as"):
                            text = f"= {m['same_as']}: {text}"
                        parts.append(f"{label} {text}".strip())
                    line.append("; ".join(parts) or "-")
                table.append(line)
            heads = {"layer": "layer 1,1,P" if row["kind"] == "training" else
                     "time-parallel", "data": "data P,1,1 (serial mode)", "best": "best",
                     "auto": "--grid auto", "mixed": "mixed D,1,L"}
            print_table(["P"] + [heads[c] for c in cols], table, title=f"   {what}")


# ------------------------------------------------------------------ main


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--json", metavar="FILE", help="write every measurement and the host here")
    p.add_argument("--ranks", type=int, nargs="+", metavar="P",
                   help="rank counts (default 1 2 4 8 16 up to the physical cores)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="default ranks beyond the physical cores too")
    p.add_argument("--rows", nargs="+", metavar="ROW",
                   help="only these rows (peaks256 peaks1024 batch32 heat ode; --small: "
                        "peaks16 batch8 heat ode)")
    p.add_argument("--steps", type=int, default=20, help="K: serial L-BFGS steps (target)")
    p.add_argument("--adam-steps", type=int, default=100, help="K of the Adam row")
    p.add_argument("--window", type=int, default=10,
                   help="losses averaged for the Adam row's target and its runs")
    p.add_argument("--max-steps-factor", type=int, default=2,
                   help="M = this x K steps at most per parallel run")
    p.add_argument("--min-steps", type=int, default=5,
                   help="--budget never lowers K below this")
    p.add_argument("--cap", type=float, default=1.5,
                   help="a parallel run stops at this x the serial time to the loss")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run (default 240, --quick 120, --small 90; "
                        "0: no limit)")
    p.add_argument("--quality-check-every", type=int, default=10, metavar="K",
                   help="the layer and auto columns check every K-th gradient and run the "
                        "setting --grid auto chooses with the checks (0: the preset's "
                        "setting, no checks)")
    p.add_argument("--timeout", type=float, default=300, help="seconds per launch at most")
    p.add_argument("--quick", action="store_true",
                   help="without the 1024-layer full-batch row, budget 120 s")
    p.add_argument("--small", action="store_true",
                   help="CI: tiny rows, ranks 1 and 2, a few steps (well under a minute)")
    p.add_argument("--mixed", action="store_true", help="also every D,1,L grid, D, L > 1")
    p.add_argument("--no-auto", action="store_true", help="no calibration, no auto column")
    p.add_argument("--calibration", metavar="FILE",
                   help="braidpy calibrate's file for --grid auto (default: made now)")
    p.add_argument("--keep-logs", metavar="DIR", help="copy every run's --log here")
    p.add_argument("--dry-run", action="store_true",
                   help="print the host, the plan and its estimate; measure nothing")
    args = p.parse_args(argv)
    if args.small:
        args.steps = min(args.steps, 4)
        args.adam_steps = min(args.adam_steps, 12)
        args.window = min(args.window, 3)
        args.min_steps = min(args.min_steps, 3)
    names = [r["name"] for r in training_rows(args.small, False) + time_rows(args.small)]
    unknown = sorted(set(args.rows or ()) - set(names))
    if unknown:
        p.error(f"--rows: no row {', '.join(unknown)}{' with --small' if args.small else ''}"
                f" (rows: {' '.join(names)})")
    if args.budget is None:
        args.budget = 90.0 if args.small else 120.0 if args.quick else 240.0
    args.calibration_path = None
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return {}
    # A time limit's SIGTERM (gpu_check.sh's `timeout`) unwinds like Ctrl-C: the running
    # launch, in a session of its own, is killed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = measure(args)
    if args.dry_run:
        return report
    print_tables(report)
    print(f"\ntotal {report['elapsed_seconds']:.0f} s"
          + (f"; JSON: {args.json}" if args.json else ""))
    return report


if __name__ == "__main__":
    main()
