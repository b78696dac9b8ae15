"""GradientSolver: the primal solve, the objective, the adjoint solve and the gradients."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .. import backends
from .._app import App
from .._errors import ErrorLabels
from .._options import Options
from .._result import Result
from .._solver import Core
from ..parallel.agree import Agreement, agreed
from ..parallel.interrupts import deferred_interrupts
from ..parallel.collectives import allgatherv_counted, ordered_sum
from ..parallel.comm import rank_size
from ..parallel.layers import all_ranges, mirrored_ranges, reversed_comm
from .reversed import ReversedApp
from .status import AdjointStatus, as_slice

__all__ = ["Gradient", "GradientSolver", "gradient", "gradient_groups", "interval_positions",
           "chunk_size", "POSITION_MIN_BYTES"]

# What the reversed app's callbacks call, for error messages.
_ADJOINT_CALLBACKS = {"step": "step_adjoint/running_gradient",
                      "init": "terminal_gradient/running_gradient",
                      "access": "step_gradient"}
_REQUIRED = ("step_adjoint", "step_gradient", "terminal_objective", "terminal_gradient")

OptionsLike = Union[Options, Mapping[str, Any], None]


@dataclasses.dataclass(frozen=True, eq=False)
class Gradient:
    """Outcome of one objective-and-gradient evaluation.

    Attributes
    ----------
    objective : float
        J, on every rank.
    gradients : dict
        {n: step_gradient(...) of step n (from t_n to t_{n+1})} for the steps this rank
        owns (the rank owning t_{n+1}); steps whose step_gradient returned None are absent.
    initial_adjoint : vector or None
        w_0 = dJ/du_0 on the rank owning t_0 (None elsewhere).
    primal, adjoint : Result
        The two MGRIT solves (adjoint residuals are in reversed time).
    comm : the communicator of the solve (for :meth:`total`).
    """

    objective: float
    gradients: Dict[int, Any]
    initial_adjoint: Any
    primal: Result
    adjoint: Result
    comm: Any = dataclasses.field(default=None, repr=False)
    #: With the app's ``postprocess_objective``: S, the sum of the objective's terms
    #: (J = F(S)), and F'(S), the factor of every adjoint source; None without it.
    objective_sum: Optional[float] = None
    objective_diff: Optional[float] = None

    def total(self) -> Optional[np.ndarray]:
        """Sum of all step gradients over all steps and ranks (time-independent
        parameters), added in step order whatever the number of ranks, so the
        result is bitwise the same for any rank count; on every rank (collective)."""
        return ordered_sum([self.gradients[n] for n in sorted(self.gradients)], self.comm)


def _check_adjoint_app(app: Any) -> None:
    for name in ("residual", "full_residual"):
        if callable(getattr(app, name, None)):
            raise TypeError(
                f"{type(app).__name__} defines {name}(): a user residual is not supported "
                f"by the adjoint (gradients assume the plain FAS step u <- Phi(u) + tau)")
    if any(callable(getattr(app, n, None)) for n in ("coarsen", "refine")):
        # XBraid's adjoint has no spatial coarsening either: the adjoint's coarse levels
        # would need the transposes of coarsen and refine.
        raise ValueError(f"{type(app).__name__} coarsens in space (coarsen/refine); the "
                         f"adjoint and training (GradientSolver) do not support spatial "
                         f"coarsening: remove coarsen() and refine() from the app")
    missing = [name for name in _REQUIRED if not callable(getattr(app, name, None))]
    if missing:
        raise TypeError(
            f"{type(app).__name__} cannot be differentiated: it lacks {', '.join(missing)} "
            f"(see braidpy.adjoint for the adjoint callbacks)"
        )
    post = [callable(getattr(app, n, None))
            for n in ("postprocess_objective", "postprocess_objective_diff")]
    if any(post) and not all(post):
        raise TypeError(f"{type(app).__name__} must define both postprocess_objective and "
                        f"postprocess_objective_diff, or neither (the gradient of "
                        f"J = F(S) needs F'(S))")
    running = [callable(getattr(app, n, None)) for n in ("running_objective", "running_gradient")]
    if any(running) and not all(running):
        raise TypeError(f"{type(app).__name__} must define both running_objective and "
                        f"running_gradient, or neither")


def _given(options: OptionsLike, name: str) -> bool:
    """Whether the user chose option ``name`` (a key of a mapping, or a non-default field)."""
    if options is None:
        return False
    if isinstance(options, Options):
        return name in options.changed()
    return name in options


def solve_options(primal: OptionsLike, adjoint: OptionsLike,
                  oneshot: Optional[Sequence[int]]) -> Tuple[Options, Options]:
    """The (primal, adjoint) Options of a GradientSolver, validated once.

    The primal keeps every fine point of its final sweep (``storage="final"``: what
    the adjoint reads); the adjoint's options default to the primal's, and its
    ``access_level`` is braidpy's own. One-shot runs exactly m1 / m2 iterations.
    """
    if _given(primal, "storage") and not Options.coerce(primal).stores_fine_f_points:
        raise ValueError("primal storage must be 'final', 'all' or 0: the adjoint needs every "
                         "state")
    if _given(adjoint, "access_level"):
        raise ValueError("the adjoint's access_level is braidpy's own; leave it out")
    p = Options.coerce(primal)
    a = p.replace(storage="C") if adjoint is None else Options.coerce(adjoint)
    if p.periodic or a.periodic:
        raise ValueError("periodic=True is not supported by the adjoint (GradientSolver, "
                         "gradient): its adjoint would need a periodic terminal condition")
    if p.refine or a.refine:
        raise ValueError("refine=True is not supported by the adjoint (GradientSolver, "
                         "gradient): the adjoint runs on the primal's fixed fine grid")
    if p.delta_rank or a.delta_rank:
        raise ValueError(f"delta_rank={p.delta_rank or a.delta_rank} (Delta correction) is "
                         f"not supported by the adjoint (GradientSolver, gradient), as in "
                         f"XBraid")
    for name in ("richardson", "est_error"):
        if getattr(p, name) or getattr(a, name):
            raise ValueError(f"{name}=True is not supported by the adjoint (GradientSolver, "
                             f"gradient): the adjoint of the extrapolated iteration is not "
                             f"implemented")
    if oneshot is not None:
        if len(oneshot) != 2:
            raise ValueError(f"oneshot must be a pair (m1, m2), got {oneshot!r}")
        m1, m2 = oneshot
        for label, m in (("m1", m1), ("m2", m2)):
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                raise ValueError(f"oneshot {label} must be an int >= 1, got {m!r}")
        p = p.replace(max_iter=m1, abs_tol=0.0, rel_tol=0.0)
        a = a.replace(max_iter=m2, abs_tol=0.0, rel_tol=0.0)
    # "final" keeps the final sweep's F-points without copying them in every relaxation.
    return p.replace(storage="final"), a


class GradientSolver:
    """Objective and gradient by a primal and an adjoint MGRIT solve, reusable.

    Parameters
    ----------
    app : App
        With the adjoint callbacks of :mod:`braidpy.adjoint`.
    tstart, tstop, ntime, comm, times
        As for :class:`braidpy.Core`.
    primal, adjoint : Options or dict, optional
        MGRIT options of each solve (see :class:`braidpy.Options`); the adjoint's
        default to the primal's. The primal always keeps every fine point of its
        final sweep (``storage="final"``); the adjoint's ``access_level`` is
        braidpy's own.
    oneshot : (int, int), optional
        (m1, m2): run exactly m1 primal and m2 adjoint iterations per evaluation, each
        warm-started from the previous evaluation (simultaneous / one-shot
        optimization); the gradient is then inexact and tends to the exact one as
        m1, m2 grow. Without it both solves run to their tolerances.

    Notes
    -----
    Each :meth:`evaluate` warm-starts both solves from the previous one (the state and
    adjoint of a slightly changed parameter are good guesses).

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.adjoint import GradientSolver
    >>> class Decay(braidpy.App):          # u' = -k u, backward Euler, J = u_N^2 / 2
    ...     k = 1.0
    ...     def init(self, t):
    ...         return np.ones(1) if t == self.tstart else np.zeros(1)
    ...     def step(self, u, t0, t1, status):
    ...         u /= 1.0 + self.k * (t1 - t0)
    ...     def step_adjoint(self, w, u, t0, t1, status):
    ...         w /= 1.0 + self.k * (t1 - t0)
    ...     def step_gradient(self, w, u, t0, t1, status):
    ...         dt = t1 - t0
    ...         return -dt * u / (1.0 + self.k * dt) ** 2 * w     # d/dk of the step
    ...     def terminal_objective(self, u):
    ...         return 0.5 * float(u[0] ** 2)
    ...     def terminal_gradient(self, u):
    ...         return u.copy()
    >>> g = GradientSolver(Decay(), 0.0, 1.0, 64, primal=dict(cfactor=4, abs_tol=1e-12))
    >>> result = g.evaluate()
    >>> dJdk = result.total()[0]
    >>> exact = -(1 + 1/64) ** -129                # d/dk of 0.5*(1+k/64)^-128 at k=1
    >>> bool(abs(dJdk - exact) < 1e-10)
    True
    """

    #: Upper bound on the bytes of final adjoint values handed to one
    #: ``step_gradient_batch`` call: the steps of a rank go in chunks of at most this
    #: much (at least one step each), so that the app's temporaries stay a bounded
    #: multiple of it (an H200 ran out of memory with a 1024-layer conv ResNet at
    #: batch 256 in one call). Per-step gradients do not depend on the chunking.
    gradient_chunk_bytes: int = 256 * 2 ** 20
    #: A smaller bound for NumPy states: cache-sized chunks, whose stacked adjoints and
    #: kernel temporaries stay in cache and below malloc's mmap threshold (Peaks, 256
    #: layers of 5000 x 8: the gradients of one step took 80 ms in one call, 64 ms in
    #: chunks of 4 MiB; benchmarks/bench_work_ratio.py).
    host_gradient_chunk_bytes: int = 4 * 2 ** 20

    def __init__(self, app: Any, tstart: float, tstop: float, ntime: int, *, comm: Any = None,
                 times: Optional[Sequence[float]] = None, primal: OptionsLike = None,
                 adjoint: OptionsLike = None, oneshot: Optional[Sequence[int]] = None):
        _check_adjoint_app(app)
        primal_opts, adjoint_opts = solve_options(primal, adjoint, oneshot)
        for which, opts in (("primal", primal_opts), ("adjoint", adjoint_opts)):
            if opts.full_rnorm:
                raise ValueError(f"full_rnorm=True ({which} options) is not supported by "
                                 f"the adjoint")
        self.app = app
        self.comm = comm
        self.ntime = int(ntime)
        self.running = callable(getattr(app, "running_objective", None))
        self.postprocess = callable(getattr(app, "postprocess_objective", None))
        self._post: Tuple[Optional[float], Optional[float]] = (None, None)
        hook = getattr(app, "primal_solved", None)
        self._primal_solved = hook if callable(hook) else None
        self.primal_core = Core(app, tstart, tstop, ntime, comm=comm, times=times,
                                options=primal_opts)
        self.times = self.primal_core.times
        rank, size = rank_size(comm)
        ranges = all_ranges(comm, self.primal_core.owned)
        self._rev_comm = reversed_comm(comm)
        self.reversed_app = ReversedApp(app, self.primal_core, self.running)
        rev_times = self.reversed_app.reversed_times
        # With step_gradient_batch the gradients need every final adjoint value at once:
        # the core keeps the final sweep's values (read with one stored_block call)
        # instead of handing each one to access.
        batch_gradient = self.reversed_app.batch_gradient
        adjoint_opts = adjoint_opts.replace(access_level=0 if batch_gradient else 1,
                                            storage="final" if batch_gradient else "C")
        self.adjoint_core = Core(
            self.reversed_app, float(rev_times[0]), float(rev_times[-1]), self.ntime,
            comm=self._rev_comm, times=rev_times, options=adjoint_opts,
            ownership=mirrored_ranges(ranges, self.ntime) if size > 1 else None,
            labels=ErrorLabels(ranks=tuple(range(size - 1, -1, -1)),
                               callbacks=_ADJOINT_CALLBACKS))
        self.reversed_app.set_strides([lv["fine_stride"] for lv in self.adjoint_core.level_info])
        primal_levels = self.primal_core.level_info
        self._lockstep_stride = primal_levels[1]["fine_stride"] if len(primal_levels) > 1 else 1
        self._batched = self.adjoint_core.batched or batch_gradient
        # objective() may skip the primal's final sweep: nothing reads its F-points (no
        # running objective) and nothing watches them (App's empty access, or none asked).
        self._objective_only_ok = not self.running and (
            primal_opts.access_level == 0 or _inherits_access(app))

    def close(self) -> None:
        """Release both solves' communicators now (also done by garbage collection)."""
        for core in (getattr(self, "adjoint_core", None), getattr(self, "primal_core", None)):
            if core is not None:
                core.close()
        rev, self._rev_comm = getattr(self, "_rev_comm", None), None
        if rev is not None:
            try:
                from mpi4py import MPI

                if not MPI.Is_finalized():
                    rev.Free()
            except Exception:  # noqa: BLE001 - called from __del__, maybe at shutdown
                pass

    def __del__(self):
        self.close()

    def evaluate(self, after_objective: Optional[Callable[[float], None]] = None) -> Gradient:
        """Primal solve, objective, adjoint solve and per-step gradients.

        ``after_objective(J)``, if given, runs on every rank between the objective and
        the adjoint solve: data-parallel training starts averaging what is final by
        then (the loss, the classifier's gradient) while the adjoint runs.
        """
        # A Ctrl-C between the two solves waits for the next agreement point, so that
        # no rank leaves while the others start the adjoint solve (docs/errors.md).
        with deferred_interrupts():
            return self.solve_adjoint(self.solve_primal(), after_objective)

    def solve_primal(self) -> Result:
        """The first half of :meth:`evaluate`: the primal solve alone (warm-started).

        For callers that need the state before they know the terminal condition of
        the adjoint (``braidpy.torch`` runs it in ``forward`` and
        :meth:`solve_adjoint` in ``backward``)."""
        return self.primal_core.solve()

    def solve_adjoint(self, primal: Result,
                      after_objective: Optional[Callable[[float], None]] = None) -> Gradient:
        """The second half of :meth:`evaluate`: objective, adjoint solve and gradients
        for the primal solve ``primal`` (the last one; collective); ``after_objective``
        as in :meth:`evaluate`."""
        with deferred_interrupts():
            return self._solve_adjoint(primal, after_objective)

    def _solve_adjoint(self, primal: Result,
                       after_objective: Optional[Callable[[float], None]]) -> Gradient:
        objective, w_final = self._objective(primal)
        total, diff = self._post
        if after_objective is not None:
            after_objective(objective)
        rev = self.reversed_app
        rev.start_evaluation(self._batched)
        if w_final is not None:
            # The adjoint's initial condition follows the new primal state (a warm
            # restart would otherwise keep the old one).
            self.adjoint_core.set_initial_condition(w_final, copy=False)
        adjoint = self.adjoint_core.solve()
        if rev.batch_gradient:
            self._batched_gradients(adjoint)
        rev.end_evaluation()
        return Gradient(objective, rev.gradients, rev.initial_adjoint, primal, adjoint,
                        self.comm, objective_sum=total, objective_diff=diff)

    def objective(self) -> float:
        """Primal solve and objective only (no adjoint), e.g. for a line search. The
        primal state stays as the warm start of the next evaluation.

        Without a running objective and with App's own (empty) ``access``, the solve
        leaves out its final F-sweep (``Core.solve(final_sweep=False)``): the terminal
        objective reads the last point, a C-point, and the next evaluation starts from
        the C-points, so the sweep's N (1 - 1/cfactor) steps would be thrown away. The
        objective is the same, bit for bit."""
        core = self.primal_core
        return self._objective(core.solve(final_sweep=not self._objective_only_ok))[0]

    def reset(self) -> None:
        """Next evaluation starts both solves cold (from init and a zero adjoint)."""
        self.primal_core.reset_guess()
        self.adjoint_core.reset_guess()

    def _batched_gradients(self, adjoint: Result) -> None:
        """step_gradient_batch over every step this rank owns, agreed across ranks."""
        rev, core, N = self.reversed_app, self.adjoint_core, self.ntime
        owned = core.owned
        with agreed(self.comm, "step_gradient_batch"):
            # The final adjoint values (kept by the core): w_n at adjoint index N - n.
            if N in owned:
                rev.initial_adjoint = self.app.clone(core.stored(N))
            top, lo = min(owned.stop - 1, N - 1), owned.start
            if top >= lo:
                # Steps n = N-1-m, ascending; row k is w_{n_k + 1} = adjoint value at m.
                ns = np.arange(N - 1 - top, N - lo, dtype=np.int64)
                row = core.stored(top)
                host = isinstance(row, np.ndarray)
                limit = self.gradient_chunk_bytes
                if host:
                    limit = min(limit, self.host_gradient_chunk_bytes)
                size = chunk_size(len(ns), _nbytes(row), limit)
                groups = gradient_groups(ns, self._lockstep_stride, _nbytes(row)) \
                    if host else [ns]
                for group in groups:
                    views = self._stored_views(group) if host else None
                    if views is not None:  # nothing copied: one call
                        self._gradient_call(group, *views, adjoint.iterations)
                        continue
                    for a in range(0, len(group), size):
                        part = group[a:a + size]
                        self._gradient_call(part, self._final_adjoints(part),
                                            rev.primal_rows(part, as_slice(part)),
                                            adjoint.iterations)
                rev.gradients = dict(sorted(rev.gradients.items()))

    def _stored_views(self, ns: np.ndarray) -> Optional[Tuple[Any, Any]]:
        """(W, U) for the evenly spaced steps ns as views of the stored values, or None."""
        step = int(ns[1] - ns[0]) if len(ns) > 1 else 1
        n0, m0 = int(ns[0]), self.ntime - 1 - int(ns[0])
        W = self.adjoint_core.stored_view(m0, m0 - step * len(ns), -step)
        U = None if W is None else self.primal_core.stored_view(n0, n0 + step * len(ns), step)
        if U is None:
            return None
        return W, U

    def _final_adjoints(self, ns: np.ndarray) -> Any:
        """The final adjoint values w_{n+1} (adjoint index N-1-n) for the evenly spaced
        steps ns, stacked."""
        core = self.adjoint_core
        ms = self.ntime - 1 - ns
        step = int(ms[1] - ms[0]) if len(ms) > 1 else -1
        W = core.stored_block(int(ms[0]), int(ms[0]) + step * len(ms), step)
        if W is None:  # stacking copies: the stored values stay the core's
            W = backends.stack([core.stored(int(m)) for m in ms])
        return W

    def _gradient_call(self, ns: np.ndarray, W: Any, U: Any, iterations: int) -> None:
        """One step_gradient_batch call for the evenly spaced steps ns (ascending), the
        adjoint values W and primal states U stacked in that order."""
        rev = self.reversed_app
        t0s, t1s = rev.step_times(ns)
        st = AdjointStatus(t0=float(t0s[0]), t1=float(t1s[0]), t=float(t0s[0]), level=0,
                           index=int(ns[0]), fine_index=int(ns[0]), fine_indices=ns,
                           fine_slice=as_slice(ns), indices=ns, batch_size=len(ns),
                           iteration=iterations, done=True, phase="final")
        gs = self.app.step_gradient_batch(W, U, t0s, t1s, st)
        if gs is not None:
            if len(gs) != len(ns):
                raise ValueError(f"step_gradient_batch returned {len(gs)} gradients "
                                 f"for {len(ns)} steps")
            for n, g in zip(ns.tolist(), gs):
                if g is not None:
                    rev.gradients[n] = g

    def _objective(self, primal: Result) -> Tuple[float, Any]:
        """(J on every rank, w_N on the rank owning t_N), agreed across ranks: a
        callback failing on one rank raises there and BraidError elsewhere."""
        core = self.primal_core
        terms: List[Tuple[int, float]] = []  # (index, term); the terminal term is N+1
        w_final = None
        failure: Optional[BaseException] = None
        try:
            if self._primal_solved is not None:  # the app's optional hook
                self._primal_solved()
            if self.running:
                for i in primal.owned:
                    t = self.times[i]
                    st = AdjointStatus(t=t, t0=t, t1=t, level=0, index=i, fine_index=i,
                                       ntime=self.ntime, phase="objective")
                    terms.append((i, float(self.app.running_objective(core.stored(i), t, st))))
            if self.ntime in primal.owned:
                terms.append((self.ntime + 1,
                               float(self.app.terminal_objective(core.stored(self.ntime)))))
                if not self.postprocess:
                    w_final = self.reversed_app.terminal_adjoint()
        except BaseException as error:  # noqa: BLE001 - a Ctrl-C too, as in agreed()
            failure = error
        # One exchange agrees on the terms' evaluation and says how many each rank has.
        try:
            counts = Agreement(self.comm, "objective evaluation").settle_gathering(
                failure, [len(terms)])[:, 0].tolist()
        finally:
            del failure  # no exception <-> frame cycle (braidpy.parallel.agree)
        # Added in index order on every rank: the same bits for any rank count.
        total = 0.0
        for _, value in sorted(_all_terms(self.comm, terms, counts)):
            total += value
        self._post = (None, None)
        if not self.postprocess:
            return total, w_final
        # J = F(S) (XBraid's braid_SetPostprocessObjective); F'(S) scales the adjoint's
        # sources, so the terminal adjoint is formed once it is known.
        with agreed(self.comm, "postprocess objective"):
            objective = float(self.app.postprocess_objective(total))
            diff = float(self.app.postprocess_objective_diff(total))
            self.reversed_app.source_scale = diff
            if self.ntime in primal.owned:
                w_final = self.reversed_app.terminal_adjoint()
        self._post = (total, diff)
        return objective, w_final


#: Bytes of states per interval position below which the gradient calls are not split
#: by position (braidpy.adjoint.gradient_groups): a call then costs more than stacking.
POSITION_MIN_BYTES = 2 ** 20


def gradient_groups(ns: np.ndarray, cf: int, state_bytes: Optional[int]) -> List[np.ndarray]:
    """The steps ns of GradientSolver's ``step_gradient_batch`` calls for NumPy states:
    by position in the level-0 intervals (:func:`interval_positions`) where a position
    holds at least POSITION_MIN_BYTES of states of ``state_bytes`` each, else all at
    once (small states: a call costs more than stacking them; thousands of one-sample
    states took 2-3 ms more per gradient in cf 16 positions).

    >>> [len(g) for g in gradient_groups(np.arange(64), 4, 2 ** 20)]
    [16, 16, 16, 16]
    >>> [len(g) for g in gradient_groups(np.arange(64), 4, 64)]
    [64]
    """
    if state_bytes is None or len(ns) * state_bytes < max(cf, 1) * POSITION_MIN_BYTES:
        return [ns] if len(ns) else []
    return interval_positions(ns, cf)


def interval_positions(ns: np.ndarray, cf: int) -> List[np.ndarray]:
    """The ascending steps ns split by their position in the level-0 intervals of
    cfactor cf (n mod cf; one group for cf <= 1), positions ascending, empty ones left
    out: GradientSolver's ``step_gradient_batch`` calls for NumPy states, one group (or
    its chunks) each. A lock-step F-sweep stores the states of one position as the rows
    of one block, so a group of F-points is read in place (Core.stored_view) instead of
    being stacked, which had cost a quarter of a Peaks one-shot gradient.

    >>> [g.tolist() for g in interval_positions(np.arange(3, 10), 4)]
    [[4, 8], [5, 9], [6], [3, 7]]
    """
    if cf <= 1:
        return [ns] if len(ns) else []
    return [group for group in (ns[ns % cf == r] for r in range(cf)) if len(group)]


def _inherits_access(app: Any) -> bool:
    """Whether app's access is braidpy.App's own, which does nothing."""
    return isinstance(app, App) and type(app).access is App.access and \
        "access" not in getattr(app, "__dict__", {})


def _nbytes(state: Any) -> Optional[int]:
    """Bytes of one state (None where the array does not say)."""
    total = getattr(state, "nbytes", None)
    return None if total is None else int(total)


def chunk_size(nsteps: int, row_bytes: Optional[int], limit: int) -> int:
    """Steps per step_gradient_batch call: as many as fit ``limit`` bytes, at least 1.

    >>> chunk_size(1024, 13 * 2**20, 256 * 2**20), chunk_size(1024, 2048, 256 * 2**20)
    (19, 1024)
    >>> chunk_size(5, None, 1)
    5
    """
    if row_bytes is None or row_bytes <= 0:
        return nsteps
    return max(1, min(nsteps, limit // row_bytes))


def _all_terms(comm: Any, terms: List[Tuple[int, float]],
               counts: Sequence[int]) -> List[Tuple[int, float]]:
    """Every rank's (index, value) terms, ``counts[r]`` of them on rank r (collective):
    one gather of int64 pairs, the value as the bits of its float64, so it arrives
    bit for bit.

    >>> _all_terms(None, [(3, 0.1), (5, -2.5)], [2])
    [(3, 0.1), (5, -2.5)]
    """
    pairs = np.empty((len(terms), 2), dtype=np.int64)
    pairs[:, 0] = [i for i, _ in terms]
    pairs[:, 1] = np.array([v for _, v in terms], dtype=np.float64).view(np.int64)
    every = allgatherv_counted(comm, pairs.reshape(-1), [2 * int(n) for n in counts],
                               np.int64).reshape(-1, 2)
    return list(zip(every[:, 0].tolist(), every[:, 1].copy().view(np.float64).tolist()))


def gradient(app: Any, tstart: float, tstop: float, ntime: int, *, comm: Any = None,
             primal: OptionsLike = None, adjoint: OptionsLike = None) -> Gradient:
    """Objective and exact (to tolerance) gradient in one call; see :class:`GradientSolver`."""
    return GradientSolver(app, tstart, tstop, ntime, comm=comm, primal=primal,
                          adjoint=adjoint).evaluate()
