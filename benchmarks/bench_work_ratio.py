"""Is one-shot MGRIT's gradient at one rank within 3x serial backpropagation's time per step,
and does it meet the gradient-quality floor? (DESIGN §10's work ratio)

Peaks (``braidpy train peaks --preset paper --layers 256 --samples 1000``, L-BFGS) or
``--source digits|digits28``'s quick preset, every setting (os<m1><m2>-relax[-cf<C>][-L<l>])
interleaved over --repeats in one process. Timed: wall and CPU seconds per step (median of
steps 2..K); counted: layer calls per gradient and per line-search trial against
docs/performance.md's formula; quality: cosine to the exact gradient, exact loss vs serial's.

    python benchmarks/bench_work_ratio.py [--layers 256] [--samples 1000] [--steps 100]
        [--repeats 3] [--settings serial os2-FCF os1-F os12-F ...] [--json FILE|-] [--quick]
"""

from __future__ import annotations

import argparse
import json
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

SETTINGS = ("serial", "os2-FCF", "os1-FCF", "os2-F", "os1-F", "os12-F", "os12-F-cf8",
            "os12-F-L3", "os12-F-L3-cf8", "os12-F-L4", "os2-F-L3", "os2-F-L3-cf8",
            "os12-FCF", "os21-F", "os2-F-cf8", "os1-F-cf8", "os1-F-L3", "os1-F-cf8,4-L3")


def setting(name: str) -> tuple:
    """(mode, m1, m2, relax, cfactor, max_levels) of a name such as os12-F-cf8,4-L3."""
    if name == "serial":
        return ("serial", 1, 1, "FCF", 4, 2)
    head, relax, *rest = name.split("-")
    m = [int(c) for c in head[2:]]
    cf, levels = 4, 2
    for part in rest:
        if part.startswith("cf"):
            cfs = tuple(int(c) for c in part[2:].split(","))
            cf = cfs if len(cfs) > 1 else cfs[0]
        else:
            levels = int(part[1:])
    return ("oneshot", m[0], m[-1], relax, cf, levels)


DEFAULT = ["serial", "os2-FCF", "os1-FCF", "os1-F", "os1-F-cf8", "os1-F-L3", "os2-F",
           "os12-F"]
QUALITY_STEPS, LOSS_STEPS = (1, 2, 5, 20), (5, 20)
#: docs/performance.md's floor: cosine >= 0.99 at every step, exact loss after 20 and K
#: steps at most 5 % above serial's. The digits sources train on 1 - 0.2 of their set.
FLOOR_COSINE, FLOOR_LOSS, VALIDATION_FRACTION = 0.99, 0.05, 0.2
SOURCES = ("peaks", "digits", "digits28")


def solve_calls(ntime: int, iterations: int, max_levels: int, cfactor: Any, nrelax: int,
                min_coarse: int = 2) -> int:
    """Layer calls of one MGRIT solve without skip (XBRAID_CONVENTIONS §2, §4, §6): per
    V-cycle and level above the coarsest, nrelax FC sweeps, restriction's F sweep, its
    residual and coarse right-hand side; the coarsest solve; interpolation's F sweeps;
    after the cycles level 0's final F sweep."""
    cfs = list(cfactor) if isinstance(cfactor, (list, tuple)) else [cfactor]
    n = [ntime]
    while len(n) < max_levels and n[-1] // cfs[min(len(n), len(cfs)) - 1] >= max(min_coarse, 1):
        n.append(n[-1] // cfs[min(len(n), len(cfs)) - 1])
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
    """One training run of setting ``name``; ``training``: more TrainConfig fields. With
    ``keep``, each step's gradient, parameters before it and batch rows are kept."""
    mode, m1, m2, relax, cfactor, levels = setting(name)
    cfg = TrainConfig(mode=mode, m1=m1, m2=m2, relax=relax, cfactor=cfactor,
                      mgrit=dict(max_levels=levels), iterations=steps, validate_every=0,
                      **(training or {}))
    trainer = Trainer(net, (X, C), None, cfg)
    ev = trainer.evaluator
    batches: List[np.ndarray] = []
    grads: List[np.ndarray] = []
    calls: Dict[str, List[int]] = {"gradient": [], "loss": []}
    draw, gradient, loss = trainer._batch, ev.gradient, ev.loss

    def recorded_batch(idx):  # the exact gradient to compare with is this batch's
        if keep:
            batches.append(np.array(idx))
        return draw(idx)

    def counted(kind, fn):
        def call(params, X, C, average=None):
            before = ev.step_calls
            out = fn(params, X, C)
            calls[kind].append(ev.step_calls - before)
            if keep and kind == "gradient":
                grads.append(np.array(out[1]))
            return out
        return call

    trainer._batch = recorded_batch  # type: ignore[method-assign]
    ev.gradient, ev.loss = counted("gradient", gradient), counted("loss", loss)
    params = [np.array(trainer.params)] if keep else []
    cpu = [time.process_time()]  # this process's CPU time: robust on a shared host

    def on_step(record):
        cpu.append(time.process_time())
        if keep:
            params.append(np.array(trainer.params))

    history = trainer.run(on_step=on_step)
    wall, cpu_s = [r["seconds"] for r in history], list(np.diff(cpu))
    step_calls = [r["steps"] for r in history]
    if keep:
        assert len(batches) == len(grads) == len(history), (name, "batches per step")
    return {"name": name, "history": history, "grads": grads, "params": params,
            "batches": batches, "grad_calls": calls["gradient"], "loss_calls": calls["loss"],
            "step_calls": step_calls,
            "step_seconds": statistics.median(wall[1:] or wall),
            "step_cpu_seconds": statistics.median(cpu_s[1:] or cpu_s),
            "call_seconds": sum(cpu_s[1:] or cpu_s) / sum(step_calls[1:] or step_calls)}


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


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def problem(args: argparse.Namespace) -> Tuple[np.ndarray, np.ndarray, ResNet,
                                               Dict[str, Any], str]:
    """(X, C, network, TrainConfig fields, description): Peaks, or `braidpy train
    SOURCE`'s quick preset, with the options given laid over it; the seed seeds data,
    initialization and shuffling as `braidpy train --seed` does."""
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


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=SOURCES, default="peaks",
                    help="peaks, or `braidpy train digits|digits28`'s quick preset")
    ap.add_argument("--layers", type=positive_int, help="peaks: 256; else the preset's")
    ap.add_argument("--samples", type=positive_int, help="peaks only: 1000")
    ap.add_argument("--width", type=positive_int, help="peaks: 8; else the preset's")
    ap.add_argument("--batch", type=positive_int, help="samples per step (peaks: all; "
                    "digits: 100, digits28: 64, shuffled)")
    ap.add_argument("--optimizer", choices=("lbfgs", "adam", "sgd"),
                    help="peaks: lbfgs; digits, digits28: adam")
    ap.add_argument("--lr", type=float, help="step size (default: the preset's)")
    ap.add_argument("--steps", type=positive_int, default=100, help="optimizer steps per run")
    ap.add_argument("--repeats", type=positive_int, default=3,
                    help="interleaved runs of every setting")
    ap.add_argument("--seed", type=int, default=1, help="as braidpy train --seed")
    ap.add_argument("--settings", nargs="+", choices=SETTINGS, default=DEFAULT)
    ap.add_argument("--json", metavar="FILE", help="the results as JSON ('-': stdout)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 steps, 1 repeat "
                    "(peaks: 32 layers, 200 samples)")
    args = ap.parse_args(argv)
    if args.source != "peaks" and args.samples is not None:
        ap.error(f"--samples {args.samples}: only --source peaks generates its samples "
                 f"(the {args.source} training set is fixed)")
    if args.source == "peaks":
        args.layers, args.width = args.layers or 256, args.width or 8
        args.samples = args.samples or 1000
    if args.quick:
        args.steps, args.repeats = 5, 1
        if args.source == "peaks":
            args.layers, args.samples = 32, 200
    if "serial" not in args.settings:
        args.settings = ["serial"] + args.settings
    return args


def summary(name, runs, N, net, X, C) -> Dict[str, Any]:
    """One setting's results: calls against the formula, times, quality (first run)."""
    first = runs[0]
    mode, m1, m2, relax, cfactor, levels = setting(name)
    nrelax = RELAXATIONS[relax]
    if mode == "serial":  # after a line search the last trial's forward states are reused
        formula, trial = (N if first["loss_calls"] else 2 * N), N
    else:
        formula = (solve_calls(N, m1, levels, cfactor, nrelax)
                   + solve_calls(N, m2, levels, cfactor, nrelax))
        trial = trial_calls(N, m1, levels, cfactor, nrelax)
    wall = [r["step_seconds"] for r in runs]
    cpu = [r["step_cpu_seconds"] for r in runs]
    return {"mode": mode, "m1": m1, "m2": m2, "relax": relax, "cfactor": cfactor,
            "max_levels": levels, "gradient_calls": first["grad_calls"][-1],
            "gradient_calls_formula": formula, "first_gradient_calls": first["grad_calls"][0],
            "loss_calls": first["loss_calls"][-1] if first["loss_calls"] else None,
            "loss_calls_formula": trial,
            "line_search_trials": [r["line_search_trials"] for r in first["history"]],
            "step_calls": first["step_calls"],
            "calls_per_step": sum(first["step_calls"]) / len(first["step_calls"]),
            "seconds_per_step_min": min(wall), "seconds_per_step_median": statistics.median(wall),
            "cpu_seconds_per_step_min": min(cpu),
            "cpu_seconds_per_step_median": statistics.median(cpu),
            "cpu_seconds_per_call": min(r["call_seconds"] for r in runs),
            **quality(first, net, X, C)}


def min_med(r: Dict[str, Any], key: str) -> str:
    return f"{r[key + '_min'] * 1e3:.1f} / {r[key + '_median'] * 1e3:.1f}"


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    keep_freed_memory()  # as braidpy train does
    X, C, net, training, what = problem(args)
    N = net.nlayers
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in args.settings}
    for repeat in range(args.repeats):
        for name in args.settings:
            r = run_setting(name, net, X, C, args.steps, keep=repeat == 0, training=training)
            assert not repeat or r["step_calls"] == runs[name][0]["step_calls"], name
            runs[name].append(r)
            print(f"  run {repeat + 1}/{args.repeats} {name}: "
                  f"{r['step_seconds'] * 1e3:.1f} ms/step", file=sys.stderr, flush=True)
    results = {name: summary(name, runs[name], N, net, X, C) for name in args.settings}
    s = results["serial"]
    rows, qrows = [], []
    cos_steps = sorted({k for k in QUALITY_STEPS + (args.steps,) if k <= args.steps})
    loss_steps = sorted({k for k in LOSS_STEPS + (args.steps,) if k <= args.steps})
    for name, r in results.items():
        for key, field in (("calls", "calls_per_step"), ("time", "seconds_per_step_min"),
                           ("cpu_time", "cpu_seconds_per_step_min"),
                           ("time_ratio_median", "seconds_per_step_median"),
                           ("cpu_time_ratio_median", "cpu_seconds_per_step_median")):
            r[key if key.endswith("median") else f"{key}_ratio"] = r[field] / s[field]
        searched = r["loss_calls"] is not None  # L-BFGS's line search; Adam has none
        rows.append([name, r["gradient_calls"], r["gradient_calls_formula"],
                     r["loss_calls"] if searched else "-",
                     r["loss_calls_formula"] if searched else "-",
                     f"{r['calls_per_step']:.0f}", f"{r['calls_ratio']:.2f}x",
                     min_med(r, "seconds_per_step"), f"{r['time_ratio']:.2f}x",
                     min_med(r, "cpu_seconds_per_step"), f"{r['cpu_time_ratio']:.2f}x",
                     f"{r['cpu_seconds_per_call'] * 1e6:.0f}"])
        cos, loss, sl = r["cosine"], r["exact_loss"], s["exact_loss"]
        row = [name] + [f"{cos[k - 1]:.6f}" for k in cos_steps] + [f"{min(cos[1:] or cos):.6f}"]
        for k in loss_steps:
            r[f"progress_{k}"] = (loss[0] - loss[k]) / (sl[0] - sl[k])
            r[f"loss_vs_serial_{k}"] = loss[k] / sl[k] - 1
            row += [f"{loss[k]:.4f}", f"{100 * r[f'loss_vs_serial_{k}']:+.1f}%"]
        r["floor"] = min(cos) >= FLOOR_COSINE and all(
            r[f"loss_vs_serial_{k}"] <= FLOOR_LOSS for k in loss_steps if k >= 20)
        qrows.append(row + ["pass" if r["floor"] else "FAIL"])
    print_table(["setting", "calls/grad", "formula", "calls/trial", "formula", "calls/step",
                 "x serial", "wall ms/step min / med", "x serial", "cpu ms/step min / med",
                 "x serial", "cpu us/call"], rows,
                f"Work per step, one rank ({what}, seed {args.seed}, {args.steps} steps, "
                f"{args.repeats} run(s); calls/step and ms/step include any line search)")
    after = " and ".join(str(k) for k in loss_steps if k >= 20) or "(none: < 20)"
    print_table(["setting"] + [f"cos@{k}" for k in cos_steps] + ["min cos (2..)"]
                + [f"{w}@{k}" for k in loss_steps for w in ("loss", "vs serial")]
                + [f"floor ({args.steps} steps)"], qrows,
                f"Gradient quality: cosine to the exact gradient of the step's batch at "
                f"the same parameters; exact loss of the whole training set after k steps "
                f"and against serial's; floor: cosine >= {FLOOR_COSINE} at every step and loss "
                f"at most {100 * FLOOR_LOSS:.0f}% above serial's after {after} steps")
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
