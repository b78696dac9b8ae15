"""Core (fine control, warm restarts) and solve (the one-call path)."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._app import App
from ._errors import BraidError, DivergenceError
from ._mpi import TimeComm, comm_rank_size
from ._options import Options
from ._result import Result

__all__ = ["Core", "solve"]


def _time_grid(tstart, tstop, ntime, times) -> np.ndarray:
    for name, v in (("tstart", tstart), ("tstop", tstop)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not float(tstop) > float(tstart):
        raise ValueError(f"tstop must be greater than tstart, got tstart={tstart!r}, "
                         f"tstop={tstop!r}")
    if isinstance(ntime, bool) or not isinstance(ntime, (int, np.integer)) or ntime < 1:
        raise ValueError(f"ntime must be an int >= 1, got {ntime!r}")
    if times is None:
        # XBraid's expression: t_i = tstart + (i/ntime)*(tstop - tstart).
        i = np.arange(ntime + 1, dtype=np.float64)
        return float(tstart) + (i / ntime) * (float(tstop) - float(tstart))
    grid = np.asarray(times, dtype=np.float64)
    if grid.shape != (ntime + 1,):
        raise ValueError(f"times must have ntime+1 = {ntime + 1} entries, got shape {grid.shape}")
    if not np.all(np.isfinite(grid)) or not np.all(np.diff(grid) > 0):
        raise ValueError("times must be finite and strictly increasing")
    if grid[0] != tstart or grid[-1] != tstop:
        raise ValueError(f"times must start at tstart={tstart!r} and end at tstop={tstop!r}, "
                         f"got {grid[0]!r}..{grid[-1]!r}")
    return grid


def has_step_batch(app) -> bool:
    """True when app provides a batched step: its own step_batch, or (for
    braidpy.App subclasses) a step_stacked kernel used by App's default."""
    if "step_batch" in getattr(app, "__dict__", {}):
        return callable(app.__dict__["step_batch"])
    if isinstance(app, App):
        return type(app).step_batch is not App.step_batch or callable(
            getattr(app, "step_stacked", None))
    return callable(getattr(app, "step_batch", None))


def _check_app(app) -> None:
    for name in ("init", "step"):
        fn = getattr(app, name, None)
        if not callable(fn):
            raise TypeError(f"app must provide a callable {name}(); {type(app).__name__} has none")
        if isinstance(app, App) and getattr(type(app), name) is getattr(App, name):
            raise TypeError(f"{type(app).__name__} must implement {name}()")
    for name in ("clone", "sum", "norm", "access", "bufpack", "bufunpack"):
        if not callable(getattr(app, name, None)):
            raise TypeError(
                f"app must provide {name}(); subclass braidpy.App to get defaults for arrays"
            )


class Core:
    """An MGRIT solver bound to one app and one time grid.

    Parameters
    ----------
    app : App
        The user's application (init, step, and vector operations).
    tstart, tstop : float
        Time interval.
    ntime : int
        Number of fine time steps.
    comm : mpi4py communicator, optional
        Time communicator; None (default) runs serially without MPI.
    times : array_like, optional
        A non-uniform fine grid of ntime+1 increasing times from tstart to tstop.
    **options
        See :class:`braidpy.Options`.

    A second :meth:`solve` starts from the previous solution (warm restart);
    :meth:`reset_guess` and :meth:`set_initial_condition` change that.
    With skip=True, only a cold start skips the first down-sweep.

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> class Decay(braidpy.App):
    ...     def init(self, t):
    ...         return np.ones(1) if t == self.tstart else np.zeros(1)
    ...     def step(self, u, t0, t1, status):
    ...         u /= 1.0 + (t1 - t0)
    >>> core = braidpy.Core(Decay(), 0.0, 1.0, 64, cfactor=4, abs_tol=1e-10)
    >>> result = core.solve()
    >>> result.levels, result.iterations
    (3, 6)
    >>> bool(abs(result.final[0] - (1 + 1/64) ** -64) < 1e-12)
    True
    """

    def __init__(self, app: Any, tstart: float, tstop: float, ntime: int, *,
                 comm: Any = None, times: Optional[Sequence[float]] = None,
                 _fine_ranges: Optional[Sequence[Tuple[int, int]]] = None,
                 _labels: Optional[dict] = None, _store_final: bool = False,
                 **options: Any):
        self.options = Options.from_kwargs(**options)
        _check_app(app)
        grid = _time_grid(tstart, tstop, ntime, times)
        self.app = app
        self.rank, self.size = (0, 1) if comm is None else comm_rank_size(comm)
        self.comm = comm
        # How errors name ranks and callbacks (braidpy.adjoint runs on a reversed
        # communicator through a wrapper app).
        self._labels = _labels or {}
        self._tcomm = TimeComm(comm) if self.size > 1 else None
        for name, value in (("tstart", float(tstart)), ("tstop", float(tstop)),
                            ("ntime", int(ntime))):
            try:
                setattr(app, name, value)
            except AttributeError:
                pass
        progress = self._print_progress if self.options.print_level >= 1 and self.rank == 0 \
            else None
        core_options = self.options.to_core()
        core_options.batch = self.options.batch and has_step_batch(app)
        self.batched = core_options.batch
        if _store_final:  # braidpy.adjoint: keep the final sweep's F-points (stored())
            core_options.store_final = True
        if _fine_ranges is not None:  # braidpy.adjoint's mirrored layout
            core_options.fine_ranges = [(int(lo), int(hi)) for lo, hi in _fine_ranges]
        self._solver = _core.Solver(app, self._tcomm, self.rank, self.size, core_options,
                                    grid.tolist(), progress)
        if self.options.print_level >= 2 and self.rank == 0:
            for level, info in enumerate(self._solver.levels()):
                print(f"  Braid: level {level}: {info['n']} intervals, cfactor {info['cfactor']}, "
                      f"nrelax {info['nrelax']}")

    @property
    def nlevels(self) -> int:
        """Number of levels in the hierarchy."""
        return self._solver.nlevels

    @property
    def level_info(self) -> list:
        """Per level: n (intervals), cfactor, nrelax and this rank's lo..hi."""
        return self._solver.levels()

    @property
    def times(self) -> np.ndarray:
        """The fine time grid t_0..t_N."""
        return self._solver.times()

    @property
    def owned(self) -> range:
        """Fine time indices held by this rank."""
        lo, hi = self._solver.owned
        return range(lo, hi + 1)

    def solve(self) -> Result:
        """Run MGRIT to the halting test; returns a :class:`Result` (on every rank).

        Raises the original exception of a failing callback on the rank where it
        failed and :class:`BraidError` on the others; :class:`DivergenceError`
        if the residual norm is not finite; ``KeyboardInterrupt`` passes through.
        """
        start = time.perf_counter()
        self._unwrap(self._solver.solve())
        final = self._broadcast_final()
        result = Result(self, self._solver, final, time.perf_counter() - start)
        if self.options.print_level >= 1 and self.rank == 0:
            print(f"  Braid: {result.iterations} iterations, {result.levels} levels")
        return result

    def reset_guess(self) -> None:
        """The next solve starts again from app.init (a cold start)."""
        self._solver.reset_guess()

    def set_initial_condition(self, u0: Any) -> None:
        """Use u0 (copied) as the value at tstart in the next solve."""
        self._solver.set_initial_condition(self.app.clone(u0))

    def _print_progress(self, k: int, rnorm: float, has: bool) -> None:
        if has:
            print(f"  Braid: || r_{k} || = {rnorm:.6e}")
        else:
            print(f"  Braid: || r_{k} || not available")
        sys.stdout.flush()

    def _unwrap(self, outcome: _core.Outcome):
        """Turn the compiled core's Outcome into a value (its vector) or an exception."""
        kind = outcome.kind
        if kind == "ok":
            return outcome.vector
        if kind == "diverged":
            raise DivergenceError(outcome.iteration, outcome.level, outcome.value)
        error, callback = outcome.error, outcome.callback
        callback = self._labels.get("callbacks", {}).get(callback, callback)
        ranks = self._labels.get("ranks", list(range(self.size)))
        summary = None if error is None else f"{callback or 'communication'} raised " \
            f"{type(error).__name__}: {error}"
        summaries = [summary] if self._tcomm is None else self._tcomm.comm.allgather(summary)
        if error is not None:
            if self.size > 1 and hasattr(error, "add_note"):
                error.add_note(f"braidpy: raised in {callback or 'communication'} on rank "
                               f"{ranks[self.rank]} of {self.size}; all ranks stopped")
            try:
                raise error
            finally:
                # No cycle exception -> traceback -> this frame -> exception: the Core
                # then goes by reference counting when the caller drops the exception,
                # at the same point on every rank, not in a garbage collection at
                # different points (its __del__ frees a communicator, which MPICH may
                # synchronise).
                del error, outcome
        where = [f"rank {ranks[r]}: {s}" for r, s in enumerate(summaries) if s is not None]
        raise BraidError("solve stopped because a user callback failed on another rank ("
                         + "; ".join(where) + ")")

    def _broadcast_final(self):
        mine = self._solver.final_value()
        if self._tcomm is None:
            return None if mine is None else self.app.clone(mine)
        comm = self._tcomm.comm
        root = comm.allreduce(self.rank if mine is not None else -1, op=self._tcomm.MPI.MAX)
        payload = error = None
        if self.rank == root:
            try:
                payload = ("ok", bytes(memoryview(self.app.bufpack(mine)).cast("B")))
            except Exception as exc:  # noqa: BLE001 - re-raised below on this rank
                error = exc
                payload = ("failed", f"bufpack raised {type(exc).__name__}: {exc}")
        got = comm.bcast(payload if self.rank == root else None, root=root)
        if got[0] == "failed":
            if self.rank == root:
                try:
                    raise error
                finally:
                    del error  # no exception <-> frame cycle (see _unwrap)
            raise BraidError(f"rank {root}: {got[1]} (while sharing the final value)")
        if self.rank == root:
            return self.app.clone(mine)
        return self.app.bufunpack(bytearray(got[1]))

    def __del__(self):
        # Release our duplicate of the communicator (MPI has a few thousand).
        tcomm = getattr(self, "_tcomm", None)
        if tcomm is not None:
            tcomm.free()


def solve(app: Any, tstart: float, tstop: float, ntime: int, *, comm: Any = None,
          **options: Any) -> Result:
    """Solve the app's time-stepping problem with MGRIT (one call).

    Equivalent to ``Core(app, tstart, tstop, ntime, comm=comm, **options).solve()``;
    see :class:`braidpy.Core` and :class:`braidpy.Options`.

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> class Decay(braidpy.App):
    ...     def init(self, t):
    ...         return np.ones(1) if t == self.tstart else np.zeros(1)
    ...     def step(self, u, t0, t1, status):
    ...         u /= 1.0 + (t1 - t0)
    >>> r = braidpy.solve(Decay(), 0.0, 5.0, 1024, cfactor=4, abs_tol=1e-12)
    >>> r.iterations <= 10
    True
    """
    return Core(app, tstart, tstop, ntime, comm=comm, **options).solve()
