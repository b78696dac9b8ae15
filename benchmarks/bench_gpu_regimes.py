"""Where, on one GPU, does braidpy's layer-parallel gradient beat PyTorch's serial loop?

The regime map: launch- or compute-bound, layer-parallel wins or not, and why.

Network: the conv ResNet of bench_gpu.py --conv-net (in the style of Kirby et al.,
"Layer-parallel training with GPU concurrency of deep residual neural networks via
nonlinear multigrid", IEEE HPEC 2020): a 3x3 conv opening of a 1-channel 28x28 image
to C channels, N residual layers u <- u + h tanh(conv(u, K_n) + b_n) (T = 2), a
softmax classifier over 10 classes; braidpy.nn.ResNet's weights (init_params), the same
weights and batch copied into PyTorch. Rows: dtype {float32, float64} x C {8, 32, 64}
x N {256, 1024} x batch {1, 32, 128} (a row is named DTYPE:C:N:BATCH; --rows selects by
pattern, e.g. 'float32:8:*:*').

Per call (every row that fits the budget):
  * PyTorch, its best settings: torch.backends.cudnn.benchmark on, TF32 allowed for
    float32 (cuDNN and matmul), NCHW and channels_last both timed and the faster kept,
    warmed up; the per-layer call u + h tanh(conv2d(u, K, b)) from a loop of layer
    calls (no autograd), and the same calls on a 1-channel 1x1 image, batch 1: the
    launch floor of a layer. CUDA graphs are not tried.
  * braidpy: its serial per-layer step (ConvLayer.forward) and the batched step over the
    m = N / cfactor intervals that F-relaxation advances in one call (forward_batched,
    adjoint_batched), for each --backends (default "cuda-direct" and "cudnn"; the faster
    batched forward + adjoint runs the whole gradient). float32 rows run braidpy's cuDNN
    convolutions with TF32 (``BRAIDPY_TF32=1``, braidpy.nn.conv_backends.tf32_allowed):
    braidpy reads the variable at every call and keeps a TF32 plan apart from the FMA
    one (csrc/cuda/conv_plan.hpp), so this script sets os.environ around each float32
    row and restores it after; --no-tf32 turns TF32 off on both sides. The direct kernels
    never use tensor cores.
Whole gradient (rows in order of estimated cost, while the budget lasts): PyTorch's
serial forward + backward (autograd through the loop, one leaf tensor per layer as
nn.Conv2d holds them), braidpy's serial ``ResNet.loss_and_gradient`` and its one-shot
(2, 2) gradient (GradientSolver, 2 levels, cfactor, F-relaxation; built once and reused
as training does). The losses of PyTorch and braidpy are compared (same network).

Regime rule (:func:`classify`), printed with the numbers it used:
  * launch-bound if the serial per-layer call takes less than LAUNCH_FACTOR (2) times
    the launch floor, else compute-bound;
  * gain = serial per-layer call / (batched forward call / m): how much cheaper a layer
    step is inside a batched call; W = one-shot's layer steps (forward and adjoint, from
    the solver's counts) / serial's 2N;
  * layer-parallel wins when the measured whole gradient is faster than the serial one;
    where the whole gradient was not measured, it is predicted to win when gain > W.
The serial reference is PyTorch's (braidpy's own serial loop where torch is missing).

Timings: min over --repeats after a warm-up, synchronized, wall clock. --budget (seconds,
0: none) covers the whole run; rows that would overrun it are skipped, each with a line
saying which and why. --device cpu --small runs tiny rows with NumPy braidpy and CPU
PyTorch (the test's form). Needs CuPy and a GPU for --device cuda; says so otherwise.

Run: python benchmarks/bench_gpu_regimes.py [--budget S] [--rows PATTERN ...] [--json FILE]
     [--device cpu --small]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import asdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, when imported
from _harness import host_info, print_table  # noqa: E402
from _regimes import (FULL, LAUNCH_FACTOR, SAFETY, SMALL, Budget, Regime,  # noqa: E402,F401
                      Row, TorchSide, auto_cfactor, classify, growth_exponent, make_rows,
                      _us, torch_for)
from _regimes_measure import gradient_pass, kernels_label, per_call_pass, save  # noqa: E402
from _gpu import array_module  # noqa: E402


def ms(value):
    return "-" if value is None else f"{value * 1e3:.3f}"


def gradient_cells(name, g):
    """A whole-gradient table row ("-" where PyTorch is missing)."""
    torch = g.get("torch")
    diff = g.get("loss_difference")
    return [name, ms(torch), ms(g["braidpy_serial"]), ms(g["oneshot"]),
            f"{g['braidpy_serial'] / g['oneshot']:.2f}",
            "-" if torch is None else f"{torch / g['oneshot']:.2f}",
            "-" if diff is None else f"{diff:.1e}"]


def report(rows, meta, reference):
    measured = [r for r in rows if r.status != "skipped"]
    for row in measured:
        pc, g = row.per_call, row.gradient
        regime = classify(pc["serial_layer"], pc["floor"], pc["forward_batched"],
                          row.intervals, g.get("work_ratio", pc["work_ratio"]),
                          g.get("speedup"))
        row.regime = asdict(regime)
    print_table(
        ["row (dtype:C:N:batch)", "m", "serial layer ms", "floor ms", "torch fmt",
         "braidpy step ms", "kernels", "batched fwd/m ms", "batched adj/m ms", "gain", "W"],
        [[r.name, r.intervals, ms(r.per_call["serial_layer"]), ms(r.per_call["floor"]),
          r.per_call.get("torch_format", "-"), ms(r.per_call["step"]),
          kernels_label(r.per_call),
          ms(r.per_call["forward_batched"] / r.intervals),
          ms(r.per_call["adjoint_batched"] / r.intervals), f"{r.per_call['gain']:.2f}",
          f"{r.per_call['work_ratio']:.2f}"] for r in measured],
        title=f"Per call (serial reference: {reference}; gain = serial layer / (batched "
              f"fwd / m); W = one-shot's layer steps / serial's)")
    whole = [r for r in measured if r.status == "measured"]
    print_table(
        ["row", "torch fwd+bwd ms", "braidpy serial ms", "one-shot (2,2) ms",
         "braidpy serial / one-shot", "torch / one-shot", "loss diff"],
        [gradient_cells(r.name, r.gradient) for r in whole],
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
    skipped = [r.name for r in rows if r.status == "skipped"]
    partial = [r.name for r in rows if r.status == "per call only"]
    print(f"rows: {len(whole)} measured in full; per call only: {', '.join(partial) or 'none'}; "
          f"skipped: {', '.join(skipped) or 'none'}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--small", action="store_true",
                   help="tiny rows (8x8 images, 2 channels, N 16) for CI")
    p.add_argument("--dtypes", nargs="+", choices=["float32", "float64"])
    p.add_argument("--channels", type=int, nargs="+")
    p.add_argument("--layers", type=int, nargs="+")
    p.add_argument("--batches", type=int, nargs="+")
    p.add_argument("--image", type=int, help="image side (28; --small: 8)")
    p.add_argument("--rows", nargs="+", metavar="PATTERN",
                   help="rows DTYPE:C:N:BATCH to run, shell patterns ('float32:8:*:*')")
    p.add_argument("--cfactor", type=int, default=0, help="0 (default): 2**round(log2(N)/2)")
    p.add_argument("--backends", nargs="+",
                   help="braidpy conv backends (default: cuda-direct cudnn; cpu: numpy)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--budget", type=float, default=170.0,
                   help="seconds for the whole run, 0: no limit (default 170: about 3 minutes "
                        "with start-up on an H200)")
    p.add_argument("--no-tf32", dest="tf32", action="store_false",
                   help="no TF32 for float32, on either side")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    sizes = SMALL if args.small else FULL
    for key in ("dtypes", "channels", "layers", "batches", "image"):
        if getattr(args, key) is None:
            setattr(args, key, sizes[key])
    for key in ("channels", "layers", "batches"):
        bad = [v for v in getattr(args, key) if v < 1]
        if bad:
            p.error(f"--{key} must be positive, got {bad[0]}")
    if args.image < 3:
        p.error(f"--image must be >= 3, got {args.image}")
    if args.cfactor and args.cfactor < 2:
        p.error(f"--cfactor must be >= 2 (or 0: automatic), got {args.cfactor}")
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    if not math.isfinite(args.budget) or args.budget < 0:
        p.error(f"--budget must be >= 0 seconds, got {args.budget}")
    if args.backends is None:
        args.backends = ["numpy"] if args.device == "cpu" else ["cuda-direct", "cudnn"]
    for name in args.backends:
        why = backend_problem(name)
        if why and why.startswith("unknown"):
            p.error(f"--backends: {why}")
    return args


def device_module(args):
    """(xp, words) for --device, or SystemExit with the reason where CUDA is missing."""
    if args.device == "cpu":
        return np, "NumPy on the host"
    xp, where = array_module()
    if xp is np:
        raise SystemExit(f"bench_gpu_regimes: --device cuda needs CuPy and a GPU: "
                         f"{where.split('; ')[0]} (--device cpu --small runs the CPU form)")
    return xp, where


def backend_problem(name):
    """Why braidpy's conv backend ``name`` cannot run here ("unknown ..." for a name
    braidpy does not know), or None."""
    from braidpy.nn.kernels import select_kernels

    try:
        select_kernels("conv", name)
    except ValueError as exc:
        return str(exc)
    return None


def usable_backends(args):
    """--backends that can run here; the others are dropped with a line saying why."""
    kept = []
    for name in args.backends:
        why = backend_problem(name)
        if why:
            print(f"braidpy backend {name} dropped: {why}")
        else:
            kept.append(name)
    if not kept:
        raise SystemExit(f"bench_gpu_regimes: none of --backends {args.backends} can run here")
    args.backends = kept


def main(argv=None):
    args = parse_args(argv)
    budget = Budget(args.budget)
    xp, where = device_module(args)
    rows = make_rows(args)
    torch, why = torch_for(args.device)
    side = None if torch is None else TorchSide(torch, args.device, args.tf32)
    reference = "braidpy's serial loop" if side is None else f"PyTorch {torch.__version__}"
    print(f"{where}; serial reference: {reference}")
    usable_backends(args)
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
