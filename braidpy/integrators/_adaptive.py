"""Adaptive embedded Runge-Kutta steps: each step [t0, t1] by error-controlled substeps
(Dormand-Prince 5(4) by default), as a braidpy App whose batched step gives every row its
own substeps."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ._initial import Guess, InitialValueApp
from ._tableau import ButcherTableau, tableau as named_tableau

__all__ = ["AdaptiveRK", "StepSizeError"]

#: The step-size controller of Hairer, Norsett and Wanner, *Solving ODEs I*, Sec. II.4,
#: eq. (4.13), with the constants of their DOPRI5 code (and of SciPy's RK45): the new
#: step is h * min(FACTOR_MAX, max(FACTOR_MIN, SAFETY * err^(-1/(q+1)))).
SAFETY = 0.9
FACTOR_MIN = 0.2
FACTOR_MAX = 10.0
#: The smallest rtol accepted: 100 units of roundoff (HNW's and SciPy's floor).
RTOL_MIN = 100.0 * float(np.finfo(np.float64).eps)
#: SciPy's and MATLAB's names for the two pairs.
ALIASES = {"rk45": "dopri5", "rk23": "bogacki_shampine"}


class StepSizeError(ArithmeticError):
    """An adaptive step could not reach its end: the step size fell below ten units of
    roundoff of ``t``, the substeps exceeded ``max_steps``, or ``f`` was not finite at an
    accepted point. The message names the step (``t0``, ``t1``), where it stopped
    (``t``) and why.

    Attributes
    ----------
    t0, t1 : float
        The step.
    t : float
        The time reached.
    h : float
        The last step size tried.
    """

    def __init__(self, message: str, t0: float, t1: float, t: float, h: float):
        super().__init__(message)
        self.t0, self.t1, self.t, self.h = t0, t1, t, h


def _nonzero(weights: Any) -> List[Tuple[int, float]]:
    return [(j, float(w)) for j, w in enumerate(np.asarray(weights).tolist()) if w != 0.0]


def _real_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"AdaptiveRK: {name} must be a real number, got {value!r}")
    return float(value)


def check_tolerances(rtol: Any, atol: Any) -> Tuple[float, Any]:
    """``(rtol, atol)`` checked: rtol a finite number >= RTOL_MIN, atol a positive finite
    number or array; a ValueError or TypeError names the bad value."""
    r = _real_number("rtol", rtol)
    if not (math.isfinite(r) and r >= RTOL_MIN):
        raise ValueError(f"AdaptiveRK: rtol must be a finite number >= {RTOL_MIN:.3g} "
                         f"(100 units of roundoff), got {rtol!r}")
    if isinstance(atol, numbers.Real) and not isinstance(atol, bool):
        a: Any = float(atol)
        bad = not (math.isfinite(a) and a > 0.0)
    else:
        try:
            a = np.array(atol, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"AdaptiveRK: atol must be a positive number or an array of "
                            f"them, got {atol!r}") from err
        bad = a.size == 0 or not bool(np.all(np.isfinite(a) & (a > 0.0)))
    if bad:
        raise ValueError(f"AdaptiveRK: atol must be positive and finite (each entry), got "
                         f"{atol!r}")
    return r, a


class AdaptiveRK(InitialValueApp):
    """``u' = f(t, u)`` integrated over each step ``[t0, t1]`` by an embedded explicit
    Runge-Kutta pair with step-size control: an MGRIT-ready App.

    Every call of ``step`` starts afresh at ``t0`` (so a step is a function of
    ``(u, t0, t1)`` alone, as MGRIT needs) and takes substeps until it lands exactly on
    ``t1``, each accepted when its error estimate is within the tolerance. The algorithm
    is Hairer, Norsett and Wanner's, *Solving Ordinary Differential Equations I*
    (2nd ed., 1993), Sec. II.4, as in their DOPRI5 code and SciPy's ``RK45``/``RK23``:

    - a substep of size ``h`` from ``(t, y)`` gives ``y_new`` (order p) and the error
      estimate ``e = h sum_i (b_i - b_hat_i) k_i``;
    - its error ``err = sqrt(mean((e / sc)^2))`` with
      ``sc = atol + rtol max(|y|, |y_new|)`` (eq. 4.11); the substep is accepted if
      ``err <= 1``;
    - the next size (accepted or not) is
      ``h min(10, max(0.2, 0.9 err^(-1/(q+1))))`` with ``q`` the lower of the two orders
      (eq. 4.13), at most ``h`` right after a rejection;
    - the first size by HNW's algorithm (p. 169): ``d0 = ||u||``, ``d1 = ||f(t0, u)||``,
      ``h0 = 0.01 d0 / d1`` (``1e-6`` if either is below ``1e-5``), one Euler step of
      ``h0`` for ``d2 = ||f(t0 + h0, u + h0 f) - f|| / h0``,
      ``h1 = (0.01 / max(d1, d2))^(1/(q+1))``, then ``min(100 h0, h1)``; ``h0`` and the
      result are capped by ``|t1 - t0|`` (DOPRI5's default ``hmax``);
    - a substep that would pass ``t1`` is cut to end exactly there. A tableau whose last
      stage is ``f`` at the new state (Dormand-Prince, Bogacki-Shampine: "first same as
      last") reuses it as the next substep's first stage;
    - a size below ten units of roundoff of ``t`` right after a rejection is a failure
      (below, Errors); elsewhere a smaller size is raised to that.

    The error estimate is formed as ``h sum_i (b_i - b_hat_i) (k_i - k_1)``: the same
    number (the weights sum to 0), but near a singularity, where the stages are large
    and nearly equal, their rounding stays out of it (from a zero state the Arenstorf
    satellite falls into the earth: of 127 such steps, 9 then failed, against 96 with
    the plain sum and 16 in ``solve_ivp``).

    Parameters
    ----------
    rhs : callable
        ``rhs(t, u)`` returns ``f(t, u)``, an array of ``u``'s shape; it must not modify
        ``u``. With ``vectorized=True`` it takes stacked states ``U`` of shape
        ``(m, *u.shape)`` and ``t`` a float64 array of shape ``(m, 1, ..., 1)`` (one time
        per row), and returns an array of ``U``'s shape: then every stage of every
        substep is one call for all rows still stepping (``step`` itself calls it with
        one row).
    u0 : array_like
        The initial value at ``tstart`` (copied).
    tableau : ButcherTableau or str, optional
        An explicit tableau with embedded weights ``b_hat`` and both orders given:
        ``"dopri5"`` (default; alias ``"rk45"``) or ``"bogacki_shampine"`` (alias
        ``"rk23"``), ``"heun_euler"``, or your own.
    rtol : float, optional
        The relative tolerance (default ``1e-3``, SciPy's and MATLAB's), at least
        ``100 eps``.
    atol : float or array_like, optional
        The absolute tolerance, > 0 (default ``1e-6``), or one per component of ``u0``.
    first_step : float, optional
        The first substep's size in every step (capped by ``|t1 - t0|``); default: HNW's
        algorithm above, which costs one ``rhs`` evaluation per step.
    max_steps : int, optional
        Substeps (accepted and rejected) allowed per step (default 10000).
    on_failure : {"raise", "stop"}, optional
        When a step cannot reach ``t1`` (the step size fell below ten units of roundoff,
        or ``max_steps`` ran out): raise a ``StepSizeError`` naming it (default), or end
        the step where it stopped and return the state reached there, counted in
        ``counts["failed"]``. ``"stop"`` is what SciPy's ``solve_ivp`` does (it reports
        the failure in ``status``; PyMGRIT's Arenstorf step does not read it, and as it
        asks for ``t_eval = (t0, t1)`` a failed step of its returns the start state):
        MGRIT's first iterates can be far from any orbit (a zero guess puts the
        satellite next to the earth), and their steps may fail where the converged ones
        do not.
    vectorized : bool, optional
        Whether ``rhs`` takes stacked states (see above).
    guess : {"u0", "zeros"} or callable, optional
        The initial guess away from ``tstart`` (default: a copy of ``u0``).

    Attributes
    ----------
    counts : dict
        Running totals, summed over rows: ``"steps"`` (calls' rows), ``"accepted"`` and
        ``"rejected"`` substeps, ``"rhs"`` (rows evaluated by ``rhs``), ``"failed"``
        (steps ended early by ``on_failure="stop"``).

    Notes
    -----
    Every row of ``step_stacked`` has its own substeps, step sizes and controller, all
    computed by elementwise operations and row-wise reductions; row k comes out bit for
    bit as ``step`` of row k alone whenever ``rhs`` of stacked states equals ``rhs`` of
    each row bit for bit (see ``ExplicitRK``).

    Errors: a ``StepSizeError`` naming the step when the step size falls below ten units
    of roundoff of ``t`` (trial substeps with non-finite values count as rejected) or
    ``max_steps`` substeps do not reach ``t1`` (unless ``on_failure="stop"``), and when
    the state or ``f`` is not finite where a step starts (always). An exception raised by
    ``rhs`` surfaces unchanged (with a note naming the steps on Python 3.11 and later).

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import AdaptiveRK
    >>> app = AdaptiveRK(lambda t, u: -u, np.ones(1), rtol=1e-8, atol=1e-10,
    ...                  vectorized=True)
    >>> r = braidpy.solve(app, 0.0, 1.0, 16, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - np.exp(-1.0)) < 1e-8)
    True
    """

    rhs: Callable[..., Any]
    rtol: float
    atol: Any
    first_step: Optional[float]
    max_steps: int
    on_failure: str
    vectorized: bool
    _rows: List[List[Tuple[int, float]]]
    _c: List[float]
    _b: List[Tuple[int, float]]
    _e: List[Tuple[int, float]]
    _e_diff: List[Tuple[int, float]]
    _exponent: float
    _fsal: bool

    def __init__(self, rhs: Callable[..., Any], u0: Any, tableau: Any = "dopri5", *,
                 rtol: float = 1e-3, atol: Any = 1e-6, first_step: Optional[float] = None,
                 max_steps: int = 10000, on_failure: str = "raise", vectorized: bool = False,
                 guess: Guess = "u0"):
        if not callable(rhs):
            raise TypeError(f"AdaptiveRK: rhs must be a callable rhs(t, u), got {rhs!r}")
        tab = named_tableau(ALIASES.get(tableau, tableau) if isinstance(tableau, str)
                            else tableau)
        if not tab.explicit:
            raise ValueError(f"AdaptiveRK: the tableau {tab.name!r} is not explicit (A must be "
                             f"strictly lower triangular), A = {tab.A.tolist()}")
        if tab.b_hat is None or tab.order is None or tab.embedded_order is None:
            raise ValueError(f"AdaptiveRK: the tableau {tab.name!r} needs embedded weights "
                             f"b_hat, order and embedded_order (an embedded pair), got "
                             f"b_hat={None if tab.b_hat is None else tab.b_hat.tolist()}, "
                             f"order={tab.order!r}, embedded_order={tab.embedded_order!r}")
        self.rtol, atol_checked = check_tolerances(rtol, atol)
        if first_step is not None:
            first_step = _real_number("first_step", first_step)
            if not (math.isfinite(first_step) and first_step > 0.0):
                raise ValueError(f"AdaptiveRK: first_step must be positive and finite, got "
                                 f"{first_step!r}")
        if isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) \
                or max_steps < 1:
            raise ValueError(f"AdaptiveRK: max_steps must be an int >= 1, got {max_steps!r}")
        if on_failure not in ("raise", "stop"):
            raise ValueError(f"AdaptiveRK: on_failure must be 'raise' or 'stop', got "
                             f"{on_failure!r}")
        if not isinstance(vectorized, bool):
            raise TypeError(f"AdaptiveRK: vectorized must be True or False, got {vectorized!r}")
        super().__init__(u0, guess)
        if isinstance(atol_checked, np.ndarray):
            try:
                atol_checked = np.broadcast_to(atol_checked, self.u0.shape).reshape(-1).copy()
            except ValueError:
                raise ValueError(f"AdaptiveRK: atol of shape {atol_checked.shape} does not "
                                 f"broadcast to the state's shape {self.u0.shape}") from None
        self.atol = atol_checked
        self.rhs = rhs
        self.tableau: ButcherTableau = tab
        self.first_step = first_step
        self.max_steps = int(max_steps)
        self.on_failure = on_failure
        self.vectorized = vectorized
        self.counts: Dict[str, int] = {"steps": 0, "accepted": 0, "rejected": 0, "rhs": 0,
                                       "failed": 0}
        s = tab.stages
        self._rows = [_nonzero(tab.A[i, :i]) for i in range(s)]
        self._c = [float(c) for c in tab.c.tolist()]
        self._b = _nonzero(tab.b)
        self._e = _nonzero(tab.b - tab.b_hat)
        self._e_diff = [(j, w) for j, w in self._e if j > 0]
        self._exponent = -1.0 / (min(tab.order, tab.embedded_order) + 1)
        # first same as last: the last stage is f at the new state
        self._fsal = bool(s > 1 and np.array_equal(tab.A[-1], tab.b) and tab.c[-1] == 1.0)

    # --- the braidpy contract --------------------------------------------------------------

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> None:
        """``u`` from ``t0`` to ``t1`` by error-controlled substeps, in place."""
        self._integrate(u[np.newaxis], np.array([float(t0)]), np.array([float(t1)]))

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> None:
        """Row k of ``U`` from ``t0s[k]`` to ``t1s[k]``, in place, each row with its own
        substeps: the right-hand side is evaluated on the rows still stepping."""
        self._integrate(U, np.array(t0s, dtype=np.float64).reshape(-1),
                        np.array(t1s, dtype=np.float64).reshape(-1))

    # --- the integration -------------------------------------------------------------------

    def _integrate(self, Y: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> None:
        """Rows of Y from t0 to t1 (arrays of len(Y)), in place."""
        m = len(Y)
        if not (np.all(np.isfinite(t0)) and np.all(np.isfinite(t1))):
            k = int(np.flatnonzero(~(np.isfinite(t0) & np.isfinite(t1)))[0])
            raise ValueError(f"AdaptiveRK: the step over [{float(t0[k])!r}, {float(t1[k])!r}] "
                             f"has a time that is not finite")
        self.counts["steps"] += m
        direction = np.sign(t1 - t0)
        active = direction != 0.0
        if not active.any():
            return
        t = t0.copy()
        F = np.zeros_like(Y)
        idx = np.flatnonzero(active)
        F[idx] = self._start(Y[idx], t[idx], t0[idx], t1[idx])
        h_abs = np.zeros(m)
        h_abs[idx] = self._first_steps(Y[idx], F[idx], t0[idx], t1[idx], direction[idx])
        rejected = np.zeros(m, dtype=bool)
        attempts = np.zeros(m, dtype=np.int64)
        last_err = np.zeros(m)
        while idx.size:
            tt, d = t[idx], direction[idx]
            min_step = 10.0 * np.abs(np.nextafter(tt, d * np.inf) - tt)
            # after a rejection, a step size below ten units of roundoff of t ends the step
            # (HNW's DOPRI5, SciPy); else the size is raised to that
            too_small = rejected[idx] & (h_abs[idx] < min_step)
            if too_small.any():
                self._too_small(idx, too_small, h_abs, last_err, t0, t1, t)
                keep = ~too_small
                idx, tt, d, min_step = idx[keep], tt[keep], d[keep], min_step[keep]
                if not idx.size:
                    break
            y, f, tb = Y[idx], F[idx], t1[idx]
            ha = np.maximum(h_abs[idx], min_step)
            t_new = tt + ha * d
            t_new = np.where(d * (t_new - tb) > 0.0, tb, t_new)   # end exactly at t1
            h = t_new - tt
            ha = np.abs(h)
            y_new, k_last, err = self._substep(y, f, tt, h, t_new, tb, t0[idx])
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                finite = np.isfinite(err) & self._finite_rows(y_new)
                accept = finite & (err <= 1.0)
                grow = np.where(err == 0.0, FACTOR_MAX,
                                np.minimum(FACTOR_MAX, SAFETY * err ** self._exponent))
                shrink = np.where(finite, np.maximum(FACTOR_MIN,
                                                     SAFETY * err ** self._exponent),
                                  FACTOR_MIN)
            grow = np.where(rejected[idx], np.minimum(1.0, grow), grow)
            h_abs[idx] = ha * np.where(accept, grow, shrink)
            rejected[idx] = ~accept
            last_err[idx] = np.where(finite, err, np.nan)
            attempts[idx] += 1
            n_acc = int(np.count_nonzero(accept))
            self.counts["accepted"] += n_acc
            self.counts["rejected"] += len(idx) - n_acc
            go_on = accept & (t_new != tb)
            failed = self._over_max_steps(idx, accept & ~go_on, ha, attempts, t0, t1, tt)
            acc = idx[accept]
            t[acc] = t_new[accept]
            Y[acc] = y_new[accept]
            if self._fsal:
                F[acc] = k_last[accept]
            elif (go_on & ~failed).any():
                nxt = idx[go_on & ~failed]
                F[nxt] = self._start(Y[nxt], t[nxt], t0[nxt], t1[nxt])
            idx = idx[(~accept | go_on) & ~failed]

    def _start(self, y: np.ndarray, t: np.ndarray, t0: np.ndarray,
               t1: np.ndarray) -> np.ndarray:
        """f at the starting points of substeps; a StepSizeError if y or f is not finite."""
        f = self._eval(t, y, t0, t1)
        with np.errstate(invalid="ignore"):
            ok = self._finite_rows(y) & self._finite_rows(f)
        if not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            what = "the state" if not self._finite_rows(y[k:k + 1])[0] else "f(t, u)"
            raise StepSizeError(
                f"AdaptiveRK: {what} is not finite at t = {float(t[k])!r} in the step over "
                f"[{float(t0[k])!r}, {float(t1[k])!r}]", float(t0[k]), float(t1[k]),
                float(t[k]), 0.0)
        return f

    def _first_steps(self, y: np.ndarray, f: np.ndarray, t0: np.ndarray, t1: np.ndarray,
                     d: np.ndarray) -> np.ndarray:
        """The first substep's size per row: first_step, or HNW's algorithm (Sec. II.4)."""
        interval = np.abs(t1 - t0)
        if self.first_step is not None:
            return np.minimum(self.first_step, interval)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            scale = self._scale(np.abs(y), None)
            d0, d1 = self._rms(self._flat(y) / scale), self._rms(self._flat(f) / scale)
            h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
            h0 = np.minimum(h0, interval)
            y1 = y + self._column(h0 * d, y) * f
        f1 = self._eval(t0 + h0 * d, y1, t0, t1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            d2 = self._rms(self._flat(f1 - f) / scale) / h0
            small = (d1 <= 1e-15) & (d2 <= 1e-15)
            h1 = np.where(small, np.maximum(1e-6, h0 * 1e-3),
                          (0.01 / np.maximum(d1, d2)) ** (-self._exponent))
            h = np.minimum(np.minimum(100.0 * h0, h1), interval)
        # a non-finite d2 (f blew up in the trial Euler step) leaves h0 itself
        return np.where(np.isfinite(h) & (h > 0.0), h, h0)

    def _substep(self, y: np.ndarray, f: np.ndarray, t: np.ndarray, h: np.ndarray,
                 t_new: np.ndarray, t1: np.ndarray,
                 t0: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One trial substep of size h per row: (y_new, f at its last stage, err).

        Formed as HNW's DOPRI5 forms them: a stage's argument ``y + h (sum_j a_ij k_j)``,
        the error ``(sum_i e_i k_i) h`` (the weighted sums first: near a singularity the
        k_i are large and the error estimate is a difference of them)."""
        H = self._column(h, y)
        ks = [f]
        s = len(self._rows)
        y_new = y
        user = np.geterr()  # rhs runs under the caller's floating-point error handling
        with np.errstate(over="ignore", invalid="ignore"):
            for i in range(1, s):
                arg = y + H * self._combine(self._rows[i], ks)
                if self._fsal and i == s - 1:
                    y_new, ti = arg, t_new     # the last stage's argument is the new state
                else:
                    ti = t + self._c[i] * h
                with np.errstate(**user):
                    ks.append(self._eval(ti, arg, t0, t1))
            if not self._fsal:
                y_new = y + H * self._combine(self._b, ks)
            # sum_i e_i k_i = sum_i e_i (k_i - k_0), as the e_i sum to 0: the differences
            # are exact where the k_i agree to a factor 2 (Sterbenz), so near a singularity
            # the estimate does not drown in the rounding of the large k_i
            e = H * self._combine([(n, w) for n, (_, w) in enumerate(self._e_diff)],
                                  [ks[j] - ks[0] for j, _ in self._e_diff])
            scale = self._scale(np.abs(y), np.abs(y_new))
            err = self._rms(self._flat(np.abs(e)) / scale)
        return y_new, ks[-1], err

    @staticmethod
    def _combine(weights: List[Tuple[int, float]], ks: List[np.ndarray]) -> np.ndarray:
        """sum_j w_j k_j over the non-zero weights, in order."""
        (j0, w0), *rest = weights
        acc = w0 * ks[j0]
        for j, w in rest:
            acc += w * ks[j]
        return acc

    def _too_small(self, idx: np.ndarray, tiny: np.ndarray, h_abs: np.ndarray,
                   last_err: np.ndarray, t0: np.ndarray, t1: np.ndarray,
                   t: np.ndarray) -> None:
        """Rows idx[tiny] cannot go on: a StepSizeError naming the first, or with
        on_failure="stop" they end where they are (counted)."""
        if self.on_failure == "stop":
            self.counts["failed"] += int(np.count_nonzero(tiny))
            return
        r = int(idx[np.flatnonzero(tiny)[0]])
        why = ("its values were not finite" if np.isnan(last_err[r])
               else f"its error norm was {float(last_err[r]):.3g} > 1")
        raise StepSizeError(
            f"AdaptiveRK: the step size fell to {float(h_abs[r]):.3g} at t = {float(t[r])!r}, "
            f"below ten units of roundoff, in the step over [{float(t0[r])!r}, "
            f"{float(t1[r])!r}]: the last trial substep was rejected ({why})",
            float(t0[r]), float(t1[r]), float(t[r]), float(h_abs[r]))

    def _over_max_steps(self, idx: np.ndarray, done: np.ndarray, ha: np.ndarray,
                        attempts: np.ndarray, t0: np.ndarray, t1: np.ndarray,
                        t: np.ndarray) -> np.ndarray:
        """The rows (of idx) whose max_steps substeps did not reach t1: a StepSizeError
        naming the first, or with on_failure="stop" their mask (they end where they are)."""
        over = (attempts[idx] >= self.max_steps) & ~done
        if self.on_failure == "stop" or not over.any():
            self.counts["failed"] += int(np.count_nonzero(over))
            return over
        k = int(np.flatnonzero(over)[0])
        r = int(idx[k])
        raise StepSizeError(
            f"AdaptiveRK: max_steps = {self.max_steps} substeps did not reach the end of the "
            f"step over [{float(t0[r])!r}, {float(t1[r])!r}]; t = {float(t[k])!r} with step "
            f"size {float(ha[k]):.3g}", float(t0[r]), float(t1[r]), float(t[k]),
            float(ha[k]))


    # --- helpers ---------------------------------------------------------------------------

    def _eval(self, t: np.ndarray, y: np.ndarray, t0: np.ndarray,
              t1: np.ndarray) -> np.ndarray:
        """f at per-row times t (shape (m,)) and stacked states y."""
        self.counts["rhs"] += len(y)
        try:
            if self.vectorized:
                k = self.rhs(self._column(t, y, real=False), y)
                self._check_shape(k, y)
                if np.may_share_memory(k, y):
                    k = k.copy()
                return k
            out = np.empty_like(y)
            for r in range(len(y)):
                kr = self.rhs(float(t[r]), y[r])
                self._check_shape(kr, y[r])
                out[r] = kr
            return out
        except Exception as err:
            if hasattr(err, "add_note"):  # Python 3.11 and later
                spans = ", ".join(f"[{a!r}, {b!r}]" for a, b in
                                  zip(t0[:3].tolist(), t1[:3].tolist()))
                more = f" and {len(t0) - 3} more" if len(t0) > 3 else ""
                err.add_note(f"AdaptiveRK: raised by rhs in the step(s) over {spans}{more}")
            raise

    @staticmethod
    def _check_shape(k: Any, y: np.ndarray) -> None:
        if not isinstance(k, np.ndarray) or k.shape != y.shape:
            shape = getattr(k, "shape", None)
            raise ValueError(f"AdaptiveRK: rhs(t, u) returned {type(k).__name__} of shape "
                             f"{shape} for a state of shape {y.shape}; it must return an "
                             f"array of the state's shape")

    def _scale(self, ay: np.ndarray, ay_new: Optional[np.ndarray]) -> np.ndarray:
        """atol + rtol max(|y|, |y_new|), rows flattened: shape (m, n)."""
        big = ay if ay_new is None else np.maximum(ay, ay_new)
        return self.atol + self.rtol * AdaptiveRK._flat(big)

    @staticmethod
    def _flat(x: np.ndarray) -> np.ndarray:
        """Each row as one axis: shape (m, n)."""
        return x.reshape(len(x), -1)

    @staticmethod
    def _rms(x: np.ndarray) -> np.ndarray:
        """The root mean square of each row of an (m, n) array."""
        x = np.abs(x)
        return np.sqrt(np.sum(x * x, axis=1) / x.shape[1])

    @staticmethod
    def _finite_rows(x: np.ndarray) -> np.ndarray:
        return np.all(np.isfinite(x.reshape(len(x), -1)), axis=1)

    @staticmethod
    def _column(values: np.ndarray, Y: np.ndarray, real: bool = True) -> np.ndarray:
        """Per-row values shaped (m, 1, ..., 1) to broadcast over the rows of Y (in Y's
        real dtype unless real=False: then float64)."""
        col = np.asarray(values, dtype=np.float64).reshape((len(Y),) + (1,) * (Y.ndim - 1))
        return col.astype(np.finfo(Y.dtype).dtype, copy=False) if real else col
