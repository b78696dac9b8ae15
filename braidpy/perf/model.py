"""Time and memory per gradient of a ResNet on a data x space x layers process grid.

One gradient of braidpy's layer-parallel trainer (braidpy.train.evaluate's
LayerParallelEvaluator) is: the opening layer on the first layer rank, a primal MGRIT
solve, the classifier's loss and gradient on the last rank, an adjoint MGRIT solve on
the mirrored grid, the parameter gradients of every owned layer, and an allreduce of
the gradient over the layer ranks. With data parallelism, each of the D groups does
this for its share of the batch and the gradients are averaged by an allreduce over the
groups; with spatial parallelism (conv layers), each of the S ranks of a group holds a
band of image rows, divides the layer work by S and exchanges a halo with its two
neighbours per layer call (Dryden et al., "Improving strong-scaling of CNN training by
exploiting finer-grained parallelism", IEEE IPDPS 2019, sec. III-IV).

The layer-parallel part is the critical path of the task graph of
:mod:`braidpy.perf.schedule`; everything else adds alpha-beta message costs (for the
ring allreduce ``2 (P-1) alpha + 2 (P-1)/P n beta``, after Gibiansky, "Bringing HPC
techniques to deep learning", blog post, 2017) to it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..adjoint.solver import GradientSolver, chunk_size, gradient_groups
from .calibration import Calibration, LayerCosts, Link
from .schedule import (RELAX_NAMES, Cycle, Op, Timeline, block_ranges, hierarchy, simulate,
                       solve_program)

__all__ = ["NetSpec", "Strategy", "Prediction", "predict", "allreduce_seconds", "band_share",
           "memory_per_rank", "check_strategy", "serial_seconds", "NETWORKS", "network_spec",
           "PARAM_COPIES", "AGREEMENTS_PER_GRADIENT", "SOLVE_END_COLLECTIVES",
           "OBJECTIVE_COLLECTIVES", "GRADIENT_COLLECTIVES"]

#: Small collectives per gradient outside the compiled core (braidpy's Python-level
#: agreements on success or failure, gathers of the owned ranges and of the objective,
#: step-count allreduces), counted with cProfile on a 2-rank gradient of the trainer's
#: evaluator; each costs a small allreduce over the layer ranks. Where they stand
#: matters (every rank waits at each for the last), so the model places them:
AGREEMENTS_PER_GRADIENT = 21
#: at the end of each solve (Core.solve's final value: which rank has it, an agreement,
#: its length and bytes broadcast, an agreement),
SOLVE_END_COLLECTIVES = 5
#: with the objective (its agreement and the gather of its terms, besides the
#: objective's allreduce itself),
OBJECTIVE_COLLECTIVES = 2
#: after the batched parameter gradients (their agreement); the rest are the trainer's,
#: at the gradient's end.
GRADIENT_COLLECTIVES = 1

#: Copies of the parameter vector a rank holds: parameters, gradient, and L-BFGS's
#: (braidpy.train's default optimizer) direction and 2 x 10 history vectors.
PARAM_COPIES = 24


@dataclasses.dataclass(frozen=True)
class NetSpec:
    """A ResNet and its batch: ``kind`` 'dense' (shape (width,)) or 'conv' (shape
    (channels, H, W), kernel k), ``nlayers`` residual layers, ``samples`` per gradient,
    ``features`` inputs and ``nclasses`` outputs (for the parameter count); ``params``
    overrides that count (0: computed from the shapes)."""

    kind: str
    shape: Tuple[int, ...]
    nlayers: int
    samples: int
    kernel: int = 3
    features: int = 2
    nclasses: int = 5
    params: int = 0

    def __post_init__(self):
        if self.kind not in ("dense", "conv"):
            raise ValueError(f"network kind must be 'dense' or 'conv', got {self.kind!r}")
        need = 1 if self.kind == "dense" else 3
        if len(self.shape) != need or min(self.shape) < 1:
            raise ValueError(f"network shape {self.shape!r}: {self.kind} needs {need} "
                             f"positive sizes")
        for name in ("nlayers", "samples", "kernel", "features", "nclasses"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"network {name} must be an int >= 1, got {v!r}")

    @property
    def numbers(self) -> int:
        """Numbers in one sample's state."""
        return math.prod(self.shape)

    @property
    def nparams(self) -> int:
        if self.params:
            return self.params
        c = self.shape[0]
        per = c * c + c if self.kind == "dense" else c * c * self.kernel ** 2 + c
        opening = self.features * c + c
        return self.nlayers * per + opening + self.numbers * self.nclasses + self.nclasses


#: The published configurations (Peaks and MNIST of Günther et al., "Layer-parallel
#: training of deep residual neural networks", SIAM J. Math. Data Sci. 2, 2020, sec. 5.1;
#: the 4096-layer conv ResNet of Kirby et al., "Layer-parallel training with GPU
#: concurrency of deep residual neural networks via nonlinear multigrid", IEEE HPEC
#: 2020), by name.
NETWORKS: Dict[str, NetSpec] = {
    "peaks": NetSpec("dense", (8,), 32, 5000, features=2, nclasses=5),
    "peaks-1024": NetSpec("dense", (8,), 1024, 5000, features=2, nclasses=5),
    "mnist": NetSpec("conv", (8, 28, 28), 32, 1000, kernel=3, features=784, nclasses=10),
    "mnist-1024": NetSpec("conv", (8, 28, 28), 1024, 1000, kernel=3, features=784,
                          nclasses=10),
    "conv4096": NetSpec("conv", (8, 28, 28), 4096, 100, kernel=3, features=784,
                        nclasses=10),
}


def network_spec(text: str, samples: Optional[int] = None) -> NetSpec:
    """A NetSpec from a name of :data:`NETWORKS` or 'dense:WIDTH:LAYERS' /
    'conv:CxHxW:LAYERS[:K]'; ``samples`` overrides the batch.

    >>> spec = network_spec("dense:8:64", samples=100)
    >>> spec.kind, spec.shape, spec.nlayers, spec.samples
    ('dense', (8,), 64, 100)
    >>> network_spec("dense:8")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: network 'dense:8': expected a name (peaks, ...), dense:WIDTH:LAYERS or ...
    """
    if text in NETWORKS:
        spec = NETWORKS[text]
    else:
        parts = text.split(":")
        bad = ValueError(f"network {text!r}: expected a name ({', '.join(NETWORKS)}), "
                         f"dense:WIDTH:LAYERS or conv:CxHxW:LAYERS[:K]")
        try:
            if parts[0] == "dense" and len(parts) == 3:
                spec = NetSpec("dense", (int(parts[1]),), int(parts[2]), 1)
            elif parts[0] == "conv" and len(parts) in (3, 4):
                shape = tuple(int(x) for x in parts[1].split("x"))
                k = int(parts[3]) if len(parts) == 4 else 3
                spec = NetSpec("conv", shape, int(parts[2]), 1, kernel=k,
                               features=math.prod(shape), nclasses=10)
            else:
                raise bad
        except ValueError as exc:
            raise bad if exc is bad or "invalid literal" in str(exc) else \
                ValueError(f"network {text!r}: {exc}") from None
    if samples is not None:
        spec = dataclasses.replace(spec, samples=samples)
    return spec


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A process grid and MGRIT setting: ``data`` x ``space`` x ``layers`` ranks;
    ``cycle`` the MGRIT settings (max_levels 1 = serial propagation); ``iterations``
    (primal, adjoint) per gradient: one-shot's (m1, m2), or measured/assumed counts of
    exact mode; ``cold`` both solves start cold (skip applies) instead of warm as in
    training."""

    data: int
    space: int
    layers: int
    cycle: Cycle
    iterations: Tuple[int, int] = (2, 2)
    mode: str = "oneshot"
    cold: bool = False

    @property
    def nprocs(self) -> int:
        return self.data * self.space * self.layers

    def label(self) -> str:
        c = self.cycle
        mg = "serial" if c.max_levels == 1 else \
            f"L{c.max_levels} cf{c.cfactor_at(0)}{' skip' if c.skip else ''}" \
            f"{' fmg' if c.fmg else ''}"
        relax = sorted({c.nrelax_at(k) for k in range(c.max_levels)})
        if c.max_levels > 1 and relax != [1]:  # FCF, braidpy's default, goes unsaid
            mg += " " + "/".join(RELAX_NAMES.get(n, f"nrelax {n}") for n in relax)
        it = f"m{self.iterations[0]}/{self.iterations[1]}" if self.mode == "oneshot" else \
            f"it{self.iterations[0]}/{self.iterations[1]}"
        return f"{self.data}x{self.space}x{self.layers} {mg} {it}"


@dataclasses.dataclass
class Prediction:
    """Predicted seconds per gradient with the parts of its critical path, and the
    memory per rank; with line-search trials (``predict(trials=...)``) the seconds of
    one trial and of one optimizer step as well."""

    strategy: Strategy
    seconds: float
    parts: Dict[str, float]
    memory: float
    timeline: Timeline
    notes: List[str]
    #: Line-search trials per optimizer step, and the seconds of one.
    trials: float = 0.0
    trial_seconds: float = 0.0
    #: What a gradient after a trial at its point does not repeat (serial propagation:
    #: the forward sweep, kept by the trial; ResNet.loss(keep_states=True)).
    reused_seconds: float = 0.0

    @property
    def step_seconds(self) -> float:
        """Seconds per optimizer step: the gradient, its trials, less what it reuses."""
        return self.seconds + self.trials * self.trial_seconds - self.reused_seconds


def allreduce_seconds(nbytes: float, nprocs: int, p2p: Link, small: Link) -> float:
    """An allreduce of ``nbytes`` over ``nprocs`` ranks: the cheaper of a binomial tree
    (``ceil(log2 P)`` rounds of the allreduce link, which is per round) and the ring
    (``2 (P-1) alpha + 2 (P-1)/P n beta``, Gibiansky 2017)."""
    if nprocs <= 1:
        return 0.0
    rounds = math.ceil(math.log2(nprocs))
    tree = rounds * small.seconds(nbytes)
    ring = 2 * (nprocs - 1) * p2p.alpha + 2 * (nprocs - 1) / nprocs * nbytes * p2p.beta
    return min(tree, ring)


def memory_per_rank(net: NetSpec, s: Strategy) -> float:
    """Bytes per rank: every owned fine state of the primal (storage 'final', what the
    adjoint reads), the adjoint's C-points, u, v and tau on the coarse levels, the
    batched block and (conv) its im2col workspace, and PARAM_COPIES parameter vectors."""
    state = 8.0 * math.ceil(net.samples / s.data) * net.numbers / s.space
    owned = math.ceil((net.nlayers + 1) / s.layers)
    cf = s.cycle.cfactor_at(0) if s.cycle.max_levels > 1 else owned + 1
    coarse = 0.0
    n = owned / cf
    for l in range(1, s.cycle.max_levels):
        coarse += 3 * n
        n /= max(s.cycle.cfactor_at(l), 2)
    chains = max(owned / cf, 1.0) if s.cycle.batched else 1.0
    work = chains * (2 + (net.kernel ** 2 if net.kind == "conv" else 0))
    states = (owned + 1) + owned / cf + coarse + work
    return states * state + PARAM_COPIES * 8.0 * net.nparams


def check_strategy(net: NetSpec, s: Strategy) -> List[str]:
    """Why the grid cannot run this network (empty: it can)."""
    why = []
    if s.data > net.samples:
        why.append(f"{s.data} data groups for {net.samples} samples")
    if s.space > 1 and net.kind != "conv":
        why.append("spatial parallelism needs conv layers")
    # as training allows (braidpy.train.spatial_training.max_space): bands of at least
    # the kernel radius, and at least one row
    radius = max(net.kernel // 2, 1)
    if s.space > 1 and net.kind == "conv" and net.shape[1] // s.space < radius:
        why.append(f"{s.space} row bands of a {net.shape[1]}-row image are thinner than "
                   f"the kernel radius {radius}")
    if s.layers > net.nlayers + 1:
        why.append(f"{s.layers} layer ranks for {net.nlayers + 1} layer points")
    if s.layers > 1 and s.cycle.max_levels == 1:
        why.append("layer ranks with one MGRIT level (serial propagation)")
    return why


def band_share(net: NetSpec, space: int, tag: str) -> float:
    """The share of a whole image's layer call that one of ``space`` ranks computes: a
    conv layer's call runs on the (thickest) band extended by the halo rows it needs
    (the kernel radius r; 2r for the state adjoint, which needs act'(z) around the
    band), and the convolution's work goes with the zero-padded rows (the band's + 2r,
    the image's + 2r). So splitting small images gains little: 8 rows over 2 ranks
    leave each 0.8 (step) to 1.0 (adjoint) of the work. 1 / space where not conv.

    >>> band_share(NetSpec("conv", (4, 8, 8), 32, 100), 2, "fwd")
    0.8
    >>> round(band_share(NetSpec("conv", (8, 28, 28), 32, 100), 2, "fwd"), 3)
    0.6
    """
    if space == 1 or net.kind != "conv":
        return 1.0 / space
    height, r = net.shape[1], net.kernel // 2
    band = -(-height // space)
    halo = 2 * r if tag == "adj" else r
    return (band + 2 * halo + 2 * r) / (height + 2 * r)


def predict(net: NetSpec, s: Strategy, cal: Calibration, *, p2p: Optional[Link] = None,
            small: Optional[Link] = None, cores: Optional[int] = None,
            record: bool = False, trials: float = 0.0) -> Prediction:
    """Seconds per gradient of ``net`` with strategy ``s`` and the calibrated costs.

    ``trials``: line-search trials per optimizer step (L-BFGS: at least one; Adam and
    SGD: none). Each is priced as the Trainer runs it: the opening, the state solve of
    m1 iterations without its final F-sweep (``Core.solve(final_sweep=False)``; exact
    mode: m1 assumed) and the loss on MGRIT grids, the forward sweep and the loss in
    serial propagation, whose gradient after a trial then sweeps backward only
    (:attr:`Prediction.step_seconds`).

    ``p2p`` and ``small`` replace the calibration's network (e.g. a cluster's);
    ``cores``: the cores the ranks have (None: one each). Step calls take the layer's
    measured ``slowdown`` for the ranks busy at once (all of them, at most ``cores``;
    :attr:`LayerCosts.concurrency`). With more ranks than cores every computation takes
    ranks / cores times longer, a lower bound that no measurement validates (a note
    says so). ``record`` keeps every simulated operation in
    ``Prediction.timeline.events``.
    """
    if trials < 0 or not math.isfinite(trials):
        raise ValueError(f"trials must be a finite number >= 0, got {trials!r}")
    why = check_strategy(net, s)
    if why:
        raise ValueError(f"strategy {s.label()}: " + "; ".join(why))
    p2p = p2p or cal.p2p
    small = small or cal.allreduce
    notes: List[str] = []
    layer, scale = cal.layer(net.kind, net.shape, net.kernel)
    if scale != 1.0:
        notes.append(f"costs scaled x{scale:.3g} from {layer.name} by multiply-adds")
    share = 1.0  # ranks per core where they share cores: not measured, not validated
    if cores is not None and s.nprocs > cores:
        share = s.nprocs / cores
        notes.append(f"{s.nprocs} ranks on {cores} cores: compute x{share:.2g}; more ranks "
                     f"than cores: a lower bound, not validated")
    # Step calls in a gradient across ranks run slower than on one rank (caches, memory
    # bandwidth, clock, polling neighbours): the factor measured for this many ranks
    # busy at once on the host's cores. Only the calls: what lies between them across
    # ranks is measured apart (fixed_parallel).
    busy = s.nprocs if cores is None else min(s.nprocs, cores)
    # It is measured where ranks wait for one another (layer or space ranks: waiting
    # ones poll beside computing ones). Data groups of one rank each wait only at the
    # collectives between the solves: their calls run as independent processes', which
    # scale (digits 2x1x1 on the 2-core VM ran as fast as one rank's half under
    # slowdowns of 1.04-1.21; cpu_scaling.py on a 16-core host: 0.93-1.04x).
    alone = s.layers == 1 and s.space == 1
    slowdown = 1.0 if alone else layer.slowdown(busy)
    if layer.concurrency and busy > 1 and not alone:
        most = max(k for k, _ in layer.concurrency)
        beyond = (f"; the factor of {most}, the most ranks measured"
                  if busy > most else "")
        notes.append(f"calls x{slowdown:.3g} with {busy} ranks busy (measured in "
                     f"gradients across ranks{beyond})")
    samples = math.ceil(net.samples / s.data)
    state_bytes = 8.0 * samples * net.numbers / s.space
    costs = layer.costs

    def halo(op: Op) -> float:
        """The halo rows of a call's intervals: one message per neighbour (the adjoint:
        2r rows of u and r of w, two messages)."""
        if s.space == 1:
            return 0.0
        c, _, w = net.shape
        row = 8.0 * samples * op.rows * c * w
        r = net.kernel // 2
        if op.tag == "adj":
            return p2p.seconds(2 * r * row) + p2p.seconds(r * row)
        return p2p.seconds(r * row)

    # The glue before a call copies states: it goes with the numbers of a rank's state,
    # in units of the calibrated layer's samples.
    glue_samples = samples * net.numbers / s.space / layer.numbers

    def cost(op: Op) -> float:
        if op.kind == "work":
            return op.seconds * share
        if op.kind == "vec":
            return share * op.rows * costs["vec"].seconds(1, samples / s.space) * \
                layer.vec_scale
        work = costs[op.tag].seconds(op.rows, samples * scale * band_share(net, s.space,
                                                                           op.tag)) * \
            _call_factor(layer, op)
        return share * (work * slowdown + cal.callback_s) + halo(op)

    def with_glue(ops: List[Op]) -> List[Op]:
        """A 'glue' operation before each step: the copies of its states the core and
        the wrappers make between calls (measured; absent from older calibrations)."""
        if layer.glue is None:
            return ops
        out: List[Op] = []
        for op in ops:
            if op.kind == "step":
                out.append(Op("work", "glue", op.level, op.rows,
                              seconds=layer.glue.seconds(op.rows, glue_samples)))
            out.append(op)
        return out

    # braidpy's own work around a message or an agreement goes with the host, not the
    # network: it stays when --interconnect replaces the calibrated network.
    software = cal.message_software.seconds(state_bytes) if cal.message_software else 0.0

    def message(op: Op) -> float:
        return p2p.seconds(state_bytes) + software

    def reduce(op: Op, n: int) -> float:
        python_level = op.tag in ("agreement", "objective") and n > 1
        return allreduce_seconds(24.0, n, p2p, small) + (cal.agreement_s if python_level
                                                         else 0.0)

    P = s.layers
    N = net.nlayers
    # The opening and the classifier cost about a layer's gradient call each; with
    # space ranks the opening runs on the band, the classifier on the gathered image.
    opening = costs["grad"].seconds(1, samples * scale * band_share(net, s.space, "fwd")) * \
        layer.sweep
    head = costs["grad"].seconds(1, samples * scale) * layer.sweep
    progs: List[List[Op]] = []

    loss_allreduce = allreduce_seconds(8.0, s.data, p2p, small)  # a trial's, over groups

    if s.cycle.max_levels == 1 and P == 1 and s.space == 1 and layer.serial is not None:
        # Serial propagation where the layer sweeps in one compiled call: what serial
        # training runs (ResNet.loss_and_gradient), no core and no per-call Python.
        sweeps = N * layer.serial.seconds(1, samples * scale)
        progs = [[Op("work", "head", seconds=opening), Op("work", "serial", seconds=sweeps),
                  Op("work", "head", seconds=2 * head + opening)]]
        pred = _finish(net, s, simulate(progs, cost, message, reduce, record=record), p2p,
                       small, notes)
        if not trials:
            return pred
        # The calibrated sweep is forward and backward together; its forward part is
        # taken in the proportion of the single calls' costs.
        n = samples * scale
        fwd = costs["fwd"].seconds(1, n)
        forward = sweeps * fwd / (fwd + costs["adj"].seconds(1, n) + costs["grad"].seconds(1, n))
        trial = opening + forward + head + loss_allreduce
        reused = forward + opening if trials >= 1 else 0.0
        return dataclasses.replace(pred, trials=float(trials), trial_seconds=trial,
                                   reused_seconds=reused)

    m1, m2 = s.iterations
    primal = [with_glue(ops) for ops in
              solve_program(s.cycle, P, m1, tag="fwd", stream="primal", cold=s.cold)]
    ranges = block_ranges(N + 1, P)
    mirrored = [(N - hi, N - lo) for lo, hi in reversed(ranges)]
    adjoint = [with_glue(ops) for ops in
               solve_program(s.cycle, P, m2, tag="adj", ranges=mirrored,
                             world=list(range(P - 1, -1, -1)), stream="adjoint",
                             cold=s.cold)]
    solve = Op("work", "solve", seconds=cal.solve_s)  # Core.solve's own Python

    def agreements(n: int) -> List[Op]:
        return [Op("allreduce", "agreement")] * n

    levels = hierarchy(s.cycle, P)
    cf0 = levels[0].cf if len(levels) > 1 else 1

    def gradient_calls(ns: np.ndarray) -> List[Op]:
        """The batched parameter-gradient calls of the steps ns (GradientSolver): on the
        host one per position in the level-0 intervals where the states are large enough
        (braidpy.adjoint's gradient_groups), read in place where both the primal states
        and the adjoint
        values are F-points, else stacked first (measured calibrations price the
        stacking; older ones as the glue's); on a device one call, stacked."""
        out: List[Op] = []
        host = cal.device == "cpu"
        groups = gradient_groups(ns, cf0, int(state_bytes)) if host else [ns]
        # Stacked groups go in chunks of at most the solver's bytes per call.
        limit = min(GradientSolver.gradient_chunk_bytes,
                    GradientSolver.host_gradient_chunk_bytes) if host else \
            GradientSolver.gradient_chunk_bytes
        for group in groups:
            n0 = int(group[0])
            stacked = not host or len(groups) == 1 or n0 % cf0 == 0 or \
                (N - 1 - n0) % cf0 == 0
            size = chunk_size(len(group), int(state_bytes), limit) if stacked else len(group)
            for count in [min(size, len(group) - a) for a in range(0, len(group), size)]:
                grad = Op("step", "grad", 0, count, batch=True)
                if stacked and layer.stack is not None:  # the stacking is this call's glue
                    out += [Op("work", "stack", 0, 2 * count, seconds=layer.stack.seconds(
                        2 * count, glue_samples)), grad]
                elif stacked and layer.glue is not None:
                    out.append(Op("work", "glue", 0, 2 * count, seconds=layer.glue.seconds(
                        2 * count, glue_samples)))
                    out += with_glue([grad])
                else:
                    out.append(grad)
        return out

    trainer = AGREEMENTS_PER_GRADIENT - 2 * SOLVE_END_COLLECTIVES - OBJECTIVE_COLLECTIVES - \
        GRADIENT_COLLECTIVES
    for p in range(P):
        ops: List[Op] = []
        if p == 0:
            ops.append(Op("work", "head", seconds=opening))  # the opening layer
        ops.append(solve)
        ops += primal[p] + agreements(SOLVE_END_COLLECTIVES)
        if p == P - 1:
            ops.append(Op("work", "head", seconds=2 * head))  # classifier loss + gradient
        ops.append(Op("allreduce", "objective"))
        ops += agreements(OBJECTIVE_COLLECTIVES)
        if layer.fixed is not None:  # results, objective, agreements (measured)
            ops.append(Op("work", "fixed", seconds=layer.fixed.seconds(1, glue_samples)))
        if layer.fixed_parallel is not None and P > 1:  # what more ranks add (measured)
            ops.append(Op("work", "parallel", seconds=layer.fixed_parallel.seconds(
                1, glue_samples)))
        ops.append(solve)
        ops += adjoint[p] + agreements(SOLVE_END_COLLECTIVES)
        lo, hi = ranges[p]
        steps = hi - lo + 1 - (1 if lo == 0 else 0)  # step n belongs to t_{n+1}'s rank
        if steps > 0:
            if s.cycle.batched:
                ops += gradient_calls(np.arange(max(lo - 1, 0), hi))
            else:
                ops += with_glue([Op("step", "grad", 0, 1)] * steps)
        ops += agreements(GRADIENT_COLLECTIVES)
        if p == 0:
            ops.append(Op("work", "head", seconds=opening))  # the opening's gradient
        ops += agreements(trainer)
        progs.append(ops)
    tl = simulate(progs, cost, message, reduce, record=record)
    notes += _extrapolation_notes(layer, progs, samples * scale * band_share(net, s.space,
                                                                             "fwd"))
    pred = _finish(net, s, tl, p2p, small, notes)
    if not trials:
        return pred
    # A line-search trial (GradientSolver.objective): the opening of the new parameters,
    # the state solve without its final sweep, the loss and its collectives.
    trial_solve = [with_glue(ops) for ops in
                   solve_program(s.cycle, P, m1, tag="fwd", stream="primal", cold=s.cold,
                                 final_sweep=False)]
    trial_progs: List[List[Op]] = []
    for p in range(P):
        ops = [Op("work", "head", seconds=opening)] if p == 0 else []
        ops.append(solve)
        ops += trial_solve[p] + agreements(SOLVE_END_COLLECTIVES)
        if p == P - 1:
            ops.append(Op("work", "head", seconds=head))  # the classifier's loss
        ops.append(Op("allreduce", "objective"))
        ops += agreements(OBJECTIVE_COLLECTIVES)
        trial_progs.append(ops)
    trial = simulate(trial_progs, cost, message, reduce).makespan + loss_allreduce
    return dataclasses.replace(pred, trials=float(trials), trial_seconds=trial)


def _finish(net: NetSpec, s: Strategy, tl: Timeline, p2p: Link, small: Link,
            notes: List[str]) -> Prediction:
    """The prediction of a simulated gradient: its critical path and the gradient's
    allreduces over the layer, data and space ranks."""
    P = s.layers
    grad_bytes = 8.0 * net.nparams
    layer_ar = allreduce_seconds(grad_bytes, P, p2p, small)
    data_ar = allreduce_seconds(grad_bytes, s.data, p2p, small)
    # the bands' gradient parts, summed over the space group once per gradient
    space_ar = allreduce_seconds(grad_bytes, s.space, p2p, small)
    parts = {k: v for k, v in tl.path.items()}
    parts["allreduce(layers)"] = layer_ar
    parts["allreduce(data)"] = data_ar
    if s.space > 1:
        parts["allreduce(space)"] = space_ar
    total = tl.makespan + layer_ar + data_ar + space_ar
    if p2p.source.startswith("assumed") and s.nprocs > 1:
        notes.append("network costs assumed (" + p2p.source + ")")
    return Prediction(s, total, parts, memory_per_rank(net, s), tl, notes)


def _call_factor(layer: LayerCosts, op: Op) -> float:
    """The calibrated factor on a step call's fitted cost inside a solve: the batched
    gradient call's own where measured, else the batched or the plain calls'."""
    if op.batch and op.tag == "grad" and layer.sweep_grad is not None:
        return layer.sweep_grad
    return layer.sweep_batched if op.batch else layer.sweep


def _extrapolation_notes(layer: LayerCosts, progs: List[List[Op]], samples: float) -> List[str]:
    """Notes where the predicted calls lie beyond the calibrated ones (their costs then
    scale proportionally from the largest measured call, which a real call may not)."""
    points = layer.costs["fwd"].points
    if not points:
        return []
    most_rows = max(op.rows for ops in progs for op in ops if op.kind == "step")
    out = []
    calibrated_rows = max(r for r, _, _ in points)
    if most_rows > 2 * calibrated_rows:
        out.append(f"calls of up to {most_rows} states extrapolated from the calibrated "
                   f"{calibrated_rows} (braidpy calibrate --rows ... {most_rows})")
    calibrated_samples = max(n for _, n, _ in points)
    if samples > 2 * calibrated_samples:
        out.append(f"{samples:.4g} samples per call extrapolated from the calibrated "
                   f"{calibrated_samples} (braidpy calibrate --samples ... "
                   f"{math.ceil(samples)})")
    return out


def serial_seconds(net: NetSpec, cal: Calibration, trials: float = 0.0) -> float:
    """One process, serial propagation (max_levels 1): the reference of speedups; per
    gradient, or with ``trials`` per optimizer step (:attr:`Prediction.step_seconds`)."""
    s = Strategy(1, 1, 1, Cycle(ntime=net.nlayers, max_levels=1, batched=True), (1, 1))
    return predict(net, s, cal, trials=trials).step_seconds

