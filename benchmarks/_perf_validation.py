"""bench_perf.py's launches and summaries: a worker under mpiexec, the rank counts the
model is validated at, the calibration made for the run, the error summary and plot.

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
from typing import Dict, List, Optional, Sequence

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
    import numpy as np

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
