"""bench_gpu_regimes.py's rule and rows: the regime a row's numbers put it in, the rows,
the budget, and PyTorch's side (its best serial settings, the same network and weights)."""

from __future__ import annotations

import fnmatch
import importlib
import time
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from _harness import Budget as _Budget
from _harness import best

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


def Budget(seconds: float) -> _Budget:
    """--budget's seconds (0: no limit); estimates held against it times SAFETY."""
    return _Budget(seconds, safety=SAFETY)


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


def torch_pattern(torch, device, shape, dtype, c, scale=1.0):
    """:func:`pattern` as a torch tensor made on ``device``."""
    n = int(np.prod(shape))
    i = torch.arange(n, dtype=torch.float64, device=device)
    return (scale * torch.sin(c * i)).reshape(shape).to(getattr(torch, dtype))


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
