"""Is one-shot MGRIT's gradient at one rank within 3x serial backpropagation's time per step,
and does it meet the gradient-quality floor? (DESIGN §10's work ratio)

Peaks (``braidpy train peaks --preset paper --layers 256 --samples 1000``, L-BFGS, seed
1), the settings side by side in one process: layer calls per gradient, per line-search
trial and per step against serial's and docs/performance.md's formula ("Work per
gradient at one rank"); seconds per step, wall and CPU (median over steps 2..K; min and
median over --repeats interleaved runs) and CPU seconds per layer call; the cosine of
step k's one-shot gradient to the exact one at the same parameters (k = 1, 2, 5, 20, K,
and the smallest over 2..K), the exact loss after 5, 20, K steps against serial's, and
the floor (cosine >= 0.99 at every step, loss <= 5 % above serial's after 20 and K).
``--source digits`` / ``digits28``: that source's quick preset (conv ResNet, Adam on
shuffled batches; cosines against the exact gradient of the step's batch; losses of the
whole training set). Names: os<m1><m2>, the relaxation, cf<C> (not 4), L3. The first run
of a setting gives calls and quality (checked equal in the others); OMP_NUM_THREADS=1.

    python benchmarks/bench_work_ratio.py [--layers 256] [--samples 1000] [--steps 100]
        [--repeats 3] [--settings serial os2-FCF os1-F os12-F ...] [--json FILE|-] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import host_info, print_table  # noqa: E402

import numpy as np  # noqa: E402

from braidpy import __version__, data  # noqa: E402
from braidpy.nn import ResNet  # noqa: E402
from braidpy.perf.allocator import keep_freed_memory  # noqa: E402
from braidpy.train import TrainConfig, Trainer  # noqa: E402
from braidpy.train.presets import NETWORK_KEYS, preset  # noqa: E402
from braidpy.train.trainer import RELAXATIONS  # noqa: E402

#: name -> (mode, m1, m2, relax, cfactor, max_levels)
SETTINGS: Dict[str, tuple] = {
    "serial": ("serial", 1, 1, "FCF", 4, 2),
    "os2-FCF": ("oneshot", 2, 2, "FCF", 4, 2),      # TrainConfig's defaults
    "os1-FCF": ("oneshot", 1, 1, "FCF", 4, 2),
    "os2-F": ("oneshot", 2, 2, "F", 4, 2),
    "os1-F": ("oneshot", 1, 1, "F", 4, 2),
    "os12-F": ("oneshot", 1, 2, "F", 4, 2),
    "os12-F-cf8": ("oneshot", 1, 2, "F", 8, 2),
    "os12-F-L3": ("oneshot", 1, 2, "F", 4, 3),
    "os12-F-L3-cf8": ("oneshot", 1, 2, "F", 8, 3),
    "os12-F-L4": ("oneshot", 1, 2, "F", 4, 4),
    "os2-F-L3": ("oneshot", 2, 2, "F", 4, 3),
    "os2-F-L3-cf8": ("oneshot", 2, 2, "F", 8, 3),
    "os12-FCF": ("oneshot", 1, 2, "FCF", 4, 2),
    "os21-F": ("oneshot", 2, 1, "F", 4, 2),
    "os2-F-cf8": ("oneshot", 2, 2, "F", 8, 2),
    "os1-F-cf8": ("oneshot", 1, 1, "F", 8, 2),
    "os1-F-L3": ("oneshot", 1, 1, "F", 4, 3),
    "os1-F-cf8,4-L3": ("oneshot", 1, 1, "F", (8, 4), 3),
}
DEFAULT = ["serial", "os2-FCF", "os1-FCF", "os1-F", "os1-F-cf8", "os1-F-L3", "os2-F",
           "os12-F"]
QUALITY_STEPS = (1, 2, 5, 20)
LOSS_STEPS = (5, 20)
#: The gradient-quality floor of docs/performance.md ("Work per gradient at one rank"): the cosine
#: to the exact gradient at least FLOOR_COSINE at every step, and the exact loss after
#: 20 and after K steps at most FLOOR_LOSS above serial's (relative).
FLOOR_COSINE, FLOOR_LOSS = 0.99, 0.05
#: The digits sources' validation share (`braidpy train`'s --validation-fraction default):
#: the benchmark trains on the rest.
VALIDATION_FRACTION = 0.2


def solve_calls(ntime: int, iterations: int, max_levels: int, cfactor: Any, nrelax: int,
                min_coarse: int = 2) -> int:
    """Layer calls of one MGRIT solve without skip (XBRAID_CONVENTIONS §2, §4, §6):
    per V-cycle, on each level l above the coarsest nrelax FC sweeps (n_l calls each),
    restriction's F sweep (n_l - n_{l+1}), its residual (n_{l+1} fine steps) and the
    coarse right-hand side (n_{l+1} coarse steps); the coarsest level's sequential
    solve (n_{L-1}); interpolation's F sweep on levels L-2 .. 1; after the cycles the
    final F sweep of level 0 (n_0 - n_1)."""
    cfs = list(cfactor) if isinstance(cfactor, (list, tuple)) else [cfactor]
    n = [ntime]
    while len(n) < max_levels:
        cf = cfs[min(len(n) - 1, len(cfs) - 1)]
        if n[-1] // cf < max(min_coarse, 1):
            break
        n.append(n[-1] // cf)
    if len(n) == 1:
        return ntime
    L = len(n)
    cycle = sum(nrelax * n[l] + (n[l] - n[l + 1]) + 2 * n[l + 1] for l in range(L - 1))
    cycle += n[-1] + sum(n[l] - n[l + 1] for l in range(1, L - 1))
    return iterations * cycle + (n[0] - n[1])


def trial_calls(ntime: int, iterations: int, max_levels: int, cfactor: Any, nrelax: int
                ) -> int:
    """Layer calls of a line-search trial: a state solve without its final F sweep
    (GradientSolver.objective), where the last point is a C-point of level 0."""
    cf0 = cfactor[0] if isinstance(cfactor, (list, tuple)) else cfactor
    full = solve_calls(ntime, iterations, max_levels, cfactor, nrelax)
    if ntime % cf0 or full == ntime:  # the sweep computes u_N, or is the whole solve
        return full
    return full - (ntime - ntime // cf0)


def run_setting(name: str, net: ResNet, X: np.ndarray, C: np.ndarray, steps: int,
                keep: bool, training: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One training run of setting ``name``; ``training``: more TrainConfig fields
    (optimizer, lr, batch_size, shuffle, seed). With ``keep``, the gradient, the
    parameters before each step and the rows of each step's batch are kept."""
    mode, m1, m2, relax, cfactor, levels = SETTINGS[name]
    cfg = TrainConfig(mode=mode, m1=m1, m2=m2, relax=relax, cfactor=cfactor,
                      mgrit=dict(max_levels=levels), iterations=steps, validate_every=0,
                      **(training or {}))
    trainer = Trainer(net, (X, C), None, cfg)
    # The rows of each step's batch: the exact gradient to compare with is that batch's.
    # (Trainer.step draws them once per step and gathers them with _batch.)
    batches: List[np.ndarray] = []
    draw = trainer._batch

    def recorded_batch(idx):
        if keep:
            batches.append(np.array(idx))
        return draw(idx)

    trainer._batch = recorded_batch  # type: ignore[method-assign]
    ev = trainer.evaluator
    grads: List[np.ndarray] = []
    grad_calls: List[int] = []
    loss_calls: List[int] = []
    gradient, loss = ev.gradient, ev.loss

    def counted_gradient(params, X, C, average=None):
        before = ev.step_calls
        out = gradient(params, X, C)
        grad_calls.append(ev.step_calls - before)
        if keep:
            grads.append(np.array(out[1]))
        return out

    def counted_loss(params, X, C):
        before = ev.step_calls
        out = loss(params, X, C)
        loss_calls.append(ev.step_calls - before)
        return out

    ev.gradient, ev.loss = counted_gradient, counted_loss
    params = [np.array(trainer.params)] if keep else []
    cpu = [time.process_time()]  # this process's CPU time: robust on a shared host

    def on_step(record):
        cpu.append(time.process_time())
        if keep:
            params.append(np.array(trainer.params))

    history = trainer.run(on_step=on_step)
    seconds = [r["seconds"] for r in history]
    cpu_seconds = list(np.diff(cpu))
    calls = [r["steps"] for r in history]
    if keep:  # one batch and one gradient per step (no quality checks run here)
        assert len(batches) == len(grads) == len(history), (name, "batches per step")
    return {"name": name, "history": history, "grads": grads, "params": params,
            "batches": batches, "grad_calls": grad_calls, "loss_calls": loss_calls,
            "step_calls": calls,
            "step_seconds": statistics.median(seconds[1:] or seconds),
            "step_cpu_seconds": statistics.median(cpu_seconds[1:] or cpu_seconds),
            "call_seconds": sum(cpu_seconds[1:] or cpu_seconds) / sum(calls[1:] or calls)}


def quality(run: Dict[str, Any], net: ResNet, X: np.ndarray, C: np.ndarray
            ) -> Dict[str, Any]:
    """Cosines to the exact gradient of the same batch at the same parameters, and the
    exact losses of the whole training set (X, C)."""
    cosines, errors = [], []
    for k, g in enumerate(run["grads"]):
        rows = run["batches"][k]
        exact = net.loss_and_gradient(run["params"][k], X[rows], C[rows])[1]
        cosines.append(float(g @ exact / (np.linalg.norm(g) * np.linalg.norm(exact))))
        errors.append(float(np.linalg.norm(g - exact) / np.linalg.norm(exact)))
    losses = [float(net.loss(p, X, C)) for p in run["params"]]  # after 0, 1, ... steps
    return {"cosine": cosines, "relative_error": errors, "exact_loss": losses}


def fmt(x: Optional[float], spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (the error names the value given)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


#: The data sources: Peaks (the dense network of the paper) and the conv sources of
#: `braidpy train` whose quick preset trains with Adam on mini-batches.
SOURCES = ("peaks", "digits", "digits28")


def problem(args: argparse.Namespace) -> Tuple[np.ndarray, np.ndarray, ResNet,
                                               Dict[str, Any], str]:
    """(X, C, network, TrainConfig fields, description) of the source: Peaks (256
    layers of width 8, 1000 samples, full-batch L-BFGS), or `braidpy train SOURCE`'s
    quick preset (network, data split, optimizer, step size, batches, shuffling), with
    the options given laid over it. The seed seeds the data, the initialization and the
    shuffling, as `braidpy train --seed` does (Peaks' initialization was seed 1's at
    every --seed until the digits check; seed 1 measures the same as before)."""
    values = preset("quick", args.source)
    if args.optimizer is not None and args.optimizer != values["optimizer"]:
        values["lr"] = None  # a preset's step size is tuned for its optimizer (as the CLI)
    for option, key in (("layers", "nlayers"), ("width", "width"), ("batch", "batch_size"),
                        ("optimizer", "optimizer"), ("lr", "lr")):
        if getattr(args, option) is not None:
            values[key] = getattr(args, option)
    if args.source == "peaks":
        X, C = data.peaks(args.samples, args.seed)
        what = f"Peaks, {values['nlayers']} layers x {values['width']}, {X.shape[0]} samples"
    else:
        loader = data.digits if args.source == "digits" else data.digits28
        X, C = loader(VALIDATION_FRACTION, args.seed)["train"]
        what = (f"{args.source}, conv {values['nlayers']} layers x {values['width']} "
                f"channels, {X.shape[0]} training images")
    net = ResNet(X.shape[1:], C.shape[1], **{k: values[k] for k in NETWORK_KEYS})
    training = {k: values[k] for k in ("optimizer", "lr", "batch_size", "shuffle")}
    training["seed"] = args.seed
    batch = values["batch_size"]
    what += f", {values['optimizer']}" + (f" lr {values['lr']}" if values["lr"] else "") + (
        ", full batch" if batch is None or batch >= X.shape[0] else
        f", {'shuffled ' if values['shuffle'] else ''}batches of {batch}")
    return X, C, net, training, what


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=SOURCES, default="peaks",
                    help="peaks (default), or the conv network and training of "
                    "`braidpy train digits|digits28`'s quick preset")
    ap.add_argument("--layers", type=positive_int, help="peaks: 256; digits, digits28: "
                    "the preset's (8, 16)")
    ap.add_argument("--samples", type=positive_int, help="peaks only: 1000")
    ap.add_argument("--width", type=positive_int, help="peaks: 8; digits, digits28: the "
                    "preset's channels (4, 8)")
    ap.add_argument("--batch", type=positive_int, help="samples per step (peaks: all; "
                    "digits: 100, digits28: 64, shuffled)")
    ap.add_argument("--optimizer", choices=("lbfgs", "adam", "sgd"),
                    help="peaks: lbfgs; digits, digits28: adam")
    ap.add_argument("--lr", type=float, help="step size (the preset's for its optimizer, "
                    "else the optimizer's default)")
    ap.add_argument("--steps", type=positive_int, default=100, help="optimizer steps per "
                    "run (braidpy train's default run length)")
    ap.add_argument("--repeats", type=positive_int, default=3,
                    help="interleaved runs of every setting")
    ap.add_argument("--seed", type=int, default=1, help="data, initialization and "
                    "shuffling (as braidpy train --seed)")
    ap.add_argument("--settings", nargs="+", choices=tuple(SETTINGS), default=DEFAULT)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': "
                    "stdout, after the tables)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 steps, 1 repeat "
                    "(peaks: 32 layers, 200 samples)")
    args = ap.parse_args(argv)
    if args.source != "peaks" and args.samples is not None:
        ap.error(f"--samples {args.samples}: only --source peaks generates its samples "
                 f"(the {args.source} training set is fixed)")
    if args.source == "peaks":
        args.layers = args.layers or 256
        args.width = args.width or 8
        args.samples = args.samples or 1000
    if args.quick:
        args.steps, args.repeats = 5, 1
        if args.source == "peaks":
            args.layers, args.samples = 32, 200
    if "serial" not in args.settings:
        args.settings = ["serial"] + args.settings
    keep_freed_memory()  # as braidpy train does
    X, C, net, training, what = problem(args)
    N = net.nlayers
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in args.settings}
    for repeat in range(args.repeats):
        for name in args.settings:
            r = run_setting(name, net, X, C, args.steps, keep=repeat == 0,
                            training=training)
            if repeat:
                first = runs[name][0]
                assert r["step_calls"] == first["step_calls"], (name, "calls differ")
            runs[name].append(r)
            print(f"  run {repeat + 1}/{args.repeats} {name}: "
                  f"{r['step_seconds'] * 1e3:.1f} ms/step", file=sys.stderr, flush=True)
    results: Dict[str, Any] = {}
    for name in args.settings:
        first = runs[name][0]
        mode, m1, m2, relax, cfactor, levels = SETTINGS[name]
        nrelax = RELAXATIONS[relax]
        if mode == "serial":  # after a line search the last trial's forward states
            formula = N if first["loss_calls"] else 2 * N  # are reused: backward only
            trial_formula = N
        else:
            formula = solve_calls(N, m1, levels, cfactor, nrelax) + \
                solve_calls(N, m2, levels, cfactor, nrelax)
            trial_formula = trial_calls(N, m1, levels, cfactor, nrelax)
        times = [r["step_seconds"] for r in runs[name]]
        cpu_times = [r["step_cpu_seconds"] for r in runs[name]]
        results[name] = {
            "mode": mode, "m1": m1, "m2": m2, "relax": relax, "cfactor": cfactor,
            "max_levels": levels,
            "gradient_calls": first["grad_calls"][-1], "gradient_calls_formula": formula,
            "first_gradient_calls": first["grad_calls"][0],
            "loss_calls": first["loss_calls"][-1] if first["loss_calls"] else None,
            "loss_calls_formula": trial_formula,
            "line_search_trials": [r["line_search_trials"] for r in first["history"]],
            "step_calls": first["step_calls"],
            "calls_per_step": sum(first["step_calls"]) / len(first["step_calls"]),
            "seconds_per_step_min": min(times), "seconds_per_step_median":
            statistics.median(times), "cpu_seconds_per_step_min": min(cpu_times),
            "cpu_seconds_per_step_median": statistics.median(cpu_times),
            "cpu_seconds_per_call": min(r["call_seconds"] for r in runs[name]),
            **quality(first, net, X, C),
        }
    s = results["serial"]
    rows, qrows = [], []
    cos_steps = sorted({k for k in QUALITY_STEPS + (args.steps,) if k <= args.steps})
    loss_steps = sorted({k for k in LOSS_STEPS + (args.steps,) if k <= args.steps})
    for name in args.settings:
        r = results[name]
        calls_x = r["calls_per_step"] / s["calls_per_step"]
        time_x = r["seconds_per_step_min"] / s["seconds_per_step_min"]
        cpu_x = r["cpu_seconds_per_step_min"] / s["cpu_seconds_per_step_min"]
        r["calls_ratio"], r["time_ratio"], r["cpu_time_ratio"] = calls_x, time_x, cpu_x
        r["time_ratio_median"] = r["seconds_per_step_median"] / s["seconds_per_step_median"]
        r["cpu_time_ratio_median"] = r["cpu_seconds_per_step_median"] / \
            s["cpu_seconds_per_step_median"]
        searched = r["loss_calls"] is not None  # L-BFGS's line search; Adam has none
        rows.append([name, r["gradient_calls"], r["gradient_calls_formula"],
                     r["loss_calls"] if searched else "-",
                     r["loss_calls_formula"] if searched else "-",
                     f"{r['calls_per_step']:.0f}", f"{calls_x:.2f}x",
                     f"{r['seconds_per_step_min'] * 1e3:.1f} / "
                     f"{r['seconds_per_step_median'] * 1e3:.1f}", f"{time_x:.2f}x",
                     f"{r['cpu_seconds_per_step_min'] * 1e3:.1f} / "
                     f"{r['cpu_seconds_per_step_median'] * 1e3:.1f}", f"{cpu_x:.2f}x",
                     f"{r['cpu_seconds_per_call'] * 1e6:.0f}"])
        cos = r["cosine"]
        loss = r["exact_loss"]
        row = [name] + [fmt(cos[k - 1], ".6f") for k in cos_steps]
        row.append(fmt(min(cos[1:] or cos), ".6f"))
        excess = {}
        for k in loss_steps:
            r[f"progress_{k}"] = (loss[0] - loss[k]) / (s["exact_loss"][0] -
                                                        s["exact_loss"][k])
            excess[k] = r[f"loss_vs_serial_{k}"] = loss[k] / s["exact_loss"][k] - 1
            row += [f"{loss[k]:.4f}", f"{100 * excess[k]:+.1f}%"]
        r["floor"] = min(cos) >= FLOOR_COSINE and all(
            excess[k] <= FLOOR_LOSS for k in loss_steps if k >= 20)
        row.append("pass" if r["floor"] else "FAIL")
        qrows.append(row)
    print_table(["setting", "calls/grad", "formula", "calls/trial", "formula", "calls/step",
                 "x serial", "wall ms/step min / med", "x serial", "cpu ms/step min / med",
                 "x serial", "cpu us/call"], rows,
                f"Work per step, one rank ({what}, seed {args.seed}, {args.steps} steps, "
                f"{args.repeats} run(s); calls/step and ms/step include any line search)")
    print_table(["setting"] + [f"cos@{k}" for k in cos_steps] + ["min cos (2..)"] +
                [f"{what}@{k}" for k in loss_steps for what in ("loss", "vs serial")] +
                [f"floor ({args.steps} steps)"], qrows,
                f"Gradient quality: cosine to the exact gradient of the step's batch at "
                f"the same parameters; exact loss of the whole training set after k steps "
                f"and against serial's; floor: cosine >= "
                f"{FLOOR_COSINE} at every step and loss at most {100 * FLOOR_LOSS:.0f}% "
                f"above serial's after " + (" and ".join(str(k) for k in loss_steps
                                                     if k >= 20) or "(none: < 20)")
                + " steps")
    out = {"benchmark": "bench_work_ratio", "braidpy": __version__,
           "host": platform.node(), "cpus": os.cpu_count(),
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
           "source": args.source, "setup": what, "layers": N, "samples": X.shape[0],
           "width": net.width, **training, "steps": args.steps,
           "repeats": args.repeats, "seed": args.seed, "results": results,
           "when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": host_info(mpi=False)}
    if args.json == "-":
        print(json.dumps(out, indent=1, default=str))
    elif args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
