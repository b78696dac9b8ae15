"""Does one-shot layer-parallel training of Peaks reach serial's accuracy (>= 95 %, within
2 points of exact) at less than half exact layer-parallel training's cost?

Günther et al. (2020) sec. 5.1/5.3: width 8, T = 5, L-BFGS, 5000 points full batch;
serial, exact and one-shot (2, 2), cf 4, 2 or 3 levels. Per run: best validation accuracy;
iterations, step calls and training seconds to first reach --target.

    python benchmarks/bench_peaks.py [--layers 32] [--iterations 300] [--target 0.95]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _harness import print_table

from braidpy import data
from braidpy.nn import ResNet
from braidpy.train import TrainConfig, Trainer

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "peaks"
#: exact mode's abs_tol, tikhonov = ddt = classifier reg, seed, validation and print steps
TOL, REG, SEED, VALIDATE_EVERY, PRINT_EVERY = 1e-9, 1e-5, 0, 5, 25


def run(label, args, train, validation):
    """One training run (label: serial, exact-L or oneshot-L); its outcome."""
    mode, _, levels = label.partition("-")
    net = ResNet((2,), 5, width=8, nlayers=args.layers, tstop=5.0, activation="smooth_relu")
    cfg = TrainConfig(mode=mode, m1=2, m2=2, optimizer="lbfgs", iterations=args.iterations,
                      mgrit=dict(cfactor=4, max_levels=int(levels or 1), abs_tol=TOL),
                      tikhonov=REG, ddt=REG, classifier_reg=REG, seed=SEED,
                      validate_every=VALIDATE_EVERY)
    trainer = Trainer(net, train, validation, cfg)
    out = {"label": label, "steps": 0, "seconds": 0.0, "reached": None}
    start = time.perf_counter()

    def on_step(record):
        out["steps"] += int(record["steps"])
        out["seconds"] += record["seconds"] - record.get("validation_seconds", 0.0)
        acc = record.get("val_accuracy")
        if out["reached"] is None and acc is not None and acc >= args.target:
            out["reached"] = (record["iteration"], out["steps"], out["seconds"])
        if record["iteration"] % PRINT_EVERY == 0:
            print(f"  {label}: it {record['iteration']:4d} loss {record['loss']:.4f} "
                  f"val {acc if acc is not None else float('nan'):.3f} "
                  f"{time.perf_counter() - start:7.1f} s", flush=True)

    trainer.run(on_step)
    return {**out, "best": trainer.best["accuracy"], "iterations": trainer.iteration,
            "final_loss": trainer.history[-1]["loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--runs", nargs="+", help="serial, exact-L, oneshot-L (L = MGRIT levels)",
                    default=["serial", "exact-2", "oneshot-2", "exact-3", "oneshot-3"])
    args = ap.parse_args()
    ref = data.load_peaks_reference(REFERENCE)
    train, validation = ref["train"], ref["validation"]
    print(f"Peaks: reference data ({REFERENCE}); {args.layers} layers, up to "
          f"{args.iterations} L-BFGS iterations, target {args.target:.0%}")
    results = {name: run(name, args, train, validation) for name in args.runs}
    rows = []
    for r in results.values():
        it, st, sec = r["reached"] or ("-", "-", "-")
        rows.append([r["label"], f"{r['best']:.1%}", f"{r['final_loss']:.4f}", it, st,
                     sec if sec == "-" else f"{sec:.1f}", r["iterations"], r["steps"],
                     f"{r['seconds']:.1f}"])
    print()
    print_table(["run", "best val", "final loss", f"its to {args.target:.0%}", "steps to",
                 "s to", "its", "steps", "s"], rows, title="Peaks training")
    for levels in ("2", "3"):
        e, o = results.get(f"exact-{levels}"), results.get(f"oneshot-{levels}")
        if e and o:
            print(f"{levels} levels: best accuracy one-shot {o['best']:.1%} vs exact "
                  f"{e['best']:.1%} (difference {100 * (o['best'] - e['best']):+.1f} points)")
            if e["reached"] and o["reached"]:
                print(f"  to {args.target:.0%}: one-shot / exact step calls "
                      f"{o['reached'][1] / e['reached'][1]:.2f}, time "
                      f"{o['reached'][2] / e['reached'][2]:.2f} (goal < 0.5)")


if __name__ == "__main__":
    main()
