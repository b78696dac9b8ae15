"""bench_perf.py's launches, calibration, plot and workers: a worker is the script run again
as ``SCRIPT --worker JSON`` (``mpiexec -n P`` for P > 1), rank 0 printing ``RESULT {json}``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

#: One thread per rank (a core each in the model), and Open MPI's shared-memory eager limit
#: above the states' size: the model assumes a message arrives while its sender computes.
WORKER_ENV = dict(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                  OMPI_MCA_btl_vader_eager_limit="131072",
                  OMPI_MCA_btl_vader_max_send_size="131072")
#: Gradients before timing: the first are slower than the steady state the model predicts.
WARMUP_GRADIENTS = 3
#: grids: one-shot (2, 2), 2 levels, cf 4; problem -> (calibrated layer, samples, layers)
LEVELS, CFACTOR, M = 2, 4, (2, 2)
PROBLEMS = {"digits": ("conv:4x8x8:3", 200, 32), "peaks": ("dense:8", 2000, 32),
            "digits28": ("conv:8x28x28:3", 32, 16)}


def worker_env() -> dict:
    """This environment with WORKER_ENV: one thread per rank always; Open MPI's limits only
    where the user has not set them (their choice is what gets measured)."""
    env = dict(os.environ)
    for key, value in WORKER_ENV.items():
        env[key] = env.get(key, value) if key.startswith("OMPI_MCA_") else value
    return env


def mpi_command(cmd, nranks):
    return ["mpiexec", "-n", str(nranks)] + cmd if nranks > 1 else cmd


def run_worker(script: str, spec: dict, nranks: int, timeout: float = 900) -> dict:
    """Run ``script --worker spec`` on ``nranks`` ranks; rank 0's RESULT as a dict."""
    cmd = mpi_command([sys.executable, script, "--worker", json.dumps(spec)], nranks)
    out = subprocess.run(cmd, capture_output=True, text=True, env=worker_env(),
                         timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed:\n{out.stderr[-4000:]}")
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])


def run_calibration(args, layers, samples, rows, name):
    """--calibration's file, else ``braidpy calibrate`` now at the most ranks, kept by --json."""
    from braidpy.perf.calibration import load_calibration

    if args.calibration:
        return load_calibration(args.calibration)
    path = os.path.join(tempfile.gettempdir(), name)
    cmd = [sys.executable, "-m", "braidpy", "calibrate", "-o", path, "-q"]
    cmd += ["--cores", str(args.cores)] if args.cores else []
    for layer in layers:
        cmd += ["--layer", layer]
    cmd += ["--samples", *map(str, samples), "--rows", *map(str, rows)]
    subprocess.run(mpi_command(cmd, max(args.ranks)), check=True, env=worker_env())
    cal = load_calibration(path)
    print(f"calibrated now ({path}; network: {cal.p2p.source})")
    if args.json:
        shutil.copyfile(path, os.path.splitext(args.json)[0] + ".calibration.json")
    return cal


def dump(rows, path) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


def plot_predicted_vs_measured(rows, measured: str, path: str, xlabel: str) -> None:
    """Predicted against measured seconds, a marker per rank count, the ±25 % band, a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


# ------------------------------------------------------------------ workers (under mpiexec)


def dense_validation_app(spec: dict, app_class=None):
    """(net, params, app) of the seeded dense ResNet that model and timeline time."""
    from braidpy.nn import ResNet, ResNetApp

    net = ResNet((2,), 5, width=spec["width"], nlayers=spec["layers"])
    params = net.init_params(seed=3, scale=0.1)
    rng = np.random.default_rng(5)
    X = rng.standard_normal((spec["samples"], 2))
    C = np.eye(5)[rng.integers(0, 5, spec["samples"])]
    return net, params, (app_class or ResNetApp)(net, params, X, C)


def _solver(spec, app, net, comm, oneshot):
    from braidpy.adjoint import GradientSolver

    opts = dict(max_levels=spec["levels"], cfactor=spec["cf"], skip=spec["skip"],
                abs_tol=1e-7, storage="final")
    return GradientSolver(app, 0.0, net.tstop, spec["layers"], comm=comm if
                          comm.Get_size() > 1 else None, primal=opts, oneshot=oneshot)


def slowest(comm, MPI, run):
    """(wall s, CPU s) of run() between barriers, each the slowest rank's; run()'s value."""
    comm.Barrier()
    start, cpu = time.perf_counter(), time.process_time()
    value = run()
    cpu = time.process_time() - cpu  # before the barrier: MPICH spins in it
    comm.Barrier()
    most = np.array([time.perf_counter() - start, cpu])
    comm.Allreduce(MPI.IN_PLACE, most, op=MPI.MAX)
    return most[0], most[1], value


def model_worker(spec: dict, comm, MPI) -> dict:
    """Time spec['repeats'] gradients of one setting on this communicator."""
    net, params, app = dense_validation_app(spec)
    solver = _solver(spec, app, net, comm,
                     tuple(spec["m"]) if spec["mode"] == "oneshot" else None)
    # serial on one rank: the network's own sweeps, as serial training runs them
    own_sweeps = spec["levels"] == 1 and comm.Get_size() == 1

    def gradient():
        if own_sweeps:
            net.loss_and_gradient(params, app.X, app.C)
            g = None
        else:
            if comm.Get_rank() == 0:
                solver.primal_core.set_initial_condition(app.initial_state())
            g = solver.evaluate()
        comm.Allreduce(MPI.IN_PLACE, np.zeros(net.nparams))
        return (1, 1) if g is None else (g.primal.iterations, g.adjoint.iterations)

    runs = []
    for _ in range(spec["repeats"] + WARMUP_GRADIENTS):
        params += 1e-4  # a new parameter, as after an optimizer step
        if spec["skip"]:
            solver.reset()
        runs.append(slowest(comm, MPI, gradient))
    solver.close()
    runs = runs[WARMUP_GRADIENTS:]  # the first include exact mode's cold start
    return {"times": [r[0] for r in runs], "cpu": [r[1] for r in runs],
            "iterations": [r[2] for r in runs]}


def problem(name: str):
    """(net, X, C) of a grids problem (PROBLEMS)."""
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
            runs = []
            for k in range(WARMUP_GRADIENTS + spec["repeats"]):  # warm-ups: solvers built
                p += 1e-4  # a new parameter, as after an optimizer step
                if k < WARMUP_GRADIENTS:
                    ev.gradient(p, X, C)
                else:
                    runs.append(slowest(comm, MPI, lambda: ev.gradient(p, X, C))[:2])
            grid.free()
            out.append(dict(problem=name, grid=list(shape), times=[r[0] for r in runs],
                            cpu=[r[1] for r in runs]))
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
        calls = [(c.tag, c.rows, c.batch, c.start - first, c.end - first) for c in app.calls]
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
