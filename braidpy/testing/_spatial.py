"""check_coarsen_refine: an app's spatial coarsening and refinement (XBraid's
braid_TestCoarsenRefine), without running MGRIT."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._report import SPATIAL_RULES, AppCheckError, CheckReport
from ._session import _CheckStatus, _fmt, _RuleFailed, _Session

__all__ = ["check_coarsen_refine"]


@dataclasses.dataclass(frozen=True)
class _SpatialStatus(_CheckStatus):
    """Read-only stand-in for braidpy.Status in a coarsen or refine call: check_app's,
    with XBraid's CoarsenRefStatus times."""

    f_tprior: float = 0.0
    f_tstop: float = 0.0
    c_tprior: float = 0.0
    c_tstop: float = 0.0
    nlevels: int = 2
    phase: str = "residual"


def _new_state(s: _Session, name: str, u: Any, status: _SpatialStatus, shown: str) -> Any:
    r = s.call(name, (u, status), shown)
    if r is None:
        raise _RuleFailed(f"{shown} returned None; it must return a new vector")
    if r is u:
        raise _RuleFailed(f"{shown} returned its argument itself; it must return a new vector")
    return r


def _distance(s: _Session, p: Any, q: Any, what: str) -> float:
    """norm(p - q) through the app's clone, sum and norm."""
    d = s.clone(q)
    try:
        s.sum(1.0, p, -1.0, d, "p", "q")
    except _RuleFailed as fail:
        raise _RuleFailed(f"{what}: {fail.message}", fail.cause) from None
    return s.norm(d, "norm(p - q)")


def _unchanged(s: _Session, u: Any, before: Any, shown: str, name: str) -> None:
    dist = _distance(s, u, before, f"comparing {name} with its copy")
    if dist != 0.0:
        raise _RuleFailed(f"{shown} changed its argument (norm of the change {_fmt(dist)}); "
                          f"it must leave {name} as it is")


def _check_coarsen(s: _Session, status: _SpatialStatus, state: dict) -> None:
    u = s.init(status.t)
    nu = s.norm(u)
    before = s.clone(u)
    uc = _new_state(s, "coarsen", u, status, "coarsen(u, status)")
    _unchanged(s, u, before, "coarsen(u, status)", "u")
    vc = _new_state(s, "coarsen", s.clone(u), status, "coarsen(clone(u), status)")
    dist = _distance(s, uc, vc, "comparing coarsen(u) with coarsen(clone(u))")
    if dist != 0.0:
        raise _RuleFailed(f"coarsen(u) and coarsen(clone(u)) differ (norm of the difference "
                          f"{_fmt(dist)}); coarsening must be deterministic")
    s.report.notes.append(("coarsen", f"norm(u) = {_fmt(nu)}, norm(coarsen(u)) = "
                                      f"{_fmt(s.norm(uc))}"))
    state.update(u=u, uc=uc, vc=vc, nu=nu)


def _check_refine(s: _Session, status: _SpatialStatus, state: dict) -> None:
    u, uc, vc = state["u"], state["uc"], state["vc"]
    before = s.clone(uc)
    uf = _new_state(s, "refine", uc, status, "refine(coarsen(u), status)")
    _unchanged(s, uc, before, "refine(coarsen(u), status)", "its argument")
    shape_u, shape_f = getattr(u, "shape", None), getattr(uf, "shape", None)
    if shape_u is not None and tuple(shape_f or ()) != tuple(shape_u):
        raise _RuleFailed(f"refine(coarsen(u)) has shape {tuple(shape_f or ())}, u has "
                          f"{tuple(shape_u)}: refine must undo coarsen's change of size")
    vf = _new_state(s, "refine", vc, status, "refine(coarsen(clone(u)), status)")
    dist = _distance(s, uf, vf, "comparing refine(coarsen(u)) with refine(coarsen(clone(u)))")
    if dist != 0.0:
        raise _RuleFailed(f"refine gave different vectors for equal inputs (norm of the "
                          f"difference {_fmt(dist)}); refinement must be deterministic")
    back = _distance(s, u, uf, "comparing u with refine(coarsen(u))")
    rel = back / state["nu"] if state["nu"] > 0.0 else back
    s.report.notes.append(("refine", f"norm(u - refine(coarsen(u))) / norm(u) = {_fmt(rel)}"))


def check_coarsen_refine(app: Any, t: float = 0.0, fdt: float = 0.1, cdt: float = 0.2, *,
                         raise_on_failure: bool = True) -> CheckReport:
    """Check an app's ``coarsen`` and ``refine`` (spatial coarsening), like XBraid's
    ``braid_TestCoarsenRefine``, without running MGRIT.

    ``u = init(t)`` is coarsened and refined with a status whose ``t``, ``f_tprior``,
    ``f_tstop``, ``c_tprior`` and ``c_tstop`` are ``t``, ``t -+ fdt`` and ``t -+ cdt``
    (level 0, index 0), and the rules in :data:`SPATIAL_RULES` are checked:

    ``coarsen``
        ``coarsen(u, status)`` returns a new vector (not None, not ``u``), leaves
        ``u`` as it is, and gives exactly the same vector for ``clone(u)``.
    ``refine``
        ``refine(coarsen(u), status)`` returns a new vector of ``u``'s shape, leaves
        its argument as it is, and gives exactly the same vector for equal inputs.

    The notes give ``norm(u)``, ``norm(coarsen(u))`` and the relative distance of
    ``refine(coarsen(u))`` from ``u`` (what XBraid's test writes out for a look).
    Comparisons go through the app's own ``clone``, ``sum`` and ``norm``.

    Returns
    -------
    CheckReport
        With ``check == "check_coarsen_refine"``; raises :class:`AppCheckError`
        instead when a rule failed and ``raise_on_failure`` is true.

    Examples
    --------
    >>> import numpy as np
    >>> import braidpy
    >>> from braidpy.testing import check_coarsen_refine
    >>> class Halves(braidpy.App):
    ...     def init(self, t):
    ...         return np.linspace(0.0, 1.0, 9)
    ...     def step(self, u, t0, t1, status):
    ...         pass
    ...     def coarsen(self, u, status):
    ...         return u[::2].copy()
    ...     def refine(self, u, status):
    ...         return np.interp(np.linspace(0, 1, 2 * u.size - 1), np.linspace(0, 1, u.size), u)
    >>> print(check_coarsen_refine(Halves()))
    check_coarsen_refine(Halves): all 2 rules passed
      ok       coarsen
      note     coarsen: norm(u) = 1.78536, norm(coarsen(u)) = 1.36931
      ok       refine
      note     refine: norm(u - refine(coarsen(u))) / norm(u) = 0
    """
    for name, value in (("t", t), ("fdt", fdt), ("cdt", cdt)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise ValueError(f"{name} must be a finite real number, got {value!r}")
    status = _SpatialStatus(t=float(t), f_tprior=t - fdt, f_tstop=t + fdt,
                            c_tprior=t - cdt, c_tstop=t + cdt, t0=float(t), t1=float(t))
    s = _Session(app, float(t) - abs(cdt) - 1.0, float(t) + abs(cdt) + 1.0, 2, 0.0)
    s.report = CheckReport(app=type(app).__name__, check="check_coarsen_refine",
                           rules=SPATIAL_RULES)
    state: dict = {}
    for rule, check in (("coarsen", _check_coarsen), ("refine", _check_refine)):
        if rule == "refine" and "uc" not in state:
            s.report.skipped.append(("refine", "not checked because 'coarsen' failed"))
            continue
        try:
            check(s, status, state)
        except _RuleFailed as fail:
            s.report.failed.append((rule, fail.message))
            if fail.cause is not None:
                s.report.errors[rule] = fail.cause
            continue
        s.report.passed.append(rule)
    report = s.report
    if raise_on_failure and not report.ok:
        cause = next((report.errors[r] for r, _ in report.failed if r in report.errors), None)
        raise AppCheckError(report) from cause
    return report
