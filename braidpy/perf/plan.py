"""Rank every process grid and MGRIT setting for a network (``braidpy plan``).

For P processes, every factorization P = data x space x layers that the network allows
(:func:`braidpy.perf.model.predict` says why one does not) is combined with every
MGRIT setting of a small menu (levels, cfactor), predicted, and sorted by seconds per
gradient; splits whose memory per rank exceeds the limit are rejected. This is the
strategy selection of Dryden et al. ("Improving strong-scaling of CNN training by
exploiting finer-grained parallelism", IEEE IPDPS 2019, sec. V-C) by exhaustive search:
the grid is small (divisors of P times a dozen MGRIT settings).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .._limits import INT_MAX, LimitError
from .calibration import Calibration, Link
from .model import NetSpec, Prediction, Strategy, check_strategy, predict, serial_seconds
from .schedule import Cycle, hierarchy

__all__ = ["CLUSTERS", "Plan", "factorizations", "candidates", "plan", "format_plan",
           "MAX_WORK"]

#: The most prediction work :func:`plan` takes on: strategies x layers x MGRIT
#: iterations per gradient (about a microsecond each: 5e7 is about a minute). Beyond it
#: plan refuses at once, naming the sizes, instead of running for hours.
MAX_WORK = 5 * 10**7

#: Documented cluster networks (point-to-point alpha-beta; the allreduce link is the
#: same per tree round). 25 Gb/s Ethernet with kernel TCP: about 25 us and 3.1 GB/s;
#: 100 Gb/s InfiniBand EDR with RDMA: about 1.5 us and 12.5 GB/s (typical MPI
#: ping-pong figures; see docs/performance.md).
CLUSTERS: Dict[str, Link] = {
    "ethernet-25g": Link(25e-6, 1.0 / 3.125e9, "assumed: 25 Gb/s Ethernet, 25 us"),
    "infiniband-100g": Link(1.5e-6, 1.0 / 12.5e9, "assumed: 100 Gb/s InfiniBand, 1.5 us"),
}


def factorizations(P: int) -> List[Tuple[int, int, int]]:
    """Every (data, space, layers) with data * space * layers = P.

    >>> factorizations(4)
    [(1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)]
    """
    if isinstance(P, bool) or not isinstance(P, int) or P < 1:
        raise ValueError(f"P must be an int >= 1, got {P!r}")
    if P > INT_MAX:  # MPI counts ranks in a C int
        raise LimitError(f"P must be <= {INT_MAX} (MPI's rank count is a C int), got {P}")
    divisors = _divisors(P)
    return [(d, s, P // d // s) for d in divisors for s in divisors
            if s <= P // d and (P // d) % s == 0]


def _divisors(n: int) -> List[int]:
    """The divisors of n in increasing order (from its prime factors: fast for any n
    up to INT_MAX, unlike trying every number up to n)."""
    divisors = [1]
    p, m = 2, n
    while p * p <= m:
        k = 0
        while m % p == 0:
            m //= p
            k += 1
        if k:
            divisors = [d * p ** e for d in divisors for e in range(k + 1)]
        p += 1 if p == 2 else 2
    if m > 1:
        divisors = [d * f for d in divisors for f in (1, m)]
    return sorted(divisors)


def candidates(net: NetSpec, P: int, *, levels: Sequence[int] = (2, 3, 4),
               cfactors: Sequence[int] = (2, 4, 8, 16), iterations: Tuple[int, int] = (2, 2),
               mode: str = "oneshot", batched: bool = True,
               mgrit_on_one_rank: bool = False, nrelax: int = 1) -> Iterable[Strategy]:
    """Every strategy to try: each factorization with each MGRIT setting. A single
    layer rank without a space split propagates serially (one level), unless
    ``mgrit_on_one_rank``: then it runs the MGRIT settings too, as braidpy's Trainer
    does in its layer-parallel modes. A space split runs MGRIT (braidpy's Trainer
    splits image rows only in its layer-parallel modes). ``nrelax``: the MGRIT
    settings' relaxation (0 F, 1 FCF, ...; braidpy.Options' nrelax)."""
    for d, s, l in factorizations(P):
        if l == 1 and s == 1 and not mgrit_on_one_rank:
            yield Strategy(d, s, 1, Cycle(ntime=net.nlayers, max_levels=1, batched=batched),
                           (1, 1), mode)
            continue
        seen = set()
        for L in levels:
            for cf in cfactors:
                cyc = Cycle(ntime=net.nlayers, max_levels=L, cfactor=cf, nrelax=nrelax,
                            batched=batched)
                real = len(hierarchy(cyc, 1))
                if real < 2 or (real, cf) in seen:
                    continue  # too few layers for this many levels: already tried
                seen.add((real, cf))
                yield Strategy(d, s, l, dataclasses.replace(cyc, max_levels=real),
                               iterations, mode)
        if not seen:  # too few layers for any coarse level: rejected, with the reason
            yield Strategy(d, s, l, Cycle(ntime=net.nlayers, max_levels=1, batched=batched),
                           iterations, mode)


@dataclasses.dataclass
class Plan:
    """Ranked predictions, the rejected strategies with the reason, and the serial
    one-process time (the reference of speedups)."""

    ranked: List[Prediction]
    rejected: List[Tuple[Strategy, str]]
    serial: float
    #: Line-search trials per step the predictions price (0: per gradient), and serial
    #: propagation's seconds per step with them.
    trials: float = 0.0
    serial_step: float = 0.0


def plan(net: NetSpec, P: int, cal: Calibration, *, memory: Optional[float] = None,
         network: Optional[Link] = None, cores: Optional[int] = None,
         trials: float = 0.0, **menu) -> Plan:
    """Predict every candidate (see :func:`candidates`), fastest first.

    ``memory``: bytes per rank available (None: no limit); ``network``: a cluster
    link replacing the calibration's (e.g. :data:`CLUSTERS`); ``cores``: as
    :func:`~braidpy.perf.model.predict`'s (more ranks than cores: a lower bound, noted);
    ``trials``: line-search trials per optimizer step, which then ranks the candidates
    by their seconds per step (:attr:`Prediction.step_seconds`) instead of per
    gradient; ``menu``: passed to :func:`candidates`.
    """
    _check_work(net, P, menu)
    ranked: List[Prediction] = []
    rejected: List[Tuple[Strategy, str]] = []
    least = float("inf")  # the least memory per rank of a split that did not fit
    for s in candidates(net, P, **menu):
        why = check_strategy(net, s)
        if why:
            rejected.append((s, "; ".join(why)))
            continue
        pred = predict(net, s, cal, p2p=network, small=network, cores=cores, trials=trials)
        if not (math.isfinite(pred.seconds) and pred.seconds > 0):
            raise ValueError(f"the calibration predicts {pred.seconds} s/gradient for "
                             f"{s.label()}: its costs must be finite and > 0 (measure them "
                             f"again with braidpy calibrate)")
        if memory is not None and pred.memory > memory:
            least = min(least, pred.memory)
            rejected.append((s, f"needs {pred.memory / 2**30:.3g} GiB per rank, more than "
                                f"{memory / 2**30:.3g} GiB"))
            continue
        ranked.append(pred)
    if not ranked:
        if memory is not None and least < float("inf"):
            raise ValueError(f"no strategy for P={P} fits in {memory / 2**30:.3g} GiB per "
                             f"rank (memory): the smallest needs {least / 2**30:.3g} GiB")
        reasons = sorted({part for _, why in rejected for part in why.split("; ")})
        shown = reasons[:8] + ([f"and {len(reasons) - 8} more"] if len(reasons) > 8 else [])
        raise ValueError(f"no strategy for P={P} can run {net.kind} x {net.nlayers} layers: "
                         + "; ".join(shown))
    ranked.sort(key=lambda p: p.step_seconds)
    serial = serial_seconds(net, cal)
    if not (math.isfinite(serial) and serial > 0):
        raise ValueError(f"the calibration predicts {serial} s/gradient serially: its costs "
                         f"must be finite and > 0 (measure them again with braidpy calibrate)")
    return Plan(ranked, rejected, serial, float(trials),
                serial_seconds(net, cal, trials) if trials else serial)


def _check_work(net: NetSpec, P: int, menu: Dict) -> None:
    """LimitError, before any prediction, when the plan would take more than
    :data:`MAX_WORK` (strategies at most factorizations x MGRIT settings; each costs in
    proportion to its layers, iterations and relaxation sweeps)."""
    grids = len(factorizations(P))
    settings = len(menu.get("levels", (2, 3, 4))) * len(menu.get("cfactors", (2, 4, 8, 16)))
    iterations = sum(menu.get("iterations", (2, 2)))
    relax = max(1, int(menu.get("nrelax", 1)))  # sweeps per iteration grow with it
    work = grids * max(settings, 1) * net.nlayers * max(iterations, 1) * relax
    if work > MAX_WORK:
        raise LimitError(
            f"planning P={P} ({grids} process grids) x {settings} MGRIT settings for "
            f"{net.nlayers} layers and {iterations} iterations per gradient is {work:.3g} "
            f"units of prediction work; braidpy plan takes at most {MAX_WORK:.3g} (about a "
            f"minute): give fewer layers, iterations (--m1/--m2), --levels or --cfactors, "
            f"or a P with fewer divisors")


def format_plan(p: Plan, top: int = 5) -> str:
    """The best ``top`` strategies with their breakdown, as text (with trials, the
    seconds per step too, and the speedup per step)."""
    step = f" {'s/step':>9s}" if p.trials else ""
    lines = [f"{'rank':>4s}  {'data x space x layers, MGRIT':34s} {'s/gradient':>11s}{step} "
             f"{'speedup':>8s} {'GiB/rank':>9s}  critical path (of the gradient)"]
    for i, pred in enumerate(p.ranked[:top], 1):
        parts = ", ".join(f"{k} {v * 1e3:.3g} ms" for k, v in
                          sorted(pred.parts.items(), key=lambda kv: -kv[1]) if v > 0)
        per_step = f" {pred.step_seconds:9.4g}" if p.trials else ""
        speedup = p.serial_step / pred.step_seconds if p.trials else p.serial / pred.seconds
        lines.append(f"{i:4d}  {pred.strategy.label():34s} {pred.seconds:11.4g}{per_step} "
                     f"{speedup:7.2f}x {pred.memory / 2**30:9.3g}  {parts}")
    notes = sorted({n for pred in p.ranked[:top] for n in pred.notes})
    for n in notes:
        lines.append(f"note: {n}")
    serial = f"{p.serial:.4g} s/gradient"
    if p.trials:
        serial += (f", {p.serial_step:.4g} s/step with {p.trials:g} line-search "
                   f"trial(s) per step (the speedups are per step)")
    lines.append(f"{len(p.ranked)} strategies ranked, {len(p.rejected)} rejected; serial "
                 f"on one process: {serial}")
    return "\n".join(lines)
