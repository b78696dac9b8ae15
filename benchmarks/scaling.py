"""Where does layer parallelism pay on this host, and against what? Serial vs layer-parallel
vs data-parallel vs the best grid vs ``--grid auto``, per step and to the same loss.

Every rank count P (1, 2, 4, 8, 16 up to the physical cores, unless --oversubscribe or
--ranks) and row is one line of a table; the columns are

- serial: ``braidpy train --mode serial`` on one process (training rows); plain
  sequential stepping of the example's app (time rows);
- layer 1,1,P: ``--grid 1,1,P --quality-check-every K`` (default 10) with the one-shot
  setting ``--grid auto`` would choose for that grid (braidpy.perf.auto.qualified); K = 0
  or no calibration: the preset's (m1 = m2 = 2, FCF, 2 levels, cf 4), no checks. Time
  rows: the example's own MGRIT solve on P ranks;
- data P,1,1: ``--grid P,1,1 --mode serial`` (exact backpropagation per shard);
- best: the fastest grid measured at P (with --mixed also every D,1,L), per metric;
- auto: what ``--grid auto --quality-check-every K`` picks (braidpy.perf.auto.decide_grid)
  from a ``braidpy calibrate`` made at the start (or --calibration); a grid and setting
  already measured is that run, else a ``--grid auto`` run is timed and its grid checked.

Rows: peaks256, peaks1024 (``train peaks --preset paper --layers N --samples 5000``,
L-BFGS), batch32 (1024 layers, ``--batch 32 --shuffle --optimizer adam``), heat
(examples/ex02_heat1d.py --ntime 16384 --tol 1e-8), ode (ex01_scalar_ode.py, same).

Training cells, from the run's ``--log`` JSON lines: time per step (median, the first
step left out when there are two or more) and time to the serial run's loss (the mean of
its last W losses after K steps: --steps 20 for L-BFGS, --adam-steps 100 with --window 10
for Adam; a run's time to it sums its step times up to the first step whose trailing
W-step mean is <= the target, relative slack 1e-9; ``check_seconds``: the quality checks'
part). A parallel run stops at the target, at M = 2K steps (--max-steps-factor), at
--cap (1.5) x serial's time (lower where --budget needs), or early when its loss is
behind serial's and its pace projects past that limit ("abandoned"). Time cells: time to
1e-8 (the slowest rank's ``r.timings['total']`` after a warm-up) beside sequential
stepping; the 1-rank column is MGRIT's work ratio.

First the host (cores, MPI, BLAS threads, versions, commit; _harness.host_info) and
cpu_scaling.py's check that P processes of NumPy work run as fast as one; then the plan
(one serial gradient per row timed in a child; --dry-run stops there). Every launch runs
with one thread per rank, in a session of its own, killed with all its processes past
its time ("timeout"). Serial runs first, then P from the largest down; --budget (240 s)
lowers K (never below --min-steps) until the estimate fits and cuts or skips launches,
each cut cell with its reason. More ranks than cores are marked "over".

    python benchmarks/scaling.py [--json FILE] [--quick | --small] [--budget S]
        [--ranks 1 2 4 ...] [--oversubscribe] [--steps K] [--rows ...] [--mixed] [--dry-run]
    STEPS="scale" bash benchmarks/gpu_check.sh     # on a 16-core GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any, Dict, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import print_table  # noqa: E402
from _scaling_cells import setting_text, training_metrics, with_speedup  # noqa: E402,F401
from _scaling_measure import measure  # noqa: E402
from _scaling_runs import (first_reaching, losses_of, read_log, seconds_of,  # noqa: E402,F401
                           target_loss, time_rows, trailing_means, training_rows, worker)

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
