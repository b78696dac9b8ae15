"""Adjoint MGRIT: objective and gradients of a time-stepping problem.

The primal problem is u_{n+1} = Phi_n(u_n; theta_n), n = 0..N-1, and the objective is

    J = sum_{i=0..N} f_i(u_i)  +  g(u_N)

(running terms f optional, terminal term g required). The adjoint variables solve,
backwards in time,

    w_N = dg/du(u_N) + df_N/du(u_N),     w_n = (dPhi_n/du)(u_n)^T w_{n+1} + df_n/du(u_n),

and the gradient with respect to the parameters of step n is
(dPhi_n/dtheta)(u_n)^T w_{n+1}. The adjoint system is linear in w; braidpy solves it
with the same MGRIT machinery on the reversed time grid, with the primal trajectory
(stored at every fine point on the rank that owns it) held fixed. Coarse levels use
the primal state at the coarse point and the coarse step size.

The app provides, beyond ``init`` and ``step``:

``step_adjoint(w, u, t0, t1, status)``
    w <- (dPhi/du)(u)^T w, the vector-Jacobian product of the step from t0 to t1,
    where u (read-only) is the primal state at t0. In place, or return a new w.
``step_gradient(w, u, t0, t1, status)``
    Return (dPhi/dtheta)(u)^T w for the parameters used by this step (any object, or
    None if you accumulate yourself). w and u are read-only.
``terminal_objective(u)`` -> float and ``terminal_gradient(u)`` -> vector
    g(u_N) and dg/du(u_N).
``running_objective(u, t, status)`` -> float and ``running_gradient(u, t, status)``
    Optional running terms f_i and df_i/du (vector or None for zero).
``adjoint_guess(n)`` -> vector or None
    Optional: the guess of w_n used when the adjoint solve starts cold (default
    zero); lets an interrupted one-shot optimization resume from saved adjoints.

Optional batched versions (array states; used unless the adjoint's ``batch=False``;
docs/batching.md):

``step_adjoint_batch(W, U, t0s, t1s, status)``
    m adjoint steps at once: W and U stacked (m, *state shape), row k from t0s[k] to
    t1s[k] (float64 arrays), ``status.fine_indices`` the forward fine index of each
    t0. Update W in place or return a new stacked array.
``step_gradient_batch(W, U, t0s, t1s, status)``
    The gradients of m steps at once (all the steps this rank owns, once per
    evaluation, after the adjoint solve): return a sequence of m per-step gradients
    (entries may be None), or None if you accumulate yourself.

Adjoint vectors use the app's clone/sum/norm/bufpack/bufunpack, so they must live in
the same space as the states.
"""

from __future__ import annotations

import weakref
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from . import backends
from ._app import App
from ._errors import BraidError
from ._options import Options
from ._result import Result
from ._solver import Core

__all__ = ["AdjointStatus", "Gradient", "GradientSolver", "gradient", "ordered_sum"]

# What the wrapper's callbacks call, for error messages.
_ADJOINT_CALLBACKS = {"step": "step_adjoint/running_gradient",
                      "init": "terminal_gradient/running_gradient",
                      "access": "step_gradient"}
_REQUIRED = ("step_adjoint", "step_gradient", "terminal_objective", "terminal_gradient")


class AdjointStatus:
    """What adjoint callbacks are told, in forward time (read-only by convention).

    Attributes: t0, t1 (forward step), t (access/running terms), level, index and
    fine_index (both the forward fine index of t0), iteration, done,
    tol, rnorm, phase ('init', 'relax', 'residual', 'final' or 'objective');
    in batched calls also fine_indices and indices (int64 arrays, forward fine
    index of each t0; t0/t1/index/fine_index then describe the first item),
    fine_slice (the same indices as an evenly spaced slice, step possibly
    negative, or None) and
    batch_size (0 outside batched calls).
    """

    __slots__ = ("t0", "t1", "t", "level", "index", "fine_index", "iteration", "done",
                 "tol", "rnorm", "phase", "fine_indices", "indices", "batch_size", "fine_slice")

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))
        if self.batch_size is None:
            self.batch_size = 0

    def __repr__(self):
        return (f"<braidpy.AdjointStatus level={self.level} fine_index={self.fine_index} "
                f"iteration={self.iteration} phase={self.phase}>")


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
    """

    def __init__(self, objective, gradients, initial_adjoint, primal, adjoint, comm):
        self.objective: float = objective
        self.gradients: Dict[int, Any] = gradients
        self.initial_adjoint = initial_adjoint
        self.primal: Result = primal
        self.adjoint: Result = adjoint
        self._comm = comm

    def total(self):
        """Sum of all step gradients over all steps and ranks (time-independent
        parameters), added in step order whatever the number of ranks, so the
        result is bitwise the same for any rank count; on every rank."""
        return ordered_sum([self.gradients[n] for n in sorted(self.gradients)], self._comm)


def ordered_sum(items, comm):
    """Sum of array-likes held in rank order (rank r's items come after rank r-1's),
    added strictly left to right: rank r continues the partial sum of rank r-1, and
    the last rank broadcasts it. None if there are no items anywhere."""
    partial = None
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    if rank > 0:
        partial = comm.recv(source=rank - 1, tag=77)
    for item in items:
        g = np.asarray(item, dtype=np.float64)
        partial = g.copy() if partial is None else partial + g
    if rank < size - 1:
        comm.send(partial, dest=rank + 1, tag=77)
    return partial if size == 1 else comm.bcast(partial, root=size - 1)


def _as_slice(ns):
    """ns (int array) as an evenly spaced slice (the step may be negative), else None."""
    m = len(ns)
    if m == 0:
        return None
    d = int(ns[1] - ns[0]) if m > 1 else 1
    if d == 0 or (m > 2 and not bool(np.all(np.diff(ns) == d))):
        return None
    stop = int(ns[-1]) + (1 if d > 0 else -1)
    return slice(int(ns[0]), stop if stop >= 0 else None, d)


def _mirror(sl, top, m):
    """_as_slice(top - ms) for the m indices ms of the evenly spaced slice sl (the
    core's), without looking at the indices; False when sl is None or m < 2."""
    if sl is None or m < 2:
        return False
    first = top - sl.start
    step = -sl.step
    stop = first + (m - 1) * step - 1
    return slice(first, stop if stop >= 0 else None, step)


def _check_adjoint_app(app) -> None:
    missing = [name for name in _REQUIRED if not callable(getattr(app, name, None))]
    if missing:
        raise TypeError(
            f"{type(app).__name__} cannot be differentiated: it lacks {', '.join(missing)} "
            f"(see braidpy.adjoint for the adjoint callbacks)"
        )
    running = [callable(getattr(app, n, None)) for n in ("running_objective", "running_gradient")]
    if any(running) and not all(running):
        raise TypeError(f"{type(app).__name__} must define both running_objective and "
                        f"running_gradient, or neither")


class _ReversedApp(App):
    """The adjoint problem as a braidpy app on the reversed grid s_m = -t_{N-m}.

    Rank q of the reversed communicator owns the mirror image of the forward points of
    rank P-1-q, so every primal state an adjoint step needs is local.
    """

    def __init__(self, owner: "GradientSolver"):
        # Weak: the compiled solver holds this app, and GC cannot see through it.
        self.owner = weakref.proxy(owner)
        self.app = owner.app
        # Vector operations are the user's; App's own defaults stay inherited so
        # that the compiled core can run them directly (the fast array paths).
        for name in ("clone", "sum", "norm", "bufpack", "bufunpack"):
            mine = getattr(type(self.app), name, None)
            if mine is not getattr(App, name) or name in getattr(self.app, "__dict__", {}):
                setattr(self, name, getattr(self.app, name))
        self._index: Dict[float, int] = {}
        self._strides: list = []
        self._st = AdjointStatus()  # reused: valid only during a callback
        # Batched hooks only where the user has them (braidpy checks the attribute).
        if callable(getattr(self.app, "step_adjoint_batch", None)):
            self.step_batch = self._step_batch
        self.batch_gradient = callable(getattr(self.app, "step_gradient_batch", None))
        self._traj = None      # stacked primal states lo-1..hi (batched calls only)
        self._traj_lo = 0

    def prepare(self, rev_times, strides):
        rev = np.asarray(rev_times, dtype=np.float64).tolist()  # Python floats, as float(s)
        self._index = dict(zip(rev, range(len(rev))))
        self._strides = strides
        self._times = np.asarray(self.owner.times, dtype=np.float64).tolist()  # cheap indexing

    def _stored(self, n):
        return self.owner.primal_core._solver.stored(n)

    def load_trajectory(self):
        """Stack the primal states this rank can see (own.lo-1 .. own.hi) once per
        evaluation, so that batched callbacks index them with one gather."""
        owned = self.owner.primal_core.owned
        lo = max(owned.start - 1, 0)
        self._traj_lo = lo
        self._traj = None
        if lo < owned.stop:
            # One copy in C++ for float64 NumPy states; a gather of the states otherwise.
            self._traj = self.owner.primal_core._solver.stored_block(lo, owned.stop)
            if self._traj is None:
                self._traj = backends.stack([self._stored(n) for n in range(lo, owned.stop)])
        self._times_arr = np.asarray(self._times)

    def _batch_status(self, status, n0, n1, phase=None, fine_slice=False):
        st = self._status(status, int(n0[0]), int(n1[0]), phase)
        st.fine_indices = st.indices = n0
        st.batch_size = len(n0)
        st.fine_slice = _as_slice(n0) if fine_slice is False else fine_slice
        return st

    def _step_batch(self, W, s0s, s1s, status):
        N = self.owner.ntime
        m0 = status.fine_indices
        stride = self._strides[status.level]
        n1 = N - m0
        n0 = n1 - stride
        stacked = backends.stack(W) if isinstance(W, (list, tuple)) else W
        U = self._traj[n0 - self._traj_lo]
        st = self._batch_status(status, n0, n1, fine_slice=_mirror(status.fine_slice,
                                                                    N - stride, len(n0)))
        T = self._times_arr
        r = self.app.step_adjoint_batch(stacked, U, T[n0], T[n1], st)
        if r is not None and r is not stacked:
            stacked[...] = r
        if stacked is not W:
            for k, w in enumerate(W):
                w[...] = stacked[k]
        st.fine_indices = st.indices = st.fine_slice = None
        st.batch_size = 0
        if self.owner.running:
            for k in range(len(n0)):
                w = W[k]
                self._add_running(w, int(n0[k]), self._status(status, int(n0[k]), int(n1[k])))
        return None

    def _status(self, status, n0, n1, phase=None):
        t, st = self._times, self._st
        st.t0, st.t1, st.t = t[n0], t[n1], t[n0]
        st.level, st.index, st.fine_index = status.level, n0, n0
        st.iteration, st.done, st.tol, st.rnorm = (status.iteration, status.done, status.tol,
                                                   status.rnorm)
        st.phase = phase or status.phase
        return st

    def _zero_like(self, u):
        z = self.app.clone(u)
        self.app.sum(0.0, z, 0.0, z)
        return z

    def init(self, s):
        m = self._index[float(s)]
        N = self.owner.ntime
        primal = self.owner.primal_core._solver
        u = primal.stored(N - m)
        if m == 0:
            return self.terminal_adjoint()
        guess = getattr(self.app, "adjoint_guess", None)
        if callable(guess):
            g = guess(N - m)
            if g is not None:
                return self.app.clone(g)
        return self._zero_like(u)

    def terminal_adjoint(self):
        """w_N = dg/du(u_N) (+ df_N/du(u_N)), on the rank owning t_N."""
        N = self.owner.ntime
        u = self._stored(N)
        w = self.app.clone(self.app.terminal_gradient(u))
        t = self._times[N]
        return self._add_running(w, N, AdjointStatus(t=t, t0=t, t1=t, level=0, index=N,
                                                     fine_index=N, phase="objective"))

    def _add_running(self, w, n, st):
        """w += df_n/du(u_n); st (the status of the current call) is passed on."""
        if not self.owner.running:
            return w
        u = self._stored(n)
        st.t = self._times[n]
        g = self.app.running_gradient(u, st.t, st)
        if g is not None:
            self.app.sum(1.0, g, 1.0, w)
        return w

    def step(self, w, s0, s1, status):
        N = self.owner.ntime
        m0 = status.fine_index
        m1 = m0 + self._strides[status.level]
        n0, n1 = N - m1, N - m0
        u = self._stored(n0)
        st = self._status(status, n0, n1)
        ret = self.app.step_adjoint(w, u, self._times[n0], self._times[n1], st)
        if ret is not None and ret is not w:
            w = ret
        return self._add_running(w, n0, st)

    def access(self, w, status):
        if not status.done:
            return
        N = self.owner.ntime
        n = N - status.index  # w is w_n
        if n == 0:
            self.owner._initial_adjoint = self.app.clone(w)
            return
        primal = self.owner.primal_core._solver
        u = primal.stored(n - 1)
        st = self._status(status, n - 1, n, phase="final")
        st.level, st.index, st.fine_index = 0, n - 1, n - 1
        g = self.app.step_gradient(w, u, self._times[n - 1], self._times[n], st)
        if g is not None:
            self.owner._gradients[n - 1] = g


class GradientSolver:
    """Objective and gradient by a primal and an adjoint MGRIT solve, reusable.

    Parameters
    ----------
    app : App
        With the adjoint callbacks of :mod:`braidpy.adjoint`.
    tstart, tstop, ntime, comm, times
        As for :class:`braidpy.Core`.
    primal, adjoint : dict, optional
        MGRIT options of each solve (see :class:`braidpy.Options`); the adjoint's
        default to the primal's. The primal always keeps every fine point of its
        final sweep (as ``storage="all"`` would); the adjoint's ``access_level`` is
        braidpy's own.
    oneshot : (int, int), optional
        (m1, m2): run exactly m1 primal and m2 adjoint iterations per evaluation, each
        warm-started from the previous evaluation (simultaneous / one-shot
        optimization); the gradient is then inexact and tends to the exact one as
        m1, m2 grow. Without it both solves run to their tolerances.

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

    def __init__(self, app: Any, tstart: float, tstop: float, ntime: int, *, comm: Any = None,
                 times: Optional[Sequence[float]] = None, primal: Optional[Mapping] = None,
                 adjoint: Optional[Mapping] = None, oneshot: Optional[Sequence[int]] = None):
        _check_adjoint_app(app)
        self.app = app
        self.ntime = int(ntime)
        self.running = callable(getattr(app, "running_objective", None))
        primal_opts = dict(primal or {})
        adjoint_opts = dict(adjoint if adjoint is not None else primal_opts)
        if adjoint is None:
            adjoint_opts.pop("storage", None)  # the adjoint's F-points are never needed
        for name, opts in (("primal", primal_opts), ("adjoint", adjoint_opts)):
            if opts.get("storage", "all") != "all" and name == "primal":
                raise ValueError("primal storage must be 'all': the adjoint needs every state")
            if "access_level" in opts and name == "adjoint":
                raise ValueError("the adjoint's access_level is braidpy's own; leave it out")
        if oneshot is not None:
            m1, m2 = oneshot
            for label, m in (("m1", m1), ("m2", m2)):
                if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                    raise ValueError(f"oneshot {label} must be an int >= 1, got {m!r}")
            primal_opts.update(max_iter=m1, abs_tol=0.0, rel_tol=0.0)
            adjoint_opts.update(max_iter=m2, abs_tol=0.0, rel_tol=0.0)
        # The adjoint needs every primal state of the final sweep: the core keeps them
        # (like storage="all", without copying every F-point in every relaxation).
        primal_opts["storage"] = "C"
        Options.from_kwargs(**adjoint_opts)  # validate before any work

        self.comm = comm
        self.primal_core = Core(app, tstart, tstop, ntime, comm=comm, times=times,
                                _store_final=True, **primal_opts)
        self.times = self.primal_core.times
        size = 1 if comm is None else comm.Get_size()
        rank = 0 if comm is None else comm.Get_rank()
        rev_comm = None if comm is None else comm.Split(0, size - 1 - rank)
        self._rev_comm = rev_comm
        ranges = comm.allgather((self.primal_core.owned.start, self.primal_core.owned.stop - 1)) \
            if comm is not None else [(0, self.ntime)]
        mirrored = [(self.ntime - hi, self.ntime - lo) for lo, hi in reversed(ranges)]
        rev_times = -self.times[::-1]
        self._reversed = _ReversedApp(self)
        self._reversed.prepare(rev_times, [])
        # With step_gradient_batch the gradients need every final adjoint value at once:
        # the core keeps the final sweep's values (read with one stored_block call)
        # instead of handing each one to access.
        batch_gradient = self._reversed.batch_gradient
        adjoint_opts["access_level"] = 0 if batch_gradient else 1
        self.adjoint_core = Core(self._reversed, float(rev_times[0]), float(rev_times[-1]),
                                 self.ntime, comm=rev_comm, times=rev_times,
                                 _store_final=batch_gradient,
                                 _fine_ranges=mirrored if size > 1 else None,
                                 _labels=dict(ranks=list(range(size - 1, -1, -1)),
                                              callbacks=_ADJOINT_CALLBACKS), **adjoint_opts)
        strides = [lv["fine_stride"] for lv in self.adjoint_core.level_info]
        self._reversed.prepare(rev_times, strides)
        self._batched = self.adjoint_core.batched or self._reversed.batch_gradient
        self._gradients: Dict[int, Any] = {}
        self._initial_adjoint = None

    def __del__(self):
        rev = getattr(self, "_rev_comm", None)
        if rev is not None:
            try:
                from mpi4py import MPI

                if not MPI.Is_finalized():
                    rev.Free()
            except Exception:  # noqa: BLE001 - called from __del__, maybe at shutdown
                pass

    def evaluate(self) -> Gradient:
        """Primal solve, objective, adjoint solve and per-step gradients."""
        primal = self.primal_core.solve()
        objective, w_final = self._objective(primal)
        self._gradients = {}
        self._initial_adjoint = None
        if self._batched:
            self._reversed.load_trajectory()
        if w_final is not None:
            # The adjoint's initial condition follows the new primal state (a warm
            # restart would otherwise keep the old one).
            self.adjoint_core._solver.set_initial_condition(w_final)
        adjoint = self.adjoint_core.solve()
        if self._reversed.batch_gradient:
            self._batched_gradients(adjoint)
        self._reversed._traj = None
        return Gradient(objective, self._gradients, self._initial_adjoint, primal, adjoint,
                        self.comm)

    def objective(self) -> float:
        """Primal solve and objective only (no adjoint), e.g. for a line search. The
        primal state stays as the warm start of the next evaluation."""
        return self._objective(self.primal_core.solve())[0]

    def reset(self) -> None:
        """Next evaluation starts both solves cold (from init and a zero adjoint)."""
        self.primal_core.reset_guess()
        self.adjoint_core.reset_guess()

    def _batched_gradients(self, adjoint: Result) -> None:
        """step_gradient_batch over every step this rank owns, agreed across ranks."""
        rev = self._reversed
        solver, owned, N = self.adjoint_core._solver, self.adjoint_core.owned, self.ntime
        error = None
        try:
            # The final adjoint values (kept by the core): w_n at adjoint index N - n.
            if N in owned:
                self._initial_adjoint = self.app.clone(solver.stored(N))
            top, lo = min(owned.stop - 1, N - 1), owned.start
            if top >= lo:
                # Steps n = N-1-m, ascending; row k is w_{n_k + 1} = adjoint value at m.
                ns = np.arange(N - 1 - top, N - lo, dtype=np.int64)
                W = solver.stored_block(top, lo - 1, -1)
                if W is None:
                    W = backends.stack([self.app.clone(solver.stored(m))
                                        for m in range(top, lo - 1, -1)])
                U = rev._traj[ns - rev._traj_lo]
                T = rev._times_arr
                t0s, t1s = T[ns], T[ns + 1]
                st = AdjointStatus(t0=float(t0s[0]), t1=float(t1s[0]), t=float(t0s[0]), level=0,
                                   index=int(ns[0]), fine_index=int(ns[0]), fine_indices=ns,
                                   fine_slice=_as_slice(ns),
                                   indices=ns, batch_size=len(ns), iteration=adjoint.iterations,
                                   done=True, phase="final")
                gs = self.app.step_gradient_batch(W, U, t0s, t1s, st)
                if gs is not None:
                    if len(gs) != len(ns):
                        raise ValueError(f"step_gradient_batch returned {len(gs)} gradients "
                                         f"for {len(ns)} steps")
                    for n, g in zip(ns.tolist(), gs):
                        if g is not None:
                            self._gradients[n] = g
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the ranks agree
            error = exc
        summary = None if error is None else f"{type(error).__name__}: {error}"
        summaries = [summary] if self.comm is None else self.comm.allgather(summary)
        if error is not None:
            try:
                raise error
            finally:
                # No exception <-> frame cycle: this solver is then freed by reference
                # counting at the same point on every rank (its __del__ frees
                # communicators; see braidpy._solver.Core._unwrap).
                del error
        failed = [(r, msg) for r, msg in enumerate(summaries) if msg is not None]
        if failed:
            raise BraidError("step_gradient_batch failed on " +
                             "; ".join(f"rank {r}: {msg}" for r, msg in failed))

    def _objective(self, primal: Result):
        """(J on every rank, w_N on the rank owning t_N), agreed across ranks: a
        callback failing on one rank raises there and BraidError elsewhere."""
        solver = self.primal_core._solver
        terms, error, w_final = [], None, None  # (index, term); the terminal term is N+1
        try:
            if self.running:
                for i in primal.owned:
                    t = self.times[i]
                    st = AdjointStatus(t=t, t0=t, t1=t, level=0, index=i, fine_index=i,
                                       phase="objective")
                    terms.append((i, float(self.app.running_objective(solver.stored(i), t, st))))
            if self.ntime in primal.owned:
                u_final = solver.stored(self.ntime)
                terms.append((self.ntime + 1, float(self.app.terminal_objective(u_final))))
                w_final = self._reversed.terminal_adjoint()
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the ranks agree
            error = exc
        summary = None if error is None else f"{type(error).__name__}: {error}"
        parts = [(terms, summary)] if self.comm is None else self.comm.allgather((terms, summary))
        if error is not None:
            try:
                raise error
            finally:
                # No exception <-> frame cycle: this solver is then freed by reference
                # counting at the same point on every rank (its __del__ frees
                # communicators; see braidpy._solver.Core._unwrap).
                del error
        failed = [(r, msg) for r, (_, msg) in enumerate(parts) if msg is not None]
        if failed:
            raise BraidError("objective evaluation failed on " +
                             "; ".join(f"rank {r}: {msg}" for r, msg in failed))
        # Added in index order on every rank: the same bits for any rank count.
        total = 0.0
        for _, value in sorted(term for part, _ in parts for term in part):
            total += value
        return total, w_final


def gradient(app: Any, tstart: float, tstop: float, ntime: int, *, comm: Any = None,
             primal: Optional[Mapping] = None, adjoint: Optional[Mapping] = None) -> Gradient:
    """Objective and exact (to tolerance) gradient in one call; see :class:`GradientSolver`."""
    return GradientSolver(app, tstart, tstop, ntime, comm=comm, primal=primal,
                          adjoint=adjoint).evaluate()
