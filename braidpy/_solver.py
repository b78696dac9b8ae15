"""Core (fine control, warm restarts) and solve (the one-call path)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import numbers
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._app import App
from ._delta import check_delta
from ._limits import INT_MAX, check_ntime, write_atomically
from ._gateway import (check_app_callbacks, check_residual, coarsens_in_space, has_step_batch,
                       packed_bytes, tell_app_the_grid)
from ._errors import BraidError, ConvergenceError, DivergenceError, ErrorLabels
from ._options import Options
from ._cycle import cycle_lines
from ._result import Result, fine_index
from .parallel.agree import Agreement, agreed, describe
from .parallel.collectives import allgather_ints, bcast_into
from .parallel.comm import rank_size
from .parallel.fingerprint import same_everywhere
from .parallel.interrupts import (deferred_interrupts, postpone_interrupt, routed_to,
                                  take_interrupt)
from .parallel.layers import check_ranges
from .parallel.paths import Calls, announce_failure, entry, note_call
from .parallel.timecomm import TimeComm

__all__ = ["Core", "solve"]

# Rank 0 logs each iteration's residual and each solve's summary at DEBUG (a training
# step runs many solves: INFO is left to run summaries); print_level keeps XBraid's own
# lines on stdout.
logger = logging.getLogger("braidpy.solver")

BUSY = ("this braidpy Core is busy: solve() is running (called from another thread, or "
        "from inside one of its own callbacks); a Core serves one solve at a time")


def _time_grid(tstart, tstop, ntime, times) -> np.ndarray:
    for name, v in (("tstart", tstart), ("tstop", tstop)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) \
                or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if not float(tstop) > float(tstart):
        raise ValueError(f"tstop must be greater than tstart, got tstart={tstart!r}, "
                         f"tstop={tstop!r}")
    if not math.isfinite(float(tstop) - float(tstart)):
        raise ValueError(f"tstop - tstart must be a finite number, got tstart={tstart!r}, "
                         f"tstop={tstop!r}")
    if isinstance(ntime, bool) or not isinstance(ntime, (int, np.integer)) or ntime < 1:
        raise ValueError(f"ntime must be an int >= 1, got {ntime!r}")
    # Before anything is allocated: the core's int64 indices, distinct times, memory.
    ntime = check_ntime(ntime, tstart, tstop, uniform=times is None)
    if times is None:
        # XBraid's expression: t_i = tstart + (i/ntime)*(tstop - tstart).
        i = np.arange(ntime + 1, dtype=np.float64)
        return float(tstart) + (i / ntime) * (float(tstop) - float(tstart))
    try:
        raw = np.asarray(times)
    except (TypeError, ValueError) as exc:  # ragged nesting, say
        raise TypeError(f"times must be a sequence of real numbers ({exc})") from None
    if isinstance(times, (list, tuple)) and any(isinstance(v, (bool, np.bool_))
                                                for v in times):
        raw = np.asarray(times, dtype=object)  # True would pass as 1.0
    if raw.dtype.kind not in "iuf":  # not text ("0.5" would convert), bools or objects
        given = times if isinstance(times, (list, tuple)) else \
            [v.item() if isinstance(v, np.generic) else v for v in raw.reshape(-1)]
        bad = next(((i, v) for i, v in enumerate(given) if isinstance(v, (bool, np.bool_))
                    or not isinstance(v, (numbers.Real, np.number))), None)
        what = f"entry {bad[0]} is {bad[1]!r}" if bad else f"an array of dtype {raw.dtype}"
        raise TypeError(f"times must hold real numbers, got {what}")
    grid = raw.astype(np.float64)
    if grid.shape != (ntime + 1,):
        raise ValueError(f"times must have ntime+1 = {ntime + 1} entries, got shape {grid.shape}")
    if not np.all(np.isfinite(grid)) or not np.all(np.diff(grid) > 0):
        raise ValueError("times must be finite and strictly increasing")
    if grid[0] != tstart or grid[-1] != tstop:
        raise ValueError(f"times must start at tstart={tstart!r} and end at tstop={tstop!r}, "
                         f"got {grid[0]!r}..{grid[-1]!r}")
    return grid


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds  # NumPy >= 2
except ImportError:  # NumPy 1.x
    from numpy import byte_bounds as _byte_bounds  # type: ignore[attr-defined,no-redef]


def _extent(x: Any) -> Optional[Tuple[str, int, int]]:
    """(memory space, first byte, end) of an array's data, from the CUDA array interface
    or (host memory) NumPy's view of it; None when unknown (an opaque object)."""
    try:
        cai = None if isinstance(x, np.ndarray) else getattr(x, "__cuda_array_interface__",
                                                              None)
    except RuntimeError:  # a CUDA torch tensor that requires grad refuses it: unknown
        return None
    if isinstance(cai, Mapping):
        try:
            ptr, shape = int(cai["data"][0]), tuple(int(d) for d in cai["shape"])
            itemsize = np.dtype(cai["typestr"]).itemsize
            strides = cai.get("strides") or tuple(
                itemsize * math.prod(shape[k + 1:]) for k in range(len(shape)))
        except (KeyError, TypeError, ValueError, IndexError):
            return None
        if 0 in shape:
            return None
        lo = ptr + sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
        hi = ptr + sum(max(0, (d - 1) * s) for d, s in zip(shape, strides)) + itemsize
        return "cuda", lo, hi
    if isinstance(x, np.ndarray):
        a = x
    elif hasattr(x, "__array_interface__"):
        a = np.asarray(x)
    elif hasattr(x, "__dlpack__"):
        try:
            a = np.from_dlpack(x)  # host memory only; a device array raises
        except (BufferError, RuntimeError, TypeError, ValueError):  # unknown: not checked
            return None
    else:
        return None
    if a.size == 0:
        return None
    lo, hi = _byte_bounds(a)
    return "host", int(lo), int(hi)


def _check_clone_copies(app: Any, tstart: float) -> None:
    """TypeError naming ``clone`` when the app's own clone returns a state that shares
    memory with its argument (a view such as ``u[:]``): MGRIT would change the original
    through its copy and could report convergence to a wrong answer. Checked once, when
    a Core is made, on the value at tstart; App's default clone (which copies) and
    braidpy's own apps are not checked, so they cost nothing."""
    fn = getattr(getattr(app, "clone", None), "__func__", None)
    module = getattr(fn, "__module__", None) or ""
    if fn is App.clone or module == "braidpy" or module.startswith("braidpy."):
        return
    u = app.init(tstart)
    c = app.clone(u)
    if c is u:
        return  # named by the compiled gateway at its first clone ("returned its argument")
    a, b = _extent(u), _extent(c)
    if a is not None and b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]:
        raise TypeError(
            f"clone(u) returned a {type(c).__module__}.{type(c).__name__} that shares "
            f"memory with u (a view such as u[:] or u.reshape(...)); clone must return an "
            f"independent copy (e.g. u.copy()): MGRIT changes copies in place, and through "
            f"a view it would change u too and could converge to a wrong answer")


SAME_PROBLEM = ("every rank must give Core/solve the same tstart, tstop, ntime, times "
                "and options")


def _problem_fields(tstart: Any, tstop: Any, ntime: Any, grid: Optional[np.ndarray],
                    options: Options, fine_ranges: Optional[List[Tuple[int, int]]],
                    labels: ErrorLabels) -> Dict[str, Any]:
    """What every rank of a Core must agree on, by name, in the order a difference is
    searched for (braidpy.parallel.fingerprint)."""
    fields: Dict[str, Any] = {"tstart": float(tstart), "tstop": float(tstop),
                              "ntime": int(ntime), "times": grid}
    for f in dataclasses.fields(options):
        fields[f.name] = getattr(options, f.name)
    for name in ("cfactor", "nrelax", "crelax_weight"):  # 4 and {"default": 4, 1: 4}: one setting
        default, levels = options.per_level(name)
        levels = {level: v for level, v in levels.items() if v != default}
        fields[name] = {**levels, "default": default} if levels else default
    fields["ownership"] = fine_ranges
    fields["labels"] = labels
    return fields


def stop_reason(options: Options, nlevels: int, residuals: List[float]) -> Tuple[bool, str]:
    """(converged, why the solve stopped) from its residual history: the core's halting
    test (abs_tol, or rel_tol against the first computed norm) on the last norm."""
    if nlevels == 1:
        return True, "sequential"
    if residuals:
        r = residuals[-1]
        if r < options.abs_tol or (options.rel_tol > 0.0 and r < options.rel_tol * residuals[0]):
            return True, "tolerance"
    return False, "max_iter"


def _report_progress(print_level: int, k: int, rnorm: float, has: bool,
                     full: bool = False, refined: Optional[Tuple[int, bool]] = None,
                     limits: Tuple[Optional[int], int] = (None, 200),
                     norms: Optional[Sequence[float]] = None, cfactor: int = 0) -> None:
    """Rank 0, each iteration: log the residual, print it with print_level >= 1 (full:
    the full residual norm of ``full_rnorm=True``, as XBraid prints it; refined:
    (refinements, stopped) of ``refine=True``, ``rnorm`` then the fine grid's intervals,
    and ``limits`` its tpoints_cutoff and max_refinements; norms: print level 3's norm at
    every fine C-point, XBraid's lines)."""
    if norms is not None:
        if print_level >= 3:
            print("".join(f"  Braid:  time step: {j * cfactor:6d}, rnorm: {r:1.2e}\n"
                          for j, r in enumerate(norms)), end="")
            sys.stdout.flush()
        return
    if refined is not None:
        nrefine, stopped = refined
        ntime = int(rnorm)
        logger.debug("iteration %d: %s, %d time steps", k,
                     "refinement stopped" if stopped else "refined", ntime)
        if print_level >= 1:
            if stopped:
                cutoff = INT_MAX if limits[0] is None else limits[0]
                print(f"  Braid: Temporal refinement stopped, {ntime} time steps, "
                      f"{nrefine} refinements done")
                print(f"  Braid: Temporal refinement limits: time steps = {cutoff}, "
                      f"refinements = {limits[1]}")
            else:
                print(f"  Braid: Temporal refinement occurred, {ntime} time steps")
            sys.stdout.flush()
        return
    if full:
        logger.debug("iteration %d: full residual %.6e", k, rnorm)
        if print_level >= 1:
            print(f"  Braid: Full || r_{k} || = {rnorm:.6e}")
            sys.stdout.flush()
        return
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("iteration %d: residual %s", k, f"{rnorm:.6e}" if has else "n/a")
    if print_level >= 1:
        print(f"  Braid: || r_{k} || = {rnorm:.6e}" if has else
              f"  Braid: || r_{k} || not available")
        sys.stdout.flush()


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
    options : Options or dict, optional
        MGRIT options (:class:`braidpy.Options`); keyword options override its fields.
    ownership : sequence of (lo, hi), optional
        The fine indices each rank owns, contiguous in rank order (default: XBraid's
        block distribution). ``braidpy.adjoint`` uses it for the mirrored layout.
    labels : ErrorLabels, optional
        How errors name ranks and callbacks (for apps that wrap other apps).
    **kwargs
        Options by name (see :class:`braidpy.Options`).

    Notes
    -----
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
                 comm: Any = None, times: Union[Sequence[float], np.ndarray, None] = None,
                 options: Union[Options, Mapping[str, Any], None] = None,
                 ownership: Optional[Sequence[Tuple[int, int]]] = None,
                 labels: Optional[ErrorLabels] = None, **kwargs: Any):
        self.rank, self.size = rank_size(comm)
        self.comm = comm
        self._tcomm = None
        # Our own duplicate of comm: the core's messages never meet the user's. Made
        # first (a collective), so that an argument that is bad on one rank only is
        # announced to the others below instead of leaving them waiting in Dup.
        self._calls = Calls(comm)  # entry calls, agreed at each (braidpy.parallel.paths)
        if self.size > 1:
            self._tcomm = TimeComm(comm, self._calls.members)
        else:
            note_call("making a Core", 1)  # told to the peers if this rank leaves early
        self._busy = threading.Lock()  # taken without waiting: concurrent use is an error
        self._closed = False  # close() was called: no more solves
        self._cold = True  # the next solve starts from init (mirrors the compiled core)
        failure: Optional[BaseException] = None
        problem: Optional[Dict[str, Any]] = None
        try:
            self._options = Options.coerce(options, **kwargs)
            check_app_callbacks(app)
            residual, step_ustop = check_residual(app, self._options)
            if self._options.refine and coarsens_in_space(app):
                raise ValueError("refine=True with spatial coarsening (App.coarsen/refine) is "
                                 "not supported")
            check_delta(app, self._options, residual)
            grid = _time_grid(tstart, tstop, ntime, times)
            if self._options.periodic:  # the step into point ntime (point 0) ends at tstop
                grid[-1] = float(tstop)
            self.labels = labels or ErrorLabels()
            ranks = self.labels.ranks
            if ranks is not None and len(ranks) != self.size:
                raise ValueError(f"labels.ranks has {len(ranks)} entries for {self.size} ranks")
            fine_ranges = None if ownership is None else \
                check_ranges(ownership, int(ntime), self.size)
            if self.size > 1:
                problem = _problem_fields(tstart, tstop, ntime, None if times is None else grid,
                                          self._options, fine_ranges, self.labels)
            # The app's own clone, once, before any work (init reads the grid's facts).
            tell_app_the_grid(app, tstart, tstop, ntime)
            _check_clone_copies(app, float(tstart))
        except Exception as error:  # noqa: BLE001 - told to every rank, raised here
            failure = error
        # One collective: every rank was given the same grid and options (or raises).
        try:
            same_everywhere(self._wire, problem, "the problem", hint=SAME_PROBLEM, error=failure,
                            ranks=None if failure is not None else self.labels.ranks)
        except BaseException:
            self.close()  # on every rank at once, not at a later garbage collection
            raise
        finally:
            del failure  # no exception <-> frame cycle (braidpy.parallel.agree)
        self.app = app
        tell_app_the_grid(app, tstart, tstop, ntime)
        # Not a bound method: the compiled solver would hold self (a reference cycle).
        progress = functools.partial(
            _report_progress, self._options.print_level,
            limits=(self._options.tpoints_cutoff, self._options.max_refinements)) \
            if self.rank == 0 else None
        core_options = self._options.to_core()
        # Delta correction steps each state with its basis: one step call per state.
        core_options.batch = self._options.batch and has_step_batch(app) and \
            self._options.delta_rank == 0
        core_options.residual = residual
        core_options.step_ustop = step_ustop
        self.user_residual: bool = residual
        if fine_ranges is not None:
            core_options.fine_ranges = fine_ranges
        self.batched: bool = core_options.batch
        self._solver = _core.Solver(app, self._tcomm, self.rank, self.size, core_options,
                                    grid.tolist(), progress)
        self._generation = 0  # solves started: a Result answers for its own only
        if self._options.print_level >= 2:
            with self._agreement("printing the levels"):  # a closed stdout stops all ranks
                if self.rank == 0:
                    for level, info in enumerate(self._solver.levels()):
                        print(f"  Braid: level {level}: {info['n']} intervals, "
                              f"cfactor {info['cfactor']}, nrelax {info['nrelax']}")

    @property
    def options(self) -> Options:
        """The options this Core was made with (fixed: make a new Core to change them;
        the ranks checked at creation that they all have the same)."""
        return self._options

    @property
    def _wire(self) -> Any:
        """The communicator of braidpy's own collectives (None when serial)."""
        return None if self._tcomm is None else self._tcomm.comm

    # ------------------------------------------------------------ the grid
    @property
    def nlevels(self) -> int:
        """Number of levels in the hierarchy."""
        return self._solver.nlevels

    @property
    def level_info(self) -> List[Dict[str, Any]]:
        """Per level: n (intervals), cfactor, nrelax, fine_stride and this rank's lo..hi."""
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

    # --------------------------------------------------------------- solving
    def solve(self, *, final_sweep: bool = True) -> Result:
        """Run MGRIT to the halting test; returns a :class:`Result` (on every rank).

        Raises the original exception of a failing callback on the rank where it
        failed and :class:`BraidError` on the others; :class:`DivergenceError`
        if the residual norm is not finite. Ctrl-C stops every rank within one cycle
        (``KeyboardInterrupt`` where it arrived, BraidError elsewhere; see
        docs/errors.md). A Core serves one solve at a time: a call from another
        thread or from inside a callback meanwhile raises RuntimeError.

        ``final_sweep=False`` (on every rank alike) leaves out the final F-sweep where
        the last fine point is a C-point and ``storage`` is not "all": the solve then
        computes the final value and the C-points only, calls no ``access``, and keeps
        no F-point (:meth:`stored` gives None there). For callers that need the final
        state alone: a line search's objective (the sweep is N (1 - 1/cfactor) steps).
        """
        if getattr(self, "_closed", False):
            announce_failure(self._calls.members,  # the peers' solve: not joined
                             f"rank {self._world_rank()} called Core.solve on a Core it had "
                             f"closed (Core.close()), so it will not join this solve")
            raise RuntimeError("this braidpy Core was closed (Core.close() released its "
                               "communicator); it cannot solve again: make a new Core")
        if not self._busy.acquire(blocking=False):
            raise RuntimeError(BUSY)
        try:
            with deferred_interrupts():
                return self._solve(bool(final_sweep))
        finally:
            self._busy.release()

    def _solve(self, final_sweep: bool = True) -> Result:
        start = time.perf_counter()
        self._started_cold = self._cold
        # The one collective of a solve's setup: every rank is in its same solve call
        # (braidpy.parallel.paths names ranks that took other paths), with the same
        # final_sweep, and starts cold if any rank does.
        rows = entry(self._wire, self._calls, "Core.solve", (int(self._cold), int(final_sweep)),
                     self.labels.ranks)
        if rows is not None and (rows[:, 4] != rows[0, 4]).any():
            raise ValueError("every rank must call solve with the same final_sweep; got "
                             + ", ".join(f"final_sweep={bool(v)} on rank {self._rank_label(r)}"
                                         for r, v in enumerate(rows[:, 4].tolist())))
        if rows is not None and rows[:, 3].max():
            # Grid and options are fixed per Core
            # (checked when it was made), but a rank's next start turns cold on its own
            # (reset_guess() there, or a failed solution()), and ranks that disagree on a
            # cold start (skip, seq_soln) run different schedules: all start cold.
            self._solver.reset_guess()
            self._started_cold = True
        self._generation += 1
        self._cold = True  # a failed or diverged solve leaves the compiled core cold
        # No local may hold the outcome: it is not garbage-collected, and a frame in a
        # failure's traceback holding it would make an uncollectable cycle.
        self._check(self._run_core(final_sweep))
        try:
            final = self._broadcast_final()
            result = self._result(final, time.perf_counter() - start)
        except BaseException:
            # Failed after the core's solve (the final value's clone, bufpack or
            # bufunpack, the summary line, require_convergence): the next solve starts
            # cold too, as after any failure (on every rank: these fail on all of them).
            self._solver.reset_guess()
            raise
        self._cold = False
        return result

    def _run_core(self, final_sweep: bool = True) -> _core.Outcome:
        with routed_to(self._solver.interrupt):
            if take_interrupt() is not None:  # arrived just before: stop at the first agreement
                self._solver.interrupt()
            return self._solver.solve(final_sweep)

    def _result(self, final: Any, wall_time: float) -> Result:
        info: List[Dict[str, Any]] = self._solver.levels()
        coarsest = info[-1]
        if coarsest["cfactor"] > coarsest["n"]:  # solved by stepping: no C/F split
            coarsest["cfactor"] = None
        timings = self._solver.timings() if self.options.timings else {}
        timings["total"] = wall_time
        history = self._solver.residuals()
        full = self._solver.full_residuals()
        tested = full if self.options.full_rnorm else history
        converged, reason = stop_reason(self.options, len(info), [r for _, r in tested])
        if not converged and self.options.require_convergence:
            o = self.options
            raise ConvergenceError(
                self._solver.iterations, history[-1][1] if history else None,
                f"abs_tol={o.abs_tol:g}" + (f" / rel_tol={o.rel_tol:g}" if o.rel_tol else ""))
        result = Result(converged=converged, stop_reason=reason,
            iterations=self._solver.iterations, residuals=[r for _, r in history],
            residual_iterations=[k for k, _ in history], levels=len(info), level_info=info,
            times=self.times, owned=self.owned, final=final, counts=self.counts(),
            timings=timings, full_residuals=[r for _, r in full],
            full_residual_iterations=[k for k, _ in full],
            final_full_residual=(self._solver.final_full_residual()
                                 if self.options.full_rnorm else None),
            refinements=self._solver.refinements,
            lyapunov_exponents=(np.array(self._solver.lyapunov_exponents())
                                if self.options.lyapunov_exponents else None),
            error_estimates=self._solver.error_estimates() if self.options.est_error else None,
            solution_source=functools.partial(self._solution_of, self._generation))
        if self.options.timings == 2 or self.options.cycle_file is not None:
            # A file one rank cannot write (a full disk, a bad path) stops every rank,
            # each naming the option and the file.
            with self._agreement("writing the timer and cycle files"):
                if self.options.timings == 2:  # XBraid's timing level 2: every rank's file
                    result.write_timers(self.options.timer_file, self.rank, what="timer_file")
                if self.options.cycle_file is not None and self.rank == 0:
                    self._write_cycle_file(result)
        return result

    def _write_cycle_file(self, result: Result) -> None:
        """XBraid's braid.out.cycle for the solve that made ``result`` (braidpy._cycle)."""
        o = self.options
        tested = (zip(result.full_residual_iterations, result.full_residuals) if o.full_rnorm
                  else zip(result.residual_iterations, result.residuals))
        lines = cycle_lines(
            nlevels=result.levels, iterations=result.iterations, ntime=len(result.times) - 1,
            skipped=o.skip and self._started_cold and not o.seq_soln and result.levels > 1,
            fmg=o.fmg, nfmg=o.nfmg, fmg_vcycles=o.fmg_vcycles, residuals=dict(tested),
            abs_tol=float(o.abs_tol), rel_tol=float(o.rel_tol))
        assert o.cycle_file is not None  # the caller writes only when one is set
        text = "".join(line + "\n" for line in lines)
        write_atomically(o.cycle_file, "cycle_file", lambda f: f.write(text.encode("utf-8")))

    def reset_guess(self) -> None:
        """The next solve starts again from app.init (a cold start). Under MPI, on every
        rank: the ranks agree on it at the start of the next solve."""
        self._solver.reset_guess()
        self._cold = True

    def set_initial_condition(self, u0: Any, *, copy: bool = True) -> None:
        """Use u0 as the value at tstart in the next solve (a copy unless copy=False,
        when the Core takes u0 itself; the caller must not use it afterwards)."""
        if self._options.periodic:
            raise ValueError("set_initial_condition: a periodic problem (periodic=True) "
                             "has no initial condition")
        self._solver.set_initial_condition(self.app.clone(u0) if copy else u0)

    # ---------------------------------------------------------- stored values
    def stored(self, index: int) -> Any:
        """The stored fine value at ``index`` after a solve, or None.

        Available: owned C-points; with ``storage="all"``, ``"final"`` or 0 every owned
        point, and the point just left of the owned range (received in the final
        sweep). The vector is the Core's own (not a copy): read it, do not change it;
        it stays valid until the next solve.
        """
        return self._solver.stored(int(index))

    def stored_block(self, start: int, stop: int, step: int = 1, *,
                     out: Any = None) -> Optional[Any]:
        """The stored values at ``range(start, stop, step)`` stacked into one new array
        (one copy in C++: NumPy float64 states, or CUDA arrays (CuPy) of float64 or
        float32 in one kernel on the device), or None when one is missing or they are
        not all such arrays of one shape and dtype (then gather them with :meth:`stored`).

        ``out``: stack into this array instead (NumPy float64 states only; a writable
        C-contiguous float64 array of shape ``(count, *state shape)``), which is
        returned; None when it does not fit. A buffer reused from solve to solve costs
        no new memory each time (a new block above malloc's mmap threshold is faulted
        in page by page)."""
        return self._solver.stored_block(int(start), int(stop), int(step), out)

    def stored_view(self, start: int, stop: int, step: int = 1) -> Optional[Any]:
        """The stored values at ``range(start, stop, step)`` as one read-only NumPy view
        without a copy, or None (then :meth:`stored_block` copies them).

        A view exists when the values are float64 NumPy states stored as evenly spaced
        rows of one block, in either direction: a lockstep F-sweep stores the k-th point
        of every interval that way, so every cf-th state, as MGRIT's batched steps ask
        for them. Like :meth:`stored`, it is valid until the next solve."""
        return self._solver.stored_view(int(start), int(stop), int(step))

    def solution(self, t: Optional[float] = None, *, index: Optional[int] = None) -> Any:
        """A copy of the fine solution at time t (or fine index) of the last solve, on
        the owning rank (see :meth:`Result.solution`)."""
        i = fine_index(self.times, self.owned, t, index)
        return self._solution_of(self._generation, i)

    def _solution_of(self, generation: int, index: int) -> Any:
        if generation != self._generation:
            raise ValueError("this Result is from an earlier solve of its Core; the Core "
                             "has solved again since (take solutions before re-solving)")
        value = self._check(self._solver.solution(index), collective=False)
        if value is None:  # an F-point ahead of this rank's first C-point, its sweep skipped
            raise ValueError(f"the state at fine index {index} was not kept: the last solve "
                             f"left out its final sweep (solve(final_sweep=False))")
        return value

    def counts(self) -> Dict[str, int]:
        """Callback calls of the last solve (or objective), by callback name;
        ``step_batch_items`` counts the states advanced by batched calls."""
        return self._solver.counts()

    # ----------------------------------------------------------------- errors
    def _rank_label(self, r: int) -> int:
        """How messages name rank ``r`` of this Core's communicator."""
        if self.labels.ranks is not None:
            return self.labels.ranks[r]
        members = self._calls.members
        return members[r] if members is not None else r

    def _world_rank(self) -> int:
        return self._rank_label(self.rank)

    def _agreement(self, what: str):
        return agreed(self._wire, what, self.labels.ranks)

    def _check(self, outcome: _core.Outcome, collective: bool = True) -> Any:
        """The value of the compiled core's outcome, or its failure raised: on every
        rank after a solve (the ranks already stopped together; here they agree on the
        message), on this rank only after solution(), which runs on one rank."""
        if outcome.kind != "ok":
            self._cold = True  # the compiled core discarded its solution (on this rank)
        if outcome.kind == "ok":
            if outcome.interrupted:  # after the last agreement: the next one delivers it
                postpone_interrupt()
            return outcome.vector
        if outcome.kind == "diverged":
            raise DivergenceError(outcome.iteration, outcome.level, outcome.value)
        name = outcome.callback
        where = self.labels.callbacks.get(name, name) or "communication"
        error = outcome.error
        del outcome
        if collective and self._tcomm is not None:
            # A fresh duplicate: nothing a broken exchange left behind meets the next solve.
            self._tcomm.renew()
        try:
            self._agreement("solve").settle(error, where) if collective else \
                Agreement(None, "solve").settle(error, where)
        finally:
            del error  # no exception <-> frame cycle (braidpy.parallel.agree)
        raise BraidError("solve stopped: a message from another rank reported a failure")

    def _broadcast_final(self) -> Any:
        mine = self._solver.final_value()
        if self._wire is None:
            self._print_summary()
            return None if mine is None else self.app.clone(mine)
        # Two collectives carry the final value from the rank that holds it (the owner
        # of the last time point, after any refinement): one allgather says who holds
        # it, whether its packing failed and the length of what follows; one broadcast
        # sends the packed value, or the packing failure's text, which every rank then
        # raises as an agreement would (the original on the holder, BraidError naming
        # it elsewhere).
        packed: Optional[bytes] = None
        failure: Optional[BaseException] = None
        if mine is not None:
            try:
                packed = packed_bytes(self.app, mine)
            except BaseException as error:  # noqa: BLE001 - a Ctrl-C too, as in agreed()
                failure = error
        about = Agreement(self._wire, "packing the final value", self.labels.ranks)
        text = None if failure is None else describe(failure).encode("utf-8", "replace")
        rows = allgather_ints(self._wire, [int(mine is not None),
                                           -1 if text is None else len(text),
                                           len(packed) if packed is not None else 0])
        holders = np.flatnonzero(rows[:, 0])
        if holders.size == 0:  # the same rows on every rank: every rank raises
            raise RuntimeError("braidpy: no rank holds the final value after the solve")
        root = int(holders[-1])
        failed = int(rows[root, 1]) >= 0
        buf = np.empty(int(rows[root, 1 if failed else 2]), dtype=np.uint8)
        if self.rank == root:
            buf[:] = np.frombuffer(memoryview(text if failed else packed).cast("B"),  # type: ignore[arg-type]
                                   dtype=np.uint8)
        data = bcast_into(self._wire, buf, root).tobytes()
        if failed:
            summaries: List[Optional[str]] = [None] * self.size
            summaries[root] = data.decode("utf-8", "replace")
            try:
                about.conclude(failure if self.rank == root else None, summaries)
            finally:
                del failure  # no exception <-> frame cycle (braidpy.parallel.agree)
        # The last agreement of a solve: also where rank 0's summary line may fail.
        with self._agreement("unpacking the final value"):
            value = self.app.clone(mine) if self.rank == root else \
                self.app.bufunpack(bytearray(data))
            self._print_summary()
        return value

    def _print_summary(self) -> None:
        if self.rank != 0:
            return
        iterations = self._solver.iterations
        if logger.isEnabledFor(logging.DEBUG):
            history = self._solver.residuals()
            logger.debug("solve: %d iterations, %d levels, last residual %s", iterations,
                        self.nlevels, f"{history[-1][1]:.3e}" if history else "n/a")
        if self.options.print_level >= 1:
            print(f"  Braid: {iterations} iterations, {self.nlevels} levels")

    def close(self) -> None:
        """Release the Core's duplicate of the communicator now (also done when the
        Core is garbage collected). The Core cannot solve afterwards: :meth:`solve`
        then raises RuntimeError. Under MPI, close a Core on every rank."""
        if not getattr(self, "_closed", True):
            note_call("Core.close", self.size)  # named when this rank leaves early
        self._release()

    def _release(self) -> None:
        self._closed = True
        tcomm, self._tcomm = getattr(self, "_tcomm", None), None
        if tcomm is not None:
            tcomm.free()

    def __del__(self):
        # Release our duplicate of the communicator (MPI has a few thousand).
        self._release()


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
