"""Measure the costs of the performance model on this machine (``braidpy calibrate``).

Per layer type and shape: the step, state-adjoint and parameter-gradient calls of
:mod:`braidpy.nn`'s layers, plain and batched (rows = states per call), at a few sample
counts, each the fastest of a few repeats (:func:`time_call`: on the host the CPU
time of a loop of calls, on a device the wall time), fitted as ``a + b * rows * samples``
(:class:`braidpy.perf.calibration.CostFit`); the cost of one step callback through the
compiled core; what calling a layer from inside a solve adds, from two real gradients:
on the host their step calls recorded and paired with the model's
(:func:`calibrate_in_solve`: the calls' own factors, the copies between calls, the
stacking for the gradient call, vector work, fixed costs per gradient; under
``mpiexec`` also what the same gradient across the ranks adds and how much slower its
calls run with 2, 4, ... ranks busy, :func:`calibrate_in_solve_parallel`; the ranks
not measuring sleep meanwhile, :func:`quiet_barrier`; with more ranks than cores, on
as many ranks as there are cores: ranks sharing cores are not measured, nor modelled
beyond compute x ranks / cores), on a device the factors by which
whole gradients exceed what the fits predict (:func:`calibrate_sweep`); and the
alpha-beta parameters of point-to-point messages (ping-pong) and of allreduce when run
under ``mpiexec`` with two or more ranks. With one rank there is no network to measure:
the file then carries documented defaults marked ``"assumed: ..."`` (shared-memory MPI
on one node), which ``braidpy plan`` reports.
Everything is measured with glibc's allocator keeping freed memory
(:mod:`braidpy.perf.allocator`, noted in the file's ``host.allocator``): otherwise
large batched calls pay page faults whose number depends on the process's history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import platform
import time
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .._device import HOST, Placement, placement
from .allocator import keep_freed_memory
from .calibration import Calibration, CostFit, LayerCosts, Link, layer_name

__all__ = ["DEFAULT_LAYERS", "ASSUMED_P2P", "ASSUMED_ALLREDUCE", "parse_layer",
           "DEFAULT_SAMPLES", "time_call", "calibrate_layer", "calibrate_callback",
           "calibrate_sweep", "calibrate_serial", "calibrate_in_solve",
           "calibrate_in_solve_parallel",
           "quiet_barrier", "alone", "busy_ranks", "calibrate_network",
           "calibrate_software", "calibrate_communication",
           "calibrate", "calibrate_follower"]

#: Layers measured by default: Peaks' dense width 8 (Günther et al., "Layer-parallel
#: training of deep residual neural networks", SIAM J. Math. Data Sci. 2, 2020, sec.
#: 4.1), the digits preset's conv net and an MNIST-sized conv layer.
DEFAULT_LAYERS = ("dense:8", "dense:32", "conv:4x8x8:3", "conv:8x28x28:3")
#: Samples per state measured by default (capped per layer, see calibrate_layer).
DEFAULT_SAMPLES = (16, 256, 4096)

#: Used when no second rank exists to measure against: intra-node shared-memory MPI
#: (MPICH's typical small-message latency and memory-copy bandwidth).
ASSUMED_P2P = Link(2e-6, 1.0 / 5e9, "assumed: one rank, no network measured "
                                    "(shared-memory MPI: 2 us, 5 GB/s)")
ASSUMED_ALLREDUCE = Link(4e-6, 1.0 / 5e9, "assumed: one rank, no network measured "
                                          "(shared-memory MPI: 4 us, 5 GB/s)")


def parse_layer(text: str) -> Tuple[str, Tuple[int, ...], int]:
    """'dense:WIDTH' or 'conv:CxHxW[:KERNEL]' as (kind, shape, kernel).

    >>> parse_layer("conv:8x28x28:3")
    ('conv', (8, 28, 28), 3)
    >>> parse_layer("dense:0")
    Traceback (most recent call last):
    ...
    ValueError: layer 'dense:0': sizes must be positive ints (dense:WIDTH or conv:CxHxW[:K])
    """
    parts = text.split(":")
    bad = ValueError(f"layer {text!r}: sizes must be positive ints (dense:WIDTH or "
                     f"conv:CxHxW[:K])")
    try:
        if parts[0] == "dense" and len(parts) == 2:
            shape: Tuple[int, ...] = (int(parts[1]),)
            kernel = 1
        elif parts[0] == "conv" and len(parts) in (2, 3):
            shape = tuple(int(x) for x in parts[1].split("x"))
            kernel = int(parts[2]) if len(parts) == 3 else 3
            if len(shape) != 3:
                raise bad
        else:
            raise ValueError(f"layer {text!r}: expected dense:WIDTH or conv:CxHxW[:K]")
    except ValueError as exc:
        if exc is bad or str(exc).startswith("layer"):
            raise
        raise bad from None
    if min(shape) < 1 or kernel < 1:
        raise bad
    return parts[0], shape, kernel


def time_call(fn: Callable[[], Any], repeats: int = 5, min_time: float = 5e-3,
              where: Placement = HOST) -> float:
    """Seconds of one call of ``fn``: the fastest of ``repeats`` repeats, each looping
    until min_time passes. On the host CPU time, because on a shared machine wall time
    carries other processes' time slices, which are no cost of the call; on a device
    (``where``) wall time up to the end of the queued work, which is what it costs."""
    if where.is_host:
        clock: Callable[[], float] = time.process_time
        done: Callable[[], None] = lambda: None  # noqa: E731
    else:
        clock, done = time.perf_counter, where.synchronize
    fn()  # warm up
    done()
    out = []
    for _ in range(repeats):
        n, start = 0, clock()
        while True:
            fn()
            n += 1
            if n & 7 == 0 or clock() - start >= min_time:  # a device: sync now and then
                done()
                elapsed = clock() - start
                if elapsed >= min_time:
                    break
        out.append(elapsed / n)
    return min(out)


def _layer_net(kind: str, shape: Sequence[int], kernel: int, nlayers: int,
               where: Placement = HOST) -> Tuple[Any, Dict[str, Any]]:
    """A ResNet of ``nlayers`` layers of this kind and shape on ``where`` and its
    parameter views (the calls measured are its layer's)."""
    from ..nn import ResNet

    shape = tuple(int(s) for s in shape)
    input_shape: Tuple[int, ...] = (shape[0],) if kind == "dense" else shape
    net = ResNet(input_shape, 2, width=shape[0], nlayers=nlayers, kernel=kernel,
                 device=None if where.is_host else where)
    return net, net.views(net.init_params(seed=7, scale=0.1))


def _input_pool(rng: np.random.Generator, shape: Tuple[int, ...], where: Placement = HOST
                ) -> Callable[[], Tuple[Any, Any]]:
    """A function giving pairs of random arrays of ``shape`` from a pool of up to 8 (16
    MiB at most), in turn: in a sweep every call reads states it has not touched for a
    while, so a hot cache would flatter the cost."""
    npool = int(min(8, max(2, (16 << 20) // (8 * 2 * int(np.prod(shape))))))
    pool = [(where.from_host(rng.standard_normal(shape)),
             where.from_host(rng.standard_normal(shape))) for _ in range(npool)]
    turn = [0]

    def nxt() -> Tuple[Any, Any]:
        turn[0] = (turn[0] + 1) % npool
        return pool[turn[0]]
    return nxt


def calibrate_layer(kind: str, shape: Sequence[int], kernel: int = 3, *,
                    samples: Sequence[int] = DEFAULT_SAMPLES, rows: Sequence[int] = (1, 4, 16),
                    repeats: int = 5, min_time: float = 5e-3,
                    where: Placement = HOST) -> LayerCosts:
    """Fits of the step, adjoint, gradient and vector costs of one layer, with its
    numbers on ``where`` (the host, or a device: then timed by the wall clock)."""
    shape = tuple(int(s) for s in shape)
    net, v = _layer_net(kind, shape, kernel, max(rows), where)
    layer = net.layer
    rng = np.random.default_rng(11)
    # Keep the largest call near 4 M numbers: big enough to see the per-sample cost.
    per = max(rows) * int(np.prod(net.state_shape))
    samples = sorted({max(1, min(int(s), 4_000_000 // per)) for s in samples})
    pts: Dict[str, List[Tuple[int, int, float]]] = {k: [] for k in ("fwd", "adj", "grad",
                                                                   "vec")}
    h = 0.1
    for s in samples:
        state = (s,) + net.state_shape
        for r in rows:
            nxt = _input_pool(rng, state if r == 1 else (r,) + state, where)
            K: Any
            b: Any
            hh: Any
            fwd: Callable[..., Any]
            adj: Callable[..., Any]
            grad: Callable[..., Any]
            if r == 1:
                K, b, hh = v["K"][0, ...], v["b"][0, ...], h
                fwd, adj, grad = layer.forward, layer.adjoint, layer.gradient
            else:
                K, b, hh = v["K"][:r, ...], v["b"][:r, ...], where.from_host(np.full(r, h))
                fwd, adj, grad = (layer.forward_batched, layer.adjoint_batched,
                                  layer.gradient_batched)

            def call_fwd(fwd=fwd, K=K, b=b, hh=hh) -> None:
                fwd(nxt()[0], K, b, hh)

            def call_adj(adj=adj, K=K, b=b, hh=hh) -> None:
                u, w = nxt()
                adj(w, u, K, b, hh)

            def call_grad(grad=grad, K=K, b=b, hh=hh) -> None:
                u, w = nxt()
                grad(w, u, K, b, hh)
            calls = {"fwd": call_fwd, "adj": call_adj, "grad": call_grad}
            for name, fn in calls.items():
                pts[name].append((r, s, time_call(fn, repeats, min_time, where)))
            if r == 1:
                # A copy plus an axpy into a new array: what the core does per point
                # besides stepping (clone, sum).
                def vec() -> None:
                    u, w = nxt()
                    tmp = where.copy(u)
                    tmp *= 0.5
                    tmp += w
                pts["vec"].append((1, s, time_call(vec, repeats, min_time, where) / 2))
    costs = {k: CostFit.fit(p) for k, p in pts.items()}
    return LayerCosts(layer_name(kind, shape, kernel), kind, shape, kernel, costs)


def quiet_barrier(comm: Any, poll: float = 2e-3) -> None:
    """A barrier whose waiting ranks sleep instead of polling: MPI's blocking waits spin
    a core, which slows the measured rank beside them (a busy core's sibling thread, a
    processor's clock with more cores busy). Collective; nothing without ``comm``."""
    if comm is None or comm.Get_size() < 2:
        return
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll)


@contextlib.contextmanager
def alone(comm: Any, what: str) -> Iterator[None]:
    """Rank 0 measures inside this block while the other ranks, in the same block with
    nothing to do, sleep (:func:`quiet_barrier`); then every rank agrees on failures
    (``agreed``): a failure of rank 0's measurement stops every rank."""
    from ..parallel.agree import agreed

    with agreed(comm, what):
        try:
            yield
        finally:
            quiet_barrier(comm)


def calibrate_callback(ntime: int = 2000, repeats: int = 5) -> Tuple[float, float]:
    """(seconds the compiled core spends around one Python step callback, seconds of
    one :meth:`braidpy.Core.solve` besides its steps): sequential solves of a step that
    only reads its layer's weights, of ``ntime`` steps and of one."""
    from .. import App, Core

    weights = np.zeros((ntime + 1, 1))

    class Nothing(App):  # reads its layer's weights as ResNetApp.step does
        def init(self, t):
            return np.zeros(1)

        def step(self, u, t0, t1, status):
            weights[status.fine_index, ...]
            return None

    def per_solve(n: int) -> float:
        core = Core(Nothing(), 0.0, 1.0, n, options={"max_levels": 1})
        out = []
        core.solve()
        for _ in range(repeats):
            start = time.process_time()
            core.solve()
            out.append(time.process_time() - start)
        core.close()
        return min(out)

    long, short = per_solve(ntime), per_solve(1)
    callback = max(long - short, 0.0) / (ntime - 1)
    return callback, max(short - callback, 0.0)


def calibrate_serial(kind: str, shape: Sequence[int], kernel: int = 3, *,
                     samples: Sequence[int] = DEFAULT_SAMPLES, repeats: int = 5,
                     min_time: float = 5e-3, layers: Tuple[int, int] = (8, 264)
                     ) -> Optional[CostFit]:
    """One layer's share of a serial gradient (:meth:`braidpy.nn.ResNet.loss_and_gradient`,
    what serial training runs) at each sample count, fitted ``a + b * samples``: the
    difference of whole gradients with ``layers`` residual layers over the difference
    in layers (the opening and the classifier cancel; 264 layers of 4096 samples of
    width 8 hold 69 MB of states, past the caches, as deep networks' do: with 40 the
    layer cost 30 % less here). On the host and only where the
    layer sweeps in one compiled call (None elsewhere: serial propagation is then priced
    by the calls, as MGRIT's are)."""
    from ..nn import ResNet

    shape = tuple(int(x) for x in shape)
    input_shape = shape if kind == "conv" else (shape[0],)
    rng = np.random.default_rng(13)
    points = []
    for n in sorted({int(x) for x in samples}):
        X = rng.standard_normal((n,) + tuple(input_shape))
        C = np.eye(2)[rng.integers(0, 2, n)]
        seconds = []
        for nlayers in layers:
            net = ResNet(input_shape, 2, width=shape[0], nlayers=nlayers, kernel=kernel)
            params = net.init_params(seed=5, scale=0.1)
            v = net.views(params)
            if not net.layer.sweeps(net.open(params, X), v["K"], v["b"]):
                return None
            seconds.append(time_call(partial(net.loss_and_gradient, params, X, C), repeats,
                                     min_time))
        per_layer = (seconds[1] - seconds[0]) / (layers[1] - layers[0])
        points.append((1, n, max(per_layer, 1e-9)))
    return CostFit.fit(points)


def calibrate_sweep(cal: Calibration, layer: LayerCosts, samples: int, nlayers: int = 32,
                    repeats: int = 3, where: Placement = HOST) -> Tuple[float, float]:
    """(sweep, sweep_batched) of ``layer``: the factors by which two real gradients of a
    ``nlayers``-layer ResNet of this layer exceed what the fits predict — a serial one
    (one level: plain calls forward and back, then the gradients in one batched call)
    and a two-level one-shot (1, 1) with cf 4 (batched relaxation) — solved for the
    factor of plain calls and the factor of batched calls and vector work."""
    from ..adjoint import GradientSolver
    from ..nn import ResNet, ResNetApp
    from .model import NetSpec, Strategy, predict
    from .schedule import Cycle

    shape = layer.shape
    input_shape = shape if layer.kind == "conv" else (shape[0],)
    net = ResNet(input_shape, 2, width=shape[0], nlayers=nlayers, kernel=layer.kernel,
                 device=None if where.is_host else where)
    params = net.init_params(seed=5, scale=0.1)
    rng = np.random.default_rng(9)
    X = where.from_host(rng.standard_normal((samples,) + tuple(input_shape)))
    C = where.from_host(np.eye(2)[rng.integers(0, 2, samples)])
    clock = time.process_time if where.is_host else time.perf_counter
    spec = NetSpec(layer.kind, shape, nlayers, samples, kernel=layer.kernel,
                   features=int(np.prod(input_shape)), nclasses=2)

    def run(levels: int) -> Tuple[float, float, float, float]:
        """Measured seconds (CPU; wall on a device) and the predicted parts (plain,
        batched, the rest)."""
        app = ResNetApp(net, params, X, C)
        solver = GradientSolver(app, 0.0, net.tstop, nlayers, oneshot=(1, 1),
                                primal={"max_levels": levels, "cfactor": 4})
        solver.evaluate()
        where.synchronize()
        out = []
        for _ in range(repeats):
            start = clock()
            solver.evaluate()
            where.synchronize()
            out.append(clock() - start)
        solver.close()
        s = Strategy(1, 1, 1, Cycle(ntime=nlayers, max_levels=levels, cfactor=4,
                                    batched=True), (1, 1))

        def with_factors(single: float, batched: float) -> float:
            lc = dataclasses.replace(layer, sweep=single, sweep_batched=batched)
            return predict(spec, s, dataclasses.replace(cal, layers=(lc,))).seconds
        rest = with_factors(0.0, 0.0)
        return (min(out), with_factors(1.0, 0.0) - rest, with_factors(0.0, 1.0) - rest,
                rest)

    m1, s1, b1, r1 = run(1)
    m2, s2, b2, r2 = run(2)
    det = s1 * b2 - s2 * b1
    if abs(det) < 1e-12 * max(s1 * b2, 1e-300):
        single = batched = (m1 + m2 - r1 - r2) / (s1 + b1 + s2 + b2)
    else:  # Cramer's rule
        single = ((m1 - r1) * b2 - (m2 - r2) * b1) / det
        batched = (s1 * (m2 - r2) - s2 * (m1 - r1)) / det
    # Keep them physical: noise on a shared machine can push one out of range.
    return float(np.clip(single, 0.25, 8.0)), float(np.clip(batched, 0.25, 8.0))


#: Bounds on the factors measured inside a solve: on a shared machine even a median
#: of a few ratios can leave any physical range.
_FACTOR_RANGE = (0.25, 8.0)


def _median_factor(pairs: Sequence[Tuple[float, float]]) -> float:
    """The median of measured / modelled over (measured, modelled) pairs, each weighted
    by its modelled seconds (the calls that make the time count the most), kept in a
    physical range (1: none measured)."""
    pairs = [(m / p, p) for m, p in pairs if p > 0]
    if not pairs:
        return 1.0
    pairs.sort()
    half, acc = sum(w for _, w in pairs) / 2, 0.0
    for ratio, weight in pairs:
        acc += weight
        if acc >= half:
            return float(np.clip(ratio, *_FACTOR_RANGE))
    return float(np.clip(pairs[-1][0], *_FACTOR_RANGE))  # not reached


def calibrate_in_solve(cal: Calibration, layer: LayerCosts, samples: Sequence[int],
                       nlayers: int = 32, repeats: int = 5) -> LayerCosts:
    """``layer`` with what calling it inside a solve costs, measured on the host: real
    gradients of a ``nlayers``-layer ResNet of this layer (serial, and two levels
    one-shot (1, 1) cf 4 with batched relaxation; at each of ``samples``) record every
    step call (:func:`braidpy.perf.timeline.recording`; the fastest of ``repeats``
    gradients), and the calls are paired with the model's
    (:func:`braidpy.perf.timeline.paired`).

    * ``sweep``, ``sweep_batched``, ``sweep_grad``: the plain calls', the batched
      relaxation calls' and the batched gradient call's own time against the bare
      calls' fits (states out of cache), the median over the calls weighted by their
      modelled time;
    * ``glue``: the gaps between calls where the model has no operation — the core's
      and the adjoint wrapper's copies of the next call's states — their median per
      state count and samples of that call (the model interpolates them: a line ``a + b
      * rows * samples`` through them missed by half, 4 µs for one state of 1000
      samples against 62 µs for eight);
    * ``stack``: the gap before the batched gradient call beyond the model's operations
      there (the final adjoints and the primal states stacked for it), fitted as ``a +
      b * rows * samples`` with rows = 2 states per layer;
    * ``vec_factor``: the gaps holding vector work only, less their glue, against the
      fitted vector costs (the median over those gaps, weighted by their modelled time);
    * ``fixed``: the rest of a gradient (the stretches at the solves' ends and starts,
      the objective) beyond what the model with the above has there, per gradient
      (mean of the two), fitted as ``a + b * samples``.
    """
    from ..nn import ResNet, ResNetApp
    from .model import NetSpec, Strategy, predict
    from .schedule import Cycle
    from .timeline import paired, recording

    shape = layer.shape
    input_shape = shape if layer.kind == "conv" else (shape[0],)
    net = ResNet(input_shape, 2, width=shape[0], nlayers=nlayers, kernel=layer.kernel)
    params = net.init_params(seed=5, scale=0.1)
    rng = np.random.default_rng(9)
    runs = []  # (samples, spec, strategy, wall, calls)
    for n in sorted(set(int(x) for x in samples)):
        X = rng.standard_normal((n,) + tuple(input_shape))
        C = np.eye(2)[rng.integers(0, 2, n)]
        spec = NetSpec(layer.kind, shape, nlayers, n, kernel=layer.kernel,
                       features=int(np.prod(input_shape)), nclasses=2)
        for levels in (1, 2):
            wall, calls = _recorded_gradient(recording(ResNetApp)(net, params, X, C),
                                             net.tstop, nlayers, levels, repeats)
            strategy = Strategy(1, 1, 1, Cycle(ntime=nlayers, max_levels=levels, cfactor=4,
                                               batched=True), (1, 1))
            runs.append((n, spec, strategy, wall, calls))

    def pairs_with(model_layer: LayerCosts):
        c = dataclasses.replace(cal, layers=(model_layer,))
        for n, spec, strategy, wall, calls in runs:
            pred = predict(spec, strategy, c, record=True)
            [(pairs, gaps)] = paired([calls], pred.timeline.events, wall,
                                     pred.timeline.makespan)
            yield n, calls, pairs, gaps

    # 1. Against bare calls with nothing between them: the calls' factors, the glue
    #    (gaps with no model operation) and the vector work (gaps with only that).
    bare = dataclasses.replace(layer, sweep=1.0, sweep_batched=1.0, glue=None,
                               vec_factor=1.0, fixed=None, stack=None, sweep_grad=None)
    # Ratios call by call, then their medians: a call caught by another job's time slice
    # (a shared machine) moves a sum, not a median.
    # plain calls, batched relaxation calls, the batched gradient call
    ratios: Dict[str, List[Tuple[float, float]]] = {"plain": [], "batched": [], "grad": []}
    glue_gaps: Dict[Tuple[int, int], List[float]] = {}
    vec_gaps: List[Tuple[float, float, int, int]] = []  # measured, model, rows, n
    stacking: List[Tuple[int, int, float]] = []  # before the batched gradient call
    for n, calls, pairs, gaps in pairs_with(bare):
        for call, ev in pairs:
            kind = "grad" if call.batch and call.tag == "grad" else \
                ("batched" if call.batch else "plain")
            ratios[kind].append((call.end - call.start, ev.end - ev.start))
        for gap in gaps:
            call = calls[gap.index] if gap.index < len(calls) else None  # after the gap
            rows = 1 if call is None else call.rows
            if call is not None and call.tag == "grad" and call.batch:
                stacking.append((2 * rows, n, max(gap.measured - gap.model, 1e-9)))
            elif gap.label == "none":
                glue_gaps.setdefault((rows, n), []).append(gap.measured)
            elif gap.label == "vec":
                vec_gaps.append((gap.measured, gap.model, rows, n))
    glue = CostFit.fit([(r, n, float(np.median(g)))
                        for (r, n), g in sorted(glue_gaps.items())])
    # the medians themselves are kept: the model interpolates them as it does the calls'
    # (a line through them misses: one state of 1000 samples 4 us, eight 62 us)
    vec = [(m - glue.seconds(r, n), p) for m, p, r, n in vec_gaps]
    # the stacking is a copy of 2 states per layer: a law in the bytes, not the points
    stack = CostFit.fit(stacking) if stacking else None
    measured = dataclasses.replace(
        layer, sweep=_median_factor(ratios["plain"]),
        sweep_batched=_median_factor(ratios["batched"]),
        sweep_grad=_median_factor(ratios["grad"]) if ratios["grad"] else None,
        glue=glue, vec_factor=_median_factor(vec), fixed=None,  # measured next
        stack=None if stack is None else CostFit(stack.a, stack.b))
    # 2. Against that model: what is left outside the calls, per gradient.
    rest: Dict[int, List[float]] = {}
    for n, _calls, _pairs, gaps in pairs_with(dataclasses.replace(measured, sweep=1.0,
                                                                  sweep_batched=1.0)):
        rest.setdefault(n, []).append(sum(g.measured - g.model for g in gaps
                                          if g.label not in ("none", "vec", "glue",
                                                             "glue+vec")))
    fixed = CostFit.fit([(1, n, max(float(np.mean(v)), 1e-9)) for n, v in sorted(rest.items())])
    return dataclasses.replace(measured, fixed=CostFit(fixed.a, fixed.b))


def _recorded_gradients(app: Any, tstop: float, nlayers: int, levels: int,
                        repeats: int, comm: Any = None) -> List[Tuple[float, list]]:
    """(seconds, this rank's calls from the gradient's start) of each of ``repeats``
    warm gradients of the recording ``app``; with ``comm`` (collective) the gradients
    run on its ranks, and the seconds are the slowest rank's."""
    from ..adjoint import GradientSolver

    solver = GradientSolver(app, 0.0, tstop, nlayers, oneshot=(1, 1),
                            primal={"max_levels": levels, "cfactor": 4}, comm=comm)
    runs = []
    try:
        solver.evaluate()
        for _ in range(max(repeats, 1)):
            app.calls = []
            if comm is not None:
                comm.Barrier()
            start = time.perf_counter()
            solver.evaluate()
            wall = time.perf_counter() - start
            if comm is not None:
                from mpi4py import MPI
                slowest = np.array([wall])
                comm.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)  # typed buffers only
                wall = float(slowest[0])
            runs.append((wall, [dataclasses.replace(c, start=c.start - start,
                                                    end=c.end - start) for c in app.calls]))
    finally:
        solver.close()
    return runs


def _recorded_gradient(app: Any, tstop: float, nlayers: int, levels: int,
                       repeats: int) -> Tuple[float, list]:
    """The fastest of :func:`_recorded_gradients` (one rank)."""
    return min(_recorded_gradients(app, tstop, nlayers, levels, repeats),
               key=lambda run: run[0])


#: A recorded call as numbers, to gather without pickle: tag code, rows, batched,
#: start, end.
_TAGS = ("fwd", "adj", "grad")


def _rank_counts(size: int, cores: Optional[int] = None) -> List[int]:
    """1, 2, 4, ... up to ``size``, and ``size``; those above the machine's cores left
    out (ranks sharing cores are not measured).

    >>> _rank_counts(8, cores=16), _rank_counts(6, cores=16), _rank_counts(4, cores=2)
    ([1, 2, 4, 8], [1, 2, 4, 6], [1, 2])
    """
    import os

    cores = cores or os.cpu_count() or 1
    counts = sorted({min(2 ** i, size) for i in range(size.bit_length() + 1)} | {size})
    return [k for k in counts if k <= cores]


def busy_ranks(comm: Any, cores: Optional[int] = None) -> int:
    """How many of ``comm``'s ranks get a core each: rank 0's min(size, ``cores``,
    default its machine's), on every rank (collective; 1 without ``comm``)."""
    if comm is None or comm.Get_size() < 2:
        return 1
    most = np.array([_rank_counts(comm.Get_size(), cores)[-1]], dtype=np.int64)
    comm.Bcast(most, root=0)
    return int(most[0])


def _first_ranks(comm: Any, n: int) -> Any:
    """The first ``n`` ranks of ``comm`` as a communicator (``comm`` itself when that is
    all of them), None on the others. Collective; free a new one with ``.Free()``."""
    if n >= comm.Get_size():
        return comm
    from mpi4py import MPI

    sub = comm.Split(0 if comm.Get_rank() < n else MPI.UNDEFINED, comm.Get_rank())
    return None if sub == MPI.COMM_NULL else sub


def _on_first_ranks(comm: Any, n: int, what: str, fn: Callable[[Any], Any],
                    default: Any = None) -> Any:
    """``fn(sub)`` on the first ``n`` ranks of ``comm`` (``sub`` their communicator)
    while the others sleep (:func:`quiet_barrier`); a failure on any rank stops every
    rank (``agreed`` on ``what``). Its result there, ``default`` on the others.
    Collective over ``comm``."""
    from ..parallel.agree import agreed

    sub = _first_ranks(comm, n)
    out, error = default, None
    try:
        if sub is not None:
            out = fn(sub)
    except Exception as exc:  # agreed on below, by every rank
        error = exc
    finally:
        if sub is not None and sub is not comm:
            sub.Free()
    quiet_barrier(comm)
    agreed(comm, what).settle(error)
    return out


def _calls_over_model(pairs_by_rank: Sequence[Sequence[Tuple[Any, Any]]]) -> float:
    """Seconds in a gradient's step calls, measured over modelled, all ranks together."""
    measured = sum(c.end - c.start for pairs in pairs_by_rank for c, _ in pairs)
    model = sum(e.end - e.start for pairs in pairs_by_rank for _, e in pairs)
    return measured / model if model > 0 else 1.0


def calibrate_in_solve_parallel(comm: Any, kind: str, shape: Sequence[int], kernel: int, *,
                                cal: Optional[Calibration] = None,
                                layer: Optional[LayerCosts] = None,
                                samples: Optional[Sequence[int]] = None, nlayers: int = 32,
                                repeats: int = 5, cores: Optional[int] = None
                                ) -> Tuple[Optional[CostFit],
                                           Optional[Tuple[Tuple[int, float], ...]]]:
    """What a gradient across ranks costs beyond the model with the one-rank
    measurements of :func:`calibrate_in_solve` (``layer``): the 32-layer ResNet's
    two-level gradient (batched, one-shot (1, 1), cf 4) run on the first k ranks of
    ``comm`` for k = 1, 2, 4, ... up to its size (at most a core each; the other ranks
    sleep; at most ``cores``, rank 0's, default its machine's) at each of ``samples``
    (rank 0's; two counts), ``repeats`` times, every rank's step calls recorded and
    paired with the model's. Two results:

    * ``concurrency`` (``LayerCosts.concurrency``): how much slower the step calls run
      with k ranks busy than with one, (k, factor) pairs; the median gradient's
      measured over modelled call seconds at the larger sample count, over the same
      ratio of rank 0 alone, measured back to back (drifts of the machine's speed since
      ``layer`` was measured cancel);
    * ``fixed_parallel`` (``LayerCosts.fixed_parallel``): on as many ranks as have a
      core each (None if that is one), with ``concurrency`` applied, the gaps outside
      glue and vector work (the stretches at the solves' starts and ends, the
      objective, before the gradient call, the receives: where braidpy's Python-level
      collectives, its messages and the waits at them lie) summed per rank beyond the
      model, averaged over the ranks, the median over the gradients, fitted as
      ``a + b * samples``.

    (None, None) with fewer than 2 ranks or no sample counts. Collective over ``comm``:
    rank 0 passes ``cal``, ``layer`` and ``samples``, the others the layer's ``kind``,
    ``shape`` and ``kernel`` only; every rank gets both."""
    if comm is None or comm.Get_size() < 2:
        return None, None
    from ..nn import ResNet, ResNetApp
    from ..parallel.agree import agreed
    from ..parallel.collectives import gather_arrays
    from .model import NetSpec, Strategy, predict
    from .schedule import Cycle
    from .timeline import Call, paired, recording

    keep_freed_memory()  # every rank's calls as rank 0's were measured
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = np.array(_bcast_counts(comm, samples or []), dtype=np.int64)
    # rank 0's count, so that every rank runs the same gradients (the hosts of a
    # multi-node run may have different core counts)
    most = busy_ranks(comm, cores)
    busy_counts = _rank_counts(size, most)
    shape = tuple(int(x) for x in shape)
    input_shape = shape if kind == "conv" else (shape[0],)
    net = ResNet(input_shape, 2, width=shape[0], nlayers=nlayers, kernel=kernel)
    params = net.init_params(seed=5, scale=0.1)
    rng = np.random.default_rng(9)  # the same data on every rank
    data = {}
    for n in counts.tolist():
        data[n] = (rng.standard_normal((n,) + tuple(input_shape)),
                   np.eye(2)[rng.integers(0, 2, n)])
    # (ranks, samples) -> (every gradient's wall seconds, rank 0 only; its calls by rank)
    recorded: Dict[Tuple[int, int], Tuple[List[float], Dict[int, np.ndarray]]] = {}
    for k in busy_counts:
        for n in counts.tolist():
            X, C = data[n]

            def gradients_on(sub: Any, k: int = k, X: Any = X, C: Any = C) -> list:
                return _recorded_gradients(recording(ResNetApp)(net, params, X, C), net.tstop,
                                           nlayers, 2, repeats, comm=sub if k > 1 else None)
            runs: List[Tuple[float, list]] = _on_first_ranks(
                comm, k, f"a gradient on {k} ranks", gradients_on, default=[])
            everyone = gather_arrays(comm, {g * size + rank: np.array(
                [[_TAGS.index(c.tag), c.rows, c.batch, c.start, c.end] for c in calls],
                dtype=np.float64).reshape(-1, 5) for g, (_, calls) in enumerate(runs)})
            if rank == 0:
                assert everyone is not None
                recorded[k, n] = ([wall for wall, _ in runs], everyone)
    factors = np.ones(len(busy_counts))
    law = np.full(2, np.nan)  # nan: nothing measured
    with agreed(comm, "pairing the recorded calls with the model's"):
        if rank == 0 and len(counts):  # the others wait at the agreement
            assert cal is not None and layer is not None

            def gradients(k: int, n: int, lc: LayerCosts):
                """Each recorded gradient on k ranks: its calls and gaps paired with the
                model's (with ``lc``)."""
                spec = NetSpec(kind, shape, nlayers, n, kernel=kernel,
                               features=int(np.prod(input_shape)), nclasses=2)
                strategy = Strategy(1, 1, k, Cycle(ntime=nlayers, max_levels=2, cfactor=4,
                                                   batched=True), (1, 1))
                pred = predict(spec, strategy, dataclasses.replace(
                    cal, layers=(lc,), nranks=k), record=True)
                walls, everyone = recorded[k, n]
                for g, wall in enumerate(walls):
                    measured = [[Call(_TAGS[int(t)], int(r), bool(b), s0, s1)
                                 for t, r, b, s0, s1 in everyone[g * size + q].tolist()]
                                for q in range(k)]
                    yield paired(measured, pred.timeline.events, wall,
                                 pred.timeline.makespan)

            plain = dataclasses.replace(layer, concurrency=None)
            largest = int(counts.max())
            ratio = {k: float(np.median([_calls_over_model([p for p, _ in ranks])
                                         for ranks in gradients(k, largest, plain)]))
                     for k in busy_counts}
            factors[:] = [ratio[k] / ratio[1] for k in busy_counts]
            slowed = dataclasses.replace(layer, concurrency=tuple(
                (k, float(f)) for k, f in zip(busy_counts, factors)))
            if most > 1:  # across ranks with a core each
                points = []
                for n in counts.tolist():
                    per_gradient = [float(np.mean([
                        sum(g.measured - g.model for g in gaps
                            if g.label not in ("none", "vec", "glue", "glue+vec"))
                        for _, gaps in ranks])) for ranks in gradients(most, n, slowed)]
                    # the median keeps out gradients where a call slowed on one rank
                    # (another job's time slice) lengthened its partner's wait
                    points.append((1, n, max(float(np.median(per_gradient)), 1e-9)))
                fit = CostFit.fit(points)
                law[:] = fit.a, fit.b
    comm.Bcast(factors, root=0)
    comm.Bcast(law, root=0)
    if not len(counts):  # no sample counts: nothing measured
        return None, None
    return (None if np.isnan(law[0]) else CostFit(float(law[0]), float(law[1])),
            tuple((k, float(f)) for k, f in zip(busy_counts, factors)))


def _bcast_counts(comm: Any, counts: Sequence[int]) -> List[int]:
    """Rank 0's sorted distinct sample counts, on every rank (collective; the others'
    ``counts`` are ignored)."""
    given = sorted(set(int(x) for x in counts)) if comm.Get_rank() == 0 else []
    length = np.array([len(given)], dtype=np.int64)
    comm.Bcast(length, root=0)
    out = np.array(given if comm.Get_rank() == 0 else [0] * int(length[0]), dtype=np.int64)
    comm.Bcast(out, root=0)
    return [int(n) for n in out]


def _fit_link(sizes: Sequence[int], seconds: Sequence[float]) -> Tuple[float, float]:
    fit = CostFit.fit([(1, n, t) for n, t in zip(sizes, seconds)])
    return fit.a, fit.b


def calibrate_network(comm: Any, sizes: Sequence[int] = (8, 1024, 65536, 1048576),
                      repeats: int = 20, batches: int = 5,
                      where: Placement = HOST) -> Tuple[Link, Link]:
    """alpha-beta of ping-pong between ranks 0 and 1 and of an allreduce over ``comm``
    (collective). One rank (or no comm): the assumed defaults. Each size is timed in
    ``batches`` batches of ``repeats`` and the fastest batch kept, as :func:`time_call`
    keeps the fastest repeat: on a shared machine a rank descheduled by other jobs only
    adds time (its partner spins meanwhile), which is no cost of the network. With
    ``where`` a device, each ping-pong message starts and ends on the device: copied to
    the host, sent, received, copied back (the allreduce stays host to host)."""
    if comm is None or comm.Get_size() < 2:
        return ASSUMED_P2P, ASSUMED_ALLREDUCE
    rank = comm.Get_rank()
    p2p, ar = [], []
    for n in sizes:
        buf = np.zeros(max(n // 8, 1))
        out = np.empty_like(buf)
        on_device = None if where.is_host else where.from_host(buf)

        def send(dest: int) -> None:
            comm.Send(buf if on_device is None else where.to_host(on_device), dest=dest,
                      tag=7)

        def recv(source: int) -> None:
            nonlocal on_device
            comm.Recv(buf, source=source, tag=7)
            if on_device is not None:
                on_device = where.from_host(buf)
                where.synchronize()
        best_p2p = best_ar = math.inf
        for _ in range(batches):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(repeats):
                if rank == 0:
                    send(1)
                    recv(1)
                elif rank == 1:
                    recv(0)
                    send(0)
            best_p2p = min(best_p2p, (time.perf_counter() - start) / (2 * repeats))
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(repeats):
                comm.Allreduce(buf, out)
            best_ar = min(best_ar, (time.perf_counter() - start) / repeats)
        p2p.append(best_p2p)
        ar.append(best_ar)
    times = np.asarray(p2p, dtype=np.float64)  # rank 0's ping-pong times, to everyone
    comm.Bcast(times, root=0)
    p2p = times.tolist()
    from mpi4py import MPI
    slowest = np.empty(len(ar))
    comm.Allreduce(np.asarray(ar), slowest, op=MPI.MAX)  # the allreduce ends on the last
    ar = slowest.tolist()
    a1, b1 = _fit_link(sizes, p2p)
    rounds = max(1, math.ceil(math.log2(comm.Get_size())))
    a2, b2 = _fit_link(sizes, [t / rounds for t in ar])  # per round of a tree
    return (Link(a1, b1, "measured"),
            Link(a2, b2, f"measured on {comm.Get_size()} ranks, per tree round"))


def _fastest(fn: Callable[[], None], comm: Any, repeats: int, batches: int) -> float:
    """Seconds per call of ``fn`` (collective when ``comm`` spans ranks): the fastest of
    ``batches`` batches of ``repeats``, the slowest rank's, on every rank."""
    best = math.inf
    for _ in range(batches):
        if comm is not None:
            comm.Barrier()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI
        slowest = np.array([best])
        comm.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)  # typed buffers only
        best = float(slowest[0])
    return best


def calibrate_software(comm: Any, p2p: Link, sizes: Sequence[int] = (8, 1024, 65536,
                                                                    1048576),
                       repeats: int = 20, batches: int = 5) -> Tuple[Optional[Link], float]:
    """braidpy's own costs around communication, beyond what the network fit has:

    * a state message as the core sends one (``App.bufpack``, the time communicator's
      post, matched probe and receive, ``App.bufunpack``): with 2+ ranks, ping-pong
      between ranks 0 and 1 this way less the raw ping-pong ``p2p``; with one rank,
      messages to itself (``MPI.COMM_SELF``: no network, all the software);
    * one agreement (:mod:`braidpy.parallel.agree`, the Python-level collective a
      gradient makes about 21 of) less a raw allreduce of one number, with 2+ ranks
      (else 0).

    (None, 0.0) without mpi4py. Collective over ``comm``."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None, 0.0
    from .._app import App
    from ..parallel.agree import agreed
    from ..parallel.timecomm import TimeComm

    app = App()
    size = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()
    tc = TimeComm(MPI.COMM_SELF if size < 2 else comm)
    try:
        seconds = []
        for n in sizes:
            u = np.zeros(max(n // 8, 1))
            if size < 2:
                def once(u=u) -> None:
                    tc.post(0, 5, app.bufpack(u))
                    app.bufunpack(tc.receive(0, 5))
                    tc.finish()
                seconds.append(_fastest(once, None, repeats, batches))
                continue

            def pingpong(u=u) -> None:
                if rank == 0:
                    tc.post(1, 5, app.bufpack(u))
                    tc.finish()
                    app.bufunpack(tc.receive(1, 5))
                elif rank == 1:
                    v = app.bufunpack(tc.receive(0, 5))
                    tc.post(0, 5, app.bufpack(v))
                    tc.finish()
            seconds.append(_fastest(pingpong, comm, repeats, batches) / 2)
        a, b = _fit_link(sizes, seconds)
        if size < 2:
            message = Link(a, b, "measured: messages to itself (MPI.COMM_SELF)")
        else:
            message = Link(max(a - p2p.alpha, 0.0), max(b - p2p.beta, 0.0),
                           f"measured: ping-pong through braidpy less the raw one "
                           f"({size} ranks)")
        agreement = 0.0
        if size >= 2:
            one = np.zeros(1)

            def agree() -> None:
                with agreed(comm, "calibration"):
                    pass

            def raw() -> None:
                comm.Allreduce(MPI.IN_PLACE, one)
            agreement = max(_fastest(agree, comm, repeats, batches) -
                            _fastest(raw, comm, repeats, batches), 0.0)
        return message, agreement
    finally:
        tc.free()


def calibrate_communication(comm: Any, where: Placement = HOST
                            ) -> Tuple[Link, Link, Optional[Link], float]:
    """:func:`calibrate_network` then, on the host, :func:`calibrate_software` (a
    device's states take another path, through pinned host blocks: not measured there).
    Collective over ``comm``: every rank calls it (rank 0 inside :func:`calibrate`)."""
    p2p, ar = calibrate_network(comm, where=where)
    software, agreement = calibrate_software(comm, p2p) if where.is_host else (None, 0.0)
    return p2p, ar, software, agreement


def _communication_on_busy_ranks(comm: Any, where: Placement, cores: Optional[int]
                                 ) -> Tuple[Link, Link, Optional[Link], float]:
    """:func:`calibrate_communication` on the first ranks of ``comm``, as many as have a
    core each (:func:`busy_ranks`), while the others sleep: ranks sharing cores would
    measure the scheduler, not the network. Collective over ``comm``, and a failure on
    any rank stops every rank (``agreed``); rank 0 gets the results (the others: what
    they measured, or the assumed values)."""
    if comm is None or comm.Get_size() < 2:
        return calibrate_communication(comm, where)
    out: Tuple[Link, Link, Optional[Link], float] = _on_first_ranks(
        comm, busy_ranks(comm, cores), "measuring the network",
        lambda busy: calibrate_communication(busy, where),
        default=(ASSUMED_P2P, ASSUMED_ALLREDUCE, None, 0.0))
    return out


def _gpu_note(where: Placement) -> str:
    """What the file says about GPUs: whose layer costs it holds."""
    from .. import cuda_info

    if not where.is_host:
        return f"layer costs measured on {where.name} (wall clock, synchronized)"
    info = cuda_info()
    if info.get("devices", 0):
        return (f"{info['devices']} GPU(s) found; this calibration measures CPU layer "
                f"costs only")
    why = info.get("error") or info.get("import_error") or "no device"
    return f"no GPU ({why}): GPU costs not measured"


def calibrate(layers: Sequence[str] = DEFAULT_LAYERS, *, comm: Any = None,
              samples: Sequence[int] = DEFAULT_SAMPLES, rows: Sequence[int] = (1, 4, 16),
              repeats: int = 5, min_time: float = 5e-3,
              log: Optional[Callable[[str], None]] = None, device: Any = None,
              cores: Optional[int] = None) -> Calibration:
    """Measure everything (see the module docstring); ``comm`` for the network part;
    ``device`` where the layers' numbers live (None: the host; ``"cuda"``, or a
    :class:`~braidpy._device.Placement`): the layer, vector and sweep costs are then
    that device's, and a message between ranks includes its copies to and from the
    host (CuPy states cross ranks through host buffers). With more ranks than ``cores``
    (default: this machine's), the network and the gradients across ranks are measured
    on as many ranks as there are cores while the others sleep; nothing is measured
    with ranks sharing cores (the model gives such runs compute x ranks / cores, a
    lower bound)."""
    where = placement(device)
    say = log or (lambda _msg: None)
    size = 1 if comm is None else comm.Get_size()
    most = _rank_counts(size, cores)[-1]  # what busy_ranks gives every rank
    if size > most:
        say(f"{size} ranks, {most} cores: measuring across ranks on the first {most} "
            f"(the others sleep); ranks sharing cores are not measured")
    # Large temporaries reused, not faulted in again: the regime of a long run
    # (braidpy.perf.allocator; runs the model is to predict should do the same).
    _, allocator = keep_freed_memory()
    fits = []
    # This rank's own measurements sit between agreements with the other ranks
    # (calibrate_follower): a failure here stops every rank instead of leaving them
    # waiting in the next collective; meanwhile they sleep, as a rank alone would have
    # the machine to itself (what they cost it is `concurrency`).
    with alone(comm, "measuring the layers"):
        for text in layers:
            kind, shape, kernel = parse_layer(text)
            say(f"layer {text}")
            fits.append(calibrate_layer(kind, shape, kernel, samples=samples, rows=rows,
                                        repeats=repeats, min_time=min_time, where=where))
        say("callback")
        callback, solve_s = calibrate_callback()
    say("network")
    p2p, ar, software, agreement = _communication_on_busy_ranks(comm, where, cores)
    host = {"machine": platform.machine(), "python": platform.python_version(),
            "processor": platform.processor(), "numpy": np.__version__,
            "gpu": _gpu_note(where), "allocator": allocator}
    cal = Calibration(tuple(fits), callback, p2p, ar, solve_s=solve_s,
                      nranks=1 if comm is None else comm.Get_size(), device=where.name,
                      host=host, message_software=software, agreement_s=agreement)
    swept = []
    for lc in cal.layers:
        say(f"gradients of {lc.name}")
        n = sorted({p[1] for p in lc.costs["fwd"].points})
        if where.is_host:  # the smallest, the middle and the largest sample counts:
            # glue and fixed costs grow with the states (without the largest, a fit
            # between the smallest and the middle put them at 2-14x what 5000 samples
            # measured on the 2-core VM)
            both = sorted({n[0], n[len(n) // 2], n[-1]})
            with alone(comm, f"measuring {lc.name} in a solve"):
                measured = calibrate_in_solve(cal, lc, both, repeats=repeats)
            if most > 1:
                say(f"gradients of {lc.name} across 1-{most} ranks")
            parallel, concurrency = calibrate_in_solve_parallel(
                comm, lc.kind, lc.shape, lc.kernel, cal=cal, layer=measured, samples=both,
                repeats=repeats, cores=cores)
            with alone(comm, f"measuring {lc.name}'s serial sweeps"):
                serial = calibrate_serial(lc.kind, lc.shape, lc.kernel, samples=n,
                                          repeats=repeats)
            swept.append(dataclasses.replace(measured, fixed_parallel=parallel,
                                             concurrency=concurrency, serial=serial))
        else:  # calls on a device return before their work is done: whole gradients
            single, batched = calibrate_sweep(cal, lc, n[len(n) // 2],
                                              repeats=max(repeats // 2, 1), where=where)
            swept.append(dataclasses.replace(lc, sweep=single, sweep_batched=batched))
    return dataclasses.replace(cal, layers=tuple(swept))


def calibrate_follower(comm: Any, layers: Sequence[str] = DEFAULT_LAYERS, *,
                       repeats: int = 5, device: Any = None,
                       cores: Optional[int] = None) -> None:
    """The part of :func:`calibrate` the ranks other than 0 of ``comm`` take: the same
    agreements (so that a failure on rank 0 stops them too), the communication, and the
    gradients across the ranks; ``layers``, ``repeats``, ``device`` and ``cores`` as
    rank 0's."""
    where = placement(device)
    keep_freed_memory()  # as rank 0 does: the gradients across the ranks are timed
    with alone(comm, "measuring the layers"):
        pass  # rank 0's work
    _communication_on_busy_ranks(comm, where, cores)
    if not where.is_host:
        return
    for text in layers:
        kind, shape, kernel = parse_layer(text)
        with alone(comm, f"measuring {layer_name(kind, shape, kernel)} in a solve"):
            pass  # rank 0's work
        calibrate_in_solve_parallel(comm, kind, shape, kernel, repeats=repeats, cores=cores)
        with alone(comm, f"measuring {layer_name(kind, shape, kernel)}'s serial sweeps"):
            pass  # rank 0's work
