"""What a solve returns: plain values, typed."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ._limits import write_atomically

__all__ = ["Result", "fine_index"]


@dataclasses.dataclass(frozen=True, eq=False)
class Result:
    """Outcome of :func:`braidpy.solve` / :meth:`braidpy.Core.solve`.

    Attributes
    ----------
    iterations : int
        XBraid's iteration count.
    residuals : list of float
        Fine residual norms r_k in iteration order (r_0 only when computed,
        i.e. skip=False; with skip=True the list starts at r_1).
    residual_iterations : list of int
        The k of each entry of ``residuals``.
    levels : int
        Number of levels built.
    level_info : list of dict
        Per level: n (intervals), cfactor, nrelax, fine_stride, and this rank's lo..hi.
    times : numpy.ndarray
        The fine time grid t_0..t_N.
    owned : range
        Fine time indices whose values this rank holds.
    final : vector
        The solution at t_N, on every rank.
    counts : dict
        Callback calls of this solve, by callback name.
    timings : dict
        ``total`` wall seconds of the solve; with ``timings=True`` also the
        seconds spent inside each callback and in communication.
    converged : bool
        Whether the halting test was met (the same on every rank).
    stop_reason : str
        Why the solve stopped: "tolerance" (abs_tol or rel_tol met), "max_iter" (not
        converged), or "sequential" (one level: solved by stepping, exact).
    full_residuals : list of float
        With ``full_rnorm=True``: the full residual norm (every fine point) of each
        iteration that restricted from the fine level, in iteration order; else empty.
    full_residual_iterations : list of int
        The k of each entry of ``full_residuals``.
    final_full_residual : float or None
        With ``full_rnorm=True``: the full residual norm after the last iteration.
    refinements : int
        With ``refine=True``: rebuilds of the fine grid so far (by this Core; ``times``
        is the grid they made). An iteration that refined appears twice in
        ``residual_iterations``: its norm on the old grid, then on the new one.
    lyapunov_exponents : numpy.ndarray or None
        With ``lyapunov_exponents=True`` (Delta correction): the ``delta_rank`` Lyapunov
        exponents of the final FC-relaxation, the local exponents summed over every fine
        C-point and divided by ``tstop - tstart`` (XBraid's ex-07 prints them so), the
        same on every rank; else None.
    error_estimates : numpy.ndarray or None
        With ``est_error=True``: the Richardson error estimate at each fine point this
        rank owns (``owned``), from the last restriction of the fine level; else None.
    """

    iterations: int
    residuals: List[float]
    residual_iterations: List[int]
    levels: int
    level_info: List[Dict[str, Any]]
    times: np.ndarray
    owned: range
    final: Any
    counts: Dict[str, int]
    timings: Dict[str, float]
    converged: bool = True
    stop_reason: str = "tolerance"
    full_residuals: List[float] = dataclasses.field(default_factory=list)
    full_residual_iterations: List[int] = dataclasses.field(default_factory=list)
    final_full_residual: Optional[float] = None
    refinements: int = 0
    lyapunov_exponents: Optional[np.ndarray] = None
    error_estimates: Optional[np.ndarray] = None
    # Core.solution of the solve that made this result; it refuses once that Core
    # has solved again (the stored values are then another solve's).
    solution_source: Optional[Callable[..., Any]] = dataclasses.field(default=None, repr=False)

    def index_of(self, t: float) -> int:
        """Fine index of time t (the nearest grid point, which must be within 1e-9*dt)."""
        return _index_of(self.times, t)

    def solution(self, t: Optional[float] = None, *, index: Optional[int] = None) -> Any:
        """A copy of the fine solution at time t (or fine index), on the owning rank.

        F-point values are recomputed from their C-point unless storage="all" (or 0).
        Valid until the Core that produced this result solves again.
        """
        i = fine_index(self.times, self.owned, t, index)
        if self.solution_source is None:
            raise ValueError("this Result has no solver to recompute solutions from")
        return self.solution_source(i)

    def conv_history(self) -> str:
        """The residual history as XBraid's ``braid_WriteConvHistory`` writes it (braid.c):
        a header (start and stop time, time steps, levels, each level's time points and
        cfactor), then one line per iteration ``k = 0 .. iterations-1`` with the fine
        residual norm r_k, -1 where none was computed (the skipped first cycle)."""
        lines = [f"# start time       = {float(self.times[0]):e}",
                 f"# stop time        = {float(self.times[-1]):e}",
                 f"# time steps       = {len(self.times) - 1}",
                 f"# number of levels = {self.levels}",
                 "#  level   time-pts   cfactor"]
        for level, info in enumerate(self.level_info[:-1]):
            lines.append("#  % 5d  % 8d  % 7d" % (level, info["n"], info["cfactor"]))
        lines.append("#  % 5d  % 8d  \n" % (self.levels - 1, self.level_info[-1]["n"]))
        lines.append("# iter   residual norm")
        norms = dict(zip(self.residual_iterations, self.residuals))
        for k in range(self.iterations):
            lines.append("%03d      %1.14e" % (k, norms.get(k, -1.0)))
        return "\n".join(lines) + "\n"

    def write_conv_history(self, path: Any) -> None:
        """Write :meth:`conv_history` to ``path`` (XBraid's ``braid_WriteConvHistory``
        file, byte for byte for the same run; XBraid writes it from rank 0 only, and so
        should a parallel caller: every rank's Result holds the same history)."""
        _write_text(path, "Result.write_conv_history", self.conv_history())

    def timers(self, rank: int = 0) -> str:
        """This rank's timings in the layout of XBraid's ``braid_PrintTimers`` file
        (braid.c, written with ``braid_SetTimings(core, 2)``): the same lines in the same
        order, seconds as ``%1.3e``. braidpy's measured times go where XBraid's have the
        same meaning (step: ``step`` and ``step_batch`` together; spatialnorm: ``norm``;
        scoarsen/srefine: ``coarsen``/``refine``; MPI_wait: all of braidpy's
        ``communication``); what braidpy does not measure (drive_init, coarse solve,
        free, innerprod, bufsize, MPI_recv, MPI_send, MPI_wait_coarse) is 0. Needs a solve
        with ``timings=True``."""
        t = self.timings
        if "step" not in t:
            raise ValueError("no callback timings in this Result: solve with timings=True")
        rows = [("drive_init", 0.0), ("coarse solve", 0.0),
                ("step", t.get("step", 0.0) + t.get("step_batch", 0.0)),
                ("init", t.get("init", 0.0)), ("clone", t.get("clone", 0.0)),
                ("free", 0.0), ("sum", t.get("sum", 0.0)), ("spatialnorm", t.get("norm", 0.0)),
                ("innerprod", 0.0), ("bufsize", 0.0), ("bufpack", t.get("bufpack", 0.0)),
                ("bufunpack", t.get("bufunpack", 0.0)), None,
                ("access", t.get("access", 0.0)), ("sync", t.get("sync", 0.0)),
                ("residual", t.get("residual", 0.0)), ("scoarsen", t.get("coarsen", 0.0)),
                ("srefine", t.get("refine", 0.0)), None,
                ("MPI_recv", 0.0), ("MPI_send", 0.0), ("MPI_wait", t.get("communication", 0.0)),
                ("MPI_wait_coarse", 0.0)]
        out = f"\nTimings for rank {int(rank)}\n"
        for row in rows:
            out += "\n" if row is None else "   %-17s%1.3e\n" % row
        return out

    def write_timers(self, stem: Any = "braid_timings", rank: int = 0,
                     what: str = "Result.write_timers") -> str:
        """Write :meth:`timers` to ``{stem}_{rank:04d}.txt`` (XBraid's timer file name,
        ``braid_SetTimerFile``'s stem, default ``braid_timings``; every rank writes its
        own); returns the file name. A file that cannot be written (a full disk, a
        device, a missing permission) raises an ``OSError`` naming ``what`` and the
        file (nothing half written is left)."""
        name = f"{stem}_{int(rank):04d}.txt"
        _write_text(name, what, self.timers(rank))
        return name

    def __repr__(self) -> str:
        last = f", last residual {self.residuals[-1]:.3e}" if self.residuals else ""
        return f"<braidpy.Result {self.iterations} iterations, {self.levels} levels{last}>"


def _write_text(path: Any, what: str, text: str) -> None:
    """``text`` written to ``path`` as a whole (braidpy's checked writing: a file that
    cannot be written is an error naming ``what`` and the file, never a half file)."""
    write_atomically(path, what, lambda f: f.write(text.encode("utf-8")))


def _index_of(times: np.ndarray, t: Any) -> int:
    if isinstance(t, (bool, np.bool_)) or not isinstance(t, (numbers.Real, np.floating,
                                                             np.integer)):
        raise TypeError(f"t must be a real number (a time of the grid), got {t!r}")
    if not math.isfinite(float(t)):
        raise ValueError(f"t={t!r} is not a point of the time grid (t must be finite)")
    i = int(np.argmin(np.abs(times - float(t))))
    scale = times[-1] - times[0]
    if abs(times[i] - t) > 1e-9 * scale / max(len(times) - 1, 1):
        raise ValueError(f"t={t!r} is not a point of the time grid")
    return i


def fine_index(times: np.ndarray, owned: range, t: Optional[float],
               index: Optional[int]) -> int:
    """The fine index named by exactly one of t or index, checked against the grid and
    this rank's ``owned`` range (errors name the bad value)."""
    if (t is None) == (index is None):
        raise TypeError("give exactly one of t or index")
    if index is not None and (isinstance(index, (bool, np.bool_)) or
                              not isinstance(index, (numbers.Integral, np.integer))):
        raise TypeError(f"index must be an int (a fine time index), got {index!r}")
    i = int(index) if index is not None else _index_of(times, t)
    if not 0 <= i < len(times):
        raise IndexError(f"index {i} outside the grid 0..{len(times) - 1}")
    if i not in owned:
        raise ValueError(
            f"time index {i} is owned by another rank (this rank holds "
            f"{owned.start}..{owned.stop - 1})"
        )
    return i
