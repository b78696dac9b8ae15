"""The calibration file: measured costs as versioned plain JSON, validated on loading.

``braidpy calibrate -o FILE`` writes one (:mod:`braidpy.perf.calibrate`);
``braidpy plan --calibration FILE`` reads it. The file is JSON only (never pickle), and
:func:`load_calibration` checks every field, naming the first bad one.

Layout (version 1)::

    {"format": "braidpy-calibration", "version": 1,
     "host": {...}, "device": "cpu",
     "callback_s": 4e-6,                  # core -> Python cost of one step callback
     "solve_s": 2e-4,                     # one Core.solve besides its steps
     "layers": [{"name": "dense-w8", "kind": "dense", "shape": [8],
                 "kernel": 1, "sweep": 1.0, "sweep_batched": 0.95,
                 "sweep_grad": 1.05,                  # optional: measured on the host
                 "costs": {
                     "fwd":  {"a": ..., "b": ..., "points": [[rows, samples, s], ...]},
                     "adj":  {...}, "grad": {...}, "vec": {...}},
                 "glue": {"a": ..., "b": ..., "points": [...]},   # optional: measured
                 "stack": {"a": ..., "b": ..., "points": []},      #   on the host
                 "fixed_parallel": {"a": ..., "b": ..., "points": []},  # 2+ ranks
                 "concurrency": [[1, 1.0], [2, 1.06], [4, 1.2]],   # 2+ ranks
                 "vec_factor": 2.1,                                #   on the host
                 "fixed": {"a": ..., "b": ..., "points": []},
                 "serial": {"a": ..., "b": ..., "points": [...]}}, ...],  # optional
     "network": {"p2p": {"alpha": s, "beta": s_per_byte, "source": "measured"},
                 "allreduce": {"alpha": ..., "beta": ..., "source": "assumed: ..."},
                 "nranks": 1},
     "software": {"message": {"alpha": ..., "beta": ..., "source": ...},   # optional
                  "agreement_s": ...}}

A call advancing ``rows`` states of ``samples`` samples each costs about ``a + b * rows
* samples`` seconds (a least-squares fit: ``a`` the fixed cost of a call, ``b`` the
cost per sample and state; the per-layer cost model of Dryden et al., "Improving
strong-scaling of CNN training by exploiting finer-grained parallelism", IEEE IPDPS
2019, sec. V-A, with batching as one more dimension of the work); the model
interpolates the measured points themselves, which also follow the cache
(:meth:`CostFit.seconds`).

Fields the loader does not know are ignored (such as the factors for ranks sharing cores
that files written before 2026-11-29 hold: ``oversubscription`` and its variants).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._limits import INT_MAX, LimitError, loads_json, write_atomically

__all__ = ["FORMAT", "VERSION", "KINDS", "CostFit", "LayerCosts", "Link", "Calibration",
           "CalibrationError", "calibration_from_json", "load_calibration",
           "save_calibration", "layer_name", "layer_flops"]

FORMAT = "braidpy-calibration"
VERSION = 1
#: What each layer cost fit measures: a step, a state adjoint, a parameter gradient,
#: and a vector operation (copy or axpy) of one state.
KINDS = ("fwd", "adj", "grad", "vec")


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message names the bad field."""


@dataclasses.dataclass(frozen=True)
class CostFit:
    """Seconds of one call, fitted as ``a + b * rows * samples`` to ``points``
    ((rows, samples, seconds), measured)."""

    a: float
    b: float
    points: Tuple[Tuple[int, int, float], ...] = ()

    def seconds(self, rows: int, samples: float) -> float:
        """Seconds of a call advancing ``rows`` states of ``samples`` samples: the
        measured points interpolated log-log, first over samples at each measured row
        count, then over rows (proportional beyond the largest, the smallest's value
        below it); the linear fit where no points were kept. Interpolating the points,
        not the line, follows the cache: the cost per sample grows with a call's size."""
        if not self.points:
            return self.a + self.b * float(rows) * float(samples)
        grid: Dict[int, Dict[float, List[float]]] = {}
        for r, n, t in self.points:
            grid.setdefault(int(r), {}).setdefault(float(n), []).append(t)
        rs = sorted(grid)
        at = [_interpolate({n: sum(ts) / len(ts) for n, ts in grid[r].items()},
                           float(samples)) for r in rs]
        return _interpolate(dict(zip(map(float, rs), at)), float(rows))

    @staticmethod
    def fit(points: Sequence[Tuple[int, int, float]]) -> "CostFit":
        """Least squares of seconds against rows * samples, weighted by 1 / seconds^2 so
        that small and large calls fit equally well in relative terms (a, b >= 0)."""
        xs = [float(r * s) for r, s, _ in points]
        ys = [float(t) for _, _, t in points]
        if not xs:
            raise ValueError("no points to fit")
        ws = [1.0 / max(y, 1e-12) ** 2 for y in ys]
        sw = sum(ws)
        mx = sum(w * x for w, x in zip(ws, xs)) / sw
        my = sum(w * y for w, y in zip(ws, ys)) / sw
        sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
        b = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx if sxx else 0.0
        if b < 0.0:
            b = 0.0
        a = my - b * mx
        if a < 0.0:  # refit through the origin
            a = 0.0
            b = sum(w * x * y for w, x, y in zip(ws, xs, ys)) / sum(w * x * x
                                                                  for w, x in zip(ws, xs))
        return CostFit(a, b, tuple((int(r), int(s), float(t)) for r, s, t in points))


def _interpolate(table: Mapping[float, float], x: float) -> float:
    """Log-log interpolation in {x: y}; proportional above the largest x, flat below
    the smallest."""
    xs = sorted(table)
    ys = [table[v] for v in xs]
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    for k in range(1, len(xs)):
        if x <= xs[k]:
            f = math.log(x / xs[k - 1]) / math.log(xs[k] / xs[k - 1])
            return math.exp(math.log(max(ys[k - 1], 1e-15)) * (1 - f) +
                            math.log(max(ys[k], 1e-15)) * f)
    return ys[-1]  # not reached


@dataclasses.dataclass(frozen=True)
class LayerCosts:
    """The fits of one layer type and shape, and what calling them inside a solve adds
    (:func:`braidpy.perf.calibrate.calibrate_sweep`, from two real gradients).

    ``sweep`` and ``sweep_batched`` multiply the fitted cost of plain and of batched
    calls, ``sweep_grad`` (where measured; else ``sweep_batched``) that of the batched
    parameter-gradient call at the end of a gradient, one call over all of a rank's
    layers, larger than any relaxation call. Measured on the host (calibrations with
    ``glue``), they are the calls' own cost in a solve against the bare calls' (states
    out of cache), and what lies between calls is modelled apart: ``glue`` seconds
    before each call (the core's and the adjoint wrapper's copies of its states;
    measured medians per state count and samples, interpolated as the calls' fits
    are), ``stack`` before the batched
    gradient call (the final adjoints and primal states stacked for it; ``a + b * rows
    * samples``; files without it price the stacking as glue), ``vec_factor`` on the
    vector work, and ``fixed`` seconds per gradient (results, objective and agreements
    between the solves; ``a + b * samples``), with ``fixed_parallel`` more where a
    gradient spans several ranks (measured when calibrating under ``mpiexec``: the
    Python-level collectives and their skew beyond the model). Without ``glue`` (files
    of before, and GPU calibrations) the two factors absorb all of it, and vector work
    takes ``sweep_batched``.

    ``concurrency`` says how much slower the calls run in a gradient across k ranks
    (each on its own core) than in one on a single rank: (k, factor) pairs, factor 1
    with one rank (measured under ``mpiexec`` for k up to its rank count: shared caches
    and memory bandwidth, the clock a processor holds with more cores busy, and what
    ranks polling for messages do to their neighbours;
    :func:`braidpy.perf.calibrate.calibrate_in_solve_parallel`). None: not measured
    (one rank, files of before, GPU calibrations), no slowdown. Ranks sharing cores
    are not measured (``braidpy calibrate`` with more ranks than cores measures on as
    many as there are cores).

    ``serial``: one layer's share of a serial gradient (the forward and the backward
    sweep of :meth:`braidpy.nn.ResNet.loss_and_gradient`, ``a + b * samples``), where
    the layer sweeps in one compiled call (dense layers on the host): serial
    propagation then pays neither the calls' Python nor the core's. None: serial
    propagation is priced by the calls, as MGRIT's are."""

    name: str
    kind: str  # "dense" or "conv"
    shape: Tuple[int, ...]  # (width,) or (channels, H, W)
    kernel: int
    costs: Mapping[str, CostFit]
    sweep: float = 1.0
    sweep_batched: float = 1.0
    glue: Optional[CostFit] = None
    vec_factor: Optional[float] = None
    fixed: Optional[CostFit] = None
    stack: Optional[CostFit] = None
    fixed_parallel: Optional[CostFit] = None
    concurrency: Optional[Tuple[Tuple[int, float], ...]] = None
    sweep_grad: Optional[float] = None
    serial: Optional[CostFit] = None

    def slowdown(self, busy: int) -> float:
        """The factor on this layer's step calls with ``busy`` ranks computing at
        once: ``concurrency`` interpolated linearly in the rank count, the largest
        measured count's factor beyond it, 1 where nothing was measured."""
        if not self.concurrency or busy <= 1:
            return 1.0
        table = {1: 1.0, **{int(k): float(f) for k, f in self.concurrency}}
        ks = sorted(table)
        if busy >= ks[-1]:
            return table[ks[-1]]
        for lo, hi in zip(ks, ks[1:]):
            if busy <= hi:
                return table[lo] + (table[hi] - table[lo]) * (busy - lo) / (hi - lo)
        return 1.0  # not reached

    @property
    def vec_scale(self) -> float:
        """The factor on vector work: ``vec_factor``, else ``sweep_batched``."""
        return self.sweep_batched if self.vec_factor is None else self.vec_factor

    @property
    def numbers(self) -> int:
        """Numbers in one sample's state of this layer."""
        return math.prod(self.shape)

    @property
    def flops(self) -> float:
        return layer_flops(self.kind, self.shape, self.kernel)


@dataclasses.dataclass(frozen=True)
class Link:
    """alpha-beta cost of a message of n bytes: alpha + beta * n."""

    alpha: float
    beta: float
    source: str  # "measured" or "assumed: why"

    def seconds(self, nbytes: float) -> float:
        return self.alpha + self.beta * nbytes


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Everything ``braidpy plan`` needs about the machine."""

    layers: Tuple[LayerCosts, ...]
    callback_s: float
    p2p: Link
    allreduce: Link
    solve_s: float = 0.0
    nranks: int = 1
    device: str = "cpu"
    host: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: braidpy's own cost of a state message beyond the network's (packing, the time
    #: communicator, unpacking) and of one Python-level agreement beyond a raw allreduce
    #: (:func:`braidpy.perf.calibrate.calibrate_software`); None / 0: not measured.
    message_software: Optional[Link] = None
    agreement_s: float = 0.0

    def layer(self, kind: str, shape: Sequence[int], kernel: int = 3
              ) -> Tuple[LayerCosts, float]:
        """The fits for a layer and the factor to scale their per-sample cost by: 1 for
        a calibrated shape, else the ratio of multiply-adds to the nearest calibrated
        layer of the same kind (a documented approximation)."""
        shape = tuple(int(s) for s in shape)
        same = [lc for lc in self.layers if lc.kind == kind]
        if not same:
            known = sorted({lc.kind for lc in self.layers})
            raise CalibrationError(f"the calibration has no {kind} layers (it has: "
                                   f"{', '.join(known) or 'none'}); run braidpy calibrate "
                                   f"--layer {kind}:...")
        for lc in same:
            if lc.shape == shape and (kind == "dense" or lc.kernel == kernel):
                return lc, 1.0
        want = layer_flops(kind, shape, kernel)
        near = min(same, key=lambda lc: abs(math.log(lc.flops / want)))
        return near, want / near.flops

    def to_json(self) -> Dict[str, Any]:
        return {
            "format": FORMAT, "version": VERSION, "device": self.device,
            "host": dict(self.host), "callback_s": self.callback_s,
            "solve_s": self.solve_s,
            "layers": [_layer_json(lc) for lc in self.layers],
            "network": {"p2p": dataclasses.asdict(self.p2p),
                        "allreduce": dataclasses.asdict(self.allreduce),
                        "nranks": self.nranks},
            **({"software": {"message": dataclasses.asdict(self.message_software),
                             "agreement_s": self.agreement_s}}
               if self.message_software is not None else {}),
        }


def _fit_json(f: CostFit) -> Dict[str, Any]:
    return {"a": f.a, "b": f.b, "points": [list(p) for p in f.points]}


def _layer_json(lc: LayerCosts) -> Dict[str, Any]:
    out: Dict[str, Any] = {"name": lc.name, "kind": lc.kind, "shape": list(lc.shape),
                           "kernel": lc.kernel, "sweep": lc.sweep,
                           "sweep_batched": lc.sweep_batched,
                           "costs": {k: _fit_json(f) for k, f in lc.costs.items()}}
    if lc.glue is not None:  # written only when measured: older readers see what they know
        out.update(glue=_fit_json(lc.glue), vec_factor=lc.vec_scale)
    if lc.fixed is not None:
        out.update(fixed=_fit_json(lc.fixed))
    if lc.stack is not None:
        out.update(stack=_fit_json(lc.stack))
    if lc.fixed_parallel is not None:
        out.update(fixed_parallel=_fit_json(lc.fixed_parallel))
    if lc.concurrency is not None:
        out.update(concurrency=[[k, f] for k, f in lc.concurrency])
    if lc.sweep_grad is not None:
        out.update(sweep_grad=lc.sweep_grad)
    if lc.serial is not None:
        out.update(serial=_fit_json(lc.serial))
    return out


def layer_name(kind: str, shape: Sequence[int], kernel: int) -> str:
    """'dense-w8' or 'conv-c8-28x28-k3'."""
    if kind == "dense":
        return f"dense-w{shape[0]}"
    return f"conv-c{shape[0]}-{shape[1]}x{shape[2]}-k{kernel}"


def layer_flops(kind: str, shape: Sequence[int], kernel: int) -> float:
    """Multiply-adds of one step for one sample (dense: width^2; conv: C^2 k^2 H W)."""
    if kind == "dense":
        return float(shape[0]) ** 2
    c, h, w = shape
    return float(c * c * kernel * kernel * h * w)


# ------------------------------------------------------------------ loading
def _field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, Mapping):
        raise CalibrationError(f"{where} must be an object, got {type(obj).__name__}")
    if key not in obj:
        raise CalibrationError(f"missing field {where}.{key}")
    return obj[key]


def _number(obj: Any, key: str, where: str, *, low: float = 0.0) -> float:
    v = _field(obj, key, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < low:
        raise CalibrationError(f"field {where}.{key} must be a finite number >= {low}, "
                               f"got {v!r}")
    return float(v)


def _link(obj: Any, where: str) -> Link:
    source = _field(obj, "source", where)
    if not isinstance(source, str):
        raise CalibrationError(f"field {where}.source must be a string, got {source!r}")
    return Link(_number(obj, "alpha", where), _number(obj, "beta", where), source)


def _fit(obj: Any, where: str) -> CostFit:
    pts = obj.get("points", []) if isinstance(obj, Mapping) else []
    if not isinstance(pts, list) or not all(
            isinstance(p, list) and len(p) == 3 and
            all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in p)
            for p in pts):
        raise CalibrationError(f"field {where}.points must be a list of [rows, samples, "
                               f"seconds]")
    for k, (rows, samples, seconds) in enumerate(pts):
        # A measured call takes time: a NaN, infinite, zero or negative point would be
        # interpolated into "nan s/gradient" or a negative prediction.
        for name, v, whole in (("rows", rows, True), ("samples", samples, True),
                               ("seconds", seconds, False)):
            if not math.isfinite(v) or not v > 0 or (whole and (v != int(v) or v > INT_MAX)):
                need = f"an integer in 1..{INT_MAX}" if whole else "a finite number > 0"
                raise CalibrationError(f"field {where}.points[{k}] {name} must be {need}, "
                                       f"got {v!r}")
    return CostFit(_number(obj, "a", where), _number(obj, "b", where),
                   tuple((int(r), int(s), float(t)) for r, s, t in pts))


def _concurrency(obj: Any, where: str) -> Tuple[Tuple[int, float], ...]:
    """[[busy ranks, factor], ...]: counts >= 1 increasing, factors finite and > 0."""
    ok = isinstance(obj, list) and bool(obj) and all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and
        not isinstance(p[0], bool) and p[0] >= 1 and isinstance(p[1], (int, float)) and
        not isinstance(p[1], bool) and math.isfinite(p[1]) and p[1] > 0 for p in obj)
    if not ok or any(a[0] >= b[0] for a, b in zip(obj, obj[1:])):
        raise CalibrationError(f"field {where} must be a list of [busy ranks, factor] "
                               f"with increasing busy ranks >= 1 and factors > 0, got "
                               f"{obj!r}")
    return tuple((int(k), float(f)) for k, f in obj)


def calibration_from_json(data: Any) -> Calibration:
    """A :class:`Calibration` from parsed JSON, or CalibrationError naming the field."""
    fmt = _field(data, "format", "calibration")
    if fmt != FORMAT:
        raise CalibrationError(f"field calibration.format is {fmt!r}, expected {FORMAT!r}")
    version = _field(data, "version", "calibration")
    if version != VERSION:
        raise CalibrationError(f"field calibration.version is {version!r}; this braidpy "
                               f"reads version {VERSION} (run braidpy calibrate again)")
    layers_raw = _field(data, "layers", "calibration")
    if not isinstance(layers_raw, list) or not layers_raw:
        raise CalibrationError("field calibration.layers must be a non-empty list")
    layers: List[LayerCosts] = []
    for i, lr in enumerate(layers_raw):
        where = f"layers[{i}]"
        kind = _field(lr, "kind", where)
        if kind not in ("dense", "conv"):
            raise CalibrationError(f"field {where}.kind must be 'dense' or 'conv', got "
                                   f"{kind!r}")
        shape = _field(lr, "shape", where)
        need = 1 if kind == "dense" else 3
        if not isinstance(shape, list) or len(shape) != need or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
            raise CalibrationError(f"field {where}.shape must be {need} positive ints, got "
                                   f"{shape!r}")
        kernel = _field(lr, "kernel", where)
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1:
            raise CalibrationError(f"field {where}.kernel must be an int >= 1, got "
                                   f"{kernel!r}")
        costs_raw = _field(lr, "costs", where)
        costs = {k: _fit(_field(costs_raw, k, f"{where}.costs"), f"{where}.costs.{k}")
                 for k in KINDS}
        name = lr.get("name", layer_name(kind, shape, kernel))
        sweep, sweep_batched = [_number(lr, k, where, low=1e-3) if k in lr else 1.0
                                for k in ("sweep", "sweep_batched")]
        glue = _fit(lr["glue"], f"{where}.glue") if "glue" in lr else None
        vec_factor = _number(lr, "vec_factor", where, low=1e-3) if "vec_factor" in lr \
            else None
        fixed = _fit(lr["fixed"], f"{where}.fixed") if "fixed" in lr else None
        stack = _fit(lr["stack"], f"{where}.stack") if "stack" in lr else None
        parallel = _fit(lr["fixed_parallel"], f"{where}.fixed_parallel") \
            if "fixed_parallel" in lr else None
        concurrency = _concurrency(lr["concurrency"], f"{where}.concurrency") \
            if "concurrency" in lr else None
        sweep_grad = _number(lr, "sweep_grad", where, low=1e-3) if "sweep_grad" in lr \
            else None
        serial = _fit(lr["serial"], f"{where}.serial") if "serial" in lr else None
        layers.append(LayerCosts(str(name), kind, tuple(shape), kernel, costs, sweep,
                                 sweep_batched, glue, vec_factor, fixed, stack, parallel,
                                 concurrency, sweep_grad, serial))
    net = _field(data, "network", "calibration")
    nranks = _field(net, "nranks", "network")
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise CalibrationError(f"field network.nranks must be an int >= 1, got {nranks!r}")
    device = data.get("device", "cpu")
    host = data.get("host", {})
    software = data.get("software")
    message, agreement = None, 0.0
    if software is not None:
        message = _link(_field(software, "message", "software"), "software.message")
        agreement = _number(software, "agreement_s", "software")
    return Calibration(tuple(layers), _number(data, "callback_s", "calibration"),
                       _link(_field(net, "p2p", "network"), "network.p2p"),
                       _link(_field(net, "allreduce", "network"), "network.allreduce"),
                       _number(data, "solve_s", "calibration"), nranks, str(device),
                       host if isinstance(host, Mapping) else {}, message, agreement)


def load_calibration(path: str) -> Calibration:
    """Read and validate a calibration file (JSON), naming the bad field or the file.

    >>> load_calibration("/no/such/file.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    braidpy.perf.calibration.CalibrationError: calibration file '/no/such/file.json' not found ...
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise CalibrationError(f"calibration file {path!r} not found (write one with "
                               f"braidpy calibrate -o FILE)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"calibration file {path!r} cannot be read: {exc}") from None
    try:
        # NaN/Infinity tokens parse here, to be refused by the field that holds them.
        data = loads_json(text, f"calibration file {path!r}", constants=True)
    except LimitError as exc:
        raise CalibrationError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise CalibrationError(f"calibration file {path!r} is not JSON: {exc}") from None
    try:
        return calibration_from_json(data)
    except CalibrationError as exc:
        raise CalibrationError(f"calibration file {path!r}: {exc}") from None


def save_calibration(cal: Calibration, path: str, *, what: str = "calibration file") -> None:
    """Write ``cal`` as JSON (what :func:`load_calibration` reads), atomically, to a
    regular file (a device, folder or symbolic link raises
    :class:`braidpy._limits.OutputPathError`)."""
    text = json.dumps(cal.to_json(), indent=1) + "\n"
    write_atomically(path, what, lambda f: f.write(text.encode("utf-8")),
                     make_folder=False)

