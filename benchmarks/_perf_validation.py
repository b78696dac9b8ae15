"""bench_perf.py's launches, workers and summaries: the workers under mpiexec (model,
grids, timeline), the rank counts the model is validated at, the calibration made for
the run, the error summary and plot.

A worker is the calling script run again as ``SCRIPT --worker JSON`` (under
``mpiexec -n P`` for P > 1); its rank 0 prints one line ``RESULT {json}``. The model
gives every rank a core of its own: rank counts above ``--cores`` are skipped, saying
so (with more ranks than cores it gives only compute x ranks / cores, a lower bound).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

#: One thread per rank: the model gives every rank one core. The model also assumes a
#: message arrives while its sender computes; Open MPI delivers only messages under its
#: shared-memory eager limit that way (docs/install.md "Running under MPI"), so the workers raise
#: it above the states' size (MPICH ignores these).
WORKER_ENV = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                  OMPI_MCA_btl_vader_eager_limit="131072",
                  OMPI_MCA_btl_vader_max_send_size="131072")


#: Gradients run before timing: a process's first gradients are slower than its steady
#: state, which the model predicts (allocator and caches warming, MPI's first messages;
#: on the 2-core VM a cold-skip gradient of 64 samples on 2 ranks took 4.5, 4.0, 4.0,
#: 3.8 ms, then 3.77 ms median; one warm-up left that row 15 % slower than steady).
WARMUP_GRADIENTS = 3


def worker_env() -> dict:
    """This process's environment with WORKER_ENV: one thread per rank always; Open MPI's
    limits only where the user has not set them (their choice is what gets measured)."""
    env = dict(os.environ)
    for key, value in WORKER_ENV.items():
        if key.startswith("OMPI_MCA_"):
            env.setdefault(key, value)
        else:
            env[key] = value
    return env


def ranks_with_a_core(ranks: Sequence[int], cores: int) -> List[int]:
    """The rank counts of ``ranks`` that give every rank a core, saying which are
    skipped: the model is not validated with ranks sharing cores.

    >>> ranks_with_a_core([1, 2, 4], 2)
    skipped P = 4: more ranks than the 2 cores (the model gives a lower bound there)
    [1, 2]
    """
    over = [P for P in ranks if P > cores]
    if over:
        print(f"skipped P = {', '.join(map(str, over))}: more ranks than the {cores} cores "
              f"(the model gives a lower bound there)", flush=True)
    return [P for P in ranks if P <= cores]


def run_worker(script: str, spec: dict, nranks: int, timeout: float = 900) -> dict:
    """Run ``script --worker spec`` on ``nranks`` ranks; rank 0's RESULT as a dict."""
    env = worker_env()
    cmd = [sys.executable, script, "--worker", json.dumps(spec)]
    if nranks > 1:
        cmd = ["mpiexec", "-n", str(nranks)] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed:\n{out.stderr[-4000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[7:])


def dense_validation_app(spec: dict, app_class=None):
    """(net, params, app): the dense ResNet bench_perf.py's model and timeline time
    (spec's width, layers and samples; 2 features, 5 classes, seeded) and its ResNetApp
    (or ``app_class``, a subclass)."""
    from braidpy.nn import ResNet, ResNetApp

    net = ResNet((2,), 5, width=spec["width"], nlayers=spec["layers"])
    params = net.init_params(seed=3, scale=0.1)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((spec["samples"], 2))
    C = np.eye(5)[rng.integers(0, 5, spec["samples"])]
    return net, params, (app_class or ResNetApp)(net, params, X, C)


def calibrate_now(layers: Sequence[str], samples: Sequence[int], rows: Sequence[int],
                  ranks: int, name: str, cores: Optional[int] = None) -> str:
    """Run ``braidpy calibrate`` for these layers (under ``mpiexec -n ranks`` when
    ranks > 1, so that the network is measured, not assumed; ``cores`` its --cores);
    the file's path."""
    path = os.path.join(tempfile.gettempdir(), name)
    cmd = [sys.executable, "-m", "braidpy", "calibrate", "-o", path, "-q"]
    if cores:
        cmd += ["--cores", str(cores)]
    for layer in layers:
        cmd += ["--layer", layer]
    cmd += ["--samples", *map(str, samples), "--rows", *map(str, rows)]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks)] + cmd
    subprocess.run(cmd, check=True, env=worker_env())
    return path


def run_calibration(args: argparse.Namespace, layers: Sequence[str], samples: Sequence[int],
                    rows: Sequence[int], name: str):
    """The run's calibration: ``--calibration``'s file, else one made now with
    :func:`calibrate_now` (under ``mpiexec`` with as many ranks as the run's most, where
    it uses two or more: the network is measured, not assumed, and the calls' slowdown
    across ranks up to that count; its file copied beside ``--json`` as
    FILE.calibration.json, for whoever studies a misfit)."""
    import shutil

    from braidpy.perf.calibration import load_calibration

    if args.calibration:
        return load_calibration(args.calibration)
    path = calibrate_now(layers, samples, rows, max(args.ranks), name, cores=args.cores)
    cal = load_calibration(path)
    print(f"calibrated now ({path}; network: {cal.p2p.source})")
    if args.json:
        shutil.copyfile(path, os.path.splitext(args.json)[0] + ".calibration.json")
    return cal


def signed_worst(errors: Sequence[float]) -> float:
    """The error of largest magnitude, with its sign."""
    return max(errors, key=abs)


def within(errors: Sequence[float], bound: float = 0.25) -> int:
    return sum(abs(e) <= bound for e in errors)


def dump(rows: List[Dict], path: Optional[str]) -> None:
    if not path:
        return
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


def plot_predicted_vs_measured(rows: List[Dict], measured: str, path: str,
                               xlabel: str) -> None:
    """Predicted against measured seconds (``rows[i][measured]``), one marker per rank
    count, the diagonal and the ±25 % band, log-log, written as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(5, 5))
    for P, marker in zip(sorted({r["P"] for r in rows}), "osD^v"):
        pts = [r for r in rows if r["P"] == P]
        ax.scatter([r[measured] for r in pts], [r["predicted"] for r in pts],
                   marker=marker, label=f"P = {P}", zorder=3)
    lo = min(min(r[measured], r["predicted"]) for r in rows) * 0.8
    hi = max(max(r[measured], r["predicted"]) for r in rows) * 1.2
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25],
                    color="0.9", label="±25 %")
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="predicted s / gradient",
           title="braidpy.perf: predicted vs measured")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(NullFormatter())
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


#: grids: one-shot (2, 2), 2 levels, cf 4; problem -> (calibrated layer, samples, layers)
LEVELS, CFACTOR, M = 2, 4, (2, 2)
PROBLEMS = {"digits": ("conv:4x8x8:3", 200, 32), "peaks": ("dense:8", 2000, 32),
            "digits28": ("conv:8x28x28:3", 32, 16)}


# ------------------------------------------------------------------ workers (under mpiexec)


def _solver(spec, app, net, comm, oneshot):
    from braidpy.adjoint import GradientSolver

    opts = dict(max_levels=spec["levels"], cfactor=spec["cf"], skip=spec["skip"],
                abs_tol=1e-7, storage="final")
    return GradientSolver(app, 0.0, net.tstop, spec["layers"], comm=comm if
                          comm.Get_size() > 1 else None, primal=opts, oneshot=oneshot)


def model_worker(spec: dict, comm, MPI) -> dict:
    """Time spec['repeats'] gradients of one setting on this communicator."""
    rank = comm.Get_rank()
    net, params, app = dense_validation_app(spec)
    solver = _solver(spec, app, net, comm,
                     tuple(spec["m"]) if spec["mode"] == "oneshot" else None)
    # Serial propagation on one rank is what serial training runs: the network's own
    # sweeps (ResNet.loss_and_gradient), which the model prices by the calibrated
    # `serial` where the layer has them; across layer ranks, the core's.
    own_sweeps = spec["levels"] == 1 and comm.Get_size() == 1
    times, cpus, iters = [], [], []
    for k in range(spec["repeats"] + WARMUP_GRADIENTS):
        params += 1e-4  # a new parameter, as after an optimizer step
        if spec["skip"]:
            solver.reset()
        comm.Barrier()
        start, cpu = time.perf_counter(), time.process_time()
        if own_sweeps:
            net.loss_and_gradient(params, app.X, app.C)
            g = None
        else:
            if rank == 0:
                solver.primal_core.set_initial_condition(app.initial_state())
            g = solver.evaluate()
        grad = np.zeros(net.nparams)
        comm.Allreduce(MPI.IN_PLACE, grad)
        cpu = time.process_time() - cpu  # before the barrier: MPICH spins in it
        comm.Barrier()
        most = np.array([cpu, time.perf_counter() - start])  # the slowest rank's
        comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
        if k >= WARMUP_GRADIENTS:  # the first include exact mode's cold start
            cpus.append(most[0])
            times.append(most[1])
            iters.append((1, 1) if g is None else (g.primal.iterations,
                                                   g.adjoint.iterations))
    solver.close()
    return {"times": times, "cpu": cpus, "iterations": iters}


def problem(name: str):
    """(net, X, C) of a grids problem (see the docstring)."""
    from braidpy import data
    from braidpy.nn import ResNet

    _, samples, layers = PROBLEMS[name]
    if name == "peaks":
        X, C = data.peaks(samples, seed=1)
        return ResNet((2,), 5, width=8, nlayers=layers, tstop=5.0), X, C
    X, C = getattr(data, name)(seed=1)["train"]
    size, width = (28, 8) if name == "digits28" else (8, 4)
    net = ResNet((1, size, size), 10, width=width, nlayers=layers, tstop=5.0,
                 opening="conv", kernel=3)
    return net, np.ascontiguousarray(X[:samples]), np.ascontiguousarray(C[:samples])


def grids(name: str, nprocs: int):
    """Every (data, space, layers) of nprocs ranks that training can run."""
    from braidpy.train.spatial_training import max_space

    most = max_space(problem(name)[0], "oneshot")
    return [(d, s, nprocs // (d * s)) for d in range(1, nprocs + 1) if nprocs % d == 0
            for s in range(1, nprocs // d + 1) if (nprocs // d) % s == 0 and s <= most]


def grids_worker(spec: dict, comm, MPI) -> list:
    """Time gradients on every grid of this communicator."""
    from braidpy.parallel import ProcessGrid
    from braidpy.train import TrainConfig, Trainer

    nprocs, out = comm.Get_size(), []
    for name in spec["problems"]:
        net, X, C = problem(name)
        for shape in grids(name, nprocs):
            grid = ProcessGrid(comm if nprocs > 1 else None, *shape)
            cfg = TrainConfig(mode="oneshot", m1=M[0], m2=M[1], optimizer="sgd",
                              mgrit=dict(cfactor=CFACTOR, max_levels=LEVELS))
            trainer = Trainer(net, (X, C), None, cfg, grid=grid)
            ev, p = trainer.evaluator, trainer.params
            for _ in range(WARMUP_GRADIENTS):  # solvers built, the first (cold) solve
                p += 1e-4
                ev.gradient(p, X, C)
            times, cpus = [], []
            for _ in range(spec["repeats"]):
                p += 1e-4  # a new parameter, as after an optimizer step
                comm.Barrier()
                start, cpu = time.perf_counter(), time.process_time()
                ev.gradient(p, X, C)
                cpu = time.process_time() - cpu
                comm.Barrier()
                most = np.array([time.perf_counter() - start, cpu])  # the slowest rank's
                comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
                times.append(most[0])
                cpus.append(most[1])
            grid.free()
            out.append(dict(problem=name, grid=list(shape), times=times, cpu=cpus))
    return out


def timeline_worker(spec: dict, comm, MPI) -> dict:
    """The fastest of spec['repeats'] warm gradients with every rank's step calls."""
    from braidpy.nn import ResNetApp
    from braidpy.perf.timeline import recording

    net, params, app = dense_validation_app(spec, recording(ResNetApp))
    app.calls = []
    solver = _solver(spec, app, net, comm, tuple(spec["m"]))
    best = None
    for k in range(spec["repeats"] + 2):  # two warm-ups
        params += 1e-4
        if spec["skip"]:  # skip applies to a cold start only: both solves reset
            solver.reset()
        app.calls.clear()
        comm.Barrier()
        start = time.perf_counter()
        if comm.Get_rank() == 0:
            solver.primal_core.set_initial_condition(app.initial_state())
        solver.evaluate()
        end = time.perf_counter()
        comm.Barrier()
        first = comm.allreduce(start, op=MPI.MIN)  # the clock is the machine's
        wall = comm.allreduce(end, op=MPI.MAX) - first
        calls = [(c.tag, c.rows, c.batch, c.start - first, c.end - first)
                 for c in app.calls]
        if k >= 2 and (best is None or wall < best[0]):
            best = (wall, calls)
    solver.close()
    return {"wall": best[0], "calls": comm.gather(best[1])}


def worker(spec: dict) -> None:
    """A launch's task; rank 0 prints ``RESULT {json}``."""
    from mpi4py import MPI

    from braidpy.perf.allocator import keep_freed_memory

    if not spec.get("faults"):  # as braidpy calibrate measures (braidpy.perf.allocator)
        keep_freed_memory()
    comm = MPI.COMM_WORLD
    out = {"model": model_worker, "grids": grids_worker,
           "timeline": timeline_worker}[spec["check"]](spec, comm, MPI)
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(out, default=float), flush=True)
