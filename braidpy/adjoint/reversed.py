"""The adjoint problem as a braidpy app on the reversed time grid."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import backends
from .._app import App
from .._device import namespace
from .._solver import Core
from .status import AdjointStatus, as_slice, mirror_slice

__all__ = ["ReversedApp"]


class ReversedApp(App):
    """The adjoint of ``app``'s time stepping as an app on the grid s_m = -t_{N-m}.

    Rank q of the reversed communicator owns the mirror image of the forward points of
    rank P-1-q, so every primal state an adjoint step needs is local: the steps read
    them from ``primal`` (a :class:`braidpy.Core` with ``storage="final"``).

    After a solve with ``access_level=1`` the per-step gradients of this rank are in
    :attr:`gradients` ({n: step_gradient of step n}) and w_0 in :attr:`initial_adjoint`
    (on the rank owning t_0). Call :meth:`set_strides` with the adjoint Core's
    per-level fine strides before solving.
    """

    def __init__(self, app: Any, primal: Core, running: bool):
        self.app = app
        self.primal = primal
        self.running = running
        # F'(S) of a postprocessed objective J = F(S) (GradientSolver sets it per
        # evaluation): it multiplies every adjoint source, terminal and running.
        self.source_scale = 1.0
        self.ntime = len(primal.times) - 1
        # Vector operations are the user's; App's own defaults stay inherited so
        # that the compiled core can run them directly (the fast array paths).
        for name in ("clone", "sum", "norm", "bufpack", "bufunpack"):
            mine = getattr(type(app), name, None)
            if mine is not getattr(App, name) or name in getattr(app, "__dict__", {}):
                setattr(self, name, getattr(app, name))
        # Adjoint vectors live where the states do: received ones are built the same way.
        self.array_namespace = getattr(app, "array_namespace", None)
        self.array_device = getattr(app, "array_device", None)
        times = np.asarray(primal.times, dtype=np.float64)
        self._times: List[float] = times.tolist()  # Python floats: cheap indexing
        self._times_arr = times
        self._index: Dict[float, int] = {s: m for m, s in enumerate((-times[::-1]).tolist())}
        self._strides: List[int] = []
        self._st = AdjointStatus()  # reused: valid only during a callback
        # Batched hooks only where the user has them (braidpy checks the attribute).
        if callable(getattr(app, "step_adjoint_batch", None)):
            self.step_batch = self._step_batch  # type: ignore[method-assign, assignment]
            if callable(getattr(app, "step_adjoint_batch_into", None)):
                self.step_stacked_into = self._step_stacked_into  # type: ignore[attr-defined]
        self.batch_gradient = callable(getattr(app, "step_gradient_batch", None))
        # Device and other non-NumPy states: the primal states lo-1..hi stacked once per
        # evaluation (one gather kernel), indexed by the batched calls. NumPy states are
        # read where the primal Core stored them (primal_rows).
        self.trajectory: Optional[Any] = None
        self.trajectory_start = 0
        self.gradients: Dict[int, Any] = {}
        self.initial_adjoint: Any = None

    @property
    def reversed_times(self) -> np.ndarray:
        """The reversed grid s_m = -t_{N-m}."""
        return -self._times_arr[::-1]

    def set_strides(self, strides: Sequence[int]) -> None:
        """Fine-grid distance between neighbouring points of each level."""
        self._strides = [int(s) for s in strides]

    def start_evaluation(self, batched: bool) -> None:
        """Forget the last gradients; with batched callbacks and states other than
        NumPy's, stack the primal states this rank can see (own.lo-1 .. own.hi) once, so
        that they are indexed with one gather."""
        self.gradients = {}
        self.initial_adjoint = None
        self.trajectory = None
        if not batched:
            return
        owned = self.primal.owned
        lo = max(owned.start - 1, 0)
        self.trajectory_start = lo
        if lo < owned.stop and not isinstance(self.primal.stored(lo), np.ndarray):
            # One kernel for CUDA arrays (CuPy); a gather of the states otherwise.
            self.trajectory = self.primal.stored_block(lo, owned.stop)
            if self.trajectory is None:
                self.trajectory = backends.stack([self.primal.stored(n)
                                                 for n in range(lo, owned.stop)])

    def end_evaluation(self) -> None:
        self.trajectory = None

    def primal_rows(self, ns: np.ndarray, sl: Any = False) -> Any:
        """The stacked primal states u_n for the fine indices ns, read-only for NumPy;
        ``sl``: ns as a slice when the caller knows it (None: not evenly spaced)."""
        traj: Any = self.trajectory
        if traj is None:
            return self._stored_rows(ns, as_slice(ns) if sl is False else sl)
        rows = ns - self.trajectory_start
        # Other namespaces take no NumPy index array (array-api-strict refuses one, a GPU
        # would need it copied over); the rows are evenly spaced, so a strided view, copied.
        sl = as_slice(rows)
        if sl is None:
            return backends.stack([traj[int(r), ...] for r in rows])
        backend = backends.backend_for(traj, "step_adjoint_batch")
        if sl.step > 0:
            return backend.clone(traj[sl, ...])
        # A negative step is not standard slicing (PyTorch refuses it): the same rows
        # ascending, flipped (flip copies where views cannot go backwards).
        ascending = slice(int(rows[-1]), int(rows[0]) + 1, -sl.step)
        return backend.clone(namespace(traj).flip(traj[ascending, ...], axis=0))

    def _stored_rows(self, ns: np.ndarray, sl: Optional[slice]) -> np.ndarray:
        """NumPy states u_n for ns: a view of the primal Core's storage where a lockstep
        sweep stored them as one block (every cf-th state, as the batched F-sweeps ask
        for them), else gathered into a new array. Stacking the whole trajectory at each
        evaluation (82 MB for Peaks' 256 layers of 5000 x 8), then copying each call's
        strided rows out of it, had cost a third of a one-shot gradient."""
        primal = self.primal
        if sl is not None:
            start, step = sl.start, sl.step
            stop = start + step * len(ns)
            rows = primal.stored_view(start, stop, step)  # read-only
            if rows is not None:
                return rows
            rows = primal.stored_block(start, stop, step)
        else:
            rows = None
        if rows is None:
            rows = np.stack([primal.stored(int(n)) for n in ns])
        rows.flags.writeable = False  # an app writing into U gets an error, not bad states
        return rows

    def step_times(self, ns: np.ndarray):
        """(t_n, t_{n+1}) arrays for the steps ns."""
        return self._times_arr[ns], self._times_arr[ns + 1]

    # ---------------------------------------------------------------- status
    def _status(self, status: Any, n0: int, n1: int, phase: Optional[str] = None):
        t, st = self._times, self._st
        st.t0, st.t1, st.t = t[n0], t[n1], t[n0]
        st.level, st.index, st.fine_index = status.level, n0, n0
        st.iteration, st.done, st.tol, st.rnorm = (status.iteration, status.done, status.tol,
                                                   status.rnorm)
        st.nlevels = status.nlevels
        st.phase = phase or status.phase
        return st

    def _batch_status(self, status: Any, n0: np.ndarray, n1: np.ndarray, fine_slice: Any):
        st = self._status(status, int(n0[0]), int(n1[0]))
        st.fine_indices = st.indices = n0
        st.batch_size = len(n0)
        st.fine_slice = as_slice(n0) if fine_slice is False else fine_slice
        return st

    # ------------------------------------------------------------- callbacks
    def _zero_like(self, u: Any) -> Any:
        z = self.app.clone(u)
        self.app.sum(0.0, z, 0.0, z)
        return z

    def init(self, s: float) -> Any:
        m = self._index[float(s)]
        N = self.ntime
        if m == 0:
            return self.terminal_adjoint()
        guess = getattr(self.app, "adjoint_guess", None)
        if callable(guess):
            g = guess(N - m)
            if g is not None:
                return self.app.clone(g)
        return self._zero_like(self.primal.stored(N - m))

    def terminal_adjoint(self) -> Any:
        """w_N = dg/du(u_N) (+ df_N/du(u_N)), on the rank owning t_N."""
        N = self.ntime
        w = self.app.clone(self.app.terminal_gradient(self.primal.stored(N)))
        if self.source_scale != 1.0:
            self.app.sum(0.0, w, self.source_scale, w)
        t = self._times[N]
        return self._add_running(w, N, AdjointStatus(t=t, t0=t, t1=t, level=0, index=N,
                                                     fine_index=N, phase="objective"))

    def _add_running(self, w: Any, n: int, st: Any) -> Any:
        """w += df_n/du(u_n); st (the status of the current call) is passed on."""
        if not self.running:
            return w
        st.t = self._times[n]
        g = self.app.running_gradient(self.primal.stored(n), st.t, st)
        if g is not None:
            self.app.sum(self.source_scale, g, 1.0, w)
        return w

    def step(self, w: Any, s0: float, s1: float, status: Any) -> Any:
        N = self.ntime
        m0 = status.fine_index
        m1 = m0 + self._strides[status.level]
        n0, n1 = N - m1, N - m0
        st = self._status(status, n0, n1)
        ret = self.app.step_adjoint(w, self.primal.stored(n0), self._times[n0],
                                    self._times[n1], st)
        if ret is not None and ret is not w:
            w = ret
        return self._add_running(w, n0, st)

    def _batch_steps(self, status: Any) -> Tuple[np.ndarray, np.ndarray, Any]:
        """(n0, n1, status) of a batched adjoint call: the forward steps n0 -> n1 its rows
        take back, and the status the app's batched hooks see."""
        N = self.ntime
        stride = self._strides[status.level]
        n1 = N - status.fine_indices
        n0 = n1 - stride
        st = self._batch_status(status, n0, n1,
                                mirror_slice(status.fine_slice, N - stride, len(n0)))
        return n0, n1, st

    def _end_batch(self, W: Any, n0: np.ndarray, n1: np.ndarray, status: Any) -> None:
        """Forget the batch in the reused status, then add the running terms to W's rows."""
        st = self._st
        st.fine_indices = st.indices = st.fine_slice = None
        st.batch_size = 0
        if self.running:
            rows = W if isinstance(W, (list, tuple)) else [W[k, ...] for k in range(len(n0))]
            for k in range(len(n0)):
                self._add_running(rows[k], int(n0[k]),
                                  self._status(status, int(n0[k]), int(n1[k])))

    def _step_batch(self, W: Any, s0s: Any, s1s: Any, status: Any) -> None:
        n0, n1, st = self._batch_steps(status)
        stacked = backends.stack(W) if isinstance(W, (list, tuple)) else W
        r = self.app.step_adjoint_batch(stacked, self.primal_rows(n0, st.fine_slice),
                                        self._times_arr[n0], self._times_arr[n1], st)
        if r is not None and r is not stacked:
            stacked[...] = r
        if stacked is not W:
            for k, w in enumerate(W):
                w[...] = stacked[k, ...]
        self._end_batch(W, n0, n1, status)
        return None

    def _step_stacked_into(self, W: Any, out: Any, s0s: Any, s1s: Any, status: Any) -> None:
        """The batched adjoint steps of W's rows written into out (W unchanged): the
        user's step_adjoint_batch_into. The core calls it where the adjoint values are
        kept (the final sweep stores them for the gradients) or would be copied first."""
        n0, n1, st = self._batch_steps(status)
        r = self.app.step_adjoint_batch_into(W, self.primal_rows(n0, st.fine_slice), out,
                                             self._times_arr[n0], self._times_arr[n1], st)
        if r is not None:
            raise TypeError("step_adjoint_batch_into(W, U, out, t0s, t1s, status) must "
                            f"write into out and return None, got {type(r).__name__}")
        self._end_batch(out, n0, n1, status)
        return None

    def access(self, w: Any, status: Any) -> None:
        if not status.done:
            return
        n = self.ntime - status.index  # w is w_n
        if n == 0:
            self.initial_adjoint = self.app.clone(w)
            return
        st = self._status(status, n - 1, n, phase="final")
        st.level, st.index, st.fine_index = 0, n - 1, n - 1
        g = self.app.step_gradient(w, self.primal.stored(n - 1), self._times[n - 1],
                                   self._times[n], st)
        if g is not None:
            self.gradients[n - 1] = g
