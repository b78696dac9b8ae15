"""check_app: runs the rules in dependency order and fills the report."""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

from . import _rules
from ._report import RESIDUAL_RULE, RULES, AppCheckError, CheckReport
from ._session import _RuleFailed, _Session

__all__ = ["check_app"]

# Which rules must hold before a rule is worth checking; "norm" is the first half
# of "norm scaling" (norm is callable and returns a finite, non-negative float).
_BASE = ("init", "norm")
_NEEDS: dict[str, tuple[str, ...]] = {
    "init": (),
    "norm": ("init",),
    "sum identity": _BASE,
    "clone independence": _BASE + ("sum identity",),
    "sum linearity": _BASE + ("sum identity", "clone independence"),
    "sum aliasing": _BASE + ("sum identity", "clone independence", "sum linearity"),
    "norm scaling": _BASE + ("sum identity", "clone independence", "sum linearity"),
    "buffer round trip": _BASE + ("sum identity", "clone independence", "sum linearity"),
    "step determinism": _BASE + ("sum identity", "clone independence", "sum linearity"),
    "step in place": _BASE + ("sum identity", "clone independence", "sum linearity",
                              "step determinism"),
    "access": _BASE + ("sum identity", "clone independence"),
    "residual": _BASE + ("sum identity", "clone independence", "sum linearity",
                         "step determinism"),
}
_SUM_RULES = frozenset({"sum identity", "clone independence", "sum linearity", "sum aliasing"})


class _Checker:
    """Runs the rules in dependency order and fills the session's CheckReport."""

    def __init__(self, session: _Session):
        self.s = session
        self.good: set[str] = set()
        self.outcome: dict[str, str] = {}

    def rule(self, name: str, check: Callable[[_Session], None],
             key: str | None = None) -> None:
        key = key or name
        if self.outcome.get(name) in ("fail", "skip"):  # "norm scaling": first half decided
            return
        blocked = [dep for dep in _NEEDS[key] if dep not in self.good]
        if blocked:
            failed = [d for d in blocked if self.outcome.get(_rule_name(d)) == "fail"]
            names = " and ".join(repr(_rule_name(d)) for d in (failed or blocked))
            verb = "failed" if failed else "was not checked"
            self.s.report.skipped.append((name, f"not checked because {names} {verb}"))
            self.outcome[name] = "skip"
            return
        try:
            check(self.s)
        except _RuleFailed as fail:
            message = fail.message
            if name in _SUM_RULES and self.s.sum_returned is not None:
                message += (f" (sum returned an object of type {self.s.sum_returned}; braidpy "
                            f"ignores sum's return value, so sum must update y in place)")
            self.s.report.failed.append((name, message))
            if fail.cause is not None:
                self.s.report.errors[name] = fail.cause
            self.outcome[name] = "fail"
            if name == "norm scaling" and self.s.norm_unusable:
                self.good.discard("norm")  # later comparisons would be meaningless
            return
        self.good.add(key)
        if key == name:
            self.outcome[name] = "pass"

    def run(self) -> CheckReport:
        self.rule("init", _rules.check_init)
        self.rule("norm scaling", _rules.check_norm_basics, key="norm")
        self.rule("sum identity", _rules.check_sum_identity)
        self.rule("clone independence", _rules.check_clone)
        if "clone independence" in self.good:
            _rules.pick_probes(self.s)
        self.rule("sum linearity", _rules.check_sum_linearity)
        self.rule("sum aliasing", _rules.check_sum_aliasing)
        self.rule("norm scaling", _rules.check_norm_scaling)
        self.rule("buffer round trip", _rules.check_buffers)
        self.rule("step determinism", _rules.check_step_determinism)
        self.rule("step in place", _rules.check_step_in_place)
        self.rule("access", _rules.check_access)
        rules = RULES
        if callable(getattr(self.s.app, "residual", None)):  # checked only where defined
            rules = RULES + (RESIDUAL_RULE,)
            self.rule(RESIDUAL_RULE, _rules.check_residual)
        order = {rule: i for i, rule in enumerate(rules)}
        rep = self.s.report
        rep.passed = [rule for rule in rules if self.outcome.get(rule) == "pass"]
        rep.failed.sort(key=lambda item: order[item[0]])
        rep.skipped.sort(key=lambda item: order[item[0]])
        rep.notes.sort(key=lambda item: order[item[0]])
        return rep


def _rule_name(key: str) -> str:
    return "norm scaling" if key == "norm" else key


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    return float(value)


def check_app(app: Any, tstart: float = 0.0, tstop: float = 1.0, ntime: int = 8, *,
              rtol: float = 1e-12, raise_on_failure: bool = True) -> CheckReport:
    """Check an app's callbacks against braidpy's contract, without running MGRIT.

    Like XBraid's ``braid_Test*`` functions: calls ``init``, ``clone``, ``sum``,
    ``norm``, ``bufpack``/``bufunpack``, ``step`` and ``access`` on a few vectors
    and checks the rules in :data:`RULES`:

    ``init``
        ``init(t)`` returns a vector (not None) at ``tstart``, at an interior time
        and at ``tstop``, and a new object on every call.
    ``sum identity``
        ``sum(0, x, 1, y)`` leaves ``y`` as it is; ``sum(1, x, 0, y)`` makes ``y``
        equal to ``x``; ``x`` is never changed.
    ``clone independence``
        ``clone(u)`` is a new object with the same norm; changing the clone does
        not change ``u``, and changing ``u`` does not change the clone.
    ``sum linearity``
        ``sum(a, x, b, y)`` equals ``a*x + b*y`` built from clones with separate
        scale and add calls, for several ``(a, b)`` (including 0 and +-1).
    ``sum aliasing``
        ``sum(a, x, b, x)`` with ``x`` and ``y`` the same object gives ``(a+b)*x``.
    ``norm scaling``
        ``norm`` returns a finite float >= 0, gives the same value twice,
        ``norm(c*u) == |c|*norm(u)`` and ``norm(u - u) == 0``.
    ``buffer round trip``
        ``bufpack(u)`` supports the buffer protocol and
        ``bufunpack(bytearray(bufpack(u)))`` equals ``u``.
    ``step determinism``
        Two clones of a vector stepped over the same interval give the same result,
        and stepping a clone leaves the original alone. ``step`` may update ``u`` in
        place (returning None or ``u``) or return a new vector.
    ``step in place``
        Never fails; adds a note when ``step`` returned None and left ``u``
        unchanged (a fixed point, or a step that rebinds ``u`` instead of writing
        into it), or when it returns new vectors.
    ``access``
        ``access(u, status)`` runs and does not change ``u``.

    For an app that defines ``residual`` (a user residual), one more rule,
    :data:`RESIDUAL_RULE`, like XBraid's ``braid_TestResidual``:

    ``residual``
        ``residual(step(u, t0, t1, status, fstop=f, ustop=u), u, status)`` gives back
        ``f``, for ``f`` None (zero) and ``f = 2u``: the step solves the equation the
        residual measures, with XBraid's sign convention.

    Comparisons go through the app's own ``sum`` and ``norm`` (``norm(p - q)``
    relative to the norms involved), so any vector type can be checked. The
    coefficients (0, +-1, powers of two) are chosen so that each expected result is
    rounded the same way however ``sum`` evaluates it, in any binary precision;
    ``rtol`` only absorbs non-deterministic reductions. A rule is not checked
    (reported as skipped) when a rule it relies on failed. ``step`` and ``access``
    receive a read-only stand-in for :class:`braidpy.Status`. Only vectors made by
    ``init`` and ``clone`` are changed; ``access`` is called once, with
    ``status.done`` true.

    Parameters
    ----------
    app : App
        The application to check. Its ``tstart``, ``tstop`` and ``ntime``
        attributes are set for the duration of the check, as braidpy does.
    tstart, tstop : float
        Time interval (``tstop > tstart``).
    ntime : int
        Number of uniform time steps; steps are checked on the first interval and
        on one starting at an interior grid point.
    rtol : float
        Relative tolerance of the comparisons (>= 0).
    raise_on_failure : bool
        Raise :class:`AppCheckError` when any rule fails (default). With False,
        return the report either way.

    Returns
    -------
    CheckReport
        Passed, failed and skipped rules, notes, and the exceptions raised by
        callbacks.

    Raises
    ------
    AppCheckError
        If a rule failed and ``raise_on_failure`` is true. Its message names every
        failed rule and says why; an exception raised by a callback is reported
        with its type and message (and chained as the cause).
    ValueError
        If ``tstart``, ``tstop``, ``ntime`` or ``rtol`` is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> import braidpy
    >>> from braidpy.testing import check_app
    >>> class Decay(braidpy.App):
    ...     def init(self, t):
    ...         return np.ones(3) if t == self.tstart else np.zeros(3)
    ...     def step(self, u, t0, t1, status):
    ...         u /= 1.0 + (t1 - t0)
    >>> report = check_app(Decay())
    >>> report.ok
    True
    >>> print(report)
    check_app(Decay): all 10 rules passed
      ok       init
      ok       sum identity
      ok       clone independence
      ok       sum linearity
      ok       sum aliasing
      ok       norm scaling
      ok       buffer round trip
      ok       step determinism
      ok       step in place
      ok       access

    A ``sum`` that scales ``y`` before reading ``x`` is wrong when ``x is y``:

    >>> class Aliased(Decay):
    ...     def sum(self, a, x, b, y):
    ...         y *= b
    ...         y += a * x
    >>> report = check_app(Aliased(), raise_on_failure=False)
    >>> [rule for rule, why in report.failed]
    ['sum aliasing']
    >>> check_app(Aliased())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    braidpy.testing.AppCheckError: check_app(Aliased): 1 rule failed ('sum aliasing'); ...
    """
    tstart, tstop = _real("tstart", tstart), _real("tstop", tstop)
    if not tstop > tstart:
        raise ValueError(f"tstop must be greater than tstart, got tstart={tstart!r}, "
                         f"tstop={tstop!r}")
    if isinstance(ntime, bool) or not isinstance(ntime, numbers.Integral) or ntime < 1:
        raise ValueError(f"ntime must be an int >= 1, got {ntime!r}")
    rtol = _real("rtol", rtol)
    if rtol < 0.0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}")
    ntime = int(ntime)

    # Set the times as braidpy does, and put the app's own attributes back afterwards.
    missing = object()
    own = getattr(app, "__dict__", {})
    saved = {}
    for name, value in (("tstart", tstart), ("tstop", tstop), ("ntime", ntime)):
        saved[name] = own.get(name, missing)
        try:
            setattr(app, name, value)
        except AttributeError:
            pass
    try:
        report = _Checker(_Session(app, tstart, tstop, ntime, rtol)).run()
    finally:
        for name, value in saved.items():
            try:
                if value is missing:
                    delattr(app, name)
                else:
                    setattr(app, name, value)
            except AttributeError:
                pass
    if raise_on_failure and not report.ok:
        cause = next((report.errors[rule] for rule, _ in report.failed if rule in report.errors),
                     None)
        raise AppCheckError(report) from cause
    return report
