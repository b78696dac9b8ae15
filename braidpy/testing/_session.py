"""One check_app run's state, and every call it makes into the app's callbacks."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ._report import CheckReport

_DEFAULT_STATUS_TOL = 1e-9  # braidpy.Options().abs_tol


@dataclasses.dataclass(frozen=True)
class _CheckStatus:
    """Read-only stand-in for braidpy.Status, handed to step and access by check_app."""

    t: float
    t0: float
    t1: float
    level: int = 0
    index: int = 0
    fine_index: int = 0
    iteration: int = 0
    nlevels: int = 1
    done: bool = False
    tol: float = _DEFAULT_STATUS_TOL
    rnorm: float | None = None
    phase: str = "relax"

    def __repr__(self) -> str:
        return (f"<braidpy.testing status (check_app) level={self.level} index={self.index} "
                f"iteration={self.iteration} phase={self.phase}{' done' if self.done else ''}>")


class _RuleFailed(Exception):
    """Internal: the rule being checked does not hold (message says why)."""

    def __init__(self, message: str, cause: Exception | None = None):
        super().__init__(message)
        self.message = message
        self.cause = cause


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _exc_text(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_zero_check(dist: float, scale: float, rtol: float) -> bool:
    """dist is 'zero' relative to scale (exactly zero when scale is zero)."""
    return dist <= rtol * scale


@dataclasses.dataclass
class _StepRecord:
    t0: float
    t1: float
    returned: str  # "None", "u" or "new"
    unchanged: bool
    norm: float


class _Session:
    """The app under check, the time grid, the vectors the rules share, and the calls.

    Every callback goes through :meth:`call`, which turns an exception into a
    :class:`_RuleFailed` naming the call; the wrappers check what the callback returned.
    """

    u0: Any  # init(tstart)
    um: Any  # init(interior t)
    ue: Any  # init(tstop)
    w0: Any  # a second init(tstart)
    x: Any   # the probe vectors of the sum, norm and buffer rules (see pick_probes)
    y: Any

    def __init__(self, app: Any, tstart: float, tstop: float, ntime: int, rtol: float):
        self.app = app
        self.rtol = rtol
        self.times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
        self.times[-1] = tstop
        self.imid = ntime // 2  # an interior grid index when ntime >= 2
        self.tmid = self.times[self.imid] if ntime >= 2 else 0.5 * (tstart + tstop)
        self.report = CheckReport(app=type(app).__name__)
        self.sum_returned: str | None = None
        self.norm_unusable = False
        self.steps: list[_StepRecord] = []

    def call(self, name: str, args: tuple, shown: str) -> Any:
        fn = getattr(self.app, name, None)
        if not callable(fn):
            raise _RuleFailed(f"the app has no callable {name}()")
        try:
            return fn(*args)
        except Exception as exc:  # a user callback failed: report it, don't propagate
            raise _RuleFailed(f"{shown} raised {_exc_text(exc)}", exc) from exc

    def init(self, t: float) -> Any:
        u = self.call("init", (t,), f"init({_fmt(t)})")
        if u is None:
            what = "the initial condition" if t == self.times[0] else "an initial guess"
            raise _RuleFailed(f"init({_fmt(t)}) returned None; it must return a new vector "
                              f"({what} at t = {_fmt(t)})")
        return u

    def clone(self, u: Any, shown: str = "clone(u)") -> Any:
        c = self.call("clone", (u,), shown)
        if c is None:
            raise _RuleFailed(f"{shown} returned None; it must return a new, independent vector")
        return c

    def sum(self, a: float, x: Any, b: float, y: Any, xname: str = "x",
            yname: str = "y") -> None:
        shown = f"sum({a:g}, {xname}, {b:g}, {yname})"
        r = self.call("sum", (a, x, b, y), shown)
        if r is not None and r is not y and self.sum_returned is None:
            self.sum_returned = type(r).__name__

    def norm(self, u: Any, shown: str = "norm(u)") -> float:
        r = self.call("norm", (u,), shown)
        if isinstance(r, (bool, np.bool_)):
            raise _RuleFailed(f"{shown} returned the bool {r!r}; it must return a float")
        if not (hasattr(type(r), "__float__") or hasattr(type(r), "__index__")):
            # What the compiled core accepts (PyFloat_AsDouble); float() would also parse str.
            raise _RuleFailed(f"{shown} returned {r!r} (a {type(r).__name__}), which is not a "
                              f"real number")
        shape = getattr(r, "shape", ())
        if shape is not None and tuple(shape) != ():
            raise _RuleFailed(f"{shown} returned a {type(r).__name__} of shape {tuple(shape)}; "
                              f"it must return a scalar float (e.g. float(...))")
        try:
            value = float(r)
        except (TypeError, ValueError) as exc:
            raise _RuleFailed(f"{shown} returned {r!r} (a {type(r).__name__}), which is not a "
                              f"real number: float() raised {_exc_text(exc)}", exc) from exc
        if not math.isfinite(value) or value < 0.0:
            self.norm_unusable = True  # norm(p - q) can no longer tell p from q
            what = "finite" if not math.isfinite(value) else ">= 0"
            raise _RuleFailed(f"{shown} returned {_fmt(value)}; a norm must be {what}")
        return value

    def dist(self, p: Any, q: Any, pname: str, qname: str) -> float:
        """norm(q - p), computed on a clone of q."""
        d = self.clone(q, f"clone({qname})")
        self.sum(-1.0, p, 1.0, d, pname, f"clone({qname})")
        return self.norm(d, f"norm({qname} - {pname})")

    def step(self, u: Any, t0: float, t1: float, index: int) -> tuple[Any, str]:
        status = _CheckStatus(t=t0, t0=t0, t1=t1, index=index, fine_index=index)
        r = self.call("step", (u, t0, t1, status), f"step(u, {_fmt(t0)}, {_fmt(t1)}, status)")
        if r is None:
            return u, "None"
        if r is u:
            return u, "u"
        return r, "new"

    def note(self, rule: str, text: str) -> None:
        self.report.notes.append((rule, text))
