"""A measured gradient's timeline set beside the model's: where the time goes apart.

The model (:mod:`braidpy.perf.model`) predicts a rank's time as its layer calls plus
what lies between them: vector work, waits for messages and allreduces, fixed costs.
When a prediction misses, this module says which: it pairs the step calls a real run
made on each rank (recorded by the caller, e.g. ``benchmarks/bench_perf.py timeline``
with a timed app) with the simulated ones (``predict(..., record=True)``), in order —
the schedule's calls equal the core's, call for call — and splits the difference into

* the calls themselves, by kind (forward, adjoint, gradient; plain or batched), and
* the gaps between consecutive calls, labelled by the model operations that lie in
  them ('recv', 'allreduce', 'vec', work by its tag: 'glue', 'head', 'solve',
  'fixed'; or 'none'), plus the stretch before the first call and after the last.

A gap measured much longer than modelled points at something the model leaves out
there (Python-level collectives, message software costs, a slow wake-up); calls
measured slower than modelled point at the calibration.

>>> from braidpy.perf.schedule import Event, Op
>>> model = [Event(0, Op("step", "fwd"), 0.0, 1.0), Event(0, Op("recv", "x"), 1.0, 1.5),
...          Event(0, Op("step", "fwd"), 1.5, 2.5)]
>>> measured = [[Call("fwd", 1, False, 0.0, 1.0), Call("fwd", 1, False, 2.0, 3.0)]]
>>> c = compare_timelines(measured, model, 3.0, 2.5)
>>> c.gaps[0]["recv"]
(1.0, 0.5, 1)
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from typing import Any, Dict, List, Sequence, Tuple

from .schedule import Event

__all__ = ["Call", "Gap", "Comparison", "compare_timelines", "format_comparison",
           "paired", "recording"]

# The step callbacks a recorded app times: (method, tag, batched, argument whose first
# axis counts the states of a batched call).
_TIMED = (("step", "fwd", False, None), ("step_stacked", "fwd", True, 0),
          ("step_stacked_into", "fwd", True, 0), ("step_adjoint", "adj", False, None),
          ("step_adjoint_batch", "adj", True, 0), ("step_adjoint_batch_into", "adj", True, 0),
          ("step_gradient_batch", "grad", True, 0))


@dataclasses.dataclass(frozen=True)
class Call:
    """A step call a rank made: ``tag`` 'fwd', 'adj' or 'grad', ``rows`` states,
    ``batch`` a batched call, from ``start`` to ``end`` seconds (from the gradient's
    start)."""

    tag: str
    rows: int
    batch: bool
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class Gap:
    """The stretch of rank ``rank`` before step call ``index`` (``index`` = number of
    calls: after the last): measured and modelled seconds, and the model's operations
    in it."""

    rank: int
    index: int
    label: str
    measured: float
    model: float


@dataclasses.dataclass
class Comparison:
    """Per rank: ``calls[(tag, batch)]`` and ``gaps[label]`` as (measured s, model s,
    count); ``largest`` the gaps with the largest measured - model, over all ranks."""

    wall: float
    makespan: float
    calls: List[Dict[Tuple[str, bool], Tuple[float, float, int]]]
    gaps: List[Dict[str, Tuple[float, float, int]]]
    largest: List[Gap]


def recording(app_class: type) -> type:
    """A subclass of ``app_class`` whose step callbacks append a :class:`Call` to the
    instance's ``calls`` list (times from ``time.perf_counter``, the machine's monotonic
    clock, which the ranks of one host share). Only callbacks the class has are
    wrapped, so the core sees the same capabilities (batched or not).

    >>> import numpy as np, braidpy
    >>> class Halve(braidpy.App):
    ...     def init(self, t): return np.ones(1)
    ...     def step(self, u, t0, t1, status): return u / 2
    >>> app = recording(Halve)()
    >>> _ = braidpy.Core(app, 0.0, 1.0, 3, options={"max_levels": 1}).solve()
    >>> [(c.tag, c.rows, c.batch) for c in app.calls]
    [('fwd', 1, False), ('fwd', 1, False), ('fwd', 1, False)]
    """
    def timed(name: str, tag: str, batch: bool, rows_arg: Any):
        inner = getattr(app_class, name)

        def method(self, *args):
            start = time.perf_counter()
            try:
                return inner(self, *args)
            finally:
                rows = 1 if rows_arg is None else int(args[rows_arg].shape[0])
                self.__dict__.setdefault("calls", []).append(
                    Call(tag, rows, batch, start, time.perf_counter()))
        method.__name__ = name
        return method

    methods = {name: timed(name, tag, batch, rows) for name, tag, batch, rows in _TIMED
               if callable(getattr(app_class, name, None))}
    return type("Recording" + app_class.__name__, (app_class,), methods)


def _label(ops: Sequence[Event]) -> str:
    # work operations by what they are ('head', 'solve', 'glue', 'fixed')
    kinds = sorted({e.op.tag if e.op.kind == "work" else e.op.kind for e in ops
                    if e.op.kind not in ("send", "step")})
    return "+".join(kinds) if kinds else "none"


def _add(table: Dict, key, measured: float, model: float) -> None:
    m, p, n = table.get(key, (0.0, 0.0, 0))
    table[key] = (m + measured, p + model, n + 1)


def paired(measured: Sequence[Sequence[Call]], model: Sequence[Event], wall: float,
           makespan: float) -> List[Tuple[List[Tuple[Call, Event]], List[Gap]]]:
    """Per rank: its measured calls paired with the model's step events, in order, and
    every gap (before each call, then after the last) with its label. ValueError when
    a rank's calls differ from the model's in number or kind."""
    by_rank: Dict[int, List[Event]] = defaultdict(list)
    for e in model:  # the simulation records each rank's operations in program order
        by_rank[e.rank].append(e)
    out = []
    for r, mine in enumerate(measured):
        events = by_rank.get(r, [])
        steps = [i for i, e in enumerate(events) if e.op.kind == "step"]
        if len(steps) != len(mine):
            raise ValueError(f"rank {r}: {len(mine)} step calls measured, {len(steps)} in "
                             f"the model's schedule")
        pairs: List[Tuple[Call, Event]] = []
        gaps: List[Gap] = []
        prev_m, prev_p, prev_i = 0.0, 0.0, -1
        for k, (call, i) in enumerate(zip(mine, steps)):
            ev = events[i]
            if (call.tag, call.batch) != (ev.op.tag, ev.op.batch):
                raise ValueError(f"rank {r}, call {k}: measured {call.tag}"
                                 f"{' batched' if call.batch else ''}, the model has "
                                 f"{ev.op.tag}{' batched' if ev.op.batch else ''}")
            pairs.append((call, ev))
            gaps.append(Gap(r, k, _label(events[prev_i + 1:i]), call.start - prev_m,
                            ev.start - prev_p))
            prev_m, prev_p, prev_i = call.end, ev.end, i
        gaps.append(Gap(r, len(mine), "end:" + _label(events[prev_i + 1:]), wall - prev_m,
                        makespan - prev_p))
        out.append((pairs, gaps))
    return out


def compare_timelines(measured: Sequence[Sequence[Call]], model: Sequence[Event],
                      wall: float, makespan: float, largest: int = 8) -> Comparison:
    """Pair each rank's measured calls with its simulated step events in order.

    ``measured[r]`` are rank r's calls in the order made, ``model`` the events of
    :attr:`Timeline.events` (each rank's in program order), ``wall`` the measured
    gradient (the stretch after the last call runs to it) and ``makespan`` the simulated
    one. Raises ValueError when a rank's calls differ from the model's in number or kind
    (then the schedule, not the costs, is off).
    """
    calls: List[Dict[Tuple[str, bool], Tuple[float, float, int]]] = []
    gaps: List[Dict[str, Tuple[float, float, int]]] = []
    all_gaps: List[Gap] = []
    for pairs, rank_gaps in paired(measured, model, wall, makespan):
        ctab: Dict[Tuple[str, bool], Tuple[float, float, int]] = {}
        gtab: Dict[str, Tuple[float, float, int]] = {}
        for call, ev in pairs:
            _add(ctab, (call.tag, call.batch), call.end - call.start, ev.end - ev.start)
        for gap in rank_gaps:
            _add(gtab, gap.label, gap.measured, gap.model)
        calls.append(ctab)
        gaps.append(gtab)
        all_gaps += rank_gaps
    top = sorted(all_gaps, key=lambda g: g.measured - g.model, reverse=True)[:largest]
    return Comparison(wall, makespan, calls, gaps, top)


def format_comparison(c: Comparison) -> str:
    """The comparison as a table per rank (ms), then the largest gaps."""
    ms = 1e3
    out = [f"gradient: measured {c.wall * ms:.3f} ms, model {c.makespan * ms:.3f} ms "
           f"({c.makespan / c.wall - 1:+.0%})"]
    for r, (ctab, gtab) in enumerate(zip(c.calls, c.gaps)):
        out.append(f"rank {r}:{'':22s} {'measured':>9s} {'model':>9s} {'diff':>8s} {'n':>4s}")
        rows = [(f"calls {tag}{' batched' if batch else ''}", v)
                for (tag, batch), v in sorted(ctab.items())]
        rows += [(f"gaps {label}", v) for label, v in sorted(gtab.items())]
        for name, (m, p, n) in rows:
            out.append(f"  {name:28s} {m * ms:9.3f} {p * ms:9.3f} {(p - m) * ms:+8.3f} {n:4d}")
        total_m = sum(v[0] for v in ctab.values()) + sum(v[0] for v in gtab.values())
        total_p = sum(v[1] for v in ctab.values()) + sum(v[1] for v in gtab.values())
        out.append(f"  {'total':28s} {total_m * ms:9.3f} {total_p * ms:9.3f} "
                   f"{(total_p - total_m) * ms:+8.3f}")
    out.append("largest gaps the model misses (rank, before call, model operations there):")
    for g in c.largest:
        out.append(f"  rank {g.rank} call {g.index:4d} {g.label:18s} measured "
                   f"{g.measured * ms:7.3f} ms, model {g.model * ms:7.3f} ms")
    return "\n".join(out)
