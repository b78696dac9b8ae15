"""One integrator per MGRIT level: a fine propagator and cheaper coarse ones."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._app import App

__all__ = ["PerLevel"]

_VECTOR_OPS = ("clone", "sum", "norm", "access", "bufpack", "bufunpack")


class PerLevel(App):
    """An App that steps level l with ``apps[l]`` (the last app for every coarser level).

    MGRIT needs a propagator per level; by default it is the same one with the level's
    larger step. A cheaper or more stable method on the coarse levels (backward Euler
    under a fine RK4, say) is a common choice: MGRIT still converges to the sequential
    solution of the *fine* propagator, ``apps[0]``, only the convergence rate depends on
    how well the coarse ones approximate it.

    Conventions: XBraid passes the level to the user's step (``braid_StepStatusGetLevel``)
    and leaves the choice to it; this is what ``PerLevel`` does with ``status.level``
    (0 = the fine grid). PyMGRIT instead takes a list of problems, one per level
    (``problem=[fine, coarse, ...]``), each with its own time grid; here the time grids
    come from ``cfactor`` as usual, and only the step changes with the level.

    ``init``, the vector operations and ``access`` are ``apps[0]``'s (App's defaults
    unless it overrides them); every app must use
    states of the same shape. ``step_stacked`` calls the level's ``step_stacked`` if it
    has one, else its ``step`` row by row.

    Parameters
    ----------
    apps : sequence of App
        ``apps[l]`` steps level l; levels beyond the list use the last one.

    Examples
    --------
    >>> import numpy as np, braidpy
    >>> from braidpy.integrators import ExplicitRK, BackwardEuler, PerLevel
    >>> fine = ExplicitRK(lambda t, u: -u, np.ones(1), "rk4")
    >>> app = PerLevel([fine, BackwardEuler(np.array([[-1.0]]), np.ones(1))])
    >>> r = braidpy.solve(app, 0.0, 1.0, 64, cfactor=4, abs_tol=1e-12)
    >>> bool(abs(r.final[0] - np.exp(-1.0)) < 1e-9)
    True
    """

    def __init__(self, apps: Sequence[App]):
        apps = list(apps)
        if not apps:
            raise ValueError("PerLevel needs at least one app, got an empty list")
        for i, app in enumerate(apps):
            if not callable(getattr(app, "step", None)):
                raise TypeError(f"PerLevel: apps[{i}] = {app!r} has no step method")
        if not callable(getattr(apps[0], "init", None)):
            raise TypeError(f"PerLevel: apps[0] = {apps[0]!r} has no init method")
        self.apps = apps
        # apps[0]'s own vector operations, where it has them; App's defaults (and the
        # core's fast paths for them) otherwise.
        for name in _VECTOR_OPS:
            if getattr(type(apps[0]), name, None) is not getattr(App, name):
                setattr(self, name, getattr(apps[0], name))

    def app_for(self, level: int) -> App:
        """The app that steps ``level``."""
        return self.apps[min(int(level), len(self.apps) - 1)]

    def _level_app(self, status: Any) -> App:
        return self.apps[0] if status is None else self.app_for(status.level)

    def init(self, t: float) -> Any:
        for app in self.apps:  # the grid braidpy set on this app, for every level's app
            app.tstart, app.tstop, app.ntime = self.tstart, self.tstop, self.ntime
        return self.apps[0].init(t)

    def step(self, u: Any, t0: float, t1: float, status: Any) -> Any:
        return self._level_app(status).step(u, t0, t1, status)

    def step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                     status: Any) -> Any:
        app = self._level_app(status)
        kernel = getattr(app, "step_stacked", None)
        if kernel is not None:
            return kernel(U, t0s, t1s, status)
        for k in range(len(U)):
            r = app.step(U[k], float(t0s[k]), float(t1s[k]), status)
            if r is not None and r is not U[k]:
                U[k] = r
        return None
