"""Where, on one GPU, does braidpy's layer-parallel gradient beat PyTorch's serial loop?
The regime map: launch- or compute-bound, layer-parallel wins or not, and why.

Network: bench_gpu.py --conv-net's conv ResNet, the same weights in braidpy and PyTorch;
rows DTYPE:C:N:BATCH. Per call: PyTorch's layer call at its best settings and on a 1x1
image (the launch floor); braidpy's serial step and batched forward and adjoint over
m = N / cfactor intervals, per --backends. Whole gradient: PyTorch's serial fwd+bwd,
braidpy's loss_and_gradient and its reused one-shot (2, 2) GradientSolver.
Rule (classify): launch-bound if the serial layer call < 2x the floor; gain = serial layer
call / (batched forward / m); W = one-shot's layer steps / serial's 2N; layer-parallel
wins if its measured whole gradient is faster, else (not measured) if gain > W.
Rows past --budget are skipped, saying why. --device cpu --small: NumPy and CPU PyTorch.

Run: python benchmarks/bench_gpu_regimes.py [--budget S] [--rows PATTERN ...] [--json FILE]
     [--device cpu --small]
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import math
import os
import sys
from collections import namedtuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, when imported
from _gpu import array_module, torch_for  # noqa: E402
from _harness import Budget as _Budget  # noqa: E402
from _harness import host_info, ms, print_table  # noqa: E402
from _regimes import (Row, TorchSide, _us, gradient_pass, kernels_label,  # noqa: E402
                      per_call_pass, save)

LAUNCH_FACTOR = 2.0  # serial per-layer call < LAUNCH_FACTOR x the launch floor: launch-bound
Budget = functools.partial(_Budget, safety=1.5)  # estimates x 1.5 against --budget (0: none)
FULL = dict(dtypes=["float32", "float64"], channels=[8, 32, 64], layers=[256, 1024],
            batches=[1, 32, 128], image=28)
SMALL = dict(dtypes=["float64", "float32"], channels=[2], layers=[16], batches=[1, 4], image=8)
#: A row's place on the map; basis: "measured" whole gradient or "predicted" per call.
Regime = namedtuple("Regime", "bound wins basis gain work_ratio reason")


def classify(layer_s, floor_s, batched_s, intervals, work_ratio, measured_speedup=None):
    """A row's regime by the rule above; measured_speedup: serial whole gradient / one-shot's."""
    for name, value in (("layer_s", layer_s), ("floor_s", floor_s), ("batched_s", batched_s),
                        ("work_ratio", work_ratio)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"classify: {name} must be a positive number, got {value!r}")
    if intervals < 1:
        raise ValueError(f"classify: intervals must be >= 1, got {intervals!r}")
    per_interval = batched_s / intervals
    gain, launch = layer_s / per_interval, layer_s < LAUNCH_FACTOR * floor_s
    bound, predicted = "launch-bound" if launch else "compute-bound", gain > work_ratio
    short = f"short of MGRIT's {work_ratio:.2f}x the layer steps: "
    verdict = (f"which pays for MGRIT's {work_ratio:.2f}x the layer steps" if predicted
               else short + "the batched call does not save enough launches" if launch
               else short + "the device is already busy with one layer, so the extra work "
               "cannot be hidden")
    reason = (f"{bound}: the serial per-layer call takes {_us(layer_s)}, "
              f"{layer_s / floor_s:.1f}x the {_us(floor_s)} of the same calls on an empty "
              f"image ({'<' if launch else '>='} {LAUNCH_FACTOR:g}x); one call over "
              f"{intervals} intervals costs {_us(per_interval)} per interval, a gain of "
              f"{gain:.2f} over the serial call, {verdict}")
    if measured_speedup is None:
        return Regime(bound, predicted, "predicted", gain, work_ratio, reason)
    wins = measured_speedup > 1.0
    reason += f"; measured whole gradient {measured_speedup:.2f}x serial"
    if wins != predicted:
        reason += (" (against the per-call prediction: the sequential coarse grid and the "
                   "core's own operations, outside the per-call numbers, decide)")
    return Regime(bound, wins, "measured", gain, work_ratio, reason)


def growth_exponent(works, seconds):
    """s in seconds ~ works**s (least squares on logs), None with < 2 distinct works."""
    if len(set(works)) < 2:
        return None
    return float(np.polyfit(np.log(works), np.log(seconds), 1)[0])


def auto_cfactor(layers):
    """The power of two nearest sqrt(N): the fewest sequential calls per iteration."""
    return 2 ** round(math.log2(layers) / 2)


def make_rows(args):
    rows = [Row(dt, c, n, b, args.cfactor or auto_cfactor(n), args.image)
            for dt in args.dtypes for c in args.channels for n in args.layers
            for b in args.batches]
    for wanted in args.rows or ():
        if not any(fnmatch.fnmatchcase(r.name, wanted) for r in rows):
            raise SystemExit(f"bench_gpu_regimes: --rows {wanted!r} matches no row "
                             f"(rows are DTYPE:C:N:BATCH, e.g. {rows[0].name})")
    if args.rows:
        rows = [r for r in rows if any(fnmatch.fnmatchcase(r.name, w) for w in args.rows)]
    for row in rows:
        if row.intervals < 2:
            raise SystemExit(f"bench_gpu_regimes: cfactor {row.cfactor} leaves fewer than 2 "
                             f"intervals of N = {row.layers} layers")
    return rows


def report(rows, meta, reference):
    measured = [r for r in rows if r.status != "skipped"]
    for row in measured:
        pc, g = row.per_call, row.gradient
        row.regime = classify(pc["serial_layer"], pc["floor"], pc["forward_batched"],
                              row.intervals, g.get("work_ratio", pc["work_ratio"]),
                              g.get("speedup"))._asdict()
    print_table(
        ["row (dtype:C:N:batch)", "m", "serial layer ms", "floor ms", "torch fmt",
         "braidpy step ms", "kernels", "batched fwd/m ms", "batched adj/m ms", "gain", "W"],
        [[r.name, r.intervals, ms(r.per_call["serial_layer"], 3), ms(r.per_call["floor"], 3),
          r.per_call.get("torch_format", "-"), ms(r.per_call["step"], 3),
          kernels_label(r.per_call), ms(r.per_call["forward_batched"] / r.intervals, 3),
          ms(r.per_call["adjoint_batched"] / r.intervals, 3), f"{r.per_call['gain']:.2f}",
          f"{r.per_call['work_ratio']:.2f}"] for r in measured],
        title=f"Per call (serial reference: {reference}; gain = serial layer / (batched "
              f"fwd / m); W = one-shot's layer steps / serial's)")
    whole = [r for r in measured if r.status == "measured"]
    print_table(
        ["row", "torch fwd+bwd ms", "braidpy serial ms", "one-shot (2,2) ms",
         "braidpy serial / one-shot", "torch / one-shot", "loss diff"],
        [[r.name, ms(g.get("torch"), 3), ms(g["braidpy_serial"], 3), ms(g["oneshot"], 3),
          f"{g['braidpy_serial'] / g['oneshot']:.2f}",
          "-" if g.get("torch") is None else f"{g['torch'] / g['oneshot']:.2f}",
          "-" if g.get("loss_difference") is None else f"{g['loss_difference']:.1e}"]
         for r, g in ((r, r.gradient) for r in whole)],
        title="Whole gradient (min of repeats; loss diff: |torch - braidpy| / |braidpy|)")
    print(f"Regime map (rule: launch-bound if serial layer < {LAUNCH_FACTOR:g}x floor; "
          f"wins = measured whole gradient faster than serial, else predicted by gain > W):")
    for row in measured:
        r = row.regime
        print(f"  {row.name:22s} {'WINS ' if r['wins'] else 'loses'} ({r['basis']}): "
              f"{r['reason']}")
    for dtype in sorted({r.dtype for r in measured}):
        sel = [r for r in measured if r.dtype == dtype]
        s = growth_exponent([r.batch * r.channels ** 2 for r in sel],
                            [r.per_call["serial_layer"] for r in sel])
        meta.setdefault("growth_exponent", {})[dtype] = s
        if s is not None:
            print(f"  {dtype}: serial per-layer call ~ (batch C^2)^{s:.2f} over {len(sel)} rows "
                  f"(1: compute-bound throughout, 0: launch-bound throughout)")
    names = {s: ", ".join(r.name for r in rows if r.status == s) or "none"
             for s in ("per call only", "skipped")}
    print(f"rows: {len(whole)} measured in full; per call only: {names['per call only']}; "
          f"skipped: {names['skipped']}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--small", action="store_true", help="tiny rows (8x8, 2 channels, N 16)")
    p.add_argument("--dtypes", nargs="+", choices=["float32", "float64"])
    for key in ("channels", "layers", "batches"):
        p.add_argument(f"--{key}", type=int, nargs="+")
    p.add_argument("--image", type=int, help="image side (28; --small: 8)")
    p.add_argument("--rows", nargs="+", metavar="PATTERN",
                   help="rows DTYPE:C:N:BATCH to run, shell patterns ('float32:8:*:*')")
    p.add_argument("--cfactor", type=int, default=0, help="0 (default): 2**round(log2(N)/2)")
    p.add_argument("--backends", nargs="+",
                   help="braidpy conv backends (default: cuda-direct cudnn; cpu: numpy)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--budget", type=float, default=170.0,
                   help="seconds for the whole run, 0: no limit (170: ~3 minutes on an H200)")
    p.add_argument("--no-tf32", dest="tf32", action="store_false",
                   help="no TF32 for float32, on either side")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    for key, value in (SMALL if args.small else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.backends = args.backends or (["numpy"] if args.device == "cpu"
                                      else ["cuda-direct", "cudnn"])
    bad = [f"--{key} must be positive, got {v}" for key in ("channels", "layers", "batches")
           for v in getattr(args, key) if v < 1]
    bad += [words for wrong, words in (
        (args.image < 3, f"--image must be >= 3, got {args.image}"),
        (args.cfactor == 1 or args.cfactor < 0,
         f"--cfactor must be >= 2 (or 0: automatic), got {args.cfactor}"),
        (args.repeats < 1, f"--repeats must be >= 1, got {args.repeats}"),
        (not math.isfinite(args.budget) or args.budget < 0,
         f"--budget must be >= 0 seconds, got {args.budget}")) if wrong]
    bad += [f"--backends: {why}" for why in map(backend_problem, args.backends)
            if why and why.startswith("unknown")]
    if bad:
        p.error(bad[0])
    return args


def backend_problem(name):
    """Why braidpy's conv backend ``name`` cannot run here ("unknown ..."), or None."""
    from braidpy.nn.kernels import select_kernels

    try:
        select_kernels("conv", name)
    except ValueError as exc:
        return str(exc)
    return None


def main(argv=None):
    args = parse_args(argv)
    budget = Budget(args.budget)
    if args.device == "cpu":
        xp, where = np, "NumPy on the host"
    else:
        xp, where = array_module()
        if xp is np:
            raise SystemExit(f"bench_gpu_regimes: --device cuda needs CuPy and a GPU: "
                             f"{where.split('; ')[0]} (--device cpu --small runs the CPU form)")
    rows = make_rows(args)
    torch, why = torch_for(args.device)
    side = None if torch is None else TorchSide(torch, args.device, args.tf32)
    reference = "braidpy's serial loop" if side is None else f"PyTorch {torch.__version__}"
    print(f"{where}; serial reference: {reference}")
    dropped = {name: backend_problem(name) for name in args.backends}
    for name, problem in dropped.items():
        if problem:
            print(f"braidpy backend {name} dropped: {problem}")
    args.backends = [name for name, problem in dropped.items() if not problem]
    if not args.backends:
        raise SystemExit(f"bench_gpu_regimes: none of --backends {list(dropped)} can run here")
    meta = {"device": where, "reference": reference, "budget_seconds": args.budget,
            "launch_factor": LAUNCH_FACTOR, "tf32": args.tf32, "backends": args.backends,
            "repeats": args.repeats, "image": args.image, "torch_missing": why,
            "host": host_info(mpi=False)}
    if why:
        print(f"PyTorch columns skipped: {why}")
    else:
        meta["empty_launch"] = side.empty_launch(args.repeats)
        print(f"empty kernel launch (torch add_ on 1 element): {_us(meta['empty_launch'])}")
    per_call_pass(rows, xp, side, args, budget, meta)
    gradient_pass(rows, xp, side, args, budget, meta)
    report(rows, meta, reference)
    meta["elapsed_seconds"] = budget.elapsed()
    print(f"elapsed {meta['elapsed_seconds']:.1f} s (budget "
          f"{f'{args.budget:g} s' if args.budget else 'none'})")
    save(args, meta, rows)


if __name__ == "__main__":
    main()
