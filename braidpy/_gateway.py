"""Where a user's app meets the compiled core, on the Python side.

The compiled gateway (``csrc/bindings/py_ops.cpp``) looks the callbacks up once and
calls, counts and times them; this module decides, before that, what the app offers:
which callbacks exist (with errors that name the missing one), whether it has a
batched step, and the grid facts braidpy sets on it.
"""

from __future__ import annotations

import inspect
from typing import Any, Tuple

from ._app import App

__all__ = ["check_app_callbacks", "check_residual", "coarsens_in_space", "has_residual",
           "has_step_batch", "packed_bytes", "tell_app_the_grid"]


def has_step_batch(app: Any) -> bool:
    """True when app provides a batched step: its own step_batch, or (for
    braidpy.App subclasses) a step_stacked kernel used by App's default."""
    if "step_batch" in getattr(app, "__dict__", {}):
        return callable(app.__dict__["step_batch"])
    if isinstance(app, App):
        return type(app).step_batch is not App.step_batch or callable(
            getattr(app, "step_stacked", None))
    return callable(getattr(app, "step_batch", None))


def has_residual(app: Any) -> bool:
    """True when app defines a user residual ``residual(ustop, r, status)``."""
    return callable(getattr(app, "residual", None))


def _keywords(fn: Any) -> Tuple[bool, bool]:
    """Whether fn accepts keyword arguments fstop and ustop (True, True when its
    signature cannot be read, or it takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True, True
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return True, True
    names = {p.name for p in params
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return "fstop" in names, "ustop" in names


def check_residual(app: Any, options: Any) -> Tuple[bool, bool]:
    """(residual, step takes ustop) for the core; TypeError/ValueError naming what an
    app with a user residual (or options.full_rnorm) lacks or combines wrongly."""
    residual = has_residual(app)
    if options.full_rnorm and not (residual or callable(getattr(app, "full_residual", None))):
        raise TypeError(f"full_rnorm=True needs a residual: {type(app).__name__} defines "
                        f"neither residual(ustop, r, status) nor full_residual(ustop, r, status)")
    if not residual:
        return False, False
    fstop, ustop = _keywords(app.step)
    if not fstop:
        raise TypeError(
            f"{type(app).__name__} defines residual(), so its step must take the FAS "
            f"right-hand side: step(u, t0, t1, status, fstop=None, ustop=None) (fstop: "
            f"None or a vector; solve A(u_new, u) = fstop)")
    if options.batch and has_step_batch(app):
        # Batched only through step_stacked taking the keywords step takes (stacked).
        stacked = getattr(app, "step_stacked", None)
        own_batch = "step_batch" in getattr(app, "__dict__", {}) or (
            isinstance(app, App) and type(app).step_batch is not App.step_batch)
        takes = _keywords(stacked) if callable(stacked) else (False, False)
        if own_batch or not takes[0] or (ustop and not takes[1]):
            wanted = "fstop=None, ustop=None" if ustop else "fstop=None"
            raise ValueError(
                f"{type(app).__name__} defines residual() and a batched step that takes no "
                f"fstop: give it step_stacked(U, t0s, t1s, status, {wanted}) (fstop, ustop: "
                f"None or stacked like U) and no step_batch, or pass batch=False")
    return True, ustop


def check_app_callbacks(app: Any) -> None:
    """TypeError naming the first callback the core needs and ``app`` lacks."""
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
    has = {name: callable(getattr(app, name, None)) for name in ("coarsen", "refine")}
    if has["coarsen"] != has["refine"]:
        given, missing = ("coarsen", "refine") if has["coarsen"] else ("refine", "coarsen")
        raise TypeError(f"{type(app).__name__} defines {given}() but not {missing}(): "
                        "spatial coarsening needs both (or neither)")


def coarsens_in_space(app: Any) -> bool:
    """True when ``app`` coarsens in space (it defines coarsen() and refine())."""
    return callable(getattr(app, "coarsen", None)) and callable(getattr(app, "refine", None))


def tell_app_the_grid(app: Any, tstart: float, tstop: float, ntime: int) -> None:
    """Set ``tstart``, ``tstop`` and ``ntime`` on the app (skipped where the app's
    attributes are read-only)."""
    for name, value in (("tstart", float(tstart)), ("tstop", float(tstop)),
                        ("ntime", int(ntime))):
        try:
            setattr(app, name, value)
        except AttributeError:
            pass


def packed_bytes(app: Any, u: Any) -> bytes:
    """``app.bufpack(u)`` as bytes, or the TypeError the compiled gateway raises for a
    result that is not bytes-like (csrc/bindings/py_ops.cpp, ``PyOps::bufpack``)."""
    buf = app.bufpack(u)
    try:
        return bytes(memoryview(buf).cast("B"))
    except TypeError:
        raise TypeError(f"bufpack must return a bytes-like object (bytes, bytearray or a "
                        f"contiguous array), got {type(buf).__name__}") from None
