"""Regime map: braidpy's layer-parallel gradient on one GPU vs PyTorch's serial loop.

Network: the conv ResNet of bench_gpu.py --conv-net (paper 000's
style): a 3x3 conv opening of a 1-channel 28x28 image to C channels, N residual layers
u <- u + h tanh(conv(u, K_n) + b_n) (T = 2), a softmax classifier over 10 classes;
braidpy.nn.ResNet's weights (init_params), the same weights and batch copied into
PyTorch. Rows: dtype {float32, float64} x C {8, 32, 64} x N {256, 1024} x batch {1, 32,
128} (a row is named DTYPE:C:N:BATCH; --rows selects by pattern, e.g. 'float32:8:*:*').

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
import contextlib
import fnmatch
import importlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # siblings, when imported
from _report import print_table  # noqa: E402
from bench_gpu import array_module, best, sync  # noqa: E402

#: Serial per-layer call < LAUNCH_FACTOR x the launch floor: launch-bound.
LAUNCH_FACTOR = 2.0
TSTOP, NCLASSES, SEED = 2.0, 10, 20261201
#: Estimates are multiplied by this before they are held against the budget.
SAFETY = 1.5
#: Share of the budget the per-call pass may use (the rest is the whole gradients').
PER_CALL_SHARE = 0.5
#: Layer calls of one timed PyTorch loop (fewer when N is smaller).
LAYER_CALLS = 32
FULL = dict(dtypes=["float32", "float64"], channels=[8, 32, 64], layers=[256, 1024],
            batches=[1, 32, 128], image=28)
SMALL = dict(dtypes=["float64", "float32"], channels=[2], layers=[16], batches=[1, 4], image=8)


# ------------------------------------------------------------------ the rule


@dataclass
class Regime:
    """A row's place on the map: the bound, whether layer-parallel wins, and why."""

    bound: str  # "launch-bound" or "compute-bound"
    wins: bool
    basis: str  # "measured" (whole gradient) or "predicted" (per-call numbers)
    gain: float
    work_ratio: float
    reason: str


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def classify(layer_s: float, floor_s: float, batched_s: float, intervals: int,
             work_ratio: float, measured_speedup: Optional[float] = None) -> Regime:
    """The regime of a row from its measured quantities (the module docstring's rule).

    layer_s: the serial per-layer call; floor_s: the same calls on an empty image;
    batched_s: one batched forward call over ``intervals`` intervals; work_ratio: W;
    measured_speedup: serial whole gradient / one-shot's, where measured.

    Examples
    --------
    >>> classify(20e-6, 15e-6, 40e-6, 32, 2.5).bound
    'launch-bound'
    >>> r = classify(4e-3, 15e-6, 30 * 4e-3, 32, 2.5)
    >>> r.bound, r.wins, r.basis
    ('compute-bound', False, 'predicted')
    """
    for name, value in (("layer_s", layer_s), ("floor_s", floor_s), ("batched_s", batched_s),
                        ("work_ratio", work_ratio)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"classify: {name} must be a positive number, got {value!r}")
    if intervals < 1:
        raise ValueError(f"classify: intervals must be >= 1, got {intervals!r}")
    per_interval = batched_s / intervals
    gain = layer_s / per_interval
    launch = layer_s < LAUNCH_FACTOR * floor_s
    bound = "launch-bound" if launch else "compute-bound"
    predicted = gain > work_ratio
    call = (f"the serial per-layer call takes {_us(layer_s)}, {layer_s / floor_s:.1f}x the "
            f"{_us(floor_s)} of the same calls on an empty image "
            f"({'<' if launch else '>='} {LAUNCH_FACTOR:g}x)")
    batched = (f"one call over {intervals} intervals costs {_us(per_interval)} per interval, "
               f"a gain of {gain:.2f} over the serial call")
    if predicted:
        verdict = f"which pays for MGRIT's {work_ratio:.2f}x the layer steps"
    elif launch:
        verdict = (f"short of MGRIT's {work_ratio:.2f}x the layer steps: the batched call "
                   f"does not save enough launches")
    else:
        verdict = (f"short of MGRIT's {work_ratio:.2f}x the layer steps: the device is "
                   f"already busy with one layer, so the extra work cannot be hidden")
    reason = f"{bound}: {call}; {batched}, {verdict}"
    if measured_speedup is None:
        return Regime(bound, predicted, "predicted", gain, work_ratio, reason)
    wins = measured_speedup > 1.0
    reason += f"; measured whole gradient {measured_speedup:.2f}x serial"
    if wins != predicted:
        reason += (" (against the per-call prediction: the sequential coarse grid and the "
                   "core's own operations, outside the per-call numbers, decide)")
    return Regime(bound, wins, "measured", gain, work_ratio, reason)


def growth_exponent(works: Sequence[float], seconds: Sequence[float]) -> Optional[float]:
    """s in seconds ~ works**s (least squares on logs), None with < 2 distinct works.

    >>> round(growth_exponent([1, 10, 100], [2e-3, 2e-2, 2e-1]), 6)
    1.0
    """
    if len(set(works)) < 2:
        return None
    return float(np.polyfit(np.log(works), np.log(seconds), 1)[0])


# ------------------------------------------------------------------ rows and budget


@dataclass
class Row:
    dtype: str
    channels: int
    layers: int
    batch: int
    cfactor: int
    image: int
    name: str = ""
    status: str = "pending"  # "measured", "per call only", "skipped"
    skip_reason: Optional[str] = None
    per_call: Dict[str, Any] = field(default_factory=dict)
    gradient: Dict[str, Any] = field(default_factory=dict)
    regime: Optional[Dict[str, Any]] = None

    def __post_init__(self):
        self.name = f"{self.dtype}:{self.channels}:{self.layers}:{self.batch}"

    @property
    def intervals(self) -> int:
        return self.layers // self.cfactor

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def state_bytes(self) -> int:
        return self.batch * self.channels * self.image ** 2 * self.itemsize

    def per_call_work(self) -> float:
        """Relative cost of the per-call pass (for ordering and estimates)."""
        return self.batch * self.channels ** 2 * self.intervals * self.itemsize + 1e3


class Budget:
    """Seconds left of --budget (0: no limit) since the run started."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self, share: float = 1.0) -> float:
        return math.inf if not self.seconds else share * self.seconds - self.elapsed()

    def refuses(self, need: float, share: float = 1.0) -> Optional[str]:
        """Why a part estimated at ``need`` seconds may not start, or None."""
        left = self.left(share)
        if need * SAFETY <= left:
            return None
        return (f"estimated {need * SAFETY:.1f} s (with x{SAFETY:g} margin) > {max(left, 0):.1f}"
                f" s left of --budget {self.seconds:g} s"
                + (f" (the per-call pass may use {share:.0%})" if share < 1 else ""))


def auto_cfactor(layers: int) -> int:
    """The power of two nearest sqrt(N): the fewest sequential calls per iteration
    (cfactor batched calls plus N / cfactor coarse steps)."""
    return 2 ** round(math.log2(layers) / 2)


def make_rows(args) -> List[Row]:
    rows = [Row(dt, c, n, b, args.cfactor or auto_cfactor(n), args.image)
            for dt in args.dtypes for c in args.channels for n in args.layers
            for b in args.batches]
    if args.rows:
        for wanted in args.rows:
            if not any(fnmatch.fnmatchcase(r.name, wanted) for r in rows):
                raise SystemExit(f"bench_gpu_regimes: --rows {wanted!r} matches no row "
                                 f"(rows are DTYPE:C:N:BATCH, e.g. {rows[0].name})")
        rows = [r for r in rows if any(fnmatch.fnmatchcase(r.name, w) for w in args.rows)]
    for row in rows:
        if row.intervals < 2:
            raise SystemExit(f"bench_gpu_regimes: cfactor {row.cfactor} leaves fewer than 2 "
                             f"intervals of N = {row.layers} layers")
    return rows


# ------------------------------------------------------------------ the two sides


@contextlib.contextmanager
def braidpy_tf32(on: bool):
    """BRAIDPY_TF32 set for the block (read by braidpy at every cuDNN call), then restored."""
    from braidpy.nn.conv_backends import TF32_ENV

    old = os.environ.get(TF32_ENV)
    os.environ[TF32_ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(TF32_ENV, None)
        else:
            os.environ[TF32_ENV] = old


def pattern(xp, shape, dtype, c, scale=1.0):
    """Deterministic data made on the device (no host copy): scale sin(c i)."""
    n = int(np.prod(shape))
    return (scale * xp.sin(c * xp.arange(n, dtype=xp.float64))).reshape(shape).astype(dtype)


def torch_pattern(torch, device, shape, dtype, c, scale=1.0):
    """:func:`pattern` as a torch tensor made on ``device``."""
    n = int(np.prod(shape))
    i = torch.arange(n, dtype=torch.float64, device=device)
    return (scale * torch.sin(c * i)).reshape(shape).to(getattr(torch, dtype))


def repeated(fn, repeats, first):
    """min over repeats of fn, fewer repeats where one call is long (first: its time)."""
    return best(fn, max(1, min(repeats, int(5.0 / max(first, 1e-9)))))


def warm(fn):
    """(fn's value, seconds) of a warm-up call: plans, algorithms, pools."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def timed(fn, repeats):
    """min over repeats of fn after a warm-up call."""
    return repeated(fn, repeats, warm(fn)[1])


def braidpy_calls(xp, row, backend, repeats):
    """Seconds of braidpy's serial step and batched forward / adjoint over m intervals."""
    from braidpy.nn import ConvLayer

    m, C, H, dt = row.intervals, row.channels, row.image, row.dtype
    layer = ConvLayer(C, 3, "tanh", backend=backend, xp=xp)
    U = pattern(xp, (m, row.batch, C, H, H), dt, 0.37)
    Wt = pattern(xp, (m, row.batch, C, H, H), dt, 0.53)
    Ks = pattern(xp, (m, C, C, 3, 3), dt, 0.71, 1 / (3 * C ** 0.5))
    bs = pattern(xp, (m, C), dt, 0.11, 0.1)
    hs = xp.full(m, TSTOP / row.layers, dtype=dt)
    h = TSTOP / row.layers

    def call(fn):
        return lambda: (fn(), sync(xp))

    out = {"step": timed(call(lambda: layer.forward(U[0], Ks[0], bs[0], h)), repeats),
           "forward_batched": timed(call(lambda: layer.forward_batched(U, Ks, bs, hs)),
                                    repeats),
           "adjoint_batched": timed(call(lambda: layer.adjoint_batched(Wt, U, Ks, bs, hs)),
                                    repeats)}
    out["kernels"] = layer.backend
    return out


def torch_for(device):
    """(torch, None) where PyTorch imports and sees the device, else (None, why)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        return None, f"PyTorch is not installed ({type(exc).__name__}: {exc})"
    if device == "cuda" and not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() False)"
    return torch, None


class TorchSide:
    """PyTorch's serial loop with its best settings (module docstring)."""

    def __init__(self, torch, device, tf32):
        self.torch, self.device, self.tf32 = torch, device, tf32
        torch.backends.cudnn.benchmark = True
        if device == "cpu":
            torch.set_num_threads(1)  # as braidpy's NumPy side; no spinning thread pool

    def settings(self, dtype):
        on = self.tf32 and dtype == "float32"
        self.torch.backends.cudnn.allow_tf32 = on
        self.torch.backends.cuda.matmul.allow_tf32 = on
        return on

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def empty_launch(self, repeats, calls=200):
        """Seconds per launch of an in-place add on one element."""
        x = self.torch.zeros(1, device=self.device)

        def loop():
            for _ in range(calls):
                x.add_(1.0)
            self.sync()
        return timed(loop, repeats) / calls

    def layer(self, dtype, C, batch, side, calls, repeats, channels_last):
        """Seconds per serial layer call u + h tanh(conv2d(u, K, b)), no autograd."""
        torch, F = self.torch, self.torch.nn.functional
        u = torch_pattern(torch, self.device, (batch, C, side, side), dtype, 0.37)
        K = torch_pattern(torch, self.device, (C, C, 3, 3), dtype, 0.71, 1 / (3 * C ** 0.5))
        b = torch_pattern(torch, self.device, (C,), dtype, 0.11, 0.1)
        if channels_last:
            u, K = (a.contiguous(memory_format=torch.channels_last) for a in (u, K))
        h = TSTOP / calls

        def loop():
            with torch.no_grad():
                v = u
                for _ in range(calls):
                    v = v + h * torch.tanh(F.conv2d(v, K, b, padding=1))
            self.sync()
        return timed(loop, repeats) / calls

    def network(self, net, params, X, Cl, channels_last):
        return TorchNet(self, net, params, X, Cl, channels_last)

    def free(self):
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


class TorchNet:
    """braidpy's ResNet in PyTorch: the same weights (copied), one leaf per layer."""

    def __init__(self, side, net, params, X, Cl, channels_last):
        torch = side.torch
        self.side, self.hs = side, net.steps.tolist()

        def tensor(a, grad=True):
            t = torch.as_tensor(a, device=side.device).clone()
            if channels_last and t.dim() == 4:
                t = t.contiguous(memory_format=torch.channels_last)
            return t.requires_grad_(grad)

        v = net.views(params)
        self.open_K, self.open_b = tensor(v["open_K"]), tensor(v["open_b"])
        self.K = [tensor(v["K"][n]) for n in range(net.nlayers)]
        self.b = [tensor(v["b"][n]) for n in range(net.nlayers)]
        self.W, self.mu = tensor(v["W"]), tensor(v["mu"])
        self.X, self.C = tensor(X, False), tensor(Cl, False)
        self.leaves = [self.open_K, self.open_b, self.W, self.mu] + self.K + self.b

    def gradient(self) -> float:
        torch, F = self.side.torch, self.side.torch.nn.functional
        for p in self.leaves:
            p.grad = None
        u = torch.tanh(F.conv2d(self.X, self.open_K, self.open_b, padding=1))
        for K, b, h in zip(self.K, self.b, self.hs):
            u = u + h * torch.tanh(F.conv2d(u, K, b, padding=1))
        logits = u.flatten(1) @ self.W.T + self.mu
        loss = -(self.C * torch.log_softmax(logits, dim=1)).sum() / u.shape[0]
        loss.backward()
        self.side.sync()
        return float(loss.detach())


# ------------------------------------------------------------------ counts and estimates

_COUNTS: Dict[Any, Dict[str, int]] = {}


def oneshot_counts(layers: int, cfactor: int) -> Dict[str, int]:
    """Callback counts of a warm-started one-shot (2, 2) gradient of N layers, as training
    makes them (they depend on N, cfactor and the MGRIT settings only, so a width-1 dense
    net on the host counts them; the first, cold call makes fewer)."""
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    key = (layers, cfactor)
    if key not in _COUNTS:
        net = Net((1,), 2, width=1, nlayers=layers, tstop=TSTOP, activation="tanh")
        app = ResNetApp(net, net.init_params(seed=SEED), np.ones((1, 1)), np.eye(2)[:1])
        solver = GradientSolver(app, 0.0, TSTOP, layers, oneshot=(2, 2),
                                primal=dict(max_levels=2, cfactor=cfactor, nrelax=0))
        solver.evaluate()
        solver.evaluate()
        p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
        solver.close()
        _COUNTS[key] = {"primal_steps": p["step"], "primal_batched_calls": p["step_batch"],
                        "primal_batched_items": p["step_batch_items"],
                        "adjoint_steps": a["step"], "adjoint_batched_calls": a["step_batch"],
                        "adjoint_batched_items": a["step_batch_items"],
                        "core_operations": sum(p[k] + a[k] for k in ("clone", "sum", "norm"))}
    return _COUNTS[key]


def work_ratio(counts, layers):
    """W: one-shot's layer steps (forward and adjoint) over serial's 2N."""
    steps = (counts["primal_steps"] + counts["primal_batched_items"] + counts["adjoint_steps"]
             + counts["adjoint_batched_items"])
    return steps / (2 * layers)


def estimate_gradient(row, counts, calls, torch_layer):
    """Seconds of one whole-gradient row (warm-up and repeats of all three sides), from
    the per-call numbers: a backward costs about two forwards; the core's clone, sum and
    norm about 10 us each."""
    m, N = row.intervals, row.layers
    step, fwd, adj = calls["step"], calls["forward_batched"], calls["adjoint_batched"]
    oneshot = ((counts["primal_steps"] + 2 * counts["adjoint_steps"]) * step
               + counts["primal_batched_items"] / m * fwd
               + counts["adjoint_batched_items"] / m * adj + N / m * adj
               + 10e-6 * counts["core_operations"])
    serial = 3 * N * step + (3 * N * torch_layer if torch_layer else 0.0)
    return oneshot + serial


# ------------------------------------------------------------------ the passes


def per_call_pass(rows, xp, side, args, budget, meta):
    """Per-call numbers of each row that fits (cheapest first), else a skip line."""
    done: Dict[Any, float] = {}  # PyTorch's per-layer calls, per (dtype, C, batch)
    last = None  # (work, seconds) of the last row's pass
    for row in sorted(rows, key=Row.per_call_work):
        need = 0.2 if last is None else last[1] * row.per_call_work() / last[0]
        why = budget.refuses(need, PER_CALL_SHARE)
        if why:
            skip(row, f"per call: {why}")
            continue
        start = time.perf_counter()
        try:
            measure_calls(row, xp, side, args, done, meta)
        except Exception as exc:  # noqa: BLE001 - one row's failure is reported, not fatal
            skip(row, f"per call failed: {type(exc).__name__}: {exc}")
            free(xp)
            continue
        last = (row.per_call_work(), time.perf_counter() - start)
        row.status = "per call only"
        pc = row.per_call
        print(f"per call {row.name}: serial layer {_us(pc['serial_layer'])}, floor "
              f"{_us(pc['floor'])}, braidpy batched forward {_us(pc['forward_batched'])} over "
              f"{row.intervals} intervals ({kernels_label(pc)}), gain {pc['gain']:.2f}, W "
              f"{pc['work_ratio']:.2f} [{budget.elapsed():.0f} s]", flush=True)
        save(args, meta, rows)


def measure_calls(row, xp, side, args, done, meta):
    pc, tf32 = row.per_call, args.tf32 and row.dtype == "float32"
    calls = min(LAYER_CALLS, row.layers)
    if side is not None:
        pc["torch_tf32"] = side.settings(row.dtype)
        floor_key = ("floor", row.dtype)
        if floor_key not in done:
            done[floor_key] = side.layer(row.dtype, 1, 1, 1, calls, args.repeats, False)
        pc["floor"] = done[floor_key]
        key = (row.dtype, row.channels, row.batch)
        if key not in done:
            done[key] = attempts({fmt: (lambda fmt=fmt: side.layer(
                row.dtype, row.channels, row.batch, row.image, calls, args.repeats,
                fmt == "channels_last")) for fmt in ("nchw", "channels_last")}, row.name)
        formats, pc["torch_failed"] = done[key]
        pc["torch_layer_formats"] = formats
        pc["torch_format"] = min(formats, key=formats.get)
        pc["torch_layer"] = formats[pc["torch_format"]]
    pc["braidpy_tf32"] = tf32  # (it changes only cuDNN's calls)
    with braidpy_tf32(tf32):
        by_backend, pc["braidpy_failed"] = attempts({
            backend: (lambda backend=backend: braidpy_calls(xp, row, backend, args.repeats))
            for backend in args.backends}, row.name, lambda: free(xp))
    pc["braidpy_backends"] = by_backend
    pc["braidpy_backend"] = min(by_backend, key=lambda b: by_backend[b]["forward_batched"]
                                + by_backend[b]["adjoint_batched"])
    pc.update({k: by_backend[pc["braidpy_backend"]][k]
               for k in ("step", "forward_batched", "adjoint_batched")})
    if side is None:  # braidpy's own serial loop is the reference
        if ("floor", row.dtype) not in done:
            floor_row = Row(row.dtype, 1, row.layers, 1, row.cfactor, 1)
            done[("floor", row.dtype)] = braidpy_calls(xp, floor_row, pc["braidpy_backend"],
                                                       args.repeats)["step"]
        pc["floor"] = done[("floor", row.dtype)]
    pc["serial_layer"] = pc.get("torch_layer", pc["step"])
    counts = oneshot_counts(row.layers, row.cfactor)
    pc["work_ratio"] = work_ratio(counts, row.layers)
    pc["gain"] = pc["serial_layer"] / (pc["forward_batched"] / row.intervals)


def attempts(runs, label, after=lambda: None):
    """({name: value} of the runs that returned, {name: why} of those that raised); at
    least one must return (else the first failure is raised again). ``after`` runs after
    each (a failed layout or backend leaves the others to compare)."""
    values, failed, first = {}, {}, None
    for name, run in runs.items():
        try:
            values[name] = run()
        except Exception as exc:  # noqa: BLE001 - reported, the others still compared
            failed[name] = f"{type(exc).__name__}: {exc}"
            print(f"  ({label}: {name} failed: {failed[name]})", flush=True)
            first = first or exc
        after()
    if not values:
        raise first
    return values, failed


def gradient_pass(rows, xp, side, args, budget, meta):
    """Whole gradients of the rows with per-call numbers, cheapest estimate first."""
    ready = [r for r in rows if r.status == "per call only"]
    est = {r.name: estimate_gradient(r, oneshot_counts(r.layers, r.cfactor), r.per_call,
                                     r.per_call.get("torch_layer")) * (1 + args.repeats)
           for r in ready}
    for row in sorted(ready, key=lambda r: est[r.name]):
        row.gradient["estimate"] = est[row.name]
        free(xp)  # both libraries' caches back to the device before its free memory is read
        if side is not None:
            side.free()
        why = budget.refuses(est[row.name]) or memory_refuses(xp, row)
        if why:
            print(f"skipped {row.name} (whole gradient): {why}", flush=True)
            row.gradient["skipped"] = why
            continue
        try:
            measure_gradient(row, xp, side, args)
            row.status = "measured"
            g = row.gradient
            print(f"gradient {row.name}: serial {_us(g['serial'])}, one-shot (2,2) "
                  f"{_us(g['oneshot'])}: {g['speedup']:.2f}x [{budget.elapsed():.0f} s]",
                  flush=True)
        except Exception as exc:  # noqa: BLE001 - reported with the row
            row.gradient["skipped"] = f"failed: {type(exc).__name__}: {exc}"
            print(f"skipped {row.name} (whole gradient): {row.gradient['skipped']}", flush=True)
        save(args, meta, rows)


def memory_refuses(xp, row) -> Optional[str]:
    """Why the row's whole gradient would not fit the GPU's free memory, or None: braidpy
    keeps about 4 states per layer (primal, adjoint, work), PyTorch's autograd about 3."""
    if xp is np:
        return None
    need = 4 * (row.layers + 1) * row.state_bytes()
    free_bytes = xp.cuda.runtime.memGetInfo()[0]
    if need <= 0.85 * free_bytes:
        return None
    return f"needs ~{need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} GiB free"


def measure_gradient(row, xp, side, args):
    from braidpy.adjoint import GradientSolver
    from braidpy.nn import ResNet as Net
    from braidpy.nn import ResNetApp

    g, pc = row.gradient, row.per_call
    with braidpy_tf32(pc["braidpy_tf32"]):
        net = Net((1, row.image, row.image), NCLASSES, width=row.channels, nlayers=row.layers,
                  tstop=TSTOP, activation="tanh", device=None if xp is np else "cuda",
                  backend=pc["braidpy_backend"])
        rng = np.random.default_rng(SEED)
        params = net.init_params(seed=SEED).astype(row.dtype)
        X = net.placement.from_host(rng.standard_normal((row.batch, 1, row.image, row.image)),
                                    dtype=row.dtype)
        Cl = net.placement.from_host(np.eye(NCLASSES)[rng.integers(0, NCLASSES, row.batch)],
                                     dtype=row.dtype)
        if side is not None:
            side.settings(row.dtype)
            tnet = side.network(net, params, X, Cl, pc["torch_format"] == "channels_last")
            g["torch_loss"], first = warm(tnet.gradient)
            g["torch"] = repeated(tnet.gradient, args.repeats, first)
            del tnet
            side.free()

        def serial():
            loss, _ = net.loss_and_gradient(params, X, Cl)
            sync(xp)
            return loss

        g["braidpy_loss"], first = warm(serial)
        g["braidpy_serial"] = repeated(serial, args.repeats, first)
        app = ResNetApp(net, params, X, Cl)
        solver = GradientSolver(app, 0.0, net.tstop, row.layers, oneshot=(2, 2),
                                primal=dict(max_levels=2, cfactor=row.cfactor, nrelax=0))

        def oneshot():
            solver.evaluate()
            sync(xp)

        try:
            g["oneshot"] = timed(oneshot, args.repeats)
            p, a = solver.primal_core.counts(), solver.adjoint_core.counts()
        finally:
            solver.close()
    steps = p["step"] + p["step_batch_items"] + a["step"] + a["step_batch_items"]
    g["work_ratio"] = steps / (2 * row.layers)
    g["serial"] = g.get("torch", g["braidpy_serial"])
    g["speedup"] = g["serial"] / g["oneshot"]
    if "torch_loss" in g:
        g["loss_difference"] = abs(g["torch_loss"] - g["braidpy_loss"]) / abs(g["braidpy_loss"])


def free(xp):
    if xp is not np:
        xp.get_default_memory_pool().free_all_blocks()


def skip(row, why):
    row.status, row.skip_reason = "skipped", why
    print(f"skipped {row.name}: {why}", flush=True)


# ------------------------------------------------------------------ report


def kernels_label(pc):
    """The braidpy backend of a row, "+tf32" where its cuDNN convolutions used TF32."""
    tf32 = pc["braidpy_tf32"] and pc["braidpy_backend"].startswith("cudnn")
    return pc["braidpy_backend"] + ("+tf32" if tf32 else "")


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


# ------------------------------------------------------------------ main


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
            "repeats": args.repeats, "image": args.image, "torch_missing": why}
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


def save(args, meta, rows):
    """--json's file, rewritten after every row (a run cut short keeps what it measured)."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta,
                       "rows": [dict(asdict(r), intervals=r.intervals) for r in rows]},
                      f, indent=1, default=float)


if __name__ == "__main__":
    main()
