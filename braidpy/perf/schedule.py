"""The task graph of an MGRIT solve, rank by rank, and its critical path.

braidpy's compiled core (csrc/core: drive.cpp, relax.cpp, restrict.cpp, interp.cpp,
grid.cpp) runs the same program on every rank of the time communicator: step calls on
each level, non-blocking sends to the right neighbour, blocking receives from the left
one, and an allreduce at the end of every iteration. :func:`solve_program` writes that
program down as a list of operations per rank, in the order the core issues them, for
given MGRIT settings (:class:`Cycle`); :func:`simulate` runs the programs with a cost per
operation and returns the critical path (the time at which the last rank finishes: the
longest path through the graph whose edges are program order on each rank and messages
between ranks). This is the layer-parallel part of the performance model of Dryden et
al. ("Improving strong-scaling of CNN training by exploiting finer-grained parallelism",
IEEE IPDPS 2019, sec. V), built on XBraid's cycle as docs/conventions.md states it.

Counting is exact: the step calls (and the states of batched calls) of each rank equal
those that :meth:`braidpy.Core.counts` reports after a real solve with the same settings
(tests/test_perf_schedule.py checks this at 1 to 4 ranks).

Examples
--------
>>> cyc = Cycle(ntime=8, max_levels=2, cfactor=2)
>>> progs = solve_program(cyc, nranks=1, iterations=1)
>>> program_counts(progs[0])["step"]  # FCF 8, F-sweep to the C-points 8, coarse 4 + 4, final 4
28
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import defaultdict, deque
from typing import Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["Cycle", "NRELAX", "RELAX_NAMES", "Op", "Level", "hierarchy", "block_ranges",
           "solve_program",
           "program_counts", "simulate", "Timeline", "Event", "PHASES"]

PerLevel = Union[int, Mapping[int, int]]

#: Operation kinds of a program: a step call (``rows`` states in one call), a send to
#: rank ``peer``, a receive from rank ``peer``, an allreduce over all ranks, and
#: ``vec`` (``rows`` vector operations: copies and sums of one state).
PHASES = ("step", "send", "recv", "allreduce", "vec", "work")


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation of a rank's program.

    ``kind`` is one of :data:`PHASES`; ``tag`` names what is computed (for steps:
    'fwd', 'adj', 'grad' or a user label) or the message stream; ``level`` the MGRIT
    level; ``rows`` the states of a batched call (1: a plain call); ``peer`` the other
    rank of a message; ``seconds`` the fixed cost of a 'work' operation.
    """

    kind: str
    tag: str = "fwd"
    level: int = 0
    rows: int = 1
    peer: int = -1
    seconds: float = 0.0
    batch: bool = False


#: MGRIT's nrelax of each relaxation name (braidpy.train.RELAXATIONS, which braidpy.perf
#: does not import) and back.
NRELAX: Dict[str, int] = {"F": 0, "FCF": 1, "FCFCF": 2}
RELAX_NAMES: Dict[int, str] = {n: name for name, n in NRELAX.items()}


@dataclasses.dataclass(frozen=True)
class Cycle:
    """The MGRIT settings that shape the schedule (braidpy.Options' names).

    Parameters
    ----------
    ntime : int
        Fine intervals (layers).
    max_levels, min_coarse, cfactor, nrelax : int
        As in :class:`braidpy.Options` (``cfactor`` and ``nrelax`` may be per level).
    skip, fmg, fmg_vcycles, nfmg, seq_soln, final_fc_relax
        As in :class:`braidpy.Options`.
    batched : bool
        Whether the app has a batched step and ``Options.batch`` is on: F-relaxation
        then advances all chains of a rank in lock-step, one call per position.
    """

    ntime: int
    max_levels: int = 2
    cfactor: PerLevel = 4
    nrelax: PerLevel = 1
    min_coarse: int = 2
    skip: bool = False
    fmg: bool = False
    fmg_vcycles: int = 1
    nfmg: int = -1
    seq_soln: bool = False
    final_fc_relax: bool = False
    batched: bool = False

    def __post_init__(self):
        for name, low in (("ntime", 1), ("max_levels", 1), ("min_coarse", 0),
                          ("fmg_vcycles", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        for name, low in (("cfactor", 2), ("nrelax", 0)):
            value = getattr(self, name)
            values = value.values() if isinstance(value, Mapping) else [value]
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or v < low:
                    raise ValueError(f"{name} must be an int >= {low} (or a dict of them), "
                                     f"got {value!r}")

    def cfactor_at(self, level: int) -> int:
        c = self.cfactor
        if isinstance(c, Mapping):
            return int(c.get(level, c.get(-1, 2)))
        return int(c)

    def nrelax_at(self, level: int) -> int:
        r = self.nrelax
        if isinstance(r, Mapping):
            return int(r.get(level, r.get(-1, 1)))
        return int(r)


Range = Tuple[int, int]  # (lo, hi); empty when hi < lo


def block_ranges(npoints: int, nranks: int) -> List[Range]:
    """XBraid's block distribution of ``npoints`` points (grid.cpp's block_range).

    >>> block_ranges(9, 2)
    [(0, 4), (5, 8)]
    """
    quo, rem = divmod(npoints, nranks)
    return [(p * quo + min(p, rem), (p + 1) * quo + min(p + 1, rem) - 1)
            for p in range(nranks)]


@dataclasses.dataclass
class Level:
    """One level of the hierarchy: ``n`` intervals, coarsening factor ``cf`` (n + 1
    on the coarsest level: only point 0 is a C-point) and every rank's range."""

    n: int
    cf: int
    ranges: List[Range]
    nrelax: int

    def is_c(self, i: int) -> bool:
        return i % self.cf == 0

    def c_at_or_after(self, i: int) -> int:
        return -(-i // self.cf) * self.cf

    def neighbours(self, rank: int) -> Tuple[int, int]:
        """(left, right): the nearest ranks with points on this level (-1: none)."""
        lo, hi = self.ranges[rank]
        if hi < lo:
            return -1, -1
        left = next((p for p in range(rank - 1, -1, -1) if not _empty(self.ranges[p])), -1)
        right = next((p for p in range(rank + 1, len(self.ranges))
                      if not _empty(self.ranges[p])), -1)
        return left, right


def _empty(r: Range) -> bool:
    return r[1] < r[0]


def hierarchy(cycle: Cycle, nranks: int, ranges: Optional[Sequence[Range]] = None
              ) -> List[Level]:
    """The levels of ``cycle`` over ``nranks`` ranks (grid.cpp's build_hierarchy): the
    fine grid in blocks (or ``ranges``), each coarse range the coarse points whose fine
    counterparts the rank owns.

    >>> [lv.n for lv in hierarchy(Cycle(ntime=1024, max_levels=30, cfactor=4), 1)]
    [1024, 256, 64, 16, 4]
    """
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"nranks must be an int >= 1, got {nranks!r}")
    fine = list(ranges) if ranges is not None else block_ranges(cycle.ntime + 1, nranks)
    if len(fine) != nranks:
        raise ValueError(f"ranges: {len(fine)} ranges for {nranks} ranks")
    levels = [Level(cycle.ntime, 0, fine, 0)]
    if cycle.ntime > cycle.min_coarse:
        l = 0
        while True:
            cf = cycle.cfactor_at(l)
            nc = levels[l].n // cf
            if not (nc > 0 and nc >= cycle.min_coarse and l + 1 < cycle.max_levels):
                break
            levels[l].cf = cf
            coarse = [((lo + cf - 1) // cf, hi // cf) if hi >= lo else (0, -1)
                      for lo, hi in levels[l].ranges]
            levels.append(Level(nc, 0, coarse, 0))
            l += 1
    levels[-1].cf = levels[-1].n + 1
    for l, lv in enumerate(levels):
        lv.nrelax = cycle.nrelax_at(l)
    return levels


class _Writer:
    """Writes one rank's operations in the order the compiled core issues them."""

    def __init__(self, levels: List[Level], rank: int, batched: bool, tag: str,
                 peer: Callable[[int], int], stream: str):
        self.levels = levels
        self.rank = rank
        self.batched = batched
        self.tag = tag
        self.peer = peer  # rank of this communicator -> rank of the world
        self.stream = stream
        self.ops: List[Op] = []

    # -- primitives
    def step(self, l: int, rows: int = 1, batch: bool = False) -> None:
        self.ops.append(Op("step", self.tag, l, rows, batch=batch))

    def vec(self, l: int, count: int) -> None:
        if count > 0:
            self.ops.append(Op("vec", self.tag, l, count))

    def msg_out(self, l: int, dst: int, what: str) -> None:
        self.ops.append(Op("send", f"{self.stream}/{what}{l}", l, 1, self.peer(dst)))

    def msg_in(self, l: int, src: int, what: str) -> None:
        self.ops.append(Op("recv", f"{self.stream}/{what}{l}", l, 1, self.peer(src)))

    def collective(self, what: str) -> None:
        self.ops.append(Op("allreduce", f"{self.stream}/{what}"))

    # -- relaxation (relax.cpp)
    def batch_sweep(self, L: Level, recv_left: bool) -> bool:
        lo, hi = L.ranges[self.rank]
        if not self.batched or hi < lo:
            return False
        c_first = L.c_at_or_after(lo)
        chains = ((hi - 1 - c_first) // L.cf + 1 if c_first < hi else 0) + int(recv_left)
        return chains >= 2

    def f_relax(self, l: int, want_end: bool, what: str = "relax") -> None:
        L = self.levels[l]
        lo, hi = L.ranges[self.rank]
        if hi < lo:
            return
        left, right = L.neighbours(self.rank)
        send_right = right >= 0 and (not L.is_c(L.ranges[right][0]) or want_end)
        recv_left = left >= 0 and (not L.is_c(lo) or want_end)
        if self.batch_sweep(L, recv_left):
            self.lockstep(l, send_right, recv_left, want_end, what)
        else:
            self.chains(l, send_right, recv_left, want_end, what)

    def chains(self, l: int, send_right: bool, recv_left: bool, end: bool, what: str) -> None:
        L = self.levels[l]
        lo, hi = L.ranges[self.rank]
        left, right = L.neighbours(self.rank)
        cf = L.cf
        if send_right and L.is_c(hi):
            self.msg_out(l, right, what)

        def run_chain(s: int) -> None:
            next_c = (s // cf + 1) * cf
            stop = min(next_c - 1, hi)
            for _ in range(s + 1, stop + 1):
                self.step(l)
            if send_right and stop == hi and not L.is_c(hi):
                self.msg_out(l, right, what)
            if end and next_c <= hi:
                self.step(l)

        c_first = L.c_at_or_after(lo)
        c_last = (hi // cf) * cf
        last_first = lo <= c_last < hi
        if last_first:
            self.vec(l, 1)  # the working copy of the chain's C-value
            run_chain(c_last)
        for c in range(c_first, hi, cf):
            if last_first and c == c_last:
                continue
            self.vec(l, 1)
            run_chain(c)
        if recv_left:
            self.msg_in(l, left, what)
            if not L.is_c(lo):
                run_chain(lo - 1)
            else:
                self.step(l)

    def lockstep_chains(self, l: int, send_right: bool, recv_left: bool, what: str,
                        rows_out: Optional[List[int]] = None) -> None:
        L = self.levels[l]
        lo, hi = L.ranges[self.rank]
        left, right = L.neighbours(self.rank)
        cf = L.cf
        if send_right and L.is_c(hi):
            self.msg_out(l, right, what)
        base: List[int] = []
        kfirst: List[int] = []
        klast: List[int] = []

        def add(s: int) -> None:
            b = (s // cf) * cf
            base.append(b)
            kfirst.append(s - b + 1)
            klast.append(min(b + cf - 1, hi) - b)

        if recv_left:
            add(lo - 1)
        for c in range(L.c_at_or_after(lo), hi, cf):
            add(c)
        m = len(base)
        self.vec(l, m)  # clone_block
        received = not recv_left
        kmax = max(klast) if m else 0
        for k in range(1, kmax + 1):
            active = [r for r in range(m) if kfirst[r] <= k <= klast[r]]
            if not active:
                continue
            if not received and active[0] == 0:
                self.msg_in(l, left, what)
                received = True
            self.step(l, len(active), True)
            for r in active:
                if send_right and base[r] + k == hi and not L.is_c(hi):
                    self.msg_out(l, right, what)
        if not received:
            self.msg_in(l, left, what)
        if rows_out is not None:
            rows_out.extend(base)

    def lockstep(self, l: int, send_right: bool, recv_left: bool, end: bool,
                 what: str) -> None:
        L = self.levels[l]
        hi = L.ranges[self.rank][1]
        base: List[int] = []
        self.lockstep_chains(l, send_right, recv_left, what, base)
        if end:
            ends = sum(1 for b in base if b + L.cf <= hi)
            if ends:
                self.step(l, ends, True)

    def relax(self, l: int) -> None:
        for _ in range(self.levels[l].nrelax):
            self.f_relax(l, True)

    # -- restriction (restrict.cpp) and interpolation (interp.cpp)
    def restrict_to(self, l: int) -> None:
        self.f_relax(l, True)
        C = self.levels[l + 1]
        clo, chi = C.ranges[self.rank]
        if chi < clo:
            return
        left, right = C.neighbours(self.rank)
        npts = chi - clo + 1
        self.vec(l, 2 * npts)  # residuals at the fine C-points
        self.vec(l + 1, 2 * npts)  # injection: v and the coarse guess
        if right >= 0:
            self.msg_out(l + 1, right, "inject")
        nparts = chi - clo + (1 if left >= 0 else 0)
        if self.batched and nparts >= 2:
            if left >= 0:
                self.msg_in(l + 1, left, "inject")
            self.step(l + 1, nparts, True)
        else:
            for _ in range(chi, clo, -1):
                self.step(l + 1)
            if left >= 0:
                self.msg_in(l + 1, left, "inject")
                self.step(l + 1)
        self.vec(l + 1, 2 * nparts)  # tau

    def interp_from(self, l: int) -> None:
        self.f_relax(l, False)
        C = self.levels[l]
        clo, chi = C.ranges[self.rank]
        self.vec(l, 2 * max(chi - max(clo, 1) + 1, 0))  # the corrections

    def cycle(self, skip_down: bool, fcycle: bool, fmg_vcycles: int) -> None:
        L = len(self.levels)
        if skip_down:
            for l in range(L - 1):
                clo, chi = self.levels[l + 1].ranges[self.rank]
                self.vec(l + 1, 2 * max(chi - clo + 1, 0))
        else:
            for l in range(L - 1):
                self.relax(l)
                self.restrict_to(l)
        if not fcycle:
            for l in range(L - 1, 0, -1):
                self.interp_from(l)
            return
        self.interp_from(L - 1)
        for l in range(L - 2, 0, -1):
            for _ in range(fmg_vcycles):
                for m in range(l, L - 1):
                    self.relax(m)
                    self.restrict_to(m)
                for m in range(L - 1, l, -1):
                    self.interp_from(m)
            self.interp_from(l)

    # -- the final F-sweep (drive.cpp's final_relax)
    def final_relax(self, final_fc_relax: bool, sweep: bool = True) -> None:
        if final_fc_relax:
            self.f_relax(0, True)
        L = self.levels[0]
        lo, hi = L.ranges[self.rank]
        left, right = L.neighbours(self.rank)
        if not sweep and L.is_c(L.n):
            return  # Core.solve(final_sweep=False): the last point is kept, no steps
        if self.batch_sweep(L, left >= 0):
            self.lockstep_chains(0, right >= 0, left >= 0, "final")
        elif hi >= lo:
            self.final_chains()

    def final_chains(self) -> None:
        L = self.levels[0]
        lo, hi = L.ranges[self.rank]
        left, right = L.neighbours(self.rank)
        cf = L.cf
        send_right = right >= 0
        c_first = L.c_at_or_after(lo)
        c_last = (hi // cf) * cf
        sent = False
        if send_right and L.is_c(hi):
            self.msg_out(0, right, "final")
            sent = True
        if send_right and not sent and c_last >= lo and (left >= 0 or c_first < c_last):
            # The interval reaching the last owned point, ahead of the others, once more.
            for _ in range(c_last + 1, hi + 1):
                self.step(0)
            self.msg_out(0, right, "final")
            sent = True

        def chain(s: int) -> None:
            nonlocal sent
            stop = min((s // cf + 1) * cf - 1, hi)
            for _ in range(s + 1, stop + 1):
                self.step(0)
            if send_right and not sent and stop == hi:
                self.msg_out(0, right, "final")
                sent = True

        if left >= 0:
            self.msg_in(0, left, "final")
            if not L.is_c(lo):
                chain(lo - 1)
        for c in range(c_first, hi + 1, cf):
            if c < hi:
                chain(c)

    def seq_sweep(self) -> None:
        """seq_soln: one F-sweep of level 0 as if its only C-point were 0."""
        L = self.levels[0]
        saved = L.cf
        L.cf = L.n + 1
        try:
            self.f_relax(0, False, "init")
        finally:
            L.cf = saved


def solve_program(cycle: Cycle, nranks: int, iterations: int, *, tag: str = "fwd",
                  ranges: Optional[Sequence[Range]] = None, cold: bool = False,
                  world: Optional[Sequence[int]] = None, stream: str = "primal",
                  final_sweep: bool = True) -> List[List[Op]]:
    """Every rank's operations of one solve of ``iterations`` MGRIT iterations
    (Core.solve: the initial guess, the cycles with an allreduce at each iteration's
    end, the final F-sweep), as the compiled core issues them. ``final_sweep=False``:
    ``Core.solve(final_sweep=False)``, a line-search trial's state solve (no final
    F-sweep where the last point is a C-point).

    Parameters
    ----------
    cycle : Cycle
    nranks : int
        Ranks of the time communicator.
    iterations : int
        MGRIT iterations (a measured count, or max_iter / m1 / m2 of one-shot).
    tag : str
        Label of the step operations ('fwd' primal, 'adj' adjoint).
    ranges : list of (lo, hi), optional
        Fine points per rank (default: XBraid's blocks; the adjoint's are mirrored).
    cold : bool
        A first solve (init at the C-points; skip and seq_soln apply). Otherwise a
        warm start from the previous solve, as in training after the first step.
    world : list of int, optional
        world[q] is the world rank of this communicator's rank q (default: q); the
        programs are returned in world order.
    stream : str
        Prefix of this solve's message tags.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an int >= 0, got {iterations!r}")
    levels = hierarchy(cycle, nranks, ranges)
    to_world = list(world) if world is not None else list(range(nranks))
    progs: List[List[Op]] = [[] for _ in range(nranks)]
    nl = len(levels)
    for q in range(nranks):
        w = _Writer(levels, q, cycle.batched, tag, lambda r: to_world[r], stream)
        lo, hi = levels[0].ranges[q]
        if cold:
            nc = len(range(levels[0].c_at_or_after(lo), hi + 1, levels[0].cf)) if hi >= lo else 0
            w.vec(0, nc)  # init
            if cycle.seq_soln:
                w.seq_sweep()
        w.collective("agree")
        if nl > 1:
            for k in range(iterations):
                skip_down = k == 0 and cycle.skip and cold and not cycle.seq_soln
                w.cycle(skip_down, cycle.fmg and cycle.nfmg != k, cycle.fmg_vcycles)
                w.collective("top")
        w.final_relax(cycle.final_fc_relax, final_sweep)
        w.collective("agree")
        progs[to_world[q]] = w.ops
    return progs


def program_counts(ops: Sequence[Op], tag: Optional[str] = None) -> Dict[str, int]:
    """Step calls ('step': plain calls, 'step_batch': batched calls,
    'step_batch_items': their states), messages and allreduces of one program, as
    :meth:`braidpy.Core.counts` names them; ``tag`` keeps one kind of step only."""
    out: Dict[str, int] = defaultdict(int)
    for op in ops:
        if op.kind == "step" and (tag is None or op.tag == tag):
            if not op.batch:
                out["step"] += op.rows
            else:
                out["step_batch"] += 1
                out["step_batch_items"] += op.rows
        elif op.kind in ("send", "recv", "allreduce"):
            out[op.kind] += 1
    return dict(out)


@dataclasses.dataclass(frozen=True)
class Event:
    """One operation of a simulated rank: it ran (a step, 'vec' or 'work'), waited (a
    receive until its message arrived, an allreduce until the last rank reached it) or
    was issued (a send: ``start == end``) from ``start`` to ``end`` seconds."""

    rank: int
    op: Op
    start: float
    end: float


@dataclasses.dataclass
class Timeline:
    """The outcome of :func:`simulate`.

    Attributes
    ----------
    makespan : float
        The critical path: when the last rank finishes (seconds).
    finish : list of float
        When each rank finishes.
    busy : list of dict
        Per rank, seconds spent in each operation kind (step by tag, 'vec', 'comm').
    path : dict
        The critical path split into the same parts (they add up to ``makespan``).
    events : list of Event
        Every operation of every rank with its start and end, in the order simulated
        (only when :func:`simulate` was asked to ``record``; else empty).
    """

    makespan: float
    finish: List[float]
    busy: List[Dict[str, float]]
    path: Dict[str, float]
    events: List[Event] = dataclasses.field(default_factory=list)


CostFn = Callable[[Op], float]
MessageFn = Callable[[Op], float]


def simulate(programs: Sequence[Sequence[Op]], cost: CostFn, message: MessageFn,
             allreduce: Callable[[Op, int], float], *, record: bool = False) -> Timeline:
    """Run the programs with the given costs: ``cost(op)`` of a 'step', 'vec' or
    'work' operation, ``message(op)`` the time from a send to the matching receive
    (latency plus size over bandwidth), ``allreduce(op, nranks)`` the time of an
    allreduce once the last rank has reached it. Sends do not block (MPI_Isend);
    messages between two ranks with one tag arrive in order (MPI's non-overtaking
    rule). Returns the :class:`Timeline`, whose ``makespan`` is the critical path;
    ``record`` keeps every operation's start and end in ``Timeline.events`` (to set
    beside a measured run's, as ``benchmarks/bench_perf.py timeline`` does).
    """
    events: List[Event] = []
    n = len(programs)
    t = [0.0] * n
    path: List[Dict[str, float]] = [defaultdict(float) for _ in range(n)]
    busy: List[Dict[str, float]] = [defaultdict(float) for _ in range(n)]
    pc = [0] * n
    queues: Dict[Tuple[int, int, str], Deque[Tuple[float, Dict[str, float]]]] = \
        defaultdict(deque)
    waiting: Dict[int, Tuple[float, int]] = {}  # rank -> arrived at the i-th allreduce
    reduced = [0] * n
    # Ranks whose next operation can run, ordered by their clock (any order is correct:
    # a rank runs until it waits; this one just keeps the program cheap).
    ready = [(0.0, p) for p in range(n)]
    heapq.heapify(ready)
    blocked: Dict[Tuple[int, int, str], int] = {}
    while ready:
        _, p = heapq.heappop(ready)
        ops = programs[p]
        while pc[p] < len(ops):
            op = ops[pc[p]]
            if op.kind in ("step", "vec", "work"):
                c = cost(op)
                if record:
                    events.append(Event(p, op, t[p], t[p] + c))
                key = op.tag if op.kind in ("step", "work") else op.kind
                t[p] += c
                path[p][key] += c
                busy[p][key] += c
            elif op.kind == "send":
                qk = (p, op.peer, op.tag)
                dt = message(op)
                snap = dict(path[p])
                snap["comm"] = snap.get("comm", 0.0) + dt
                queues[qk].append((t[p] + dt, snap))
                if record:
                    events.append(Event(p, op, t[p], t[p]))
                if qk in blocked:
                    r = blocked.pop(qk)
                    heapq.heappush(ready, (t[r], r))
            elif op.kind == "recv":
                qk = (op.peer, p, op.tag)
                if not queues[qk]:
                    blocked[qk] = p
                    break
                arrival, snap = queues[qk].popleft()
                if record:
                    events.append(Event(p, op, t[p], max(t[p], arrival)))
                if arrival > t[p]:
                    t[p] = arrival
                    path[p] = defaultdict(float, snap)
            elif op.kind == "allreduce":
                idx = reduced[p]
                waiting[p] = (t[p], idx)
                if len(waiting) < n or any(i != idx for _, i in waiting.values()):
                    break
                # Everyone is here: all leave together.
                last = max(waiting, key=lambda r: waiting[r][0])
                done = waiting[last][0] + allreduce(op, n)
                snap = dict(path[last])
                snap["comm"] = snap.get("comm", 0.0) + done - waiting[last][0]
                for r in list(waiting):
                    if record:
                        events.append(Event(r, op, waiting[r][0], done))
                    t[r] = done
                    path[r] = defaultdict(float, snap)
                    reduced[r] += 1
                    pc[r] += 1
                    if r != p:
                        heapq.heappush(ready, (t[r], r))
                waiting.clear()
                continue
            else:
                raise ValueError(f"unknown operation kind {op.kind!r}")
            pc[p] += 1
    stuck = [p for p in range(n) if pc[p] < len(programs[p])]
    if stuck:
        p = stuck[0]
        raise RuntimeError(f"the programs deadlock: rank {p} waits at operation "
                           f"{programs[p][pc[p]]} (a schedule bug)")
    end = max(range(n), key=lambda r: t[r]) if n else 0
    return Timeline(makespan=max(t) if n else 0.0, finish=list(t),
                    busy=[dict(b) for b in busy], path=dict(path[end]) if n else {},
                    events=events)
