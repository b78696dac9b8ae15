"""The rules of check_app, one function each, in the order check_app runs them.

Each takes the :class:`_Session` of the check and raises :class:`_RuleFailed` (with the
values seen) when its rule does not hold; notes that are not failures go to
``s.note``. Comparisons go through the app's own ``sum`` and ``norm``.
"""

from __future__ import annotations

from typing import Any

from ._session import (_CheckStatus, _exc_text, _fmt, _is_zero_check, _RuleFailed, _Session,
                       _StepRecord)

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


def check_init(s: _Session) -> None:
    t0, tmid, tend = s.times[0], s.tmid, s.times[-1]
    s.u0 = s.init(t0)
    s.um = s.init(tmid)
    s.ue = s.init(tend)
    s.w0 = s.init(t0)
    calls = [(f"init({_fmt(t0)})", s.u0), (f"init({_fmt(tmid)})", s.um),
             (f"init({_fmt(tend)})", s.ue), (f"a second init({_fmt(t0)})", s.w0)]
    for i, (name_i, u_i) in enumerate(calls):
        for name_j, u_j in calls[i + 1:]:
            if u_i is u_j:
                raise _RuleFailed(
                    f"{name_i} and {name_j} returned the same object; braidpy stores and "
                    f"updates each vector in place, so every init call must return a new "
                    f"vector")


def check_norm_basics(s: _Session) -> None:
    for name, u in (("init(tstart)", s.u0), ("init(interior t)", s.um)):
        first = s.norm(u, f"norm({name})")
        second = s.norm(u, f"norm({name})")
        if abs(first - second) > s.rtol * first:
            raise _RuleFailed(
                f"norm({name}) gave {first!r} and then {second!r} for the same vector; "
                f"norm must be deterministic and must not modify its argument")


def check_sum_identity(s: _Session) -> None:
    rtol = s.rtol
    x, y = s.u0, s.w0  # y: the second init(tstart), ours to modify
    nx, ny = s.norm(x, "norm(x)"), s.norm(y, "norm(y)")
    s.sum(0.0, x, 1.0, y)
    after = s.norm(y, "norm(y)")
    if abs(after - ny) > rtol * ny:
        raise _RuleFailed(
            f"sum(0, x, 1, y) changed norm(y) from {_fmt(ny)} to {_fmt(after)} "
            f"(norm(x) = {_fmt(nx)}); with a = 0 and b = 1, y must stay as it is")
    _x_unchanged(s, x, nx, "sum(0, x, 1, y)")
    # sum(1, x, 0, y) copies x into y: once into a vector that starts at init(tstop),
    # once from init(interior t) into a vector that starts at init(tstart).
    for x, y in ((s.u0, s.ue), (s.um, s.w0)):
        nx, before = s.norm(x, "norm(x)"), s.norm(y, "norm(y)")
        s.sum(1.0, x, 0.0, y)
        after = s.norm(y, "norm(y)")
        if abs(after - nx) > rtol * nx:
            raise _RuleFailed(
                f"after sum(1, x, 0, y), y should equal x, but norm(y) = {_fmt(after)} and "
                f"norm(x) = {_fmt(nx)} (norm(y) before the call = {_fmt(before)})")
        s.sum(-1.0, x, 1.0, y)
        diff = s.norm(y, "norm(y - x)")
        if not _is_zero_check(diff, nx, rtol):
            raise _RuleFailed(
                f"after sum(1, x, 0, y), y should equal x, but then sum(-1, x, 1, y) left "
                f"norm(y - x) = {_fmt(diff)} (norm(x) = {_fmt(nx)}, norm(y) before the "
                f"first call = {_fmt(before)}); either sum is wrong or norm of a zero "
                f"vector is not 0")
        _x_unchanged(s, x, nx, "sum(1, x, 0, y)")


def _x_unchanged(s: _Session, x: Any, nx: float, call: str) -> None:
    now = s.norm(x, "norm(x)")
    if abs(now - nx) > s.rtol * nx:
        raise _RuleFailed(f"{call} changed x: norm(x) went from {_fmt(nx)} to {_fmt(now)}; "
                          f"sum may only write to y")


def check_clone(s: _Session) -> None:
    rtol = s.rtol
    others = [v for v in (s.u0, s.um, s.ue) if s.norm(v) > 0.0]
    for name, u in (("init(tstart)", s.u0), ("init(interior t)", s.um)):
        nu = s.norm(u)
        c = s.clone(u, f"clone({name})")
        if c is u:
            raise _RuleFailed(f"clone(u) returned u itself (u = {name}); it must return a "
                              f"new, independent vector (e.g. u.copy())")
        if s.clone(u, f"clone({name})") is c:
            raise _RuleFailed(f"two calls of clone(u) returned the same object (u = {name}); "
                              f"every call must return a new vector")
        nc = s.norm(c, "norm(clone(u))")
        if abs(nc - nu) > rtol * nu:
            raise _RuleFailed(f"norm(clone(u)) = {_fmt(nc)} differs from norm(u) = "
                              f"{_fmt(nu)} (u = {name})")
        # Change the clone and see whether u moves with it.
        if nu > 0.0:
            s.sum(0.0, u, 2.0, c, "u", "clone(u)")
            how = "c <- 2*c"
        elif others:
            s.sum(1.0, others[0], 1.0, c, "w", "clone(u)")
            how = "c <- c + w"
        else:
            continue  # only zero vectors around: nothing to change
        now = s.norm(u)
        if abs(now - nu) > rtol * nu:
            raise _RuleFailed(
                f"changing the clone c = clone(u) ({how}) changed u too: norm(u) went from "
                f"{_fmt(nu)} to {_fmt(now)} (u = {name}); clone must copy the data, not "
                f"share it (copy any list or array inside your vector object)")
        # And the other way round: change u, the clone must stay.
        c = s.clone(u, f"clone({name})")
        nc = s.norm(c, "norm(clone(u))")
        if nu > 0.0:
            s.sum(0.0, c, 2.0, u, "clone(u)", "u")
        else:
            s.sum(1.0, others[0], 1.0, u, "w", "u")
        now = s.norm(c, "norm(clone(u))")
        s.sum(1.0, c, 0.0, u, "clone(u)", "u")  # put u back
        if abs(now - nc) > rtol * nc:
            raise _RuleFailed(
                f"changing u after c = clone(u) changed c too: norm(c) went from {_fmt(nc)} "
                f"to {_fmt(now)} (u = {name}); clone must copy the data, not share it")


def pick_probes(s: _Session) -> None:
    """Nonzero vectors for the remaining rules: init values and one stepped value."""
    s.x, s.y = s.u0, s.um
    candidates = [s.u0, s.um]
    try:  # a failing step is reported by "step determinism", not here
        v, _ = s.step(s.clone(s.u0), s.times[0], s.times[1], 0)
        candidates.append(v)
    except _RuleFailed:
        pass
    probes = []
    for v in candidates:
        try:
            if s.norm(v) > 0.0:
                probes.append(v)
        except _RuleFailed:
            pass
    if not probes:
        s.note("init", "every vector tried (init at tstart and at an interior time, one "
                       "step from tstart) has norm 0, so the sum, norm and buffer rules "
                       "could only be checked on zero vectors")
        return
    s.x = probes[0]
    if len(probes) > 1:
        s.y = probes[1]
    else:
        try:
            s.y = s.clone(probes[0])
        except _RuleFailed:
            s.y = s.x


def check_sum_linearity(s: _Session) -> None:
    x, y = s.x, s.y
    nx, ny = s.norm(x, "norm(x)"), s.norm(y, "norm(y)")
    for a, b in _SUM_CASES:
        z = s.clone(y, "clone(y)")
        s.sum(a, x, b, z, "x", "z")
        # Reference from separate scale and add calls: b*y, then + a*x.
        ref = s.clone(y, "clone(y)")
        s.sum(0.0, x, b, ref, "x", "ref")
        ax = s.clone(x, "clone(x)")
        s.sum(0.0, y, a, ax, "y", "ax")
        s.sum(1.0, ax, 1.0, ref, "ax", "ref")
        d = s.dist(ref, z, "ref", "z")
        scale = abs(a) * nx + abs(b) * ny
        if not _is_zero_check(d, scale, s.rtol):
            nz = s.norm(z, "norm(z)")
            raise _RuleFailed(
                f"sum({a:g}, x, {b:g}, z) with z a clone of y gave norm(z) = {_fmt(nz)}, but "
                f"a*x + b*y built from clones (b*y, a*x, then their sum) differs from it by "
                f"{_fmt(d)} (norm(x) = {_fmt(nx)}, norm(y) = {_fmt(ny)}, rtol = "
                f"{s.rtol:g}); sum must compute y <- a*x + b*y")
    # Doubling two ways: 2*y by scaling must equal y + y.
    z = s.clone(y, "clone(y)")
    s.sum(0.0, x, 2.0, z, "x", "z")
    ref = s.clone(y, "clone(y)")
    s.sum(1.0, y, 1.0, ref, "y", "ref")
    d = s.dist(ref, z, "ref", "z")
    if not _is_zero_check(d, 2.0 * ny, s.rtol):
        raise _RuleFailed(f"sum(0, x, 2, z) and sum(1, y, 1, z) with z a clone of y "
                          f"differ by {_fmt(d)} (norm(y) = {_fmt(ny)}); both must give 2*y")
    for v, nv, name in ((x, nx, "x"), (y, ny, "y")):
        now = s.norm(v, f"norm({name})")
        if abs(now - nv) > s.rtol * nv:
            raise _RuleFailed(f"sum changed its argument {name}, which it only reads: "
                              f"norm({name}) went from {_fmt(nv)} to {_fmt(now)}")


def check_sum_aliasing(s: _Session) -> None:
    x = s.x
    nx = s.norm(x, "norm(x)")
    for a, b in _SUM_CASES:
        v = s.clone(x, "clone(x)")
        s.sum(a, v, b, v, "v", "v")
        ref = s.clone(x, "clone(x)")
        s.sum(0.0, x, a + b, ref, "x", "ref")
        d = s.dist(ref, v, "ref", "v")
        if not _is_zero_check(d, (abs(a) + abs(b)) * nx, s.rtol):
            nv = s.norm(v, "norm(v)")
            ratio = f"{_fmt(nv / nx)}*norm(x)" if nx > 0.0 else _fmt(nv)
            raise _RuleFailed(
                f"sum({a:g}, v, {b:g}, v) with x and y the same object v = clone(x) gave "
                f"norm {ratio}; expected (a+b)*x, whose norm is |a+b|*norm(x) = "
                f"{_fmt(abs(a + b) * nx)} (distance {_fmt(d)}, norm(x) = {_fmt(nx)}); sum "
                f"must be correct when x is y (read x before overwriting y)")


def check_norm_scaling(s: _Session) -> None:
    rtol = s.rtol
    probes = [s.x] if s.y is s.x else [s.x, s.y]
    for u in probes:
        nu = s.norm(u)
        for c in _SCALES:
            v = s.clone(u, "clone(u)")
            s.sum(0.0, u, c, v, "u", "v")
            nv = s.norm(v, f"norm({c:g}*u)")
            want = abs(c) * nu
            if abs(nv - want) > rtol * want:
                raise _RuleFailed(
                    f"norm({c:g}*u) = {_fmt(nv)}, but |{c:g}|*norm(u) = {_fmt(want)} "
                    f"(norm(u) = {_fmt(nu)}); a norm must scale: norm(c*u) = |c|*norm(u) "
                    f"(e.g. take the square root of a sum of squares)")
        z = s.clone(u, "clone(u)")
        s.sum(-1.0, u, 1.0, z, "u", "z")
        nz = s.norm(z, "norm(u - u)")
        if not _is_zero_check(nz, nu, rtol):
            raise _RuleFailed(f"norm(u - u) = {_fmt(nz)}, expected 0 (norm(u) = {_fmt(nu)})")


def check_buffers(s: _Session) -> None:
    rtol = s.rtol
    probes = [s.x] if s.y is s.x else [s.x, s.y]
    for u in probes:
        nu = s.norm(u)
        raw = _packed_bytes(s, u)
        back = s.call("bufunpack", (bytearray(raw),), "bufunpack(bytearray(bufpack(u)))")
        if back is None:
            raise _RuleFailed("bufunpack(buf) returned None; it must return a new vector")
        if back is u:
            raise _RuleFailed("bufunpack(bufpack(u)) returned u itself; it must build a new "
                              "vector from the bytes it is given")
        nb = s.norm(back, "norm(bufunpack(bufpack(u)))")
        try:
            d = s.dist(back, u, "unpacked", "u")
        except _RuleFailed as fail:
            raise _RuleFailed(f"comparing bufunpack(bufpack(u)) with u failed: {fail.message}",
                              fail.cause) from fail.cause
        if not _is_zero_check(d, nu, rtol) or abs(nb - nu) > rtol * nu:
            raise _RuleFailed(
                f"bufunpack(bufpack(u)) differs from u: norm(u) = {_fmt(nu)}, norm(unpacked) "
                f"= {_fmt(nb)}, norm(unpacked - u) = {_fmt(d)} (rtol = {rtol:g}); the "
                f"buffer must carry all of u's data")
    _note_packed_view(s)


def _packed_bytes(s: _Session, u: Any) -> bytes:
    packed = s.call("bufpack", (u,), "bufpack(u)")
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


def _note_packed_view(s: _Session) -> None:
    """Warn when bufpack's result is a live view of the vector rather than a copy."""
    u = s.clone(s.x, "clone(u)")
    if s.norm(u) == 0.0:
        return
    packed = s.call("bufpack", (u,), "bufpack(u)")
    try:
        before = bytes(memoryview(packed).cast("B"))
    except (TypeError, ValueError):
        return  # only a probe; the round trip above already read such buffers
    s.sum(0.0, s.x, 2.0, u, "x", "u")
    if bytes(memoryview(packed).cast("B")) != before:
        s.note("buffer round trip",
               "bufpack(u) returns a view of u's memory (its bytes change when u "
               "changes); braidpy may send it with a non-blocking MPI send while u is "
               "updated, so return a copy")


def check_step_determinism(s: _Session) -> None:
    rtol = s.rtol
    starts = [(0, s.u0)]
    if len(s.times) > 2:
        starts.append((s.imid, s.x))  # x: nonzero when any vector tried is
    for i, base in starts:
        t0, t1 = s.times[i], s.times[i + 1]
        keep = s.clone(base, "clone(u)")
        nbase = s.norm(base)
        a, b = s.clone(base, "clone(u)"), s.clone(base, "clone(u)")
        ua, how_a = s.step(a, t0, t1, i)
        ub, _ = s.step(b, t0, t1, i)
        if how_a == "new" and ua is ub:
            raise _RuleFailed(f"step(u, {_fmt(t0)}, {_fmt(t1)}, status) returned the same "
                              f"object for two different vectors u; a returned state must be "
                              f"a new vector")
        try:
            na = s.norm(ua, "norm(step result)")
            d = s.dist(ua, ub, "first result", "second result")
        except _RuleFailed as fail:
            raise _RuleFailed(f"comparing two results of step(u, {_fmt(t0)}, {_fmt(t1)}, "
                              f"status) failed: {fail.message}", fail.cause) from fail.cause
        if not _is_zero_check(d, na, rtol):
            raise _RuleFailed(
                f"two clones of the same vector stepped from t0 = {_fmt(t0)} to t1 = "
                f"{_fmt(t1)} differ: norm(difference) = {_fmt(d)}, norm(result) = "
                f"{_fmt(na)} (rtol = {rtol:g}); step must be a deterministic function of "
                f"u, t0 and t1 (MGRIT steps the same interval many times)")
        moved = s.dist(keep, base, "its clone", "u")
        if not _is_zero_check(moved, nbase, rtol):
            raise _RuleFailed(
                f"stepping clones of u from t0 = {_fmt(t0)} changed u itself (by "
                f"{_fmt(moved)}); step must only change the vector it is given")
        same = s.dist(keep, ua, "u", "step result")
        s.steps.append(_StepRecord(t0, t1, how_a, same == 0.0, na))


def check_step_in_place(s: _Session) -> None:
    noted_new = False
    for rec in s.steps:
        call = f"step(u, {_fmt(rec.t0)}, {_fmt(rec.t1)}, status)"
        if rec.returned == "new" and not noted_new:
            noted_new = True
            s.note("step in place",
                   f"{call} returns a new vector; braidpy uses the returned vector as "
                   f"the new state (fine for immutable vectors; in-place updates save "
                   f"an allocation per step)")
        elif rec.unchanged and rec.norm > 0.0:  # zero is a fixed point of linear steps
            s.note("step in place",
                   f"{call} returned {rec.returned} and left u unchanged (norm(u) = "
                   f"{_fmt(rec.norm)}); fine if u is a fixed point of the step, but if "
                   f"step computes a new value it must write it into u (u[:] = ...) "
                   f"or return it: rebinding the name u inside step is lost")


def check_access(s: _Session) -> None:
    u = s.clone(s.u0, "clone(u)")
    keep = s.clone(s.u0, "clone(u)")
    nu = s.norm(u)
    t = s.times[0]
    status = _CheckStatus(t=t, t0=t, t1=t, done=True, phase="final")
    s.call("access", (u, status), "access(u, status)")
    d = s.dist(keep, u, "its clone", "u")
    if not _is_zero_check(d, nu, s.rtol):
        raise _RuleFailed(f"access(u, status) changed u (by {_fmt(d)}, norm(u) = {_fmt(nu)}); "
                          f"access must only observe the solution")


def check_residual(s: _Session) -> None:
    """XBraid's braid_TestResidual: a step that solves A(u_new, u) = fstop must give
    residual(u_new, u) = fstop, for fstop None (zero) and fstop = 2u."""
    t0, t1 = s.times[0], s.times[1]
    status = _CheckStatus(t=t0, t0=t0, t1=t1, phase="residual")
    base = s.um if s.norm(s.um) > 0.0 else s.u0
    for label in ("None", "2u"):
        u = s.clone(base, "clone(u)")
        f = None
        if label == "2u":
            f = s.clone(base, "clone(u)")
            s.sum(1.0, base, 1.0, f, "u", "fstop")
        shown = f"step(u, {_fmt(t0)}, {_fmt(t1)}, status, fstop={label}, ustop=u)"
        guess = s.clone(base, "clone(u)")
        try:
            r = s.app.step(u, t0, t1, status, fstop=f, ustop=guess)
        except Exception as exc:  # a user callback failed: report it
            raise _RuleFailed(f"{shown} raised {_exc_text(exc)}", exc) from exc
        unew = u if r is None else r
        prev = s.clone(base, "clone(u)")
        shown_r = f"residual(step result, u, status) after {shown}"
        out = s.call("residual", (unew, prev, status), shown_r)
        res = prev if out is None else out
        if f is not None:
            s.sum(-1.0, f, 1.0, res, "fstop", "residual")
        err = s.norm(res, "norm(residual - fstop)")
        scale = max(s.norm(unew), s.norm(base))
        if not _is_zero_check(err, scale, s.rtol):
            raise _RuleFailed(
                f"{shown_r}: norm(residual - fstop) = {_fmt(err)} with norm(u) = "
                f"{_fmt(scale)} (rtol = {s.rtol:g}); residual(ustop, r) must be zero (fstop) "
                f"when ustop is step's result from r: A(step(u, fstop), u) = fstop, XBraid's "
                f"sign convention (A(u1, u0) = (I - dt L) u1 - u0 for backward Euler)")
