"""Check an App's callbacks against braidpy's contract, without running MGRIT."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Callable

import numpy as np

__all__ = ["RULES", "AppCheckError", "CheckReport", "check_app"]

#: The rules :func:`check_app` checks, in the order it reports them.
RULES: tuple[str, ...] = (
    "init",
    "sum identity",
    "clone independence",
    "sum linearity",
    "sum aliasing",
    "norm scaling",
    "buffer round trip",
    "step determinism",
    "step in place",
    "access",
)

# (a, b) pairs for sum(a, x, b, y): every special case a vector library tends to
# branch on (b == 1, a == +-1, a == 0, b == 0) and general ones. Nonzero a and b are
# +-powers of two (b = -3 only with a = 0), so a*x and b*y are exact and a*x + b*y is
# rounded once however it is evaluated (FMA, any order, any binary precision): the
# comparisons need no rounding slack, in float32 as in float64.
_SUM_CASES: tuple[tuple[float, float], ...] = (
    (1.0, 1.0),
    (-1.0, 1.0),
    (0.5, 1.0),
    (2.0, 0.0),
    (0.0, -3.0),
    (1.0, -0.5),
    (0.25, -2.0),
    (-4.0, 0.125),
)

# Powers of two scale binary floating-point numbers exactly, so a Euclidean (or
# max, or sum-of-absolute-values) norm scales exactly too: no rounding slack needed.
_SCALES: tuple[float, ...] = (2.0, -0.5, -4.0)

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


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_app` found, rule by rule.

    Attributes
    ----------
    app : str
        Class name of the checked app.
    passed : list of str
        Rules that hold, in :data:`RULES` order.
    failed : list of (str, str)
        ``(rule, why)`` for each rule that does not hold, with the values seen.
    skipped : list of (str, str)
        ``(rule, why)`` for rules not checked because a rule they rely on failed.
    notes : list of (str, str)
        ``(rule, remark)``: warnings that are not failures (e.g. a step that left
        its input unchanged).
    errors : dict of str to Exception
        The exception a user callback raised, for each rule that failed that way.
    """

    app: str
    passed: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    notes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    errors: dict[str, Exception] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no rule failed."""
        return not self.failed

    def headline(self) -> str:
        """One line: the app and the failed rules, if any."""
        if self.ok and not self.skipped:
            return f"check_app({self.app}): all {len(self.passed)} rules passed"
        names = ", ".join(repr(rule) for rule, _ in self.failed)
        n = len(self.failed)
        return (f"check_app({self.app}): {n} rule{'' if n == 1 else 's'} failed ({names}); "
                f"{len(self.passed)} passed, {len(self.skipped)} not checked")

    def __str__(self) -> str:
        lines = [self.headline()]
        why = {rule: ("FAILED", text) for rule, text in self.failed}
        why.update({rule: ("skipped", text) for rule, text in self.skipped})
        for rule in RULES:
            if rule in why:
                tag, text = why[rule]
                lines.append(f"  {tag:<8} {rule}: {text}")
            elif rule in self.passed:
                lines.append(f"  {'ok':<8} {rule}")
            for note_rule, text in self.notes:
                if note_rule == rule:
                    lines.append(f"  {'note':<8} {rule}: {text}")
        return "\n".join(lines)


class AppCheckError(AssertionError):
    """Raised by :func:`check_app` when a rule fails; ``.report`` holds the details.

    The message names every failed rule and says why each failed.
    """

    def __init__(self, report: CheckReport):
        super().__init__(str(report))
        self.report = report


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
}
_SUM_RULES = frozenset({"sum identity", "clone independence", "sum linearity", "sum aliasing"})


@dataclasses.dataclass
class _StepRecord:
    t0: float
    t1: float
    returned: str  # "None", "u" or "new"
    unchanged: bool
    norm: float


class _Checker:
    """Runs the rules in dependency order and fills a CheckReport."""

    def __init__(self, app: Any, tstart: float, tstop: float, ntime: int, rtol: float):
        self.app = app
        self.rtol = rtol
        self.times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
        self.times[-1] = tstop
        self.imid = ntime // 2  # an interior grid index when ntime >= 2
        self.tmid = self.times[self.imid] if ntime >= 2 else 0.5 * (tstart + tstop)
        self.report = CheckReport(app=type(app).__name__)
        self.good: set[str] = set()
        self.outcome: dict[str, str] = {}
        self.sum_returned: str | None = None
        self.norm_unusable = False
        self.steps: list[_StepRecord] = []

    # ------------------------------------------------------------ callbacks
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

    # ------------------------------------------------------------ driver
    def rule(self, name: str, check: Callable[[], None], key: str | None = None) -> None:
        key = key or name
        if self.outcome.get(name) in ("fail", "skip"):  # "norm scaling": first half decided
            return
        blocked = [dep for dep in _NEEDS[key] if dep not in self.good]
        if blocked:
            failed = [d for d in blocked if self.outcome.get(_rule_name(d)) == "fail"]
            names = " and ".join(repr(_rule_name(d)) for d in (failed or blocked))
            verb = "failed" if failed else "was not checked"
            self.report.skipped.append((name, f"not checked because {names} {verb}"))
            self.outcome[name] = "skip"
            return
        try:
            check()
        except _RuleFailed as fail:
            message = fail.message
            if name in _SUM_RULES and self.sum_returned is not None:
                message += (f" (sum returned an object of type {self.sum_returned}; braidpy "
                            f"ignores sum's return value, so sum must update y in place)")
            self.report.failed.append((name, message))
            if fail.cause is not None:
                self.report.errors[name] = fail.cause
            self.outcome[name] = "fail"
            if name == "norm scaling" and self.norm_unusable:
                self.good.discard("norm")  # later comparisons would be meaningless
            return
        self.good.add(key)
        if key == name:
            self.outcome[name] = "pass"

    def run(self) -> CheckReport:
        self.rule("init", self.check_init)
        self.rule("norm scaling", self.check_norm_basics, key="norm")
        self.rule("sum identity", self.check_sum_identity)
        self.rule("clone independence", self.check_clone)
        if "clone independence" in self.good:
            self.pick_probes()
        self.rule("sum linearity", self.check_sum_linearity)
        self.rule("sum aliasing", self.check_sum_aliasing)
        self.rule("norm scaling", self.check_norm_scaling)
        self.rule("buffer round trip", self.check_buffers)
        self.rule("step determinism", self.check_step_determinism)
        self.rule("step in place", self.check_step_in_place)
        self.rule("access", self.check_access)
        order = {rule: i for i, rule in enumerate(RULES)}
        rep = self.report
        rep.passed = [rule for rule in RULES if self.outcome.get(rule) == "pass"]
        rep.failed.sort(key=lambda item: order[item[0]])
        rep.skipped.sort(key=lambda item: order[item[0]])
        rep.notes.sort(key=lambda item: order[item[0]])
        return rep

    def note(self, rule: str, text: str) -> None:
        self.report.notes.append((rule, text))

    # ------------------------------------------------------------ rules
    def check_init(self) -> None:
        t0, tmid, tend = self.times[0], self.tmid, self.times[-1]
        self.u0 = self.init(t0)
        self.um = self.init(tmid)
        self.ue = self.init(tend)
        self.w0 = self.init(t0)
        calls = [(f"init({_fmt(t0)})", self.u0), (f"init({_fmt(tmid)})", self.um),
                 (f"init({_fmt(tend)})", self.ue), (f"a second init({_fmt(t0)})", self.w0)]
        for i, (name_i, u_i) in enumerate(calls):
            for name_j, u_j in calls[i + 1:]:
                if u_i is u_j:
                    raise _RuleFailed(
                        f"{name_i} and {name_j} returned the same object; braidpy stores and "
                        f"updates each vector in place, so every init call must return a new "
                        f"vector")

    def check_norm_basics(self) -> None:
        for name, u in (("init(tstart)", self.u0), ("init(interior t)", self.um)):
            first = self.norm(u, f"norm({name})")
            second = self.norm(u, f"norm({name})")
            if abs(first - second) > self.rtol * first:
                raise _RuleFailed(
                    f"norm({name}) gave {first!r} and then {second!r} for the same vector; "
                    f"norm must be deterministic and must not modify its argument")

    def check_sum_identity(self) -> None:
        rtol = self.rtol
        x, y = self.u0, self.w0  # y: the second init(tstart), ours to modify
        nx, ny = self.norm(x, "norm(x)"), self.norm(y, "norm(y)")
        self.sum(0.0, x, 1.0, y)
        after = self.norm(y, "norm(y)")
        if abs(after - ny) > rtol * ny:
            raise _RuleFailed(
                f"sum(0, x, 1, y) changed norm(y) from {_fmt(ny)} to {_fmt(after)} "
                f"(norm(x) = {_fmt(nx)}); with a = 0 and b = 1, y must stay as it is")
        self._x_unchanged(x, nx, "sum(0, x, 1, y)")
        # sum(1, x, 0, y) copies x into y: once into a vector that starts at init(tstop),
        # once from init(interior t) into a vector that starts at init(tstart).
        for x, y in ((self.u0, self.ue), (self.um, self.w0)):
            nx, before = self.norm(x, "norm(x)"), self.norm(y, "norm(y)")
            self.sum(1.0, x, 0.0, y)
            after = self.norm(y, "norm(y)")
            if abs(after - nx) > rtol * nx:
                raise _RuleFailed(
                    f"after sum(1, x, 0, y), y should equal x, but norm(y) = {_fmt(after)} and "
                    f"norm(x) = {_fmt(nx)} (norm(y) before the call = {_fmt(before)})")
            self.sum(-1.0, x, 1.0, y)
            diff = self.norm(y, "norm(y - x)")
            if not _is_zero_check(diff, nx, rtol):
                raise _RuleFailed(
                    f"after sum(1, x, 0, y), y should equal x, but then sum(-1, x, 1, y) left "
                    f"norm(y - x) = {_fmt(diff)} (norm(x) = {_fmt(nx)}, norm(y) before the "
                    f"first call = {_fmt(before)}); either sum is wrong or norm of a zero "
                    f"vector is not 0")
            self._x_unchanged(x, nx, "sum(1, x, 0, y)")

    def _x_unchanged(self, x: Any, nx: float, call: str) -> None:
        now = self.norm(x, "norm(x)")
        if abs(now - nx) > self.rtol * nx:
            raise _RuleFailed(f"{call} changed x: norm(x) went from {_fmt(nx)} to {_fmt(now)}; "
                              f"sum may only write to y")

    def check_clone(self) -> None:
        rtol = self.rtol
        others = [v for v in (self.u0, self.um, self.ue) if self.norm(v) > 0.0]
        for name, u in (("init(tstart)", self.u0), ("init(interior t)", self.um)):
            nu = self.norm(u)
            c = self.clone(u, f"clone({name})")
            if c is u:
                raise _RuleFailed(f"clone(u) returned u itself (u = {name}); it must return a "
                                  f"new, independent vector (e.g. u.copy())")
            if self.clone(u, f"clone({name})") is c:
                raise _RuleFailed(f"two calls of clone(u) returned the same object (u = {name}); "
                                  f"every call must return a new vector")
            nc = self.norm(c, "norm(clone(u))")
            if abs(nc - nu) > rtol * nu:
                raise _RuleFailed(f"norm(clone(u)) = {_fmt(nc)} differs from norm(u) = "
                                  f"{_fmt(nu)} (u = {name})")
            # Change the clone and see whether u moves with it.
            if nu > 0.0:
                self.sum(0.0, u, 2.0, c, "u", "clone(u)")
                how = "c <- 2*c"
            elif others:
                self.sum(1.0, others[0], 1.0, c, "w", "clone(u)")
                how = "c <- c + w"
            else:
                continue  # only zero vectors around: nothing to change
            now = self.norm(u)
            if abs(now - nu) > rtol * nu:
                raise _RuleFailed(
                    f"changing the clone c = clone(u) ({how}) changed u too: norm(u) went from "
                    f"{_fmt(nu)} to {_fmt(now)} (u = {name}); clone must copy the data, not "
                    f"share it (copy any list or array inside your vector object)")
            # And the other way round: change u, the clone must stay.
            c = self.clone(u, f"clone({name})")
            nc = self.norm(c, "norm(clone(u))")
            if nu > 0.0:
                self.sum(0.0, c, 2.0, u, "clone(u)", "u")
            else:
                self.sum(1.0, others[0], 1.0, u, "w", "u")
            now = self.norm(c, "norm(clone(u))")
            self.sum(1.0, c, 0.0, u, "clone(u)", "u")  # put u back
            if abs(now - nc) > rtol * nc:
                raise _RuleFailed(
                    f"changing u after c = clone(u) changed c too: norm(c) went from {_fmt(nc)} "
                    f"to {_fmt(now)} (u = {name}); clone must copy the data, not share it")

    def pick_probes(self) -> None:
        """Nonzero vectors for the remaining rules: init values and one stepped value."""
        self.x, self.y = self.u0, self.um
        candidates = [self.u0, self.um]
        try:  # a failing step is reported by "step determinism", not here
            v, _ = self.step(self.clone(self.u0), self.times[0], self.times[1], 0)
            candidates.append(v)
        except _RuleFailed:
            pass
        probes = []
        for v in candidates:
            try:
                if self.norm(v) > 0.0:
                    probes.append(v)
            except _RuleFailed:
                pass
        if not probes:
            self.note("init", "every vector tried (init at tstart and at an interior time, one "
                              "step from tstart) has norm 0, so the sum, norm and buffer rules "
                              "could only be checked on zero vectors")
            return
        self.x = probes[0]
        if len(probes) > 1:
            self.y = probes[1]
        else:
            try:
                self.y = self.clone(probes[0])
            except _RuleFailed:
                self.y = self.x

    def check_sum_linearity(self) -> None:
        x, y = self.x, self.y
        nx, ny = self.norm(x, "norm(x)"), self.norm(y, "norm(y)")
        for a, b in _SUM_CASES:
            z = self.clone(y, "clone(y)")
            self.sum(a, x, b, z, "x", "z")
            # Reference from separate scale and add calls: b*y, then + a*x.
            ref = self.clone(y, "clone(y)")
            self.sum(0.0, x, b, ref, "x", "ref")
            ax = self.clone(x, "clone(x)")
            self.sum(0.0, y, a, ax, "y", "ax")
            self.sum(1.0, ax, 1.0, ref, "ax", "ref")
            d = self.dist(ref, z, "ref", "z")
            scale = abs(a) * nx + abs(b) * ny
            if not _is_zero_check(d, scale, self.rtol):
                nz = self.norm(z, "norm(z)")
                raise _RuleFailed(
                    f"sum({a:g}, x, {b:g}, z) with z a clone of y gave norm(z) = {_fmt(nz)}, but "
                    f"a*x + b*y built from clones (b*y, a*x, then their sum) differs from it by "
                    f"{_fmt(d)} (norm(x) = {_fmt(nx)}, norm(y) = {_fmt(ny)}, rtol = "
                    f"{self.rtol:g}); sum must compute y <- a*x + b*y")
        # Doubling two ways: 2*y by scaling must equal y + y.
        z = self.clone(y, "clone(y)")
        self.sum(0.0, x, 2.0, z, "x", "z")
        ref = self.clone(y, "clone(y)")
        self.sum(1.0, y, 1.0, ref, "y", "ref")
        d = self.dist(ref, z, "ref", "z")
        if not _is_zero_check(d, 2.0 * ny, self.rtol):
            raise _RuleFailed(f"sum(0, x, 2, z) and sum(1, y, 1, z) with z a clone of y "
                              f"differ by {_fmt(d)} (norm(y) = {_fmt(ny)}); both must give 2*y")
        for v, nv, name in ((x, nx, "x"), (y, ny, "y")):
            now = self.norm(v, f"norm({name})")
            if abs(now - nv) > self.rtol * nv:
                raise _RuleFailed(f"sum changed its argument {name}, which it only reads: "
                                  f"norm({name}) went from {_fmt(nv)} to {_fmt(now)}")

    def check_sum_aliasing(self) -> None:
        x = self.x
        nx = self.norm(x, "norm(x)")
        for a, b in _SUM_CASES:
            v = self.clone(x, "clone(x)")
            self.sum(a, v, b, v, "v", "v")
            ref = self.clone(x, "clone(x)")
            self.sum(0.0, x, a + b, ref, "x", "ref")
            d = self.dist(ref, v, "ref", "v")
            if not _is_zero_check(d, (abs(a) + abs(b)) * nx, self.rtol):
                nv = self.norm(v, "norm(v)")
                ratio = f"{_fmt(nv / nx)}*norm(x)" if nx > 0.0 else _fmt(nv)
                raise _RuleFailed(
                    f"sum({a:g}, v, {b:g}, v) with x and y the same object v = clone(x) gave "
                    f"norm {ratio}; expected (a+b)*x, whose norm is |a+b|*norm(x) = "
                    f"{_fmt(abs(a + b) * nx)} (distance {_fmt(d)}, norm(x) = {_fmt(nx)}); sum "
                    f"must be correct when x is y (read x before overwriting y)")

    def check_norm_scaling(self) -> None:
        rtol = self.rtol
        probes = [self.x] if self.y is self.x else [self.x, self.y]
        for u in probes:
            nu = self.norm(u)
            for c in _SCALES:
                v = self.clone(u, "clone(u)")
                self.sum(0.0, u, c, v, "u", "v")
                nv = self.norm(v, f"norm({c:g}*u)")
                want = abs(c) * nu
                if abs(nv - want) > rtol * want:
                    raise _RuleFailed(
                        f"norm({c:g}*u) = {_fmt(nv)}, but |{c:g}|*norm(u) = {_fmt(want)} "
                        f"(norm(u) = {_fmt(nu)}); a norm must scale: norm(c*u) = |c|*norm(u) "
                        f"(e.g. take the square root of a sum of squares)")
            z = self.clone(u, "clone(u)")
            self.sum(-1.0, u, 1.0, z, "u", "z")
            nz = self.norm(z, "norm(u - u)")
            if not _is_zero_check(nz, nu, rtol):
                raise _RuleFailed(f"norm(u - u) = {_fmt(nz)}, expected 0 (norm(u) = {_fmt(nu)})")

    def check_buffers(self) -> None:
        rtol = self.rtol
        probes = [self.x] if self.y is self.x else [self.x, self.y]
        for u in probes:
            nu = self.norm(u)
            raw = self._packed_bytes(u)
            back = self.call("bufunpack", (bytearray(raw),), "bufunpack(bytearray(bufpack(u)))")
            if back is None:
                raise _RuleFailed("bufunpack(buf) returned None; it must return a new vector")
            if back is u:
                raise _RuleFailed("bufunpack(bufpack(u)) returned u itself; it must build a new "
                                  "vector from the bytes it is given")
            nb = self.norm(back, "norm(bufunpack(bufpack(u)))")
            try:
                d = self.dist(back, u, "unpacked", "u")
            except _RuleFailed as fail:
                raise _RuleFailed(f"comparing bufunpack(bufpack(u)) with u failed: {fail.message}",
                                  fail.cause) from fail.cause
            if not _is_zero_check(d, nu, rtol) or abs(nb - nu) > rtol * nu:
                raise _RuleFailed(
                    f"bufunpack(bufpack(u)) differs from u: norm(u) = {_fmt(nu)}, norm(unpacked) "
                    f"= {_fmt(nb)}, norm(unpacked - u) = {_fmt(d)} (rtol = {rtol:g}); the "
                    f"buffer must carry all of u's data")
        self._note_packed_view()

    def _packed_bytes(self, u: Any) -> bytes:
        packed = self.call("bufpack", (u,), "bufpack(u)")
        if packed is None:
            raise _RuleFailed("bufpack(u) returned None; it must return a bytes-like object")
        try:
            view = memoryview(packed)
        except TypeError:
            raise _RuleFailed(
                f"bufpack(u) returned a {type(packed).__name__}, which does not support the "
                f"buffer protocol; return bytes, a bytearray, a memoryview or a contiguous NumPy "
                f"array") from None
        try:
            return bytes(view.cast("B"))
        except (TypeError, ValueError) as exc:
            raise _RuleFailed(f"bufpack(u) returned a {type(packed).__name__} that cannot be read "
                              f"as plain bytes ({_exc_text(exc)}); return a contiguous "
                              f"buffer") from None

    def _note_packed_view(self) -> None:
        """Warn when bufpack's result is a live view of the vector rather than a copy."""
        u = self.clone(self.x, "clone(u)")
        if self.norm(u) == 0.0:
            return
        packed = self.call("bufpack", (u,), "bufpack(u)")
        try:
            before = bytes(memoryview(packed).cast("B"))
        except (TypeError, ValueError):
            return  # only a probe; the round trip above already read such buffers
        self.sum(0.0, self.x, 2.0, u, "x", "u")
        if bytes(memoryview(packed).cast("B")) != before:
            self.note("buffer round trip",
                      "bufpack(u) returns a view of u's memory (its bytes change when u "
                      "changes); braidpy may send it with a non-blocking MPI send while u is "
                      "updated, so return a copy")

    def check_step_determinism(self) -> None:
        rtol = self.rtol
        starts = [(0, self.u0)]
        if len(self.times) > 2:
            starts.append((self.imid, self.x))  # x: nonzero when any vector tried is
        for i, base in starts:
            t0, t1 = self.times[i], self.times[i + 1]
            keep = self.clone(base, "clone(u)")
            nbase = self.norm(base)
            a, b = self.clone(base, "clone(u)"), self.clone(base, "clone(u)")
            ua, how_a = self.step(a, t0, t1, i)
            ub, _ = self.step(b, t0, t1, i)
            if how_a == "new" and ua is ub:
                raise _RuleFailed(f"step(u, {_fmt(t0)}, {_fmt(t1)}, status) returned the same "
                                  f"object for two different vectors u; a returned state must be "
                                  f"a new vector")
            try:
                na = self.norm(ua, "norm(step result)")
                d = self.dist(ua, ub, "first result", "second result")
            except _RuleFailed as fail:
                raise _RuleFailed(f"comparing two results of step(u, {_fmt(t0)}, {_fmt(t1)}, "
                                  f"status) failed: {fail.message}", fail.cause) from fail.cause
            if not _is_zero_check(d, na, rtol):
                raise _RuleFailed(
                    f"two clones of the same vector stepped from t0 = {_fmt(t0)} to t1 = "
                    f"{_fmt(t1)} differ: norm(difference) = {_fmt(d)}, norm(result) = "
                    f"{_fmt(na)} (rtol = {rtol:g}); step must be a deterministic function of "
                    f"u, t0 and t1 (MGRIT steps the same interval many times)")
            moved = self.dist(keep, base, "its clone", "u")
            if not _is_zero_check(moved, nbase, rtol):
                raise _RuleFailed(
                    f"stepping clones of u from t0 = {_fmt(t0)} changed u itself (by "
                    f"{_fmt(moved)}); step must only change the vector it is given")
            same = self.dist(keep, ua, "u", "step result")
            self.steps.append(_StepRecord(t0, t1, how_a, same == 0.0, na))

    def check_step_in_place(self) -> None:
        noted_new = False
        for rec in self.steps:
            call = f"step(u, {_fmt(rec.t0)}, {_fmt(rec.t1)}, status)"
            if rec.returned == "new" and not noted_new:
                noted_new = True
                self.note("step in place",
                          f"{call} returns a new vector; braidpy uses the returned vector as "
                          f"the new state (fine for immutable vectors; in-place updates save "
                          f"an allocation per step)")
            elif rec.unchanged and rec.norm > 0.0:  # zero is a fixed point of linear steps
                self.note("step in place",
                          f"{call} returned {rec.returned} and left u unchanged (norm(u) = "
                          f"{_fmt(rec.norm)}); fine if u is a fixed point of the step, but if "
                          f"step computes a new value it must write it into u (u[:] = ...) "
                          f"or return it: rebinding the name u inside step is lost")

    def check_access(self) -> None:
        u = self.clone(self.u0, "clone(u)")
        keep = self.clone(self.u0, "clone(u)")
        nu = self.norm(u)
        t = self.times[0]
        status = _CheckStatus(t=t, t0=t, t1=t, done=True, phase="final")
        self.call("access", (u, status), "access(u, status)")
        d = self.dist(keep, u, "its clone", "u")
        if not _is_zero_check(d, nu, self.rtol):
            raise _RuleFailed(f"access(u, status) changed u (by {_fmt(d)}, norm(u) = {_fmt(nu)}); "
                              f"access must only observe the solution")


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
        report = _Checker(app, tstart, tstop, ntime, rtol).run()
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
